/*
 * The hybrid trainer's workload (examples/ctr/dlrm.h): the Criteo-shaped
 * click log, the table layout of its 26 fields, and the DLRM-style dense
 * part's step against finite differences of its own loss.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctr.h"
#include "dlrm.h"
#include "unit.h"

START_TEST(data_is_deterministic_and_calibrated)
{
    dlrm_teacher_t t1, t2;
    dlrm_teacher_init(&t1, 7, 0.04);
    dlrm_teacher_init(&t2, 7, 0.04);
    ck_assert_float_eq(t1.bias, t2.bias);
    double clicks = 0;
    uint64_t head = 0, n = 20000;
    for (uint64_t i = 0; i < n; i++) {
        dlrm_example_t a, b;
        dlrm_example(&t1, i, &a);
        dlrm_example(&t2, i, &b);
        ck_assert_mem_eq(&a, &b, sizeof(a));
        for (int f = 0; f < DLRM_FIELDS; f++)
            ck_assert_uint_lt(a.cat[f], dlrm_vocab(f));
        head += a.cat[2] < 100; /* field 2 has ~1M values */
        clicks += a.label;
    }
    /* the calibrated mean CTR, within sampling error of 20000 draws */
    ck_assert_double_lt(fabs(clicks / (double)n - 0.04), 0.008);
    /* long tail: the first 100 of ~1M values take about a third of the draws
     * (log-uniform: ln 101 / ln 1e6), far above their uniform share */
    ck_assert_uint_gt(head, n / 5);
    ck_assert_uint_lt(head, n / 2);
    /* another seed, another log */
    dlrm_teacher_t t3;
    dlrm_teacher_init(&t3, 8, 0.04);
    dlrm_example_t a, c;
    dlrm_example(&t1, 5, &a);
    dlrm_example(&t3, 5, &c);
    ck_assert_int_ne(memcmp(a.dense, c.dense, sizeof(a.dense)), 0);
}
END_TEST

START_TEST(tables_fill_the_rows)
{
    dlrm_tables_t tb;
    ck_assert_int_eq(dlrm_tables_init(&tb, DLRM_FIELDS - 1), -1);
    uint64_t all = 0;
    for (int f = 0; f < DLRM_FIELDS; f++)
        all += dlrm_vocab(f);
    /* more rows than values: every value its own row */
    ck_assert_int_eq(dlrm_tables_init(&tb, all + 1000), 0);
    ck_assert_uint_eq(tb.rows, all);
    for (int f = 0; f < DLRM_FIELDS; f++)
        ck_assert_uint_eq(tb.size[f], dlrm_vocab(f));
    /* fewer: small fields keep theirs, the big ones share a cap, rows <= asked */
    const uint64_t asked = 100000;
    ck_assert_int_eq(dlrm_tables_init(&tb, asked), 0);
    ck_assert_uint_le(tb.rows, asked);
    ck_assert_uint_gt(tb.rows, asked - DLRM_FIELDS);
    ck_assert_uint_eq(tb.size[5], dlrm_vocab(5));
    ck_assert_uint_lt(tb.size[2], dlrm_vocab(2));
    ck_assert_uint_eq(tb.size[2], tb.size[11]);
    for (int f = 0; f < DLRM_FIELDS; f++) {
        ck_assert_uint_eq(tb.off[f], f == 0 ? 0 : tb.off[f - 1] + tb.size[f - 1]);
        for (uint32_t v = 0; v < 5000 && v < dlrm_vocab(f); v += 7) {
            uint64_t r = dlrm_row(&tb, f, v);
            ck_assert_uint_ge(r, tb.off[f]);
            ck_assert_uint_lt(r, tb.off[f] + tb.size[f]);
        }
        ck_assert_uint_lt(dlrm_row(&tb, f, dlrm_vocab(f) - 1), tb.off[f] + tb.size[f]);
    }
    /* the head values of a capped field keep their own rows */
    ck_assert_uint_eq(dlrm_row(&tb, 2, 3), tb.off[2] + 3);
}
END_TEST

static double loss(const dlrm_layout_t *l, const float *p, const dlrm_example_t *ex,
                   const float *rows)
{
    return ctr_logloss(dlrm_predict(l, p, ex, rows), ex->label);
}

/* a small random example and rows: dim 8, 6 + 5 hidden units */
static void setup(dlrm_layout_t *l, float **p, dlrm_example_t *ex, float *rows, int label)
{
    ck_assert_int_eq(dlrm_layout_init(l, 8, 6, 5), 0);
    *p = malloc(l->count * sizeof(float));
    ck_assert_ptr_nonnull(*p);
    dlrm_dense_init(l, *p, 3, 0.3);
    /* a larger last layer than the init's, so every part has gradient */
    for (int j = 0; j < l->th; j++)
        (*p)[l->tw2 + (size_t)j] = j % 2 ? 0.8f : -0.6f;
    uint64_t s = 99;
    for (int i = 0; i < DLRM_DENSE; i++) {
        s = mix(s);
        ex->dense[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2 - 1);
    }
    for (int i = 0; i < DLRM_FIELDS * 8; i++) {
        s = mix(s);
        rows[i] = (float)((double)(s >> 40) / (double)(1ull << 24) - 0.5) * 0.6f;
    }
    ex->label = (float)label;
}

/* central difference of the loss in x[i] */
static double fd_at(const dlrm_layout_t *l, float *p, const dlrm_example_t *ex, float *rows,
                    float *x, size_t i)
{
    const double h = 1e-3;
    float keep = x[i];
    x[i] = keep + (float)h;
    double up = loss(l, p, ex, rows);
    x[i] = keep - (float)h;
    double down = loss(l, p, ex, rows);
    x[i] = keep;
    return (up - down) / (2 * h);
}

/* every block of parameters on its own, so that a wrong bias gradient
 * cannot hide behind the big top layer */
START_TEST(step_matches_finite_differences)
{
    dlrm_layout_t l;
    float *p, rows[DLRM_FIELDS * 8], grows[DLRM_FIELDS * 8];
    dlrm_example_t ex;
    setup(&l, &p, &ex, rows, _i);
    float *q = malloc(l.count * sizeof(float));
    ck_assert_ptr_nonnull(q);
    memcpy(q, p, l.count * sizeof(float));
    /* lr 1: the step subtracts the gradient itself from every parameter */
    dlrm_step(&l, q, &ex, rows, 1.0f, grows);

    const size_t start[] = {l.bw1, l.bb1, l.bw2, l.bb2, l.tw1, l.tb1, l.tw2, l.tb2, l.count};
    for (int b = 0; b < 9; b++) {
        size_t lo = start[b], hi = b < 8 ? start[b + 1] : lo + DLRM_FIELDS * 8;
        double err = 0, norm = 0;
        for (size_t i = lo; i < hi; i++) {
            double fd, g;
            if (b < 8) {
                fd = fd_at(&l, p, &ex, rows, p, i);
                g = (double)p[i] - (double)q[i];
            } else {
                fd = fd_at(&l, p, &ex, rows, rows, i - lo);
                g = grows[i - lo];
            }
            err += (fd - g) * (fd - g);
            norm += fd * fd;
        }
        ck_assert_msg(norm > 1e-8, "block %d has no gradient", b);
        ck_assert_msg(sqrt(err / norm) < 0.02, "block %d: relative error %g", b,
                      sqrt(err / norm));
    }
    free(q);
    free(p);
}
END_TEST

START_TEST(steps_lower_the_loss)
{
    dlrm_layout_t l;
    float *p, rows[DLRM_FIELDS * 8], grows[DLRM_FIELDS * 8];
    dlrm_example_t ex;
    setup(&l, &p, &ex, rows, 1);
    double before = loss(&l, p, &ex, rows);
    for (int it = 0; it < 20; it++) {
        dlrm_step(&l, p, &ex, rows, 0.05f, grows);
        for (int i = 0; i < DLRM_FIELDS * 8; i++)
            rows[i] -= 0.05f * grows[i];
    }
    ck_assert_double_lt(loss(&l, p, &ex, rows), 0.5 * before);
    free(p);
}
END_TEST

START_TEST(layout_bounds)
{
    dlrm_layout_t l;
    ck_assert_int_eq(dlrm_layout_init(&l, 0, 8, 8), -1);
    ck_assert_int_eq(dlrm_layout_init(&l, DLRM_MAX_DIM + 1, 8, 8), -1);
    ck_assert_int_eq(dlrm_layout_init(&l, 16, DLRM_MAX_HIDDEN + 1, 8), -1);
    ck_assert_int_eq(dlrm_layout_init(&l, 16, 8, 0), -1);
    ck_assert_int_eq(dlrm_layout_init(&l, 16, 64, 32), 0);
    ck_assert_int_eq(l.tin, 16 + 351);
    ck_assert_uint_eq(l.count, (size_t)64 * 13 + 64 + 16 * 64 + 16 + 32 * 367 + 32 + 32 + 1);
}
END_TEST

Suite *dlrm_suite(void)
{
    Suite *s = suite_create("dlrm");
    TCase *tc = tcase_create("dlrm");
    tcase_set_timeout(tc, 60); /* the data draws take seconds under valgrind or load */
    tcase_add_test(tc, data_is_deterministic_and_calibrated);
    tcase_add_test(tc, tables_fill_the_rows);
    tcase_add_loop_test(tc, step_matches_finite_differences, 0, 2);
    tcase_add_test(tc, steps_lower_the_loss);
    tcase_add_test(tc, layout_bounds);
    suite_add_tcase(s, tc);
    return s;
}

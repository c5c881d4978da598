/*
 * Unit tests of the shadow engine's update rules (algorithms/rules.h) against
 * values computed by hand: the MA mean, one BMUF step, one EASGD step with
 * the owner's center update, the center slicing, and the delta application
 * keeping a write made after the snapshot, and the bf16 snapshot rule
 * (shadow.h, Wire) conserving the ranks' sum.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "algorithms/reduce.h"
#include "algorithms/rules.h"
#include "unit.h"

#define EPS 1e-6f

static void assert_vec(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= EPS, "element %zu: got %.9g, want %.9g", i,
                      (double)got[i], (double)want[i]);
}

START_TEST(test_ma_mean)
{
    const float a[] = {1, 2, 3, -4}, b[] = {3, 4, 5, 8}, c[] = {5, 6, 10, 2};
    const float *xs[] = {a, b, c};
    float out[4];
    shs__ma_mean(out, xs, 3, 4);
    const float want[] = {3, 4, 6, 2};
    assert_vec(out, want, 4);

    /* one member: the mean is the member itself */
    shs__ma_mean(out, xs + 1, 1, 4);
    assert_vec(out, b, 4);
}
END_TEST

/* Summed in the order given: members computing the same group's mean in
 * ascending rank order agree bitwise (here the order matters in float). */
START_TEST(test_ma_order_is_fixed)
{
    const float a[] = {1e8f}, b[] = {1.0f}, c[] = {-1e8f};
    const float *abc[] = {a, b, c}, *acb[] = {a, c, b};
    float x, y;
    shs__ma_mean(&x, abc, 3, 1);
    shs__ma_mean(&y, acb, 3, 1);
    /* (1e8 + 1) rounds to 1e8 in float, so a+b+c = 0 but a+c+b = 1 */
    ck_assert_float_eq(x, 0.0f);
    ck_assert_float_eq(y, 1.0f / 3.0f);
}
END_TEST

/* The pull path takes the mean piece by piece (SHS_SHADOW_CHUNK) into one
 * buffer: any cut gives the bits of the whole, and the scale is 1/m of the
 * members given, the own snapshot among them. */
START_TEST(test_ma_mean_by_pieces)
{
    enum { N = 37 };
    float a[N], b[N], c[N], whole[N], pieces[N];
    for (int i = 0; i < N; i++) {
        a[i] = 0.1f * (float)i;
        b[i] = 1e3f / (float)(i + 1);
        c[i] = -0.7f * (float)(i * i);
    }
    const float *xs[] = {a, b, c};
    shs__ma_mean(whole, xs, 3, N);
    ck_assert_float_eq_tol(whole[4], (0.4f + 200.0f - 11.2f) / 3.0f, 1e-4f);
    const size_t cut[] = {1, 5, 16, 36};
    for (size_t t = 0; t < sizeof(cut) / sizeof(cut[0]); t++) {
        memset(pieces, 0xff, sizeof(pieces));
        for (size_t c0 = 0; c0 < N; c0 += cut[t]) {
            size_t len = N - c0 < cut[t] ? N - c0 : cut[t];
            const float *xp[] = {a + c0, b + c0, c + c0};
            shs__ma_mean(pieces + c0, xp, 3, len);
        }
        ck_assert_mem_eq(pieces, whole, sizeof(whole));
    }
}
END_TEST

START_TEST(test_bmuf_defaults)
{
    shs__bmuf_coef_t c = shs__bmuf_defaults(4);
    ck_assert_float_eq(c.eta, 0.75f);
    ck_assert_float_eq(c.zeta, 1.0f);
    ck_assert(c.nesterov);
    ck_assert_float_eq(shs__bmuf_defaults(1).eta, 0.0f);
}
END_TEST

START_TEST(test_bmuf_step)
{
    /* w_g = (1, 2), D = (0.5, -1), mean = (2, 0), eta = 0.5, zeta = 1:
     * G = (1, -2); D = (0.25 + 1, -0.5 - 2) = (1.25, -2.5);
     * Nesterov result = w_g + D + 0.5 D = (2.875, -1.75) = the new w_g */
    float wg[] = {1, 2}, D[] = {0.5f, -1}, mean[] = {2, 0}, out[2];
    shs__bmuf_coef_t c = {.eta = 0.5f, .zeta = 1.0f, .nesterov = true};
    shs__bmuf_step(wg, D, mean, out, 2, &c);
    assert_vec(D, (const float[]){1.25f, -2.5f}, 2);
    assert_vec(wg, (const float[]){2.875f, -1.75f}, 2);
    assert_vec(out, (const float[]){2.875f, -1.75f}, 2);

    /* the ranks made no progress (mean = the model they were given): G = 0,
     * D = 0.5 D = (0.625, -1.25), result = w_g + 1.5 D = (3.8125, -3.625) */
    float still[] = {2.875f, -1.75f};
    shs__bmuf_step(wg, D, still, out, 2, &c);
    assert_vec(D, (const float[]){0.625f, -1.25f}, 2);
    assert_vec(out, (const float[]){3.8125f, -3.625f}, 2);

    /* ...and with 4 ranks' defaults (eta 0.75, zeta 1, Nesterov) the block
     * momentum of ranks that stand still dies out instead of growing */
    shs__bmuf_coef_t d4 = shs__bmuf_defaults(4);
    float w4[] = {0}, D4[] = {1}, o4[1];
    for (int k = 0; k < 200; k++) {
        float m4[] = {w4[0]};
        shs__bmuf_step(w4, D4, m4, o4, 1, &d4);
    }
    ck_assert_float_lt(fabsf(D4[0]), 1e-6f);
    ck_assert_float_lt(fabsf(o4[0]), 8.0f); /* 1.75 * (0.75 + 0.75^2 + ...) = 5.25 */

    /* same start, zeta = 2, no Nesterov, result written over the mean:
     * D = (0.25 + 2, -0.5 - 4) = (2.25, -4.5); w_g = (3.25, -2.5) = result */
    float wg2[] = {1, 2}, D2[] = {0.5f, -1}, mean2[] = {2, 0};
    c.zeta = 2.0f;
    c.nesterov = false;
    shs__bmuf_step(wg2, D2, mean2, mean2, 2, &c);
    assert_vec(D2, (const float[]){2.25f, -4.5f}, 2);
    assert_vec(wg2, (const float[]){3.25f, -2.5f}, 2);
    assert_vec(mean2, (const float[]){3.25f, -2.5f}, 2);

    /* eta = 0, zeta = 1, no Nesterov is plain MA: the result is the mean */
    float wg3[] = {7, 7}, D3[] = {3, 3}, mean3[] = {1, -1}, out3[2];
    shs__bmuf_coef_t ma = {.eta = 0.0f, .zeta = 1.0f, .nesterov = false};
    shs__bmuf_step(wg3, D3, mean3, out3, 2, &ma);
    assert_vec(out3, mean3, 2);
}
END_TEST

START_TEST(test_easgd_step_and_center)
{
    /* two ranks, center c = (3, 1), alpha = 0.25:
     * rank A, w = (1, 5): d_A = (-0.5, 1), w_A -> (1.5, 4)
     * rank B, w = (4, 1): d_B = (0.25, 0), w_B -> (3.75, 1)
     * owner: c -> c + d_A + d_B = (2.75, 2) */
    float c[] = {3, 1}, wa[] = {1, 5}, wb[] = {4, 1}, da[2], db[2];
    float before = wa[0] + wa[1] + wb[0] + wb[1] + c[0] + c[1];
    shs__easgd_diff(da, wa, c, 0.25f, 2);
    shs__easgd_diff(db, wb, c, 0.25f, 2);
    assert_vec(da, (const float[]){-0.5f, 1}, 2);
    assert_vec(db, (const float[]){0.25f, 0}, 2);
    shs__delta_apply_sub(wa, da, 2);
    shs__delta_apply_sub(wb, db, 2);
    assert_vec(wa, (const float[]){1.5f, 4}, 2);
    assert_vec(wb, (const float[]){3.75f, 1}, 2);
    shs__easgd_center_apply(c, da, 2);
    shs__easgd_center_apply(c, db, 2);
    assert_vec(c, (const float[]){2.75f, 2}, 2);
    /* replicas + center are conserved */
    float after = wa[0] + wa[1] + wb[0] + wb[1] + c[0] + c[1];
    ck_assert_float_eq_tol(after, before, EPS);
    ck_assert_float_eq(shs__easgd_default_alpha(4), 0.125f);
}
END_TEST

START_TEST(test_easgd_slices)
{
    const size_t want_off[] = {0, 3, 6, 8}, want_len[] = {3, 3, 2, 2};
    for (int k = 0; k < 4; k++) {
        size_t off, len;
        shs__easgd_slice(10, 4, k, &off, &len);
        ck_assert_uint_eq(off, want_off[k]);
        ck_assert_uint_eq(len, want_len[k]);
    }
    /* fewer elements than ranks: empty slices at the end */
    size_t off, len;
    shs__easgd_slice(2, 4, 3, &off, &len);
    ck_assert_uint_eq(off, 2);
    ck_assert_uint_eq(len, 0);
}
END_TEST

START_TEST(test_delta_keeps_concurrent_write)
{
    /* the round snapshots w, a worker then adds 10 to w[1] and -1 to w[2],
     * the round's result is 4 everywhere: the worker's progress survives */
    float w[] = {1, 2, 3}, snap[3], result[] = {4, 4, 4};
    for (int i = 0; i < 3; i++)
        snap[i] = w[i];
    w[1] += 10;
    w[2] -= 1;
    shs__delta_apply(w, result, snap, 3);
    assert_vec(w, (const float[]){4, 14, 3}, 3);

    /* untouched elements become exactly the result (no rounding residue) */
    float w2[] = {0.1f, 1e7f}, s2[] = {0.1f, 1e7f}, r2[] = {0.3f, 3.0f};
    shs__delta_apply(w2, r2, s2, 2);
    ck_assert_float_eq(w2[0], 0.3f);
    ck_assert_float_eq(w2[1], 3.0f);
}
END_TEST

/* bf16 snapshots (shadow.h, Wire): each rank publishes s_k = bf16(w_k),
 * all take the float32 mean a of the s_k, and each applies a against its
 * own s_k: w_k' = a + (w_k - s_k). The ranks' moves a - s_k sum to
 * n a - sum s_k, zero but for the mean's float32 rounding, so the sum over
 * ranks is kept to float32 rounding (as with float32 snapshots), and each
 * rank keeps its rounding residual w_k - s_k. Applying against the float32
 * model instead (w_k' = a) would lose every residual: the sum moves by
 * sum (w_k - s_k), far outside that bound, which the last check shows. */
START_TEST(test_bf16_snapshot_rule_conserves_the_sum)
{
    enum { N = 5000, R = 4 };
    static float w[R][N], s16[R][N], a[N], naive[N];
    static uint16_t pub[N];
    uint32_t x = 7;
    for (int k = 0; k < R; k++) {
        for (size_t i = 0; i < N; i++) {
            x = x * 1664525u + 1013904223u;
            double mag = ldexp(1.0, (int)(x >> 28) - 4); /* 2^-4 .. 2^11 */
            w[k][i] = (float)(mag * ((double)(x & 0xffffu) / 65536.0 - 0.3));
        }
        shs__bf16_encode(pub, w[k], N); /* what rank k publishes */
        shs__bf16_decode(s16[k], pub, N);
    }
    const float *xs[R] = {s16[0], s16[1], s16[2], s16[3]};
    shs__ma_mean(a, xs, R, N);
    double before[N], resid[R][N];
    for (size_t i = 0; i < N; i++) {
        before[i] = 0;
        for (int k = 0; k < R; k++) {
            before[i] += w[k][i];
            resid[k][i] = (double)w[k][i] - s16[k][i];
        }
    }
    for (int k = 0; k < R; k++)
        shs__delta_apply(w[k], a, s16[k], N);
    size_t naive_off = 0;
    for (size_t i = 0; i < N; i++) {
        double after = 0, abs_sum = 0, lost = 0;
        for (int k = 0; k < R; k++) {
            after += w[k][i];
            abs_sum += fabs(w[k][i]);
            lost += resid[k][i];
            /* the rank kept its own residual (one float32 rounding) */
            double kept = (double)w[k][i] - a[i];
            ck_assert_msg(fabs(kept - resid[k][i]) <= ldexp(fabs(w[k][i]), -24),
                          "rank %d element %zu: residual %a became %a", k, i, resid[k][i],
                          kept);
        }
        double bound = ldexp((R + 1) * abs_sum, -23);
        ck_assert_msg(fabs(after - before[i]) <= bound,
                      "element %zu: sum %.9g became %.9g (bound %.3g)", i, before[i], after,
                      bound);
        naive[i] = a[i];
        naive_off += fabs(R * (double)naive[i] - before[i]) > bound && fabs(lost) > bound;
    }
    ck_assert_msg(naive_off > N / 2, "applying against the float32 model kept the sum at %zu "
                  "of %d elements: the check would not see the wrong rule", N - naive_off, N);
}
END_TEST

Suite *shadow_suite(void)
{
    Suite *s = suite_create("shadow");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, test_ma_mean);
    tcase_add_test(tc, test_ma_order_is_fixed);
    tcase_add_test(tc, test_ma_mean_by_pieces);
    tcase_add_test(tc, test_bmuf_defaults);
    tcase_add_test(tc, test_bmuf_step);
    tcase_add_test(tc, test_easgd_step_and_center);
    tcase_add_test(tc, test_easgd_slices);
    tcase_add_test(tc, test_delta_keeps_concurrent_write);
    tcase_add_test(tc, test_bf16_snapshot_rule_conserves_the_sum);
    suite_add_tcase(s, tc);
    return s;
}

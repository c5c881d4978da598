/*
 * A click log shaped like Criteo's. Example idx is a pure function of
 * (seed, idx): 13 roughly normal dense features and 26 categorical ones
 * whose value ids follow a Zipf-like law (value k about as likely as
 * 1 / (k + 1): a few head values, a long tail seen once or never) over
 * Criteo's cardinalities divided by ten. A hidden teacher gives each example
 * a click probability:
 *
 *   logit = bias + sum_f 0.3 t_f(v_f)                          per-value effects
 *               + sum_{(f,g) in pairs} 0.25 <a_f(v_f), a_g(v_g)>   field interactions
 *               + u . x + 0.6 tanh(x0 x1) + 0.5 relu(x2) - 0.2 x3^2   dense part
 *
 * with t, a, u drawn from the seed; the label is a Bernoulli draw, and bias
 * is calibrated so that the mean click-through rate is the target.
 */
#include <math.h>

#include "ctr.h"
#include "dlrm.h"

/* Criteo (Kaggle display advertising) cardinalities / 10, at least 3 */
static const uint32_t vocab[DLRM_FIELDS] = {
    146, 58,  1013122, 220260, 30,     3, 1251, 63, 3,  9314,  568, 835159, 319,
    3,   1499, 546130, 3,      565,    217, 3,   704654, 3, 3, 28618, 10,  14257};
static const int pairs[][2] = {{0, 1},  {2, 3},   {4, 7},   {9, 10}, {11, 12}, {13, 14},
                               {15, 2}, {17, 18}, {20, 23}, {24, 25}, {1, 9},  {6, 21}};
#define NPAIRS (sizeof(pairs) / sizeof(pairs[0]))
#define TEACHER_DIM 4
#define SALT_T 0x63726974656f3174ull
#define SALT_A 0x63726974656f3261ull
#define SALT_U 0x63726974656f3375ull
#define SALT_X 0x63726974656f3478ull

uint32_t dlrm_vocab(int f)
{
    return f >= 0 && f < DLRM_FIELDS ? vocab[f] : 0;
}

static double teacher_logit(const dlrm_teacher_t *t, const dlrm_example_t *ex)
{
    double z = 0;
    for (int f = 0; f < DLRM_FIELDS; f++)
        z += 0.3 * ctr_gauss(ctr_h3(t->seed ^ SALT_T, (uint64_t)f, ex->cat[f]));
    for (size_t k = 0; k < NPAIRS; k++) {
        int f = pairs[k][0], g = pairs[k][1];
        for (int j = 0; j < TEACHER_DIM; j++)
            z += 0.25 * ctr_gauss(ctr_h3(t->seed ^ SALT_A, (uint64_t)(f * 8 + j), ex->cat[f])) *
                 ctr_gauss(ctr_h3(t->seed ^ SALT_A, (uint64_t)(g * 8 + j), ex->cat[g]));
    }
    const float *x = ex->dense;
    for (int j = 0; j < DLRM_DENSE; j++)
        z += 0.25 * ctr_gauss(ctr_h3(t->seed ^ SALT_U, (uint64_t)j, 0)) * x[j];
    z += 0.6 * tanh((double)x[0] * x[1]) + 0.5 * fmax(0.0, x[2]) - 0.2 * x[3] * x[3];
    return z;
}

static void draw_features(const dlrm_teacher_t *t, uint64_t idx, dlrm_example_t *ex,
                          uint64_t *s)
{
    *s = ctr_h3(t->seed ^ SALT_X, idx, 0);
    for (int j = 0; j < DLRM_DENSE; j++) {
        *s = mix(*s);
        ex->dense[j] = (float)ctr_gauss(*s);
    }
    for (int f = 0; f < DLRM_FIELDS; f++) {
        *s = mix(*s);
        /* (V + 1)^u - 1, floored: log-uniform, P(k) ~ 1 / (k + 1.5) */
        double k = exp(ctr_unif(*s) * log((double)vocab[f] + 1.0)) - 1.0;
        uint32_t v = (uint32_t)k;
        ex->cat[f] = v < vocab[f] ? v : vocab[f] - 1;
    }
}

/* the teacher's logit of example idx, for the calibration */
static double calib_logit(const void *tv, uint64_t idx)
{
    const dlrm_teacher_t *t = tv;
    dlrm_example_t ex;
    uint64_t s;
    draw_features(t, idx, &ex, &s);
    return teacher_logit(t, &ex);
}

void dlrm_teacher_init(dlrm_teacher_t *t, uint64_t seed, double target_ctr)
{
    t->seed = seed;
    t->bias = 0;
    t->bias = (float)ctr_calibrate_bias(calib_logit, t, target_ctr);
}

void dlrm_example(const dlrm_teacher_t *t, uint64_t idx, dlrm_example_t *ex)
{
    uint64_t s;
    draw_features(t, idx, ex, &s);
    double p = 1.0 / (1.0 + exp(-(teacher_logit(t, ex) + t->bias)));
    ex->label = ctr_unif(mix(s)) < p ? 1.0f : 0.0f;
}

static uint64_t fill(uint64_t cap)
{
    uint64_t n = 0;
    for (int f = 0; f < DLRM_FIELDS; f++)
        n += vocab[f] < cap ? vocab[f] : cap;
    return n;
}

int dlrm_tables_init(dlrm_tables_t *tb, uint64_t rows)
{
    if (rows < DLRM_FIELDS)
        return -1;
    /* the largest cap whose fields fit in rows (fill is monotone in cap) */
    uint64_t lo = 1, hi = 1;
    for (int f = 0; f < DLRM_FIELDS; f++)
        hi = vocab[f] > hi ? vocab[f] : hi;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (fill(mid) <= rows)
            lo = mid;
        else
            hi = mid - 1;
    }
    uint64_t off = 0;
    for (int f = 0; f < DLRM_FIELDS; f++) {
        tb->off[f] = off;
        tb->size[f] = vocab[f] < lo ? vocab[f] : lo;
        off += tb->size[f];
    }
    tb->rows = off;
    return 0;
}

uint64_t dlrm_row(const dlrm_tables_t *tb, int f, uint32_t v)
{
    if (v < tb->size[f])
        return tb->off[f] + v;
    return tb->off[f] + mix(((uint64_t)(unsigned)f << 32) ^ v) % tb->size[f];
}

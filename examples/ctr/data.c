/*
 * The synthetic click log. Example idx is a pure function of (seed, idx):
 * 13 roughly normal dense features and 8 categorical fields whose value
 * ids follow a power law (id = V u^3, u uniform: the head values dominate)
 * over vocabularies of 20 to 10^6 values. A hidden teacher gives each example a click probability:
 *
 *   logit = bias + sum_f t_f(v_f)                    per-value effects
 *               + sum_{(f,g) in pairs} <a_f(v_f), a_g(v_g)>   field interactions
 *               + u . x + 0.6 tanh(x0 x1) + 0.5 relu(x2) - 0.2 x3^2   dense part
 *
 * with t, a, u drawn from the seed; the label is a Bernoulli draw. bias is
 * calibrated so that the mean click-through rate is the target (a few
 * percent, as in display advertising).
 */
#include <math.h>

#include "ctr.h"

static const uint32_t vocab[CTR_FIELDS] = {20, 100, 500, 2000, 10000, 50000, 200000, 1000000};
static const int pairs[][2] = {{0, 1}, {2, 3}, {1, 4}, {5, 6}, {0, 7}, {3, 5}};
#define NPAIRS (sizeof(pairs) / sizeof(pairs[0]))
#define TEACHER_DIM 4
#define SALT_T 0x7465616368657231ull
#define SALT_A 0x7465616368657232ull
#define SALT_U 0x7465616368657233ull
#define SALT_X 0x6578616d706c6531ull

static double teacher_logit(const ctr_teacher_t *t, const ctr_example_t *ex)
{
    double z = 0;
    for (int f = 0; f < CTR_FIELDS; f++)
        z += 0.5 * ctr_gauss(ctr_h3(t->seed ^ SALT_T, (uint64_t)f, ex->cat[f]));
    for (size_t k = 0; k < NPAIRS; k++) {
        int f = pairs[k][0], g = pairs[k][1];
        for (int j = 0; j < TEACHER_DIM; j++)
            z += 0.25 * ctr_gauss(ctr_h3(t->seed ^ SALT_A, (uint64_t)(f * 8 + j), ex->cat[f])) *
                 ctr_gauss(ctr_h3(t->seed ^ SALT_A, (uint64_t)(g * 8 + j), ex->cat[g]));
    }
    const float *x = ex->dense;
    for (int j = 0; j < CTR_DENSE; j++)
        z += 0.25 * ctr_gauss(ctr_h3(t->seed ^ SALT_U, (uint64_t)j, 0)) * x[j];
    z += 0.6 * tanh((double)x[0] * x[1]) + 0.5 * fmax(0.0, x[2]) - 0.2 * x[3] * x[3];
    return z;
}

static void draw_features(const ctr_teacher_t *t, uint64_t idx, ctr_example_t *ex, uint64_t *s)
{
    *s = ctr_h3(t->seed ^ SALT_X, idx, 0);
    for (int j = 0; j < CTR_DENSE; j++) {
        *s = mix(*s);
        ex->dense[j] = (float)ctr_gauss(*s);
    }
    for (int f = 0; f < CTR_FIELDS; f++) {
        *s = mix(*s);
        double u = ctr_unif(*s);
        ex->cat[f] = (uint32_t)(u * u * u * (double)vocab[f]);
    }
}

#define CALIB_BASE (1ull << 62) /* calibration draws: far from any real index */
#define CALIB_N 20000

double ctr_calibrate_bias(double (*logit)(const void *teacher, uint64_t idx),
                          const void *teacher, double target)
{
    static double z[CALIB_N];
    for (int i = 0; i < CALIB_N; i++)
        z[i] = logit(teacher, CALIB_BASE + (uint64_t)i);
    double lo = -20, hi = 5;
    for (int it = 0; it < 60; it++) {
        double b = 0.5 * (lo + hi), m = 0;
        for (int i = 0; i < CALIB_N; i++)
            m += 1.0 / (1.0 + exp(-(z[i] + b)));
        if (m / CALIB_N > target)
            hi = b;
        else
            lo = b;
    }
    return 0.5 * (lo + hi);
}

/* the teacher's logit of example idx, for the calibration */
static double calib_logit(const void *tv, uint64_t idx)
{
    const ctr_teacher_t *t = tv;
    ctr_example_t ex;
    uint64_t s;
    draw_features(t, idx, &ex, &s);
    return teacher_logit(t, &ex);
}

void ctr_teacher_init(ctr_teacher_t *t, uint64_t seed, double target_ctr)
{
    t->seed = seed;
    t->bias = 0;
    t->bias = (float)ctr_calibrate_bias(calib_logit, t, target_ctr);
}

void ctr_example(const ctr_teacher_t *t, uint64_t idx, ctr_example_t *ex)
{
    uint64_t s;
    draw_features(t, idx, ex, &s);
    double p = 1.0 / (1.0 + exp(-(teacher_logit(t, ex) + t->bias)));
    ex->label = ctr_unif(mix(s)) < p ? 1.0f : 0.0f;
}

/*
 * The synthetic click-through workload of the demo trainer (shs-ctr):
 * a dataset drawn from a hidden teacher, a wide-and-deep student whose
 * parameters are one flat float32 array (the registered, synced region), and
 * the evaluation (normalized entropy, AUC). No library calls here.
 */
#ifndef SHS_TOOLS_CTR_H
#define SHS_TOOLS_CTR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define CTR_DENSE 13 /* dense features, as in Criteo's click logs */
#define CTR_FIELDS 8 /* categorical fields */

typedef struct ctr_example {
    float dense[CTR_DENSE];
    uint32_t cat[CTR_FIELDS]; /* raw value ids; the student hashes them */
    float label;              /* 0 or 1 */
} ctr_example_t;

/* The teacher: deterministic from the seed. */
typedef struct ctr_teacher {
    uint64_t seed;
    float bias; /* calibrated so that the mean CTR is target_ctr */
} ctr_teacher_t;

void ctr_teacher_init(ctr_teacher_t *t, uint64_t seed, double target_ctr);

/* Example number idx of the stream (training examples are 0..T-1, the
 * held-out ones follow): a pure function of (teacher, idx). */
void ctr_example(const ctr_teacher_t *t, uint64_t idx, ctr_example_t *ex);

/* Student shape. */
typedef struct ctr_shape {
    uint32_t buckets; /* hash buckets per field */
    int dim;          /* embedding dimension */
    int hidden;       /* hidden units of the MLP */
} ctr_shape_t;

/* Offsets (in floats) of each part in the parameter array. */
typedef struct ctr_layout {
    ctr_shape_t s;
    size_t bias, wide, emb, w1, b1, w2, b2, count;
    int in; /* MLP input width: CTR_DENSE + CTR_FIELDS * dim */
} ctr_layout_t;

void ctr_layout_init(ctr_layout_t *l, const ctr_shape_t *s);

/* Deterministic initial parameters (same on every rank for one seed). */
void ctr_model_init(const ctr_layout_t *l, float *p, uint64_t seed, double prior_ctr);

/* One SGD step on one example, lock-free on p (Hogwild). Returns the
 * predicted probability before the update. */
float ctr_sgd_step(const ctr_layout_t *l, float *p, const ctr_example_t *ex, float lr);

/* Predicted click probability. */
float ctr_predict(const ctr_layout_t *l, const float *p, const ctr_example_t *ex);

/* Log loss of prediction q for label y, clamped away from 0 and 1. */
double ctr_logloss(float q, float y);

/* Entropy (nats) of a Bernoulli with mean ctr: the normalizer of NE. */
double ctr_entropy(double ctr);

/* NE and AUC of n (prediction, label) pairs; reorders them. */
void ctr_score(float *pairs, size_t n, double *ne_p, double *auc_p);

/* NE and AUC of the model on examples[0..n); scratch holds 2n floats. */
void ctr_evaluate(const ctr_layout_t *l, const float *p, const ctr_example_t *ex, size_t n,
                  float *scratch, double *ne_p, double *auc_p);

/* splitmix64 finalizer: the hash behind the dataset, the feature buckets
 * and the initial model, so every rank derives the same values */
static inline uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t ctr_h3(uint64_t a, uint64_t b, uint64_t c)
{
    return mix(mix(mix(a) ^ b) ^ c);
}

/* uniform in (0, 1) from the top 53 bits */
static inline double ctr_unif(uint64_t h)
{
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* A cheap standard-normal-like draw: the sum of three uniforms taken from
 * the bits of one hash, centred and scaled to variance 1 (no
 * transcendental functions: they are slow under CPU emulation). */
static inline double ctr_gauss(uint64_t h)
{
    double s = (double)(h & 0x1fffff) + (double)((h >> 21) & 0x1fffff) +
               (double)((h >> 42) & 0x1fffff);
    return (s * (1.0 / 2097152.0) - 1.5) * 2.0;
}

/* The teachers' calibration: the bias b for which the mean of
 * sigmoid(logit(teacher, idx) + b) over 20000 draws far from any real
 * example index is target (bisection). */
double ctr_calibrate_bias(double (*logit)(const void *teacher, uint64_t idx),
                          const void *teacher, double target);

/* The logistic function, clamped to +-30 */
static inline float ctr_sigmoid(float x)
{
    if (x > 30)
        x = 30;
    if (x < -30)
        x = -30;
    return 1.0f / (1.0f + expf(-x));
}

#endif

/*
 * The student: wide and deep, one flat float32 parameter array.
 *
 *   logit = bias + sum_f wide_f[h_f]                      (logistic regression on hashed ids)
 *               + w2 . relu(W1 [x, E_1[h_1], ..., E_8[h_8]] + b1) + b2   (embeddings + MLP)
 *
 * with h_f the hash bucket of field f's value. Plain SGD on the log loss,
 * one example at a time, with no lock: workers of a rank update the same
 * array concurrently (Hogwild), as ShadowSync's trainers do.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctr.h"

#define MAX_IN (CTR_DENSE + CTR_FIELDS * 64)
#define MAX_HIDDEN 256

static uint32_t bucket(int f, uint32_t v, uint32_t buckets)
{
    return (uint32_t)(mix(((uint64_t)(unsigned)f << 32) ^ v) % buckets);
}

void ctr_layout_init(ctr_layout_t *l, const ctr_shape_t *s)
{
    size_t B = s->buckets, F = CTR_FIELDS;
    l->s = *s;
    if (l->s.dim > 64)
        l->s.dim = 64;
    if (l->s.hidden > MAX_HIDDEN)
        l->s.hidden = MAX_HIDDEN;
    l->in = CTR_DENSE + CTR_FIELDS * l->s.dim;
    l->bias = 0;
    l->wide = 1;
    l->emb = l->wide + F * B;
    l->w1 = l->emb + F * B * (size_t)l->s.dim;
    l->b1 = l->w1 + (size_t)l->s.hidden * (size_t)l->in;
    l->w2 = l->b1 + (size_t)l->s.hidden;
    l->b2 = l->w2 + (size_t)l->s.hidden;
    l->count = l->b2 + 1;
}

void ctr_model_init(const ctr_layout_t *l, float *p, uint64_t seed, double prior_ctr)
{
    uint64_t s = mix(seed ^ 0x6d6f64656c696e69ull);
    memset(p, 0, l->count * sizeof(float));
    p[l->bias] = (float)log(prior_ctr / (1.0 - prior_ctr));
    size_t nemb = (size_t)CTR_FIELDS * l->s.buckets * (size_t)l->s.dim;
    for (size_t i = 0; i < nemb; i++) {
        s = mix(s);
        p[l->emb + i] = (float)((ctr_unif(s) - 0.5) * 0.1);
    }
    /* He-style uniform init of the first layer, small output layer */
    double a1 = sqrt(6.0 / l->in), a2 = sqrt(3.0 / l->s.hidden) * 0.1;
    for (size_t i = 0; i < (size_t)l->s.hidden * (size_t)l->in; i++) {
        s = mix(s);
        p[l->w1 + i] = (float)((2 * ctr_unif(s) - 1) * a1);
    }
    for (int j = 0; j < l->s.hidden; j++) {
        s = mix(s);
        p[l->w2 + (size_t)j] = (float)((2 * ctr_unif(s) - 1) * a2);
    }
}

typedef struct fwd {
    float z[MAX_IN];
    float pre[MAX_HIDDEN];
    uint32_t b[CTR_FIELDS];
    float logit;
} fwd_t;

static void forward(const ctr_layout_t *l, const float *p, const ctr_example_t *ex, fwd_t *f)
{
    const int dim = l->s.dim, H = l->s.hidden, in = l->in;
    const uint32_t B = l->s.buckets;
    float logit = p[l->bias];
    memcpy(f->z, ex->dense, sizeof(ex->dense));
    for (int k = 0; k < CTR_FIELDS; k++) {
        uint32_t b = bucket(k, ex->cat[k], B);
        f->b[k] = b;
        logit += p[l->wide + (size_t)k * B + b];
        memcpy(f->z + CTR_DENSE + k * dim, p + l->emb + ((size_t)k * B + b) * (size_t)dim,
               (size_t)dim * sizeof(float));
    }
    float out = p[l->b2];
    for (int j = 0; j < H; j++) {
        const float *restrict z = f->z;
        const float *restrict row = p + l->w1 + (size_t)j * (size_t)in;
        /* four partial sums: a loop the compiler can vectorize (one sum
         * cannot be reordered); under QEMU TCG every scalar float operation
         * is a call, a packed one does four elements per call */
        float s4[4] = {0, 0, 0, 0};
        int i = 0;
        for (; i + 4 <= in; i += 4)
            for (int k = 0; k < 4; k++)
                s4[k] += row[i + k] * z[i + k];
        float a = p[l->b1 + (size_t)j] + ((s4[0] + s4[1]) + (s4[2] + s4[3]));
        for (; i < in; i++)
            a += row[i] * z[i];
        f->pre[j] = a;
        if (a > 0)
            out += p[l->w2 + (size_t)j] * a;
    }
    f->logit = logit + out;
}

float ctr_predict(const ctr_layout_t *l, const float *p, const ctr_example_t *ex)
{
    fwd_t f;
    forward(l, p, ex, &f);
    return ctr_sigmoid(f.logit);
}

float ctr_sgd_step(const ctr_layout_t *l, float *p, const ctr_example_t *ex, float lr)
{
    fwd_t f;
    float dz[MAX_IN];
    const int dim = l->s.dim, H = l->s.hidden, in = l->in;
    const uint32_t B = l->s.buckets;
    forward(l, p, ex, &f);
    float q = ctr_sigmoid(f.logit);
    float g = q - ex->label;
    float lg = lr * g;

    memset(dz, 0, (size_t)in * sizeof(float));
    p[l->bias] -= lg;
    for (int k = 0; k < CTR_FIELDS; k++)
        p[l->wide + (size_t)k * B + f.b[k]] -= lg;
    for (int j = 0; j < H; j++) {
        if (f.pre[j] <= 0)
            continue;
        float *w2 = p + l->w2 + (size_t)j;
        float dh = g * *w2;
        *w2 -= lg * f.pre[j];
        p[l->b1 + (size_t)j] -= lr * dh;
        float *restrict row = p + l->w1 + (size_t)j * (size_t)in;
        float *restrict dzr = dz;
        const float *restrict z = f.z;
        float ldh = lr * dh;
        for (int i = 0; i < in; i++) {
            dzr[i] += row[i] * dh;
            row[i] -= ldh * z[i];
        }
    }
    p[l->b2] -= lg;
    for (int k = 0; k < CTR_FIELDS; k++) {
        float *e = p + l->emb + ((size_t)k * B + f.b[k]) * (size_t)dim;
        const float *d = dz + CTR_DENSE + k * dim;
        for (int i = 0; i < dim; i++)
            e[i] -= lr * d[i];
    }
    return q;
}

double ctr_logloss(float q, float y)
{
    double qq = q < 1e-7f ? 1e-7 : q > 1 - 1e-7f ? 1 - 1e-7 : q;
    return y > 0.5f ? -log(qq) : -log(1 - qq);
}

double ctr_entropy(double ctr)
{
    if (ctr <= 0 || ctr >= 1)
        return 0;
    return -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr));
}

static int cmp_pred(const void *a, const void *b)
{
    float x = ((const float *)a)[0], y = ((const float *)b)[0];
    return x < y ? -1 : x > y ? 1 : 0;
}

void ctr_score(float *pairs, size_t n, double *ne_p, double *auc_p)
{
    double ll = 0, pos = 0;
    for (size_t i = 0; i < n; i++) {
        ll += ctr_logloss(pairs[2 * i], pairs[2 * i + 1]);
        pos += pairs[2 * i + 1];
    }
    double h = ctr_entropy(pos / (double)n);
    *ne_p = h > 0 ? ll / (double)n / h : 0;
    /* AUC by the rank sum of the positives, ties sharing their mean rank */
    qsort(pairs, n, 2 * sizeof(float), cmp_pred);
    double rank_sum = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double npos = 0;
        while (j < n && pairs[2 * j] == pairs[2 * i]) {
            npos += pairs[2 * j + 1];
            j++;
        }
        rank_sum += npos * (0.5 * (double)(i + 1 + j));
        i = j;
    }
    double neg = (double)n - pos;
    *auc_p = pos > 0 && neg > 0 ? (rank_sum - pos * (pos + 1) / 2) / (pos * neg) : 0.5;
}

void ctr_evaluate(const ctr_layout_t *l, const float *p, const ctr_example_t *ex, size_t n,
                  float *scratch, double *ne_p, double *auc_p)
{
    for (size_t i = 0; i < n; i++) {
        scratch[2 * i] = ctr_predict(l, p, &ex[i]);
        scratch[2 * i + 1] = ex[i].label;
    }
    ctr_score(scratch, n, ne_p, auc_p);
}

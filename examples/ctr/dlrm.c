/*
 * The DLRM-style student's dense part (dlrm.h): bottom MLP, pairwise dot
 * interaction of the 27 vectors, top MLP. Plain SGD on the log loss, one
 * example at a time, with no lock on the dense array (Hogwild); the
 * embedding rows are read-only here and their gradients are handed back.
 * Loops keep four partial sums so the compiler can vectorize them: under
 * QEMU TCG every scalar float operation is a call.
 */
#include <math.h>
#include <string.h>

#include "ctr.h"
#include "dlrm.h"

#define MAX_TIN (DLRM_MAX_DIM + DLRM_PAIRS)

int dlrm_layout_init(dlrm_layout_t *l, int dim, int bh, int th)
{
    if (dim < 1 || dim > DLRM_MAX_DIM || bh < 1 || bh > DLRM_MAX_HIDDEN || th < 1 ||
        th > DLRM_MAX_HIDDEN)
        return -1;
    l->dim = dim;
    l->bh = bh;
    l->th = th;
    l->tin = dim + DLRM_PAIRS;
    l->bw1 = 0;
    l->bb1 = l->bw1 + (size_t)bh * DLRM_DENSE;
    l->bw2 = l->bb1 + (size_t)bh;
    l->bb2 = l->bw2 + (size_t)dim * (size_t)bh;
    l->tw1 = l->bb2 + (size_t)dim;
    l->tb1 = l->tw1 + (size_t)th * (size_t)l->tin;
    l->tw2 = l->tb1 + (size_t)th;
    l->tb2 = l->tw2 + (size_t)th;
    l->count = l->tb2 + 1;
    return 0;
}

static uint64_t init_uniform(float *w, size_t n, double a, uint64_t s)
{
    for (size_t i = 0; i < n; i++) {
        s = mix(s);
        w[i] = (float)((2 * ctr_unif(s) - 1) * a);
    }
    return s;
}

void dlrm_dense_init(const dlrm_layout_t *l, float *p, uint64_t seed, double prior_ctr)
{
    uint64_t s = mix(seed ^ 0x646c726d696e6974ull);
    memset(p, 0, l->count * sizeof(float));
    /* He-style uniform layers; the last one small, its bias at the prior */
    s = init_uniform(p + l->bw1, (size_t)l->bh * DLRM_DENSE, sqrt(6.0 / DLRM_DENSE), s);
    s = init_uniform(p + l->bw2, (size_t)l->dim * (size_t)l->bh, sqrt(6.0 / l->bh), s);
    s = init_uniform(p + l->tw1, (size_t)l->th * (size_t)l->tin, sqrt(6.0 / l->tin), s);
    init_uniform(p + l->tw2, (size_t)l->th, sqrt(3.0 / l->th) * 0.1, s);
    for (int d = 0; d < l->dim; d++)
        p[l->bb2 + (size_t)d] = 0.1f; /* keep the bottom's outputs alive at start */
    p[l->tb2] = (float)log(prior_ctr / (1.0 - prior_ctr));
}

static float dot(const float *restrict a, const float *restrict b, int n)
{
    float s4[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            s4[k] += a[i + k] * b[i + k];
    float s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static float relu(float x)
{
    return x > 0 ? x : 0;
}

typedef struct fwd {
    float h1[DLRM_MAX_HIDDEN]; /* bottom hidden, after relu */
    float z[MAX_TIN];          /* top input: v_0 then the pair dots */
    float t1[DLRM_MAX_HIDDEN]; /* top hidden, after relu */
    const float *vec[DLRM_VECS];
    float logit;
} fwd_t;

static void forward(const dlrm_layout_t *l, const float *p, const dlrm_example_t *ex,
                    const float *rows, fwd_t *f)
{
    const int dim = l->dim;
    for (int k = 0; k < l->bh; k++)
        f->h1[k] = relu(p[l->bb1 + (size_t)k] +
                        dot(p + l->bw1 + (size_t)k * DLRM_DENSE, ex->dense, DLRM_DENSE));
    for (int d = 0; d < dim; d++)
        f->z[d] = relu(p[l->bb2 + (size_t)d] + dot(p + l->bw2 + (size_t)d * (size_t)l->bh,
                                                   f->h1, l->bh));
    f->vec[0] = f->z;
    for (int v = 1; v < DLRM_VECS; v++)
        f->vec[v] = rows + (size_t)(v - 1) * (size_t)dim;
    float *zp = f->z + dim;
    for (int i = 0; i < DLRM_VECS; i++)
        for (int j = i + 1; j < DLRM_VECS; j++)
            *zp++ = dot(f->vec[i], f->vec[j], dim);
    float out = p[l->tb2];
    for (int j = 0; j < l->th; j++) {
        f->t1[j] = relu(p[l->tb1 + (size_t)j] +
                        dot(p + l->tw1 + (size_t)j * (size_t)l->tin, f->z, l->tin));
        out += p[l->tw2 + (size_t)j] * f->t1[j];
    }
    f->logit = out;
}

float dlrm_predict(const dlrm_layout_t *l, const float *p, const dlrm_example_t *ex,
                   const float *rows)
{
    fwd_t f;
    forward(l, p, ex, rows, &f);
    return ctr_sigmoid(f.logit);
}

/* dst += a * src */
static void axpy(float *restrict dst, float a, const float *restrict src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] += a * src[i];
}

/* top MLP: gradients into dz (the top input's), then its weights step */
static void top_backward(const dlrm_layout_t *l, float *p, const fwd_t *f, float g, float lr,
                         float *dz)
{
    memset(dz, 0, (size_t)l->tin * sizeof(float));
    for (int j = 0; j < l->th; j++) {
        if (f->t1[j] <= 0)
            continue;
        float *w2 = p + l->tw2 + (size_t)j;
        float dt = g * *w2;
        *w2 -= lr * g * f->t1[j];
        p[l->tb1 + (size_t)j] -= lr * dt;
        float *row = p + l->tw1 + (size_t)j * (size_t)l->tin;
        axpy(dz, dt, row, l->tin);
        axpy(row, -lr * dt, f->z, l->tin);
    }
    p[l->tb2] -= lr * g;
}

/* bottom MLP, from the gradient dv0 of its output */
static void bottom_backward(const dlrm_layout_t *l, float *p, const dlrm_example_t *ex,
                            const fwd_t *f, const float *dv0, float lr)
{
    float dh1[DLRM_MAX_HIDDEN];
    memset(dh1, 0, (size_t)l->bh * sizeof(float));
    for (int d = 0; d < l->dim; d++) {
        if (f->z[d] <= 0)
            continue;
        float *row = p + l->bw2 + (size_t)d * (size_t)l->bh;
        axpy(dh1, dv0[d], row, l->bh);
        axpy(row, -lr * dv0[d], f->h1, l->bh);
        p[l->bb2 + (size_t)d] -= lr * dv0[d];
    }
    for (int k = 0; k < l->bh; k++) {
        if (f->h1[k] <= 0)
            continue;
        axpy(p + l->bw1 + (size_t)k * DLRM_DENSE, -lr * dh1[k], ex->dense, DLRM_DENSE);
        p[l->bb1 + (size_t)k] -= lr * dh1[k];
    }
}

float dlrm_step(const dlrm_layout_t *l, float *p, const dlrm_example_t *ex, const float *rows,
                float lr, float *grows)
{
    fwd_t f;
    float dz[MAX_TIN];
    float dv0[DLRM_MAX_DIM];
    const int dim = l->dim;
    forward(l, p, ex, rows, &f);
    float q = ctr_sigmoid(f.logit);
    float g = q - ex->label;
    top_backward(l, p, &f, g, lr, dz);

    /* interaction: d<v_i, v_j> spreads to both vectors */
    memcpy(dv0, dz, (size_t)dim * sizeof(float));
    memset(grows, 0, (size_t)DLRM_FIELDS * (size_t)dim * sizeof(float));
    const float *dp = dz + dim;
    for (int i = 0; i < DLRM_VECS; i++) {
        float *gi = i == 0 ? dv0 : grows + (size_t)(i - 1) * (size_t)dim;
        for (int j = i + 1; j < DLRM_VECS; j++) {
            float d = *dp++;
            if (d == 0)
                continue;
            axpy(gi, d, f.vec[j], dim);
            axpy(grows + (size_t)(j - 1) * (size_t)dim, d, f.vec[i], dim);
        }
    }
    bottom_backward(l, p, ex, &f, dv0, lr);
    return q;
}

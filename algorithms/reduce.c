/* Reduction kernels. The bodies work in blocks of SHS__RBLOCK elements with
 * a constant trip count, which GCC vectorizes even under -O2's "very cheap"
 * cost model (no runtime alias checks thanks to restrict, no epilogue inside
 * the block); the tail of fewer than SHS__RBLOCK elements is scalar. On
 * x86-64 each kernel is also built for AVX2 and the loader picks the clone
 * the CPU supports (GCC target_clones, an ifunc). Checked with
 * -fopt-info-vec-optimized (see SHS_VECTOR_FLAGS in the top CMakeLists.txt). */
#include "algorithms/reduce.h"

/* 64 elements: a whole number of vectors of every width up to AVX-512 for
 * both types, and short enough that the scalar tail costs nothing. */
#define SHS__RBLOCK 64

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SHS_NO_CLONES)
#define SHS__KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define SHS__KERNEL
#endif

#define SUM_BODY(dst, src, n)                                         \
    size_t i = 0;                                                     \
    for (; i + SHS__RBLOCK <= (n); i += SHS__RBLOCK)                  \
        for (size_t j = 0; j < SHS__RBLOCK; j++)                      \
            (dst)[i + j] += (src)[i + j];                             \
    for (; i < (n); i++)                                              \
        (dst)[i] += (src)[i]

#define SUM_SCALE_BODY(dst, src, n, s)                                \
    size_t i = 0;                                                     \
    for (; i + SHS__RBLOCK <= (n); i += SHS__RBLOCK)                  \
        for (size_t j = 0; j < SHS__RBLOCK; j++)                      \
            (dst)[i + j] = ((dst)[i + j] + (src)[i + j]) * (s);       \
    for (; i < (n); i++)                                              \
        (dst)[i] = ((dst)[i] + (src)[i]) * (s)

SHS__KERNEL void shs__reduce_sum_f32(float *restrict dst, const float *restrict src, size_t n)
{
    SUM_BODY(dst, src, n);
}

SHS__KERNEL void shs__reduce_sum_scale_f32(float *restrict dst, const float *restrict src,
                                           size_t n, float scale)
{
    SUM_SCALE_BODY(dst, src, n, scale);
}

SHS__KERNEL void shs__reduce_sum_f64(double *restrict dst, const double *restrict src, size_t n)
{
    SUM_BODY(dst, src, n);
}

SHS__KERNEL void shs__reduce_sum_scale_f64(double *restrict dst, const double *restrict src,
                                           size_t n, double scale)
{
    SUM_SCALE_BODY(dst, src, n, scale);
}

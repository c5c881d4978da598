/* Reduction kernels. The bodies work in blocks of SHS__RBLOCK elements with
 * a constant trip count, which GCC vectorizes even under -O2's "very cheap"
 * cost model (no runtime alias checks thanks to restrict, no epilogue inside
 * the block); the tail of fewer than SHS__RBLOCK elements is scalar. On
 * x86-64 each kernel is also built for AVX2 and the loader picks the clone
 * the CPU supports (GCC target_clones, an ifunc). Checked with
 * -fopt-info-vec-optimized (see SHS_VECTOR_FLAGS in the top CMakeLists.txt). */
#include <string.h>

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

/* float32 <-> bfloat16 through the bits (memcpy: no aliasing questions; the
 * compiler turns it into a register move). Rounding to nearest even adds
 * 0x7fff plus the lowest kept bit before truncating; a NaN (exponent all
 * ones, mantissa not zero) would carry into the exponent that way, so it
 * keeps its top bits with the quiet bit set instead. */
static inline uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u;
    return (uint16_t)(nan ? quiet : rounded);
}

static inline float f32_of(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

#define MAP_BODY(n, stmt)                                             \
    size_t i = 0;                                                     \
    for (; i + SHS__RBLOCK <= (n); i += SHS__RBLOCK)                  \
        for (size_t j_ = 0; j_ < SHS__RBLOCK; j_++) {                 \
            size_t k = i + j_;                                        \
            stmt;                                                     \
        }                                                             \
    for (; i < (n); i++) {                                            \
        size_t k = i;                                                 \
        stmt;                                                         \
    }

SHS__KERNEL void shs__bf16_encode(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    MAP_BODY(n, dst[k] = bf16_of(src[k]));
}

SHS__KERNEL void shs__bf16_decode(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    MAP_BODY(n, dst[k] = f32_of(src[k]));
}

SHS__KERNEL void shs__bf16_round(float *buf, size_t n)
{
    MAP_BODY(n, buf[k] = f32_of(bf16_of(buf[k])));
}

SHS__KERNEL void shs__reduce_sum_bf16(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    MAP_BODY(n, dst[k] += f32_of(src[k]));
}

SHS__KERNEL void shs__reduce_sum_scale_bf16(float *restrict dst, const uint16_t *restrict src,
                                            size_t n, float scale)
{
    MAP_BODY(n, dst[k] = (dst[k] + f32_of(src[k])) * scale);
}

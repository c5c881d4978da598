/*
 * Reduction kernels of the collectives: dst[i] = dst[i] + src[i], and the
 * same followed by a multiplication (the last step of an average). dst and
 * src must not overlap. Vectorized by the compiler (SSE2 everywhere, AVX2
 * chosen at load time on x86-64 CPUs that have it); see reduce.c.
 */
#ifndef SHS_ALGORITHMS_REDUCE_H
#define SHS_ALGORITHMS_REDUCE_H

#include <stddef.h>
#include <stdint.h>

void shs__reduce_sum_f32(float *restrict dst, const float *restrict src, size_t n);
void shs__reduce_sum_scale_f32(float *restrict dst, const float *restrict src, size_t n,
                               float scale);
void shs__reduce_sum_f64(double *restrict dst, const double *restrict src, size_t n);
void shs__reduce_sum_scale_f64(double *restrict dst, const double *restrict src, size_t n,
                               double scale);

/* bfloat16 on the wire (collective.h, SHS_WIRE_BF16): the top 16 bits of a
 * float32, rounded to nearest, ties to even; NaN stays NaN (quiet), and
 * values within half a bf16 step of FLT_MAX and beyond round to infinity,
 * as in every bf16 implementation. Encoding, decoding and rounding a float
 * in place (encode then decode) are exact inverses on bf16 values. */
void shs__bf16_encode(uint16_t *restrict dst, const float *restrict src, size_t n);
void shs__bf16_decode(float *restrict dst, const uint16_t *restrict src, size_t n);
void shs__bf16_round(float *buf, size_t n);
/* dst[i] += decode(src[i]), and the same followed by a multiplication. */
void shs__reduce_sum_bf16(float *restrict dst, const uint16_t *restrict src, size_t n);
void shs__reduce_sum_scale_bf16(float *restrict dst, const uint16_t *restrict src, size_t n,
                                float scale);

#endif

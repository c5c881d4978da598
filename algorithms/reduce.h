/*
 * Reduction kernels of the collectives: dst[i] = dst[i] + src[i], and the
 * same followed by a multiplication (the last step of an average). dst and
 * src must not overlap. Vectorized by the compiler (SSE2 everywhere, AVX2
 * chosen at load time on x86-64 CPUs that have it); see reduce.c.
 */
#ifndef SHS_ALGORITHMS_REDUCE_H
#define SHS_ALGORITHMS_REDUCE_H

#include <stddef.h>

void shs__reduce_sum_f32(float *restrict dst, const float *restrict src, size_t n);
void shs__reduce_sum_scale_f32(float *restrict dst, const float *restrict src, size_t n,
                               float scale);
void shs__reduce_sum_f64(double *restrict dst, const double *restrict src, size_t n);
void shs__reduce_sum_scale_f64(double *restrict dst, const double *restrict src, size_t n,
                               double scale);

#endif

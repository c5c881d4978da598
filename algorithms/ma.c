/*
 * Model averaging (MA), the rule of S-MA and FR-MA:
 *
 *     result = (1/m) * sum over the m members of the round's group of their
 *              round-r snapshots (the own snapshot included)
 *
 * The members are summed in ascending rank order on every member, so a group
 * computes one bitwise-identical mean and the sum over the group is
 * conserved (up to one rounding of the scale).
 */
#include "algorithms/rules.h"

void shs__vec_add(float *restrict acc, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += x[i];
}

void shs__vec_scale(float *acc, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] *= s;
}

void shs__ma_mean(float *restrict out, const float *const *xs, int m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = xs[0][i];
    for (int k = 1; k < m; k++)
        shs__vec_add(out, xs[k], n);
    shs__vec_scale(out, 1.0f / (float)m, n);
}

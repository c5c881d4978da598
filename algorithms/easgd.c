/*
 * Elastic averaging SGD (EASGD, Zhang, Choromanska and LeCun 2015), the rule
 * of S-EASGD and FR-EASGD. A center model c is sharded over the ranks (rank
 * k owns one contiguous slice, as the paper's sync parameter servers own
 * shards). Each round a rank reads the center slices, and with its snapshot w:
 *
 *     d = alpha * (w - c)
 *     w = w - d                     (applied to the live model)
 *     c = c + d                     (by the owner of each slice, on receipt)
 *
 * The sum of all replicas plus the center is conserved by construction:
 * every d that moves a replica also moves the center, whenever it arrives.
 */
#include "algorithms/rules.h"

void shs__easgd_diff(float *restrict d, const float *restrict w, const float *restrict c,
                     float alpha, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = alpha * (w[i] - c[i]);
}

void shs__easgd_center_apply(float *restrict c, const float *restrict d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c[i] += d[i];
}

float shs__easgd_default_alpha(int nranks)
{
    return 0.5f / (float)(nranks > 0 ? nranks : 1);
}

void shs__easgd_slice(size_t count, int nranks, int k, size_t *off_p, size_t *len_p)
{
    size_t base = count / (size_t)nranks, extra = count % (size_t)nranks;
    size_t kk = (size_t)k;
    *off_p = kk * base + (kk < extra ? kk : extra);
    *len_p = base + (kk < extra ? 1 : 0);
}

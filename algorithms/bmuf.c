/*
 * Blockwise model-update filtering (BMUF, Chen and Huo 2016), the rule of
 * S-BMUF and FR-BMUF. The shadow thread keeps a global model w_g and a block
 * momentum D; each round, with mean = the MA mean of the group's snapshots:
 *
 *     G   = mean - w_g              (the block's "gradient")
 *     D   = eta * D + zeta * G      (block momentum, eta; block learning rate, zeta)
 *     w_g = w_g + D
 *     result = w_g + eta * D        (Nesterov look-ahead; w_g without it)
 *
 * and the result is applied to the live model as a delta against the
 * round's snapshot. eta = 0, zeta = 1 without Nesterov is plain MA.
 */
#include "algorithms/rules.h"

shs__bmuf_coef_t shs__bmuf_defaults(int nranks)
{
    shs__bmuf_coef_t c;
    c.eta = nranks > 1 ? 1.0f - 1.0f / (float)nranks : 0.0f;
    c.zeta = 1.0f;
    c.nesterov = true;
    return c;
}

void shs__bmuf_step(float *restrict wg, float *restrict D, const float *mean, float *out,
                    size_t n, const shs__bmuf_coef_t *coef)
{
    const float eta = coef->eta, zeta = coef->zeta;
    if (coef->nesterov) {
        for (size_t i = 0; i < n; i++) {
            float g = mean[i] - wg[i];
            float d = eta * D[i] + zeta * g;
            D[i] = d;
            wg[i] += d;
            out[i] = wg[i] + eta * d;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float g = mean[i] - wg[i];
            float d = eta * D[i] + zeta * g;
            D[i] = d;
            wg[i] += d;
            out[i] = wg[i];
        }
    }
}

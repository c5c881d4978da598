/*
 * Blockwise model-update filtering (BMUF, Chen and Huo 2016), the rule of
 * S-BMUF and FR-BMUF. The shadow thread keeps w_g, the model it last gave
 * the ranks (the start of the current block), and a block momentum D; each
 * round, with mean = the MA mean of the group's snapshots:
 *
 *     G   = mean - w_g              (the block's progress from where it started)
 *     D   = eta * D + zeta * G      (block momentum, eta; block learning rate, zeta)
 *     result = w_g + D              (+ eta * D: Nesterov look-ahead)
 *     w_g = result
 *
 * and the result is applied to the live model as a delta against the
 * round's snapshot. G is measured from the model the ranks were given, the
 * look-ahead included (as CNTK's BMUF keeps its "previous parameters"):
 * measured from w_g without it, every block's G would hold the previous
 * look-ahead again, D would grow by eta * (1 + zeta) per round (1.5 with 4
 * ranks: seen diverging, NE 7.7) even with no progress at all. eta = 0,
 * zeta = 1 without Nesterov is plain MA.
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
    const float ahead = coef->nesterov ? 1.0f + eta : 1.0f;
    for (size_t i = 0; i < n; i++) {
        float g = mean[i] - wg[i];
        float d = eta * D[i] + zeta * g;
        D[i] = d;
        wg[i] += ahead * d;
        out[i] = wg[i];
    }
}

/*
 * Applying a round's result to a model that Hogwild workers keep writing:
 * w = result + (w - snapshot), so the progress made during the round is kept.
 * See shs__delta_apply in rules.h for the exact race that remains.
 */
#include "algorithms/rules.h"

void shs__delta_apply(float *w, const float *restrict result, const float *restrict snap,
                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        w[i] = result[i] + (w[i] - snap[i]);
}

void shs__delta_apply_sub(float *w, const float *restrict d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        w[i] -= d[i];
}

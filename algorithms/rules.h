/*
 * Internal: the averaging rules of the shadow engine (MA, BMUF, EASGD) and
 * the delta application, as pure functions on float32 vectors. No I/O, no
 * allocation, no transport: the engine (algorithms/shadow/) feeds them
 * chunks of the snapshots it pulled, and the unit tests feed them
 * hand-computed vectors.
 *
 * Every function is thread-safe in the sense that it touches only its
 * arguments. Vectors marked restrict must not overlap.
 */
#ifndef SHS_ALGORITHMS_RULES_H
#define SHS_ALGORITHMS_RULES_H

#include <stdbool.h>
#include <stddef.h>

/* ------------------------------------------------------------------ MA */

/* acc[i] += x[i]. The engine sums a group's members in ascending rank order
 * so that every member of a group computes the bitwise same mean. */
void shs__vec_add(float *restrict acc, const float *restrict x, size_t n);

/* acc[i] *= s */
void shs__vec_scale(float *acc, float s, size_t n);

/* MA: out = (x_0 + x_1 + ... + x_{m-1}) * (1/m), summed in the order given.
 * m >= 1; out may alias none of xs. */
void shs__ma_mean(float *restrict out, const float *const *xs, int m, size_t n);

/* ---------------------------------------------------------------- BMUF */

typedef struct shs__bmuf_coef {
    float eta;     /* block momentum */
    float zeta;    /* block learning rate */
    bool nesterov; /* also move by the look-ahead eta*D */
} shs__bmuf_coef_t;

/* BMUF defaults for n ranks: eta = 1 - 1/n, zeta = 1, Nesterov on (Chen and
 * Huo, 2016). n = 1 gives eta = 0 (plain averaging of a single model). */
shs__bmuf_coef_t shs__bmuf_defaults(int nranks);

/* The shadow thread's default block momentum is at most this, without the
 * look-ahead. Its result reaches the workers one round after its snapshot
 * (they train on meanwhile), a delayed feedback: in a scalar model where the
 * workers cover a fraction c of the way to the optimum per round, that loop
 * is stable for every c <= 1 only up to eta ~0.7 (0.45 with the look-ahead),
 * while the foreground rule is stable at 0.75 with it. Measured (4 ranks, CTR
 * trainer, averaged model's eval NE): 0.75 with look-ahead > 1 (diverged),
 * 0.75 without 0.8547 (worse than no sync, 0.8436), 0.5 without 0.8327 (FR-BMUF
 * 0.8337), 0.25 without 0.8350. */
#define SHS__BMUF_BG_ETA_MAX 0.5f

/* One BMUF block update, in place (w_g: the result of the previous block,
 * the model the ranks started this block from):
 *     G   = mean - w_g
 *     D   = eta * D + zeta * G
 *     w_g = w_g + D + eta * D   (Nesterov)   or   w_g + D
 *     out = w_g
 * out may alias mean (the engine reuses the mean buffer for the result). */
void shs__bmuf_step(float *restrict wg, float *restrict D, const float *mean, float *out,
                    size_t n, const shs__bmuf_coef_t *coef);

/* --------------------------------------------------------------- EASGD */

/* Worker side of one elastic step against the center c:
 *     d = alpha * (w - c)
 * The caller then moves its model by -d (shs__delta_apply_sub) and sends d
 * to the owner of the center slice, which applies c += d
 * (shs__easgd_center_apply). */
void shs__easgd_diff(float *restrict d, const float *restrict w, const float *restrict c,
                     float alpha, size_t n);

/* Owner side: c += d (a sum: the owner applies the d of every rank). */
void shs__easgd_center_apply(float *restrict c, const float *restrict d, size_t n);

/* Default alpha for n ranks: 0.5 / n, so that one round of all ranks moves
 * the center at most half way to their mean (the elastic force beta = n *
 * alpha of Zhang et al. 2015 is 0.5, inside their stability bound). */
float shs__easgd_default_alpha(int nranks);

/* The center slice rank k of n owns out of count elements: [*off_p, *off_p
 * + *len_p). Slices are contiguous, differ in length by at most one, and
 * cover [0, count). */
void shs__easgd_slice(size_t count, int nranks, int k, size_t *off_p, size_t *len_p);

/* --------------------------------------------------- delta application */

/* Apply a round's result to the live model w as a delta against the
 * snapshot the round started from:
 *     w[i] = result[i] + (w[i] - snap[i])
 * Whatever the workers added to w[i] since the snapshot (w[i] - snap[i]) is
 * kept; when nothing changed, w[i] becomes exactly result[i]. w is being
 * written by Hogwild workers: each element is read once and written once,
 * so a worker write that lands between those two instructions is lost (the
 * usual Hogwild race, a window of a few nanoseconds per element); and a
 * worker's own read-modify-write that straddles our write puts back the
 * old value plus its step, losing this round's move for that element
 * (either sign). Every other concurrent write is kept. */
void shs__delta_apply(float *w, const float *restrict result, const float *restrict snap,
                      size_t n);

/* w[i] -= d[i], element by element, for rules that produce the move itself
 * (EASGD); same concurrency as shs__delta_apply. */
void shs__delta_apply_sub(float *w, const float *restrict d, size_t n);

#endif

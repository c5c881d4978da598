/*
 * Batches of row ids for the embedding benchmarks (shs-emb-bench and its
 * peers): uniform, or zipfian over the rows scattered across the table, from
 * a seed, so that every tool of a side-by-side run asks for the same rows.
 */
#ifndef SHS_TOOLS_IDGEN_H
#define SHS_TOOLS_IDGEN_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct idgen {
    uint64_t rows;
    bool zipf;
    double s;       /* zipf exponent */
    uint64_t state; /* xorshift64, never 0 */
} idgen_t;

static inline void idgen_init(idgen_t *g, uint64_t rows, bool zipf, double s, uint64_t seed)
{
    g->rows = rows;
    g->zipf = zipf;
    g->s = s;
    g->state = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    if (g->state == 0)
        g->state = 1;
}

static inline uint64_t idgen_u64(idgen_t *g)
{
    g->state ^= g->state << 13;
    g->state ^= g->state >> 7;
    g->state ^= g->state << 17;
    return g->state;
}

/* Zipf(s) over ranks 1..rows by inversion of the continuous approximation
 * of its CDF, the rank then scattered over the table by a multiplicative
 * hash so that the hot rows fall on every shard. */
static inline uint64_t idgen_next(idgen_t *g)
{
    double u = (double)(idgen_u64(g) >> 11) * (1.0 / 9007199254740992.0);
    if (!g->zipf)
        return (uint64_t)(u * (double)g->rows);
    double k = (double)g->rows, a = 1.0 - g->s, r;
    if (fabs(a) < 1e-9)
        r = exp(u * log(k + 1.0)) - 1.0;
    else
        r = pow(u * (pow(k + 1.0, a) - 1.0) + 1.0, 1.0 / a) - 1.0;
    uint64_t rank = r < 0.0 ? 0 : (uint64_t)r >= g->rows ? g->rows - 1 : (uint64_t)r;
    return (rank * 0x9e3779b97f4a7c15ull) % g->rows;
}

/* The seed of worker t of rank `rank` in a run seeded with `seed`. */
static inline uint64_t idgen_seed(uint64_t seed, int rank, int t)
{
    return seed * 1000003u + (uint64_t)rank * 131u + (uint64_t)t + 1;
}

#endif

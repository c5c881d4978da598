/*
 * Internal: a worker's cache of hot remote rows (embedding.h, Cache), with
 * no transport in it so that the host unit tests cover it.
 *
 * Set-associative (4 ways), one per worker (a worker is one thread: no
 * locks). Admission by frequency, TinyLFU-style: every probe counts its id
 * in a count-min sketch (4 rows of 8-bit counters, halved every
 * 8 x capacity probes so that old heat fades), and a fetched row takes a
 * full set's way only when its id is counted more often than the way's.
 * Staleness is bounded in this worker's lookups: a row cached at lookup t
 * is served up to lookup t + max_age - 1, then fetched again. Each entry
 * also keeps the rank-wide update epoch of its id at the time its fetch
 * was posted: this rank's own updates bump it (emb.h), so a row this rank
 * changed is fetched again at once.
 *
 * Rows are copied whole, check word included (stride floats), after the
 * fetch verified them. Building, probing and offering allocate nothing.
 */
#ifndef SHS_ALGORITHMS_EMBEDDING_CACHE_H
#define SHS_ALGORITHMS_EMBEDDING_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

#define SHS__EMB_CACHE_WAYS 4
#define SHS__EMB_CACHE_SKETCH_ROWS 4

typedef struct shs__emb_cache {
    uint32_t capacity;  /* rows (sets x ways); 0: off */
    uint32_t set_mask;  /* sets - 1 (sets a power of two) */
    size_t stride;      /* floats per cached row */
    uint32_t max_age;   /* lookups a cached row is served for */
    uint64_t *id;       /* per way: the row's id, UINT64_MAX when empty */
    uint64_t *born;     /* per way: the lookup it was fetched for */
    uint32_t *epoch;    /* per way: the id's update epoch when its fetch was posted */
    float *rows;        /* per way: stride floats */
    uint8_t *sketch;    /* SKETCH_ROWS x (sketch_mask + 1) counters */
    uint32_t sketch_mask;
    uint64_t probes_since_halving;
    /* counters */
    uint64_t hits, misses, expired, admitted, rejected, evicted, hit_age_sum;
} shs__emb_cache_t;

/* capacity rows rounded up to a multiple of the ways (and sets to a power
 * of two); capacity 0 leaves the cache off and allocates nothing.
 * SHS_ERR_INVALID_ARG for stride 0, max_age 0 or capacity > 2^28;
 * SHS_ERR_NO_MEMORY. */
shs_status_t shs__emb_cache_init(shs__emb_cache_t *c, uint32_t capacity, size_t stride,
                                 uint32_t max_age);
void shs__emb_cache_fini(shs__emb_cache_t *c);

/* The bytes init allocates for a capacity (for the memory check). */
size_t shs__emb_cache_bytes(uint32_t capacity, size_t stride);

/* Lookup `now` asks for id, whose update epoch is `epoch`: the cached row
 * when it is fresh, else NULL (a miss, or an expired or changed row). */
const float *shs__emb_cache_get(shs__emb_cache_t *c, uint64_t id, uint64_t now,
                                uint32_t epoch);

/* A fetched, whole row of id (stride floats), fetched for lookup `born`
 * with the id's epoch at the time: kept if admission lets it in. */
void shs__emb_cache_offer(shs__emb_cache_t *c, uint64_t id, const float *row, uint64_t born,
                          uint32_t epoch);

/* Every row goes (a load replaced them); the sketch's counts stay. */
void shs__emb_cache_clear(shs__emb_cache_t *c);

/* The sketch's estimate of how often id was asked for lately. */
uint32_t shs__emb_cache_freq(const shs__emb_cache_t *c, uint64_t id);

#endif

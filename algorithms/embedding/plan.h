/*
 * Internal: the pure pieces of the sharded embedding tables (issue 16),
 * with no transport in them so that the host unit tests cover them:
 *   - the layout: which shard holds a row and where (row-wise modulo or
 *     contiguous ranges), and back, which is also how a saved table is
 *     re-sharded on load;
 *   - deterministic initialization by row id (the same table whatever the
 *     number of shards);
 *   - the owners' optimizers on one row (SGD, row-wise Adagrad);
 *   - the batch plan: a batch of ids deduplicated and packed per owner
 *     (sorted by local row, so that adjacent rows coalesce), the scatter of
 *     the fetched rows back to the batch's order, pooling, and the sum of
 *     the row gradients of repeated ids.
 *
 * A plan is allocated once for a maximum batch (shs__emb_plan_init) and
 * reused: building it allocates nothing. One plan per thread; the layout is
 * read-only after init and may be shared.
 */
#ifndef SHS_ALGORITHMS_EMBEDDING_PLAN_H
#define SHS_ALGORITHMS_EMBEDDING_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

typedef enum shs__emb_map {
    SHS__EMB_MAP_MODULO = 0, /* row r on shard r % S, local row r / S */
    SHS__EMB_MAP_RANGE = 1,  /* contiguous ranges; the first rows % S shards hold one more */
} shs__emb_map_t;

typedef struct shs__emb_layout {
    uint64_t rows;
    uint32_t shards;
    shs__emb_map_t map;
    uint64_t base;  /* RANGE: rows / shards */
    uint64_t extra; /* RANGE: rows % shards */
} shs__emb_layout_t;

/* SHS_ERR_INVALID_ARG for rows == 0, shards == 0 or an unknown map. */
shs_status_t shs__emb_layout_init(shs__emb_layout_t *l, uint64_t rows, uint32_t shards,
                                  shs__emb_map_t map);

/* The shard that holds `row` (< rows) and its index there. */
void shs__emb_locate(const shs__emb_layout_t *l, uint64_t row, uint32_t *shard_p,
                     uint64_t *local_p);

/* Rows held by `shard`, and the global row of (shard, local): the inverse
 * of shs__emb_locate. */
uint64_t shs__emb_shard_rows(const shs__emb_layout_t *l, uint32_t shard);
uint64_t shs__emb_global_row(const shs__emb_layout_t *l, uint32_t shard, uint64_t local);

/* A row's initial values: shs_emb_init_row (embedding.h). */

/* w -= lr * g */
void shs__emb_sgd_row(float *restrict w, const float *restrict g, uint32_t dim, float lr);

/* Row-wise Adagrad (as FBGEMM's): one accumulator per row,
 *     state += mean(g^2);  w -= lr * g / (sqrt(state) + eps) */
void shs__emb_adagrad_row(float *restrict w, const float *restrict g, uint32_t dim, float lr,
                          float eps, float *state);

typedef struct shs__emb_plan {
    const shs__emb_layout_t *layout;
    uint32_t cap;   /* the most ids a batch may carry */
    uint32_t nuniq; /* distinct ids of the batch */
    /* Per distinct id, packed by owner and, within an owner, by local row:
     * owner o's ids are [owner_start[o], owner_start[o + 1]). */
    uint64_t *row;
    uint64_t *local;
    uint32_t *owner_start; /* layout->shards + 1 */
    /* per owner: the end of its rows to fetch, [owner_start[o], fetch_end[o]);
     * owner_start[o + 1] unless shs__emb_plan_split set cached rows apart */
    uint32_t *fetch_end;
    /* Per id of the batch: its distinct id's packed index. */
    uint32_t *slot;
    /* scratch: open-addressing table stamped with a generation, so that it
     * never needs clearing, and the first-seen order */
    uint32_t hmask, gen;
    uint64_t *hkey;
    uint32_t *hval, *hgen;
    uint64_t *seen;
    uint32_t *remap, *count;
} shs__emb_plan_t;

/* SHS_ERR_INVALID_ARG for cap == 0 or cap > 2^30; SHS_ERR_NO_MEMORY. */
shs_status_t shs__emb_plan_init(shs__emb_plan_t *p, const shs__emb_layout_t *l, uint32_t cap);
void shs__emb_plan_fini(shs__emb_plan_t *p);

/* Plan a batch of n ids. SHS_ERR_INVALID_ARG with *bad_p = the position of
 * the first id >= rows, or with *bad_p = UINT32_MAX when n > cap; on an
 * error the plan holds no batch (nuniq 0). */
shs_status_t shs__emb_plan_build(shs__emb_plan_t *p, const uint64_t *ids, uint32_t n,
                                 uint32_t *bad_p);

/* Owner o's planned ids with hit[i] != 0 (hit per packed index, for i in
 * o's range) move to the end of its range, the others stay at its start
 * in their order (still sorted by local row), and fetch_end[o] ends them;
 * the batch's n slots follow. Afterwards remap[i] is where packed index i
 * went, for i in o's range. */
void shs__emb_plan_split(shs__emb_plan_t *p, uint32_t o, const uint8_t *hit, uint32_t n);

/* The longest run of owner o's planned ids to fetch (below fetch_end[o]),
 * starting at packed index i, whose local rows are consecutive (one READ
 * can fetch them), at most max_rows. */
uint32_t shs__emb_plan_run(const shs__emb_plan_t *p, uint32_t o, uint32_t i, uint32_t max_rows);

/* out[k] = packed[slot[k]] for the batch's n ids (rows of dim floats in
 * out; packed row u at packed + u * stride, stride >= dim). */
void shs__emb_plan_scatter(const shs__emb_plan_t *p, const float *packed, size_t stride,
                           uint32_t dim, uint32_t n, float *out);

/* Pooling: bag b is ids [offsets[b], offsets[b + 1]); out[b] = the sum of
 * its rows, or their mean (mean != 0; an empty bag gives zeros). */
void shs__emb_plan_pool(const shs__emb_plan_t *p, const float *packed, size_t stride,
                        uint32_t dim, const uint32_t *offsets, uint32_t nbags, int mean, float *out);

/* packed[u] = the sum of grads[k] over the ids k with slot u, added in the
 * batch's order (rows of dim floats; packed holds nuniq rows). */
void shs__emb_plan_sum(const shs__emb_plan_t *p, const float *grads, uint32_t dim, uint32_t n,
                       float *packed);

/* SHS_EMB_OWNER_READS auto (calibrate.c): the READs that cost as much as
 * one owner-path request, from `reads` READs timed at read_ns in all and
 * one request at owner_ns; 1 .. 2^20. */
uint32_t shs__emb_owner_reads_from(uint64_t read_ns, uint32_t reads, uint64_t owner_ns);

#endif

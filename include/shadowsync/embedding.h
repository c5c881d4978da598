/*
 * shadowsync: sharded embedding tables (model parallel).
 *
 * A table of `rows` rows of `dim` float32 values is split into shards, one
 * per holder rank (every rank, or the ranks the program names: embedding
 * servers). Rows map to shards row-wise modulo (row r on holder r % S) or
 * in contiguous ranges. Each row starts from values drawn from (seed, row)
 * alone (shs_emb_init_row, below, says exactly how), so the table is the
 * same whatever the number of shards.
 *
 * Workers. A table is used through workers: shs_emb_create makes
 * `workers` of them, each with its own endpoint (context.h), to hand one to
 * each thread that looks rows up or sends gradients. Workers of one table
 * share no lock; each worker is driven by one thread at a time.
 *
 * Lookup. shs_emb_lookup(worker, ids, n, out) packs the rows of n ids into
 * out (n x dim floats, in the order of ids). Repeated ids are fetched once;
 * rows of this rank's shard are copied; rows of other holders come either
 *   - READ path: one-sided RDMA READs straight out of the holder's shard
 *     (adjacent rows in one READ, many in flight), no holder CPU; or
 *   - owner path: the worker writes the ids to the holder's inbox and the
 *     holder's apply thread writes the packed rows back (two messages per
 *     holder per batch; holder CPU spent). On a device that moves few
 *     messages per second (Soft-RoCE) this wins for many rows per holder.
 * The path is a per-table parameter. SHS_EMB_PATH_AUTO picks per call and
 * holder: the owner path once the rows would take more READs than
 * SHS_EMB_OWNER_READS (default 3; auto measures it on the device at create:
 * a few timed lookups of each path on every rank, the median of the ranks'
 * figures; the value used is in shs_emb_stats). See docs/design.md.
 * shs_emb_lookup_start / shs_emb_lookup_wait split the call so that a
 * worker overlaps the next batch's lookup with its compute.
 *
 * Update. shs_emb_update(worker, ids, n, grads) sums the gradient rows of
 * repeated ids, packs them per holder and writes them into the holder's
 * inbox; the holder's apply thread applies each update once, with the
 * table's optimizer (SGD, or row-wise Adagrad as FBGEMM's), Hogwild on the
 * rows. Every update of a row goes through its holder's apply thread, this
 * rank's own rows included, so updates of one row never race each other.
 * A worker has at most `slots` updates in flight per holder (resolved at
 * create, shs_emb_stats): past that, update waits for the holder
 * (back-pressure, never a drop), bounded by the op timeout. Small batches
 * want many slots: the slots hide the round trip to the holder's apply
 * thread (on Soft-RoCE, dim 64 and batches of 64 ids over 4 ranks: 4 slots
 * left the workers waiting 57 % of the time, 16 slots 2 %).
 *
 * Consistency. A lookup returns each row whole, as its holder's memory had
 * it between two of the holder's updates at some moment during the call:
 * never a row mixing old and new values, never a float torn within its
 * bytes, on every path (READ, owner, auto, and rows of this rank's own
 * shard). Updates still in flight (sent, not applied) are not in it:
 * behind by at most the updates in flight, per worker and holder `slots`
 * batches (Hogwild: stale, never invented). shs_emb_flush(worker) returns
 * once every update this worker sent has been applied; after every
 * worker's flush and a barrier, lookups see every update.
 *
 * Row checks. Every row carries a 64-bit check word (XXH3 of its bytes)
 * that the holder's apply thread writes after each update of the row. A
 * copy of a row (a READ, or this rank's own shard) whose word does not
 * match is made again (torn_retries in the stats); a remote row still
 * torn after SHS_EMB_READ_TRIES reads (default 64) is asked of its holder,
 * whose apply thread copies it whole (torn_fallbacks); an own-shard row
 * is copied again until it is whole, at most the op timeout
 * (SHS_ERR_TIMEOUT). The words cost 8 bytes a row (rows are padded to 8
 * bytes) in the shard and on the wire.
 *
 * Cache (off by default). With cache_rows > 0 (or SHS_EMB_CACHE_ROWS)
 * each worker keeps up to that many rows of other holders, whole (checked
 * as above before they are kept), and serves a lookup's rows from it
 * instead of fetching them: 4-way sets, admission by frequency (a row
 * takes a full set's place only when it was asked for more often lately
 * than the row it replaces). Staleness is bounded: a row is served for at
 * most cache_age of this worker's lookups (SHS_EMB_CACHE_AGE, default 16)
 * since the lookup that fetched it, then fetched again; and an update of
 * a row by any worker of this rank makes the rank's workers fetch it
 * again at once (SHS_EMB_CACHE_OWN=refetch, the default; =keep leaves the
 * cached copy until it is cache_age lookups old, Hogwild's staleness: a
 * trainer updates the rows it reads, so only keep lets its cache hit).
 * Updates still go to the holders, and other ranks'
 * updates reach a cached row only when it is fetched again: with the
 * cache, a lookup after every worker's flush and a barrier can still
 * return a row up to cache_age lookups old. shs_emb_load empties every
 * cache. Rows of this rank's own shard are never cached. Stats: hits,
 * misses, expired rows, admissions and rejections, the mean age of a hit.
 * Memory: per worker about cache_rows x (dim x 4 + 32) bytes; create
 * refuses (SHS_ERR_CONFIG) a cache the machine's available memory cannot
 * hold twice over.
 *
 * Failures. A holder that dies makes lookups and updates of its rows fail
 * with SHS_ERR_PEER_FAILED (within the op timeout, never a hang); the rest
 * of the table keeps working and the stats count the failures. Its rows
 * come back when the rank rejoins the running job (context.h, SHS_REJOIN)
 * and makes the table again: its shard is loaded from the save named by
 * rejoin_dir (the rows as they were saved: updates since are lost), and
 * each worker takes it back at its next call. Updates sent to the dead
 * process and not applied are lost: the next shs_emb_flush returns
 * SHS_ERR_PEER_FAILED for them. A rejoined rank's own workers send to each
 * holder once that holder's apply thread took them back.
 *
 * Bad input (an id >= rows, a NULL buffer, a batch above max_batch) is
 * refused with SHS_ERR_INVALID_ARG before anything is sent or changed.
 *
 * Memory. Beyond its shard (rows x dim x 4 / holders, and 4 bytes a row
 * for Adagrad), a holder keeps an inbox of ranks x workers x slots slots,
 * and every rank per worker a buffer of max_batch rows plus holders x slots
 * send slots; a slot holds max_batch x (8 + dim x 4) bytes.
 * This does not grow with rows: keep max_batch to the batches you use.
 */
#ifndef SHADOWSYNC_EMBEDDING_H
#define SHADOWSYNC_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/context.h>
#include <shadowsync/defs.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shs_emb shs_emb_t;
typedef struct shs_emb_worker shs_emb_worker_t;

typedef enum shs_emb_map {
    SHS_EMB_MAP_MODULO = 0, /* row r on holder r % S (default) */
    SHS_EMB_MAP_RANGE = 1   /* contiguous ranges of rows / S (+1) rows */
} shs_emb_map_t;

typedef enum shs_emb_optimizer {
    SHS_EMB_OPT_SGD = 0,     /* w -= lr * g (default) */
    SHS_EMB_OPT_ADAGRAD = 1  /* row-wise: s += mean(g^2); w -= lr * g / (sqrt(s) + eps) */
} shs_emb_optimizer_t;

typedef enum shs_emb_path {
    SHS_EMB_PATH_AUTO = 0,  /* per call: owner path when a holder is asked for many rows */
    SHS_EMB_PATH_READ = 1,  /* one-sided READs only */
    SHS_EMB_PATH_OWNER = 2  /* the holder's thread packs and writes the rows */
} shs_emb_path_t;

/* What a rank's own updates do to its workers' cached copies of the rows
 * (see Cache above). */
typedef enum shs_emb_cache_own {
    SHS_EMB_CACHE_OWN_KNOB = 0,    /* SHS_EMB_CACHE_OWN (default refetch) */
    SHS_EMB_CACHE_OWN_REFETCH = 1, /* fetched again: seen at once after the flush */
    SHS_EMB_CACHE_OWN_KEEP = 2     /* kept until cache_age lookups old (Hogwild) */
} shs_emb_cache_own_t;

/* Slots (updates and owner-path lookups in flight per worker and holder):
 * the fewest and most that shs_emb_params_t.slots and SHS_EMB_SLOTS take. */
#define SHS_EMB_SLOTS_MIN 1
#define SHS_EMB_SLOTS_MAX 64

enum {
    SHS_EMB_PARAM_MAP = 1u << 0,
    SHS_EMB_PARAM_HOLDERS = 1u << 1,
    SHS_EMB_PARAM_OPTIMIZER = 1u << 2,
    SHS_EMB_PARAM_LR = 1u << 3,
    SHS_EMB_PARAM_EPS = 1u << 4,
    SHS_EMB_PARAM_INIT = 1u << 5,     /* init_scale and seed */
    SHS_EMB_PARAM_MAX_BATCH = 1u << 6,
    SHS_EMB_PARAM_WORKERS = 1u << 7,
    SHS_EMB_PARAM_PATH = 1u << 8,
    SHS_EMB_PARAM_SLOTS = 1u << 9,
    SHS_EMB_PARAM_REJOIN_DIR = 1u << 10,
    SHS_EMB_PARAM_CACHE = 1u << 11     /* cache_rows, cache_age and cache_own */
};

typedef struct shs_emb_params {
    uint64_t field_mask;   /* SHS_EMB_PARAM_*: which optional fields are set */
    uint64_t rows;         /* required, >= 1 */
    uint32_t dim;          /* required, 1..4096 */
    shs_emb_map_t map;
    const int *holders;    /* ascending ranks that hold shards (default: all) */
    int nholders;
    shs_emb_optimizer_t optimizer;
    float lr;              /* default 0.01 */
    float eps;             /* Adagrad's, default 1e-8 */
    float init_scale;      /* rows start uniform in [-init_scale, init_scale); default 0.01 */
    uint64_t seed;         /* default 0 */
    uint32_t max_batch;    /* ids per lookup or update call, default 4096 */
    int workers;           /* workers made at create, default 1, at most 64 */
    shs_emb_path_t path;   /* default SHS_EMB_PATH_AUTO */
    int slots;             /* per worker and holder, SHS_EMB_SLOTS_MIN..MAX, or 0:
                              SHS_EMB_SLOTS (default auto: as many as fit 512 KiB,
                              4 to 32) */
    const char *rejoin_dir; /* on a rank that rejoined a running job: the save
                               (shs_emb_save) its shard is loaded from; ignored
                               on the others */
    uint32_t cache_rows;   /* per worker, rows of other holders cached (0: none; 0..2^28);
                              unset: SHS_EMB_CACHE_ROWS (default 0) */
    uint32_t cache_age;    /* lookups a cached row is served for, 1..10^6, or 0:
                              SHS_EMB_CACHE_AGE (default 16) */
    shs_emb_cache_own_t cache_own; /* default SHS_EMB_CACHE_OWN_KNOB */
} shs_emb_params_t;

/*
 * shs_emb_create - make a table. Collective: every rank of ctx calls it with
 * the same rows, dim, map, holders, optimizer, lr, eps, init_scale, seed,
 * max_batch, workers and path (a difference fails every rank with
 * SHS_ERR_SIZE_MISMATCH, logged with the fields), on the thread that drives ctx. Holders
 * allocate their shard in registered memory on the device's NUMA node
 * (hugepages when SHS_HUGEPAGES allows) and start the apply thread. *emb_p
 * is owned by the caller; shs_emb_destroy releases it.
 *
 * Every argument is checked on each rank before anything is sent: the same
 * bad argument on every rank gives every rank the same status and message;
 * a rank given other arguments fails every rank with SHS_ERR_SIZE_MISMATCH
 * (an invalid one: its own status there); docs/failures.md, "Bad arguments".
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL, rows 0 or beyond what can be
 * addressed, dim out of range, holders not ascending or out of range,
 * workers, slots, max_batch out of range, unknown enum, lr or eps not
 * positive); SHS_ERR_SIZE_MISMATCH; SHS_ERR_NO_MEMORY; SHS_ERR_NO_RESOURCE;
 * SHS_ERR_BAD_STATE (ctx is an endpoint); peer and timeout
 * statuses of the collective set-up.
 * On a rank that rejoined a running job (context.h, SHS_REJOIN), making the
 * tables the job made, in the job's order: not collective (the job's ranks
 * are not in the call), the parameters are not checked against the job's,
 * and the path auto does not measure (SHS_EMB_OWNER_READS or 3). A holder
 * loads its shard from rejoin_dir (SHS_EMB_PARAM_REJOIN_DIR) before any
 * peer can reach it: the load's errors (as shs_emb_load's) fail the create;
 * without rejoin_dir the shard starts from its initial rows (logged).
 * shs_emb_save and shs_emb_load work with it afterwards (they agree among
 * the living ranks); a table the job makes after the rejoin, with the
 * rejoined rank, is refused with SHS_ERR_UNSUPPORTED (its endpoints' set-up
 * goes over the bootstrap).
 */
SHS_API shs_status_t shs_emb_create(shs_ctx_t *ctx, const shs_emb_params_t *params,
                                    shs_emb_t **emb_p);

/*
 * shs_emb_destroy - stop the apply thread and release the table. Collective
 * (it waits at a barrier so that no peer still writes into this rank's
 * inboxes): every worker's thread must have returned from its last call.
 * Updates not flushed are lost. NULL is ignored.
 */
SHS_API void shs_emb_destroy(shs_emb_t *emb);

/* shs_emb_worker - worker i (0 .. workers-1) of the table, NULL when out of
 * range. The handle lives as long as the table. Thread-safe. */
SHS_API shs_emb_worker_t *shs_emb_worker(shs_emb_t *emb, int i);

/*
 * shs_emb_lookup - out[k * dim .. (k + 1) * dim) = row ids[k], k < n.
 * out_len is out's length in floats (>= n * dim). n may be 0.
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL, n > max_batch, out too
 * small, an id >= rows: logged with its position; nothing is sent);
 * SHS_ERR_BAD_STATE (a lookup started and not waited for);
 * SHS_ERR_PEER_FAILED (a holder of some asked row failed);
 * SHS_ERR_REMOTE_ACCESS / SHS_ERR_TRANSPORT (the completion error that
 * failed a holder, returned once); SHS_ERR_DEVICE; SHS_ERR_TIMEOUT (a
 * holder neither answered nor failed within the op timeout: this worker
 * asks it nothing more, as its answer could still land). On any error out
 * is left as it was.
 */
SHS_API shs_status_t shs_emb_lookup(shs_emb_worker_t *w, const uint64_t *ids, size_t n,
                                    float *out, size_t out_len);

/*
 * shs_emb_lookup_start / shs_emb_lookup_wait - the lookup in two halves:
 * start checks and plans the batch and posts its transfers; wait completes
 * them and packs the rows into out. ids may change after start returns.
 * One lookup at a time per worker; an update may be made between the two.
 * Status: as shs_emb_lookup; wait without a start is SHS_ERR_BAD_STATE; an
 * out too small for the started ids is SHS_ERR_INVALID_ARG from wait, after
 * the transfers completed (the lookup is then over).
 */
SHS_API shs_status_t shs_emb_lookup_start(shs_emb_worker_t *w, const uint64_t *ids, size_t n);
SHS_API shs_status_t shs_emb_lookup_wait(shs_emb_worker_t *w, float *out, size_t out_len);

/*
 * shs_emb_lookup_pooled - EmbeddingBag-style: bag b is ids [offsets[b],
 * offsets[b + 1]); out[b * dim ..] = the sum of its rows (mean != 0: their
 * mean; an empty bag gives zeros). offsets has nbags + 1 ascending entries,
 * offsets[0] = 0 and offsets[nbags] = n <= max_batch. Status: as lookup.
 */
SHS_API shs_status_t shs_emb_lookup_pooled(shs_emb_worker_t *w, const uint64_t *ids,
                                           const uint32_t *offsets, size_t nbags, int mean,
                                           float *out, size_t out_len);

/*
 * shs_emb_update - send the gradient rows grads[k * dim ..] of ids[k], k < n,
 * to the holders, to be applied with the table's optimizer. Returns once the
 * update is handed to the device (grads may be reused), not once applied.
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (as lookup; nothing is sent to any
 * holder); SHS_ERR_PEER_FAILED (a holder of some row failed) or
 * SHS_ERR_TIMEOUT (a holder applied nothing for the op timeout while this
 * worker waited for a free slot): in both cases the other holders' parts
 * were sent; SHS_ERR_REMOTE_ACCESS / SHS_ERR_TRANSPORT / SHS_ERR_DEVICE as
 * lookup.
 */
SHS_API shs_status_t shs_emb_update(shs_emb_worker_t *w, const uint64_t *ids, size_t n,
                                    const float *grads);

/*
 * shs_emb_flush - wait until every update this worker sent has been applied
 * by its holder. timeout_ms bounds the time without progress
 * (SHS_TIMEOUT_DEFAULT: the op timeout).
 * Status: SHS_OK; SHS_ERR_PEER_FAILED; SHS_ERR_TIMEOUT; SHS_ERR_INVALID_ARG.
 */
SHS_API shs_status_t shs_emb_flush(shs_emb_worker_t *w, int timeout_ms);

typedef struct shs_emb_stats {
    /* this rank's workers */
    uint64_t lookups;          /* lookup calls */
    uint64_t ids;              /* ids asked for */
    uint64_t dup_ids;          /* ids saved because repeated in a batch */
    uint64_t rows_local;       /* distinct rows copied from this rank's shard */
    uint64_t rows_read;        /* distinct rows fetched by READ */
    uint64_t rows_owner;       /* distinct rows written back by holders */
    uint64_t reads;            /* READ operations (adjacent rows share one) */
    uint64_t bytes_fetched;    /* row bytes from other holders */
    uint64_t updates;          /* update calls */
    uint64_t update_rows;      /* distinct rows sent in updates */
    uint64_t slot_waits;       /* times a worker waited for a holder's free slot */
    double slot_wait_ms;       /* time spent so */
    uint64_t peer_failures;    /* calls failed by a dead holder */
    /* this rank's apply thread (holders) */
    uint64_t applied_batches;  /* update messages applied */
    uint64_t applied_rows;
    uint64_t served_lookups;   /* owner-path requests answered */
    uint64_t served_rows;
    uint64_t apply_lag_max;    /* most update messages seen waiting at once */
    double apply_busy_ms;      /* time the apply thread spent applying and serving */
    /* memory of this rank */
    uint64_t shard_rows;       /* rows held here (0 for a non-holder) */
    uint64_t shard_bytes;      /* registered bytes of the shard */
    uint64_t state_bytes;      /* Adagrad's per-row state */
    uint64_t registered_bytes; /* every registered byte of the table (shard, inboxes, buffers) */
    uint32_t slots;            /* updates in flight per worker and holder (resolved) */
    uint32_t owner_reads;      /* path auto: a holder packs its rows past this many READs
                                  (SHS_EMB_OWNER_READS, or measured at create) */
    /* row checks (see Consistency above); this rank's workers */
    uint64_t torn_retries;     /* row copies that failed their check and were made again */
    uint64_t torn_fallbacks;   /* remote rows still torn after SHS_EMB_READ_TRIES reads,
                                  taken by the owner path */
    /* the hot-row cache (see Cache above); this rank's workers */
    uint32_t cache_rows;       /* per worker (resolved; rounded up to whole sets), 0: off */
    uint32_t cache_age;        /* lookups a cached row is served for */
    uint64_t cache_hits;       /* distinct rows of lookups served from the cache */
    uint64_t cache_misses;     /* remote rows not in the cache */
    uint64_t cache_expired;    /* remote rows in it but too old or updated here since */
    uint64_t cache_admitted;   /* fetched rows taken in */
    uint64_t cache_rejected;   /* fetched rows left out: asked for less than the incumbents */
    double cache_hit_age;      /* mean age of a hit, in lookups (0..cache_age - 1) */
    uint64_t cache_bytes;      /* memory of every worker's cache */
} shs_emb_stats_t;

/* shs_emb_stats - a snapshot of this rank's counters; thread-safe (relaxed
 * reads: the figures of one snapshot need not be of one instant). */
SHS_API shs_status_t shs_emb_stats(const shs_emb_t *emb, shs_emb_stats_t *stats_p);

/*
 * shs_emb_save - write the shards to directory dir (it must exist, shared by
 * the holders when they are on several hosts): one file per shard,
 * shard-<s>-of-<S>.emb, with rows, dim, mapping and the Adagrad state.
 * Every file of one save carries the same save id (128 random bits the
 * ranks agree on), the saving table's shape, holder set and optimizer,
 * and checksums (XXH3-64) of its header, its rows and its state, so that
 * shs_emb_load can tell a whole save from a mixed or damaged one
 * (docs/design.md, "Save format"). A save into a directory that holds one
 * of the same shard count replaces its files one by one: a crash midway
 * leaves a mix, which a load refuses.
 * Collective among the living ranks (a rejoined rank with them): it starts
 * with a barrier, so call it once every worker of every rank has flushed
 * (updates in flight are not in the save). Each rank returns its own
 * status, after a closing barrier.
 * Status: SHS_OK; SHS_ERR_IO (logged with the path); SHS_ERR_INVALID_ARG;
 * SHS_ERR_NO_MEMORY; SHS_ERR_PEER_FAILED (a holder has failed, or a rank is
 * gone: the ranks agree on it first and none writes its shard, since the
 * save could not be whole).
 */
SHS_API shs_status_t shs_emb_save(shs_emb_t *emb, const char *dir);

/*
 * shs_emb_load - replace the table's rows (and Adagrad state) with a save
 * made by a job with any number of holders and either mapping, of the same
 * rows and dim. Collective: it starts with a barrier, so every worker of
 * every rank must have flushed and none be in a call. Holders read the
 * whole save into staging copies and check every file (its header, that
 * it is the shard its name says and of the same save as shard 0, and the
 * checksums of its header, rows and state); the ranks exchange their
 * outcome, and either every holder takes the new rows or none does: on any
 * rank's refusal no rank's table changes, and every rank, holder or not,
 * returns the same status, that of the lowest-ranked rank that refused,
 * and logs its reason in the same words (the file, and for a checksum or a
 * truncation the byte range).
 * Status: SHS_OK; SHS_ERR_IO (a shard file missing, truncated or
 * unreadable); SHS_ERR_SIZE_MISMATCH (other rows or dim);
 * SHS_ERR_PROTOCOL (not a save of this format version, shard files
 * swapped or renamed, shards of different saves mixed, a checksum that
 * does not match: the data is damaged); SHS_ERR_UNSUPPORTED (Adagrad state
 * wanted, the save has none); SHS_ERR_NO_MEMORY (a holder could not stage
 * the save); SHS_ERR_PEER_FAILED (a holder is not among the living ranks).
 */
SHS_API shs_status_t shs_emb_load(shs_emb_t *emb, const char *dir);

/*
 * shs_emb_init_row - the initial values of row `row` of a table made with
 * (seed, init_scale = scale): what a fresh table holds, computed anywhere
 * (dim floats into out). Exactly, with mix64 splitmix64's finalizer
 * (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
 * z *= 0x94d049bb133111eb; z ^= z >> 31) and G = 0x9e3779b97f4a7c15, all
 * arithmetic modulo 2^64:
 *     key = mix64(seed ^ mix64(row + G))
 *     z_j = mix64(key + j * G)                     (column j)
 *     x_j = (float)((int32_t)(z_j >> 40) - 2^23) * 2^-23   (exact: [-1, 1))
 *     out[j] = x_j * scale                          (float32 product)
 * so every value lies in [-scale, scale) (for a subnormal scale, a value
 * that would round up to scale is the float just below it; scale 0 gives
 * zeros). Independent of the number of holders and the mapping.
 * Thread-safe; no status (out NULL does nothing).
 */
SHS_API void shs_emb_init_row(uint64_t seed, uint64_t row, float scale, float *out,
                              uint32_t dim);

#ifdef __cplusplus
}
#endif

#endif

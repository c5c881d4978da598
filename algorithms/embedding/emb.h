/*
 * Internal: the sharded embedding table's objects (embedding.h). Memory of
 * one rank, all registered on the context at create:
 *   shard   this holder's rows (uneven: non-holders hold none); peers READ it
 *   inbox   holders: one slot per (sender rank, worker, k < e->slots),
 *           written by the senders' workers: a message is a header, local row
 *           indices, gradient rows (updates) and a trailer stamp
 *   wbuf    per worker: the packed rows of a lookup, each with its check
 *           word, stride_bytes apart (READ destination, or where holders
 *           write owner-path answers), send staging per holder
 *           and slot, and the words holders write back: the last applied
 *           sequence and the last answered lookup, per holder
 *   srv     holders: the apply thread's sources for those words and its
 *           answer buffers
 * A message (worker w of rank r to holder o) carries sequence e = 1, 2, ...
 * per (r, w, o) and lands in slot (e - 1) % slots; the worker sends
 * e only when o has applied e - slots (its credit). The apply thread
 * takes (r, w)'s messages in order: header stamp, then trailer stamp (RC
 * places a WRITE's bytes in order, as on rxe and ConnectX), then the body;
 * it clears both stamps before it acknowledges e, so a slot's old stamps
 * never match again.
 *
 * Rejoins. A (worker, holder) pair's sequences belong to one process on
 * each side; when either rank rejoined (its incarnation on the endpoint
 * changed, transport/services.h) the pair starts again at e = 1:
 *   - the holder came back: the worker drops what it kept (last sent, ack
 *     and answer words; unacknowledged updates are lost and the next flush
 *     says so) and sends e = 1 to the new process's fresh inbox;
 *   - the worker came back: its ack words start at EMB_ACK_UNREADY and it
 *     sends nothing to holder o until o's apply thread, seeing the new
 *     incarnation, has cleared the sender's slots (the old process may have
 *     left a message there), set its expected sequence to 1 and written 0
 *     into the ack word. So no stamp of the old process is ever taken for
 *     one of the new.
 * A rejoined holder loads its shard from the save the program names before
 * it makes its endpoints, so no peer reads or updates it before the load.
 *
 * Row checks. RDMA READ is not atomic, not even per float, and the apply
 * thread updates rows in place while peers READ them (and while this rank's
 * workers copy its own rows). So every row carries a check word: XXH3-64 of
 * its dim floats seeded with the row's local index (emb_row_check). The
 * apply thread, the only writer of a shard, rewrites the word after each
 * update of the row (and load and init write it), so a copy made while the
 * row changed, whatever the order its bytes were read in, holds data and a
 * word that disagree (with probability 1 - 2^-64) and is read again: a
 * reader never needs the bytes in any order, only data and word together.
 * A remote row that fails SHS_EMB_READ_TRIES reads in a row comes from the
 * owner path (the apply thread copies it between its own updates). Owner-
 * path answers carry the word too, copied with the row by its one writer.
 */
#ifndef SHS_ALGORITHMS_EMBEDDING_EMB_H
#define SHS_ALGORITHMS_EMBEDDING_EMB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <shadowsync/embedding.h>
#include <shadowsync/region.h>
#include <shadowsync/rma.h>

#include "algorithms/embedding/cache.h"
#include "algorithms/embedding/plan.h"
#include "runtime/hash.h"

#define EMB_MAX_WORKERS 64
#define EMB_MAX_DIM 4096
#define EMB_MSG_UPDATE 1u
#define EMB_MSG_LOOKUP 2u
/* Stamps are the sequence number mixed with a constant per use, so that a
 * row index or gradient left in a slot never passes for one. */
#define EMB_HEAD_MAGIC 0x5348534548454144ull /* "SHSEHEAD" */
#define EMB_TAIL_MAGIC 0x534853455441494cull /* "SHSETAIL" */
#define EMB_ANSWER_MAGIC 0x5348534541534e57ull
#define EMB_HDR_BYTES 32u
#define EMB_ANSWER_BUFS 4 /* owner-path answers in flight per apply thread */
#define EMB_ACK_UNREADY UINT64_MAX /* a rejoined worker's ack word until the holder took it back */
enum { EMB_VIA_NONE = 0, EMB_VIA_LOCAL, EMB_VIA_READ, EMB_VIA_OWNER };

typedef struct emb_hdr {
    _Atomic uint64_t stamp; /* e ^ EMB_HEAD_MAGIC */
    uint32_t kind;
    uint32_t count;
    uint64_t answer_row;    /* lookup: packed index of row 0 in the asker's rows area */
    uint64_t reserved;
} emb_hdr_t;

_Static_assert(sizeof(emb_hdr_t) == EMB_HDR_BYTES, "message header size");

typedef struct emb_counters {
    _Atomic uint64_t lookups, ids, dup_ids, rows_local, rows_read, rows_owner, reads,
        bytes_fetched, updates, update_rows, slot_waits, slot_wait_ns, peer_failures,
        torn_retries, torn_fallbacks, cache_hits, cache_misses, cache_expired, cache_admitted,
        cache_rejected, cache_hit_age_sum;
} emb_counters_t;

struct shs_emb_worker {
    shs_emb_t *emb;
    int index;
    shs_ctx_t *ep;
    shs__emb_plan_t plan;     /* the lookup's (kept from start to wait) */
    shs__emb_plan_t uplan;    /* the update's, so an update between start and wait is safe */
    float *grads;             /* summed gradient rows of a batch (max_batch x dim) */
    uint32_t *torn;           /* packed indices of READ rows that failed their check */
    shs_rma_iov_t *iov;       /* a holder's READs of one lookup (max_batch) */
    bool *gone;               /* per holder: an answer timed out; late bytes could land */
    uint64_t *sent;           /* per holder: last sequence sent */
    uint64_t *answer_want;    /* per holder: the stamp an owner-path answer will carry */
    unsigned *holder_gen;     /* per holder: the incarnation sent and last acked are for */
    bool *lost;               /* per holder: updates lost with a dead incarnation, not yet
                                 reported by a flush */
    bool started;             /* a lookup between start and wait */
    uint8_t *via;             /* per holder: how this lookup's rows come (EMB_VIA_*) */
    size_t started_n;
    shs_status_t start_status;
    uint8_t force_via;        /* EMB_VIA_READ or _OWNER for every holder (calibrate.c) */
    /* the hot-row cache (cache.h; capacity 0: off, and the arrays NULL) */
    shs__emb_cache_t cache;
    uint64_t lookup_tick;     /* this worker's lookups: the cache's clock */
    uint64_t cache_gen;       /* e->cache_gen when the cache was last emptied */
    uint8_t *hit;             /* per packed index: served by the cache (max_batch) */
    const float **hit_src;    /* per packed index: the cached row */
    uint32_t *fetch_epoch;    /* per packed index: its id's update epoch when fetched */
    emb_counters_t c;
};

struct shs_emb {
    shs_ctx_t *ctx;
    int rank, size;
    uint64_t rows;
    uint32_t dim;
    shs_emb_optimizer_t opt;
    float lr, eps, init_scale;
    uint64_t seed;
    uint32_t max_batch;
    int nworkers;
    shs_emb_path_t path;
    unsigned read_tries;      /* SHS_EMB_READ_TRIES */
    uint32_t cache_rows;      /* per worker: SHS_EMB_CACHE_ROWS or the param (0: off) */
    uint32_t cache_age;       /* lookups a cached row is served for (SHS_EMB_CACHE_AGE) */
    bool cache_keep_own;      /* SHS_EMB_CACHE_OWN=keep: no epochs (e->epoch NULL) */
    _Atomic uint32_t *epoch;  /* with the cache: update epochs by id hash (emb_epoch) */
    _Atomic uint64_t *last_upd; /* per epoch: its last update, emb_upd_tag (0: none) */
    uint32_t epoch_mask;
    _Atomic uint64_t cache_gen; /* bumped by a load: every worker empties its cache */
    int op_timeout_ms;
    unsigned spin;
    uint32_t owner_reads;     /* SHS_EMB_OWNER_READS, or measured (calibrate.c) */
    bool owner_reads_auto;
    long apply_nap_ns;        /* SHS_EMB_APPLY_NAP_US */
    shs__emb_layout_t layout;
    int *holder_rank;         /* holder index -> rank */
    int *holder_of;           /* rank -> holder index, or -1 */
    int me;                   /* this rank's holder index, or -1 */

    size_t row_bytes;         /* dim floats: a gradient row, a row in a save */
    size_t stride_bytes;      /* a row in the shard and in packed rows: data, pad, check */
    size_t stride;            /* the same in floats */
    size_t check_off;         /* the check word's offset in a row */
    size_t slot_bytes, nslots;
    int want_slots;  /* params or SHS_EMB_SLOTS; -1 auto */
    uint32_t slots;  /* per (worker, holder), resolved */
    shs_region_t *shard, *inbox, *wbuf, *srv;
    float *data;              /* shard memory (shard_rows x stride), NULL for a non-holder */
    float *state;             /* Adagrad accumulators, one per shard row */
    uint64_t shard_rows;
    /* wbuf layout of one worker */
    size_t w_bytes, w_rows_off, w_send_off, w_ack_off, w_answer_off;
    /* srv layout */
    size_t s_ack_off, s_answer_stamp_off, s_answer_buf_off;

    shs_emb_worker_t *workers;

    /* the apply thread (holders) */
    shs_ctx_t *apply_ep;
    pthread_t apply_thread;
    bool apply_running;
    atomic_bool apply_stop;
    uint64_t *expect;         /* per (sender, worker): next sequence */
    unsigned *sender_gen;     /* per rank: the incarnation expect is for (apply thread) */
    bool rejoined;            /* made on a rank that rejoined a running job */
    bool *answer_pending;     /* answer buffer written, not yet known complete */
    unsigned answer_next;
    _Atomic uint64_t applied_batches, applied_rows, served_lookups, served_rows, lag_max,
        busy_ns;
};

/* slot of (sender, worker, k) in a holder's inbox */
static inline size_t emb_slot_off(const shs_emb_t *e, int sender, int w, uint64_t seq)
{
    size_t k = (size_t)((seq - 1) % e->slots);
    return (((size_t)sender * (size_t)e->nworkers + (size_t)w) * e->slots + k) *
           e->slot_bytes;
}

/* bytes of a message of `count` rows: header, row indices, gradient rows
 * (updates; padded to 8 bytes), trailer stamp */
static inline size_t emb_msg_bytes(const shs_emb_t *e, uint32_t kind, uint32_t count)
{
    size_t grads = kind == EMB_MSG_UPDATE ? ((size_t)count * e->row_bytes + 7u) & ~(size_t)7u : 0;
    return EMB_HDR_BYTES + (size_t)count * 8u + grads + 8u;
}

/* The header stamp covers kind and count too: the apply thread trusts the
 * header's fields only when the stamp it computes from them matches, so
 * fields not yet visible behind a visible stamp read as "not yet". */
static inline uint64_t emb_head_stamp(uint64_t seq, uint32_t kind, uint32_t count)
{
    return seq ^ EMB_HEAD_MAGIC ^ ((uint64_t)kind << 32) ^ ((uint64_t)count << 40);
}

/* The check word of a row (of the shard or packed) that starts at row and
 * has local index loc: what it holds when row is whole (emb.h, Row checks). */
static inline _Atomic uint64_t *emb_check_word(const shs_emb_t *e, float *row)
{
    return (_Atomic uint64_t *)((uint8_t *)row + e->check_off);
}

static inline uint64_t emb_row_check(const shs_emb_t *e, const float *row, uint64_t loc)
{
    return shs__hash64(row, e->row_bytes, loc);
}

/* whether a copy of a row (data and check word) is whole */
static inline bool emb_row_whole(const shs_emb_t *e, float *row, uint64_t loc)
{
    return atomic_load_explicit(emb_check_word(e, row), memory_order_relaxed) ==
           emb_row_check(e, row, loc);
}

/* the apply thread (or init, load) after it wrote shard row loc */
static inline void emb_row_seal(const shs_emb_t *e, float *row, uint64_t loc)
{
    atomic_store_explicit(emb_check_word(e, row), emb_row_check(e, row, loc),
                          memory_order_release);
}

static inline float *emb_shard_row(const shs_emb_t *e, uint64_t loc)
{
    return e->data + loc * e->stride;
}

static inline uint8_t *emb_wbuf(const shs_emb_t *e, int w)
{
    return (uint8_t *)shs_region_addr(e->wbuf) + (size_t)w * e->w_bytes;
}

/* worker w's word that holder o writes its last applied sequence into */
static inline _Atomic uint64_t *emb_ack_word(const shs_emb_t *e, int w, int o)
{
    return (_Atomic uint64_t *)(emb_wbuf(e, w) + e->w_ack_off + (size_t)o * sizeof(uint64_t));
}

/* The update epoch of row id (cache.h): this rank's updates bump it. */
static inline uint32_t emb_epoch_at(const shs_emb_t *e, uint64_t id)
{
    return (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & e->epoch_mask;
}

static inline _Atomic uint32_t *emb_epoch(const shs_emb_t *e, uint64_t id)
{
    return &e->epoch[emb_epoch_at(e, id)];
}

/* The last update of an epoch: which worker sent it to which holder, with
 * what sequence; applied once that worker's ack word reaches it. */
static inline uint64_t emb_upd_tag(int worker, int holder, uint64_t seq)
{
    return ((uint64_t)(worker + 1) << 56) | ((uint64_t)(uint16_t)holder << 40) |
           (seq & ((1ull << 40) - 1));
}

static inline void emb_count(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* server.c */
shs_status_t shs__emb_apply_start(shs_emb_t *e);
void shs__emb_apply_stop(shs_emb_t *e);

/* client.c: waits for a worker */
shs_status_t shs__emb_wait_credit(shs_emb_worker_t *w, int o, uint64_t seq);

/* calibrate.c: SHS_EMB_OWNER_READS auto (shs__emb_owner_reads_from in
 * plan.h). Collective, at the end of create (ends with a barrier): measure when
 * the knob is auto and the path is auto. */
shs_status_t shs__emb_calibrate(shs_emb_t *e);

#endif

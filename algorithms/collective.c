/* Pipelined ring allreduce (reduce-scatter + allgather) over a group, on the
 * transport's public API: WRITE with immediate into credit-controlled inbox
 * slots registered at setup. The protocol is described in
 * include/shadowsync/collective.h; the comments here say why it is safe. */
#include <sched.h>
#include <stdbool.h>
#include <time.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shadowsync/collective.h>
#include <shadowsync/rma.h>

#include "algorithms/reduce.h"
#include "runtime/clock.h"
#include "runtime/config.h"
#include "runtime/log.h"
#include "transport/services.h"

/* Immediate layout: channel (8 bits) | kind (2 bits) | payload (22 bits).
 * The payload carries the low bits of a sequence number that both sides
 * know, so a lost, repeated or foreign notification is caught at once. */
#define IMM_CHAN_SHIFT 24
#define IMM_KIND_SHIFT 22
#define IMM_SEQ_MASK ((1u << IMM_KIND_SHIFT) - 1)
#define IMM_MATCH_MASK (~IMM_SEQ_MASK) /* channel and kind */
enum {
    KIND_DATA = 0,   /* receive item seq has landed (its slot: see slot_of) */
    KIND_CREDIT = 1, /* receive item seq is consumed: its slot is free */
    KIND_GRANT = 2,  /* call seq of this pair may start: all slots are free; the
                        sender's call signature is in its grant area */
    KIND_CTRL = 3    /* payload bit CTRL_HASH clear: the call is aborted (reason,
                        origin rank); set: the sender's signature hash */
};
#define CTRL_HASH (1u << (IMM_KIND_SHIFT - 1))
#define CTRL_REASON_BITS 3
#define CTRL_ORIGIN_MASK ((CTRL_HASH - 1) >> CTRL_REASON_BITS)
#define CTRL_MATCH_MASK (IMM_MATCH_MASK | CTRL_HASH)

/* What the members of one call must agree on. A rank writes it into its
 * left neighbour's inbox with each grant, and the left neighbour compares it
 * with its own before it sends anything but the eager first chunk. */
typedef struct call_sig {
    uint64_t count;          /* elements of the caller's call */
    uint64_t elems;          /* elements of this ring (a pass of a staged call) */
    uint64_t group;          /* hash of the group's ranks in ring order */
    uint32_t seq;            /* the grant's pair sequence number */
    uint16_t n;              /* group size; 0: never written */
    uint8_t dtype;
    uint8_t op;
} call_sig_t;
/* Two signatures (alternate calls) at the end of each per-sender eager slot:
 * the grant area of that sender in the receiver's inbox, and in the sender's
 * own inbox (where nobody writes its slot) the source of its grants. */
#define SIG_AREA (2 * sizeof(call_sig_t))

enum { /* what an aborted call's members disagree on */
    WHY_OTHER = 0,
    WHY_GROUP = 1,
    WHY_COUNT = 2,
    WHY_DTYPE = 3,
    WHY_OP = 4
};

/* The parameters every rank must agree on, compared at setup. */
typedef struct coll_sig {
    uint64_t magic;
    uint64_t slot_bytes;
    uint64_t stage_bytes;
    uint64_t eager_bytes;
    uint64_t min_chunk;
    uint32_t slots;
    uint32_t channel;
    uint64_t valid;          /* this rank's parameters passed their checks */
} coll_sig_t;
#define SIG_MAGIC 0x73687363u /* "shsc" */

struct shs_coll {
    shs_ctx_t *ctx;
    int rank;
    int size;
    size_t slot_bytes;
    int slots;
    size_t stage_bytes;
    size_t eager_bytes;      /* per-sender slot for the first chunk of a call */
    size_t min_chunk;        /* smallest chunk of a short call */
    uint32_t chan;           /* channel << IMM_CHAN_SHIFT */
    bool chan_taken;         /* chan is held from the context */
    int timeout_ms;
    int spin;                /* empty polls before sleeping */
    int sleep_us;            /* longest sleep (0: sched_yield) */
    shs_region_t *inbox;     /* slots * slot_bytes shared slots, then one eager
                                slot of eager_bytes per rank; left neighbours
                                write here */
    shs_region_t *stage;     /* stage_bytes, or NULL */
    /* Per peer, the calls in which it was this rank's left neighbour (it
     * sent to us) and its right neighbour (we sent to it): the sequence
     * number that the grant of the next such call carries. */
    uint32_t *calls_from;
    uint32_t *calls_to;
    uint32_t grants;         /* grants sent: picks this rank's grant source */
    uint64_t all_hash;       /* group hash of all ranks in rank order; 0: not yet */
    bool poisoned;
    shs_coll_stats_t stats;
};

size_t shs_dtype_size(shs_dtype_t dtype)
{
    switch (dtype) {
    case SHS_DTYPE_FLOAT32: return sizeof(float);
    case SHS_DTYPE_FLOAT64: return sizeof(double);
    }
    return 0;
}

/* ------------------------------------------------------------------ setup */

/* Every rank writes its signature (its parameters, and whether they were
 * valid) into slot [me] of every peer's table; after a barrier each rank
 * compares the whole table, so all ranks reach the same verdict before any
 * of them registers an inbox whose length depends on the parameters. */
static shs_status_t check_same_params(shs_coll_t *coll, shs_status_t local)
{
    shs_ctx_t *ctx = coll->ctx;
    int n = coll->size, me = coll->rank;
    size_t len = (size_t)n * sizeof(coll_sig_t);
    shs_region_t *table = NULL;
    shs_status_t st = shs_region_alloc(ctx, len, SHS_ACCESS_REMOTE_WRITE, &table);
    if (st != SHS_OK)
        return st;
    coll_sig_t *sig = shs_region_addr(table);
    sig[me] = (coll_sig_t){.magic = SIG_MAGIC, .slot_bytes = coll->slot_bytes,
                           .stage_bytes = coll->stage_bytes,
                           .eager_bytes = coll->eager_bytes,
                           .min_chunk = coll->min_chunk, .slots = (uint32_t)coll->slots,
                           .channel = coll->chan >> IMM_CHAN_SHIFT,
                           .valid = local == SHS_OK};
    size_t off = (size_t)me * sizeof(coll_sig_t);
    for (int p = 0; p < n && st == SHS_OK; p++)
        if (p != me)
            st = shs_write(ctx, p, table, off, table, off, sizeof(coll_sig_t), 0);
    if (st == SHS_OK && n > 1)
        st = shs_flush(ctx, SHS_PEER_ALL, coll->timeout_ms);
    if (st == SHS_OK)
        st = shs_ctx_barrier(ctx);
    if (st == SHS_OK && local != SHS_OK)
        st = local; /* this rank's own reason was logged where it was found */
    for (int p = 0; p < n && st == SHS_OK; p++) {
        if (!sig[p].valid) {
            if (p != me)
                SHS_ERROR("collective setup: rank %d has invalid SHS_COLL_* parameters", p);
            st = p == me ? local : SHS_ERR_SIZE_MISMATCH;
        } else if (memcmp(&sig[p], &sig[me], sizeof(coll_sig_t)) != 0 && sig[me].valid) {
            SHS_ERROR("collective setup: rank %d uses chunk %llu (min %llu), %u slots, stage "
                      "%llu, eager %llu, channel %u; this rank uses chunk %zu (min %zu), %d "
                      "slots, stage %zu, eager %zu, channel %u: every rank must use the same "
                      "SHS_COLL_* values",
                      p, (unsigned long long)sig[p].slot_bytes,
                      (unsigned long long)sig[p].min_chunk, sig[p].slots,
                      (unsigned long long)sig[p].stage_bytes,
                      (unsigned long long)sig[p].eager_bytes, sig[p].channel, coll->slot_bytes,
                      coll->min_chunk, coll->slots, coll->stage_bytes, coll->eager_bytes,
                      coll->chan >> IMM_CHAN_SHIFT);
            st = SHS_ERR_SIZE_MISMATCH;
        }
    }
    if (st == SHS_OK && local != SHS_OK)
        st = local;
    /* nobody may still be writing into the table when it goes away */
    if (st != SHS_ERR_PEER_FAILED && st != SHS_ERR_TIMEOUT) {
        shs_status_t st2 = shs_ctx_barrier(ctx);
        if (st == SHS_OK)
            st = st2;
    }
    shs_region_destroy(table);
    return st;
}

static shs_status_t apply_params(shs_coll_t *coll, const shs_coll_params_t *params,
                                 const shs__config_t *cfg)
{
    coll->slot_bytes = cfg->coll_chunk;
    coll->slots = cfg->coll_slots;
    coll->stage_bytes = cfg->coll_stage;
    coll->eager_bytes = cfg->coll_eager;
    coll->min_chunk = cfg->coll_min_chunk;
    int channel = cfg->coll_channel; /* -1: allocated by the context */
    coll->timeout_ms = cfg->op_timeout_ms;
    coll->spin = cfg->coll_spin;
    coll->sleep_us = cfg->coll_sleep_us;
    if (params != NULL) {
        uint64_t m = params->field_mask;
        if (m & SHS_COLL_PARAM_SLOT_BYTES)
            coll->slot_bytes = params->slot_bytes;
        if (m & SHS_COLL_PARAM_SLOTS)
            coll->slots = params->slots;
        if (m & SHS_COLL_PARAM_STAGE_BYTES)
            coll->stage_bytes = params->stage_bytes;
        if (m & SHS_COLL_PARAM_CHANNEL)
            channel = params->channel;
        if (m & SHS_COLL_PARAM_EAGER_BYTES)
            coll->eager_bytes = params->eager_bytes;
        if (m & SHS_COLL_PARAM_MIN_CHUNK)
            coll->min_chunk = params->min_chunk;
        if (m & SHS_COLL_PARAM_TIMEOUT)
            coll->timeout_ms = params->timeout_ms;
    }
    if (coll->timeout_ms < 1)
        coll->timeout_ms = cfg->op_timeout_ms; /* the setup itself needs a bound */
    if (coll->slot_bytes < 64 || coll->slot_bytes % 8 != 0 ||
        coll->slot_bytes > ((size_t)1 << 30)) {
        SHS_ERROR("collectives: chunk of %zu bytes: expected a multiple of 8 in 64..1 GiB",
                  coll->slot_bytes);
        return SHS_ERR_CONFIG;
    }
    /* Per peer at most: slots + 1 data notifications (the shared slots and
     * the eager one), `slots` credits (n = 2: the same peer is both
     * neighbours), the grant of this call, and the grant and eager chunk
     * of the next. */
    if (coll->slots < 1 || coll->slots > 63 || 2 * coll->slots + 6 > cfg->rq_depth) {
        SHS_ERROR("collectives: %d slots: expected 1..63 with 2 * slots + 6 <= "
                  "SHS_RQ_DEPTH (%d)", coll->slots, cfg->rq_depth);
        return SHS_ERR_CONFIG;
    }
    if (coll->eager_bytes > coll->slot_bytes)
        coll->eager_bytes = coll->slot_bytes; /* a first chunk is never larger */
    if (coll->min_chunk < 8 || coll->min_chunk % 8 != 0) {
        SHS_ERROR("collectives: smallest chunk of %zu bytes: expected a multiple of 8",
                  coll->min_chunk);
        return SHS_ERR_CONFIG;
    }
    if (coll->min_chunk > coll->slot_bytes)
        coll->min_chunk = coll->slot_bytes;
    if (coll->eager_bytes % 8 != 0) {
        SHS_ERROR("collectives: eager slot of %zu bytes: expected a multiple of 8",
                  coll->eager_bytes);
        return SHS_ERR_CONFIG;
    }
    if (channel < -1 || channel > 255) {
        SHS_ERROR("collectives: channel %d: expected 0..255 (or unset: allocated)", channel);
        return SHS_ERR_CONFIG;
    }
    if (params != NULL && (params->field_mask & SHS_COLL_PARAM_TIMEOUT) &&
        params->timeout_ms < 1) {
        SHS_ERROR("collectives: timeout %d ms: expected > 0", params->timeout_ms);
        return SHS_ERR_CONFIG;
    }
    /* last: a channel taken is given back by the caller on any failure */
    unsigned chan;
    shs_status_t st = shs__ctx_channel_take(coll->ctx, channel, "a collective", &chan);
    if (st != SHS_OK)
        return st;
    coll->chan_taken = true;
    coll->chan = chan << IMM_CHAN_SHIFT;
    return SHS_OK;
}

shs_status_t shs_coll_create(shs_ctx_t *ctx, const shs_coll_params_t *params,
                             shs_coll_t **coll_p)
{
    if (ctx == NULL || coll_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_coll_create"))
        return SHS_ERR_BAD_STATE;
    shs_status_t st;
    shs_coll_t *coll = calloc(1, sizeof(*coll));
    if (coll == NULL)
        return SHS_ERR_NO_MEMORY;
    coll->ctx = ctx;
    coll->rank = shs_ctx_rank(ctx);
    coll->size = shs_ctx_size(ctx);
    /* A bad parameter on one rank is reported to all through the check, so
     * that no rank is left waiting in a registration the others skip. */
    st = check_same_params(coll, apply_params(coll, params, shs__ctx_config(ctx)));
    if (st != SHS_OK)
        goto err_free;

    coll->calls_from = calloc((size_t)coll->size, sizeof(uint32_t));
    coll->calls_to = calloc((size_t)coll->size, sizeof(uint32_t));
    if (coll->calls_from == NULL || coll->calls_to == NULL) {
        st = SHS_ERR_NO_MEMORY; /* the peers fail in the registration: bounded */
        goto err_free;
    }
    st = shs_region_alloc(ctx, (size_t)coll->slots * coll->slot_bytes +
                                   (size_t)coll->size * coll->eager_bytes,
                          SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_WRITE, &coll->inbox);
    if (st != SHS_OK)
        goto err_free;
    /* the staging area is only a WRITE source: local access is enough */
    if (coll->stage_bytes > 0) {
        st = shs_region_alloc(ctx, coll->stage_bytes, SHS_ACCESS_LOCAL_WRITE, &coll->stage);
        if (st != SHS_OK)
            goto err_destroy_inbox;
    }
    SHS_DEBUG("collectives: %d slots of %zu bytes, eager %zu, stage %zu bytes, channel %u",
              coll->slots, coll->slot_bytes, coll->eager_bytes, coll->stage_bytes,
              coll->chan >> IMM_CHAN_SHIFT);
    *coll_p = coll;
    return SHS_OK;

err_destroy_inbox:
    shs_region_destroy(coll->inbox);
err_free:
    if (coll->chan_taken)
        shs__ctx_channel_give(ctx, coll->chan >> IMM_CHAN_SHIFT);
    free(coll->calls_to);
    free(coll->calls_from);
    free(coll);
    return st;
}

void shs_coll_destroy(shs_coll_t *coll)
{
    if (coll == NULL)
        return;
    if (shs__ctx_refused(coll->ctx, "shs_coll_destroy"))
        return;
    shs_region_destroy(coll->stage);
    shs_region_destroy(coll->inbox);
    if (coll->chan_taken)
        shs__ctx_channel_give(coll->ctx, coll->chan >> IMM_CHAN_SHIFT);
    free(coll->calls_to);
    free(coll->calls_from);
    free(coll);
}

shs_status_t shs_coll_get_stats(const shs_coll_t *coll, shs_coll_stats_t *stats_p)
{
    if (coll == NULL || stats_p == NULL)
        return SHS_ERR_INVALID_ARG;
    *stats_p = coll->stats;
    return SHS_OK;
}

/* ------------------------------------------------------------------- ring */

/* One call's state, on the stack. Items are the chunks a rank sends to its
 * right neighbour, numbered in sending order over the 2(n-1) steps; step u
 * sends segment (me - u) mod n and receives segment (me - 1 - u) mod n, so
 * the receive stream of a rank is the send stream of its left neighbour.
 * Send item (u, c), u >= 1, forwards what receive item (u - 1, c) produced. */
typedef struct ring {
    shs_coll_t *coll;
    const shs_group_t *group; /* NULL: every rank */
    int n, me, left, right;
    shs_region_t *reg;
    size_t reg_off;          /* byte offset of element 0 in reg */
    char *base;              /* its address */
    size_t es;               /* element size */
    shs_dtype_t dtype;
    shs_reduce_t op;
    size_t count;
    size_t call_count;       /* count of the caller's call (>= count when staged) */
    uint64_t group_hash;
    size_t q, rem;           /* segment j: q + (j < rem) elements */
    size_t chunk_elems;

    uint64_t send_total, recv_total;
    unsigned send_eager;     /* 1: send item 0 goes to the right's eager slot */
    unsigned recv_eager;     /* 1: receive item 0 lands in our eager slot */
    uint64_t sent;           /* send items posted */
    uint64_t arrived;        /* data notifications taken */
    uint64_t ready;          /* bit k: receive item done + k has arrived */
    uint64_t done;           /* receive items reduced or copied */
    uint64_t credits;        /* shared slots of the right neighbour we may fill */
    uint64_t credits_in;     /* credit notifications taken */
    bool granted;            /* the right's grant has come and its signature matches */
    bool hash_in;            /* no grant area: the right's signature hash has come */
    bool flushed;            /* all our writes to the right have completed */
    uint32_t seq_to;         /* grant sequence of this call, from the right */
    uint32_t seq_from;       /* ... and towards the left */

    int su;                  /* send cursor: step and chunk */
    size_t sc;
    uint64_t dep_base;       /* receive index of (su - 1, 0) */
    int ru;                  /* receive cursor */
    size_t rc;
} ring_t;

static inline int mod(int a, int n)
{
    a %= n;
    return a < 0 ? a + n : a;
}

static inline size_t seg_len(const ring_t *r, int j)
{
    return r->q + ((size_t)j < r->rem);
}

static inline size_t seg_off(const ring_t *r, int j)
{
    return (size_t)j * r->q + ((size_t)j < r->rem ? (size_t)j : r->rem);
}

static inline size_t seg_chunks(const ring_t *r, int j)
{
    return (seg_len(r, j) + r->chunk_elems - 1) / r->chunk_elems;
}

static inline int send_seg(const ring_t *r, int u)
{
    return mod(r->me - u, r->n);
}

static inline int recv_seg(const ring_t *r, int u)
{
    return mod(r->me - 1 - u, r->n);
}

/* Element range [*off, *off + *len) of chunk c of segment j. */
static inline void chunk_range(const ring_t *r, int j, size_t c, size_t *off, size_t *len)
{
    size_t start = c * r->chunk_elems, l = seg_len(r, j) - start;
    *off = seg_off(r, j) + start;
    *len = l < r->chunk_elems ? l : r->chunk_elems;
}

/* Move a cursor past steps that have no chunks (segments of zero elements). */
static void send_cursor_settle(ring_t *r)
{
    int steps = 2 * (r->n - 1);
    while (r->su < steps && r->sc >= seg_chunks(r, send_seg(r, r->su))) {
        if (r->su >= 1)
            r->dep_base += seg_chunks(r, recv_seg(r, r->su - 1));
        r->su++;
        r->sc = 0;
    }
}

static void recv_cursor_settle(ring_t *r)
{
    int steps = 2 * (r->n - 1);
    while (r->ru < steps && r->rc >= seg_chunks(r, recv_seg(r, r->ru))) {
        r->ru++;
        r->rc = 0;
    }
}

/* The transport has logged a failure it detected; a timeout is detected
 * here. Either way the collective is poisoned: an abandoned call may still
 * have writes in flight towards an inbox. */
static shs_status_t ring_fail(ring_t *r, shs_status_t st, int peer, const char *what)
{
    r->coll->poisoned = true;
    if (st == SHS_ERR_TIMEOUT)
        SHS_ERROR("allreduce over %d ranks: %s peer %d for %d ms (SHS_OP_TIMEOUT_MS): peer "
                  "dead, or not in the same call? (collective disabled)", r->n, what, peer,
                  r->coll->timeout_ms);
    else
        SHS_WARN("allreduce over %d ranks: %s peer %d: %s (collective disabled)", r->n, what,
                 peer, shs_status_string(st));
    return st;
}

static shs_status_t protocol_error(ring_t *r, int peer, const char *what, uint32_t got,
                                   uint64_t want)
{
    r->coll->poisoned = true;
    SHS_ERROR("allreduce over %d ranks: %s from peer %d carries %u, expected %llu (or one "
              "of the next %d): the ranks disagree on the group, count, type or order of "
              "calls (collective disabled)", r->n, what, peer, got & IMM_SEQ_MASK,
              (unsigned long long)(want & IMM_SEQ_MASK), r->coll->slots - 1);
    return SHS_ERR_PROTOCOL;
}

static inline uint32_t imm_of(const ring_t *r, int kind, uint64_t seq)
{
    return r->coll->chan | ((uint32_t)kind << IMM_KIND_SHIFT) | ((uint32_t)seq & IMM_SEQ_MASK);
}

/* Byte offset in an inbox of the slot of stream item t written by `sender`
 * in a call whose first item went eager (eager_first = 1) or not: the
 * sender's eager slot for that first item, else shared slot
 * (t - eager_first) mod slots. Sender and receiver compute the same. */
static inline size_t slot_of(const shs_coll_t *coll, int sender, uint64_t t,
                             unsigned eager_first)
{
    if (t < eager_first)
        return (size_t)coll->slots * coll->slot_bytes + (size_t)sender * coll->eager_bytes;
    return (size_t)((t - eager_first) % (uint64_t)coll->slots) * coll->slot_bytes;
}

/* Zero-length write with immediate: a credit to the left. */
static shs_status_t notify_left(ring_t *r, int kind, uint64_t seq)
{
    shs_coll_t *coll = r->coll;
    shs_status_t st = shs_write_imm(coll->ctx, r->left, coll->inbox, 0, coll->inbox, 0, 0,
                                    imm_of(r, kind, seq), 0);
    return st == SHS_OK ? st : ring_fail(r, st, r->left, "notifying");
}

/* ------------------------------------------------------------- signature */

static inline bool has_sig_area(const shs_coll_t *coll)
{
    return coll->eager_bytes >= SIG_AREA;
}

/* Bytes of an eager slot that a first chunk may fill. */
static inline size_t eager_cap(const shs_coll_t *coll)
{
    return has_sig_area(coll) ? coll->eager_bytes - SIG_AREA : coll->eager_bytes;
}

/* Offset in an inbox of signature `parity` at the end of sender's eager slot. */
static inline size_t sig_off(const shs_coll_t *coll, int sender, uint32_t parity)
{
    return (size_t)coll->slots * coll->slot_bytes + (size_t)(sender + 1) * coll->eager_bytes -
           SIG_AREA + (size_t)(parity & 1u) * sizeof(call_sig_t);
}

static inline uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

static uint64_t group_hash(shs_coll_t *coll, const shs_group_t *group, int n)
{
    if (group == NULL && coll->all_hash != 0)
        return coll->all_hash;
    uint64_t h = mix64(0x73686367u, (uint64_t)n);
    for (int k = 0; k < n; k++)
        h = mix64(h, (uint64_t)(group == NULL ? k : group->ranks[k]));
    h |= 1; /* never 0, the "not yet" of all_hash */
    if (group == NULL)
        coll->all_hash = h;
    return h;
}

static call_sig_t sig_of(const ring_t *r, uint32_t seq)
{
    return (call_sig_t){.count = r->call_count, .elems = r->count, .group = r->group_hash,
                        .seq = seq, .n = (uint16_t)r->n, .dtype = (uint8_t)r->dtype,
                        .op = (uint8_t)r->op};
}

/* The part of a signature that fits a notification (no grant area). */
static uint32_t sig_hash(const call_sig_t *s)
{
    uint64_t h = mix64(mix64(mix64(s->count, s->elems), s->group),
                       (uint64_t)s->n << 16 | (uint64_t)s->dtype << 8 | s->op);
    return (uint32_t)(h ^ (h >> 21) ^ (h >> 42)) & (CTRL_HASH - 1);
}

static unsigned sig_why(const call_sig_t *a, const call_sig_t *b)
{
    if (a->n != b->n || a->group != b->group)
        return WHY_GROUP;
    if (a->count != b->count || a->elems != b->elems)
        return WHY_COUNT;
    if (a->dtype != b->dtype)
        return WHY_DTYPE;
    if (a->op != b->op)
        return WHY_OP;
    return WHY_OTHER;
}

static const char *why_name(unsigned why)
{
    switch (why) {
    case WHY_GROUP: return "group";
    case WHY_COUNT: return "count";
    case WHY_DTYPE: return "dtype";
    case WHY_OP: return "op";
    }
    return "group, count, dtype or op";
}

static void sig_describe(char *buf, size_t len, const call_sig_t *s)
{
    int k = snprintf(buf, len, "count %llu", (unsigned long long)s->count);
    if (k > 0 && (size_t)k < len && s->elems != s->count)
        k += snprintf(buf + k, len - (size_t)k, " (%llu in this pass)",
                      (unsigned long long)s->elems);
    if (k > 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, ", %s, %s, group of %u ranks %016llx",
                 s->dtype == SHS_DTYPE_FLOAT32   ? "float32"
                 : s->dtype == SHS_DTYPE_FLOAT64 ? "float64"
                                                 : "unknown dtype",
                 s->op == SHS_REDUCE_SUM ? "sum" : s->op == SHS_REDUCE_AVG ? "avg" : "unknown op",
                 s->n, (unsigned long long)s->group);
}

/* End this call on every member: poison the collective and tell both
 * neighbours (but not the one that told us), who tell theirs. Best effort: a
 * neighbour that misses it still gives up at its timeout. */
static shs_status_t abort_call(ring_t *r, unsigned why, int origin, int from)
{
    shs_coll_t *coll = r->coll;
    coll->poisoned = true;
    uint32_t payload = why | ((uint32_t)origin & CTRL_ORIGIN_MASK) << CTRL_REASON_BITS;
    int to[2] = {r->left, r->right};
    for (int k = 0; k < 2; k++)
        if (to[k] != from && (k == 0 || to[1] != to[0]))
            (void)shs_write_imm(coll->ctx, to[k], coll->inbox, 0, coll->inbox, 0, 0,
                                imm_of(r, KIND_CTRL, payload), 0);
    return SHS_ERR_SIZE_MISMATCH;
}

static shs_status_t sig_mismatch(ring_t *r, const call_sig_t *theirs, const call_sig_t *mine)
{
    char a[160], b[160];
    unsigned why = sig_why(theirs, mine);
    sig_describe(a, sizeof(a), theirs);
    sig_describe(b, sizeof(b), mine);
    SHS_ERROR("allreduce over %d ranks: the members disagree on the %s: peer %d calls with %s; "
              "this rank with %s: every member must pass the same group, count, dtype and op "
              "(call aborted on every member, collective disabled)",
              r->n, why_name(why), r->right, a, b);
    return abort_call(r, why, r->coll->rank, -1);
}

static shs_status_t hash_mismatch(ring_t *r, uint32_t theirs, const call_sig_t *mine)
{
    char b[160];
    sig_describe(b, sizeof(b), mine);
    SHS_ERROR("allreduce over %d ranks: the members disagree on the group, count, dtype or op: "
              "peer %d calls with signature %06x, this rank with %06x (%s); every member must "
              "pass the same ones (SHS_COLL_EAGER below %zu bytes leaves no room for the peer's "
              "values; call aborted on every member, collective disabled)",
              r->n, r->right, theirs, sig_hash(mine), b, SIG_AREA);
    return abort_call(r, WHY_OTHER, r->coll->rank, -1);
}

/* Grant the shared slots to the left neighbour, with this call's signature.
 * The copy it is sent from is not written again before the device has sent
 * it: a call ends only once the left neighbour took the grant (with three
 * ranks or more, some data it sends us comes after the grant) or, with two,
 * once every write to the one peer has completed. The receiver's copy
 * alternates with the pair's calls, since the next call's grant may come
 * before the receiver has read this one. */
static shs_status_t send_grant(ring_t *r)
{
    shs_coll_t *coll = r->coll;
    call_sig_t sig = sig_of(r, r->seq_from);
    uint32_t grant = imm_of(r, KIND_GRANT, r->seq_from);
    shs_status_t st;
    if (has_sig_area(coll)) {
        size_t src = sig_off(coll, coll->rank, coll->grants++);
        memcpy((char *)shs_region_addr(coll->inbox) + src, &sig, sizeof(sig));
        st = shs_write_imm(coll->ctx, r->left, coll->inbox, src, coll->inbox,
                           sig_off(coll, coll->rank, r->seq_from), sizeof(sig), grant, 0);
    } else {
        st = shs_write_imm(coll->ctx, r->left, coll->inbox, 0, coll->inbox, 0, 0,
                           imm_of(r, KIND_CTRL, CTRL_HASH | sig_hash(&sig)), 0);
        if (st == SHS_OK)
            st = shs_write_imm(coll->ctx, r->left, coll->inbox, 0, coll->inbox, 0, 0, grant, 0);
    }
    return st == SHS_OK ? st : ring_fail(r, st, r->left, "granting to");
}

/* Another member that found a disagreement has aborted the call. */
static shs_status_t take_abort(ring_t *r)
{
    int from[2] = {r->left, r->right};
    for (int k = 0; k < 2 && (k == 0 || from[1] != from[0]); k++) {
        uint32_t imm;
        if (shs_poll_imm_match(r->coll->ctx, from[k], CTRL_MATCH_MASK, imm_of(r, KIND_CTRL, 0),
                               NULL, &imm) != SHS_OK)
            continue; /* nothing there; a failed peer is found elsewhere */
        unsigned why = imm & ((1u << CTRL_REASON_BITS) - 1);
        int origin = (int)((imm & (CTRL_HASH - 1)) >> CTRL_REASON_BITS);
        SHS_ERROR("allreduce over %d ranks: peer %d reports that rank %d found the members "
                  "disagree on the %s (call aborted on every member, collective disabled)",
                  r->n, from[k], origin, why_name(why));
        return abort_call(r, why, origin, from[k]);
    }
    return SHS_OK;
}

/* The grant of the right neighbour, once its signature matches ours. */
static shs_status_t take_grant(ring_t *r, bool *moved)
{
    shs_coll_t *coll = r->coll;
    call_sig_t mine = sig_of(r, r->seq_to);
    uint32_t imm;
    shs_status_t st;
    if (!has_sig_area(coll) && !r->hash_in) {
        st = shs_poll_imm_match(coll->ctx, r->right, CTRL_MATCH_MASK,
                                imm_of(r, KIND_CTRL, CTRL_HASH), NULL, &imm);
        if (st == SHS_ERR_TIMEOUT)
            return SHS_OK;
        if (st != SHS_OK)
            return ring_fail(r, st, r->right, "waiting for the grant of");
        if ((imm & (CTRL_HASH - 1)) != sig_hash(&mine))
            return hash_mismatch(r, imm & (CTRL_HASH - 1), &mine);
        r->hash_in = true;
        *moved = true;
    }
    st = shs_poll_imm_match(coll->ctx, r->right, IMM_MATCH_MASK, imm_of(r, KIND_GRANT, 0), NULL,
                            &imm);
    if (st == SHS_ERR_TIMEOUT)
        return SHS_OK;
    if (st != SHS_OK)
        return ring_fail(r, st, r->right, "waiting for the grant of");
    if (has_sig_area(coll)) {
        call_sig_t theirs;
        memcpy(&theirs, (const char *)shs_region_addr(coll->inbox) + sig_off(coll, r->right, imm),
               sizeof(theirs));
        if (theirs.n == 0) /* never written: a grant sent to another collective */
            return protocol_error(r, r->right, "a grant without a signature", imm, r->seq_to);
        if (sig_why(&theirs, &mine) != WHY_OTHER)
            return sig_mismatch(r, &theirs, &mine);
        if (((theirs.seq ^ imm) & IMM_SEQ_MASK) != 0)
            return protocol_error(r, r->right, "the signature of a grant", theirs.seq, imm);
    }
    if ((imm & IMM_SEQ_MASK) != (r->seq_to & IMM_SEQ_MASK))
        return protocol_error(r, r->right, "a grant", imm, r->seq_to);
    r->granted = true;
    r->credits = (uint64_t)coll->slots;
    *moved = true;
    return SHS_OK;
}

/* Take the notifications that are there; *moved says whether any came. */
static shs_status_t take_notifications(ring_t *r, bool *moved)
{
    shs_coll_t *coll = r->coll;
    uint32_t imm;
    shs_status_t st;

    if (!r->granted) {
        st = take_grant(r, moved);
        if (st != SHS_OK)
            return st;
    }
    while (r->granted && r->credits_in + (uint64_t)coll->slots + r->send_eager < r->send_total) {
        st = shs_poll_imm_match(coll->ctx, r->right, IMM_MATCH_MASK,
                                imm_of(r, KIND_CREDIT, 0), NULL, &imm);
        if (st == SHS_ERR_TIMEOUT)
            break;
        if (st != SHS_OK)
            return ring_fail(r, st, r->right, "waiting for credit from");
        /* with several QPs per peer (SHS_QPS_PER_PEER) notifications may
         * overtake each other: a credit only has to be one we can expect */
        if (((imm - (uint32_t)r->credits_in) & IMM_SEQ_MASK) >= (uint32_t)coll->slots)
            return protocol_error(r, r->right, "a credit", imm, r->credits_in);
        r->credits_in++;
        r->credits++;
        *moved = true;
    }
    if (r->sent == r->send_total && r->send_total > 0 && !r->flushed) {
        /* the caller gets its buffer back once our writes have completed */
        st = shs_flush_test(coll->ctx, r->right);
        if (st == SHS_OK) {
            r->flushed = true;
            *moved = true;
        } else if (st != SHS_ERR_TIMEOUT) {
            return ring_fail(r, st, r->right, "completing the writes to");
        }
    }
    while (r->arrived < r->recv_total) {
        st = shs_poll_imm_match(coll->ctx, r->left, IMM_MATCH_MASK, imm_of(r, KIND_DATA, 0),
                                NULL, &imm);
        if (st == SHS_ERR_TIMEOUT)
            break;
        if (st != SHS_OK)
            return ring_fail(r, st, r->left, "waiting for data from");
        /* item done + k, k <= slots; out of order only across QPs */
        uint32_t k = (imm - (uint32_t)r->done) & IMM_SEQ_MASK;
        if (k >= (uint32_t)coll->slots + r->recv_eager || r->done + k >= r->recv_total ||
            (r->ready >> k) & 1u)
            return protocol_error(r, r->left, "a chunk", imm, r->done);
        r->ready |= (uint64_t)1 << k;
        r->arrived++;
        *moved = true;
    }
    return SHS_OK;
}

/* Post every send item whose data is final and for which a slot is free. */
static shs_status_t post_sends(ring_t *r, bool *moved)
{
    shs_coll_t *coll = r->coll;
    while (r->sent < r->send_total) {
        bool eager = r->sent < r->send_eager;
        if (!eager && r->credits == 0)
            break;
        if (r->su >= 1 && r->dep_base + r->sc >= r->done)
            break; /* its receive item is not reduced yet */
        int j = send_seg(r, r->su);
        size_t off, len;
        chunk_range(r, j, r->sc, &off, &len);
        bool last = r->sent + 1 == r->send_total;
        shs_status_t st = shs_write_imm(coll->ctx, r->right, r->reg, r->reg_off + off * r->es,
                                        coll->inbox, slot_of(coll, coll->rank, r->sent, r->send_eager),
                                        len * r->es, imm_of(r, KIND_DATA, r->sent),
                                        last ? SHS_OP_SIGNAL : 0);
        if (st != SHS_OK)
            return ring_fail(r, st, r->right, "writing to");
        r->sent++;
        if (!eager)
            r->credits--;
        coll->stats.bytes_sent += len * r->es;
        coll->stats.chunks_sent++;
        r->sc++;
        send_cursor_settle(r);
        *moved = true;
    }
    return SHS_OK;
}

static void reduce_chunk(const ring_t *r, void *dst, const void *src, size_t len, bool last_rs)
{
    bool scale = last_rs && r->op == SHS_REDUCE_AVG;
    if (r->dtype == SHS_DTYPE_FLOAT32) {
        if (scale)
            shs__reduce_sum_scale_f32(dst, src, len, (float)(1.0 / r->n));
        else
            shs__reduce_sum_f32(dst, src, len);
    } else {
        if (scale)
            shs__reduce_sum_scale_f64(dst, src, len, 1.0 / r->n);
        else
            shs__reduce_sum_f64(dst, src, len);
    }
}

/* Reduce (reduce-scatter) or copy (allgather) one arrived chunk from its
 * inbox slot into the buffer, then give the slot back if the left
 * neighbour still needs it.
 *
 * Why the allgather may overwrite a chunk this rank sent earlier without
 * waiting for that send's completion: the chunk it writes there comes from
 * the left neighbour only after the data went all the way round the ring,
 * i.e. after the right neighbour received (and acted on) the earlier send.
 * Once the responder has the data, the requester reads its buffer again
 * only to retransmit, and the responder discards duplicate WRITE payloads
 * (InfiniBand C9-105). A call returns, and the caller gets its buffer back,
 * once the device reports our writes complete (shs_flush_test). */
static shs_status_t process_one(ring_t *r)
{
    shs_coll_t *coll = r->coll;
    int j = recv_seg(r, r->ru);
    size_t off, len;
    chunk_range(r, j, r->rc, &off, &len);
    const char *slot = (const char *)shs_region_addr(coll->inbox) +
                       slot_of(coll, r->left, r->done, r->recv_eager);
    char *dst = r->base + off * r->es;
    if (r->ru < r->n - 1)
        reduce_chunk(r, dst, slot, len, r->ru == r->n - 2);
    else
        memcpy(dst, slot, len * r->es);
    uint64_t item = r->done++;
    r->ready >>= 1;
    r->rc++;
    recv_cursor_settle(r);
    /* a shared slot the left neighbour will need again comes back as a credit */
    if (item >= r->recv_eager && item + (uint64_t)coll->slots < r->recv_total)
        return notify_left(r, KIND_CREDIT, item - r->recv_eager);
    return SHS_OK;
}

/* A waiting rank gives its CPU away: with more ranks than cores, or a
 * software device whose kernel threads need the CPU to move the data,
 * spinning (even with sched_yield) starves exactly what it waits for.
 * Sleeps double from 1 us up to SHS_COLL_SLEEP_US. */
static void idle_wait(const shs_coll_t *coll, long *nap_ns)
{
    if (coll->sleep_us == 0) {
        sched_yield();
        return;
    }
    struct timespec ts = {.tv_sec = 0, .tv_nsec = *nap_ns};
    nanosleep(&ts, NULL);
    long cap = (long)coll->sleep_us * 1000;
    *nap_ns = *nap_ns * 2 < cap ? *nap_ns * 2 : cap;
}

/* Elements per chunk of a call whose longest segment has seg elements: a
 * slot's worth, or, when the segment is shorter than the slots together,
 * about seg / slots (so that `slots` chunks pipeline through the ring) but
 * not below min_chunk. Every member derives it from the same count, group
 * size and agreed parameters. */
static size_t chunk_elems_for(const shs_coll_t *coll, size_t seg, size_t es)
{
    size_t max_e = coll->slot_bytes / es, min_e = coll->min_chunk / es; /* >= 1: 8 | min */
    size_t want = (seg + (size_t)coll->slots - 1) / (size_t)coll->slots;
    want = (want + 7) & ~(size_t)7; /* whole 32/64-byte vectors */
    if (want < min_e)
        want = min_e;
    return want < max_e ? want : max_e;
}

static uint64_t stream_total(const ring_t *r, int (*seg)(const ring_t *, int))
{
    uint64_t t = 0;
    for (int u = 0; u < 2 * (r->n - 1); u++)
        t += seg_chunks(r, seg(r, u));
    return t;
}

static shs_status_t ring_run(ring_t *r)
{
    shs_coll_t *coll = r->coll;
    shs_status_t st;

    r->q = r->count / (size_t)r->n;
    r->rem = r->count % (size_t)r->n;
    r->chunk_elems = chunk_elems_for(coll, r->q + (r->rem > 0), r->es);
    r->send_total = stream_total(r, send_seg);
    r->recv_total = stream_total(r, recv_seg);
    send_cursor_settle(r);
    recv_cursor_settle(r);
    if (r->send_total == 0 && r->recv_total == 0)
        return SHS_OK;
    coll->stats.calls++;
    /* The first chunk of a call may go to the receiver's eager slot for
     * this sender without waiting for a grant, when it is a chunk of the
     * sender's own segment (step 0) and small enough. Nobody else writes
     * that slot, and the sender's previous use of it is over: the
     * receiver reduced that chunk into a segment whose final value the
     * sender had to receive before its previous call could end. (A first
     * chunk from a later step, when count < n leaves segments empty, is
     * not in that chain, so it waits for the grant.) Both sides derive the
     * choice from the same chunk. */
    if (r->send_total > 0) {
        size_t off, len;
        chunk_range(r, send_seg(r, r->su), r->sc, &off, &len);
        r->send_eager = r->su == 0 && len * r->es <= eager_cap(coll);
    }
    if (r->recv_total > 0) {
        size_t off, len;
        chunk_range(r, recv_seg(r, r->ru), r->rc, &off, &len);
        r->recv_eager = r->ru == 0 && len * r->es <= eager_cap(coll);
    }
    r->seq_to = coll->calls_to[r->right]++;
    r->seq_from = coll->calls_from[r->left]++;

    /* The grant hands the shared slots to the left neighbour: they are ours
     * to give, since all data of our previous call has been consumed. It goes
     * in every call, needed or not, and is taken in every call, because it
     * carries the signature: a rank sends nothing but its eager chunk before
     * its right neighbour's signature has matched its own, and ends no call
     * before that. Each final value goes round the ring from the segment's
     * first rank, and every hop after the first is such a checked send; the
     * last reducer, whose value skips the hop back to the first rank, checks
     * that rank itself (its right neighbour). So a member completes only when
     * every member has the same signature: with any disagreement the call
     * completes nowhere, and abort_call makes it fail at once everywhere. */
    st = send_grant(r);
    if (st != SHS_OK)
        return st;

    uint64_t last_progress = shs__now_ns();
    uint64_t limit_ns = (uint64_t)coll->timeout_ms * 1000000ull;
    int empty = 0;
    long nap_ns = 1000;
    while (r->done < r->recv_total || r->sent < r->send_total ||
           (r->send_total > 0 && !r->flushed) || !r->granted) {
        bool moved = false;
        st = take_notifications(r, &moved);
        if (st == SHS_OK)
            st = post_sends(r, &moved);
        if (st == SHS_OK && (r->ready & 1u)) {
            st = process_one(r);
            moved = true;
        }
        if (st != SHS_OK)
            return st;
        if (moved) {
            empty = 0;
            nap_ns = 1000;
            last_progress = 0;
            continue;
        }
        coll->stats.idle_polls++;
        /* a member that found a disagreement has stopped: nothing will come
         * (looked for now and then: it costs polls, and only a failed call
         * sends it) */
        if ((coll->stats.idle_polls & 15) == 0) {
            st = take_abort(r);
            if (st != SHS_OK)
                return st;
        }
        /* a call over a group with a failed member can complete nowhere
         * (every member needs its data): give up as soon as the transport
         * has failed any member, not only a neighbour, instead of waiting
         * for the timeout (a neighbour that gave up stops sending) */
        if ((coll->stats.idle_polls & 63) == 0)
            for (int k = 0; k < r->n; k++) {
                int m = r->group == NULL ? k : r->group->ranks[k];
                if (k != r->me && shs_ctx_peer_status(coll->ctx, m, NULL) != SHS_OK)
                    return ring_fail(r, SHS_ERR_PEER_FAILED, m, "giving up: the group's member");
            }
        uint64_t now = shs__now_ns();
        if (last_progress == 0)
            last_progress = now;
        if (now - last_progress > limit_ns) {
            bool want_data = r->done < r->recv_total;
            return ring_fail(r, SHS_ERR_TIMEOUT, want_data ? r->left : r->right,
                             want_data ? "no data from" : "no grant, credit or completion from");
        }
        if (++empty > coll->spin)
            idle_wait(coll, &nap_ns);
    }
    return SHS_OK;
}

/* ------------------------------------------------------------------- API */

/* A refused call changes nothing: a context lent to the shadow thread is
 * not this call's failure, and the collective stays usable after the stop. */
static shs_status_t check_call(shs_coll_t *coll, const char *call, const shs_group_t *group,
                               shs_dtype_t dtype, shs_reduce_t op, int *n_p, int *me_p)
{
    if (coll == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(coll->ctx, call))
        return SHS_ERR_BAD_STATE;
    if (shs_dtype_size(dtype) == 0 || (op != SHS_REDUCE_SUM && op != SHS_REDUCE_AVG))
        return SHS_ERR_INVALID_ARG;
    if (coll->poisoned)
        return SHS_ERR_BAD_STATE;
    if (group == NULL) {
        *n_p = coll->size;
        *me_p = coll->rank;
        return SHS_OK;
    }
    if (group->size < 1 || group->size > SHS_GROUP_MAX || group->index < 0 ||
        group->index >= group->size || group->ranks[group->index] != coll->rank)
        return SHS_ERR_INVALID_ARG;
    for (int a = 0; a < group->size; a++) {
        if (group->ranks[a] < 0 || group->ranks[a] >= coll->size)
            return SHS_ERR_INVALID_ARG;
        for (int b = 0; b < a; b++)
            if (group->ranks[a] == group->ranks[b])
                return SHS_ERR_INVALID_ARG;
    }
    *n_p = group->size;
    *me_p = group->index;
    return SHS_OK;
}

static void ring_init(ring_t *r, shs_coll_t *coll, const shs_group_t *group, int n, int me,
                      shs_region_t *reg, size_t off, size_t count, size_t call_count,
                      shs_dtype_t dtype, shs_reduce_t op)
{
    memset(r, 0, sizeof(*r));
    r->coll = coll;
    r->group = group;
    r->n = n;
    r->me = me;
    r->left = group == NULL ? mod(me - 1, n) : group->ranks[mod(me - 1, n)];
    r->right = group == NULL ? mod(me + 1, n) : group->ranks[mod(me + 1, n)];
    r->reg = reg;
    r->reg_off = off;
    r->base = (char *)shs_region_addr(reg) + off;
    r->es = shs_dtype_size(dtype);
    r->dtype = dtype;
    r->op = op;
    r->count = count;
    r->call_count = call_count;
    r->group_hash = group_hash(coll, group, n);
}

shs_status_t shs_allreduce_region(shs_coll_t *coll, const shs_group_t *group,
                                  shs_region_t *region, size_t offset, size_t count,
                                  shs_dtype_t dtype, shs_reduce_t op)
{
    int n, me;
    shs_status_t st = check_call(coll, "shs_allreduce_region", group, dtype, op, &n, &me);
    if (st != SHS_OK)
        return st;
    if (region == NULL)
        return SHS_ERR_INVALID_ARG;
    size_t es = shs_dtype_size(dtype), len = shs_region_len(region);
    if (offset % es != 0 || offset > len || count > (len - offset) / es)
        return SHS_ERR_OUT_OF_BOUNDS;
    if (n == 1 || count == 0)
        return SHS_OK;
    ring_t r;
    ring_init(&r, coll, group, n, me, region, offset, count, count, dtype, op);
    return ring_run(&r);
}

shs_status_t shs_allreduce(shs_coll_t *coll, const shs_group_t *group, void *buf,
                           size_t count, shs_dtype_t dtype, shs_reduce_t op)
{
    int n, me;
    shs_status_t st = check_call(coll, "shs_allreduce", group, dtype, op, &n, &me);
    if (st != SHS_OK)
        return st;
    if (n == 1 || count == 0)
        return SHS_OK;
    if (buf == NULL)
        return SHS_ERR_INVALID_ARG;
    if (coll->stage == NULL)
        return SHS_ERR_UNSUPPORTED;
    size_t es = shs_dtype_size(dtype);
    size_t pass = coll->stage_bytes / es;
    if (pass == 0)
        return SHS_ERR_UNSUPPORTED;
    char *user = buf, *stage = shs_region_addr(coll->stage);
    for (size_t done = 0; done < count; done += pass) {
        size_t k = count - done < pass ? count - done : pass;
        memcpy(stage, user + done * es, k * es);
        ring_t r;
        ring_init(&r, coll, group, n, me, coll->stage, 0, k, count, dtype, op);
        st = ring_run(&r);
        if (st != SHS_OK)
            return st;
        memcpy(user + done * es, stage, k * es);
    }
    return SHS_OK;
}

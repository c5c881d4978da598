/*
 * Private to the collectives (algorithms/coll/): the layout of a collective
 * and of one call's ring, the immediate layout, and what the files of the
 * folder share. The protocol is described in include/shadowsync/collective.h;
 * the comments here say why it is safe.
 *
 *   create.c     parameters (knobs, then shs_coll_params_t), their checks and
 *                the setup-time agreement; create, destroy, stats
 *   sig.c        call signatures: hash, compare, describe (no device)
 *   agree.c      grants and the per-call signature check, in two forms
 *                (signature area, or hash notification); aborting a call
 *   slots.c      inbox slots, the eager first chunk, credits, data
 *                notifications, failures
 *   ring.c       one call: plan, send, reduce, and the loop that waits
 *   allreduce.c  the public calls and their argument checks
 */
#ifndef SHS_ALGORITHMS_COLL_COLL_H
#define SHS_ALGORITHMS_COLL_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowsync/collective.h>

#include "algorithms/coll/endpoint.h"
#include "runtime/config.h"

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
typedef struct shs__call_sig {
    uint64_t count;          /* elements of the caller's call */
    uint64_t elems;          /* elements of this ring (a pass of a staged call) */
    uint64_t group;          /* hash of the group's ranks in ring order */
    uint32_t seq;            /* the grant's pair sequence number */
    uint16_t n;              /* group size; 0: never written */
    uint8_t dtype;
    uint8_t op;
} shs__call_sig_t;
/* Two signatures (alternate calls) at the end of each per-sender eager slot:
 * the grant area of that sender in the receiver's inbox, and in the sender's
 * own inbox (where nobody writes its slot) the source of its grants. */
#define SIG_AREA (2 * sizeof(shs__call_sig_t))

enum { /* what an aborted call's members disagree on */
    WHY_OTHER = 0,
    WHY_GROUP = 1,
    WHY_COUNT = 2,
    WHY_DTYPE = 3,
    WHY_OP = 4
};

/* The parameters of a collective: the knobs, then shs_coll_params_t. Every
 * rank must use the same ones (checked at create), except the timeout and
 * the receive queue depth, which only bound this rank. */
typedef struct shs__coll_conf {
    size_t slot_bytes;
    int slots;
    size_t stage_bytes;
    size_t eager_bytes;      /* per-sender slot for the first chunk of a call */
    size_t min_chunk;        /* smallest chunk of a short call */
    int channel;             /* -1: allocated by the context */
    int wire;                /* shs_wire_t */
    int timeout_ms;
    int rq_depth;            /* SHS_RQ_DEPTH: bounds the slots */
    unsigned spin;           /* empty ring passes before a waiting rank naps */
} shs__coll_conf_t;

/* A waiting member of a call spins this fraction of the context's
 * SHS_POLL_SPIN (62 passes at its default of 2000), then naps like every
 * wait. A ring pass polls for up to four notifications, and unlike a
 * transport wait, every member of a call waits at once, between every two
 * chunks: with more ranks than cores, or a software device whose kernel
 * threads move the data, the spinning takes the CPU from exactly what it
 * waits for. Measured (8 ranks, one 2-CPU Soft-RoCE guest, mean of 20
 * calls): 4 KiB 232 ms spinning 2000 passes against 64 ms spinning 64;
 * 64 KiB 475 ms against 113 ms. */
#define SHS__COLL_SPIN_DIV 32

typedef struct shs__coll_ring shs__coll_ring_t;

/* How a call's signature reaches the left neighbour with the grant: in the
 * grant area at the end of the sender's eager slot (the full signature, so
 * a mismatch names both), or, when the eager slot has no room for it, as a
 * 21-bit hash in a notification before the grant. */
typedef struct shs__coll_agree_ops {
    size_t area;             /* bytes it keeps at the end of each eager slot */
    /* send this call's signature and grant to the left neighbour */
    shs_status_t (*grant)(shs__coll_ring_t *r, const shs__call_sig_t *sig, uint32_t grant);
    /* the right neighbour's grant, once its signature matches `mine`:
     * *imm_p and *got = true, or *got = false while it has not come */
    shs_status_t (*take)(shs__coll_ring_t *r, const shs__call_sig_t *mine, uint32_t *imm_p,
                         bool *got, bool *moved);
} shs__coll_agree_ops_t;

extern const shs__coll_agree_ops_t shs__coll_agree_area;
extern const shs__coll_agree_ops_t shs__coll_agree_hash;

struct shs_coll {
    shs_ctx_t *ctx;          /* regions and the setup's barriers */
    shs_ctx_t *io;           /* the calls' writes, polls and channel: ctx, or an
                                endpoint of it (shs__coll_create_on) */
    int rank;
    int size;
    shs__coll_conf_t conf;
    const shs__coll_agree_ops_t *agree;
    uint32_t chan;           /* channel << IMM_CHAN_SHIFT */
    bool chan_taken;         /* chan is held from the context */
    shs_region_t *inbox;     /* slots * slot_bytes shared slots, then one eager
                                slot of eager_bytes per rank; left neighbours
                                write here */
    shs_region_t *stage;     /* stage_bytes, or NULL */
    shs_region_t *outbox;    /* bf16 wire: what a rank sends, encoded; laid out as
                                the inbox's shared slots and one eager slot, and
                                indexed like the right neighbour's; or NULL */
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

/* One call's state, on the stack. Items are the chunks a rank sends to its
 * right neighbour, numbered in sending order over the 2(n-1) steps; step u
 * sends segment (me - u) mod n and receives segment (me - 1 - u) mod n, so
 * the receive stream of a rank is the send stream of its left neighbour.
 * Send item (u, c), u >= 1, forwards what receive item (u - 1, c) produced. */
struct shs__coll_ring {
    shs_coll_t *coll;
    const shs_group_t *group; /* NULL: every rank */
    int n, me, left, right;
    shs_region_t *reg;
    size_t reg_off;          /* byte offset of element 0 in reg */
    char *base;              /* its address */
    size_t es;               /* element size */
    size_t wes;              /* element size on the wire (2: bf16) */
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
};

static inline uint32_t shs__coll_imm(const shs__coll_ring_t *r, int kind, uint64_t seq)
{
    return r->coll->chan | ((uint32_t)kind << IMM_KIND_SHIFT) | ((uint32_t)seq & IMM_SEQ_MASK);
}

/* Bytes of an eager slot that a first chunk may fill. */
static inline size_t shs__coll_eager_cap(const shs_coll_t *coll)
{
    return coll->conf.eager_bytes - coll->agree->area;
}

/* create.c */
void shs__coll_conf_apply(shs__coll_conf_t *conf, const shs_coll_params_t *params);
shs_status_t shs__coll_conf_check(shs__coll_conf_t *conf, const shs_coll_params_t *params);

/* sig.c */
uint64_t shs__coll_group_hash(const shs_group_t *group, int n);
uint32_t shs__coll_sig_hash(const shs__call_sig_t *s);
unsigned shs__coll_sig_why(const shs__call_sig_t *a, const shs__call_sig_t *b);
const char *shs__coll_why_name(unsigned why);
void shs__coll_sig_describe(char *buf, size_t len, const shs__call_sig_t *s);
uint32_t shs__coll_abort_payload(unsigned why, int origin);
void shs__coll_abort_decode(uint32_t imm, unsigned *why_p, int *origin_p);

/* agree.c */
shs_status_t shs__coll_send_grant(shs__coll_ring_t *r);
shs_status_t shs__coll_take_grant(shs__coll_ring_t *r, bool *moved);
shs_status_t shs__coll_take_abort(shs__coll_ring_t *r);

/* slots.c */
size_t shs__coll_slot_of(const shs_coll_t *coll, int sender, uint64_t t, unsigned eager_first);
shs_status_t shs__coll_poll(shs__coll_ring_t *r, int peer, uint32_t mask, uint32_t match,
                            uint32_t *imm_p, bool *got, const char *what);
shs_status_t shs__coll_take_notifications(shs__coll_ring_t *r, bool *moved);
shs_status_t shs__coll_credit_left(shs__coll_ring_t *r, uint64_t seq);
shs_status_t shs__coll_fail(shs__coll_ring_t *r, shs_status_t st, int peer, const char *what);
shs_status_t shs__coll_protocol_error(shs__coll_ring_t *r, int peer, const char *what,
                                      uint32_t got, uint64_t want);

/* ring.c */
size_t shs__coll_chunk_elems(const shs__coll_conf_t *conf, size_t seg, size_t es);
void shs__coll_ring_init(shs__coll_ring_t *r, shs_coll_t *coll, const shs_group_t *group,
                         int n, int me, shs_region_t *reg, size_t off, size_t count,
                         size_t call_count, shs_dtype_t dtype, shs_reduce_t op);
void shs__coll_ring_plan(shs__coll_ring_t *r);
shs_status_t shs__coll_ring_run(shs__coll_ring_t *r);

#endif

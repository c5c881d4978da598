/*
 * shadowsync: collectives. A pipelined ring allreduce over any group of
 * ranks (a DS-Sync group of schedule.h, or all ranks).
 *
 * Algorithm. Reduce-scatter then allgather around the ring of the group's
 * members in the order of group->ranks: the buffer is cut into n segments
 * (n = group size; any count, the first count % n segments one element
 * longer), each segment into chunks of at most slot_bytes (and of about
 * segment / slots, but not below min_chunk, when the segment is shorter than
 * the slots together), and the chunks
 * stream to the right neighbour so that the link, the reduction and the
 * next hop overlap. Each rank therefore sends and receives
 * 2 (n-1)/n * count elements. Data moves by RDMA WRITE with immediate into
 * the right neighbour's inbox: `slots` slots of slot_bytes, registered once
 * by shs_coll_create() and never per call. Credit-based flow control: a
 * sender writes a slot only after the receiver has granted it, so a slow
 * peer is never overrun and never has more than `slots` notifications
 * outstanding per peer (the transport's SHS_RQ_DEPTH bound). Each call
 * starts with a grant from receiver to sender, which is what makes groups
 * that change from call to call safe (a rank's shared slots are written only
 * by its current left neighbour, and only once that rank has finished with
 * its previous call); a call returns once the device has completed the
 * rank's writes, and the caller has its buffer back. A small first chunk
 * does not wait for the grant: it goes to an eager slot that the receiver
 * keeps for each sender (eager_bytes), which saves one message latency per
 * call, the most a small (latency-bound) reduction among few ranks can save. The segment a rank reduces last is scaled there for
 * SHS_REDUCE_AVG, and the allgather copies results, so every member ends
 * with bit-identical values.
 *
 * Groups. The members of one group call shs_allreduce() with the same group
 * (same ranks in the same order), count, dtype and op; ranks outside it do
 * not take part. The disjoint groups of a DS-Sync round run concurrently
 * over the connections the context made at creation: no connection,
 * registration or rendezvous happens in a call. A group of one rank is a
 * no-op (SUM and AVG of one value are that value).
 *
 * Agreement. Each call's grant carries the rank's call signature (the
 * caller's count, the elements of the pass, dtype, op, group size and a
 * hash of the group's ranks in order) to its left neighbour, which compares
 * it with its own before it sends anything but the eager first chunk, and
 * no rank ends a call before that check. Members that disagree on count,
 * dtype, op or group therefore never complete the call: the rank that sees
 * the difference logs an error naming the peer and both signatures (for
 * example "the members disagree on the count: peer 1 calls with count 2000,
 * ...; this rank with count 1000, ..."), and tells its neighbours, who tell
 * theirs, so that every member returns SHS_ERR_SIZE_MISMATCH within a few
 * message latencies (each logs which rank found it), never after the
 * timeout. The members' buffers then hold unspecified values. With
 * eager_bytes below 64 the signature travels as a 21-bit hash in a
 * notification instead: the check is the same (a disagreement goes unseen
 * with probability 2^-21), but the log names only this rank's values.
 * Not covered: a count of 0 and a group of one return at once on the ranks
 * that pass them (their peers time out). A disagreement on the group is
 * seen where a rank takes another for its right neighbour and that rank
 * takes it for its left one (the grant goes between them), for example a
 * rotation of the same ring, or a rank left out or added next to a rank
 * that lists it. Where the ranks' rings share no such pair, or a rank
 * names ranks that do not call with it, the ranks wait for messages that
 * never come and fail with SHS_ERR_TIMEOUT (or SHS_ERR_PROTOCOL for a grant
 * of an unexpected call); ranks whose groups agree among themselves may then
 * complete without the others.
 *
 * After a failed call (a mismatch, a timeout, a failed peer, a protocol
 * error) the collective is poisoned on every member that took part: every
 * later shs_allreduce and shs_allreduce_region on it returns
 * SHS_ERR_BAD_STATE, because notifications and writes of the abandoned call
 * may still be in flight or queued towards it. To go on, create a new
 * collective (on every rank, like any create) while the poisoned one still
 * exists, so that the new one takes another channel and none of the old
 * call's notifications can reach it; destroy the poisoned one after a
 * shs_ctx_barrier(). A call refused at entry (a forked child's copy of
 * the context) does not poison it.
 *
 * User buffers. shs_allreduce() takes any memory: it copies the buffer into
 * the collective's registered staging area (stage_bytes), reduces there and
 * copies the result back, in passes of stage_bytes when the buffer is
 * larger (so any count works, in count / stage_bytes rounds of the ring).
 * shs_allreduce_region() takes data that already lives in a region of the
 * context (region.h): no copy at all, the NIC reads the region directly. Use
 * it for large or frequent reductions (the model, a snapshot); the staged
 * call costs two extra passes over memory, which is noise next to a
 * software RDMA device but not next to a 100 Gb/s NIC.
 *
 * Channels. Immediates of a collective carry its channel in their top 8
 * bits (rma.h, shs_poll_imm_match), so other users of the context's
 * immediates (for example the shadow engine's owner inbox) are left alone
 * as long as they use other values of those bits. Unless
 * SHS_COLL_PARAM_CHANNEL names one, the context allocates the channel
 * (the highest free one, the same on every rank when all ranks create and
 * destroy collectives in the same order), so several collectives on one
 * context have different channels and may be used in any interleaving. An
 * explicit channel that is taken on a rank makes shs_coll_create fail on
 * every rank: SHS_ERR_BAD_STATE where it is taken, SHS_ERR_SIZE_MISMATCH
 * on the others.
 *
 * Wire. With SHS_WIRE_BF16 (a parameter every rank must share, checked at
 * create) float32 calls move bfloat16: every chunk a rank sends is its
 * float32 data rounded to bf16 (nearest, ties to even) in a registered
 * outbox of the collective's own (slots * slot_bytes + eager_bytes), and every chunk it
 * receives is widened and added in float32. Half the bytes cross the
 * device; the price is one rounding per hop of the reduce-scatter and one
 * of the final value. The owner of a segment rounds its final value to
 * bf16 before the allgather, so every member still ends with bit-identical
 * values (all bf16-representable). Error bound, for n members and float32
 * inputs x_1..x_n of an element (AVG: divide both sides by n):
 *     |result - sum x_i| <= n (2^-8 + 2^-23) (1 + 2^-7)^n  sum |x_i|
 * (2^-8 is bf16's unit roundoff, 2^-24 float32's: each of the n - 1 hops
 * and the final value add at most one bf16 and one float32 rounding of a
 * partial sum, whose magnitude the last factor bounds; the extra 2^-24
 * covers the average's scaling). Values beyond the
 * largest bf16 (about 3.39e38) become infinities; NaN stays NaN. float64
 * calls on a bf16 collective are refused (SHS_ERR_UNSUPPORTED, logged):
 * use a native collective for them. A group of one rank returns its
 * values unrounded, as with a native wire.
 *
 * Hot path: no allocation, no lock, no system call beyond posting, polling
 * and short naps while idle (after a share of SHS_POLL_SPIN empty polls). Every wait is bounded by timeout_ms without
 * progress. A failure (peer failed, timeout, protocol violation) is logged
 * once with the peer named and poisons the collective: later calls return
 * SHS_ERR_BAD_STATE, because an abandoned call may still have data in
 * flight towards the inbox.
 *
 * Threads: like the context, a collective is driven by one thread at a
 * time, and that thread must be the only one using the context meanwhile.
 * A running shadow engine does not count: it runs on an endpoint of its
 * own (shadow.h), so collectives on the context work beside it.
 */
#ifndef SHADOWSYNC_COLLECTIVE_H
#define SHADOWSYNC_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/context.h>
#include <shadowsync/defs.h>
#include <shadowsync/region.h>
#include <shadowsync/schedule.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque: the layout is private to the library. */
typedef struct shs_coll shs_coll_t;

typedef enum shs_dtype {
    SHS_DTYPE_FLOAT32 = 0,
    SHS_DTYPE_FLOAT64 = 1
} shs_dtype_t;

typedef enum shs_reduce {
    SHS_REDUCE_SUM = 0,
    SHS_REDUCE_AVG = 1      /* the sum divided by the group size */
} shs_reduce_t;

/* Bits of shs_coll_params_t.field_mask: a field is used only when its bit
 * is set; otherwise it comes from its SHS_COLL_* knob (or its default). */
enum {
    SHS_COLL_PARAM_SLOT_BYTES = 1u << 0,
    SHS_COLL_PARAM_SLOTS = 1u << 1,
    SHS_COLL_PARAM_STAGE_BYTES = 1u << 2,
    SHS_COLL_PARAM_CHANNEL = 1u << 3,
    SHS_COLL_PARAM_TIMEOUT = 1u << 4,
    SHS_COLL_PARAM_EAGER_BYTES = 1u << 5,
    SHS_COLL_PARAM_MIN_CHUNK = 1u << 6,
    SHS_COLL_PARAM_WIRE = 1u << 7
};


typedef struct shs_coll_params {
    uint64_t field_mask;  /* SHS_COLL_PARAM_* bits of the fields below that are set */
    size_t slot_bytes;    /* bytes per inbox slot = per pipelined chunk, a multiple
                             of 8 (SHS_COLL_CHUNK) */
    int slots;            /* inbox slots = credits of the left neighbour, 1..63, with
                             2 * slots + 6 <= SHS_RQ_DEPTH (SHS_COLL_SLOTS) */
    size_t stage_bytes;   /* registered staging area of shs_allreduce(), the
                             largest buffer reduced in one pass; 0: none, only
                             shs_allreduce_region() (SHS_COLL_STAGE) */
    int channel;          /* 0..255, top 8 bits of the immediates (SHS_COLL_CHANNEL) */
    int timeout_ms;       /* bound on a wait without progress (SHS_OP_TIMEOUT_MS) */
    size_t eager_bytes;   /* per-sender inbox slot for the first chunk of a call when
                             it fits, a multiple of 8 (capped at slot_bytes); its last
                             64 bytes, when it has them, hold that sender's call
                             signatures (see Agreement), so a first chunk is eager
                             when it is at most eager_bytes - 64 bytes; 0: none
                             (SHS_COLL_EAGER) */
    size_t min_chunk;     /* smallest pipelined chunk, a multiple of 8: a segment
                             smaller than slots * slot_bytes is cut into `slots`
                             chunks of at least this size, so that short calls
                             pipeline too; >= slot_bytes: always slot_bytes
                             (SHS_COLL_MIN_CHUNK) */
    int wire;             /* shs_wire_t: how float32 data travels (SHS_COLL_WIRE) */
} shs_coll_params_t;

/*
 * shs_coll_create - set up collectives on ctx: register this rank's inbox
 * (slots * slot_bytes + (ranks of ctx) * eager_bytes) and staging area
 * (stage_bytes) with the other ranks, and with SHS_WIRE_BF16 an outbox
 * (slots * slot_bytes + eager_bytes).
 * Collective over ALL ranks of ctx (every rank calls it, in the same order
 * relative to other collective calls on ctx, with the same parameters).
 * params may be NULL (everything from the knobs). *coll_p is owned by the
 * caller, released with shs_coll_destroy().
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL ctx or coll_p); SHS_ERR_CONFIG
 * (a parameter out of range, a size above the knob's bound such as a
 * negative value cast, or slots too many for SHS_RQ_DEPTH: the same on every
 * rank given the same value, checked before anything is sent);
 * SHS_ERR_SIZE_MISMATCH (ranks passed different parameters: every rank
 * fails, a rank with an invalid one with its own status); SHS_ERR_NO_MEMORY; SHS_ERR_UNSUPPORTED (ctx rejoined a running
 * job); and what shs_region_alloc() returns.
 */
SHS_API shs_status_t shs_coll_create(shs_ctx_t *ctx, const shs_coll_params_t *params,
                                     shs_coll_t **coll_p);

/*
 * shs_coll_destroy - release the regions and the collective. Not collective,
 * but no peer may still run a collective call that involves this rank: end
 * with shs_ctx_barrier() first. NULL is ignored. Must precede
 * shs_ctx_destroy().
 */
SHS_API void shs_coll_destroy(shs_coll_t *coll);

/*
 * shs_allreduce - reduce count elements of buf over the members of group,
 * in place: on return every member's buf holds the elementwise sum (or
 * average) of all members' buffers. group NULL means all ranks of the
 * context in rank order; otherwise this rank must be group->ranks[group->index]
 * and the ranks must be distinct and valid. buf is any memory (staged through
 * the registered staging area, see above); buf may be NULL when count is 0.
 * count 0 and groups of one rank return SHS_OK at once without
 * communicating.
 *
 * Every member must pass the same group, count, dtype and op (see
 * Agreement above); shs_allreduce and shs_allreduce_region may be mixed
 * for one call when count fits the staging area (then neither splits it).
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL coll, bad group, NULL buf with
 * count > 0, unknown dtype or op); SHS_ERR_UNSUPPORTED (stage_bytes is 0:
 * use shs_allreduce_region; or float64 on a bf16-wire collective); SHS_ERR_BAD_STATE (an earlier call failed, or
 * a forked child's copy: refused, changes nothing);
 * SHS_ERR_SIZE_MISMATCH (the members disagree on count, dtype, op or group:
 * every member returns it), SHS_ERR_PEER_FAILED, SHS_ERR_TIMEOUT,
 * SHS_ERR_PROTOCOL, or a transport error, after which the collective is
 * poisoned.
 */
SHS_API shs_status_t shs_allreduce(shs_coll_t *coll, const shs_group_t *group, void *buf,
                                   size_t count, shs_dtype_t dtype, shs_reduce_t op);

/*
 * shs_allreduce_region - as shs_allreduce, on count elements that start at
 * byte offset `offset` (a multiple of the element size) of region, a region
 * of the same context with local access (any flags). Zero-copy: the device
 * reads the region directly; the caller must not touch that range during
 * the call. Status: as shs_allreduce, plus SHS_ERR_OUT_OF_BOUNDS.
 */
SHS_API shs_status_t shs_allreduce_region(shs_coll_t *coll, const shs_group_t *group,
                                          shs_region_t *region, size_t offset, size_t count,
                                          shs_dtype_t dtype, shs_reduce_t op);

/* Counters of one rank's collective, since shs_coll_create(). */
typedef struct shs_coll_stats {
    uint64_t calls;          /* allreduce calls that communicated */
    uint64_t bytes_sent;     /* payload bytes written to right neighbours */
    uint64_t chunks_sent;    /* data writes (one per chunk) */
    uint64_t idle_polls;     /* polls that found nothing to do */
} shs_coll_stats_t;

/* shs_coll_get_stats - copy the counters. Status: SHS_OK, SHS_ERR_INVALID_ARG. */
SHS_API shs_status_t shs_coll_get_stats(const shs_coll_t *coll, shs_coll_stats_t *stats_p);

/* shs_dtype_size - bytes per element of dtype (0 for an unknown type). */
SHS_API size_t shs_dtype_size(shs_dtype_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_COLLECTIVE_H */

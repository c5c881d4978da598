/* One call of the pipelined ring allreduce (reduce-scatter, then allgather)
 * on the transport's public API: the plan of its chunks, the sends, the
 * reduction of what arrives, and the loop that drives them and waits. */
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/coll/coll.h"
#include "algorithms/reduce.h"
#include "runtime/wait.h"

static inline int mod(int a, int n)
{
    a %= n;
    return a < 0 ? a + n : a;
}

static inline size_t seg_len(const shs__coll_ring_t *r, int j)
{
    return r->q + ((size_t)j < r->rem);
}

static inline size_t seg_off(const shs__coll_ring_t *r, int j)
{
    return (size_t)j * r->q + ((size_t)j < r->rem ? (size_t)j : r->rem);
}

static inline size_t seg_chunks(const shs__coll_ring_t *r, int j)
{
    return (seg_len(r, j) + r->chunk_elems - 1) / r->chunk_elems;
}

static inline int send_seg(const shs__coll_ring_t *r, int u)
{
    return mod(r->me - u, r->n);
}

static inline int recv_seg(const shs__coll_ring_t *r, int u)
{
    return mod(r->me - 1 - u, r->n);
}

/* Element range [*off, *off + *len) of chunk c of segment j. */
static inline void chunk_range(const shs__coll_ring_t *r, int j, size_t c, size_t *off,
                               size_t *len)
{
    size_t start = c * r->chunk_elems, l = seg_len(r, j) - start;
    *off = seg_off(r, j) + start;
    *len = l < r->chunk_elems ? l : r->chunk_elems;
}

/* Move a cursor past steps that have no chunks (segments of zero elements). */
static void send_cursor_settle(shs__coll_ring_t *r)
{
    int steps = 2 * (r->n - 1);
    while (r->su < steps && r->sc >= seg_chunks(r, send_seg(r, r->su))) {
        if (r->su >= 1)
            r->dep_base += seg_chunks(r, recv_seg(r, r->su - 1));
        r->su++;
        r->sc = 0;
    }
}

static void recv_cursor_settle(shs__coll_ring_t *r)
{
    int steps = 2 * (r->n - 1);
    while (r->ru < steps && r->rc >= seg_chunks(r, recv_seg(r, r->ru))) {
        r->ru++;
        r->rc = 0;
    }
}

/* Elements per chunk of a call whose longest segment has seg elements: a
 * slot's worth, or, when the segment is shorter than the slots together,
 * about seg / slots (so that `slots` chunks pipeline through the ring) but
 * not below min_chunk. Every member derives it from the same count, group
 * size and agreed parameters. */
size_t shs__coll_chunk_elems(const shs__coll_conf_t *conf, size_t seg, size_t es)
{
    size_t max_e = conf->slot_bytes / es, min_e = conf->min_chunk / es; /* >= 1: 8 | min */
    size_t want = (seg + (size_t)conf->slots - 1) / (size_t)conf->slots;
    want = (want + 7) & ~(size_t)7; /* whole 32/64-byte vectors */
    if (want < min_e)
        want = min_e;
    return want < max_e ? want : max_e;
}

static uint64_t stream_total(const shs__coll_ring_t *r, int (*seg)(const shs__coll_ring_t *, int))
{
    uint64_t t = 0;
    for (int u = 0; u < 2 * (r->n - 1); u++)
        t += seg_chunks(r, seg(r, u));
    return t;
}

/* The first chunk of a call may go to the receiver's eager slot for this
 * sender without waiting for a grant, when it is a chunk of the sender's
 * own segment (step 0) and small enough. Nobody else writes that slot, and
 * the sender's previous use of it is over: the receiver reduced that chunk
 * into a segment whose final value the sender had to receive before its
 * previous call could end. (A first chunk from a later step, when count < n
 * leaves segments empty, is not in that chain, so it waits for the grant.)
 * Both sides derive the choice from the same chunk. */
static unsigned first_is_eager(const shs__coll_ring_t *r, int u, int j, size_t c)
{
    size_t off, len;
    chunk_range(r, j, c, &off, &len);
    return u == 0 && len * r->wes <= shs__coll_eager_cap(r->coll);
}

/* Cut the call into segments and chunks and find where both streams start;
 * no communication. */
void shs__coll_ring_plan(shs__coll_ring_t *r)
{
    r->q = r->count / (size_t)r->n;
    r->rem = r->count % (size_t)r->n;
    r->chunk_elems = shs__coll_chunk_elems(&r->coll->conf, r->q + (r->rem > 0), r->wes);
    r->send_total = stream_total(r, send_seg);
    r->recv_total = stream_total(r, recv_seg);
    send_cursor_settle(r);
    recv_cursor_settle(r);
    if (r->send_total > 0)
        r->send_eager = first_is_eager(r, r->su, send_seg(r, r->su), r->sc);
    if (r->recv_total > 0)
        r->recv_eager = first_is_eager(r, r->ru, recv_seg(r, r->ru), r->rc);
}

/* Where send item t comes from: the buffer itself, or (bf16 wire) its
 * encoding in the outbox slot that mirrors the slot it goes to in the right
 * neighbour's inbox (slot_of as if we were sender 0: the shared slots, then
 * one eager slot). An outbox slot is written again only for the item that
 * takes the same inbox slot, i.e. after the right neighbour gave that slot
 * back (a credit, or the next call's grant): it had the data, and the
 * device reads the outbox again only to retransmit, which the responder
 * discards (see process_one). */
static void send_source(const shs__coll_ring_t *r, size_t off, size_t len, shs_region_t **reg_p,
                        size_t *off_p)
{
    shs_coll_t *coll = r->coll;
    if (r->wes == r->es) {
        *reg_p = r->reg;
        *off_p = r->reg_off + off * r->es;
        return;
    }
    size_t o = shs__coll_slot_of(coll, 0, r->sent, r->send_eager);
    shs__bf16_encode((uint16_t *)((char *)shs_region_addr(coll->outbox) + o),
                     (const float *)(r->base + off * r->es), len);
    *reg_p = coll->outbox;
    *off_p = o;
}

/* Post every send item whose data is final and for which a slot is free. */
static shs_status_t post_sends(shs__coll_ring_t *r, bool *moved)
{
    shs_coll_t *coll = r->coll;
    while (r->sent < r->send_total) {
        bool eager = r->sent < r->send_eager;
        if (!eager && r->credits == 0)
            break;
        if (r->su >= 1 && r->dep_base + r->sc >= r->done)
            break; /* its receive item is not reduced yet */
        size_t off, len;
        chunk_range(r, send_seg(r, r->su), r->sc, &off, &len);
        bool last = r->sent + 1 == r->send_total;
        shs_region_t *src;
        size_t src_off;
        send_source(r, off, len, &src, &src_off);
        shs_status_t st = shs_write_imm(coll->io, r->right, src, src_off, coll->inbox,
                                        shs__coll_slot_of(coll, coll->rank, r->sent, r->send_eager),
                                        len * r->wes, shs__coll_imm(r, KIND_DATA, r->sent),
                                        last ? SHS_OP_SIGNAL : 0);
        if (st != SHS_OK)
            return shs__coll_fail(r, st, r->right, "writing to");
        r->sent++;
        if (!eager)
            r->credits--;
        coll->stats.bytes_sent += len * r->wes;
        coll->stats.chunks_sent++;
        r->sc++;
        send_cursor_settle(r);
        *moved = true;
    }
    return SHS_OK;
}

static void reduce_chunk(const shs__coll_ring_t *r, void *dst, const void *src, size_t len,
                         bool last_rs)
{
    bool scale = last_rs && r->op == SHS_REDUCE_AVG;
    if (r->wes != r->es) {
        /* bf16 wire: the owner's final value is rounded like the copies the
         * others will decode, so that all members end bit-identical */
        if (scale)
            shs__reduce_sum_scale_bf16(dst, src, len, (float)(1.0 / r->n));
        else
            shs__reduce_sum_bf16(dst, src, len);
        if (last_rs)
            shs__bf16_round(dst, len);
    } else if (r->dtype == SHS_DTYPE_FLOAT32) {
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
static shs_status_t process_one(shs__coll_ring_t *r)
{
    shs_coll_t *coll = r->coll;
    size_t off, len;
    chunk_range(r, recv_seg(r, r->ru), r->rc, &off, &len);
    const char *slot = (const char *)shs_region_addr(coll->inbox) +
                       shs__coll_slot_of(coll, r->left, r->done, r->recv_eager);
    char *dst = r->base + off * r->es;
    if (r->ru < r->n - 1)
        reduce_chunk(r, dst, slot, len, r->ru == r->n - 2);
    else if (r->wes != r->es)
        shs__bf16_decode((float *)dst, (const uint16_t *)slot, len);
    else
        memcpy(dst, slot, len * r->es);
    uint64_t item = r->done++;
    r->ready >>= 1;
    r->rc++;
    recv_cursor_settle(r);
    /* a shared slot the left neighbour will need again comes back as a credit */
    if (item >= r->recv_eager && item + (uint64_t)coll->conf.slots < r->recv_total)
        return shs__coll_credit_left(r, item - r->recv_eager);
    return SHS_OK;
}

/* One pass over everything that can move; *moved says whether anything did. */
static shs_status_t ring_step(shs__coll_ring_t *r, bool *moved)
{
    shs_status_t st = shs__coll_take_notifications(r, moved);
    if (st == SHS_OK)
        st = post_sends(r, moved);
    if (st == SHS_OK && (r->ready & 1u)) {
        st = process_one(r);
        *moved = true;
    }
    return st;
}

/* After a pass that found nothing: a member that found a disagreement has
 * stopped, so nothing will come (looked for now and then: it costs polls,
 * and only a failed call sends it). And a call over a group with a failed
 * member can complete nowhere (every member needs its data): give up as
 * soon as the transport has failed any member, not only a neighbour,
 * instead of waiting for the timeout (a neighbour that gave up stops
 * sending). */
static shs_status_t idle_checks(shs__coll_ring_t *r)
{
    shs_coll_t *coll = r->coll;
    uint64_t idle = ++coll->stats.idle_polls;
    if ((idle & 15) == 0) {
        shs_status_t st = shs__coll_take_abort(r);
        if (st != SHS_OK)
            return st;
    }
    if ((idle & 63) != 0)
        return SHS_OK;
    for (int k = 0; k < r->n; k++) {
        int m = r->group == NULL ? k : r->group->ranks[k];
        if (k != r->me && shs_ctx_peer_status(coll->io, m, NULL) != SHS_OK)
            return shs__coll_fail(r, SHS_ERR_PEER_FAILED, m, "giving up: the group's member");
    }
    return SHS_OK;
}

static bool ring_busy(const shs__coll_ring_t *r)
{
    return r->done < r->recv_total || r->sent < r->send_total ||
           (r->send_total > 0 && !r->flushed) || !r->granted;
}

shs_status_t shs__coll_ring_run(shs__coll_ring_t *r)
{
    shs_coll_t *coll = r->coll;
    shs__coll_ring_plan(r);
    if (r->send_total == 0 && r->recv_total == 0)
        return SHS_OK;
    coll->stats.calls++;
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
     * completes nowhere, and the abort makes it fail at once everywhere. */
    shs_status_t st = shs__coll_send_grant(r);
    if (st != SHS_OK)
        return st;

    /* the one waiter, with the collective's share of the spin (coll.h);
     * the timeout counts from the last progress */
    shs__waiter_t w;
    shs__waiter_init(&w, coll->conf.spin, coll->conf.timeout_ms);
    while (ring_busy(r)) {
        bool moved = false;
        st = ring_step(r, &moved);
        if (st != SHS_OK)
            return st;
        if (moved) {
            shs__waiter_progress(&w, true);
            continue;
        }
        st = idle_checks(r);
        if (st != SHS_OK)
            return st;
        if (shs__waiter_idle(&w)) {
            bool want_data = r->done < r->recv_total;
            return shs__coll_fail(r, SHS_ERR_TIMEOUT, want_data ? r->left : r->right,
                                  want_data ? "no data from" : "no grant, credit or completion from");
        }
    }
    return SHS_OK;
}

void shs__coll_ring_init(shs__coll_ring_t *r, shs_coll_t *coll, const shs_group_t *group,
                         int n, int me, shs_region_t *reg, size_t off, size_t count,
                         size_t call_count, shs_dtype_t dtype, shs_reduce_t op)
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
    r->base = reg == NULL ? NULL : (char *)shs_region_addr(reg) + off;
    r->es = shs_dtype_size(dtype);
    r->wes = coll->conf.wire == SHS_WIRE_BF16 && dtype == SHS_DTYPE_FLOAT32 ? 2 : r->es;
    r->dtype = dtype;
    r->op = op;
    r->count = count;
    r->call_count = call_count;
    if (group != NULL) {
        r->group_hash = shs__coll_group_hash(group, n);
    } else {
        if (coll->all_hash == 0)
            coll->all_hash = shs__coll_group_hash(NULL, n);
        r->group_hash = coll->all_hash;
    }
}

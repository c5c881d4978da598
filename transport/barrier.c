/*
 * shs_ctx_barrier over the mesh, among the living ranks: no rank is special
 * after start-up (rank 0's death used to break every barrier, since the
 * bootstrap's collectives are a star through it).
 *
 * Every rank's scratch area (context.c) holds one arrival word per rank.
 * Barrier e: this rank writes e into its word at every peer the transport
 * has not failed (8-byte RDMA writes, flushed), then waits until every such
 * peer's word here is at least e, or the transport fails that peer. The
 * words only grow, so a rank already in barrier e + 1 counts as arrived at
 * e; one at e + 2 (or at e + 1 when this rank enters e) is skew, an error.
 * A peer that dies before or during a barrier is not waited for once its
 * failure is seen: its disconnect, an error completion of the barrier's own
 * write to it, or that write not completing within SHS_OP_TIMEOUT_MS. A
 * rank that is alive but slow is waited for, up to
 * SHS_BOOTSTRAP_TIMEOUT_MS.
 *
 * The allgather after start-up (region registration) rides on it: each rank
 * writes its record, tagged with the barrier it is about to enter, into its
 * slot at every living peer, flushes, and enters the barrier; past it, the
 * records of every peer the barrier counted are here. Two sets of slots are
 * used in turn (by the barrier's parity): a rank that leaves first and
 * starts the next allgather writes into the other set, and it cannot write
 * into this one again before this rank has met it at the next barrier.
 */
#include <stdatomic.h>
#include <string.h>

#include "runtime/clock.h"
#include "runtime/log.h"
#include "runtime/wait.h"
#include "transport/transport.h"

/* How often a waiting rank writes its arrival again to the peers it waits
 * for (ns). */
#define BARRIER_PROBE_NS 250000000ull

static uint64_t arrived(const shs_ctx_t *ctx, int p)
{
    const uint64_t *w = (const uint64_t *)((const char *)ctx->scratch +
                                           SHS__SCRATCH_ARRIVE + (size_t)p * 8);
    return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

/* Write arrival e into every peer not yet failed (all: every peer; else
 * only those this rank still waits for). */
static void announce(shs_ctx_t *ctx, uint64_t e, bool all)
{
    for (int p = 0; p < ctx->size; p++) {
        if (p == ctx->rank || (!all && arrived(ctx, p) >= e))
            continue;
        /* a failure is the transport's to record; the barrier goes on
         * without that peer */
        (void)shs__post_scratch_word(ctx, p, SHS__SCRATCH_SOURCE,
                                     SHS__SCRATCH_ARRIVE + (size_t)ctx->rank * 8);
    }
}

/* A peer whose arrival writes have not completed for SHS_OP_TIMEOUT_MS
 * while this rank waited for it is failed here: where the queue pair
 * retries without end (rxe at SHS_QP_RETRY=7) no error completion would
 * ever come. A stopped process's device still acknowledges. */
static void fail_silent(shs_ctx_t *ctx, int p, uint64_t waited_ns)
{
    shs__peer_t *peer = &ctx->peers[p];
    const shs__conn_t *c = &peer->conns[0];
    if (c->sq_done < c->sq_posted && waited_ns / 1000000u >= (uint64_t)ctx->cfg.op_timeout_ms)
        shs__peer_fail(peer, SHS_ERR_TIMEOUT,
                       "no completion for %d ms of its barrier arrival writes "
                       "(SHS_OP_TIMEOUT_MS): peer dead or link down?",
                       ctx->cfg.op_timeout_ms);
}

/* Whether barrier e waits for peer p: a living peer, unless it rejoined
 * and e comes before its first barrier (transport/rejoin/). */
static bool counts(const shs_ctx_t *ctx, int p, uint64_t e)
{
    return p != ctx->rank && !shs__peer_is_failed(&ctx->peers[p]) &&
           e >= __atomic_load_n(&ctx->peers[p].first_bar, __ATOMIC_ACQUIRE);
}

/* A living peer already past barrier e + 1 (at_entry: past e): the ranks
 * called the barrier a different number of times, or it counted this rank
 * failed and went on. Passing would pair barriers that do not match. */
static int ahead(const shs_ctx_t *ctx, uint64_t e, bool at_entry)
{
    for (int p = 0; p < ctx->size; p++)
        if (counts(ctx, p, e) && arrived(ctx, p) > (at_entry ? e : e + 1))
            return p;
    return -1;
}

static shs_status_t skewed(const shs_ctx_t *ctx, uint64_t e, int p)
{
    SHS_ERROR("barrier %llu: rank %d is already at barrier %llu: the ranks called "
              "shs_ctx_barrier a different number of times, or it counted this rank failed",
              (unsigned long long)e, p, (unsigned long long)arrived(ctx, p));
    return SHS_ERR_PROTOCOL;
}

static shs_status_t meet(shs_ctx_t *ctx, uint64_t e);

shs_status_t shs__mesh_barrier(shs_ctx_t *ctx)
{
    /* a rejoiner staged before this barrier takes part in it; one staged
     * after waits for the next (it read bar_epoch under the same lock) */
    pthread_mutex_lock(&ctx->bar_lock);
    if (atomic_load_explicit(&ctx->revive_pending, memory_order_acquire))
        shs__rejoin_install(ctx);
    uint64_t e = __atomic_add_fetch(&ctx->bar_epoch, 1, __ATOMIC_RELAXED);
    ctx->in_barrier = true;
    pthread_mutex_unlock(&ctx->bar_lock);
    shs_status_t st = meet(ctx, e);
    ctx->in_barrier = false;
    /* a rejoiner's regions announced before it arrived are in use after */
    if (st == SHS_OK && atomic_load_explicit(&ctx->revive_pending, memory_order_acquire))
        shs__rejoin_install(ctx);
    return st;
}

static shs_status_t meet(shs_ctx_t *ctx, uint64_t e)
{
    int p = ahead(ctx, e, true);
    if (p >= 0)
        return skewed(ctx, e, p);
    memcpy((char *)ctx->scratch + SHS__SCRATCH_SOURCE, &e, 8);
    announce(ctx, e, true);
    /* landed before this rank waits: a peer that passes and leaves has
     * this rank's arrival already (failed peers are skipped) */
    (void)shs_flush(ctx, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
    shs__waiter_t w;
    shs__waiter_init(&w, ctx->cfg.poll_spin < 0 ? 0u : (unsigned)ctx->cfg.poll_spin,
                     ctx->cfg.bootstrap_timeout_ms);
    uint64_t t0 = shs__now_ns(), probe = t0 + BARRIER_PROBE_NS;
    int waiting;
    for (;;) {
        waiting = -1;
        for (int q = 0; q < ctx->size && waiting < 0; q++)
            if (counts(ctx, q, e) && arrived(ctx, q) < e)
                waiting = q;
        if (waiting < 0)
            break;
        /* completions (an error one fails its peer) */
        if (shs__poll(ctx) < 0)
            return SHS_ERR_DEVICE;
        if (shs__waiter_idle(&w)) {
            SHS_ERROR("barrier %llu: rank %d did not arrive within %d ms "
                      "(SHS_BOOTSTRAP_TIMEOUT_MS)", (unsigned long long)e, waiting,
                      ctx->cfg.bootstrap_timeout_ms);
            return SHS_ERR_TIMEOUT;
        }
        uint64_t now = shs__now_ns();
        if (now >= probe) {
            /* without connection events (SHS_CONNECT=oob) a peer that died
             * after this rank's write landed is seen only by the next write
             * to it: one now and then, to the peers still awaited */
            fail_silent(ctx, waiting, now - t0);
            announce(ctx, e, false);
            probe = now + BARRIER_PROBE_NS;
        }
    }
    p = ahead(ctx, e, false);
    return p >= 0 ? skewed(ctx, e, p) : SHS_OK;
}

shs_status_t shs__mesh_allgather(shs_ctx_t *ctx, const void *mine, size_t len, void *all,
                                 bool *present)
{
    if (len > SHS__GATHER_MAX)
        return SHS_ERR_INVALID_ARG;
    /* this thread drives the context: the next barrier is this one */
    uint64_t e = __atomic_load_n(&ctx->bar_epoch, __ATOMIC_RELAXED) + 1;
    size_t set = shs__scratch_gather_off(ctx->size) +
                 (size_t)(e & 1) * (size_t)ctx->size * SHS__GATHER_SLOT;
    size_t own = set + (size_t)ctx->rank * SHS__GATHER_SLOT;
    uint8_t *scratch = ctx->scratch;
    memcpy(scratch + own, &e, 8);
    memcpy(scratch + own + 8, mine, len);
    for (int p = 0; p < ctx->size; p++)
        if (p != ctx->rank) /* a failure is the transport's to record */
            (void)shs__post_scratch_write(ctx, p, own, own, 8 + len);
    (void)shs_flush(ctx, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
    shs_status_t st = ctx->size == 1 ? SHS_OK : shs__mesh_barrier(ctx);
    if (st != SHS_OK)
        return st;
    for (int p = 0; p < ctx->size; p++) {
        const uint8_t *slot = scratch + set + (size_t)p * SHS__GATHER_SLOT;
        uint64_t tag;
        memcpy(&tag, slot, 8);
        present[p] = p == ctx->rank || (counts(ctx, p, e) && tag == e);
        if (p != ctx->rank && counts(ctx, p, e) && tag != e) {
            SHS_ERROR("allgather at barrier %llu: rank %d met the barrier without its record "
                      "(tag %llu)", (unsigned long long)e, p, (unsigned long long)tag);
            st = SHS_ERR_PROTOCOL;
        }
        if (present[p])
            memcpy((uint8_t *)all + (size_t)p * len, slot + 8, len);
        else
            memset((uint8_t *)all + (size_t)p * len, 0, len);
    }
    return st;
}

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
 * e. A peer that dies before or during a barrier is not waited for once its
 * failure is seen: the barrier's own write to it fails within
 * SHS_OP_TIMEOUT_MS at most (sooner with a disconnect event). A rank that is
 * alive but slow is waited for, up to SHS_BOOTSTRAP_TIMEOUT_MS.
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

shs_status_t shs__mesh_barrier(shs_ctx_t *ctx)
{
    uint64_t e = ++ctx->bar_epoch;
    memcpy((char *)ctx->scratch + SHS__SCRATCH_SOURCE, &e, 8);
    announce(ctx, e, true);
    /* landed before this rank waits: a peer that passes and leaves has
     * this rank's arrival already */
    for (int p = 0; p < ctx->size; p++)
        if (p != ctx->rank && !shs__peer_is_failed(&ctx->peers[p]))
            (void)shs_flush(ctx, p, SHS_TIMEOUT_DEFAULT);
    shs__waiter_t w;
    shs__waiter_init(&w, ctx->cfg.poll_spin < 0 ? 0u : (unsigned)ctx->cfg.poll_spin,
                     ctx->cfg.bootstrap_timeout_ms);
    uint64_t probe = shs__now_ns() + BARRIER_PROBE_NS;
    int waiting;
    for (;;) {
        waiting = -1;
        for (int p = 0; p < ctx->size && waiting < 0; p++)
            if (p != ctx->rank && arrived(ctx, p) < e && !shs__peer_is_failed(&ctx->peers[p]))
                waiting = p;
        if (waiting < 0)
            return SHS_OK;
        /* completions (an error one fails its peer) */
        (void)shs__poll(ctx);
        if (shs__waiter_idle(&w))
            break;
        if (shs__now_ns() >= probe) {
            /* without connection events (SHS_CONNECT=oob) a peer that died
             * after this rank's write landed is seen only by the next write
             * to it: one now and then, to the peers still awaited */
            announce(ctx, e, false);
            probe = shs__now_ns() + BARRIER_PROBE_NS;
        }
    }
    SHS_ERROR("barrier %llu: rank %d did not arrive within %d ms (SHS_BOOTSTRAP_TIMEOUT_MS)",
              (unsigned long long)e, waiting, ctx->cfg.bootstrap_timeout_ms);
    return SHS_ERR_TIMEOUT;
}

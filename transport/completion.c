/* Completions and immediates: polling the context's one completion queue
 * (and installing a rejoined rank's queue pairs on the polling thread),
 * shs_progress, and taking immediates in arrival order. No allocation, no
 * lock; a wait naps briefly once it has been idle for a while (the
 * waiter). */
#include <arpa/inet.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/services.h"
#include "transport/transport.h"

static void fail_from_wc(shs_ctx_t *ctx, shs__conn_t *conn, const struct ibv_wc *wc)
{
    if (shs__peer_is_failed(conn->peer))
        return; /* the first error was reported; the rest are its flushes */
    shs__peer_fail(conn->peer, shs__wc_status_to_status(wc->status),
                   "%s on qp 0x%x (%s): %s", ibv_wc_status_str(wc->status),
                   conn->qp->qp_num, (wc->wr_id & SHS__WRID_RECV) ? "receive" : "send",
                   shs__wc_status_hint(wc->status));
}

int shs__poll(shs_ctx_t *ctx)
{
    /* a rejoined rank's queue pairs are installed by this thread, here
     * (not while it waits in a barrier: barrier.c installs at entry) */
    if (!ctx->in_barrier && atomic_load_explicit(&ctx->revive_pending, memory_order_acquire))
        shs__rejoin_install(ctx);
    return shs__poll_cq(ctx);
}

int shs__poll_cq(shs_ctx_t *ctx)
{
    int n = ibv_poll_cq(ctx->cq, SHS__WC_BATCH, ctx->wc);

    if (n < 0) {
        if (atomic_exchange(&ctx->device_failed, 1) == 0)
            SHS_ERROR("%s: ibv_poll_cq failed (%d): the device is unusable", ctx->dev_name, n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const struct ibv_wc *wc = &ctx->wc[i];
        shs__conn_t *conn = ctx->conns[wc->wr_id & ((1u << SHS__WRID_CONN_BITS) - 1)];
        shs__peer_t *peer = conn->peer;

        if (wc->status != IBV_WC_SUCCESS) {
            fail_from_wc(ctx, conn, wc);
            if (!(wc->wr_id & SHS__WRID_RECV))
                conn->sq_done = (wc->wr_id >> SHS__WRID_SEQ_SHIFT) + 1;
            continue;
        }
        if (wc->wr_id & SHS__WRID_RECV) {
            /* room is guaranteed: one entry per receive not yet reposted */
            uint32_t slot = (uint32_t)(wc->wr_id >> SHS__WRID_SEQ_SHIFT);
            if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                unsigned t = peer->imm_tail & peer->imm_mask;
                peer->imm_val[t] = ntohl(wc->imm_data);
                peer->imm_conn[t] = (uint16_t)conn->qp_slot;
                peer->imm_tail++;
                /* the buffer holds nothing: free now, posted again on take */
                conn->rx_free[conn->rx_nfree++] = slot;
            } else {
                unsigned t = peer->msg_tail & peer->imm_mask;
                peer->msg_conn[t] = (uint16_t)conn->qp_slot;
                peer->msg_slot[t] = slot;
                peer->msg_len[t] = wc->byte_len;
                peer->msg_tail++;
            }
        } else {
            uint64_t done = (wc->wr_id >> SHS__WRID_SEQ_SHIFT) + 1;
            if (done > conn->sq_done)
                conn->sq_done = done;
        }
    }
    return n;
}

shs_status_t shs_progress(shs_ctx_t *ctx)
{
    if (ctx == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_progress"))
        return SHS_ERR_BAD_STATE;
    if (shs__device_failed(ctx))
        return SHS_ERR_DEVICE;
    return shs__poll(ctx) < 0 ? SHS_ERR_DEVICE : SHS_OK;
}

/* Take the oldest pending immediate of p whose value has (value & mask) ==
 * match and give its receive back. Older entries that do not match move up
 * one place, keeping their order for the callers that want them. */
static bool take_imm(shs_ctx_t *ctx, shs__peer_t *p, uint32_t mask, uint32_t match,
                     uint32_t *imm_p)
{
    unsigned k = p->imm_head;
    while (k != p->imm_tail && (p->imm_val[k & p->imm_mask] & mask) != match)
        k++;
    if (k == p->imm_tail)
        return false;
    unsigned h = k & p->imm_mask;
    shs__conn_t *conn = &p->conns[p->imm_conn[h]];
    *imm_p = p->imm_val[h];
    for (; k != p->imm_head; k--) {
        unsigned to = k & p->imm_mask, from = (k - 1) & p->imm_mask;
        p->imm_val[to] = p->imm_val[from];
        p->imm_conn[to] = p->imm_conn[from];
    }
    p->imm_head++;
    int rc = shs__conn_post_recv(ctx, conn);
    if (rc != 0 && !shs__peer_is_failed(p))
        shs__peer_fail(p, SHS_ERR_TRANSPORT, "ibv_post_recv on qp 0x%x: %s",
                       conn->qp->qp_num, strerror(rc));
    return true;
}

/* One attempt: SHS_OK (taken), SHS_ERR_TIMEOUT (nothing), SHS_ERR_PEER_FAILED. */
static shs_status_t try_imm(shs_ctx_t *ctx, int peer, uint32_t mask, uint32_t match,
                            int *peer_p, uint32_t *imm_p)
{
    if (peer != SHS_PEER_ANY) {
        shs__peer_t *p = &ctx->peers[peer];
        if (take_imm(ctx, p, mask, match, imm_p)) {
            if (peer_p != NULL)
                *peer_p = peer;
            return SHS_OK;
        }
        return shs__peer_is_failed(p) ? SHS_ERR_PEER_FAILED : SHS_ERR_TIMEOUT;
    }
    bool any_alive = false;
    for (int k = 0; k < ctx->size; k++) {
        int r = (int)((ctx->imm_rr + (unsigned)k) % (unsigned)ctx->size);
        if (r == ctx->rank)
            continue;
        shs__peer_t *p = &ctx->peers[r];
        if (take_imm(ctx, p, mask, match, imm_p)) {
            ctx->imm_rr = (unsigned)r + 1;
            if (peer_p != NULL)
                *peer_p = r;
            return SHS_OK;
        }
        if (!shs__peer_is_failed(p))
            any_alive = true;
    }
    return any_alive ? SHS_ERR_TIMEOUT : SHS_ERR_PEER_FAILED;
}

shs_status_t shs_poll_imm_match(shs_ctx_t *ctx, int peer, uint32_t mask, uint32_t match,
                                int *peer_p, uint32_t *imm_p)
{
    if (ctx == NULL || imm_p == NULL || peer < SHS_PEER_ANY || peer >= ctx->size ||
        peer == ctx->rank || (match & ~mask) != 0)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_poll_imm"))
        return SHS_ERR_BAD_STATE;
    if (shs__poll(ctx) < 0)
        return SHS_ERR_DEVICE;
    return try_imm(ctx, peer, mask, match, peer_p, imm_p);
}

shs_status_t shs_poll_imm(shs_ctx_t *ctx, int peer, int *peer_p, uint32_t *imm_p)
{
    return shs_poll_imm_match(ctx, peer, 0, 0, peer_p, imm_p);
}

shs_status_t shs_wait_imm(shs_ctx_t *ctx, int peer, int *peer_p, uint32_t *imm_p,
                          int timeout_ms)
{
    return shs_wait_imm_match(ctx, peer, 0, 0, peer_p, imm_p, timeout_ms);
}

shs_status_t shs_wait_imm_match(shs_ctx_t *ctx, int peer, uint32_t mask, uint32_t match,
                                int *peer_p, uint32_t *imm_p, int timeout_ms)
{
    if (ctx == NULL || imm_p == NULL || peer < SHS_PEER_ANY || peer >= ctx->size ||
        peer == ctx->rank || (match & ~mask) != 0)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_wait_imm"))
        return SHS_ERR_BAD_STATE;
    shs__waiter_t w;
    shs__ctx_waiter_init(&w, ctx, timeout_ms);
    bool drained = false;
    for (;;) {
        shs_status_t status = try_imm(ctx, peer, mask, match, peer_p, imm_p);
        if (status == SHS_ERR_PEER_FAILED && !drained) {
            /* an immediate that arrived before the peer left may still sit
             * in the completion queue (shared by all peers): take all that is
             * there first */
            drained = true;
            int n;
            while ((n = shs__poll(ctx)) == SHS__WC_BATCH)
                ;
            if (n < 0)
                return SHS_ERR_DEVICE;
            continue;
        }
        if (status != SHS_ERR_TIMEOUT)
            return status;
        int n = shs__poll(ctx);
        if (n < 0)
            return SHS_ERR_DEVICE;
        if (n > 0)
            shs__waiter_progress(&w, false); /* the timeout bounds the whole wait */
        else if (timeout_ms == 0 || shs__waiter_idle(&w))
            return SHS_ERR_TIMEOUT;
    }
}

/* Two-sided messages: receive buffers, taking and giving back messages.
 * Sending lives with the other posting paths in rma.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "runtime/memory.h"
#include "transport/services.h"
#include "transport/transport.h"

shs_status_t shs__msg_setup(shs_ctx_t *ctx)
{
    size_t msg = ctx->cfg.msg_size;
    if (msg == 0)
        return SHS_OK;
    size_t len = (size_t)ctx->nconns * (size_t)ctx->cfg.rq_depth * msg;
    shs__mem_params_t mp;
    shs__mem_params_init(&mp, len);
    mp.device = ctx->dev_name;
    mp.hugepages = ctx->cfg.hugepages;
    shs_status_t status = shs__mem_alloc(&mp, &ctx->rx_mem);
    if (status != SHS_OK) {
        SHS_ERROR("receive buffers: %zu bytes (%d connections x SHS_RQ_DEPTH %d x "
                  "SHS_MSG_SIZE %zu): %s", len, ctx->nconns, ctx->cfg.rq_depth, msg,
                  shs_status_string(status));
        return status;
    }
    ctx->rx_mr = ibv_reg_mr(ctx->pd, ctx->rx_mem.addr, len, IBV_ACCESS_LOCAL_WRITE);
    if (ctx->rx_mr == NULL) {
        SHS_ERROR("%s: ibv_reg_mr (%zu bytes of receive buffers): %s; check `ulimit -l`",
                  ctx->dev_name, len, strerror(errno));
        shs__mem_free(&ctx->rx_mem);
        return SHS_ERR_NO_RESOURCE;
    }
    return SHS_OK;
}

void shs__msg_teardown(shs_ctx_t *ctx)
{
    if (ctx->rx_mr != NULL && ibv_dereg_mr(ctx->rx_mr) != 0)
        SHS_WARN("%s: ibv_dereg_mr (receive buffers): %s", ctx->dev_name, strerror(errno));
    ctx->rx_mr = NULL;
    shs__mem_free(&ctx->rx_mem);
    memset(&ctx->rx_mem, 0, sizeof(ctx->rx_mem));
}

shs_status_t shs__msg_check(shs_ctx_t *ctx)
{
    uint64_t mine = ctx->cfg.msg_size;
    uint64_t *all = calloc((size_t)ctx->size, sizeof(*all));
    if (all == NULL)
        return SHS_ERR_NO_MEMORY;
    shs_status_t status = shs__boot_allgather(ctx->boot, &mine, sizeof(mine), all);
    for (int r = 1; r < ctx->size && status == SHS_OK; r++) {
        if (all[r] != all[0]) {
            /* every rank sees the same table and fails the same way */
            SHS_ERROR("rank %d has SHS_MSG_SIZE %llu but rank 0 has %llu; every rank must "
                      "use the same message size", r, (unsigned long long)all[r],
                      (unsigned long long)all[0]);
            status = SHS_ERR_SIZE_MISMATCH;
        }
    }
    free(all);
    return status;
}

/* Take the oldest message of p into *msg_p. */
static bool take_msg(shs_ctx_t *ctx, shs__peer_t *p, shs_msg_t *msg_p)
{
    if (p->msg_head == p->msg_tail)
        return false;
    unsigned h = p->msg_head & p->imm_mask;
    shs__conn_t *conn = &p->conns[p->msg_conn[h]];
    uint32_t slot = p->msg_slot[h];
    p->msg_head++;
    conn->rx_held[slot] = 1;
    msg_p->peer = p->rank;
    msg_p->data = (const char *)ctx->rx_mem.addr +
                  ((size_t)conn->index * (size_t)ctx->cfg.rq_depth + slot) * ctx->cfg.msg_size;
    msg_p->len = p->msg_len[h];
    msg_p->handle = ((uint64_t)conn->index << 32) | slot;
    return true;
}

/* One look: SHS_OK (taken), SHS_ERR_TIMEOUT (nothing), SHS_ERR_PEER_FAILED. */
static shs_status_t try_msg(shs_ctx_t *ctx, int peer, shs_msg_t *msg_p)
{
    if (peer != SHS_PEER_ANY) {
        shs__peer_t *p = &ctx->peers[peer];
        if (take_msg(ctx, p, msg_p))
            return SHS_OK;
        return shs__peer_is_failed(p) ? SHS_ERR_PEER_FAILED : SHS_ERR_TIMEOUT;
    }
    bool any_alive = false;
    for (int k = 0; k < ctx->size; k++) {
        int r = (int)((ctx->msg_rr + (unsigned)k) % (unsigned)ctx->size);
        if (r == ctx->rank)
            continue;
        if (take_msg(ctx, &ctx->peers[r], msg_p)) {
            ctx->msg_rr = (unsigned)r + 1;
            return SHS_OK;
        }
        if (!shs__peer_is_failed(&ctx->peers[r]))
            any_alive = true;
    }
    return any_alive ? SHS_ERR_TIMEOUT : SHS_ERR_PEER_FAILED;
}

shs_status_t shs_recv(shs_ctx_t *ctx, int peer, shs_msg_t *msg_p, int timeout_ms)
{
    if (ctx == NULL || msg_p == NULL || peer < SHS_PEER_ANY || peer >= ctx->size ||
        peer == ctx->rank)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_recv"))
        return SHS_ERR_BAD_STATE;
    if (ctx->rx_mr == NULL)
        return SHS_ERR_UNSUPPORTED;
    /* what is already there needs no clock: the fast path of a ping-pong */
    shs_status_t status = try_msg(ctx, peer, msg_p);
    if (status != SHS_ERR_TIMEOUT)
        return status;
    shs__waiter_t w;
    shs__ctx_waiter_init(&w, ctx, timeout_ms);
    for (;;) {
        int n = shs__poll(ctx);
        if (n < 0)
            return SHS_ERR_DEVICE;
        if (n > 0) {
            status = try_msg(ctx, peer, msg_p);
            if (status != SHS_ERR_TIMEOUT)
                return status;
            shs__waiter_progress(&w, false); /* the timeout bounds the whole wait */
        } else if (timeout_ms == 0 || shs__waiter_idle(&w)) {
            return SHS_ERR_TIMEOUT;
        } else if (w.empty % SHS__CLOCK_EVERY == 0) {
            /* a peer that failed without a completion (the event thread saw it) */
            status = try_msg(ctx, peer, msg_p);
            if (status != SHS_ERR_TIMEOUT)
                return status;
        }
    }
}

shs_status_t shs_recv_release(shs_ctx_t *ctx, const shs_msg_t *msg)
{
    if (ctx == NULL || msg == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_recv_release"))
        return SHS_ERR_BAD_STATE;
    uint64_t ci = msg->handle >> 32, slot = msg->handle & 0xffffffffu;
    if (ci >= (uint64_t)ctx->nconns || slot >= (uint64_t)ctx->cfg.rq_depth ||
        !ctx->conns[ci]->rx_held[slot]) {
        SHS_ERROR("shs_recv_release: not a message held from this context (released twice?)");
        return SHS_ERR_INVALID_ARG;
    }
    shs__conn_t *conn = ctx->conns[ci];
    conn->rx_held[slot] = 0;
    conn->rx_free[conn->rx_nfree++] = (uint32_t)slot;
    if (shs__peer_is_failed(conn->peer))
        return SHS_ERR_PEER_FAILED;
    int rc = shs__conn_post_recv(ctx, conn);
    if (rc != 0) {
        shs__peer_fail(conn->peer, SHS_ERR_TRANSPORT, "ibv_post_recv on qp 0x%x: %s",
                       conn->qp->qp_num, strerror(rc));
        return SHS_ERR_PEER_FAILED;
    }
    return SHS_OK;
}

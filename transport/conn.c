/* Per-peer state, queue pairs and receive slots shared by both connect modes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "runtime/log.h"
#include "transport/transport.h"

static void peer_failv(int level, shs__peer_t *peer, shs_status_t status, const char *fmt,
                       va_list ap)
{
    /* the async thread and the caller's thread may both see the failure */
    if (atomic_flag_test_and_set(&peer->claimed))
        return;
    vsnprintf(peer->reason, sizeof(peer->reason), fmt, ap);
    peer->fail_status = status;
    if (peer->up == NULL)
        atomic_store_explicit(&peer->fail_gen, atomic_load(&peer->gen), memory_order_relaxed);
    atomic_store_explicit(&peer->failed, 1, memory_order_release);
    SHS__LOG_AT(level, "peer %d (%s) failed: %s", peer->rank, peer->addr, peer->reason);
    /* a peer that failed on an endpoint failed for the whole process: the
     * context and its other endpoints stop waiting for it too */
    if (peer->up != NULL &&
        atomic_load_explicit(&peer->up->gen, memory_order_acquire) == peer->up_gen &&
        !atomic_flag_test_and_set(&peer->up->claimed)) {
        const char pre[] = "seen on an endpoint: ";
        snprintf(peer->up->reason, sizeof(peer->up->reason), "%s%.*s", pre,
                 (int)(sizeof(peer->up->reason) - sizeof(pre)), peer->reason);
        peer->up->fail_status = SHS_ERR_PEER_FAILED;
        atomic_store_explicit(&peer->up->fail_gen, peer->up_gen, memory_order_relaxed);
        atomic_store_explicit(&peer->up->failed, 1, memory_order_release);
    }
}

void shs__peer_fail(shs__peer_t *peer, shs_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    peer_failv(SHS_LOG_LVL_ERROR, peer, status, fmt, ap);
    va_end(ap);
}

void shs__peer_fail_at(int level, shs__peer_t *peer, shs_status_t status, const char *fmt,
                       ...)
{
    va_list ap;
    va_start(ap, fmt);
    peer_failv(level, peer, status, fmt, ap);
    va_end(ap);
}

static unsigned pow2_at_least(unsigned n)
{
    unsigned p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

shs_status_t shs__mesh_alloc(shs_ctx_t *ctx)
{
    int qpp = ctx->cfg.qps_per_peer;
    unsigned cap = pow2_at_least((unsigned)(qpp * ctx->cfg.rq_depth));

    if (qpp < 1 || (long)qpp * ctx->size >= (1l << SHS__WRID_CONN_BITS)) {
        SHS_ERROR("qps per peer %d is out of range for %d ranks", qpp, ctx->size);
        return SHS_ERR_CONFIG;
    }
    ctx->wr_mask = pow2_at_least((unsigned)ctx->cfg.sq_depth) - 1;
    ctx->peers = calloc((size_t)ctx->size, sizeof(*ctx->peers));
    ctx->conns = calloc((size_t)ctx->size * (size_t)qpp, sizeof(*ctx->conns));
    if (ctx->peers == NULL || ctx->conns == NULL)
        goto err_free;
    for (int r = 0; r < ctx->size; r++) {
        shs__peer_t *peer = &ctx->peers[r];
        peer->rank = r;
        atomic_init(&peer->failed, 0);
        atomic_flag_clear(&peer->claimed);
        snprintf(peer->addr, sizeof(peer->addr), "rank %d", r);
        peer->up = ctx->parent != NULL ? &ctx->parent->peers[r] : NULL;
        atomic_init(&peer->gen, 0);
        atomic_init(&peer->fail_gen, 0);
        atomic_init(&peer->revive, SHS__REVIVE_IDLE);
        peer->up_gen = peer->up != NULL ? atomic_load(&peer->up->gen) : 0;
        if (r == ctx->rank)
            continue;
        peer->conns = calloc((size_t)qpp, sizeof(*peer->conns));
        peer->imm_val = calloc(cap, sizeof(*peer->imm_val));
        peer->imm_conn = calloc(cap, sizeof(*peer->imm_conn));
        peer->msg_conn = calloc(cap, sizeof(*peer->msg_conn));
        peer->msg_slot = calloc(cap, sizeof(*peer->msg_slot));
        peer->msg_len = calloc(cap, sizeof(*peer->msg_len));
        if (peer->conns == NULL || peer->imm_val == NULL || peer->imm_conn == NULL ||
            peer->msg_conn == NULL || peer->msg_slot == NULL || peer->msg_len == NULL)
            goto err_free;
        peer->imm_mask = cap - 1;
        for (int q = 0; q < qpp; q++) {
            shs__conn_t *conn = &peer->conns[q];
            conn->rd_mark = calloc(ctx->wr_mask + 1, sizeof(*conn->rd_mark));
            conn->rx_free = calloc((size_t)ctx->cfg.rq_depth, sizeof(*conn->rx_free));
            conn->rx_held = calloc((size_t)ctx->cfg.rq_depth, sizeof(*conn->rx_held));
            if (conn->rd_mark == NULL || conn->rx_free == NULL || conn->rx_held == NULL)
                goto err_free;
            for (int i = 0; i < ctx->cfg.rq_depth; i++)
                conn->rx_free[i] = (uint32_t)(ctx->cfg.rq_depth - 1 - i);
            conn->rx_nfree = (unsigned)ctx->cfg.rq_depth;
            conn->peer = peer;
            conn->qp_slot = q;
            conn->index = ctx->nconns;
            ctx->conns[ctx->nconns++] = conn;
        }
    }
    return SHS_OK;

err_free:
    SHS_ERROR("out of memory for the state of %d peers", ctx->size);
    shs__mesh_free(ctx);
    return SHS_ERR_NO_MEMORY;
}

void shs__mesh_free(shs_ctx_t *ctx)
{
    if (ctx->peers != NULL) {
        for (int r = 0; r < ctx->size; r++) {
            for (int q = 0; ctx->peers[r].conns != NULL && q < ctx->cfg.qps_per_peer; q++) {
                free(ctx->peers[r].conns[q].rd_mark);
                free(ctx->peers[r].conns[q].rx_free);
                free(ctx->peers[r].conns[q].rx_held);
            }
            free(ctx->peers[r].conns);
            free(ctx->peers[r].imm_val);
            free(ctx->peers[r].imm_conn);
            free(ctx->peers[r].msg_conn);
            free(ctx->peers[r].msg_slot);
            free(ctx->peers[r].msg_len);
        }
    }
    free(ctx->peers);
    free(ctx->conns);
    ctx->peers = NULL;
    ctx->conns = NULL;
    ctx->nconns = 0;
}

shs_status_t shs__conn_create_qp(shs_ctx_t *ctx, shs__conn_t *conn)
{
    struct ibv_qp_init_attr attr = {
        .qp_context = conn,
        .send_cq = ctx->cq,
        .recv_cq = ctx->cq,
        .cap = {
            .max_send_wr = (uint32_t)ctx->cfg.sq_depth,
            .max_recv_wr = (uint32_t)ctx->cfg.rq_depth,
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };

    if (conn->cm_id != NULL) {
        if (conn->cm_id->verbs != ctx->verbs) {
            SHS_ERROR("peer %d: rdma_cm resolved %s to device %s, not %s; set SHS_DEVICE "
                      "or the gid index to match", conn->peer->rank, conn->peer->addr,
                      ibv_get_device_name(conn->cm_id->verbs->device), ctx->dev_name);
            return SHS_ERR_CONFIG;
        }
        if (rdma_create_qp(conn->cm_id, ctx->pd, &attr) != 0) {
            SHS_ERROR("peer %d: rdma_create_qp: %s", conn->peer->rank, strerror(errno));
            return SHS_ERR_NO_RESOURCE;
        }
        conn->qp = conn->cm_id->qp;
    } else {
        conn->qp = ibv_create_qp(ctx->pd, &attr);
        if (conn->qp == NULL) {
            SHS_ERROR("peer %d: ibv_create_qp (sq %d rq %d): %s", conn->peer->rank,
                      ctx->cfg.sq_depth, ctx->cfg.rq_depth, strerror(errno));
            return SHS_ERR_NO_RESOURCE;
        }
    }
    return SHS_OK;
}

int shs__conn_post_recv(shs_ctx_t *ctx, shs__conn_t *conn)
{
    struct ibv_sge sge;
    struct ibv_recv_wr wr = {0}, *bad;

    if (conn->rx_nfree == 0)
        return ENOSPC; /* more reposts than receives taken: a bug */
    uint32_t slot = conn->rx_free[--conn->rx_nfree];
    wr.wr_id = (uint64_t)conn->index | SHS__WRID_RECV | ((uint64_t)slot << SHS__WRID_SEQ_SHIFT);
    /* write-with-immediate consumes a receive but places no data through it:
     * without two-sided messages the receives carry no scatter list */
    if (ctx->rx_mr != NULL) {
        size_t msg = ctx->cfg.msg_size;
        sge.addr = (uintptr_t)ctx->rx_mem.addr +
                   ((size_t)conn->index * (size_t)ctx->cfg.rq_depth + slot) * msg;
        sge.length = (uint32_t)msg;
        sge.lkey = ctx->rx_mr->lkey;
        wr.sg_list = &sge;
        wr.num_sge = 1;
    }
    int rc = ibv_post_recv(conn->qp, &wr, &bad);
    if (rc != 0)
        conn->rx_free[conn->rx_nfree++] = slot;
    return rc;
}

shs_status_t shs__conn_post_recvs(shs_ctx_t *ctx, shs__conn_t *conn)
{
    for (int i = 0; i < ctx->cfg.rq_depth; i++) {
        int rc = shs__conn_post_recv(ctx, conn);
        if (rc != 0) {
            SHS_ERROR("peer %d qp 0x%x: ibv_post_recv: %s", conn->peer->rank,
                      conn->qp->qp_num, strerror(rc));
            return SHS_ERR_NO_RESOURCE;
        }
    }
    return SHS_OK;
}

void shs__gid_to_sockaddr(const uint8_t gid[16], uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (memcmp(gid, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        memcpy(&sin->sin_addr, gid + 12, 4);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        memcpy(&sin6->sin6_addr, gid, 16);
    }
}

void shs__gid_to_string(const uint8_t gid[16], char *buf, size_t len)
{
    struct sockaddr_storage ss;

    shs__gid_to_sockaddr(gid, 0, &ss);
    const void *a = ss.ss_family == AF_INET ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
                                            : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    if (inet_ntop(ss.ss_family, a, buf, (socklen_t)len) == NULL)
        snprintf(buf, len, "?");
}

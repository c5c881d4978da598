/* Out-of-band connection: GID/QPN/PSN over the bootstrap, then the QP state
 * machine by hand. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"
#include "transport/transport.h"

/* RNR NAK delay the responder advertises: 12 is 0.64 ms, a common choice that
 * retries quickly without flooding a receiver that is briefly behind. */
#define SHS__MIN_RNR_TIMER 12
/* RoCE v2 packets are routed; 64 hops is the usual IP default. */
#define SHS__HOP_LIMIT 64

typedef shs__oob_hdr_t oob_hdr_t;
typedef shs__oob_qp_t oob_qp_t;

void shs__oob_hdr_fill(const shs_ctx_t *ctx, shs__oob_hdr_t *h)
{
    memcpy(h->gid, ctx->gid.gid, 16);
    h->lid = htonl(ctx->port_attr.lid);
    h->mtu = htonl((uint32_t)ctx->port_attr.active_mtu);
    h->rd_atom = htonl((uint32_t)ctx->rd_atom);
    h->rd_resp = htonl((uint32_t)ctx->rd_resp);
}

shs_status_t shs__oob_qp_to_init(shs_ctx_t *ctx, shs__conn_t *conn)
{
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = (uint8_t)ctx->port,
        /* the QP allows every kind; each region's own flags restrict access */
        .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
    };
    int rc = ibv_modify_qp(conn->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                                IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        SHS_ERROR("peer %d qp 0x%x: to INIT: %s", conn->peer->rank, conn->qp->qp_num,
                  strerror(rc));
        return SHS_ERR_CONNECT;
    }
    return SHS_OK;
}

shs_status_t shs__oob_qp_to_rtr_rts(shs_ctx_t *ctx, shs__conn_t *conn, const oob_hdr_t *rh,
                                    const oob_qp_t *rq)
{
    enum ibv_mtu rmtu = (enum ibv_mtu)ntohl(rh->mtu);
    int r_rd_atom = (int)ntohl(rh->rd_atom);
    int r_rd_resp = (int)ntohl(rh->rd_resp);
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = rmtu < ctx->port_attr.active_mtu ? rmtu : ctx->port_attr.active_mtu,
        .dest_qp_num = ntohl(rq->qpn),
        .rq_psn = ntohl(rq->psn),
        /* accept as many READs as the peer may issue, within our limit */
        .max_dest_rd_atomic = (uint8_t)(r_rd_atom < ctx->rd_resp ? r_rd_atom : ctx->rd_resp),
        .min_rnr_timer = SHS__MIN_RNR_TIMER,
        .ah_attr = {
            .is_global = 1,
            .dlid = (uint16_t)ntohl(rh->lid),
            .port_num = (uint8_t)ctx->port,
            .grh = {
                .sgid_index = (uint8_t)ctx->gid.index,
                .hop_limit = SHS__HOP_LIMIT,
            },
        },
    };
    memcpy(attr.ah_attr.grh.dgid.raw, rh->gid, 16);
    int rc = ibv_modify_qp(conn->qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                                IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                                IBV_QP_MAX_DEST_RD_ATOMIC |
                                                IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
        SHS_ERROR("peer %d (%s) qp 0x%x: to RTR: %s", conn->peer->rank, conn->peer->addr,
                  conn->qp->qp_num, strerror(rc));
        return SHS_ERR_CONNECT;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = (uint8_t)ctx->cfg.qp_timeout;
    attr.retry_cnt = (uint8_t)ctx->cfg.qp_retry_cnt;
    /* a rejoiner's queue pairs retry receiver-not-ready without end (7): a
     * living rank posts its receives for them when it installs them, at its
     * next poll, and until then a message must wait, not fail the rank (the
     * wait for its completion is still bounded by SHS_OP_TIMEOUT_MS) */
    attr.rnr_retry = (uint8_t)(ctx->rejoined ? 7 : ctx->cfg.qp_rnr_retry);
    attr.sq_psn = conn->psn;
    /* issue as many READs as the peer accepts, within our limit */
    attr.max_rd_atomic = (uint8_t)(r_rd_resp < ctx->rd_atom ? r_rd_resp : ctx->rd_atom);
    rc = ibv_modify_qp(conn->qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                            IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                            IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
        SHS_ERROR("peer %d (%s) qp 0x%x: to RTS: %s", conn->peer->rank, conn->peer->addr,
                  conn->qp->qp_num, strerror(rc));
        return SHS_ERR_CONNECT;
    }
    conn->established = true;
    return SHS_OK;
}

shs_status_t shs__connect_oob(shs_ctx_t *ctx)
{
    shs_status_t status;
    int qpp = ctx->cfg.qps_per_peer;
    size_t nq = (size_t)ctx->size * (size_t)qpp;
    size_t rec_len = sizeof(oob_hdr_t) + nq * sizeof(oob_qp_t);
    uint8_t *mine = calloc(1, rec_len);
    uint8_t *all = calloc((size_t)ctx->size, rec_len);

    if (mine == NULL || all == NULL) {
        status = SHS_ERR_NO_MEMORY;
        goto out_free;
    }
    /* PSNs are random so that a stale packet of an earlier job is not taken
     * for one of ours */
    uint32_t psn_base = (uint32_t)(shs__now_ns() ^ ((uint64_t)getpid() << 20));
    for (int i = 0; i < ctx->nconns; i++) {
        shs__conn_t *conn = ctx->conns[i];
        conn->psn = (psn_base + (uint32_t)i * 0x10001u) & 0xffffffu;
        if ((status = shs__conn_create_qp(ctx, conn)) != SHS_OK ||
            (status = shs__oob_qp_to_init(ctx, conn)) != SHS_OK ||
            (status = shs__conn_post_recvs(ctx, conn)) != SHS_OK)
            goto out_free;
    }

    oob_hdr_t *h = (oob_hdr_t *)mine;
    oob_qp_t *q = (oob_qp_t *)(mine + sizeof(oob_hdr_t));
    shs__oob_hdr_fill(ctx, h);
    for (int i = 0; i < ctx->nconns; i++) {
        shs__conn_t *conn = ctx->conns[i];
        size_t slot = (size_t)conn->peer->rank * (size_t)qpp + (size_t)conn->qp_slot;
        q[slot].qpn = htonl(conn->qp->qp_num);
        q[slot].psn = htonl(conn->psn);
    }
    status = shs__boot_allgather(ctx->boot, mine, rec_len, all);
    if (status != SHS_OK)
        goto out_free;

    for (int i = 0; i < ctx->nconns; i++) {
        shs__conn_t *conn = ctx->conns[i];
        const uint8_t *rec = all + (size_t)conn->peer->rank * rec_len;
        const oob_hdr_t *rh = (const oob_hdr_t *)rec;
        const oob_qp_t *rq = (const oob_qp_t *)(rec + sizeof(oob_hdr_t)) +
                             (size_t)ctx->rank * (size_t)qpp + (size_t)conn->qp_slot;
        shs__gid_to_string(rh->gid, conn->peer->addr, sizeof(conn->peer->addr));
        status = shs__oob_qp_to_rtr_rts(ctx, conn, rh, rq);
        if (status != SHS_OK)
            goto out_free;
    }
    /* no rank may send before every peer's QP is ready to receive */
    status = shs__boot_barrier(ctx->boot);

out_free:
    free(mine);
    free(all);
    return status;
}

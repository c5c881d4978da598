/* Connection through librdmacm: each rank listens on the IP address that owns
 * its GID; the higher rank of every pair connects to the lower one, so every
 * pair has exactly one active side and nobody waits for itself. All address
 * and route resolutions run at once, driven by one event loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/clock.h"
#include "runtime/log.h"
#include "transport/transport.h"

#define SHS__CM_MAGIC 0x53484343u /* "SHCC" */

/* Private data of a connect request: who is calling, for which QP slot. */
typedef struct cm_hello {
    uint32_t magic;
    uint32_t rank;
    uint32_t slot;
    uint32_t size;
} cm_hello_t;

typedef struct cm_addr {
    uint8_t gid[16];
    uint16_t port; /* network order */
    uint16_t pad;
} cm_addr_t;

static void set_ack_timeout(shs_ctx_t *ctx, struct rdma_cm_id *id)
{
    uint8_t t = (uint8_t)ctx->cfg.qp_timeout;
    /* without it rdma_cm derives the ack timeout from the path record and
     * SHS_QP_TIMEOUT would not bound how fast a dead peer is noticed */
    if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)) != 0)
        SHS_WARN("rdma_set_option(ack timeout %u): %s; the route's default applies", t,
                 strerror(errno));
}

static void conn_param_fill(shs_ctx_t *ctx, struct rdma_conn_param *p, int initiator,
                            int responder)
{
    memset(p, 0, sizeof(*p));
    p->initiator_depth = (uint8_t)initiator;
    p->responder_resources = (uint8_t)responder;
    p->retry_count = (uint8_t)ctx->cfg.qp_retry_cnt;
    p->rnr_retry_count = (uint8_t)ctx->cfg.qp_rnr_retry;
}

static shs_status_t on_route_resolved(shs_ctx_t *ctx, shs__conn_t *conn)
{
    shs_status_t status = shs__conn_create_qp(ctx, conn);
    if (status != SHS_OK)
        return status;
    status = shs__conn_post_recvs(ctx, conn);
    if (status != SHS_OK)
        return status;

    cm_hello_t hello = {htonl(SHS__CM_MAGIC), htonl((uint32_t)ctx->rank),
                        htonl((uint32_t)conn->qp_slot), htonl((uint32_t)ctx->size)};
    struct rdma_conn_param param;
    conn_param_fill(ctx, &param, ctx->rd_atom, ctx->rd_resp);
    param.private_data = &hello;
    param.private_data_len = sizeof(hello);
    if (rdma_connect(conn->cm_id, &param) != 0) {
        SHS_ERROR("peer %d (%s): rdma_connect: %s", conn->peer->rank, conn->peer->addr,
                  strerror(errno));
        return SHS_ERR_CONNECT;
    }
    return SHS_OK;
}

static shs_status_t on_connect_request(shs_ctx_t *ctx, struct rdma_cm_event *ev)
{
    const cm_hello_t *h = ev->param.conn.private_data;
    struct rdma_conn_param param;
    shs__conn_t *conn = NULL;

    if (h != NULL && ev->param.conn.private_data_len >= sizeof(*h) &&
        ntohl(h->magic) == SHS__CM_MAGIC && ntohl(h->size) == (uint32_t)ctx->size) {
        uint32_t r = ntohl(h->rank), q = ntohl(h->slot);
        if (r > (uint32_t)ctx->rank && r < (uint32_t)ctx->size &&
            q < (uint32_t)ctx->cfg.qps_per_peer && ctx->peers[r].conns[q].cm_id == NULL)
            conn = &ctx->peers[r].conns[q];
    }
    if (conn == NULL) {
        SHS_WARN("refused a connect request that is not from a higher rank of this job");
        rdma_reject(ev->id, NULL, 0);
        return SHS_OK; /* a stray caller is not our failure */
    }
    conn->cm_id = ev->id;
    ev->id->context = conn;
    set_ack_timeout(ctx, ev->id);
    shs_status_t status = shs__conn_create_qp(ctx, conn);
    if (status == SHS_OK)
        status = shs__conn_post_recvs(ctx, conn);
    if (status != SHS_OK) {
        rdma_reject(ev->id, NULL, 0);
        return status;
    }
    /* answer with what the caller asked for, within our own limits */
    int resp = ev->param.conn.initiator_depth < ctx->rd_resp ? ev->param.conn.initiator_depth
                                                             : ctx->rd_resp;
    int init = ev->param.conn.responder_resources < ctx->rd_atom
                   ? ev->param.conn.responder_resources
                   : ctx->rd_atom;
    conn_param_fill(ctx, &param, init, resp);
    if (rdma_accept(ev->id, &param) != 0) {
        SHS_ERROR("peer %d (%s): rdma_accept: %s", conn->peer->rank, conn->peer->addr,
                  strerror(errno));
        return SHS_ERR_CONNECT;
    }
    return SHS_OK;
}

/* One setup event. *established counts connections that came up. */
static shs_status_t on_event(shs_ctx_t *ctx, struct rdma_cm_event *ev, int *established)
{
    shs__conn_t *conn = ev->id->context;
    int timeout = ctx->cfg.connect_timeout_ms;

    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
        return on_connect_request(ctx, ev);
    if (conn == NULL) {
        SHS_DEBUG("rdma_cm event %s on the listener ignored", rdma_event_str(ev->event));
        return SHS_OK;
    }
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        set_ack_timeout(ctx, ev->id);
        if (rdma_resolve_route(ev->id, timeout) != 0) {
            SHS_ERROR("peer %d (%s): rdma_resolve_route: %s", conn->peer->rank,
                      conn->peer->addr, strerror(errno));
            return SHS_ERR_CONNECT;
        }
        return SHS_OK;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        return on_route_resolved(ctx, conn);
    case RDMA_CM_EVENT_ESTABLISHED:
        conn->established = true;
        (*established)++;
        return SHS_OK;
    case RDMA_CM_EVENT_REJECTED:
        SHS_ERROR("peer %d (%s) rejected the connection (status %d); a rank of another "
                  "job on that address?", conn->peer->rank, conn->peer->addr, ev->status);
        return SHS_ERR_CONNECT;
    default:
        SHS_ERROR("peer %d (%s): rdma_cm %s (status %d) while connecting; check that the "
                  "address is reachable and the gid index matches it", conn->peer->rank,
                  conn->peer->addr, rdma_event_str(ev->event), ev->status);
        return SHS_ERR_CONNECT;
    }
}

static shs_status_t listen_and_exchange(shs_ctx_t *ctx, cm_addr_t *all)
{
    struct sockaddr_storage ss;
    cm_addr_t mine = {0};

    if (rdma_create_id(ctx->cm_channel, &ctx->listen_id, NULL, RDMA_PS_TCP) != 0) {
        SHS_ERROR("rdma_create_id: %s", strerror(errno));
        return SHS_ERR_NO_RESOURCE;
    }
    shs__gid_to_sockaddr(ctx->gid.gid, 0, &ss);
    char addr[64];
    shs__gid_to_string(ctx->gid.gid, addr, sizeof(addr));
    if (rdma_bind_addr(ctx->listen_id, (struct sockaddr *)&ss) != 0) {
        SHS_ERROR("rdma_bind_addr(%s): %s; the address of gid %d is not local?", addr,
                  strerror(errno), ctx->gid.index);
        return SHS_ERR_CONNECT;
    }
    if (ctx->listen_id->verbs != ctx->verbs) {
        SHS_ERROR("address %s belongs to another device than %s", addr, ctx->dev_name);
        return SHS_ERR_CONFIG;
    }
    if (rdma_listen(ctx->listen_id, ctx->size * ctx->cfg.qps_per_peer) != 0) {
        SHS_ERROR("rdma_listen(%s): %s", addr, strerror(errno));
        return SHS_ERR_CONNECT;
    }
    memcpy(mine.gid, ctx->gid.gid, 16);
    mine.port = rdma_get_src_port(ctx->listen_id);
    return shs__boot_allgather(ctx->boot, &mine, sizeof(mine), all);
}

shs_status_t shs__connect_rdmacm(shs_ctx_t *ctx)
{
    shs_status_t status;
    cm_addr_t *all = calloc((size_t)ctx->size, sizeof(*all));
    int established = 0;
    shs__deadline_t deadline = shs__deadline_in_ms(ctx->cfg.connect_timeout_ms);

    if (all == NULL)
        return SHS_ERR_NO_MEMORY;
    ctx->cm_channel = rdma_create_event_channel();
    if (ctx->cm_channel == NULL) {
        SHS_ERROR("rdma_create_event_channel: %s (is rdma_ucm loaded?)", strerror(errno));
        status = SHS_ERR_NO_DEVICE;
        goto out_free;
    }
    int fl = fcntl(ctx->cm_channel->fd, F_GETFL);
    if (fl < 0 || fcntl(ctx->cm_channel->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        status = SHS_ERR_IO;
        goto out_free;
    }
    status = listen_and_exchange(ctx, all);
    if (status != SHS_OK)
        goto out_free;
    for (int r = 0; r < ctx->size; r++)
        if (r != ctx->rank)
            shs__gid_to_string(all[r].gid, ctx->peers[r].addr, sizeof(ctx->peers[r].addr));

    for (int r = 0; r < ctx->rank; r++) {
        struct sockaddr_storage src, dst;
        shs__gid_to_sockaddr(ctx->gid.gid, 0, &src);
        shs__gid_to_sockaddr(all[r].gid, ntohs(all[r].port), &dst);
        for (int q = 0; q < ctx->cfg.qps_per_peer; q++) {
            shs__conn_t *conn = &ctx->peers[r].conns[q];
            if (rdma_create_id(ctx->cm_channel, &conn->cm_id, conn, RDMA_PS_TCP) != 0 ||
                rdma_resolve_addr(conn->cm_id, (struct sockaddr *)&src,
                                  (struct sockaddr *)&dst, ctx->cfg.connect_timeout_ms) != 0) {
                SHS_ERROR("peer %d (%s): rdma_resolve_addr: %s", r, ctx->peers[r].addr,
                          strerror(errno));
                status = SHS_ERR_CONNECT;
                goto out_free;
            }
        }
    }

    while (established < ctx->nconns) {
        struct pollfd pfd = {.fd = ctx->cm_channel->fd, .events = POLLIN};
        int rem = shs__deadline_remaining_ms(deadline);
        if (rem == 0) {
            SHS_ERROR("connecting the mesh: %d of %d connections up after %d ms "
                      "(SHS_CONNECT_TIMEOUT_MS)", established, ctx->nconns,
                      ctx->cfg.connect_timeout_ms);
            for (int i = 0; i < ctx->nconns; i++)
                if (!ctx->conns[i]->established)
                    SHS_ERROR("  peer %d (%s) qp slot %d not connected",
                              ctx->conns[i]->peer->rank, ctx->conns[i]->peer->addr,
                              ctx->conns[i]->qp_slot);
            status = SHS_ERR_TIMEOUT;
            goto out_free;
        }
        int n = poll(&pfd, 1, rem);
        if (n < 0 && errno != EINTR) {
            status = SHS_ERR_IO;
            goto out_free;
        }
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(ctx->cm_channel, &ev) == 0) {
            status = on_event(ctx, ev, &established);
            shs__rdmacm_ack_event(ev);
            if (status != SHS_OK)
                goto out_free;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            SHS_ERROR("rdma_get_cm_event: %s", strerror(errno));
            status = SHS_ERR_IO;
            goto out_free;
        }
    }
    /* the passive side's last step (RTU) may still be in flight: wait until
     * every rank has seen every connection up */
    status = shs__boot_barrier(ctx->boot);

out_free:
    free(all);
    return status;
}

void shs__rdmacm_ack_event(struct rdma_cm_event *ev)
{
    /* a refused connect request leaves a new id that nobody owns (only
     * accepted ones get a connection as context): free it once acked */
    struct rdma_cm_id *stray = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
                                       ev->id->context == NULL
                                   ? ev->id
                                   : NULL;
    rdma_ack_cm_event(ev);
    if (stray != NULL)
        rdma_destroy_id(stray);
}

void shs__rdmacm_handle_late_event(shs_ctx_t *ctx, struct rdma_cm_event *ev)
{
    shs__conn_t *conn = ev->id->context;

    switch (ev->event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
        rdma_reject(ev->id, NULL, 0);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        if (conn != NULL && ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT)
            shs__peer_fail_at(SHS_LOG_LVL_INFO, conn->peer, SHS_ERR_PEER_FAILED,
                              "%s (the peer closed its connection or exited)",
                              rdma_event_str(ev->event));
        break;
    default:
        SHS_DEBUG("rdma_cm event %s after setup ignored", rdma_event_str(ev->event));
        break;
    }
}

void shs__rdmacm_teardown(shs_ctx_t *ctx)
{
    for (int i = 0; i < ctx->nconns; i++) {
        shs__conn_t *conn = ctx->conns[i];
        if (conn->cm_id == NULL)
            continue;
        if (conn->established)
            rdma_disconnect(conn->cm_id);
        if (conn->qp != NULL)
            rdma_destroy_qp(conn->cm_id);
        conn->qp = NULL;
        rdma_destroy_id(conn->cm_id);
        conn->cm_id = NULL;
    }
    if (ctx->listen_id != NULL)
        rdma_destroy_id(ctx->listen_id);
    ctx->listen_id = NULL;
}

/* Device, port, GID, protection domain and completion queue. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/transport.h"

/* Pick the port: the configured one (it must be ACTIVE) or the first ACTIVE. */
static int pick_port(struct ibv_context *verbs, int want, struct ibv_port_attr *attr_p)
{
    struct ibv_device_attr dattr;

    if (ibv_query_device(verbs, &dattr) != 0)
        return -1;
    for (int p = 1; p <= dattr.phys_port_cnt; p++) {
        struct ibv_port_attr pattr;
        if (want != 0 && p != want)
            continue;
        if (ibv_query_port(verbs, (uint8_t)p, &pattr) != 0)
            continue;
        if (pattr.state == IBV_PORT_ACTIVE) {
            *attr_p = pattr;
            return p;
        }
        if (want != 0)
            SHS_ERROR("%s port %d is not ACTIVE (state %s)",
                      ibv_get_device_name(verbs->device), p,
                      ibv_port_state_str(pattr.state));
    }
    return -1;
}

/* "rxe0, mlx5_0" or "none", for an error that names what could be used. */
static void device_names(char *buf, size_t len)
{
    int n = 0;
    size_t used = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);

    snprintf(buf, len, "none");
    for (int i = 0; devs != NULL && i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 ibv_get_device_name(devs[i]));
    if (devs != NULL)
        ibv_free_device_list(devs);
}

/* rdma_cm owns its own ibv_context per device, so in rdmacm mode the PD and
 * CQ must come from librdmacm's list; in oob mode we open the device. */
static shs_status_t open_from_list(shs_ctx_t *ctx, struct ibv_context **list, int n,
                                   bool owned)
{
    const char *want = ctx->cfg.device;

    for (int i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]->device);
        if (want[0] != '\0' && strcmp(want, name) != 0)
            continue;
        int port = pick_port(list[i], ctx->cfg.ib_port, &ctx->port_attr);
        if (port < 0)
            continue;
        ctx->verbs = list[i];
        ctx->verbs_owned = owned;
        ctx->port = port;
        snprintf(ctx->dev_name, sizeof(ctx->dev_name), "%s", name);
        return SHS_OK;
    }
    if (want[0] != '\0') {
        char names[256];
        device_names(names, sizeof(names));
        SHS_ERROR("no device named '%s' with an ACTIVE port%s (SHS_DEVICE); devices here: %s",
                  want, ctx->cfg.ib_port != 0 ? " at the configured port (SHS_IB_PORT)" : "",
                  names);
    } else
        SHS_ERROR("no rdma device with an ACTIVE port%s (%d device(s) found)",
                  ctx->cfg.ib_port != 0 ? " at the configured port (SHS_IB_PORT)" : "", n);
    return SHS_ERR_NO_DEVICE;
}

static shs_status_t open_verbs(shs_ctx_t *ctx)
{
    shs_status_t status;
    int n = 0;

    if (ctx->cfg.connect_mode != SHS_CONNECT_OOB) {
        /* rdma_cm ids only work on the contexts rdma_cm opened */
        struct ibv_context **list = rdma_get_devices(&n);
        if ((list == NULL || n == 0) && ctx->cfg.connect_mode == SHS_CONNECT_AUTO) {
            SHS_INFO("rdma_cm sees no device (%s); connecting with oob (SHS_CONNECT)",
                     list == NULL ? strerror(errno) : "empty list");
            if (list != NULL)
                rdma_free_devices(list);
            ctx->cfg.connect_mode = SHS_CONNECT_OOB;
            return open_verbs(ctx);
        }
        if (list == NULL) {
            SHS_ERROR("rdma_get_devices failed: %s (is rdma_ucm loaded?)", strerror(errno));
            return SHS_ERR_NO_DEVICE;
        }
        status = open_from_list(ctx, list, n, false);
        rdma_free_devices(list);
        return status;
    }

    struct ibv_device **devs = ibv_get_device_list(&n);
    if (devs == NULL || n == 0) {
        SHS_ERROR("no rdma device found%s", devs == NULL ? " (ibv_get_device_list failed)" : "");
        if (devs != NULL)
            ibv_free_device_list(devs);
        return SHS_ERR_NO_DEVICE;
    }
    struct ibv_context *opened[64];
    int nopen = 0;
    for (int i = 0; i < n && nopen < 64; i++) {
        if (ctx->cfg.device[0] != '\0' &&
            strcmp(ctx->cfg.device, ibv_get_device_name(devs[i])) != 0)
            continue;
        struct ibv_context *v = ibv_open_device(devs[i]);
        if (v != NULL)
            opened[nopen++] = v;
    }
    ibv_free_device_list(devs);
    status = open_from_list(ctx, opened, nopen, true);
    for (int i = 0; i < nopen; i++)
        if (opened[i] != ctx->verbs)
            ibv_close_device(opened[i]);
    return status;
}

shs_status_t shs__device_open(shs_ctx_t *ctx)
{
    shs_status_t status;

    status = open_verbs(ctx);
    if (status != SHS_OK)
        return status;
    if (ibv_query_device(ctx->verbs, &ctx->dev_attr) != 0) {
        SHS_ERROR("%s: ibv_query_device: %s", ctx->dev_name, strerror(errno));
        status = SHS_ERR_DEVICE;
        goto err_close_verbs;
    }
    status = shs__gid_select(ctx->sysfs_root, ctx->dev_name, ctx->port, ctx->cfg.gid_index,
                             &ctx->gid);
    if (status != SHS_OK)
        goto err_close_verbs;
    if (ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET && !ctx->gid.roce_v2)
        SHS_WARN("%s port %d: gid %d is not RoCE v2; routing across subnets will fail",
                 ctx->dev_name, ctx->port, ctx->gid.index);
    if (ctx->cfg.connect_mode == SHS_CONNECT_AUTO)
        ctx->cfg.connect_mode = ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET
                                    ? SHS_CONNECT_RDMACM
                                    : SHS_CONNECT_OOB;

    ctx->cfg.qp_timeout = shs__qp_timeout_for(ctx->cfg.qp_timeout, ctx->dev_attr.vendor_id);
    SHS_INFO("%s: vendor id 0x%x, ack timeout exponent %d (%.0f ms)", ctx->dev_name,
             ctx->dev_attr.vendor_id, ctx->cfg.qp_timeout,
             4.096e-3 * (double)(1ull << ctx->cfg.qp_timeout));
    ctx->chunk = shs__chunk_size(ctx->cfg.max_chunk, ctx->port_attr.max_msg_sz);
    ctx->read_chunk = shs__read_chunk_size(ctx->cfg.read_chunk, ctx->chunk,
                                           ctx->cfg.read_inflight);
    ctx->read_budget = ctx->cfg.read_inflight != 0 ? ctx->cfg.read_inflight : UINT64_MAX;
    /* unsignaled requests never carry half the READ budget, so a READ that
     * waits for budget always waits for a signaled completion */
    ctx->signal_bytes = SHS__SIGNAL_BYTES;
    if (ctx->cfg.read_inflight != 0 && ctx->signal_bytes > ctx->cfg.read_inflight / 2)
        ctx->signal_bytes = ctx->cfg.read_inflight / 2 > 0 ? ctx->cfg.read_inflight / 2 : 1;
    /* the device's limits override the knobs, with a word in the log */
    if (ctx->cfg.sq_depth > ctx->dev_attr.max_qp_wr || ctx->cfg.rq_depth > ctx->dev_attr.max_qp_wr) {
        SHS_WARN("%s: queue depths %d/%d capped at the device's max_qp_wr %d", ctx->dev_name,
                 ctx->cfg.sq_depth, ctx->cfg.rq_depth, ctx->dev_attr.max_qp_wr);
        if (ctx->cfg.sq_depth > ctx->dev_attr.max_qp_wr)
            ctx->cfg.sq_depth = ctx->dev_attr.max_qp_wr;
        if (ctx->cfg.rq_depth > ctx->dev_attr.max_qp_wr)
            ctx->cfg.rq_depth = ctx->dev_attr.max_qp_wr;
    }
    /* with at most sq_depth/2 unsignaled work requests in a row, a full send
     * queue always holds a signaled one, so waiting for room cannot deadlock */
    ctx->signal_every = ctx->cfg.signal_every;
    if (ctx->signal_every < 1)
        ctx->signal_every = 1;
    if (ctx->signal_every > ctx->cfg.sq_depth / 2)
        ctx->signal_every = ctx->cfg.sq_depth / 2 > 0 ? ctx->cfg.sq_depth / 2 : 1;
    /* a batch larger than sq_depth/2 could wait for room that only an
     * unsignaled (never reported) work request holds */
    ctx->post_batch = ctx->cfg.sq_depth / 2 < SHS__POST_BATCH ? ctx->cfg.sq_depth / 2
                                                             : SHS__POST_BATCH;
    if (ctx->post_batch < 1)
        ctx->post_batch = 1;
    ctx->rd_atom = ctx->dev_attr.max_qp_init_rd_atom > 0 ? ctx->dev_attr.max_qp_init_rd_atom : 1;
    ctx->rd_resp = ctx->dev_attr.max_qp_rd_atom > 0 ? ctx->dev_attr.max_qp_rd_atom : 1;

    ctx->pd = ibv_alloc_pd(ctx->verbs);
    if (ctx->pd == NULL) {
        SHS_ERROR("%s: ibv_alloc_pd: %s", ctx->dev_name, strerror(errno));
        status = SHS_ERR_NO_RESOURCE;
        goto err_close_verbs;
    }
    SHS_INFO("device %s port %d gid %d (%s%s) active mtu %d max_msg_sz %u chunk %zu "
             "read chunk %zu read inflight %zu rd_atom %d/%d", ctx->dev_name, ctx->port,
             ctx->gid.index, ctx->gid.roce_v2 ? "roce v2" : "roce v1/ib",
             ctx->gid.ipv4_mapped ? ", ipv4" : "", 128 << ctx->port_attr.active_mtu,
             ctx->port_attr.max_msg_sz, ctx->chunk, ctx->read_chunk, ctx->cfg.read_inflight,
             ctx->rd_atom, ctx->rd_resp);
    return SHS_OK;

err_close_verbs:
    if (ctx->verbs_owned)
        ibv_close_device(ctx->verbs);
    ctx->verbs = NULL;
    return status;
}

void shs__device_close(shs_ctx_t *ctx)
{
    if (ctx->pd != NULL && ibv_dealloc_pd(ctx->pd) != 0)
        SHS_WARN("%s: ibv_dealloc_pd: %s (a region or qp still uses it)", ctx->dev_name,
                 strerror(errno));
    ctx->pd = NULL;
    if (ctx->verbs != NULL && ctx->verbs_owned)
        ibv_close_device(ctx->verbs);
    ctx->verbs = NULL;
}

shs_status_t shs__cq_create(shs_ctx_t *ctx)
{
    /* per connection: every send slot may complete (signaled, or in error)
     * and every receive slot may hold a completion */
    long need = (long)ctx->nconns * (ctx->cfg.sq_depth + ctx->cfg.rq_depth) + 1;
    if (need > ctx->dev_attr.max_cqe) {
        SHS_ERROR("%s: the completion queue would need %ld entries, the device allows %d; "
                  "lower SHS_SQ_DEPTH/SHS_RQ_DEPTH or SHS_QPS_PER_PEER", ctx->dev_name,
                  need, ctx->dev_attr.max_cqe);
        return SHS_ERR_NO_RESOURCE;
    }
    ctx->cq = ibv_create_cq(ctx->verbs, (int)need, NULL, NULL, 0);
    if (ctx->cq == NULL) {
        SHS_ERROR("%s: ibv_create_cq(%ld): %s", ctx->dev_name, need, strerror(errno));
        return SHS_ERR_NO_RESOURCE;
    }
    ctx->cq_depth = (int)need;
    return SHS_OK;
}

void shs__cq_destroy(shs_ctx_t *ctx)
{
    if (ctx->cq != NULL && ibv_destroy_cq(ctx->cq) != 0)
        SHS_WARN("%s: ibv_destroy_cq: %s", ctx->dev_name, strerror(errno));
    ctx->cq = NULL;
}

/* The context: bootstrap, device, mesh of connections, event thread. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/services.h"
#include "transport/transport.h"

/* Flushes write zero bytes here; 64 bytes keep it one cache line. */

static void disconnect_all(shs_ctx_t *ctx)
{
    if (ctx->cfg.connect_mode == SHS_CONNECT_RDMACM)
        shs__rdmacm_teardown(ctx);
    for (int i = 0; i < ctx->nconns; i++) {
        shs__conn_t *conn = ctx->conns[i];
        if (conn->qp != NULL && ibv_destroy_qp(conn->qp) != 0)
            SHS_WARN("peer %d qp 0x%x: ibv_destroy_qp: %s", conn->peer->rank,
                     conn->qp->qp_num, strerror(errno));
        conn->qp = NULL;
    }
    if (ctx->cm_channel != NULL)
        rdma_destroy_event_channel(ctx->cm_channel);
    ctx->cm_channel = NULL;
}

static shs_status_t scratch_register(shs_ctx_t *ctx)
{
    /* the fence target, the barrier's source word, one arrival word per
     * rank, two sets of allgather slots (transport.h) */
    ctx->scratch_len = shs__scratch_gather_off(ctx->size) + 2 * (size_t)ctx->size * SHS__GATHER_SLOT;
    if (posix_memalign(&ctx->scratch, SHS__SCRATCH_ALIGN, ctx->scratch_len) != 0)
        return SHS_ERR_NO_MEMORY;
    memset(ctx->scratch, 0, ctx->scratch_len);
    ctx->scratch_mr = ibv_reg_mr(ctx->pd, ctx->scratch, ctx->scratch_len,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (ctx->scratch_mr == NULL) {
        SHS_ERROR("%s: ibv_reg_mr (scratch): %s", ctx->dev_name, strerror(errno));
        free(ctx->scratch);
        ctx->scratch = NULL;
        return SHS_ERR_NO_RESOURCE;
    }
    return SHS_OK;
}

static void scratch_deregister(shs_ctx_t *ctx)
{
    if (ctx->scratch_mr != NULL && ibv_dereg_mr(ctx->scratch_mr) != 0)
        SHS_WARN("%s: ibv_dereg_mr (scratch): %s", ctx->dev_name, strerror(errno));
    ctx->scratch_mr = NULL;
    free(ctx->scratch);
    ctx->scratch = NULL;
    free(ctx->scratch_remote);
    ctx->scratch_remote = NULL;
}

static shs_status_t scratch_exchange(shs_ctx_t *ctx)
{
    shs__remote_t mine = {
        .addr = (uintptr_t)ctx->scratch,
        .len = ctx->scratch_len,
        .rkey = ctx->scratch_mr->rkey,
        .flags = SHS_ACCESS_REMOTE_WRITE,
    };
    ctx->scratch_remote = calloc((size_t)ctx->size, sizeof(shs__remote_t));
    if (ctx->scratch_remote == NULL)
        return SHS_ERR_NO_MEMORY;
    return shs__boot_allgather(ctx->boot, &mine, sizeof(mine), ctx->scratch_remote);
}

/* What a context and each of its endpoints own: the mesh of queue pairs, a
 * completion queue, the flush scratch and the message buffers, connected
 * (collective over the bootstrap). */
static shs_status_t mesh_up(shs_ctx_t *ctx)
{
    shs_status_t status = shs__mesh_alloc(ctx);
    if (status != SHS_OK)
        return status;
    status = shs__cq_create(ctx);
    if (status != SHS_OK)
        goto err_free_mesh;
    status = scratch_register(ctx);
    if (status != SHS_OK)
        goto err_destroy_cq;
    status = shs__msg_setup(ctx);
    if (status != SHS_OK)
        goto err_deregister_scratch;
    /* a rejoiner connects once its own listeners are up (shs_ctx_create):
     * the living ranks' records, scratch keys and message size come with
     * each connection (transport/rejoin/) */
    if (ctx->rejoined)
        return SHS_OK;
    status = ctx->cfg.connect_mode == SHS_CONNECT_RDMACM ? shs__connect_rdmacm(ctx)
                                                         : shs__connect_oob(ctx);
    if (status != SHS_OK)
        goto err_disconnect;
    status = scratch_exchange(ctx);
    if (status != SHS_OK)
        goto err_disconnect;
    status = shs__msg_check(ctx);
    if (status != SHS_OK)
        goto err_disconnect;
    return SHS_OK;

err_disconnect:
    disconnect_all(ctx);
    shs__rejoin_free(ctx);
    shs__msg_teardown(ctx);
err_deregister_scratch:
    scratch_deregister(ctx);
err_destroy_cq:
    shs__cq_destroy(ctx);
err_free_mesh:
    shs__mesh_free(ctx);
    return status;
}

static void mesh_down(shs_ctx_t *ctx)
{
    disconnect_all(ctx);
    shs__rejoin_free(ctx);
    shs__msg_teardown(ctx);
    scratch_deregister(ctx);
    shs__cq_destroy(ctx);
    shs__mesh_free(ctx);
}

/* SHS_POLL_SPIN=auto, once the mesh is up: spin SHS__POLL_SPIN_OWN polls
 * when the ranks that share this rank's device address (the ranks of this
 * host on this NIC: they compete for its CPUs) are at most the CPUs this
 * process may run on, else nap at once (transport/knobs.c says why). A
 * rank pinned to one core of its own sees one CPU and naps: set the knob
 * when ranks own their cores. */
static void resolve_spin(shs_ctx_t *ctx)
{
    if (ctx->cfg.poll_spin >= 0)
        return;
    char mine[64];
    shs__gid_to_string(ctx->gid.gid, mine, sizeof(mine));
    int local = 1, cpus = 1;
    for (int r = 0; r < ctx->size; r++)
        local += r != ctx->rank && strcmp(ctx->peers[r].addr, mine) == 0;
    long conf = sysconf(_SC_NPROCESSORS_CONF);
    int ncpu = conf > 0 ? (int)conf : 1;
    cpu_set_t *set = CPU_ALLOC(ncpu); /* hosts of more than 1024 CPUs too */
    if (set != NULL) {
        size_t bytes = CPU_ALLOC_SIZE(ncpu);
        if (sched_getaffinity(0, bytes, set) == 0)
            cpus = CPU_COUNT_S(bytes, set);
        CPU_FREE(set);
    }
    ctx->cfg.poll_spin = local <= cpus ? SHS__POLL_SPIN_OWN : 0;
    SHS_DEBUG("SHS_POLL_SPIN=auto: %d rank(s) on %s, %d CPU(s): spin %d", local, mine, cpus,
              ctx->cfg.poll_spin);
}

shs_status_t shs_ctx_create(const shs_ctx_params_t *params, shs_ctx_t **ctx_p)
{
    shs_status_t status;
    shs_ctx_t *ctx;

    if (ctx_p == NULL)
        return SHS_ERR_INVALID_ARG;
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return SHS_ERR_NO_MEMORY;
    atomic_init(&ctx->device_failed, 0);
    atomic_init(&ctx->revive_pending, 0);
    pthread_mutex_init(&ctx->reg_lock, NULL);
    pthread_mutex_init(&ctx->bar_lock, NULL);
    ctx->fork_gen = shs__fork_guard();

    status = shs__config_load(&ctx->cfg);
    if (status != SHS_OK)
        goto err_free_ctx;
    status = shs__ctx_params_apply(params, &ctx->cfg, ctx->sysfs_root, sizeof(ctx->sysfs_root));
    if (status != SHS_OK)
        goto err_free_ctx;
    shs__log_set_rank(ctx->cfg.rank);

    /* the bootstrap first: it refuses a rank of another job (token, version,
     * size) before anything touches the device */
    status = shs__boot_create(&ctx->cfg, &ctx->boot);
    if (status != SHS_OK)
        goto err_free_ctx;
    ctx->rank = shs__boot_rank(ctx->boot);
    ctx->size = shs__boot_size(ctx->boot);
    ctx->rejoined = ctx->cfg.rejoin != 0 && ctx->size > 1;

    status = shs__device_open(ctx);
    if (status != SHS_OK)
        goto err_destroy_boot;
    shs__memlock_check(ctx->dev_name);
    status = mesh_up(ctx);
    if (status != SHS_OK)
        goto err_close_device;
    status = shs__async_start(ctx);
    if (status != SHS_OK)
        goto err_mesh_down;
    status = shs__rejoin_serve_start(ctx);
    if (status != SHS_OK)
        goto err_async_stop;
    if (ctx->rejoined && (status = shs__rejoin_connect(ctx)) != SHS_OK)
        goto err_serve_stop;
    resolve_spin(ctx);
    ctx->mesh_ready = true;

    SHS_INFO("rank %d of %d: %d connection(s) up over %s (%s)", ctx->rank, ctx->size,
             ctx->nconns, ctx->dev_name,
             ctx->cfg.connect_mode == SHS_CONNECT_RDMACM ? "rdmacm" : "oob");
    *ctx_p = ctx;
    return SHS_OK;

err_serve_stop:
    shs__boot_serve_stop(ctx->serve);
err_async_stop:
    shs__async_stop(ctx);
err_mesh_down:
    mesh_down(ctx);
err_close_device:
    shs__device_close(ctx);
err_destroy_boot:
    shs__boot_destroy(ctx->boot);
err_free_ctx:
    pthread_mutex_destroy(&ctx->reg_lock);
    pthread_mutex_destroy(&ctx->bar_lock);
    free(ctx);
    return status;
}

/* The device half of an endpoint is its parent's: the same bootstrap,
 * verbs context, protection domain (so the parent's regions work on it),
 * resolved limits and configuration. Endpoints always connect out of band,
 * over the bootstrap: one rdma_cm listener per context is enough, and an
 * endpoint's queue pairs need nothing rdma_cm adds. */
static void endpoint_share(shs_ctx_t *ep, shs_ctx_t *ctx)
{
    ep->parent = ctx;
    ep->cfg = ctx->cfg;
    ep->cfg.connect_mode = SHS_CONNECT_OOB;
    /* one queue pair per peer: an endpoint's operations to a peer are
     * placed in the order posted, which its users build on (a stamp
     * written after the data it covers) */
    ep->cfg.qps_per_peer = 1;
    memcpy(ep->sysfs_root, ctx->sysfs_root, sizeof(ep->sysfs_root));
    ep->rank = ctx->rank;
    ep->size = ctx->size;
    ep->boot = ctx->boot;
    ep->verbs = ctx->verbs;
    ep->verbs_owned = false;
    ep->dev_attr = ctx->dev_attr;
    ep->port_attr = ctx->port_attr;
    ep->port = ctx->port;
    ep->gid = ctx->gid;
    memcpy(ep->dev_name, ctx->dev_name, sizeof(ep->dev_name));
    ep->pd = ctx->pd;
    ep->chunk = ctx->chunk;
    ep->read_chunk = ctx->read_chunk;
    ep->read_budget = ctx->read_budget;
    ep->signal_bytes = ctx->signal_bytes;
    ep->signal_every = ctx->signal_every;
    ep->rd_atom = ctx->rd_atom;
    ep->rd_resp = ctx->rd_resp;
    ep->post_batch = ctx->post_batch;
    ep->fork_gen = ctx->fork_gen;
    ep->rejoined = ctx->rejoined;
}

shs_status_t shs_ctx_endpoint_create(shs_ctx_t *ctx, shs_ctx_t **ep_p)
{
    /* every check before the mesh is brought up: the same call fails alike
     * on every rank, and none waits for a peer that returned */
    if (ctx == NULL || ep_p == NULL) {
        SHS_ERROR("shs_ctx_endpoint_create: %s is NULL",
                  ctx == NULL ? "the context" : "ep_p (the output)");
        return SHS_ERR_INVALID_ARG;
    }
    if (ctx->parent != NULL) {
        SHS_ERROR("shs_ctx_endpoint_create: refused on an endpoint; create endpoints on "
                  "the context");
        return SHS_ERR_BAD_STATE;
    }
    if (shs__ctx_refused(ctx, "shs_ctx_endpoint_create"))
        return SHS_ERR_BAD_STATE;
    shs_ctx_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return SHS_ERR_NO_MEMORY;
    atomic_init(&ep->device_failed, 0);
    atomic_init(&ep->revive_pending, 0);
    endpoint_share(ep, ctx);
    ep->ep_seq = ctx->ep_count;
    shs_status_t status = mesh_up(ep);
    if (status == SHS_OK && ep->rejoined && (status = shs__rejoin_connect(ep)) != SHS_OK)
        mesh_down(ep);
    if (status != SHS_OK) {
        free(ep);
        return status;
    }
    /* listed, so that a rank that rejoins later can connect to it */
    pthread_mutex_lock(&ctx->reg_lock);
    ctx->ep_count++;
    ep->ep_next = ctx->eps;
    ctx->eps = ep;
    pthread_mutex_unlock(&ctx->reg_lock);
    atomic_fetch_add(&ctx->endpoints, 1);
    SHS_INFO("endpoint of rank %d: %d connection(s) up", ep->rank, ep->nconns);
    *ep_p = ep;
    return SHS_OK;
}

static void endpoint_destroy(shs_ctx_t *ep)
{
    if (ep->live_regions != 0)
        SHS_WARN("endpoint destroyed with %d region(s) still registered; they are leaked",
                 ep->live_regions);
    /* off the list first: the rejoin thread stages queue pairs on listed
     * endpoints only, under the same lock */
    shs_ctx_t *ctx = ep->parent;
    pthread_mutex_lock(&ctx->reg_lock);
    shs_ctx_t **pp = &ctx->eps;
    while (*pp != NULL && *pp != ep)
        pp = &(*pp)->ep_next;
    if (*pp != NULL)
        *pp = ep->ep_next;
    pthread_mutex_unlock(&ctx->reg_lock);
    mesh_down(ep);
    atomic_fetch_sub(&ep->parent->endpoints, 1);
    free(ep);
}

bool shs__ctx_endpoint_refused(const shs_ctx_t *ctx, const char *call)
{
    if (ctx->parent == NULL)
        return false;
    SHS_ERROR("%s: refused on an endpoint: it is collective over the bootstrap, which the "
              "endpoint shares with its context; call it on the context", call);
    return true;
}

void shs_ctx_destroy(shs_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    if (shs__ctx_forked(ctx, "shs_ctx_destroy")) {
        /* a child may close its copies of the sockets; the RDMA objects are
         * the parent's, and destroying them here would destroy them there */
        shs__boot_destroy(ctx->boot);
        return;
    }
    if (atomic_load(&ctx->lent)) {
        /* the borrowing thread still posts and polls on it */
        SHS_ERROR("shs_ctx_destroy: refused: the context is lent to %s; stop it first "
                  "(shs_shadow_stop, then shs_shadow_destroy); the context is left as it is",
                  ctx->lent_to != NULL ? ctx->lent_to : "a background thread");
        return;
    }
    if (ctx->parent != NULL) {
        endpoint_destroy(ctx);
        return;
    }
    if (atomic_load(&ctx->endpoints) != 0) {
        SHS_ERROR("shs_ctx_destroy: refused: %d endpoint(s) of this context are alive; "
                  "destroy them first; the context is left as it is",
                  atomic_load(&ctx->endpoints));
        return;
    }
    if (ctx->live_regions != 0)
        SHS_WARN("context destroyed with %d region(s) still registered; they are leaked",
                 ctx->live_regions);
    shs__boot_serve_stop(ctx->serve);
    shs__async_stop(ctx);
    mesh_down(ctx);
    if (ctx->live_regions == 0)
        shs__device_close(ctx);
    shs__boot_destroy(ctx->boot);
    pthread_mutex_destroy(&ctx->reg_lock);
    pthread_mutex_destroy(&ctx->bar_lock);
    free(ctx);
}

int shs_ctx_rank(const shs_ctx_t *ctx)
{
    return ctx != NULL ? ctx->rank : -1;
}

int shs_ctx_size(const shs_ctx_t *ctx)
{
    return ctx != NULL ? ctx->size : -1;
}

int shs_ctx_rejoined(const shs_ctx_t *ctx)
{
    return ctx != NULL && ctx->rejoined ? 1 : 0;
}

shs_status_t shs_ctx_channel_alloc(shs_ctx_t *ctx, unsigned *channel_p)
{
    if (ctx == NULL || channel_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_ctx_channel_alloc"))
        return SHS_ERR_BAD_STATE;
    return shs__ctx_channel_take(ctx, -1, "the program (shs_ctx_channel_alloc)", channel_p);
}

void shs_ctx_channel_free(shs_ctx_t *ctx, unsigned channel)
{
    if (ctx != NULL && !shs__ctx_refused(ctx, "shs_ctx_channel_free"))
        shs__ctx_channel_give(ctx, channel);
}

shs_status_t shs_ctx_barrier(shs_ctx_t *ctx)
{
    if (ctx == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_ctx_barrier") ||
        shs__ctx_endpoint_refused(ctx, "shs_ctx_barrier"))
        return SHS_ERR_BAD_STATE;
    if (ctx->size == 1)
        return SHS_OK;
    return shs__mesh_barrier(ctx);
}

shs_status_t shs_ctx_peer_status(const shs_ctx_t *ctx, int peer, const char **reason_p)
{
    if (ctx == NULL || peer < 0 || peer >= ctx->size || peer == ctx->rank)
        return SHS_ERR_INVALID_ARG;
    const shs__peer_t *p = &ctx->peers[peer];
    if (!shs__peer_is_failed(p))
        return SHS_OK;
    if (reason_p != NULL) /* failed here, or on the context (an endpoint's) */
        *reason_p = atomic_load(&p->failed) ? p->reason : p->up->reason;
    return SHS_ERR_PEER_FAILED;
}

/* Rejoins, a living rank's side: what its listeners answer a rejoiner
 * (rejoin.h; the design is in join.c's opening comment). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/rejoin/rejoin.h"

/* ---- the listeners' view of this context (any thread) ---- */

/* The rendezvous is the lowest living rank with an address: every rank
 * computes it the same way from its view of who failed. */
static bool ctx_is_rendezvous(void *arg)
{
    const shs_ctx_t *ctx = arg;
    for (int r = 0; r < ctx->rank && r < ctx->naddrs; r++)
        if (!shs__peer_is_failed(&ctx->peers[r]))
            return false;
    return ctx->rank < ctx->naddrs;
}

/* Alive: not failed, or failed in an incarnation older than the one that
 * rejoined since (staged here, or connected on endpoints, while the
 * context's own thread has not polled it back yet: a directory must not
 * call a rank that rejoined dead). */
static bool ctx_is_alive(void *arg, int rank)
{
    const shs_ctx_t *ctx = arg;
    const shs__peer_t *p = &ctx->peers[rank];
    return rank == ctx->rank || !shs__peer_is_failed(p) ||
           atomic_load(&p->fail_gen) != atomic_load(&p->gen);
}

static shs_status_t stage_check(shs_ctx_t *ctx, int rank, const uint8_t *p, size_t len,
                                uint8_t *reply, size_t *reply_len, char *addr,
                                uint8_t **bar_p, char *why, size_t wl);

/* Queue pairs of ctx (a context or one of its endpoints) towards a
 * rejoiner, moved to RTS with its record; then the reply (this rank's
 * record, scratch, regions; *bar_p is where the caller writes the barrier
 * count). The address the rejoiner's service has goes to addr. The caller
 * marks the peer staged. */
static shs_status_t stage_connect(shs_ctx_t *ctx, int rank, const uint8_t *p, size_t len,
                                  uint8_t *reply, size_t *reply_len, char *addr,
                                  uint8_t **bar_p, char *why, size_t wl)
{
    shs__peer_t *peer = &ctx->peers[rank];
    int qpp = ctx->cfg.qps_per_peer;
    if (ctx->cfg.connect_mode != SHS_CONNECT_OOB) {
        snprintf(why, wl, "rank %d connects with rdma_cm: rejoining needs SHS_CONNECT=oob on "
                 "every rank", ctx->rank);
        return SHS_ERR_UNSUPPORTED;
    }
    /* a process of this rank staged here earlier and not yet taken in by
     * the thread that drives ctx (it has not polled since: a long barrier,
     * compute) is gone, since a newer one connects: its queue pairs are
     * replaced, unless that thread is taking them right now */
    int cur = SHS__REVIVE_STAGED;
    if (atomic_compare_exchange_strong(&peer->revive, &cur, SHS__REVIVE_RESTAGING)) {
        shs__rejoin_stage_destroy(peer, qpp);
        SHS_INFO("rank %d rejoins again before this rank took its earlier process back: "
                 "that one's queue pairs are dropped", rank);
    } else if (cur != SHS__REVIVE_IDLE) {
        snprintf(why, wl, "an earlier rejoin of rank %d is being installed; ask again", rank);
        return SHS_ERR_BAD_STATE;
    }
    shs_status_t st = stage_check(ctx, rank, p, len, reply, reply_len, addr, bar_p, why, wl);
    if (st != SHS_OK && cur == SHS__REVIVE_STAGED) {
        /* replaced by nothing: the rank counts failed until it connects */
        atomic_store(&peer->fail_gen, atomic_load(&peer->gen));
        atomic_store(&peer->revive, SHS__REVIVE_IDLE);
    }
    return st;
}

static shs_status_t stage_check(shs_ctx_t *ctx, int rank, const uint8_t *p, size_t len,
                                uint8_t *reply, size_t *reply_len, char *addr,
                                uint8_t **bar_p, char *why, size_t wl)
{
    shs__peer_t *peer = &ctx->peers[rank];
    int qpp = ctx->cfg.qps_per_peer;
    if (len != connect_len(ctx) - 8) {
        snprintf(why, wl, "a connect request of %zu bytes, expected %zu (another "
                 "SHS_QPS_PER_PEER?)", len + 8, connect_len(ctx));
        return SHS_ERR_SIZE_MISMATCH;
    }
    memcpy(addr, p, SHS_BOOT_ADDR_LEN);
    addr[SHS_BOOT_ADDR_LEN - 1] = '\0';
    p += SHS_BOOT_ADDR_LEN;
    uint64_t msg_size = get64(&p);
    if (msg_size != ctx->cfg.msg_size) {
        snprintf(why, wl, "SHS_MSG_SIZE %llu, the job's is %zu", (unsigned long long)msg_size,
                 ctx->cfg.msg_size);
        return SHS_ERR_SIZE_MISMATCH;
    }
    shs__oob_hdr_t rh;
    memcpy(&rh, p, sizeof(rh));
    p += sizeof(rh);
    shs__gid_to_string(rh.gid, peer->stage_addr, sizeof(peer->stage_addr));
    const uint8_t *rq = p;
    p += (size_t)qpp * sizeof(shs__oob_qp_t);
    shs__remote_t scratch = get_remote(&p);

    if (peer->stage == NULL && (peer->stage = calloc((size_t)qpp, sizeof(*peer->stage))) == NULL)
        return SHS_ERR_NO_MEMORY;
    uint32_t psn = (uint32_t)(shs__now_ns() ^ ((uint64_t)getpid() << 20));
    shs_status_t st = SHS_OK;
    for (int q = 0; q < qpp && st == SHS_OK; q++) {
        shs__conn_t *c = &peer->stage[q];
        shs__oob_qp_t one;
        memcpy(&one, rq + (size_t)q * sizeof(one), sizeof(one));
        memset(c, 0, sizeof(*c));
        c->peer = peer;
        c->qp_slot = q;
        c->index = peer->conns[q].index;
        c->psn = (psn + (uint32_t)q * 0x10001u) & 0xffffffu;
        if ((st = shs__conn_create_qp(ctx, c)) == SHS_OK &&
            (st = shs__oob_qp_to_init(ctx, c)) == SHS_OK)
            st = shs__oob_qp_to_rtr_rts(ctx, c, &rh, &one);
    }
    if (st != SHS_OK) {
        shs__rejoin_stage_destroy(peer, qpp);
        snprintf(why, wl, "rank %d could not connect queue pairs to it (%s)", ctx->rank,
                 shs_status_string(st));
        return st;
    }
    peer->stage_scratch = scratch;

    /* the reply: record, scratch, barrier count, regions */
    uint8_t *o = reply;
    size_t fixed = sizeof(shs__oob_hdr_t) + (size_t)qpp * sizeof(shs__oob_qp_t) + REMOTE_LEN +
                   8 + 4;
    o = put_record(ctx, o, peer->stage);
    uint8_t *bar = o;
    o += 8;
    uint8_t *count = o;
    o += 4;
    uint32_t n = 0;
    bool full = false;
    if (ctx->parent == NULL) { /* an endpoint has no regions of its own */
        pthread_mutex_lock(&ctx->reg_lock);
        for (const shs_region_t *r = ctx->regions; r != NULL && !full; r = r->next) {
            full = fixed + (size_t)(n + 1) * ENTRY_LEN > *reply_len;
            if (!full) {
                o = put_remote(put32(o, r->seq), &r->remote[ctx->rank]);
                n++;
            }
        }
        pthread_mutex_unlock(&ctx->reg_lock);
    }
    if (full) {
        shs__rejoin_stage_destroy(peer, qpp);
        snprintf(why, wl, "rank %d has more regions than one reply holds", ctx->rank);
        return SHS_ERR_NO_RESOURCE;
    }
    put32(count, n);
    *reply_len = (size_t)(o - reply);
    *bar_p = bar;
    return SHS_OK;
}

static shs_status_t serve_connect(shs_ctx_t *ctx, int rank, const uint8_t *p, size_t len,
                                  uint8_t *reply, size_t *reply_len, char *why, size_t wl)
{
    char addr[SHS_BOOT_ADDR_LEN];
    uint8_t *bar;
    shs__peer_t *peer = &ctx->peers[rank];
    shs_status_t st = stage_connect(ctx, rank, p, len, reply, reply_len, addr, &bar, why, wl);
    if (st != SHS_OK)
        return st;
    /* the rendezvous admitted a new process for this rank, and it is
     * connected here: the old one is gone, whether or not this rank has
     * seen it go (out of band, a failure shows only when traffic meets it) */
    if (!shs__peer_is_failed(peer))
        shs__peer_fail_at(SHS_LOG_LVL_INFO, peer, SHS_ERR_PEER_FAILED,
                          "a new process of rank %d connected (it rejoined): the old one is "
                          "gone", rank);
    /* Under the barrier's lock, all at once for barrier entry: the barrier
     * count it is told, its old arrival word cleared (the old incarnation
     * may have been a barrier ahead), a new incarnation (the endpoints'
     * queue pairs to the old one are dead until each endpoint is connected
     * again), no barrier counting it until it names its first
     * (OP_FIRST_BARRIER), then staged, then the wake-up. */
    /* its copies of the regions are unknown until it announces them (the
     * old incarnation's keys would reach the new process's memory) */
    pthread_mutex_lock(&ctx->reg_lock);
    for (shs_region_t *r = ctx->regions; r != NULL; r = r->next)
        __atomic_store_n(&r->remote[rank].len, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ctx->reg_lock);
    pthread_mutex_lock(&ctx->bar_lock);
    put64(bar, __atomic_load_n(&ctx->bar_epoch, __ATOMIC_RELAXED));
    __atomic_store_n((uint64_t *)((char *)ctx->scratch + SHS__SCRATCH_ARRIVE +
                                  (size_t)rank * 8), 0, __ATOMIC_RELEASE);
    atomic_fetch_add(&peer->gen, 1);
    __atomic_store_n(&peer->first_bar, UINT64_MAX, __ATOMIC_RELEASE);
    atomic_store(&peer->revive, SHS__REVIVE_STAGED);
    atomic_store(&ctx->revive_pending, 1);
    pthread_mutex_unlock(&ctx->bar_lock);
    shs__boot_serve_set_addr(ctx->serve, rank, addr);
    SHS_INFO("rank %d is rejoining: its queue pair(s) are ready here", rank);
    return SHS_OK;
}

/* The rejoiner's first barrier (the largest count the living ranks told
 * it, plus one): before it, barriers here do not count it. */
static shs_status_t serve_first_barrier(shs_ctx_t *ctx, int rank, const uint8_t *p, size_t len,
                                        char *why, size_t wl)
{
    shs__peer_t *peer = &ctx->peers[rank];
    if (len != 8) {
        snprintf(why, wl, "a first barrier of %zu bytes", len + 4);
        return SHS_ERR_PROTOCOL;
    }
    if (atomic_load(&peer->revive) == SHS__REVIVE_IDLE && shs__peer_is_failed(peer)) {
        snprintf(why, wl, "rank %d has not connected to rank %d", rank, ctx->rank);
        return SHS_ERR_BAD_STATE;
    }
    __atomic_store_n(&peer->first_bar, get64(&p), __ATOMIC_RELEASE);
    return SHS_OK;
}

/* The rejoiner's endpoint number seq: this rank's endpoint of that
 * creation order takes it (under the lock, so it cannot be destroyed
 * meanwhile). */
static shs_status_t serve_endpoint(shs_ctx_t *ctx, int rank, uint32_t seq, const uint8_t *p,
                                   size_t len, uint8_t *reply, size_t *reply_len, char *why,
                                   size_t wl)
{
    char addr[SHS_BOOT_ADDR_LEN];
    shs_status_t st;
    pthread_mutex_lock(&ctx->reg_lock);
    shs_ctx_t *ep = ctx->eps;
    while (ep != NULL && ep->ep_seq != seq)
        ep = ep->ep_next;
    if (ep == NULL) {
        int nl = 0;
        for (shs_ctx_t *e = ctx->eps; e != NULL; e = e->ep_next)
            nl++;
        snprintf(why, wl, "rank %d has no endpoint #%u (made after start-up, or destroyed; it "
                 "has %d): a rejoined rank must make its endpoints in the order the job made "
                 "them", ctx->rank, seq, nl);
        st = SHS_ERR_CONFIG;
    } else if (atomic_load(&ctx->peers[rank].revive) == SHS__REVIVE_IDLE &&
               shs__peer_is_failed(&ctx->peers[rank])) {
        /* neither taken back nor staged here (its context's connect failed) */
        snprintf(why, wl, "rank %d has not taken rank %d back", ctx->rank, rank);
        st = SHS_ERR_BAD_STATE;
    } else {
        uint8_t *bar;
        st = stage_connect(ep, rank, p, len, reply, reply_len, addr, &bar, why, wl);
        if (st == SHS_OK) {
            /* made for the incarnation the context staged (or took back) */
            put64(bar, 0); /* endpoints have no barrier */
            ep->peers[rank].stage_gen = atomic_load(&ctx->peers[rank].gen);
            atomic_store(&ep->peers[rank].revive, SHS__REVIVE_STAGED);
            atomic_store(&ep->revive_pending, 1);
        }
    }
    pthread_mutex_unlock(&ctx->reg_lock);
    return st;
}

/* A rejoiner's key for one of its regions, installed at the next poll. */
static shs_status_t serve_region(shs_ctx_t *ctx, int rank, const uint8_t *p, size_t len,
                                 char *why, size_t wl)
{
    shs__peer_t *peer = &ctx->peers[rank];
    if (len != 4 + REMOTE_LEN) {
        snprintf(why, wl, "a region announcement of %zu bytes", len + 4);
        return SHS_ERR_PROTOCOL;
    }
    if (shs__peer_is_failed(peer) && atomic_load(&peer->revive) == SHS__REVIVE_IDLE) {
        snprintf(why, wl, "rank %d has not connected to rank %d", rank, ctx->rank);
        return SHS_ERR_BAD_STATE;
    }
    uint32_t seq = get32(&p);
    shs__remote_t rm = get_remote(&p);
    /* taken in at once, under the region list's lock, length last: a
     * thread that posts to the rank reads the length first (rma.c) and
     * sees either none or the whole new key; the rank's endpoints may run
     * with it before the context's own thread takes it back */
    pthread_mutex_lock(&ctx->reg_lock);
    shs_region_t *r = ctx->regions;
    while (r != NULL && r->seq != seq)
        r = r->next;
    if (r != NULL) {
        shs__remote_t *dst = &r->remote[rank];
        __atomic_store_n(&dst->len, 0, __ATOMIC_RELEASE);
        dst->addr = rm.addr;
        dst->rkey = rm.rkey;
        dst->flags = rm.flags;
        __atomic_store_n(&dst->len, rm.len, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctx->reg_lock);
    if (r == NULL)
        SHS_WARN("rank %d announced region #%u, which this rank does not have", rank, seq);
    return SHS_OK;
}

static shs_status_t ctx_request(void *arg, int rank, const void *req, size_t len, void *reply,
                                size_t *reply_len, char *why, size_t why_len)
{
    shs_ctx_t *ctx = arg;
    const uint8_t *p = req;
    if (len < 4) {
        snprintf(why, why_len, "a request of %zu bytes", len);
        return SHS_ERR_PROTOCOL;
    }
    uint32_t op = get32(&p);
    if ((op == OP_CONNECT || op == OP_ENDPOINT) && len < 8) {
        snprintf(why, why_len, "a connect request of %zu bytes", len);
        return SHS_ERR_PROTOCOL;
    }
    if (op == OP_CONNECT)
        return serve_connect(ctx, rank, p + 4, len - 8, reply, reply_len, why, why_len);
    if (op == OP_ENDPOINT) {
        uint32_t seq = get32(&p);
        return serve_endpoint(ctx, rank, seq, p, len - 8, reply, reply_len, why, why_len);
    }
    if (op == OP_FIRST_BARRIER) {
        *reply_len = 0;
        return serve_first_barrier(ctx, rank, p, len - 4, why, why_len);
    }
    if (op == OP_REGION) {
        *reply_len = 0;
        return serve_region(ctx, rank, p, len - 4, why, why_len);
    }
    snprintf(why, why_len, "unknown request %u", op);
    return SHS_ERR_PROTOCOL;
}

shs_status_t shs__rejoin_serve_start(shs_ctx_t *ctx)
{
    shs__boot_serve_ops_t ops = {
        .is_rendezvous = ctx_is_rendezvous,
        .is_alive = ctx_is_alive,
        .request = ctx_request,
        .arg = ctx,
    };
    ctx->naddrs = shs__hostport_count(ctx->cfg.bootstrap);
    shs_status_t st = shs__boot_serve_start(ctx->boot, &ops, &ctx->serve);
    if (st != SHS_OK || ctx->serve == NULL)
        return st;
    if (ctx->rejoined) {
        for (int r = 0; r < ctx->size; r++)
            shs__boot_serve_set_addr(ctx->serve, r, r == ctx->rank
                                                        ? shs__boot_serve_addr(ctx->serve)
                                                        : shs__boot_dir_addr(ctx->boot, r));
        return SHS_OK;
    }
    /* at start-up every rank learns every rank's service address */
    char mine[SHS_BOOT_ADDR_LEN] = {0};
    snprintf(mine, sizeof(mine), "%s", shs__boot_serve_addr(ctx->serve));
    char *all = calloc((size_t)ctx->size, SHS_BOOT_ADDR_LEN);
    if (all == NULL) {
        shs__boot_serve_stop(ctx->serve);
        ctx->serve = NULL;
        return SHS_ERR_NO_MEMORY;
    }
    st = shs__boot_allgather(ctx->boot, mine, sizeof(mine), all);
    for (int r = 0; st == SHS_OK && r < ctx->size; r++) {
        all[(size_t)r * SHS_BOOT_ADDR_LEN + SHS_BOOT_ADDR_LEN - 1] = '\0';
        shs__boot_serve_set_addr(ctx->serve, r, all + (size_t)r * SHS_BOOT_ADDR_LEN);
    }
    free(all);
    if (st != SHS_OK) {
        /* the caller unwinds what came before; the thread is this call's */
        shs__boot_serve_stop(ctx->serve);
        ctx->serve = NULL;
    }
    return st;
}

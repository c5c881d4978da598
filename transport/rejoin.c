/*
 * Rejoins: a rank whose process died, started again with SHS_REJOIN=1,
 * connected to the running job again (docs/failures.md, "Rejoining").
 *
 * Every rank of a job with several SHS_BOOTSTRAP entries runs the rejoin
 * listeners (runtime/boot/serve.c). A rejoiner gets the directory from the
 * rendezvous, then asks each living rank's service to CONNECT it: the
 * service makes new queue pairs towards it (staged on the peer), answers
 * with their numbers, its scratch key, its barrier count and its table of
 * regions (matched by creation order), and the thread that drives the
 * context installs them at its next poll: the old queue pairs destroyed and
 * their completions drained, the peer no longer failed. Each region the
 * rejoiner then creates is announced to every living rank (REGION), whose
 * copy of the rejoiner's key is installed the same way; until then the
 * rejoiner's copy of a region is out of bounds here, not a failure.
 *
 * Endpoints are matched by creation order like regions: the rejoiner's
 * endpoint k asks each living rank's endpoint k (ENDPOINT), installed at
 * that endpoint's next poll; until then the rejoined rank counts failed
 * there (transport.h, peer->gen). Connecting needs SHS_CONNECT=oob on every
 * rank.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/transport.h"

#define OP_CONNECT 1u   /* the context's queue pairs */
#define OP_REGION 2u    /* one of the rejoiner's regions */
#define OP_ENDPOINT 3u  /* an endpoint's queue pairs (by creation order) */
#define OP_FIRST_BARRIER 4u /* the rejoiner's first barrier */
#define REMOTE_LEN 24u   /* u64 addr, u64 len, u32 rkey, u32 flags */
#define ENTRY_LEN 28u    /* u32 seq, remote */

typedef struct shs__reg_entry {
    uint32_t seq;
    shs__remote_t remote;
} shs__reg_entry_t;

typedef struct shs__reg_stage {
    int rank;
    unsigned gen;  /* the rejoiner's incarnation that announced it */
    uint32_t seq;
    shs__remote_t remote;
} shs__reg_stage_t;

/* ---- big-endian fields ---- */

static uint8_t *put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
    return put32(put32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

static uint32_t get32(const uint8_t **p)
{
    const uint8_t *q = *p;
    *p += 4;
    return ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3];
}

static uint64_t get64(const uint8_t **p)
{
    uint64_t hi = get32(p);
    return (hi << 32) | get32(p);
}

static uint8_t *put_remote(uint8_t *p, const shs__remote_t *r)
{
    return put32(put32(put64(put64(p, r->addr), r->len), r->rkey), r->flags);
}

static shs__remote_t get_remote(const uint8_t **p)
{
    shs__remote_t r;
    r.addr = get64(p);
    r.len = get64(p);
    r.rkey = get32(p);
    r.flags = get32(p);
    return r;
}

static shs__remote_t scratch_mine(const shs_ctx_t *ctx)
{
    shs__remote_t r = {.addr = (uintptr_t)ctx->scratch, .len = ctx->scratch_len,
                       .rkey = ctx->scratch_mr->rkey, .flags = SHS_ACCESS_REMOTE_WRITE};
    return r;
}

/* This rank's side of a connection: its record, each queue pair's number
 * and first PSN, its scratch key. */
static uint8_t *put_record(const shs_ctx_t *ctx, uint8_t *o, const shs__conn_t *conns)
{
    shs__oob_hdr_t mine;
    shs__oob_hdr_fill(ctx, &mine);
    memcpy(o, &mine, sizeof(mine));
    o += sizeof(mine);
    for (int q = 0; q < ctx->cfg.qps_per_peer; q++) {
        shs__oob_qp_t one = {htonl(conns[q].qp->qp_num), htonl(conns[q].psn)};
        memcpy(o, &one, sizeof(one));
        o += sizeof(one);
    }
    shs__remote_t sm = scratch_mine(ctx);
    return put_remote(o, &sm);
}

/* op, endpoint number, service address, message size, record */
static size_t connect_len(const shs_ctx_t *ctx)
{
    return 4 + 4 + SHS_BOOT_ADDR_LEN + 8 + sizeof(shs__oob_hdr_t) +
           (size_t)ctx->cfg.qps_per_peer * sizeof(shs__oob_qp_t) + REMOTE_LEN;
}

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

static bool ctx_is_alive(void *arg, int rank)
{
    const shs_ctx_t *ctx = arg;
    return rank == ctx->rank || !shs__peer_is_failed(&ctx->peers[rank]);
}

static void stage_destroy(shs__peer_t *peer, int qpp)
{
    for (int q = 0; q < qpp; q++) {
        if (peer->stage[q].qp != NULL)
            ibv_destroy_qp(peer->stage[q].qp);
        peer->stage[q].qp = NULL;
    }
}

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
    if (atomic_load(&peer->revive) != SHS__REVIVE_IDLE) {
        snprintf(why, wl, "an earlier rejoin of rank %d is still being installed", rank);
        return SHS_ERR_BAD_STATE;
    }
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
        stage_destroy(peer, qpp);
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
        stage_destroy(peer, qpp);
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
        snprintf(why, wl, "rank %d has no endpoint #%u (made after start-up, or destroyed): a "
                 "rejoined rank must make its endpoints in the order the job made them",
                 ctx->rank, seq);
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
    shs__reg_stage_t e = {.rank = rank, .gen = atomic_load(&peer->gen)};
    e.seq = get32(&p);
    e.remote = get_remote(&p);
    pthread_mutex_lock(&ctx->reg_lock);
    if (ctx->reg_nstage == ctx->reg_capstage) {
        size_t cap = ctx->reg_capstage ? 2 * ctx->reg_capstage : 16;
        shs__reg_stage_t *g = realloc(ctx->reg_stage, cap * sizeof(*g));
        if (g == NULL) {
            pthread_mutex_unlock(&ctx->reg_lock);
            return SHS_ERR_NO_MEMORY;
        }
        ctx->reg_stage = g;
        ctx->reg_capstage = cap;
    }
    ctx->reg_stage[ctx->reg_nstage++] = e;
    pthread_mutex_unlock(&ctx->reg_lock);
    atomic_store(&ctx->revive_pending, 1);
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

/* ---- the rejoiner ---- */

/* A status that says the other rank is gone or would not take this one
 * (go on without it: it counts this rank failed), not that the job refused
 * this rank. */
static bool gone(shs_status_t st)
{
    return st == SHS_ERR_PEER_FAILED || st == SHS_ERR_TIMEOUT || st == SHS_ERR_IO ||
           st == SHS_ERR_BAD_STATE;
}

static shs_status_t connect_one(shs_ctx_t *ctx, int s, uint8_t *req, uint64_t *bar_p)
{
    shs__peer_t *peer = &ctx->peers[s];
    int qpp = ctx->cfg.qps_per_peer;
    /* an endpoint's service address is its context's */
    const shs__boot_serve_t *serve = ctx->parent != NULL ? ctx->parent->serve : ctx->serve;
    uint8_t *o = put32(put32(req, ctx->parent != NULL ? OP_ENDPOINT : OP_CONNECT), ctx->ep_seq);
    memset(o, 0, SHS_BOOT_ADDR_LEN);
    snprintf((char *)o, SHS_BOOT_ADDR_LEN, "%s", serve != NULL ? shs__boot_serve_addr(serve) : "");
    o = put64(o + SHS_BOOT_ADDR_LEN, ctx->cfg.msg_size);
    o = put_record(ctx, o, peer->conns);

    void *reply = NULL;
    size_t rlen = 0;
    shs_status_t st = shs__boot_request(ctx->boot, shs__boot_dir_addr(ctx->boot, s), req,
                                        (size_t)(o - req), &reply, &rlen);
    if (st != SHS_OK)
        return st;
    size_t fixed = sizeof(shs__oob_hdr_t) + (size_t)qpp * sizeof(shs__oob_qp_t) + REMOTE_LEN +
                   8 + 4;
    const uint8_t *p = reply;
    uint32_t n = 0;
    if (rlen >= fixed) {
        const uint8_t *c = p + fixed - 4;
        n = get32(&c);
    }
    if (rlen < fixed || rlen != fixed + (size_t)n * ENTRY_LEN) {
        SHS_ERROR("rejoin: rank %d answered %zu bytes", s, rlen);
        free(reply);
        return SHS_ERR_PROTOCOL;
    }
    shs__oob_hdr_t rh;
    memcpy(&rh, p, sizeof(rh));
    p += sizeof(rh);
    shs__gid_to_string(rh.gid, peer->addr, sizeof(peer->addr));
    for (int q = 0; q < qpp && st == SHS_OK; q++) {
        shs__oob_qp_t one;
        memcpy(&one, p, sizeof(one));
        p += sizeof(one);
        st = shs__oob_qp_to_rtr_rts(ctx, &peer->conns[q], &rh, &one);
    }
    if (st == SHS_OK) {
        ctx->scratch_remote[s] = get_remote(&p);
        uint64_t bar = get64(&p);
        if (bar > *bar_p)
            *bar_p = bar;
        p += 4;
        ctx->rj_table[s] = calloc(n > 0 ? n : 1, sizeof(shs__reg_entry_t));
        if (ctx->rj_table[s] == NULL)
            st = SHS_ERR_NO_MEMORY;
        for (uint32_t i = 0; st == SHS_OK && i < n; i++) {
            ctx->rj_table[s][i].seq = get32(&p);
            ctx->rj_table[s][i].remote = get_remote(&p);
        }
        ctx->rj_count[s] = n;
    }
    free(reply);
    return st;
}

/* Every living rank told this rank its barrier count; they may differ by
 * one (one inside a barrier the other has not entered): the first barrier
 * this rank takes part in is one past the largest, and each living rank is
 * told, so that its barriers before that one do not wait for it. */
static void tell_first_barrier(shs_ctx_t *ctx, uint64_t first)
{
    uint8_t req[12];
    put64(put32(req, OP_FIRST_BARRIER), first);
    for (int s = 0; s < ctx->size; s++) {
        if (s == ctx->rank || shs__peer_is_failed(&ctx->peers[s]))
            continue;
        void *reply = NULL;
        size_t rlen = 0;
        shs_status_t st = shs__boot_request(ctx->boot, shs__boot_dir_addr(ctx->boot, s), req,
                                            sizeof(req), &reply, &rlen);
        free(reply);
        if (st != SHS_OK)
            shs__peer_fail(&ctx->peers[s], st, "lost while telling it the first barrier (%s)",
                           shs_status_string(st));
    }
}

shs_status_t shs__rejoin_connect(shs_ctx_t *ctx)
{
    int qpp = ctx->cfg.qps_per_peer;
    if (ctx->cfg.connect_mode != SHS_CONNECT_OOB) {
        SHS_ERROR("rejoin: this rank resolved SHS_CONNECT to rdma_cm; a rejoiner connects "
                  "out of band: set SHS_CONNECT=oob on every rank of the job");
        return SHS_ERR_UNSUPPORTED;
    }
    ctx->scratch_remote = calloc((size_t)ctx->size, sizeof(*ctx->scratch_remote));
    ctx->rj_table = calloc((size_t)ctx->size, sizeof(*ctx->rj_table));
    ctx->rj_count = calloc((size_t)ctx->size, sizeof(*ctx->rj_count));
    uint8_t *req = malloc(connect_len(ctx));
    if (ctx->scratch_remote == NULL || ctx->rj_table == NULL || ctx->rj_count == NULL ||
        req == NULL) {
        free(req);
        return SHS_ERR_NO_MEMORY;
    }
    uint32_t psn = (uint32_t)(shs__now_ns() ^ ((uint64_t)getpid() << 20));
    shs_status_t st = SHS_OK;
    uint64_t bar = 0;
    int joined = 0;
    for (int s = 0; s < ctx->size && st == SHS_OK; s++) {
        shs__peer_t *peer = &ctx->peers[s];
        if (s == ctx->rank)
            continue;
        bool alive = ctx->parent != NULL ? !shs__peer_is_failed(&ctx->parent->peers[s])
                                          : shs__boot_dir_alive(ctx->boot, s);
        if (!alive) {
            shs__peer_fail_at(SHS_LOG_LVL_INFO, peer, SHS_ERR_PEER_FAILED,
                              "not alive in the job this rank rejoined");
            continue;
        }
        for (int q = 0; q < qpp && st == SHS_OK; q++) {
            shs__conn_t *c = &peer->conns[q];
            c->psn = (psn + (uint32_t)c->index * 0x10001u) & 0xffffffu;
            if ((st = shs__conn_create_qp(ctx, c)) == SHS_OK &&
                (st = shs__oob_qp_to_init(ctx, c)) == SHS_OK)
                st = shs__conn_post_recvs(ctx, c);
        }
        if (st != SHS_OK)
            break;
        st = connect_one(ctx, s, req, &bar);
        if (gone(st)) {
            shs__peer_fail(peer, st, "did not take this rank back (%s): going on without it",
                           shs_status_string(st));
            st = SHS_OK;
            continue;
        }
        joined += st == SHS_OK;
    }
    free(req);
    if (st != SHS_OK)
        return st;
    if (ctx->parent == NULL)
        tell_first_barrier(ctx, bar + 1);
    ctx->bar_epoch = bar;
    SHS_INFO("rank %d rejoined the running job: %s connected to %d living rank(s)",
             ctx->rank, ctx->parent != NULL ? "an endpoint" : "its context", joined);
    return SHS_OK;
}

shs_status_t shs__rejoin_region(shs_ctx_t *ctx, shs_region_t *region)
{
    uint8_t req[4 + 4 + REMOTE_LEN];
    uint8_t *o = put32(put32(req, OP_REGION), region->seq);
    put_remote(o, &region->remote[ctx->rank]);
    for (int s = 0; s < ctx->size; s++) {
        if (s == ctx->rank || shs__peer_is_failed(&ctx->peers[s]))
            continue;
        const shs__reg_entry_t *e = NULL;
        for (size_t i = 0; i < ctx->rj_count[s] && e == NULL; i++)
            if (ctx->rj_table[s][i].seq == region->seq)
                e = &ctx->rj_table[s][i];
        if (e == NULL) {
            SHS_ERROR("rejoin: rank %d has no region #%u: a rejoined rank must create its "
                      "regions in the order the job created them, and only those",
                      s, region->seq);
            return SHS_ERR_CONFIG;
        }
        if (!region->uneven && e->remote.len != region->len) {
            SHS_ERROR("rejoin: rank %d's region #%u has %llu bytes, this rank's %zu: a "
                      "rejoined rank must create the regions the job created", s,
                      region->seq, (unsigned long long)e->remote.len, region->len);
            return SHS_ERR_SIZE_MISMATCH;
        }
        region->remote[s] = e->remote;
        void *reply = NULL;
        size_t rlen = 0;
        shs_status_t st = shs__boot_request(ctx->boot, shs__boot_dir_addr(ctx->boot, s), req,
                                            sizeof(req), &reply, &rlen);
        free(reply);
        if (gone(st))
            shs__peer_fail(&ctx->peers[s], st, "lost while announcing region #%u (%s)",
                           region->seq, shs_status_string(st));
        else if (st != SHS_OK)
            return st;
    }
    return SHS_OK;
}

/* ---- installing, on the thread that drives the context ---- */

static void install_peer(shs_ctx_t *ctx, shs__peer_t *peer)
{
    int qpp = ctx->cfg.qps_per_peer;
    for (int q = 0; q < qpp; q++) {
        shs__conn_t *c = &peer->conns[q];
        if (c->qp != NULL && ibv_destroy_qp(c->qp) != 0)
            SHS_WARN("peer %d: ibv_destroy_qp of its old queue pair failed", peer->rank);
        c->qp = NULL;
    }
    /* the old queue pairs are gone: after this, no completion of theirs is
     * left to be taken for the new ones' (same connection index) */
    while (shs__poll_cq(ctx) > 0)
        ;
    for (int q = 0; q < qpp; q++) {
        shs__conn_t *c = &peer->conns[q];
        c->qp = peer->stage[q].qp;
        c->qp->qp_context = c;
        peer->stage[q].qp = NULL;
        c->psn = peer->stage[q].psn;
        c->established = true;
        c->sq_posted = c->sq_done = c->sq_signaled = 0;
        c->unsignaled_run = 0;
        c->unsignaled_bytes = 0;
        c->rd_posted = 0;
        memset(c->rd_mark, 0, (ctx->wr_mask + 1) * sizeof(*c->rd_mark));
        /* a message of the old incarnation the program still holds keeps
         * its slot until released (then posted on the new queue pair) */
        c->rx_nfree = 0;
        for (int i = ctx->cfg.rq_depth - 1; i >= 0; i--)
            if (!c->rx_held[i])
                c->rx_free[c->rx_nfree++] = (uint32_t)i;
    }
    peer->imm_head = peer->imm_tail = 0;
    peer->msg_head = peer->msg_tail = 0;
    peer->rr = 0;
    ctx->scratch_remote[peer->rank] = peer->stage_scratch;
    /* its copies of the regions (a context's) are unknown until it
     * announces them */
    if (ctx->parent == NULL) {
        pthread_mutex_lock(&ctx->reg_lock);
        for (shs_region_t *r = ctx->regions; r != NULL; r = r->next)
            memset(&r->remote[peer->rank], 0, sizeof(r->remote[peer->rank]));
        pthread_mutex_unlock(&ctx->reg_lock);
    }
    snprintf(peer->addr, sizeof(peer->addr), "%s", peer->stage_addr);
    peer->fail_reported = false;
    peer->fail_status = SHS_OK;
    peer->reason[0] = '\0';
    if (peer->up != NULL) /* an endpoint's: made for the incarnation its context took */
        peer->up_gen = peer->stage_gen;
    unsigned gen = peer->up != NULL ? peer->up_gen : atomic_load(&peer->gen);
    /* alive first, then free to be failed again: a failure reported in
     * between is not lost (it finds claimed set only after failed is 0,
     * and then it is the new incarnation's) */
    atomic_store_explicit(&peer->failed, 0, memory_order_release);
    atomic_flag_clear(&peer->claimed);
    /* every free slot (the held ones are posted when released) */
    int rc = 0;
    for (int q = 0; q < qpp && rc == 0; q++)
        while (rc == 0 && peer->conns[q].rx_nfree > 0)
            rc = shs__conn_post_recv(ctx, &peer->conns[q]);
    if (rc != 0)
        shs__peer_fail(peer, SHS_ERR_NO_RESOURCE,
                       "could not post receives to it after it rejoined: %s", strerror(rc));
    atomic_store(&peer->revive, SHS__REVIVE_IDLE);
    SHS_INFO("peer %d rejoined%s (incarnation %u)", peer->rank,
             peer->up != NULL ? " on an endpoint" : "", gen);
}

void shs__rejoin_install(shs_ctx_t *ctx)
{
    atomic_store(&ctx->revive_pending, 0);
    for (int p = 0; p < ctx->size; p++)
        if (p != ctx->rank && atomic_load(&ctx->peers[p].revive) == SHS__REVIVE_STAGED)
            install_peer(ctx, &ctx->peers[p]);
    if (ctx->parent != NULL)
        return; /* regions are the context's */
    pthread_mutex_lock(&ctx->reg_lock);
    size_t keep = 0;
    for (size_t i = 0; i < ctx->reg_nstage; i++) {
        const shs__reg_stage_t *e = &ctx->reg_stage[i];
        const shs__peer_t *peer = &ctx->peers[e->rank];
        if (e->gen != atomic_load(&peer->gen))
            continue; /* an older incarnation's */
        if (atomic_load(&peer->revive) != SHS__REVIVE_IDLE) {
            ctx->reg_stage[keep++] = *e; /* after its queue pairs, next time */
            atomic_store(&ctx->revive_pending, 1);
            continue;
        }
        shs_region_t *r = ctx->regions;
        while (r != NULL && r->seq != e->seq)
            r = r->next;
        if (r != NULL)
            r->remote[e->rank] = e->remote;
        else
            SHS_WARN("rank %d announced region #%u, which this rank does not have", e->rank,
                     e->seq);
    }
    ctx->reg_nstage = keep;
    pthread_mutex_unlock(&ctx->reg_lock);
}

void shs__rejoin_free(shs_ctx_t *ctx)
{
    for (int p = 0; ctx->peers != NULL && p < ctx->size; p++) {
        if (ctx->peers[p].stage != NULL)
            stage_destroy(&ctx->peers[p], ctx->cfg.qps_per_peer);
        free(ctx->peers[p].stage);
        ctx->peers[p].stage = NULL;
    }
    for (int s = 0; ctx->rj_table != NULL && s < ctx->size; s++)
        free(ctx->rj_table[s]);
    free(ctx->rj_table);
    free(ctx->rj_count);
    free(ctx->reg_stage);
    ctx->rj_table = NULL;
    ctx->rj_count = NULL;
    ctx->reg_stage = NULL;
}

/*
 * Rejoins: a rank whose process died, started again with SHS_REJOIN=1,
 * connected to the running job again (docs/failures.md, "Rejoining").
 *
 * Every rank of a job with several SHS_BOOTSTRAP entries runs the rejoin
 * listeners (runtime/boot/serve.c). A rejoiner gets the directory from the
 * rendezvous, then asks each living rank's service to CONNECT it: the
 * service makes new queue pairs towards it (staged on the peer), answers
 * with their numbers, its scratch key, its barrier count and its table of
 * the regions it holds, and the thread that drives the context installs
 * them at its next poll: the old queue pairs destroyed and their completions
 * drained, the peer no longer failed. The rejoiner's k-th region is the k-th
 * region the job still holds (regions the job made and destroyed, such as a
 * start-up check's, are not made again); it is announced to every living
 * rank (REGION) under the job's number, and the key taken in at once (the
 * old incarnation's keys were forgotten when it was staged); until then an
 * operation on the rejoiner's copy returns SHS_ERR_PEER_FAILED, not a
 * failure of the peer.
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
#include "transport/rejoin/rejoin.h"

/* ---- the rejoiner ---- */

static int by_seq(const void *a, const void *b)
{
    uint32_t x = ((const shs__reg_entry_t *)a)->seq, y = ((const shs__reg_entry_t *)b)->seq;
    return (x > y) - (x < y);
}

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
        /* in creation order: this rank's k-th region is the k-th of these */
        if (st == SHS_OK)
            qsort(ctx->rj_table[s], n, sizeof(shs__reg_entry_t), by_seq);
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

/* Its k-th region is the k-th the job still holds (rejoin.h): the
 * numbers the living ranks gave it, the same on each. */
bool shs__rejoin_replaying(const shs_ctx_t *ctx)
{
    if (!ctx->rejoined || ctx->rj_count == NULL)
        return false;
    for (int s = 0; s < ctx->size; s++)
        if (s != ctx->rank && !shs__peer_is_failed(&ctx->peers[s]))
            return ctx->rj_regions < ctx->rj_count[s];
    return false;
}

shs_status_t shs__rejoin_region(shs_ctx_t *ctx, shs_region_t *region)
{
    uint8_t req[4 + 4 + REMOTE_LEN];
    size_t k = ctx->rj_regions;
    bool numbered = false;
    for (int s = 0; s < ctx->size; s++) {
        if (s == ctx->rank || shs__peer_is_failed(&ctx->peers[s]))
            continue;
        if (k >= ctx->rj_count[s]) {
            SHS_ERROR("rejoin: rank %d holds %zu regions and this is this rank's region %zu: "
                      "a rejoined rank creates, in order, the regions the job holds (not "
                      "those it created and destroyed); or rank %d was itself still "
                      "rejoining when this rank connected (one rank at a time)", s,
                      ctx->rj_count[s], k + 1, s);
            return SHS_ERR_CONFIG;
        }
        const shs__reg_entry_t *e = &ctx->rj_table[s][k];
        if (!region->uneven && e->remote.len != region->len) {
            SHS_ERROR("rejoin: rank %d's region %zu (#%u) has %llu bytes, this rank's %zu: a "
                      "rejoined rank creates, in order, the regions the job holds", s, k + 1,
                      e->seq, (unsigned long long)e->remote.len, region->len);
            return SHS_ERR_SIZE_MISMATCH;
        }
        if (numbered && e->seq != region->seq) {
            SHS_ERROR("rejoin: rank %d numbers the job's region %zu #%u, another rank #%u",
                      s, k + 1, e->seq, region->seq);
            return SHS_ERR_PROTOCOL;
        }
        region->seq = e->seq;
        numbered = true;
        region->remote[s] = e->remote;
    }
    uint8_t *o = put32(put32(req, OP_REGION), region->seq);
    put_remote(o, &region->remote[ctx->rank]);
    for (int s = 0; s < ctx->size; s++) {
        if (s == ctx->rank || shs__peer_is_failed(&ctx->peers[s]))
            continue;
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

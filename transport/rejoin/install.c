/* Rejoins: the thread that drives a context (or an endpoint) takes a
 * rejoiner back at its next poll (rejoin.h). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/rejoin/rejoin.h"

void shs__rejoin_stage_destroy(shs__peer_t *peer, int qpp)
{
    for (int q = 0; q < qpp; q++) {
        if (peer->stage[q].qp != NULL)
            ibv_destroy_qp(peer->stage[q].qp);
        peer->stage[q].qp = NULL;
    }
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
    /* its copies of the regions were forgotten when it was staged, and are
     * taken in as it announces them (serve.c) */
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
        if (p != ctx->rank) {
            /* claimed, so that a newer rejoin of the rank (serve.c) does
             * not replace the staged queue pairs while they are taken */
            int want = SHS__REVIVE_STAGED;
            if (atomic_compare_exchange_strong(&ctx->peers[p].revive, &want,
                                               SHS__REVIVE_INSTALLING))
                install_peer(ctx, &ctx->peers[p]);
        }
}

void shs__rejoin_free(shs_ctx_t *ctx)
{
    for (int p = 0; ctx->peers != NULL && p < ctx->size; p++) {
        if (ctx->peers[p].stage != NULL)
            shs__rejoin_stage_destroy(&ctx->peers[p], ctx->cfg.qps_per_peer);
        free(ctx->peers[p].stage);
        ctx->peers[p].stage = NULL;
    }
    for (int s = 0; ctx->rj_table != NULL && s < ctx->size; s++)
        free(ctx->rj_table[s]);
    free(ctx->rj_table);
    free(ctx->rj_count);
    ctx->rj_table = NULL;
    ctx->rj_count = NULL;
}

/*
 * Services to the layers above the transport (services.h): the resolved
 * configuration, immediate channels, lending the context to a background
 * thread, and region holds.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/services.h"
#include "transport/transport.h"

/* The context this thread borrowed (shs__ctx_adopt), if any. */
static _Thread_local const shs_ctx_t *borrowed;

const shs__config_t *shs__ctx_config(const shs_ctx_t *ctx)
{
    return &ctx->cfg;
}

void shs__ctx_waiter_init(shs__waiter_t *w, const shs_ctx_t *ctx, int timeout_ms)
{
    if (timeout_ms < 0)
        timeout_ms = ctx->cfg.op_timeout_ms;
    shs__waiter_init(w, ctx->cfg.poll_spin < 0 ? 0u : (unsigned)ctx->cfg.poll_spin, timeout_ms);
}

shs_status_t shs__ctx_allgather(shs_ctx_t *ctx, const void *mine, size_t len, void *all)
{
    if (shs__ctx_endpoint_refused(ctx, "shs__ctx_allgather"))
        return SHS_ERR_BAD_STATE;
    if (shs__ctx_rejoin_refused(ctx, "a collective set-up over the bootstrap"))
        return SHS_ERR_UNSUPPORTED;
    return shs__boot_allgather(ctx->boot, mine, len, all);
}

static bool is_argument_status(int32_t st)
{
    return st == SHS_ERR_INVALID_ARG || st == SHS_ERR_CONFIG || st == SHS_ERR_UNSUPPORTED ||
           st == SHS_ERR_BAD_STATE;
}

shs_status_t shs__ctx_agree_args(shs_ctx_t *ctx, const char *call, shs_status_t local,
                                 const void *sig, size_t len, shs__args_explain_fn explain)
{
    /* one entry per rank: its status, then its signature */
    size_t entry = 8 + len, n = (size_t)ctx->size;
    uint8_t *mine = calloc(1, entry), *all = calloc(n, entry);
    shs_status_t st = SHS_ERR_NO_MEMORY;
    if (mine == NULL || all == NULL)
        goto out_free;
    int32_t s32 = local;
    memcpy(mine, &s32, sizeof(s32));
    memcpy(mine + 8, sig, len);
    st = shs__ctx_allgather(ctx, mine, entry, all);
    if (st != SHS_OK || local != SHS_OK) {
        st = st != SHS_OK ? st : local;
        goto out_free;
    }
    for (size_t r = 0; r < n && st == SHS_OK; r++) {
        const uint8_t *a = all + r * entry;
        int32_t theirs;
        memcpy(&theirs, a, sizeof(theirs));
        if (memcmp(a + 8, sig, len) != 0) {
            SHS_ERROR("%s: rank %zu was given other arguments than this rank: every rank "
                      "must pass the same", call, r);
            if (explain != NULL)
                explain(call, (int)r, a + 8, sig);
            st = SHS_ERR_SIZE_MISMATCH;
        } else if (theirs != SHS_OK) {
            SHS_ERROR("%s: rank %zu could not take part (%s)%s", call, r,
                      shs_status_string((shs_status_t)theirs),
                      is_argument_status(theirs) ? ": it refused a setting of its own" : "");
            st = is_argument_status(theirs) ? SHS_ERR_SIZE_MISMATCH : SHS_ERR_PEER_FAILED;
        }
    }
out_free:
    free(all);
    free(mine);
    return st;
}

shs_status_t shs__ctx_living_allgather(shs_ctx_t *ctx, const void *mine, size_t len, void *all,
                                       bool *present)
{
    if (shs__ctx_endpoint_refused(ctx, "shs__ctx_living_allgather"))
        return SHS_ERR_BAD_STATE;
    if (len > SHS__GATHER_MAX)
        return SHS_ERR_INVALID_ARG;
    if (ctx->mesh_ready)
        return shs__mesh_allgather(ctx, mine, len, all, present);
    for (int r = 0; r < ctx->size; r++)
        present[r] = true;
    return shs__boot_allgather(ctx->boot, mine, len, all);
}

bool shs__ctx_replay_refused(const shs_ctx_t *ctx, const char *call)
{
    const shs_ctx_t *c = ctx->parent != NULL ? ctx->parent : ctx;
    if (!shs__rejoin_replaying(c))
        return false;
    SHS_ERROR("%s: refused on a rank that rejoined a running job while it makes the regions "
              "the job holds (its own set-up, in the job's order): a collective the job made "
              "at start-up cannot be made again alone; make it together with the living "
              "ranks once the set-up is done (docs/failures.md)", call);
    return true;
}

bool shs__ctx_replaying(const shs_ctx_t *ctx)
{
    return shs__rejoin_replaying(ctx->parent != NULL ? ctx->parent : ctx);
}

shs_status_t shs__ctx_rejoin_skip(shs_ctx_t *ctx, size_t n)
{
    shs_ctx_t *c = ctx->parent != NULL ? ctx->parent : ctx;
    if (!shs__rejoin_replaying(c))
        return SHS_ERR_BAD_STATE;
    c->rj_regions += n;
    return SHS_OK;
}

bool shs__ctx_is_rejoined(const shs_ctx_t *ctx)
{
    const shs_ctx_t *c = ctx->parent != NULL ? ctx->parent : ctx;
    return c->rejoined;
}

unsigned shs__ctx_peer_incarnation(const shs_ctx_t *ctx, int rank)
{
    if (rank < 0 || rank >= ctx->size)
        return 0;
    const shs__peer_t *p = &ctx->peers[rank];
    return p->up != NULL ? p->up_gen : atomic_load(&p->gen);
}

bool shs__ctx_members_changed(const shs_ctx_t *ctx)
{
    const shs_ctx_t *c = ctx->parent != NULL ? ctx->parent : ctx;
    if (c->rejoined)
        return true;
    for (int p = 0; p < c->size; p++)
        if (p != c->rank && atomic_load_explicit(&c->peers[p].gen, memory_order_acquire) != 0)
            return true;
    return false;
}

bool shs__ctx_rejoin_refused(const shs_ctx_t *ctx, const char *call)
{
    const shs_ctx_t *c = ctx->parent != NULL ? ctx->parent : ctx;
    if (!c->rejoined)
        return false;
    SHS_ERROR("%s: refused on a rank that rejoined a running job: the other ranks cannot take "
              "it back into that yet (only the transport rejoins: docs/failures.md)", call);
    return true;
}

shs_status_t shs__ctx_channel_take(shs_ctx_t *ctx, int want, const char *user,
                                   unsigned *chan_p)
{
    if (want > 255)
        return SHS_ERR_INVALID_ARG;
    if (want >= 0) {
        if (ctx->chan_user[want] != NULL) {
            SHS_ERROR("%s: immediate channel %d is taken by %s on this context: two users "
                      "of one channel would take each other's immediates (leave the channel "
                      "unset and the context allocates a free one)",
                      user, want, ctx->chan_user[want]);
            return SHS_ERR_BAD_STATE;
        }
        ctx->chan_user[want] = user;
        *chan_p = (unsigned)want;
        return SHS_OK;
    }
    /* channel 0 is never allocated: it is what a program's own small
     * immediates carry in their top bits */
    for (int c = 255; c >= 1; c--) {
        if (ctx->chan_user[c] == NULL) {
            ctx->chan_user[c] = user;
            *chan_p = (unsigned)c;
            return SHS_OK;
        }
    }
    SHS_ERROR("%s: every immediate channel of this context is taken (255 users)", user);
    return SHS_ERR_NO_RESOURCE;
}

void shs__ctx_channel_give(shs_ctx_t *ctx, unsigned chan)
{
    if (chan <= 255)
        ctx->chan_user[chan] = NULL;
}

shs_status_t shs__ctx_lend(shs_ctx_t *ctx, const char *to)
{
    int expect = 0;
    if (!atomic_compare_exchange_strong(&ctx->lent, &expect, 1)) {
        SHS_ERROR("%s: the context is already lent to %s (one background thread per context)",
                  to, ctx->lent_to != NULL ? ctx->lent_to : "another thread");
        return SHS_ERR_BAD_STATE;
    }
    ctx->lent_to = to;
    return SHS_OK;
}

void shs__ctx_adopt(shs_ctx_t *ctx)
{
    borrowed = ctx;
}

void shs__ctx_reclaim(shs_ctx_t *ctx)
{
    ctx->lent_to = NULL;
    atomic_store(&ctx->lent, 0);
}

bool shs__ctx_refused(shs_ctx_t *ctx, const char *call)
{
    if (shs__ctx_forked(ctx, call))
        return true;
    if (atomic_load_explicit(&ctx->lent, memory_order_acquire) == 0 || borrowed == ctx)
        return false;
    SHS_ERROR("%s: refused: the context is lent to %s, which owns it until it is stopped "
              "(shs_shadow_stop); call this after the stop", call,
              ctx->lent_to != NULL ? ctx->lent_to : "a background thread");
    return true;
}

void shs__region_hold(shs_region_t *region, const char *who)
{
    region->holds++;
    region->held_by = who;
}

void shs__region_release(shs_region_t *region)
{
    if (region->holds > 0)
        region->holds--;
}

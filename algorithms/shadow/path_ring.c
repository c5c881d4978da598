/*
 * The ring data path: the group's members average their snapshots with a
 * ring allreduce (collective.h). After any failure the collective cannot be
 * used again (an abandoned allreduce may still have writes in flight), so
 * the path gives way to the pull path for good, and says so in its header
 * so that the group's other members follow.
 */
#include <string.h>

#include <shadowsync/collective.h>

#include "algorithms/coll/endpoint.h"
#include "algorithms/shadow/engine.h"
#include "runtime/log.h"

static bool ring_usable(const shs_shadow_t *sh)
{
    /* a failure gives way for good, even once the rank is taken back */
    return !sh->ring_off && !sh->pull_set && sh->view.nfailed == 0;
}

static void coll_params(const shs_shadow_t *sh, shs_coll_params_t *cp)
{
    memset(cp, 0, sizeof(*cp));
    cp->field_mask = SHS_COLL_PARAM_STAGE_BYTES | SHS_COLL_PARAM_TIMEOUT | SHS_COLL_PARAM_WIRE;
    cp->stage_bytes = 0; /* the engine reduces registered memory: no staging */
    cp->timeout_ms = sh->cfg.wait_ms;
    /* exact: the engine's conservation rules assume every member sums the
     * same values (a bf16 wire for snapshots is the engine's own choice) */
    cp->wire = SHS_WIRE_NATIVE;
}

shs_status_t shs__shadow_coll(shs_shadow_t *sh, shs_ctx_t *io, shs_coll_t **coll_p)
{
    shs_coll_params_t cp;
    coll_params(sh, &cp);
    return shs__coll_create_on(sh->ctx, io, &cp, coll_p);
}

/* The ring's calls run on the shadow thread: on the engine's endpoint. A
 * rank that rejoined the running job cannot join the ring's collective
 * (the others made it long ago): it passes its regions and pulls from the
 * start, as the living ranks do since the failure that took it out. */
static shs_status_t ring_setup(shs_shadow_t *sh)
{
    if (!sh->rejoining)
        return shs__shadow_coll(sh, sh->io, &sh->coll);
    shs_coll_params_t cp;
    coll_params(sh, &cp);
    shs_status_t st = shs__coll_replay_skip(sh->ctx, &cp);
    if (st != SHS_OK)
        return st;
    sh->ring_off = true;
    sh->pull_set = true;
    sh->pull_from = 0;
    __atomic_store_n(&sh->hdr->pulling, 1, __ATOMIC_RELEASE);
    return SHS_OK;
}

static void ring_teardown(shs_shadow_t *sh)
{
    shs_coll_destroy(sh->coll);
    sh->coll = NULL;
}

/* A stop: one more check-in, with the leaving bit, so that the group's
 * members leave this rank out instead of waiting for it. */
static bool ring_leave(shs_shadow_t *sh)
{
    if (!ring_usable(sh) || sh->leaving)
        return false;
    sh->leaving = true;
    return true;
}

static uint8_t classify_checkin(shs_shadow_t *sh, shs__hdr_wait_t *hw, int p,
                                const shs__pub_hdr_t *h)
{
    uint64_t w = h->checkin, wr = w >> 1;
    bool left = (w & 1u) != 0;
    shs__view_saw_stopped(&sh->view, p, left);
    if (!ring_usable(sh)) {
        sh->rerun = true; /* the round runs again on the pull path */
        hw->abort = true;
        return SHS__PEER_PENDING;
    }
    if (wr > hw->r || (wr == hw->r && !left))
        return SHS__PEER_OK;
    return left ? SHS__PEER_SKIP /* left at round r or before */ : SHS__PEER_PENDING;
}

/*
 * The allreduce is collective inside the group, so a member that stops must
 * not leave the others waiting in it. Each round starts with a check-in:
 * every member writes (r << 1) | leaving into its header once, then reads
 * the others' check-ins until each shows round r or later (it checked in),
 * or an earlier round with the leaving bit (it left). The members that
 * checked in for r without the bit form the round's ring; a member that set
 * the bit takes no part and its thread ends. Every member reads the same
 * once-written words, so all agree on the ring. No early exit on a stop
 * request: members that read this rank's plain check-in count on it in the
 * allreduce; it leaves next round.
 */
static shs_status_t ring_checkin(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp,
                                 shs_group_t *ring)
{
    __atomic_store_n(&sh->hdr->checkin, r << 1 | (sh->leaving ? 1u : 0u), __ATOMIC_RELEASE);
    if (sh->leaving)
        return SHS_ERR_CANCELED; /* the others read the word when they get here */
    shs__reset_states(sh, grp);
    shs__hdr_wait_t hw = {.grp = grp, .r = r, .which = 0, .what = "check in",
                          .classify = classify_checkin};
    shs_status_t err = shs__wait_headers(sh, &hw, false);
    if (sh->rerun)
        return SHS_OK;
    ring->size = 0;
    ring->index = -1;
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (sh->state[p] != SHS__PEER_OK)
            continue;
        if (p == sh->rank)
            ring->index = ring->size;
        ring->ranks[ring->size++] = p;
    }
    return err;
}

/* The first round that cannot use the ring, and every later one, pull. */
static shs_status_t give_way(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp)
{
    if (!sh->pull_set) {
        sh->pull_set = true;
        sh->pull_from = r;
        __atomic_store_n(&sh->hdr->pulling, 1, __ATOMIC_RELEASE);
    }
    return shs__round_pull(sh, r, grp);
}

static shs_status_t ring_round(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp)
{
    shs_group_t ring;
    if (grp->size == 1)
        return SHS_OK;
    shs_status_t err = ring_checkin(sh, r, grp, &ring);
    if (err == SHS_ERR_CANCELED || sh->rerun)
        return err;
    float *snap = sh->slot[0];
    memcpy(snap, sh->w, sh->n * sizeof(float));
    if (ring.size < 2)
        return err;
    memcpy(sh->acc, snap, sh->n * sizeof(float));
    shs_status_t st = shs_allreduce_region(sh->coll, &ring, sh->acc_reg, 0, sh->n,
                                           SHS_DTYPE_FLOAT32, SHS_REDUCE_AVG);
    if (st != SHS_OK) {
        /* the collective is poisoned: later rounds pull (and say so in the
         * header); a protocol error here is the members' disagreement on
         * the ring after a failure, not a reason to stop the engine */
        SHS_WARN("shadow round %llu: the ring allreduce failed (%s); this rank goes on with "
                 "the pull path", (unsigned long long)r, shs_status_string(st));
        sh->ring_off = true;
        __atomic_store_n(&sh->hdr->pulling, 1, __ATOMIC_RELEASE);
        return shs__first_error(err, st == SHS_ERR_PROTOCOL ? SHS_ERR_PEER_FAILED : st);
    }
    for (int k = 0; k < ring.size; k++)
        if (ring.ranks[k] != sh->rank)
            shs__stat_add(&sh->st.bytes_read, 2 * sh->n * sizeof(float) / (size_t)ring.size);
    shs__shadow_note_read(sh, &ring);
    shs__apply_result(sh, snap);
    return err;
}

static shs_status_t round_ring(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp)
{
    if (!ring_usable(sh))
        return give_way(sh, r, grp);
    shs_status_t st = ring_round(sh, r, grp);
    /* the header's finished round follows the ring rounds too: after a
     * failure the ranks pull, and the pull path's straggler rule reads a
     * member whose finished round lags as stuck (left out at once: every
     * member left every other out, and no round synced) */
    if (st != SHS_ERR_CANCELED)
        shs__note_finished(sh, r);
    return st;
}

const shs__path_ops_t shs__path_ring = {
    .name = "ring",
    .setup = ring_setup,
    .round = round_ring,
    .leave = ring_leave,
    .finish = shs__finish_mean,
    .teardown = ring_teardown,
};

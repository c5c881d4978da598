/*
 * EASGD (S-EASGD, FR-EASGD): the center is sliced over the ranks; each rank
 * owns one slice (REMOTE_READ, read by the others) and an inbox with two
 * slots per sender (REMOTE_WRITE). In a round a rank reads the center
 * slices of its group's owners, computes d = alpha (w - c), moves its model
 * by -d and writes each slice of d into its owner's inbox, who applies
 * c += d and returns the credit.
 *
 * The owner changes its slice while the others read it: RDMA READ gives no
 * atomicity, not even per float (Soft-RoCE copies bytes: a float read while
 * it is stored can come back as garbage, say 15.2 for a center of 8). So
 * the slice is a seqlock, as the pull path's snapshots: the owner makes its
 * stamp odd around every change; a reader reads the stamp, the slice, the
 * stamp again (each read completed before the next is posted) and keeps the
 * slice only when both stamps are the same even value. A torn read is read
 * again (torn_retries); after EASGD_TORN_TRIES the owner's slice is left out
 * of this round (no delta: nothing moves).
 */
#include <stdlib.h>
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/shadow/engine.h"
#include "runtime/log.h"
#include "transport/services.h"

/* The immediates: the engine's channel in the top 8 bits (the collectives
 * use another, rma.h shs_poll_imm_match), a tag, the slot parity in bit 0. */
#define IMM_CHANNEL_SHIFT 24
#define IMM_CHANNEL_MASK 0xff000000u
#define IMM_TAG_SHIFT 16
#define IMM_TAG_DELTA 1u
#define IMM_TAG_ACK 2u
#define EASGD_CREDITS 2 /* inbox slots per sender (double buffering) */
#define EASGD_TORN_TRIES 8 /* reads of an owner's slice in one round */
#define CENTER_DATA_OFF 64 /* the stamp, then the slice (cache-line aligned) */

/* The owner's side of the seqlock: every change of the center goes between
 * these two (one writer: the engine's thread, or the finish after it). */
static void center_write_begin(shs__easgd_t *e)
{
    __atomic_store_n(e->seq, *e->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void center_write_end(shs__easgd_t *e)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(e->seq, *e->seq + 1, __ATOMIC_RELEASE);
}

static uint32_t imm_make(const shs_shadow_t *sh, uint32_t tag, unsigned parity)
{
    return sh->easgd.channel | tag << IMM_TAG_SHIFT | (parity & 1u);
}

static size_t inbox_off(const shs_shadow_t *sh, int sender, unsigned parity)
{
    return ((size_t)sender * EASGD_CREDITS + (parity & 1u)) * sh->easgd.slice_max *
           sizeof(float);
}

/* Take every pending immediate: apply received deltas to the owned center
 * slice (c += d) and acknowledge them (unless the job is ending: then the
 * senders' inboxes may be gone); count returned credits. */
shs_status_t shs__easgd_service(shs_shadow_t *sh, bool ack)
{
    shs__easgd_t *e = &sh->easgd;
    for (;;) {
        int from = -1;
        uint32_t imm = 0;
        shs_status_t st = shs_poll_imm_match(sh->io, SHS_PEER_ANY, IMM_CHANNEL_MASK,
                                             e->channel, &from, &imm);
        if (st == SHS_ERR_TIMEOUT)
            return SHS_OK;
        if (st == SHS_ERR_PEER_FAILED)
            return SHS_OK; /* every peer gone: nothing more will arrive */
        if (st != SHS_OK)
            return st;
        uint32_t tag = (imm & ~IMM_CHANNEL_MASK) >> IMM_TAG_SHIFT;
        if (tag == IMM_TAG_DELTA) {
            const float *d = e->inbox + inbox_off(sh, from, imm & 1u) / sizeof(float);
            center_write_begin(e);
            shs__easgd_center_apply(e->center, d, e->my_len);
            center_write_end(e);
            if (!ack)
                continue;
            st = shs_write_imm(sh->io, from, sh->pub, 0, e->inbox_reg, 0, 0,
                               imm_make(sh, IMM_TAG_ACK, 0), 0);
            if (st != SHS_OK)
                shs__shadow_note_error(sh, st);
        } else if (tag == IMM_TAG_ACK) {
            e->credits[from]++;
        } else {
            SHS_ERROR("shadow: unexpected immediate 0x%x from peer %d on the engine's channel "
                      "(SHS_SHADOW_CHANNEL shared with another user of the context?)",
                      imm, from);
            return SHS_ERR_PROTOCOL;
        }
    }
}

/* ------------------------------------------------------ inbox credits */

typedef struct credit_wait {
    int owner;
    unsigned polls;
    bool stopped;    /* the owner's engine stopped: it acknowledges nothing */
    shs_status_t st; /* an error that ended the wait */
} credit_wait_t;

/* Credits come back while this rank applies incoming deltas (two owners
 * waiting on each other both make progress); after a few empty polls the
 * owner's header says whether it stopped. */
static bool credit_poll(shs_shadow_t *sh, void *arg)
{
    credit_wait_t *cw = arg;
    int o = cw->owner;
    cw->st = shs__easgd_service(sh, true);
    if (cw->st != SHS_OK || sh->easgd.credits[o] > 0)
        return true;
    if (shs_ctx_peer_status(sh->io, o, NULL) != SHS_OK) {
        cw->st = SHS_ERR_PEER_FAILED;
        return true;
    }
    if (++cw->polls <= 5)
        return false;
    cw->st = shs__read_header(sh, o, 0);
    if (cw->st == SHS_OK &&
        __atomic_load_n(&((const shs__pub_hdr_t *)sh->scratch_mem)->stopped, __ATOMIC_RELAXED) != 0)
        cw->stopped = true;
    return cw->st != SHS_OK || cw->stopped;
}

/* Wait for an inbox credit at owner o. Gives up when the owner stopped
 * (SHS_OK with *stopped_p set: not an error) or the wait bound passes. */
static shs_status_t wait_credit(shs_shadow_t *sh, int o, bool *stopped_p)
{
    credit_wait_t cw = {.owner = o, .st = SHS_OK};
    *stopped_p = false;
    if (sh->easgd.credits[o] > 0)
        return SHS_OK;
    shs_status_t st = shs__shadow_wait(sh, credit_poll, &cw, true);
    if (st == SHS_ERR_TIMEOUT) {
        if (!sh->warned[o])
            SHS_WARN("shadow: owner %d returned no inbox credit within %d ms; its center slice "
                     "is skipped (SHS_SHADOW_WAIT_MS)", o, sh->cfg.wait_ms);
        sh->warned[o] = true;
        return st;
    }
    if (st != SHS_OK)
        return st;
    if (cw.stopped) {
        shs__stat_add(&sh->st.skipped, 1);
        *stopped_p = true;
    }
    return cw.st;
}

/* ------------------------------------------------------------ a round */

/* Read a stamp (which: 0 before, 1 after the slice) of every member of grp
 * still pending; a failed read leaves the member out (SKIP). */
static shs_status_t read_stamps(shs_shadow_t *sh, const shs_group_t *grp, int which)
{
    shs__easgd_t *e = &sh->easgd;
    shs_status_t err = SHS_OK;
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o == sh->rank || sh->state[o] != SHS__PEER_PENDING)
            continue;
        size_t slot = ((size_t)which * (size_t)sh->size + (size_t)o) * sizeof(uint64_t);
        shs_status_t st = shs_read(sh->io, o, e->stamp_reg, slot, e->center_reg, 0,
                                   sizeof(uint64_t), SHS_OP_SIGNAL);
        if (st != SHS_OK) {
            sh->state[o] = SHS__PEER_SKIP;
            err = shs__first_error(err, st);
        }
    }
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o != sh->rank && sh->state[o] == SHS__PEER_PENDING)
            err = shs__first_error(err, shs__flush_peer(sh, o));
    }
    return err;
}

/* One seqlock pass over the pending members: stamp, slice, stamp. A member
 * whose stamps match (even) becomes OK; a torn one stays pending. */
static shs_status_t read_center_pass(shs_shadow_t *sh, const shs_group_t *grp)
{
    shs__easgd_t *e = &sh->easgd;
    shs_status_t err = read_stamps(sh, grp, 0);
    size_t off, len;
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o == sh->rank || sh->state[o] != SHS__PEER_PENDING)
            continue;
        shs__easgd_slice(sh->n, sh->size, o, &off, &len);
        shs_status_t st = shs_read(sh->io, o, sh->acc_reg, off * sizeof(float), e->center_reg,
                                   CENTER_DATA_OFF, len * sizeof(float), SHS_OP_SIGNAL);
        if (st != SHS_OK) {
            sh->state[o] = SHS__PEER_SKIP;
            err = shs__first_error(err, st);
        }
    }
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o == sh->rank || sh->state[o] != SHS__PEER_PENDING)
            continue;
        shs_status_t st = shs__flush_peer(sh, o);
        if (st != SHS_OK) {
            err = shs__first_error(err, st);
            continue;
        }
        shs__easgd_slice(sh->n, sh->size, o, &off, &len);
        shs__stat_add(&sh->st.bytes_read, len * sizeof(float));
    }
    err = shs__first_error(err, read_stamps(sh, grp, 1));
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o == sh->rank || sh->state[o] != SHS__PEER_PENDING)
            continue;
        uint64_t before = e->stamps[o], after = e->stamps[(size_t)sh->size + (size_t)o];
        if (before == after && (before & 1u) == 0)
            sh->state[o] = SHS__PEER_OK;
        else
            shs__stat_add(&sh->st.torn, 1);
    }
    return err;
}

/* acc = the center slices of the group's owners, each read whole between
 * two equal stamps; an owner still torn after EASGD_TORN_TRIES reads, or
 * whose read failed, is SKIP for this round. */
static shs_status_t read_center(shs_shadow_t *sh, const shs_group_t *grp)
{
    shs_status_t err = SHS_OK;
    bool pending = false;
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (shs__view_is_dead(&sh->view, o)) {
            sh->state[o] = SHS__PEER_SKIP;
        } else if (o == sh->rank) {
            size_t off, len;
            shs__easgd_slice(sh->n, sh->size, o, &off, &len);
            memcpy(sh->acc + off, sh->easgd.center, len * sizeof(float));
            sh->state[o] = SHS__PEER_OK;
        } else {
            sh->state[o] = SHS__PEER_PENDING;
            pending = true;
        }
    }
    for (int t = 0; pending && t < EASGD_TORN_TRIES; t++) {
        err = shs__first_error(err, read_center_pass(sh, grp));
        pending = false;
        for (int k = 0; k < grp->size; k++)
            pending = pending || sh->state[grp->ranks[k]] == SHS__PEER_PENDING;
    }
    for (int k = 0; k < grp->size; k++)
        if (sh->state[grp->ranks[k]] == SHS__PEER_PENDING)
            sh->state[grp->ranks[k]] = SHS__PEER_SKIP; /* torn every time */
    shs__shadow_note_read(sh, grp);
    return err;
}

/* Send d's slice [off, off + len) to owner o and move w by -d there (only
 * for the slices whose owner will apply +d). */
static shs_status_t send_delta(shs_shadow_t *sh, int o, size_t off, size_t len)
{
    shs__easgd_t *e = &sh->easgd;
    bool stopped;
    shs_status_t st = wait_credit(sh, o, &stopped);
    if (st != SHS_OK || stopped)
        return st;
    unsigned parity = e->sent[o] & 1u;
    st = shs_write_imm(sh->io, o, e->dbuf_reg, off * sizeof(float), e->inbox_reg,
                       inbox_off(sh, sh->rank, parity), len * sizeof(float),
                       imm_make(sh, IMM_TAG_DELTA, parity), SHS_OP_SIGNAL);
    if (st != SHS_OK)
        return st;
    e->credits[o]--;
    e->sent[o]++;
    shs__stat_add(&sh->st.bytes_written, len * sizeof(float));
    shs__delta_apply_sub(sh->w + off, e->dbuf + off, len);
    return SHS_OK;
}

static shs_status_t round_easgd(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp)
{
    shs__easgd_t *e = &sh->easgd;
    float *snap = sh->slot[0];
    (void)r;
    shs_status_t err = shs__easgd_service(sh, true);
    memcpy(snap, sh->w, sh->n * sizeof(float));
    err = shs__first_error(err, read_center(sh, grp));

    /* d = alpha (snapshot - c), slice by slice */
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        size_t off, len;
        if (sh->state[o] != SHS__PEER_OK)
            continue;
        shs__easgd_slice(sh->n, sh->size, o, &off, &len);
        shs__easgd_diff(e->dbuf + off, snap + off, sh->acc + off, sh->cfg.alpha, len);
        if (o == sh->rank) {
            center_write_begin(e);
            shs__easgd_center_apply(e->center, e->dbuf + off, len);
            center_write_end(e);
            shs__delta_apply_sub(sh->w + off, e->dbuf + off, len);
            continue;
        }
        shs_status_t st = send_delta(sh, o, off, len);
        if (st == SHS_ERR_CANCELED)
            return st;
        err = shs__first_error(err, st);
    }
    /* dbuf is rewritten next round: its writes must have left */
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o != sh->rank && sh->state[o] == SHS__PEER_OK)
            err = shs__first_error(err, shs_flush(sh->io, o, SHS_TIMEOUT_DEFAULT));
    }
    return shs__first_error(err, shs__easgd_service(sh, true));
}

/* ------------------------------------------------- setup and the end */

/* The center starts as the mean of the ranks' models. Every rank puts its
 * model in slot 0; after a barrier each owner reads its slice from every
 * rank and averages it in rank order. */
static shs_status_t init_center(shs_shadow_t *sh)
{
    shs__easgd_t *e = &sh->easgd;
    memcpy(sh->slot[0], sh->w, sh->n * sizeof(float));
    shs_status_t st = shs_ctx_barrier(sh->ctx);
    if (st != SHS_OK)
        return st;
    if (e->my_len > 0) {
        for (int p = 0; p < sh->size && st == SHS_OK; p++) {
            float *dst = sh->acc + e->my_off;
            if (p == sh->rank) {
                memcpy(dst, sh->slot[0] + e->my_off, e->my_len * sizeof(float));
            } else {
                st = shs_read(sh->io, p, sh->acc_reg, e->my_off * sizeof(float), sh->pub,
                              shs__slot_off(sh, 0) + e->my_off * sizeof(float),
                              e->my_len * sizeof(float), SHS_OP_SIGNAL);
                if (st == SHS_OK)
                    st = shs_flush(sh->io, p, SHS_TIMEOUT_DEFAULT);
            }
            if (st != SHS_OK)
                break;
            if (p == 0)
                memcpy(e->center, dst, e->my_len * sizeof(float));
            else
                shs__easgd_center_apply(e->center, dst, e->my_len);
        }
        shs__vec_scale(e->center, 1.0f / (float)sh->size, e->my_len);
    }
    return shs__first_error(st, shs_ctx_barrier(sh->ctx));
}

static shs_status_t easgd_setup(shs_shadow_t *sh)
{
    shs__easgd_t *e = &sh->easgd;
    size_t np = (size_t)sh->size;
    unsigned chan = 0;
    e->credits = calloc(np, sizeof(int));
    e->sent = calloc(np, sizeof(unsigned));
    shs_status_t st = SHS_ERR_NO_MEMORY;
    if (e->credits == NULL || e->sent == NULL)
        goto err_free;
    st = shs__ctx_channel_take(sh->io, sh->cfg.want_channel, "a shadow engine (EASGD inbox)",
                               &chan);
    if (st != SHS_OK)
        goto err_free;
    e->channel = (uint32_t)chan << IMM_CHANNEL_SHIFT;
    shs__easgd_slice(sh->n, sh->size, 0, &e->my_off, &e->slice_max);
    shs__easgd_slice(sh->n, sh->size, sh->rank, &e->my_off, &e->my_len);
    st = shs_region_alloc(sh->ctx, CENTER_DATA_OFF + e->slice_max * sizeof(float) + sizeof(float),
                          SHS_ACCESS_REMOTE_READ | SHS_ACCESS_LOCAL_WRITE, &e->center_reg);
    if (st != SHS_OK)
        goto err_give_channel;
    e->seq = shs_region_addr(e->center_reg);
    e->center = (float *)((char *)shs_region_addr(e->center_reg) + CENTER_DATA_OFF);
    st = shs_region_alloc(sh->ctx, 2 * np * sizeof(uint64_t), SHS_ACCESS_LOCAL_WRITE,
                          &e->stamp_reg);
    if (st != SHS_OK)
        goto err_destroy_center;
    e->stamps = shs_region_addr(e->stamp_reg);
    st = shs_region_alloc(sh->ctx, np * EASGD_CREDITS * e->slice_max * sizeof(float) +
                                       sizeof(float),
                          SHS_ACCESS_REMOTE_WRITE, &e->inbox_reg);
    if (st != SHS_OK)
        goto err_destroy_stamps;
    e->inbox = shs_region_addr(e->inbox_reg);
    st = shs_region_alloc(sh->ctx, sh->n * sizeof(float), SHS_ACCESS_LOCAL_WRITE, &e->dbuf_reg);
    if (st != SHS_OK)
        goto err_destroy_inbox;
    e->dbuf = shs_region_addr(e->dbuf_reg);
    for (int p = 0; p < sh->size; p++)
        e->credits[p] = EASGD_CREDITS;
    st = init_center(sh);
    if (st != SHS_OK)
        goto err_destroy_dbuf;
    return SHS_OK;

err_destroy_dbuf:
    shs_region_destroy(e->dbuf_reg);
err_destroy_inbox:
    shs_region_destroy(e->inbox_reg);
err_destroy_stamps:
    shs_region_destroy(e->stamp_reg);
err_destroy_center:
    shs_region_destroy(e->center_reg);
err_give_channel:
    shs__ctx_channel_give(sh->io, chan);
err_free:
    free(e->credits);
    free(e->sent);
    return st;
}

static void easgd_teardown(shs_shadow_t *sh)
{
    shs__easgd_t *e = &sh->easgd;
    (void)shs__easgd_service(sh, false);
    shs_region_destroy(e->dbuf_reg);
    shs_region_destroy(e->inbox_reg);
    shs_region_destroy(e->stamp_reg);
    shs_region_destroy(e->center_reg);
    shs__ctx_channel_give(sh->io, e->channel >> IMM_CHANNEL_SHIFT);
    free(e->credits);
    free(e->sent);
}

static void easgd_quiesce(shs_shadow_t *sh)
{
    (void)shs__easgd_service(sh, true);
}

/* ------------------------------------------------------------ finish */

/* The finish meets the other ranks through fences, not a barrier: each
 * rank publishes how far it got in its header, and while it waits for the
 * others it keeps serving its inbox, since a rank still in its last
 * foreground round may need this rank's credits to get there (a barrier
 * there would hold it until SHS_SHADOW_WAIT_MS). */
enum { FENCE_SENT = 1, FENCE_SETTLED = 2 };
/* set in this rank's fence when its finish gave up: the others stop
 * waiting for it (their finish fails with SHS_ERR_PEER_FAILED) */
#define FENCE_ABORTED (1ull << 63)

typedef struct fence_wait {
    int peer;
    uint64_t target;
    shs_status_t st;
} fence_wait_t;

static bool fence_poll(shs_shadow_t *sh, void *arg)
{
    fence_wait_t *fw = arg;
    fw->st = shs__easgd_service(sh, true);
    if (fw->st != SHS_OK)
        return true;
    if (shs_ctx_peer_status(sh->io, fw->peer, NULL) != SHS_OK) {
        fw->st = SHS_ERR_PEER_FAILED;
        return true;
    }
    fw->st = shs__read_header(sh, fw->peer, 0);
    if (fw->st != SHS_OK)
        return true;
    const shs__pub_hdr_t *h = (const shs__pub_hdr_t *)sh->scratch_mem;
    uint64_t f = __atomic_load_n(&h->fence, __ATOMIC_RELAXED);
    if (f & FENCE_ABORTED) {
        fw->st = SHS_ERR_PEER_FAILED;
        return true;
    }
    return f >= fw->target;
}

/* Publish phase `phase` of this finish and wait until every living peer
 * has reached it, serving the inbox meanwhile. */
static shs_status_t fence(shs_shadow_t *sh, uint64_t base, int phase, const char *what)
{
    uint64_t target = base + (uint64_t)phase;
    sh->easgd.fence = target;
    __atomic_store_n(&sh->hdr->fence, target, __ATOMIC_RELEASE);
    for (int p = 0; p < sh->size; p++) {
        if (p == sh->rank || shs__view_is_dead(&sh->view, p))
            continue;
        fence_wait_t fw = {.peer = p, .target = target, .st = SHS_OK};
        shs_status_t st = shs__shadow_wait(sh, fence_poll, &fw, false);
        if (st == SHS_ERR_TIMEOUT)
            SHS_ERROR("shs_shadow_finish: peer %d did not %s within %d ms "
                      "(SHS_SHADOW_WAIT_MS)", p, what, sh->cfg.wait_ms);
        st = shs__first_error(fw.st, st);
        if (st != SHS_OK)
            return st;
    }
    return SHS_OK;
}

typedef struct settle_wait {
    int owner;       /* the first owner with credits out (-1: none) */
    shs_status_t st;
} settle_wait_t;

static bool settle_poll(shs_shadow_t *sh, void *arg)
{
    settle_wait_t *sw = arg;
    sw->st = shs__easgd_service(sh, true);
    if (sw->st != SHS_OK)
        return true;
    for (sw->owner = 0; sw->owner < sh->size; sw->owner++) {
        int o = sw->owner;
        if (o == sh->rank || shs__view_is_dead(&sh->view, o) ||
            sh->easgd.credits[o] >= EASGD_CREDITS)
            continue;
        if (shs_ctx_peer_status(sh->io, o, NULL) != SHS_OK) {
            sw->st = SHS_ERR_PEER_FAILED; /* its acknowledgements will not come */
            return true;
        }
        return false;
    }
    return true;
}

/* This rank's finish failed: say so in the header, so that no peer waits
 * for its next fence. */
static shs_status_t give_up(shs_shadow_t *sh, shs_status_t st)
{
    __atomic_store_n(&sh->hdr->fence, sh->easgd.fence | FENCE_ABORTED, __ATOMIC_RELEASE);
    return st;
}

/* Every delta sent so far is applied by its owner. Each rank's deltas have
 * landed (flushed) before it publishes FENCE_SENT; once every rank has, each
 * waits until all its credits are back (every delta it sent applied) and
 * publishes FENCE_SETTLED; nobody stops serving its inbox before every rank
 * has settled. */
static shs_status_t easgd_finish(shs_shadow_t *sh)
{
    uint64_t base = sh->easgd.fence; /* 0: a finish runs once (thread.c) */
    shs_status_t st = fence(sh, base, FENCE_SENT, "enter shs_shadow_finish");
    if (st != SHS_OK)
        return give_up(sh, st);
    settle_wait_t sw = {.owner = -1, .st = SHS_OK};
    st = shs__shadow_wait(sh, settle_poll, &sw, false);
    if (st == SHS_ERR_TIMEOUT)
        SHS_ERROR("shs_shadow_finish: owner %d did not acknowledge this rank's last delta "
                  "within %d ms", sw.owner, sh->cfg.wait_ms);
    st = shs__first_error(sw.st, st);
    if (st == SHS_OK)
        st = fence(sh, base, FENCE_SETTLED, "settle its deltas");
    return st == SHS_OK ? SHS_OK : give_up(sh, st);
}

const shs__path_ops_t shs__path_easgd = {
    .name = "easgd",
    .setup = easgd_setup,
    .round = round_easgd,
    .quiesce = easgd_quiesce,
    .finish = easgd_finish,
    .teardown = easgd_teardown,
};

shs_status_t shs_shadow_center(const shs_shadow_t *sh, const float **slice_p, size_t *offset_p,
                               size_t *count_p)
{
    if (sh == NULL || slice_p == NULL || offset_p == NULL || count_p == NULL ||
        sh->cfg.algo != SHS_SHADOW_EASGD)
        return SHS_ERR_INVALID_ARG;
    *slice_p = sh->easgd.center;
    *offset_p = sh->easgd.my_off;
    *count_p = sh->easgd.my_len;
    return SHS_OK;
}

/*
 * The published snapshot (a seqlock writer and its readers over RDMA READ),
 * the engine's one wait skeleton, the waits on the peers' headers, and the
 * glue between the transport's failures, the headers' gossip and the view.
 */
#include <stdatomic.h>
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/reduce.h"
#include "algorithms/shadow/engine.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "transport/services.h"

/* Header polls back to back before a wait naps: each is an RDMA READ, as
 * costly to the device as a small transfer (engine.h, shs__shadow_wait). */
#define SHADOW_POLL_SPIN 2

static size_t hdr_readback_off(int k, int which)
{
    return ((size_t)k * 2 + (size_t)which) * SHS__HDR_BYTES;
}

static const shs__pub_hdr_t *hdr_readback(const shs_shadow_t *sh, int k, int which)
{
    return (const shs__pub_hdr_t *)(sh->scratch_mem + hdr_readback_off(k, which));
}

size_t shs__slot_off(const shs_shadow_t *sh, int s)
{
    return SHS__PUB_DATA_OFF + (size_t)s * sh->slot_bytes;
}

/* Publish the live model as round r's snapshot in slot r mod 2 (seqlock
 * writer). Peers read the slot with RDMA READ; on x86 the device observes
 * these stores in program order, and the fences keep the compiler from
 * moving the data copy across the stamps. On a bf16 wire the model is
 * encoded once (the workers keep writing it) and this rank's own copy is
 * the decoding of exactly what the peers will read. */
void shs__publish(shs_shadow_t *sh, uint64_t r)
{
    int s = (int)(r & 1);
    shs__pub_hdr_t *h = sh->hdr;
    uint64_t seq = h->seq[s];
    __atomic_store_n(&h->seq[s], seq + 1, __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_release);
    if (shs__bf16_wire(sh)) {
        shs__bf16_encode((uint16_t *)(void *)sh->slot[s], sh->w, sh->n);
        shs__bf16_decode(sh->snap, (const uint16_t *)(void *)sh->slot[s], sh->n);
    } else {
        memcpy(sh->slot[s], sh->w, sh->n * sizeof(float));
    }
    atomic_thread_fence(memory_order_release);
    __atomic_store_n(&h->memb[s], sh->grp_dig, __ATOMIC_RELAXED);
    __atomic_store_n(&h->round[s], r, __ATOMIC_RELAXED);
    __atomic_store_n(&h->seq[s], seq + 2, __ATOMIC_RELEASE);
}

/* Whether slot s of header h holds a completely written round. */
bool shs__slot_written(const shs__pub_hdr_t *h, int s)
{
    return h->seq[s] != 0 && (h->seq[s] & 1) == 0;
}

/* Highest round a header shows as completely published, plus one (0: none). */
uint64_t shs__published_plus1(const shs__pub_hdr_t *h)
{
    uint64_t best = 0;
    for (int s = 0; s < 2; s++)
        if (shs__slot_written(h, s) && h->round[s] + 1 > best)
            best = h->round[s] + 1;
    return best;
}

/* Mark every member of grp but this rank PEER_PENDING (self: PEER_OK). */
void shs__reset_states(shs_shadow_t *sh, const shs_group_t *grp)
{
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        sh->state[p] = p == sh->rank                       ? SHS__PEER_OK
                       : shs__view_is_dead(&sh->view, p) ? SHS__PEER_SKIP
                                                           : SHS__PEER_PENDING;
    }
}

/* ------------------------------------------------------------ failures */

/* The statistics follow the view. */
static void note_view(shs_shadow_t *sh)
{
    if (sh->view.nfailed > 0) {
        uint64_t expect = 0;
        atomic_compare_exchange_strong(&sh->st.first_fail_ns, &expect, shs__now_ns());
    }
    atomic_store_explicit(&sh->st.failed, sh->view.nfailed, SHS__RELAXED);
}

/* p's header shows a newer incarnation (read over the connection to it):
 * take it in, and forget what this rank knew of the old one. */
static void admit_from_hdr(shs_shadow_t *sh, int p, const shs__pub_hdr_t *h)
{
    uint64_t r = atomic_load_explicit(&sh->round, SHS__RELAXED);
    if (h->life > UINT16_MAX || !shs__view_admit(&sh->view, p, (shs__life_t)h->life, r))
        return;
    sh->published_seen[p] = 0;
    sh->done_seen[p] = 0;
    sh->seen_seq[p] = 0;
    sh->late[p] = false;
    sh->warned[p] = false;
    sh->told_seen[p] = 0;
    note_view(sh);
}

/* Take in peer `from`'s told table when its header says it moved. */
static void learn_told(shs_shadow_t *sh, int from, const shs__pub_hdr_t *h)
{
    if (h->told_ver == sh->told_seen[from])
        return;
    uint64_t ver = h->told_ver; /* h lives in scratch: keep it before reading more */
    shs_status_t st =
        shs_read(sh->io, from, sh->scratch, sh->told_off, sh->pub, SHS__PUB_TOLD_OFF,
                 SHS__VIEW_TOLD_RANKS * sizeof(shs__life_t), SHS_OP_SIGNAL);
    if (st == SHS_OK)
        st = shs_flush(sh->io, from, SHS_TIMEOUT_DEFAULT);
    if (st != SHS_OK)
        return; /* the transport fails it; the next look tries again */
    shs__stat_add(&sh->st.bytes_read, SHS__VIEW_TOLD_RANKS * sizeof(shs__life_t));
    sh->told_seen[from] = ver;
    if (shs__view_learn(&sh->view, from,
                        (const shs__life_t *)(const void *)(sh->scratch_mem + sh->told_off),
                        atomic_load_explicit(&sh->round, SHS__RELAXED)) > 0)
        note_view(sh);
}

/* A rank out of this view whose connection is up again (it rejoined), or
 * one that gossip says lives as a newer incarnation: its own header says
 * which incarnation the connection reaches. */
static void probe(shs_shadow_t *sh, int p)
{
    sh->view.probe[p] = false;
    if (shs__read_header(sh, p, 0) != SHS_OK)
        return; /* an old incarnation's connection: the transport fails it */
    const shs__pub_hdr_t *h = (const shs__pub_hdr_t *)sh->scratch_mem;
    if (h->life != 0 && (h->life & 1u) == 0 && h->life <= UINT16_MAX &&
        shs__life_newer((shs__life_t)h->life, shs__view_life(&sh->view, p)))
        admit_from_hdr(sh, p, h);
}

/* Peers the transport has failed since the last look (error completions,
 * waits past SHS_OP_TIMEOUT_MS, async or rdma_cm events), and peers that
 * came back. */
void shs__check_failures(shs_shadow_t *sh)
{
    uint64_t r = atomic_load_explicit(&sh->round, SHS__RELAXED);
    (void)shs_progress(sh->io); /* a rejoiner's queue pairs are installed by a poll */
    for (int p = 0; p < sh->size; p++) {
        const char *reason = NULL;
        if (p == sh->rank)
            continue;
        bool up = shs_ctx_peer_status(sh->io, p, &reason) == SHS_OK;
        if (!up) {
            if (!shs__view_is_dead(&sh->view, p))
                shs__view_drop(&sh->view, p, -1, reason, r);
            continue;
        }
        if (shs__view_is_dead(&sh->view, p) || sh->view.probe[p])
            probe(sh, p);
    }
    note_view(sh);
}

/* Take in what a living peer's header as read tells: its incarnation,
 * its told table, the ring fallback. */
static void learn_hdr(shs_shadow_t *sh, int from, const shs__pub_hdr_t *h)
{
    if (shs__view_is_dead(&sh->view, from))
        return;
    if ((h->life & 1u) == 0 && h->life <= UINT16_MAX &&
        shs__life_newer((shs__life_t)h->life, shs__view_life(&sh->view, from)))
        admit_from_hdr(sh, from, h); /* died and came back before this rank saw it */
    if (h->pulling != 0 && sh->cfg.path == SHS_SHADOW_PATH_RING && !sh->ring_off) {
        SHS_WARN("shadow: peer %d left the ring path after a failure; this rank follows it "
                 "onto the pull path", from);
        sh->ring_off = true;
    }
    learn_told(sh, from, h);
}

/* ------------------------------------------------------------- waiting */

long shs__shadow_nap_max_ns(const shs_shadow_t *sh)
{
    /* the pull path's median round when it has one: the last round alone
     * may be one that held a stopped member for seconds, and a nap of a
     * thirty-second of that kept a straggler that continued seconds behind
     * its group */
    uint64_t base = sh->full_med_ns != 0
                        ? sh->full_med_ns
                        : atomic_load_explicit(&sh->st.round_ns_last, SHS__RELAXED);
    long adaptive = (long)(base / 32u);
    return adaptive > SHS__IDLE_SLEEP_MAX_NS ? adaptive : SHS__IDLE_SLEEP_MAX_NS;
}

shs_status_t shs__shadow_wait(shs_shadow_t *sh, shs__shadow_poll_fn poll, void *arg,
                              bool cancellable)
{
    return shs__shadow_wait_ms(sh, poll, arg, cancellable, sh->cfg.wait_ms);
}

shs_status_t shs__shadow_wait_ms(shs_shadow_t *sh, shs__shadow_poll_fn poll, void *arg,
                                 bool cancellable, int ms)
{
    shs__waiter_t w;
    shs_status_t st = SHS_OK;
    uint64_t t0 = shs__now_ns();
    /* the bound is checked after every poll: a poll here is an RDMA READ
     * (and a nap), so the waiter's clock-every-64-polls check would
     * overshoot a straggler bound by 128 polls */
    shs__deadline_t dl = shs__deadline_in_ms(ms);
    shs__waiter_init(&w, SHADOW_POLL_SPIN, -1);
    shs__waiter_nap_max(&w, shs__shadow_nap_max_ns(sh));
    while (!poll(sh, arg)) {
        if (cancellable && shs__shadow_stop_requested(sh)) {
            st = SHS_ERR_CANCELED;
            break;
        }
        if (shs__deadline_passed(dl)) {
            st = SHS_ERR_TIMEOUT;
            break;
        }
        (void)shs__waiter_idle(&w);
    }
    shs__stat_add(&sh->st.wait_ns_sum, shs__now_ns() - t0);
    return st;
}

shs_status_t shs__read_header(shs_shadow_t *sh, int p, size_t loc)
{
    shs_status_t st =
        shs_read(sh->io, p, sh->scratch, loc, sh->pub, 0, SHS__HDR_BYTES, SHS_OP_SIGNAL);
    if (st == SHS_OK)
        st = shs_flush(sh->io, p, SHS_TIMEOUT_DEFAULT);
    if (st == SHS_OK)
        shs__stat_add(&sh->st.bytes_read, SHS__HDR_BYTES);
    return st;
}

shs_status_t shs__flush_peer(shs_shadow_t *sh, int p)
{
    shs_status_t st = shs_flush(sh->io, p, SHS_TIMEOUT_DEFAULT);
    if (st != SHS_OK)
        sh->state[p] = SHS__PEER_SKIP;
    return st;
}

static void hdr_failed(shs_shadow_t *sh, shs__hdr_wait_t *hw, int p, shs_status_t st)
{
    sh->state[p] = SHS__PEER_SKIP;
    hw->err = shs__first_error(hw->err, st);
}

/* One pass over the members in state `select`: the reads are posted
 * together, then each is flushed, taken in and classified. */
static void hdr_pass(shs_shadow_t *sh, shs__hdr_wait_t *hw, uint8_t select)
{
    const shs_group_t *grp = hw->grp;
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (p == sh->rank || sh->state[p] != select)
            continue;
        shs_status_t st = shs_read(sh->io, p, sh->scratch, hdr_readback_off(k, hw->which),
                                   sh->pub, 0, SHS__HDR_BYTES, SHS_OP_SIGNAL);
        if (st == SHS_OK && hw->admit)
            st = shs_read(sh->io, p, sh->scratch, sh->word_off + (size_t)k * 8, sh->admit_reg,
                          (size_t)(hw->r % SHS__ADMIT_WORDS) * 8, 8, SHS_OP_SIGNAL);
        if (st != SHS_OK)
            hdr_failed(sh, hw, p, st);
    }
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (p == sh->rank || sh->state[p] != select)
            continue;
        shs_status_t st = shs__flush_peer(sh, p);
        if (st != SHS_OK) {
            hw->err = shs__first_error(hw->err, st);
            continue;
        }
        shs__stat_add(&sh->st.bytes_read, SHS__HDR_BYTES);
        const shs__pub_hdr_t *h = hdr_readback(sh, k, hw->which);
        learn_hdr(sh, p, h);
        hw->k = k;
        sh->state[p] = hw->classify(sh, hw, p, h);
    }
}

static bool hdr_poll(shs_shadow_t *sh, void *arg)
{
    shs__hdr_wait_t *hw = arg;
    hdr_pass(sh, hw, SHS__PEER_PENDING);
    if (hw->abort)
        return true;
    for (int k = 0; k < hw->grp->size; k++)
        if (sh->state[hw->grp->ranks[k]] == SHS__PEER_PENDING)
            return false;
    return true;
}

shs_status_t shs__wait_headers(shs_shadow_t *sh, shs__hdr_wait_t *hw, bool cancellable)
{
    hw->err = SHS_OK;
    hw->abort = false;
    shs_status_t st = shs__shadow_wait_ms(sh, hdr_poll, hw, cancellable,
                                          hw->bound_ms > 0 ? hw->bound_ms : sh->cfg.wait_ms);
    if (st == SHS_ERR_CANCELED || (st == SHS_ERR_TIMEOUT && hw->bound_ms > 0))
        return st; /* a bound of the caller's own: it decides */
    if (st == SHS_ERR_TIMEOUT) {
        for (int k = 0; k < hw->grp->size; k++) {
            int p = hw->grp->ranks[k];
            if (sh->state[p] != SHS__PEER_PENDING)
                continue;
            sh->state[p] = SHS__PEER_SKIP;
            shs__stat_add(&sh->st.skipped, 1);
            if (!sh->warned[p])
                SHS_WARN("shadow round %llu: peer %d did not %s within %d ms; going on "
                         "without it (SHS_SHADOW_WAIT_MS)",
                         (unsigned long long)hw->r, p, hw->what, sh->cfg.wait_ms);
            sh->warned[p] = true;
        }
    }
    return shs__first_error(hw->err, st);
}

/* --------------------------------------------------- reading the stamps */

/* What every header read for the pull path tells: the peer's published
 * and finished rounds and whether it stopped. */
void shs__note_published(shs_shadow_t *sh, int p, const shs__pub_hdr_t *h)
{
    shs__view_saw_stopped(&sh->view, p, h->stopped != 0);
    if (h->done > sh->done_seen[p])
        sh->done_seen[p] = h->done;
    uint64_t pub1 = shs__published_plus1(h);
    if (pub1 > sh->published_seen[p])
        sh->published_seen[p] = pub1;
}

static uint8_t skip_stopped(shs_shadow_t *sh)
{
    shs__stat_add(&sh->st.skipped, 1);
    return SHS__PEER_SKIP;
}

/* The peer's slot r mod 2 holds round r, completely written. */
static uint8_t classify_slot(shs_shadow_t *sh, shs__hdr_wait_t *hw, int p,
                             const shs__pub_hdr_t *h)
{
    int s = (int)(hw->r & 1);
    shs__note_published(sh, p, h);
    int wd = shs__withdrew(h, hw->r); /* read after its verdict (admit.c) */
    if (wd < 0)
        return SHS__PEER_PENDING;
    if (wd > 0) {
        shs__stat_add(&sh->st.skipped, 1);
        return SHS__PEER_SKIP;
    }
    if (shs__slot_written(h, s) && h->round[s] == hw->r) {
        if (h->wire != sh->hdr->wire) {
            /* its slots hold another format: reading them would average
             * garbage. The peer sees the same difference and skips this
             * rank too, so the sum stays whole. */
            if (!sh->warned[p])
                SHS_ERROR("shadow round %llu: peer %d publishes %s snapshots, this rank %s: "
                          "every rank must use the same SHS_SHADOW_WIRE; going on without "
                          "it", (unsigned long long)hw->r, p,
                          h->wire == 1u + SHS_WIRE_BF16 ? "bf16" : "float32",
                          shs__bf16_wire(sh) ? "bf16" : "float32");
            sh->warned[p] = true;
            hw->err = shs__first_error(hw->err, SHS_ERR_SIZE_MISMATCH);
            return skip_stopped(sh);
        }
        sh->seen_seq[p] = h->seq[s];
        return SHS__PEER_OK;
    }
    if (h->stopped != 0)
        return skip_stopped(sh);
    if (!shs__slot_written(h, s) || h->round[s] <= hw->r)
        return SHS__PEER_PENDING;
    /* after a failure or a rejoin the ranks' views (and so their groups)
     * may differ for a few rounds: the peer ran ahead under its own view; it
     * is skipped this round, not an error */
    if (sh->view.ndead > 0 || sh->pull_set || shs__view_changed(&sh->view))
        return skip_stopped(sh);
    SHS_ERROR("shadow round %llu: peer %d already published round %llu in the same slot: "
              "the ranks disagree on the schedule",
              (unsigned long long)hw->r, p, (unsigned long long)h->round[s]);
    hw->err = shs__first_error(hw->err, SHS_ERR_PROTOCOL);
    return SHS__PEER_SKIP;
}

/* Wait until every pending member of grp has published round r. A stop
 * does not cancel it (round_pull says why). */
shs_status_t shs__wait_slot(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r)
{
    shs__hdr_wait_t hw = {.grp = grp, .r = r, .which = 0, .what = "publish its snapshot",
                          .classify = classify_slot};
    return shs__wait_headers(sh, &hw, false);
}

/* The slot read still holds the write of round r seen before the read. */
static uint8_t classify_stamp(shs_shadow_t *sh, shs__hdr_wait_t *hw, int p,
                              const shs__pub_hdr_t *h)
{
    int s = (int)(hw->r & 1);
    if (h->seq[s] == sh->seen_seq[p] && h->round[s] == hw->r)
        return SHS__PEER_OK;
    shs__stat_add(&sh->st.torn, 1);
    hw->abort = true; /* here: "not clean" */
    return SHS__PEER_PENDING;
}

/* Seqlock reader's second stamp: the slots read in this round still hold
 * the same write of round r. A peer whose stamp moved is reset to pending
 * (the caller retries); returns whether every read was clean. */
bool shs__verify_stamps(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r,
                        shs_status_t *err)
{
    shs__hdr_wait_t hw = {.grp = grp, .r = r, .which = 1, .classify = classify_stamp,
                          .err = SHS_OK};
    hdr_pass(sh, &hw, SHS__PEER_OK);
    *err = shs__first_error(*err, hw.err);
    return hw.err == SHS_OK && !hw.abort;
}

/*
 * One round, the shadow thread that runs them back to back, and the calls
 * that drive it: start, stop, a foreground round (sync) and the end of a
 * run (finish).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include <shadowsync/collective.h>
#include <shadowsync/rma.h>

#include "algorithms/shadow/engine.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "transport/services.h"

static bool fatal(shs_status_t st)
{
    return st == SHS_ERR_DEVICE || st == SHS_ERR_PROTOCOL;
}

static shs_status_t run_round(shs_shadow_t *sh)
{
    uint64_t r = atomic_load_explicit(&sh->round, SHS__RELAXED);
    uint64_t t0 = shs__now_ns();
    shs_group_t grp;
    shs_status_t st;
    if (atomic_load_explicit(&sh->st.first_round_ns, SHS__RELAXED) == 0)
        atomic_store_explicit(&sh->st.first_round_ns, t0, SHS__RELAXED);
    int nfailed0 = sh->view.nfailed;
    /* a round runs at most twice: again when the path gave way (the ring
     * learned of a failure or of the pull fallback before it changed
     * anything), over the group of the new view */
    for (int attempt = 0;; attempt++) {
        shs__check_failures(sh);
        st = shs__view_group(&sh->view, &sh->cfg.sched, r, &grp);
        if (st != SHS_OK)
            return st;
        sh->grp_dig = shs__view_digest(&sh->view); /* the view the group came from */
        sh->round_peers = 0;
        sh->rerun = false;
        sh->next_round = 0;
        st = sh->ops->round(sh, r, &grp);
        if (st == SHS_ERR_CANCELED) {
            shs__check_failures(sh); /* a stop must not hide a failure seen meanwhile */
            return st;
        }
        if (!sh->rerun || attempt > 0)
            break;
    }
    shs__check_failures(sh);
    /* the round in which this rank saw a failure reports it (foreground
     * callers see SHS_ERR_PEER_FAILED once); the round itself used the
     * members it could read */
    if (sh->view.nfailed > nfailed0 && st == SHS_OK)
        st = SHS_ERR_PEER_FAILED;
    /* a round that left this rank out may catch it up (admit.c) */
    atomic_store_explicit(&sh->round, sh->next_round > r + 1 ? sh->next_round : r + 1,
                          SHS__RELAXED);
    shs__shadow_note_round(sh, shs__now_ns() - t0, st);
    if (sh->round_peers > 0 && fatal(st))
        sh->poisoned = true;
    return st;
}

static void pin_self(const shs_shadow_t *sh)
{
    char cpus[64];
    if (strcmp(sh->cfg.pin, "none") == 0)
        return;
    if (strcmp(sh->cfg.pin, "auto") == 0) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof(set), &set) != 0)
            return;
        int last = -1;
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                last = c;
        if (last < 0 || CPU_COUNT(&set) < 2)
            return;
        snprintf(cpus, sizeof(cpus), "%d", last);
    } else {
        snprintf(cpus, sizeof(cpus), "%s", sh->cfg.pin);
    }
    shs_status_t st = shs__pin_thread_near(cpus);
    if (st != SHS_OK)
        SHS_WARN("shadow: could not pin the shadow thread to cpus %s (%s); it runs unpinned",
                 cpus, shs_status_string(st));
}

/* Rounds run with subnormal floats flushed to zero (x86 MXCSR FTZ and DAZ).
 * The rules converge geometrically (BMUF's block momentum decays by eta per
 * round, EASGD's w - c by 1 - 2 alpha), so parameters that sit at zero
 * pick up subnormal values after a few hundred rounds; arithmetic on those
 * is slow on every x86 and very slow under emulation, and it would slow the
 * workers that read them. Values below FLT_MIN (1.2e-38) become 0 instead. */
static unsigned ftz_enter(void)
{
#if defined(__SSE2__)
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return old;
#else
    return 0;
#endif
}

static void ftz_leave(unsigned old)
{
#if defined(__SSE2__)
    _mm_setcsr(old);
#else
    (void)old;
#endif
}

/* Sleep until the stop request, or until the monotonic time until_ns
 * (0: no bound). */
static void sleep_until_stop(shs_shadow_t *sh, uint64_t until_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(until_ns / 1000000000u),
                          .tv_nsec = (long)(until_ns % 1000000000u)};
    pthread_mutex_lock(&sh->lock);
    while (!shs__shadow_stop_requested(sh)) {
        if (until_ns == 0)
            pthread_cond_wait(&sh->cond, &sh->lock);
        else if (pthread_cond_timedwait(&sh->cond, &sh->lock, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&sh->lock);
}

/* How often a rank left alone looks for a peer that rejoined (ns). */
#define ALONE_NAP_NS 50000000L

/* Between two rounds that started at t0. */
static void pause_after(shs_shadow_t *sh, uint64_t t0)
{
    if (sh->size == 1) {
        /* nobody to sync with, ever: sleep until the stop instead of spinning */
        sleep_until_stop(sh, 0);
        return;
    }
    shs__hold_ahead(sh);
    if (sh->round_peers == 0) {
        /* nobody to sync with now (every peer may have failed or ended; a
         * failed one may rejoin): look again after the longest nap, or
         * ALONE_NAP_NS when that is longer */
        long ns = shs__shadow_nap_max_ns(sh);
        if (sh->size - sh->view.ndead <= 1 && ns < ALONE_NAP_NS)
            ns = ALONE_NAP_NS;
        struct timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
        nanosleep(&ts, NULL);
    }
    uint64_t until = t0 + (uint64_t)sh->cfg.min_interval_us * 1000u;
    if (sh->cfg.min_interval_us != 0 && shs__now_ns() < until)
        sleep_until_stop(sh, until);
}

static void *shadow_main(void *arg)
{
    shs_shadow_t *sh = arg;
    shs__ctx_adopt(sh->io); /* lent by shs_shadow_start until the join */
    pin_self(sh);
    (void)ftz_enter(); /* this thread's own state: nothing to restore */
    sh->bmuf = sh->cfg.bmuf_bg; /* S-BMUF's defaults (shadow.h) */
    for (;;) {
        if (shs__shadow_stop_requested(sh) && (sh->ops->leave == NULL || !sh->ops->leave(sh)))
            break;
        uint64_t t0 = shs__now_ns();
        shs_status_t st = run_round(sh);
        if (st == SHS_ERR_CANCELED)
            continue; /* a stop: the path may need a round to leave */
        if (sh->poisoned) {
            SHS_ERROR("shadow: stopping the shadow thread after %s", shs_status_string(st));
            break;
        }
        pause_after(sh, t0);
    }
    if (sh->ops->quiesce != NULL)
        sh->ops->quiesce(sh);
    shs__check_failures(sh);
    __atomic_store_n(&sh->hdr->stopped, 1, __ATOMIC_RELEASE);
    return NULL;
}

shs_status_t shs_shadow_start(shs_shadow_t *sh)
{
    if (sh == NULL)
        return SHS_ERR_INVALID_ARG;
    if (atomic_load(&sh->running) || sh->poisoned)
        return SHS_ERR_BAD_STATE;
    if (sh->leaving || sh->finished)
        return SHS_ERR_BAD_STATE; /* the ring's members count this rank as gone, or done */
    if (shs_region_check(sh->model) != SHS_OK)
        return SHS_ERR_BAD_STATE; /* the model was freed while registered (logged) */
    if (shs__ctx_lend(sh->io, "a shadow engine's thread") != SHS_OK)
        return SHS_ERR_BAD_STATE; /* cannot happen: the endpoint is the engine's (logged) */
    sh->ran_background = true;
    atomic_store(&sh->stop_req, false);
    __atomic_store_n(&sh->hdr->stopped, 0, __ATOMIC_RELEASE);
    atomic_store(&sh->st.run_start_ns, shs__now_ns());
    atomic_store(&sh->running, 1);
    int rc = pthread_create(&sh->thread, NULL, shadow_main, sh);
    if (rc != 0) {
        atomic_store(&sh->running, 0);
        shs__ctx_reclaim(sh->io);
        SHS_ERROR("shadow: cannot create the shadow thread: %s", strerror(rc));
        return SHS_ERR_NO_RESOURCE;
    }
    return SHS_OK;
}

shs_status_t shs_shadow_stop(shs_shadow_t *sh)
{
    if (sh == NULL)
        return SHS_ERR_INVALID_ARG;
    if (!atomic_load(&sh->running))
        return SHS_OK;
    pthread_mutex_lock(&sh->lock);
    atomic_store_explicit(&sh->stop_req, true, memory_order_release);
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->lock);
    pthread_join(sh->thread, NULL);
    shs__ctx_reclaim(sh->io);
    atomic_store_explicit(&sh->stop_req, false, memory_order_release);
    shs__stat_add(&sh->st.run_ns_total, shs__now_ns() - atomic_load(&sh->st.run_start_ns));
    atomic_store(&sh->running, 0);
    return SHS_OK;
}

shs_status_t shs_shadow_sync(shs_shadow_t *sh)
{
    if (sh == NULL)
        return SHS_ERR_INVALID_ARG;
    if (atomic_load(&sh->running) || sh->poisoned || sh->finished)
        return SHS_ERR_BAD_STATE;
    if (sh->ran_background) {
        /* the ranks' round counters parted while their threads ran (each
         * stopped at its own round), and stopped ranks are skipped by their
         * peers: a foreground round now would include a peer on one side
         * only and break the sum */
        SHS_ERROR("shs_shadow_sync: refused: this engine ran in the background "
                  "(shs_shadow_start); foreground rounds cannot follow a background run on "
                  "one engine: destroy it and create a new one (collective) for them");
        return SHS_ERR_BAD_STATE;
    }
    unsigned csr = ftz_enter(); /* the caller's thread: restored below */
    sh->bmuf = sh->cfg.bmuf_fg; /* FR-BMUF's defaults */
    shs_status_t st = run_round(sh);
    ftz_leave(csr);
    return st;
}

/* Whether the engine's view counts every peer alive (no rejoin: it knows). */
static shs_status_t view_alive(const shs_shadow_t *sh)
{
    if (sh->view.ndead == 0)
        return SHS_OK;
    SHS_ERROR("shs_shadow_finish: %d peer(s) failed or gone: the ranks cannot be settled "
              "(their models stay as they are)", sh->view.ndead);
    return SHS_ERR_PEER_FAILED;
}

/* EASGD: its center is settled among the ranks that created their engines
 * together, every one alive. */
static shs_status_t easgd_members(shs_shadow_t *sh)
{
    shs_status_t st = view_alive(sh);
    if (st == SHS_OK && (shs__view_changed(&sh->view) || shs__ctx_members_changed(sh->ctx))) {
        SHS_WARN("shs_shadow_finish: a rank failed and rejoined during the run: EASGD's "
                 "center is not settled (the models stay as they are; a collective average "
                 "of them works)");
        st = SHS_ERR_UNSUPPORTED;
    }
    return st;
}

/* After a rejoin (every rank knows of it: the rejoiner, and each rank it
 * connected to) the connections decide, not the engine's view: a rank
 * whose thread stopped before its engine took the rejoiner back still
 * counts it gone there, while the mean (a collective over the context)
 * includes it. A peer dead in the view that never rejoined is gone. */
static shs_status_t connections_alive(shs_shadow_t *sh)
{
    /* a staged rejoiner is taken in on the context and the endpoint here */
    shs_status_t st = shs_progress(sh->ctx);
    if (st == SHS_OK)
        st = shs_progress(sh->io);
    for (int p = 0; p < sh->size && st == SHS_OK; p++) {
        if (p != sh->rank &&
            (shs_ctx_peer_status(sh->ctx, p, NULL) != SHS_OK ||
             shs_ctx_peer_status(sh->io, p, NULL) != SHS_OK ||
             (shs__view_is_dead(&sh->view, p) && shs__ctx_peer_incarnation(sh->ctx, p) == 0))) {
            SHS_ERROR("shs_shadow_finish: peer %d failed or gone (ranks rejoined during the "
                      "run, and this one is not back): the ranks cannot be settled (their "
                      "models stay as they are)", p);
            st = SHS_ERR_PEER_FAILED;
        }
    }
    return st;
}

/* This rank's verdict on settling MA/BMUF replicas: every peer alive, and
 * every write this rank made landed. */
static shs_status_t finish_verdict(shs_shadow_t *sh)
{
    shs_status_t st = shs__ctx_members_changed(sh->ctx) ? connections_alive(sh) : view_alive(sh);
    return st == SHS_OK ? shs_flush(sh->io, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT) : st;
}

/* The ranks' verdicts, gathered among the living over the mesh (in place
 * of a barrier): all settle, or none does and each returns the same
 * reason, so no rank waits in a collective the others left. */
static shs_status_t finish_vote(shs_shadow_t *sh)
{
    int32_t mine = (int32_t)finish_verdict(sh);
    int32_t *all = calloc((size_t)sh->size, sizeof(*all));
    bool *present = calloc((size_t)sh->size, sizeof(*present));
    shs_status_t st = all != NULL && present != NULL ? SHS_OK : SHS_ERR_NO_MEMORY;
    if (st == SHS_OK)
        st = shs__ctx_living_allgather(sh->ctx, &mine, sizeof(mine), all, present);
    for (int p = 0; p < sh->size && st == SHS_OK; p++) {
        if (!present[p]) {
            SHS_ERROR("shs_shadow_finish: rank %d failed or gone before the ranks' vote: not "
                      "settled (the models stay as they are)", p);
            st = SHS_ERR_PEER_FAILED;
        } else if (all[p] != SHS_OK) {
            if (p != sh->rank)
                SHS_ERROR("shs_shadow_finish: rank %d cannot settle (%s): neither does this "
                          "one (the models stay as they are)", p,
                          shs_status_string((shs_status_t)all[p]));
            st = (shs_status_t)all[p];
        }
    }
    free(all);
    free(present);
    return st;
}

/* MA, BMUF: the replicas become their exact mean, so each rank's own model
 * no longer carries the drift since its last round. */
shs_status_t shs__finish_mean(shs_shadow_t *sh)
{
    shs_coll_t *coll = NULL;
    shs_status_t st = finish_vote(sh); /* every rank's rounds are over */
    if (st != SHS_OK)
        return st;
    st = shs__shadow_coll(sh, sh->ctx, &coll);
    if (st == SHS_OK)
        st = shs_allreduce_region(coll, NULL, sh->model, sh->model_off, sh->n,
                                  SHS_DTYPE_FLOAT32, SHS_REDUCE_AVG);
    shs_coll_destroy(coll);
    return st;
}

shs_status_t shs_shadow_finish(shs_shadow_t *sh)
{
    if (sh == NULL)
        return SHS_ERR_INVALID_ARG;
    if (atomic_load(&sh->running)) {
        SHS_ERROR("shs_shadow_finish: refused: the shadow thread runs (shs_shadow_stop first)");
        return SHS_ERR_BAD_STATE;
    }
    if (sh->finished) {
        /* once per engine: the ranks' fences count one finish each */
        SHS_ERROR("shs_shadow_finish: refused: this engine finished already");
        return SHS_ERR_BAD_STATE;
    }
    shs_status_t st;
    if (sh->cfg.algo == SHS_SHADOW_EASGD) {
        st = easgd_members(sh);
        if (st != SHS_OK)
            return st;
        /* every write this rank made has landed (flush); then the owners
         * meet and settle (not with a plain barrier: an EASGD owner must
         * keep serving its inbox while a slower rank ends its rounds) */
        st = shs_flush(sh->io, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
        if (st == SHS_OK)
            st = sh->ops->finish(sh);
    } else {
        st = sh->ops->finish(sh); /* the ranks' vote, then the mean */
    }
    sh->finished = true;
    if (st != SHS_OK)
        shs__shadow_note_error(sh, st);
    return st;
}

/*
 * The shadow engine: published snapshots under a seqlock read with RDMA
 * READ, rounds of MA/BMUF/EASGD over DS-Sync groups, the background thread
 * and the foreground round. Semantics are documented in shadow.h; the
 * update rules live in ma.c, bmuf.c, easgd.c and delta.c.
 *
 * Memory of one engine (n = model elements, g = largest group):
 *   pub      REMOTE_READ   header (stamps, stopped flag) + two snapshot slots
 *   scratch  LOCAL_WRITE   header read-backs + (g - 1) receive chunks
 *   acc      LOCAL_WRITE   n floats: the round's mean / result; EASGD: the
 *                          center as read
 *   EASGD only: center (REMOTE_READ, the owned slice), inbox (REMOTE_WRITE,
 *   two slots per sender), dbuf (the outgoing d, source of the writes).
 *   BMUF only: w_g and D (private memory).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include <shadowsync/collective.h>
#include <shadowsync/rma.h>
#include <shadowsync/shadow.h>

#include "algorithms/rules.h"
#include "runtime/clock.h"
#include "runtime/config.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "transport/services.h"

/* Failed ranks told to peers in the header: the first FAIL_WORDS * 64 ranks
 * (a larger job still detects its failures directly, through the
 * transport). */
#define FAIL_WORDS 10
#define FAIL_GOSSIP_RANKS (FAIL_WORDS * 64)

/* The published header, at offset 0 of the pub region. Written only by the
 * owning rank's engine with plain aligned 8-byte stores; read by peers. */
typedef struct pub_hdr {
    uint64_t seq[2];   /* seqlock of each slot: odd while the slot is written */
    uint64_t round[2]; /* round stamped in each slot (valid when seq is even, > 0) */
    uint64_t stopped;  /* nonzero: this rank's engine is stopped */
    uint64_t checkin;  /* ring path: (round << 1) | leaving, written once per round */
    uint64_t pulling;  /* nonzero: the ring path fell back to the pull path (sticky) */
    uint64_t pad;
    uint64_t failed[FAIL_WORDS]; /* ranks this rank counts as failed (bit p % 64 of word
                                    p / 64), read by peers with the stamps: gossip */
} pub_hdr_t;

#define HDR_BYTES sizeof(pub_hdr_t)
#define PUB_DATA_OFF 4096 /* slots start on their own page */
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

/* EASGD immediates: the engine's channel in the top 8 bits (the
 * collectives use another, rma.h shs_poll_imm_match), a tag, the slot
 * parity in bit 0. */
#define IMM_CHANNEL_SHIFT 24
#define IMM_CHANNEL_MASK 0xff000000u
#define IMM_TAG_SHIFT 16
#define IMM_TAG_DELTA 1u
#define IMM_TAG_ACK 2u
#define EASGD_CREDITS 2 /* inbox slots per sender (double buffering) */

/* Outcome of trying to include a peer in a round. */
enum { PEER_PENDING = 0, PEER_OK = 1, PEER_SKIP = 2 };

struct shs_shadow {
    shs_ctx_t *ctx;
    int rank, size;
    shs_region_t *model;
    size_t model_off; /* bytes */
    size_t n;         /* float32 elements */
    float *w;         /* the live model */

    /* resolved parameters */
    shs_shadow_algorithm_t algo;
    shs_schedule_t sched;
    shs_shadow_path_t path;
    uint32_t min_interval_us;
    char pin[64];
    shs__bmuf_coef_t bmuf;  /* what the rounds use: bmuf_fg or bmuf_bg */
    shs__bmuf_coef_t bmuf_fg, bmuf_bg; /* foreground rounds, the shadow thread */
    float alpha;
    int wait_ms;
    int backoff_us;
    int nap_pct;            /* SHS_SHADOW_NAP: share of a transfer's expected time slept */
    double ns_per_byte;     /* moving average of pulled transfers (0: none measured yet) */
    uint32_t channel; /* EASGD immediates: channel << IMM_CHANNEL_SHIFT */
    int want_channel; /* the knob: -1 = allocated */
    bool channel_taken;
    size_t chunk; /* floats per pulled piece */
    int gmax;

    shs_region_t *pub;
    pub_hdr_t *hdr;
    size_t slot_bytes;
    float *slot[2];
    shs_region_t *scratch;
    uint8_t *scratch_mem;
    size_t recv_off; /* offset of the receive chunks in scratch */
    shs_region_t *acc_reg;
    float *acc;

    /* BMUF */
    float *wg, *D;

    /* ring path */
    shs_coll_t *coll;
    bool leaving; /* a stop was requested: the next check-in says so */
    bool ran_background; /* shs_shadow_start was called: no foreground rounds after */
    bool finished;       /* shs_shadow_finish ran: no rounds after */

    /* EASGD */
    shs_region_t *center_reg, *inbox_reg, *dbuf_reg;
    float *center, *inbox, *dbuf;
    size_t slice_max; /* floats: the longest slice, the stride of the inbox */
    size_t my_off, my_len;
    int *credits;
    unsigned *sent; /* deltas sent to each owner (parity of the next slot) */

    /* per peer */
    uint64_t *published_seen; /* highest round seen published + 1 (0: none) */
    uint64_t *seen_seq;       /* seq of the slot read in this round */
    uint8_t *state;           /* PEER_* in this round */
    bool *warned;             /* a wait timeout was logged for this peer */
    bool *dead;               /* this engine leaves the peer out for good: it failed, or
                                 it ended after stopping (sticky) */
    bool *stopped_seen;       /* the peer's header said "stopped" when last read */
    int *alive;               /* scratch: the living ranks, ascending */
    _Atomic uint64_t *last_read_ns;

    _Atomic uint64_t round;
    int round_peers; /* peers the current round synced with */
    bool poisoned;

    /* failures: the view is the set of ranks left out (dead) */
    int ndead;
    int nfailed;             /* of which failed (not merely ended after stopping) */
    bool self_warned;        /* a peer counts this rank as failed: logged */
    bool ring_off;           /* ring path: fell back to pull for good */
    bool reround;            /* the view or path changed during the round: rerun it */
    bool pull_set;           /* ring path: pull_from is set */
    uint64_t pull_from;      /* first round on the pull path (ring fallback) */
    shs_group_t hist[2];     /* the group of round hist_round[r & 1] */
    uint64_t hist_round[2];
    bool hist_valid[2];

    /* thread */
    pthread_t thread;
    pthread_mutex_t lock; /* only for the interval sleep and stop */
    pthread_cond_t cond;
    atomic_bool stop_req;
    atomic_int running;

    /* stats */
    _Atomic uint64_t st_rounds, st_idle, st_bytes_read, st_bytes_written, st_round_ns_sum,
        st_round_ns_last, st_round_ns_max, st_wait_ns_sum, st_torn, st_skipped, st_errors,
        st_rounds_after_fail, st_first_fail_ns;
    atomic_int st_failed;
    atomic_int st_last_error;
    _Atomic uint64_t run_ns_total, run_start_ns, first_round_ns;
};

#define RELAXED memory_order_relaxed

static void stat_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, RELAXED);
}

static void note_error(shs_shadow_t *sh, shs_status_t st)
{
    stat_add(&sh->st_errors, 1);
    atomic_store_explicit(&sh->st_last_error, (int)st, RELAXED);
}

static size_t hdr_readback_off(int k, int which)
{
    return ((size_t)k * 2 + (size_t)which) * HDR_BYTES;
}

static const pub_hdr_t *hdr_readback(const shs_shadow_t *sh, int k, int which)
{
    return (const pub_hdr_t *)(sh->scratch_mem + hdr_readback_off(k, which));
}

static size_t slot_off(const shs_shadow_t *sh, int s)
{
    return PUB_DATA_OFF + (size_t)s * sh->slot_bytes;
}

/* Highest round a header shows as completely published, plus one (0: none). */
static uint64_t published_plus1(const pub_hdr_t *h)
{
    uint64_t best = 0;
    for (int s = 0; s < 2; s++)
        if (h->seq[s] != 0 && (h->seq[s] & 1) == 0 && h->round[s] + 1 > best)
            best = h->round[s] + 1;
    return best;
}

static bool stop_requested(const shs_shadow_t *sh)
{
    return atomic_load_explicit(&sh->stop_req, memory_order_acquire);
}

/* Sleep between polls of a peer's stamp: nothing for the first two, then
 * doubling from 10 us up to a cap: the SHS_SHADOW_BACKOFF_US knob, or 1/32
 * of the last round's time when that is longer. Every poll is an RDMA READ
 * that costs the device (and, on Soft-RoCE, the CPU) as much as a small
 * transfer: a rank waiting for a slow peer must not flood the link with
 * polls that slow that very peer down, and waiting 3% of a round longer
 * than necessary is cheap. */
static void backoff(const shs_shadow_t *sh, int *step)
{
    if (*step < 2) {
        (*step)++;
        return;
    }
    long cap = sh->backoff_us;
    long adaptive = (long)(atomic_load_explicit(&sh->st_round_ns_last, memory_order_relaxed) /
                           32000u);
    if (adaptive > cap)
        cap = adaptive;
    long us = 10L << (*step - 2 < 16 ? *step - 2 : 16);
    if (us > cap)
        us = cap;
    else
        (*step)++;
    if (us <= 0) {
        sched_yield();
        return;
    }
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ failures */

/*
 * The view. A peer is counted as failed when the transport failed it (an
 * error completion, a wait past SHS_OP_TIMEOUT_MS, an async or rdma_cm
 * event: shs_ctx_peer_status), or when a living peer's published header says
 * so (gossip: every header read carries the sender's failed set, so a
 * failure seen by one rank reaches every rank that syncs with it, directly
 * or through others, within a few rounds). Failure is sticky: a rank once
 * counted as failed is never read again by this engine. Groups are formed
 * over the living ranks (view_group), with the same rule on every rank, so
 * survivors with the same view form the same groups.
 */
static void mark_dead(shs_shadow_t *sh, int p, int via)
{
    if (p == sh->rank || p < 0 || p >= sh->size || sh->dead[p])
        return;
    __atomic_store_n(&sh->dead[p], true, __ATOMIC_RELAXED); /* stats read it */
    sh->ndead++;
    const char *reason = NULL;
    if (via < 0 && sh->stopped_seen[p]) {
        /* it stopped its engine, then went away (its job ended): left
         * out like a failed peer, but not counted or told as one */
        SHS_INFO("shadow: peer %d stopped and then went away (%s); left out from now on", p,
                 shs_ctx_peer_status(sh->ctx, p, &reason) != SHS_OK && reason != NULL
                     ? reason : "no answer");
        return;
    }
    sh->nfailed++;
    if (p < FAIL_GOSSIP_RANKS)
        __atomic_fetch_or(&sh->hdr->failed[p / 64], 1ull << (p % 64), __ATOMIC_RELEASE);
    uint64_t expect = 0;
    atomic_compare_exchange_strong(&sh->st_first_fail_ns, &expect, shs__now_ns());
    atomic_store_explicit(&sh->st_failed, sh->nfailed, RELAXED);
    uint64_t r = atomic_load_explicit(&sh->round, RELAXED);
    if (via >= 0)
        SHS_WARN("shadow: peer %d failed (reported by peer %d); syncing on without it from "
                 "round %llu, groups re-formed over the %d living ranks",
                 p, via, (unsigned long long)r, sh->size - sh->ndead);
    else
        SHS_WARN("shadow: peer %d failed (%s); syncing on without it from round %llu, groups "
                 "re-formed over the %d living ranks",
                 p, shs_ctx_peer_status(sh->ctx, p, &reason) != SHS_OK && reason != NULL
                        ? reason : "no answer",
                 (unsigned long long)r, sh->size - sh->ndead);
}

/* Peers the transport has failed since the last look. */
static void check_failures(shs_shadow_t *sh)
{
    for (int p = 0; p < sh->size; p++)
        if (p != sh->rank && !sh->dead[p] && shs_ctx_peer_status(sh->ctx, p, NULL) != SHS_OK)
            mark_dead(sh, p, -1);
}

/* Take in the failed set (and the ring fallback) of living peer `from`'s
 * header as read. */
static void learn_view(shs_shadow_t *sh, int from, const pub_hdr_t *h)
{
    if (sh->dead[from])
        return;
    for (int w = 0; w < FAIL_WORDS && w * 64 < sh->size; w++) {
        uint64_t bits = h->failed[w];
        while (bits != 0) {
            int b = __builtin_ctzll(bits);
            bits &= bits - 1;
            int p = w * 64 + b;
            if (p == sh->rank) {
                if (!sh->self_warned)
                    SHS_WARN("shadow: peer %d counts this rank as failed (the link between "
                             "them broke?); it will not read this rank again", from);
                sh->self_warned = true;
            } else if (p < sh->size && !sh->dead[p]) {
                mark_dead(sh, p, from);
                sh->reround = true;
            }
        }
    }
    if (h->pulling != 0 && sh->path == SHS_SHADOW_PATH_RING && !sh->ring_off) {
        SHS_WARN("shadow: peer %d left the ring path after a failure; this rank follows it "
                 "onto the pull path", from);
        sh->ring_off = true;
        sh->reround = true;
    }
}

/* The data path of the next round: the ring path's collective cannot be
 * used again after a failure (an abandoned allreduce may still have writes
 * in flight), so after any failure the engine goes on with the pull path,
 * which needs no collective. */
static shs_shadow_path_t eff_path(const shs_shadow_t *sh)
{
    if (sh->path == SHS_SHADOW_PATH_RING && (sh->ring_off || sh->nfailed > 0))
        return SHS_SHADOW_PATH_PULL;
    return sh->path;
}

/* This rank's group in round r: the schedule over the living ranks (their
 * positions in ascending rank order; a hypercube over a count that is not a
 * power of g becomes the general schedule with the same g). Without failures
 * it is the schedule itself. */
static shs_status_t view_group(shs_shadow_t *sh, uint64_t r, shs_group_t *grp)
{
    if (sh->ndead == 0)
        return shs_schedule_group(&sh->sched, sh->size, sh->rank, r, grp);
    int m = 0, me = 0;
    for (int p = 0; p < sh->size; p++) {
        if (sh->dead[p])
            continue;
        if (p == sh->rank)
            me = m;
        sh->alive[m++] = p;
    }
    shs_schedule_t s = sh->sched;
    if (s.kind == SHS_SCHED_HYPERCUBE) {
        int q = 1;
        while (q < m && s.group_size > 1)
            q *= s.group_size;
        if (q != m)
            s.kind = SHS_SCHED_GENERAL;
    }
    shs_group_t g;
    shs_status_t st = shs_schedule_group(&s, m, me, r, &g);
    if (st != SHS_OK)
        return st;
    for (int k = 0; k < g.size; k++)
        g.ranks[k] = sh->alive[g.ranks[k]];
    *grp = g;
    return SHS_OK;
}

/* ------------------------------------------------------------ publishing */

/* Publish the live model as round r's snapshot in slot r mod 2 (seqlock
 * writer). Peers read the slot with RDMA READ; on x86 the device observes
 * these stores in program order, and the fences keep the compiler from
 * moving the data copy across the stamps. */
static void publish(shs_shadow_t *sh, uint64_t r)
{
    int s = (int)(r & 1);
    pub_hdr_t *h = sh->hdr;
    uint64_t seq = h->seq[s];
    __atomic_store_n(&h->seq[s], seq + 1, __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_release);
    memcpy(sh->slot[s], sh->w, sh->n * sizeof(float));
    atomic_thread_fence(memory_order_release);
    __atomic_store_n(&h->round[s], r, __ATOMIC_RELAXED);
    __atomic_store_n(&h->seq[s], seq + 2, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------- reading the stamps */

typedef enum want {
    WANT_SLOT_ROUND, /* the peer's slot r mod 2 holds round r, completely written */
    WANT_PUBLISHED   /* the peer has published round r or later */
} want_t;

/*
 * Poll the published headers of the peers (indexes into grp->ranks) whose
 * state is PEER_PENDING until each satisfies `want` for round r, stopped, or
 * the wait bound passes. Peers that satisfy it become PEER_OK, the others
 * PEER_SKIP. Returns SHS_ERR_CANCELED when a stop was requested (and
 * cancellable), else the first error seen (SHS_OK when every peer answered).
 */
static shs_status_t wait_headers(shs_shadow_t *sh, const shs_group_t *grp, want_t want,
                                 uint64_t r, bool cancellable)
{
    int s = (int)(r & 1);
    shs_status_t result = SHS_OK;
    uint64_t t0 = shs__now_ns();
    shs__deadline_t dl = shs__deadline_in_ms(sh->wait_ms);
    int step = 0;

    for (;;) {
        int pending = 0;
        for (int k = 0; k < grp->size; k++) {
            int p = grp->ranks[k];
            if (sh->state[p] != PEER_PENDING)
                continue;
            shs_status_t st = shs_read(sh->ctx, p, sh->scratch, hdr_readback_off(k, 0),
                                       sh->pub, 0, HDR_BYTES, SHS_OP_SIGNAL);
            if (st != SHS_OK) {
                sh->state[p] = PEER_SKIP;
                result = result == SHS_OK ? st : result;
                continue;
            }
            pending++;
        }
        for (int k = 0; k < grp->size; k++) {
            int p = grp->ranks[k];
            if (sh->state[p] != PEER_PENDING)
                continue;
            shs_status_t st = shs_flush(sh->ctx, p, SHS_TIMEOUT_DEFAULT);
            if (st != SHS_OK) {
                sh->state[p] = PEER_SKIP;
                result = result == SHS_OK ? st : result;
                pending--;
                continue;
            }
            stat_add(&sh->st_bytes_read, HDR_BYTES);
            const pub_hdr_t *h = hdr_readback(sh, k, 0);
            learn_view(sh, p, h);
            sh->stopped_seen[p] = h->stopped != 0;
            uint64_t pub1 = published_plus1(h);
            if (pub1 > sh->published_seen[p])
                sh->published_seen[p] = pub1;
            bool ok = want == WANT_PUBLISHED
                          ? pub1 >= r + 1
                          : (h->seq[s] != 0 && (h->seq[s] & 1) == 0 && h->round[s] == r);
            if (ok) {
                sh->state[p] = PEER_OK;
                sh->seen_seq[p] = h->seq[s];
                pending--;
            } else if (h->stopped != 0) {
                sh->state[p] = PEER_SKIP;
                stat_add(&sh->st_skipped, 1);
                pending--;
            } else if (want == WANT_SLOT_ROUND && (h->seq[s] & 1) == 0 && h->round[s] > r &&
                       h->seq[s] != 0 && (sh->ndead > 0 || sh->pull_set)) {
                /* after a failure the ranks' views (and so their groups)
                 * may differ for a few rounds: the peer ran ahead under
                 * its own view; it is skipped this round, not an error */
                sh->state[p] = PEER_SKIP;
                stat_add(&sh->st_skipped, 1);
                pending--;
            } else if (want == WANT_SLOT_ROUND && (h->seq[s] & 1) == 0 && h->round[s] > r &&
                       h->seq[s] != 0) {
                SHS_ERROR("shadow round %llu: peer %d already published round %llu in the "
                          "same slot: the ranks disagree on the schedule",
                          (unsigned long long)r, p, (unsigned long long)h->round[s]);
                sh->state[p] = PEER_SKIP;
                result = result == SHS_OK ? SHS_ERR_PROTOCOL : result;
                pending--;
            }
        }
        if (pending == 0)
            break;
        if (cancellable && stop_requested(sh)) {
            result = SHS_ERR_CANCELED;
            break;
        }
        if (shs__deadline_passed(dl)) {
            for (int k = 0; k < grp->size; k++) {
                int p = grp->ranks[k];
                if (sh->state[p] != PEER_PENDING)
                    continue;
                sh->state[p] = PEER_SKIP;
                stat_add(&sh->st_skipped, 1);
                if (!sh->warned[p])
                    SHS_WARN("shadow round %llu: peer %d did not %s within %d ms; going on "
                             "without it (SHS_SHADOW_WAIT_MS)",
                             (unsigned long long)r, p,
                             want == WANT_PUBLISHED ? "finish its previous round"
                                                    : "publish its snapshot",
                             sh->wait_ms);
                sh->warned[p] = true;
            }
            result = result == SHS_OK ? SHS_ERR_TIMEOUT : result;
            break;
        }
        backoff(sh, &step);
    }
    stat_add(&sh->st_wait_ns_sum, shs__now_ns() - t0);
    return result;
}

/* Mark every member of grp but this rank PEER_PENDING (self: PEER_OK). */
static void reset_states(shs_shadow_t *sh, const shs_group_t *grp)
{
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        sh->state[p] = p == sh->rank ? PEER_OK : sh->dead[p] ? PEER_SKIP : PEER_PENDING;
    }
}

/* Before slot r mod 2 is overwritten with round r: every member of the round
 * r - 2 group has finished round r - 2 (it has published round r - 1), so no
 * one still reads the old contents. Members already seen that far cost
 * nothing (with SHS_SCHED_ALL that is everyone). */
static shs_status_t guard_slot(shs_shadow_t *sh, uint64_t r)
{
    shs_group_t old;
    if (r < 2 || r - 2 < sh->pull_from)
        return SHS_OK; /* no snapshot of round r - 2 was published on this path */
    /* the group this rank used in round r - 2 (its view may have changed) */
    if (sh->hist_valid[r & 1] && sh->hist_round[r & 1] == r - 2) {
        old = sh->hist[r & 1];
    } else {
        shs_status_t st = view_group(sh, r - 2, &old);
        if (st != SHS_OK)
            return st;
    }
    bool any = false;
    for (int k = 0; k < old.size; k++) {
        int p = old.ranks[k];
        if (sh->dead[p]) {
            sh->state[p] = PEER_SKIP;
        } else if (p == sh->rank || sh->published_seen[p] >= r) {
            sh->state[p] = PEER_OK;
        } else {
            sh->state[p] = PEER_PENDING;
            any = true;
        }
    }
    return any ? wait_headers(sh, &old, WANT_PUBLISHED, r - 1, true) : SHS_OK;
}

/* ------------------------------------------------------------ the mean */

/*
 * Waiting for a pulled piece without burning the CPU. The device (a software
 * one under emulation, or a NIC) moves the bytes; a shadow thread that spins
 * in the flush meanwhile takes CPU time from the Hogwild workers (and, on
 * Soft-RoCE, from the kernel threads that move the data). So the engine
 * sleeps for SHS_SHADOW_NAP percent of the time the transfer is expected to
 * take (a moving average of the observed time per byte), then flushes, which
 * polls only for the rest.
 */
static void nap(const shs_shadow_t *sh, size_t bytes)
{
    if (sh->nap_pct <= 0 || sh->ns_per_byte <= 0 || bytes == 0)
        return;
    double ns = sh->ns_per_byte * (double)bytes * sh->nap_pct / 100.0;
    if (ns < 20e3) /* below the sleep granularity: not worth a system call */
        return;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1e9), .tv_nsec = (long)fmod(ns, 1e9)};
    nanosleep(&ts, NULL);
}

static void learn_rate(shs_shadow_t *sh, size_t bytes, uint64_t ns)
{
    if (bytes == 0)
        return;
    double x = (double)ns / (double)bytes;
    sh->ns_per_byte = sh->ns_per_byte <= 0 ? x : 0.75 * sh->ns_per_byte + 0.25 * x;
}

/* Index of member k's receive chunk (the own rank has none). */
static int recv_index(const shs_group_t *grp, int k)
{
    return k < grp->index ? k : k - 1;
}

static float *recv_chunk(shs_shadow_t *sh, int j)
{
    return (float *)(sh->scratch_mem + sh->recv_off + (size_t)j * sh->chunk * sizeof(float));
}

/*
 * acc = mean of the snapshots of the group's members whose state is PEER_OK,
 * summed in ascending rank order, piece by piece: for each piece, the reads
 * of every member are posted together, then added in order as each
 * member's read completes. `src_reg`/`src_off` name what is read on the
 * peers (the round's slot, or the live model); `own` is this rank's
 * snapshot. A peer whose read fails is marked PEER_SKIP and the caller
 * starts over without it (earlier pieces already include it).
 */
static shs_status_t pull_mean(shs_shadow_t *sh, const shs_group_t *grp, shs_region_t *src_reg,
                              size_t src_off, const float *own, int *members_p)
{
    int m = 0;
    for (int k = 0; k < grp->size; k++)
        m += sh->state[grp->ranks[k]] == PEER_OK;
    const float scale = 1.0f / (float)m;

    for (size_t c0 = 0; c0 < sh->n; c0 += sh->chunk) {
        size_t len = sh->n - c0 < sh->chunk ? sh->n - c0 : sh->chunk;
        for (int k = 0; k < grp->size; k++) {
            int p = grp->ranks[k];
            if (p == sh->rank || sh->state[p] != PEER_OK)
                continue;
            size_t loc = sh->recv_off + (size_t)recv_index(grp, k) * sh->chunk * sizeof(float);
            shs_status_t st = shs_read(sh->ctx, p, sh->scratch, loc, src_reg,
                                       src_off + c0 * sizeof(float), len * sizeof(float),
                                       SHS_OP_SIGNAL);
            if (st != SHS_OK) {
                sh->state[p] = PEER_SKIP;
                return st;
            }
        }
        uint64_t t_post = shs__now_ns();
        size_t bytes = (size_t)(m - 1) * len * sizeof(float);
        nap(sh, bytes);
        float *acc = sh->acc + c0;
        bool first = true;
        for (int k = 0; k < grp->size; k++) {
            int p = grp->ranks[k];
            const float *x;
            if (p == sh->rank) {
                x = own + c0;
            } else if (sh->state[p] == PEER_OK) {
                shs_status_t st = shs_flush(sh->ctx, p, SHS_TIMEOUT_DEFAULT);
                if (st != SHS_OK) {
                    sh->state[p] = PEER_SKIP;
                    return st;
                }
                stat_add(&sh->st_bytes_read, len * sizeof(float));
                x = recv_chunk(sh, recv_index(grp, k));
            } else {
                continue;
            }
            if (first)
                memcpy(acc, x, len * sizeof(float));
            else
                shs__vec_add(acc, x, len);
            first = false;
        }
        shs__vec_scale(acc, scale, len);
        learn_rate(sh, bytes, shs__now_ns() - t_post);
    }
    *members_p = m;
    return SHS_OK;
}

/* Seqlock reader's second stamp: the slots read in this round still hold
 * the same write of round r. A peer whose stamp moved is reset to pending
 * (the caller retries); returns whether every read was clean. */
static bool verify_stamps(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r,
                          shs_status_t *err)
{
    int s = (int)(r & 1);
    bool clean = true;
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (p == sh->rank || sh->state[p] != PEER_OK)
            continue;
        shs_status_t st = shs_read(sh->ctx, p, sh->scratch, hdr_readback_off(k, 1), sh->pub, 0,
                                   HDR_BYTES, SHS_OP_SIGNAL);
        if (st == SHS_OK)
            st = shs_flush(sh->ctx, p, SHS_TIMEOUT_DEFAULT);
        if (st != SHS_OK) {
            sh->state[p] = PEER_SKIP;
            *err = *err == SHS_OK ? st : *err;
            clean = false;
            continue;
        }
        stat_add(&sh->st_bytes_read, HDR_BYTES);
        const pub_hdr_t *h = hdr_readback(sh, k, 1);
        learn_view(sh, p, h);
        if (h->seq[s] != sh->seen_seq[p] || h->round[s] != r) {
            stat_add(&sh->st_torn, 1);
            sh->state[p] = PEER_PENDING;
            clean = false;
        }
    }
    return clean;
}

/* Record the peers this round synced with (their staleness restarts). */
static void mark_read(shs_shadow_t *sh, const shs_group_t *grp)
{
    uint64_t now = shs__now_ns();
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (p != sh->rank && sh->state[p] == PEER_OK) {
            atomic_store_explicit(&sh->last_read_ns[p], now, RELAXED);
            sh->round_peers++;
        }
    }
}

/* ----------------------------------------------------------- MA / BMUF */

static void apply_result(shs_shadow_t *sh, const float *snap)
{
    if (sh->algo == SHS_SHADOW_BMUF)
        shs__bmuf_step(sh->wg, sh->D, sh->acc, sh->acc, sh->n, &sh->bmuf);
    shs__delta_apply(sh->w, sh->acc, snap, sh->n);
}

/* Members still PEER_OK (but this rank) are read again. */
static void reread_ok(shs_shadow_t *sh, const shs_group_t *grp)
{
    for (int k = 0; k < grp->size; k++)
        if (grp->ranks[k] != sh->rank && sh->state[grp->ranks[k]] == PEER_OK)
            sh->state[grp->ranks[k]] = PEER_PENDING;
}

static shs_status_t first_error(shs_status_t a, shs_status_t b)
{
    return a != SHS_OK ? a : b;
}

static shs_status_t round_pull(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp)
{
    int s = (int)(r & 1);
    shs_status_t err = guard_slot(sh, r);
    if (err == SHS_ERR_CANCELED)
        return err;
    publish(sh, r);
    if (grp->size == 1)
        return err;

    /* each pass waits for the stamps, reads, and checks the stamps again; a
     * pass that saw a torn or failed read starts over with the members that
     * are still good, within one wait bound for the whole round. A stop
     * request does not cancel a published round: the members read this
     * rank's round-r snapshot and move towards it, so this rank must move
     * too (a rank that stopped here without applying broke the sum; its
     * peers are alive or marked stopped, so the round ends within a round's
     * time or the wait bound) */
    shs__deadline_t dl = shs__deadline_in_ms(sh->wait_ms);
    reset_states(sh, grp);
    for (;;) {
        shs_status_t st = wait_headers(sh, grp, WANT_SLOT_ROUND, r, false);
        err = first_error(err, st);
        int members = 0;
        st = pull_mean(sh, grp, sh->pub, slot_off(sh, s), sh->slot[s], &members);
        if (st == SHS_OK && verify_stamps(sh, grp, r, &err))
            break;
        err = first_error(err, st);
        if (shs__deadline_passed(dl))
            return first_error(err, SHS_ERR_TIMEOUT); /* the round changes nothing */
        reread_ok(sh, grp);
    }
    mark_read(sh, grp);
    apply_result(sh, sh->slot[s]);
    return err;
}

static shs_status_t round_live(shs_shadow_t *sh, const shs_group_t *grp)
{
    shs_status_t err = SHS_OK;
    memcpy(sh->slot[0], sh->w, sh->n * sizeof(float));
    if (grp->size == 1)
        return SHS_OK;
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        sh->state[p] = p == sh->rank || (!sh->dead[p] &&
                                         shs_ctx_peer_status(sh->ctx, p, NULL) == SHS_OK)
                           ? PEER_OK
                           : PEER_SKIP;
    }
    /* a failed peer is dropped (PEER_SKIP) and the mean computed again */
    int members = 0;
    shs_status_t st;
    while ((st = pull_mean(sh, grp, sh->model, sh->model_off, sh->slot[0], &members)) != SHS_OK)
        err = first_error(err, st);
    mark_read(sh, grp);
    apply_result(sh, sh->slot[0]);
    return err;
}

/* -------------------------------------------------------------- ring */

/*
 * Ring path. The allreduce is collective inside the group, so a member that
 * stops must not leave the others waiting in it. Each round starts with a
 * check-in: every member writes (r << 1) | leaving into its header once,
 * then reads the others' check-ins until each shows round r or later (it
 * checked in), or an earlier round with the leaving bit (it left). The
 * members that checked in for r without the bit form the round's ring; a
 * member that set the bit takes no part and its thread ends. Every member
 * reads the same once-written words, so all agree on the ring.
 */
static shs_status_t ring_checkin(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp,
                                 shs_group_t *ring)
{
    __atomic_store_n(&sh->hdr->checkin, r << 1 | (sh->leaving ? 1u : 0u), __ATOMIC_RELEASE);
    if (sh->leaving)
        return SHS_ERR_CANCELED; /* the others read the word when they get here */
    shs_status_t err = SHS_OK;
    shs__deadline_t dl = shs__deadline_in_ms(sh->wait_ms);
    uint64_t t0 = shs__now_ns();
    int step = 0;
    reset_states(sh, grp);
    for (;;) {
        int pending = 0;
        for (int k = 0; k < grp->size; k++) {
            int p = grp->ranks[k];
            if (sh->state[p] != PEER_PENDING)
                continue;
            shs_status_t st = shs_read(sh->ctx, p, sh->scratch, hdr_readback_off(k, 0),
                                       sh->pub, 0, HDR_BYTES, SHS_OP_SIGNAL);
            if (st == SHS_OK)
                st = shs_flush(sh->ctx, p, SHS_TIMEOUT_DEFAULT);
            if (st != SHS_OK) {
                sh->state[p] = PEER_SKIP;
                err = first_error(err, st);
                continue;
            }
            stat_add(&sh->st_bytes_read, HDR_BYTES);
            learn_view(sh, p, hdr_readback(sh, k, 0));
            sh->stopped_seen[p] = (hdr_readback(sh, k, 0)->checkin & 1u) != 0;
            if (eff_path(sh) != SHS_SHADOW_PATH_RING)
                return SHS_OK; /* reround is set: the round runs again on the pull path */
            uint64_t w = hdr_readback(sh, k, 0)->checkin;
            uint64_t wr = w >> 1;
            bool left = (w & 1u) != 0;
            if (wr > r || (wr == r && !left))
                sh->state[p] = PEER_OK;
            else if (left)
                sh->state[p] = PEER_SKIP; /* left at round r or before */
            else
                pending++;
        }
        /* no early exit on a stop request: members that read this rank's
         * plain check-in count on it in the allreduce; it leaves next round */
        if (pending == 0)
            break;
        if (shs__deadline_passed(dl)) {
            for (int k = 0; k < grp->size; k++)
                if (sh->state[grp->ranks[k]] == PEER_PENDING) {
                    int p = grp->ranks[k];
                    if (!sh->warned[p])
                        SHS_WARN("shadow round %llu: peer %d did not check in within %d ms; "
                                 "the ring goes on without it (SHS_SHADOW_WAIT_MS)",
                                 (unsigned long long)r, p, sh->wait_ms);
                    sh->warned[p] = true;
                    sh->state[p] = PEER_SKIP;
                    stat_add(&sh->st_skipped, 1);
                }
            err = first_error(err, SHS_ERR_TIMEOUT);
            break;
        }
        backoff(sh, &step);
    }
    stat_add(&sh->st_wait_ns_sum, shs__now_ns() - t0);
    ring->size = 0;
    ring->index = -1;
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (sh->state[p] != PEER_OK)
            continue;
        if (p == sh->rank)
            ring->index = ring->size;
        ring->ranks[ring->size++] = p;
    }
    return err;
}

static shs_status_t round_ring(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp)
{
    shs_group_t ring;
    if (grp->size == 1)
        return SHS_OK;
    shs_status_t err = ring_checkin(sh, r, grp, &ring);
    if (err == SHS_ERR_CANCELED || sh->reround)
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
         * header, so the group's other members follow); a protocol error
         * here is the members' disagreement on the ring after a failure,
         * not a reason to stop the engine */
        SHS_WARN("shadow round %llu: the ring allreduce failed (%s); this rank goes on with "
                 "the pull path", (unsigned long long)r, shs_status_string(st));
        sh->ring_off = true;
        __atomic_store_n(&sh->hdr->pulling, 1, __ATOMIC_RELEASE);
        return first_error(err, st == SHS_ERR_PROTOCOL ? SHS_ERR_PEER_FAILED : st);
    }
    for (int k = 0; k < ring.size; k++)
        if (ring.ranks[k] != sh->rank)
            stat_add(&sh->st_bytes_read, 2 * sh->n * sizeof(float) / (size_t)ring.size);
    mark_read(sh, &ring);
    apply_result(sh, snap);
    return err;
}

/* ---------------------------------------------------------------- EASGD */

static uint32_t imm_make(const shs_shadow_t *sh, uint32_t tag, unsigned parity)
{
    return sh->channel | tag << IMM_TAG_SHIFT | (parity & 1u);
}

static size_t inbox_off(const shs_shadow_t *sh, int sender, unsigned parity)
{
    return ((size_t)sender * EASGD_CREDITS + (parity & 1u)) * sh->slice_max * sizeof(float);
}

/* Take every pending immediate: apply received deltas to the owned center
 * slice (c += d) and acknowledge them (unless the job is ending: then the
 * senders' inboxes may be gone); count returned credits. */
static shs_status_t service_inbox(shs_shadow_t *sh, bool ack)
{
    for (;;) {
        int from = -1;
        uint32_t imm = 0;
        shs_status_t st = shs_poll_imm_match(sh->ctx, SHS_PEER_ANY, IMM_CHANNEL_MASK,
                                             sh->channel, &from, &imm);
        if (st == SHS_ERR_TIMEOUT)
            return SHS_OK;
        if (st == SHS_ERR_PEER_FAILED)
            return SHS_OK; /* every peer gone: nothing more will arrive */
        if (st != SHS_OK)
            return st;
        uint32_t tag = (imm & ~IMM_CHANNEL_MASK) >> IMM_TAG_SHIFT;
        if (tag == IMM_TAG_DELTA) {
            const float *d = sh->inbox + inbox_off(sh, from, imm & 1u) / sizeof(float);
            shs__easgd_center_apply(sh->center, d, sh->my_len);
            if (!ack)
                continue;
            st = shs_write_imm(sh->ctx, from, sh->pub, 0, sh->inbox_reg, 0, 0,
                               imm_make(sh, IMM_TAG_ACK, 0), 0);
            if (st != SHS_OK)
                note_error(sh, st);
        } else if (tag == IMM_TAG_ACK) {
            sh->credits[from]++;
        } else {
            SHS_ERROR("shadow: unexpected immediate 0x%x from peer %d on the engine's channel "
                      "(SHS_SHADOW_CHANNEL shared with another user of the context?)",
                      imm, from);
            return SHS_ERR_PROTOCOL;
        }
    }
}

/* Wait for an inbox credit at owner o, applying incoming deltas meanwhile
 * (two owners waiting on each other both make progress). Gives up when the
 * owner stopped (SHS_OK with *stopped_p set: not an error) or the wait bound
 * passes. */
static shs_status_t wait_credit(shs_shadow_t *sh, int o, bool *stopped_p)
{
    *stopped_p = false;
    shs__deadline_t dl = shs__deadline_in_ms(sh->wait_ms);
    int step = 0;
    uint64_t t0 = shs__now_ns();
    shs_status_t st = SHS_OK;
    while (sh->credits[o] == 0) {
        st = service_inbox(sh, true);
        if (st != SHS_OK || sh->credits[o] > 0)
            break;
        if (stop_requested(sh)) {
            st = SHS_ERR_CANCELED;
            break;
        }
        if (shs_ctx_peer_status(sh->ctx, o, NULL) != SHS_OK) {
            st = SHS_ERR_PEER_FAILED;
            break;
        }
        if (step > 4) { /* a stopped owner acknowledges nothing */
            st = shs_read(sh->ctx, o, sh->scratch, 0, sh->pub, 0, HDR_BYTES, SHS_OP_SIGNAL);
            if (st == SHS_OK)
                st = shs_flush(sh->ctx, o, SHS_TIMEOUT_DEFAULT);
            if (st != SHS_OK)
                break;
            if (((const pub_hdr_t *)sh->scratch_mem)->stopped != 0) {
                stat_add(&sh->st_skipped, 1);
                *stopped_p = true;
                break;
            }
        }
        if (shs__deadline_passed(dl)) {
            if (!sh->warned[o])
                SHS_WARN("shadow: owner %d returned no inbox credit within %d ms; its "
                         "center slice is skipped (SHS_SHADOW_WAIT_MS)",
                         o, sh->wait_ms);
            sh->warned[o] = true;
            st = SHS_ERR_TIMEOUT;
            break;
        }
        backoff(sh, &step);
    }
    stat_add(&sh->st_wait_ns_sum, shs__now_ns() - t0);
    return st;
}

static shs_status_t round_easgd(shs_shadow_t *sh, const shs_group_t *grp)
{
    shs_status_t err = service_inbox(sh, true);
    float *snap = sh->slot[0];
    memcpy(snap, sh->w, sh->n * sizeof(float));

    /* read the center slices of the group's owners into acc */
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        size_t off, len;
        shs__easgd_slice(sh->n, sh->size, o, &off, &len);
        sh->state[o] = sh->dead[o] ? PEER_SKIP : PEER_OK;
        if (sh->dead[o])
            continue;
        if (o == sh->rank) {
            memcpy(sh->acc + off, sh->center, len * sizeof(float));
            continue;
        }
        shs_status_t st = shs_read(sh->ctx, o, sh->acc_reg, off * sizeof(float),
                                   sh->center_reg, 0, len * sizeof(float), SHS_OP_SIGNAL);
        if (st != SHS_OK) {
            sh->state[o] = PEER_SKIP;
            err = err == SHS_OK ? st : err;
        }
    }
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o == sh->rank || sh->state[o] != PEER_OK)
            continue;
        shs_status_t st = shs_flush(sh->ctx, o, SHS_TIMEOUT_DEFAULT);
        if (st != SHS_OK) {
            sh->state[o] = PEER_SKIP;
            err = err == SHS_OK ? st : err;
            continue;
        }
        size_t off, len;
        shs__easgd_slice(sh->n, sh->size, o, &off, &len);
        stat_add(&sh->st_bytes_read, len * sizeof(float));
    }
    mark_read(sh, grp);

    /* d = alpha (snapshot - c); send each slice to its owner; move w by -d
     * only for the slices whose owner will apply +d */
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (sh->state[o] != PEER_OK)
            continue;
        size_t off, len;
        shs__easgd_slice(sh->n, sh->size, o, &off, &len);
        shs__easgd_diff(sh->dbuf + off, snap + off, sh->acc + off, sh->alpha, len);
        if (o == sh->rank) {
            shs__easgd_center_apply(sh->center, sh->dbuf + off, len);
            shs__delta_apply_sub(sh->w + off, sh->dbuf + off, len);
            continue;
        }
        bool stopped;
        shs_status_t st = wait_credit(sh, o, &stopped);
        if (st == SHS_ERR_CANCELED)
            return st;
        if (st == SHS_OK && stopped)
            continue;
        if (st == SHS_OK) {
            unsigned parity = sh->sent[o] & 1u;
            st = shs_write_imm(sh->ctx, o, sh->dbuf_reg, off * sizeof(float), sh->inbox_reg,
                               inbox_off(sh, sh->rank, parity), len * sizeof(float),
                               imm_make(sh, IMM_TAG_DELTA, parity), SHS_OP_SIGNAL);
        }
        if (st != SHS_OK) {
            err = err == SHS_OK ? st : err;
            continue;
        }
        sh->credits[o]--;
        sh->sent[o]++;
        stat_add(&sh->st_bytes_written, len * sizeof(float));
        shs__delta_apply_sub(sh->w + off, sh->dbuf + off, len);
    }
    /* dbuf is rewritten next round: its writes must have left */
    for (int k = 0; k < grp->size; k++) {
        int o = grp->ranks[k];
        if (o != sh->rank && sh->state[o] == PEER_OK) {
            shs_status_t st = shs_flush(sh->ctx, o, SHS_TIMEOUT_DEFAULT);
            err = err == SHS_OK ? st : err;
        }
    }
    shs_status_t st = service_inbox(sh, true);
    return first_error(err, st);
}

/* ------------------------------------------------------------ one round */

static bool fatal(shs_status_t st)
{
    return st == SHS_ERR_DEVICE || st == SHS_ERR_PROTOCOL;
}

static shs_status_t run_round(shs_shadow_t *sh)
{
    uint64_t r = atomic_load_explicit(&sh->round, RELAXED);
    uint64_t t0 = shs__now_ns();
    shs_group_t grp;
    shs_status_t st;
    if (sh->first_round_ns == 0)
        atomic_store_explicit(&sh->first_round_ns, t0, RELAXED);
    int nfailed0 = sh->nfailed;
    /* a round runs at most twice: again when it learned of a failure (or
     * of the ring fallback) from a peer before it changed anything */
    for (int attempt = 0;; attempt++) {
        check_failures(sh);
        st = view_group(sh, r, &grp);
        if (st != SHS_OK)
            return st;
        sh->round_peers = 0;
        sh->reround = false;
        shs_shadow_path_t path = eff_path(sh);
        if (path == SHS_SHADOW_PATH_PULL && sh->path == SHS_SHADOW_PATH_RING &&
            !sh->pull_set) {
            sh->pull_set = true;
            sh->pull_from = r;
            __atomic_store_n(&sh->hdr->pulling, 1, __ATOMIC_RELEASE);
        }
        if (sh->algo == SHS_SHADOW_EASGD)
            st = round_easgd(sh, &grp);
        else if (path == SHS_SHADOW_PATH_LIVE)
            st = round_live(sh, &grp);
        else if (path == SHS_SHADOW_PATH_RING)
            st = round_ring(sh, r, &grp);
        else
            st = round_pull(sh, r, &grp);
        if (st == SHS_ERR_CANCELED) {
            check_failures(sh); /* a stop must not hide a failure seen meanwhile */
            return st;
        }
        if (!(sh->reround && path == SHS_SHADOW_PATH_RING && eff_path(sh) != path) ||
            attempt > 0)
            break;
    }
    check_failures(sh);
    sh->hist[r & 1] = grp;
    sh->hist_round[r & 1] = r;
    sh->hist_valid[r & 1] = true;
    /* the round in which this rank saw a failure reports it (foreground
     * callers see SHS_ERR_PEER_FAILED once); the round itself used the
     * members it could read */
    if (sh->nfailed > nfailed0 && st == SHS_OK)
        st = SHS_ERR_PEER_FAILED;

    uint64_t dt = shs__now_ns() - t0;
    atomic_store_explicit(&sh->round, r + 1, RELAXED);
    if (sh->round_peers == 0) {
        /* every peer of the group was stopped or skipped, the group was this
         * rank alone (a one-rank job, a schedule's singleton, or the
         * re-formed group after a failure): not a sync */
        stat_add(&sh->st_idle, 1);
        if (st != SHS_OK)
            note_error(sh, st);
        return st;
    }
    stat_add(&sh->st_rounds, 1);
    if (sh->nfailed > 0)
        stat_add(&sh->st_rounds_after_fail, 1);
    stat_add(&sh->st_round_ns_sum, dt);
    atomic_store_explicit(&sh->st_round_ns_last, dt, RELAXED);
    if (dt > atomic_load_explicit(&sh->st_round_ns_max, RELAXED))
        atomic_store_explicit(&sh->st_round_ns_max, dt, RELAXED);
    if (st != SHS_OK)
        note_error(sh, st);
    if (fatal(st))
        sh->poisoned = true;
    return st;
}

/* -------------------------------------------------------------- thread */

static void pin_self(const shs_shadow_t *sh)
{
    char cpus[64];
    if (strcmp(sh->pin, "none") == 0)
        return;
    if (strcmp(sh->pin, "auto") == 0) {
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
        snprintf(cpus, sizeof(cpus), "%s", sh->pin);
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
 * workers that read them. Values below FLT_MIN (1.2e-38) become 0 instead.
 * (It did not cure the slow S-BMUF workers seen under TCG, 2026-12-03: that
 * cause is still open.) */
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

static void *shadow_main(void *arg)
{
    shs_shadow_t *sh = arg;
    shs__ctx_adopt(sh->ctx); /* lent by shs_shadow_start until the join */
    pin_self(sh);
    (void)ftz_enter(); /* this thread's own state: nothing to restore */
    sh->bmuf = sh->bmuf_bg; /* S-BMUF's defaults (shadow.h) */
    for (;;) {
        if (stop_requested(sh)) {
            if (eff_path(sh) != SHS_SHADOW_PATH_RING || sh->leaving)
                break;
            /* ring: one more check-in, with the leaving bit, so that the
             * group's members leave this rank out instead of waiting */
            sh->leaving = true;
        }
        uint64_t t0 = shs__now_ns();
        shs_status_t st = run_round(sh);
        if (st == SHS_ERR_CANCELED) {
            if (eff_path(sh) == SHS_SHADOW_PATH_RING && !sh->leaving)
                continue;
            break;
        }
        if (sh->poisoned) {
            SHS_ERROR("shadow: stopping the shadow thread after %s",
                      shs_status_string(st));
            break;
        }
        if (sh->size - sh->ndead <= 1) {
            /* nobody left to sync with, ever (a one-rank job, or every peer
             * failed or ended): sleep until the stop instead of spinning */
            pthread_mutex_lock(&sh->lock);
            while (!stop_requested(sh))
                pthread_cond_wait(&sh->cond, &sh->lock);
            pthread_mutex_unlock(&sh->lock);
            continue;
        }
        if (sh->round_peers == 0) {
            int step = 64; /* nobody to sync with now: poll at the backoff cap */
            backoff(sh, &step);
        }
        if (sh->min_interval_us == 0)
            continue;
        uint64_t until = t0 + (uint64_t)sh->min_interval_us * 1000u;
        if (shs__now_ns() >= until)
            continue;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                              .tv_nsec = (long)(until % 1000000000u)};
        pthread_mutex_lock(&sh->lock);
        while (!stop_requested(sh) &&
               pthread_cond_timedwait(&sh->cond, &sh->lock, &ts) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&sh->lock);
    }
    if (sh->algo == SHS_SHADOW_EASGD)
        (void)service_inbox(sh, true);
    check_failures(sh);
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
    if (shs__ctx_lend(sh->ctx, "a shadow engine's thread") != SHS_OK)
        return SHS_ERR_BAD_STATE; /* another engine's thread runs on this context (logged) */
    sh->ran_background = true;
    atomic_store(&sh->stop_req, false);
    __atomic_store_n(&sh->hdr->stopped, 0, __ATOMIC_RELEASE);
    atomic_store(&sh->run_start_ns, shs__now_ns());
    atomic_store(&sh->running, 1);
    int rc = pthread_create(&sh->thread, NULL, shadow_main, sh);
    if (rc != 0) {
        atomic_store(&sh->running, 0);
        shs__ctx_reclaim(sh->ctx);
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
    shs__ctx_reclaim(sh->ctx);
    atomic_store_explicit(&sh->stop_req, false, memory_order_release);
    stat_add(&sh->run_ns_total, shs__now_ns() - atomic_load(&sh->run_start_ns));
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
    sh->bmuf = sh->bmuf_fg; /* FR-BMUF's defaults */
    shs_status_t st = run_round(sh);
    ftz_leave(csr);
    return st;
}

/* --------------------------------------------------------------- finish */

shs_status_t shs_shadow_finish(shs_shadow_t *sh)
{
    if (sh == NULL)
        return SHS_ERR_INVALID_ARG;
    if (atomic_load(&sh->running)) {
        SHS_ERROR("shs_shadow_finish: refused: the shadow thread runs (shs_shadow_stop first)");
        return SHS_ERR_BAD_STATE;
    }
    if (sh->ndead > 0) {
        SHS_ERROR("shs_shadow_finish: %d peer(s) failed or gone: the ranks cannot be settled "
                  "(their models stay as they are)", sh->ndead);
        return SHS_ERR_PEER_FAILED;
    }
    /* every delta this rank sent has landed at its owner (flush), and so has
     * every rank's (barrier); then each owner applies what its inbox holds
     * and acknowledges it; the second barrier lets the acknowledgements land
     * before the credits are counted */
    shs_status_t st = shs_flush(sh->ctx, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
    if (st == SHS_OK)
        st = shs_ctx_barrier(sh->ctx);
    if (st == SHS_OK && sh->algo == SHS_SHADOW_EASGD) {
        st = service_inbox(sh, true);
        if (st == SHS_OK)
            st = shs_flush(sh->ctx, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
        if (st == SHS_OK)
            st = shs_ctx_barrier(sh->ctx);
        /* the acknowledgements of this rank's deltas: all credits back
         * means every delta it sent was applied */
        shs__deadline_t dl = shs__deadline_in_ms(sh->wait_ms);
        for (int p = 0; st == SHS_OK && p < sh->size; p++) {
            int step = 0;
            while (p != sh->rank && sh->credits[p] < EASGD_CREDITS && st == SHS_OK) {
                st = service_inbox(sh, true);
                if (st == SHS_OK && sh->credits[p] < EASGD_CREDITS) {
                    if (shs__deadline_passed(dl)) {
                        SHS_ERROR("shs_shadow_finish: owner %d did not acknowledge this rank's "
                                  "last delta within %d ms", p, sh->wait_ms);
                        st = SHS_ERR_TIMEOUT;
                    }
                    backoff(sh, &step);
                }
            }
        }
    }
    if (st == SHS_OK && sh->algo != SHS_SHADOW_EASGD) {
        /* MA, BMUF: the replicas become their exact mean, so each rank's
         * own model no longer carries the drift since its last round */
        shs_coll_params_t cp;
        shs_coll_t *coll = NULL;
        memset(&cp, 0, sizeof(cp));
        cp.field_mask = SHS_COLL_PARAM_STAGE_BYTES | SHS_COLL_PARAM_TIMEOUT;
        cp.stage_bytes = 0; /* the model is a region: no staging */
        cp.timeout_ms = sh->wait_ms;
        st = shs_coll_create(sh->ctx, &cp, &coll);
        if (st == SHS_OK)
            st = shs_allreduce_region(coll, NULL, sh->model, sh->model_off, sh->n,
                                      SHS_DTYPE_FLOAT32, SHS_REDUCE_AVG);
        shs_coll_destroy(coll);
    }
    sh->finished = true;
    if (st != SHS_OK)
        note_error(sh, st);
    return st;
}

/* --------------------------------------------------------------- stats */

shs_status_t shs_shadow_stats(const shs_shadow_t *csh, shs_shadow_stats_t *out)
{
    if (csh == NULL || out == NULL)
        return SHS_ERR_INVALID_ARG;
    shs_shadow_t *sh = (shs_shadow_t *)csh; /* atomics are read, never written */
    shs_shadow_stats_t s;
    memset(&s, 0, sizeof(s));
    uint64_t now = shs__now_ns();
    s.rounds = atomic_load_explicit(&sh->st_rounds, RELAXED);
    s.idle_rounds = atomic_load_explicit(&sh->st_idle, RELAXED);
    s.running = atomic_load(&sh->running);
    uint64_t active = atomic_load(&sh->run_ns_total);
    if (s.running)
        active += now - atomic_load(&sh->run_start_ns);
    uint64_t first = atomic_load_explicit(&sh->first_round_ns, RELAXED);
    if (active == 0 && first != 0)
        active = now - first;
    s.syncs_per_min = active > 0 ? (double)s.rounds * 60e9 / (double)active : 0.0;
    s.bytes_read = atomic_load_explicit(&sh->st_bytes_read, RELAXED);
    s.bytes_written = atomic_load_explicit(&sh->st_bytes_written, RELAXED);
    if (s.rounds > 0) {
        s.round_us_mean =
            (double)atomic_load_explicit(&sh->st_round_ns_sum, RELAXED) / 1e3 / (double)s.rounds;
        s.wait_us_mean =
            (double)atomic_load_explicit(&sh->st_wait_ns_sum, RELAXED) / 1e3 / (double)s.rounds;
    }
    s.round_us_last = (double)atomic_load_explicit(&sh->st_round_ns_last, RELAXED) / 1e3;
    s.round_us_max = (double)atomic_load_explicit(&sh->st_round_ns_max, RELAXED) / 1e3;
    s.torn_retries = atomic_load_explicit(&sh->st_torn, RELAXED);
    s.peers_skipped = atomic_load_explicit(&sh->st_skipped, RELAXED);
    s.errors = atomic_load_explicit(&sh->st_errors, RELAXED);
    s.last_error = (shs_status_t)atomic_load_explicit(&sh->st_last_error, RELAXED);
    s.failed_peers = atomic_load_explicit(&sh->st_failed, RELAXED);
    s.rounds_after_failure = atomic_load_explicit(&sh->st_rounds_after_fail, RELAXED);
    s.first_failure_ns = atomic_load_explicit(&sh->st_first_fail_ns, RELAXED);
    s.staleness_ms_max = -1.0;
    for (int p = 0; p < sh->size; p++) {
        if (p != sh->rank && __atomic_load_n(&sh->dead[p], __ATOMIC_RELAXED))
            continue; /* a failed peer's age grows without bound: not staleness */
        uint64_t t = atomic_load_explicit(&sh->last_read_ns[p], RELAXED);
        if (p == sh->rank || t == 0)
            continue;
        double ms = now > t ? (double)(now - t) / 1e6 : 0.0;
        if (ms > s.staleness_ms_max)
            s.staleness_ms_max = ms;
    }
    *out = s;
    return SHS_OK;
}

shs_status_t shs_shadow_peer_staleness(const shs_shadow_t *csh, int peer, double *ms_p)
{
    if (csh == NULL || ms_p == NULL || peer < 0 || peer >= csh->size || peer == csh->rank)
        return SHS_ERR_INVALID_ARG;
    shs_shadow_t *sh = (shs_shadow_t *)csh;
    uint64_t t = atomic_load_explicit(&sh->last_read_ns[peer], RELAXED);
    uint64_t now = shs__now_ns();
    *ms_p = t == 0 ? -1.0 : now > t ? (double)(now - t) / 1e6 : 0.0;
    return SHS_OK;
}

uint64_t shs_shadow_round(const shs_shadow_t *csh)
{
    shs_shadow_t *sh = (shs_shadow_t *)csh;
    return sh == NULL ? 0 : atomic_load_explicit(&sh->round, RELAXED);
}

shs_status_t shs_shadow_center(const shs_shadow_t *sh, const float **slice_p, size_t *offset_p,
                               size_t *count_p)
{
    if (sh == NULL || slice_p == NULL || offset_p == NULL || count_p == NULL ||
        sh->algo != SHS_SHADOW_EASGD)
        return SHS_ERR_INVALID_ARG;
    *slice_p = sh->center;
    *offset_p = sh->my_off;
    *count_p = sh->my_len;
    return SHS_OK;
}

/* ------------------------------------------------------ create/destroy */

static shs_status_t resolve_params(shs_shadow_t *sh, const shs_shadow_params_t *p)
{
    const shs__config_t cfg = *shs__ctx_config(sh->ctx); /* resolved once, at ctx create */
    shs_status_t st;
    uint64_t m = p != NULL ? p->field_mask : 0;

    sh->algo = (m & SHS_SHADOW_PARAM_ALGORITHM) ? p->algorithm : SHS_SHADOW_MA;
    memset(&sh->sched, 0, sizeof(sh->sched));
    sh->sched.kind = SHS_SCHED_ALL;
    if (m & SHS_SHADOW_PARAM_SCHEDULE)
        sh->sched = p->schedule;
    sh->path = (m & SHS_SHADOW_PARAM_PATH) ? p->path : SHS_SHADOW_PATH_PULL;
    sh->min_interval_us = (m & SHS_SHADOW_PARAM_MIN_INTERVAL) ? p->min_interval_us : 0;
    snprintf(sh->pin, sizeof(sh->pin), "%s",
             (m & SHS_SHADOW_PARAM_PIN_CPUS) && p->pin_cpus != NULL ? p->pin_cpus
                                                                     : cfg.shadow_pin);
    /* BMUF: the paper's defaults in the foreground; on the shadow thread,
     * where a result reaches the workers a round late, no look-ahead and a
     * block momentum of at most 0.5 (shadow.h gives the figures) */
    sh->bmuf_fg = shs__bmuf_defaults(sh->size);
    sh->bmuf_bg = sh->bmuf_fg;
    sh->bmuf_bg.nesterov = false;
    if (sh->bmuf_bg.eta > SHS__BMUF_BG_ETA_MAX)
        sh->bmuf_bg.eta = SHS__BMUF_BG_ETA_MAX;
    if (m & SHS_SHADOW_PARAM_BMUF_ETA)
        sh->bmuf_fg.eta = sh->bmuf_bg.eta = p->bmuf_eta;
    if (m & SHS_SHADOW_PARAM_BMUF_ZETA)
        sh->bmuf_fg.zeta = sh->bmuf_bg.zeta = p->bmuf_zeta;
    if (m & SHS_SHADOW_PARAM_BMUF_NESTEROV)
        sh->bmuf_fg.nesterov = sh->bmuf_bg.nesterov = p->bmuf_nesterov != 0;
    sh->bmuf = sh->bmuf_fg;
    sh->alpha = (m & SHS_SHADOW_PARAM_EASGD_ALPHA) ? p->easgd_alpha
                                                   : shs__easgd_default_alpha(sh->size);
    sh->wait_ms = (m & SHS_SHADOW_PARAM_WAIT_TIMEOUT) ? p->wait_timeout_ms : cfg.shadow_wait_ms;
    size_t chunk_bytes = (m & SHS_SHADOW_PARAM_CHUNK) ? p->chunk_bytes : cfg.shadow_chunk;
    sh->backoff_us = cfg.shadow_backoff_us;
    sh->nap_pct = cfg.shadow_nap;
    sh->want_channel = cfg.shadow_channel; /* -1: allocated (EASGD only uses one) */

    if ((unsigned)sh->algo > SHS_SHADOW_EASGD || (unsigned)sh->path > SHS_SHADOW_PATH_LIVE ||
        sh->wait_ms <= 0 || chunk_bytes < sizeof(float) || !(sh->bmuf.eta >= 0.0f) ||
        !(sh->bmuf.eta < 1.0f) || !(sh->bmuf.zeta > 0.0f) || !(sh->alpha > 0.0f) ||
        !(sh->alpha <= 1.0f)) {
        SHS_ERROR("shadow: invalid parameters (algorithm %d, path %d, wait %d ms, chunk %zu "
                  "bytes, eta %g, zeta %g, alpha %g)",
                  (int)sh->algo, (int)sh->path, sh->wait_ms, chunk_bytes,
                  (double)sh->bmuf.eta, (double)sh->bmuf.zeta, (double)sh->alpha);
        return SHS_ERR_INVALID_ARG;
    }
    if (!shs__pin_spec_valid(sh->pin)) {
        SHS_ERROR("shadow: pin_cpus \"%s\": expected auto, none or a CPU list such as 3, 2-3 "
                  "or 0,2-3", sh->pin);
        return SHS_ERR_CONFIG;
    }
    if (sh->algo == SHS_SHADOW_EASGD && sh->path != SHS_SHADOW_PATH_PULL) {
        SHS_ERROR("shadow: easgd reads and writes the center one-sidedly: it needs the pull "
                  "data path");
        return SHS_ERR_UNSUPPORTED;
    }
    /* the largest group: every round's group must fit the receive chunks */
    shs_group_t g;
    if ((unsigned)sh->sched.kind > SHS_SCHED_RANDOM) {
        SHS_ERROR("shadow: unknown schedule kind %d (expected SHS_SCHED_ALL, _HYPERCUBE, "
                  "_GENERAL or _RANDOM)", (int)sh->sched.kind);
        return SHS_ERR_INVALID_ARG;
    }
    st = shs_schedule_group(&sh->sched, sh->size, sh->rank, 0, &g);
    if (st != SHS_OK) {
        SHS_ERROR("shadow: schedule kind %d with group size %d does not fit %d ranks",
                  (int)sh->sched.kind, sh->sched.group_size, sh->size);
        return SHS_ERR_INVALID_ARG;
    }
    sh->gmax = sh->sched.kind == SHS_SCHED_ALL ? sh->size
               : sh->sched.group_size < sh->size ? sh->sched.group_size
                                                  : sh->size;
    if (g.size > sh->gmax)
        sh->gmax = g.size;
    sh->chunk = chunk_bytes / sizeof(float);
    if (sh->chunk > sh->n)
        sh->chunk = sh->n;
    return SHS_OK;
}

/* EASGD: the center starts as the mean of the ranks' models. Every rank
 * puts its model in slot 0; after a barrier each owner reads its slice from
 * every rank and averages it in rank order. */
static shs_status_t easgd_init_center(shs_shadow_t *sh)
{
    memcpy(sh->slot[0], sh->w, sh->n * sizeof(float));
    shs_status_t st = shs_ctx_barrier(sh->ctx);
    if (st != SHS_OK)
        return st;
    if (sh->my_len > 0) {
        for (int p = 0; p < sh->size && st == SHS_OK; p++) {
            float *dst = sh->acc + sh->my_off;
            if (p == sh->rank) {
                memcpy(dst, sh->slot[0] + sh->my_off, sh->my_len * sizeof(float));
            } else {
                st = shs_read(sh->ctx, p, sh->acc_reg, sh->my_off * sizeof(float), sh->pub,
                              slot_off(sh, 0) + sh->my_off * sizeof(float),
                              sh->my_len * sizeof(float), SHS_OP_SIGNAL);
                if (st == SHS_OK)
                    st = shs_flush(sh->ctx, p, SHS_TIMEOUT_DEFAULT);
            }
            if (st != SHS_OK)
                break;
            if (p == 0)
                memcpy(sh->center, dst, sh->my_len * sizeof(float));
            else
                shs__easgd_center_apply(sh->center, dst, sh->my_len);
        }
        shs__vec_scale(sh->center, 1.0f / (float)sh->size, sh->my_len);
    }
    shs_status_t st2 = shs_ctx_barrier(sh->ctx);
    return st != SHS_OK ? st : st2;
}

static void free_arrays(shs_shadow_t *sh)
{
    free(sh->published_seen);
    free(sh->seen_seq);
    free(sh->state);
    free(sh->warned);
    free(sh->dead);
    free(sh->stopped_seen);
    free(sh->alive);
    free((void *)sh->last_read_ns);
    free(sh->credits);
    free(sh->sent);
    free(sh->wg);
    free(sh->D);
}

shs_status_t shs_shadow_create(shs_ctx_t *ctx, shs_region_t *model, size_t offset, size_t count,
                               const shs_shadow_params_t *params, shs_shadow_t **shadow_p)
{
    shs_status_t st;
    if (ctx == NULL || model == NULL || shadow_p == NULL) {
        SHS_ERROR("shs_shadow_create: %s is NULL",
                  ctx == NULL ? "the context" : model == NULL ? "the model region"
                                                              : "shadow_p (the output)");
        return SHS_ERR_INVALID_ARG;
    }
    if (count == 0 || offset % sizeof(float) != 0 || offset > shs_region_len(model) ||
        count > (shs_region_len(model) - offset) / sizeof(float)) {
        SHS_ERROR("shadow: bad model range (offset %zu, %zu floats, region of %zu bytes)",
                  offset, count, shs_region_len(model));
        return SHS_ERR_INVALID_ARG;
    }
    if (shs__ctx_refused(ctx, "shs_shadow_create"))
        return SHS_ERR_BAD_STATE;
    shs_shadow_t *sh = calloc(1, sizeof(*sh));
    if (sh == NULL)
        return SHS_ERR_NO_MEMORY;
    sh->ctx = ctx;
    sh->rank = shs_ctx_rank(ctx);
    sh->size = shs_ctx_size(ctx);
    sh->model = model;
    sh->model_off = offset;
    sh->n = count;
    sh->w = (float *)((uint8_t *)shs_region_addr(model) + offset);
    st = resolve_params(sh, params);
    if (st != SHS_OK)
        goto err_free;

    size_t np = (size_t)sh->size;
    sh->published_seen = calloc(np, sizeof(uint64_t));
    sh->seen_seq = calloc(np, sizeof(uint64_t));
    sh->state = calloc(np, 1);
    sh->warned = calloc(np, sizeof(bool));
    sh->dead = calloc(np, sizeof(bool));
    sh->stopped_seen = calloc(np, sizeof(bool));
    sh->alive = calloc(np, sizeof(int));
    sh->last_read_ns = calloc(np, sizeof(uint64_t));
    sh->credits = calloc(np, sizeof(int));
    sh->sent = calloc(np, sizeof(unsigned));
    if (sh->published_seen == NULL || sh->seen_seq == NULL || sh->state == NULL ||
        sh->warned == NULL || sh->dead == NULL || sh->stopped_seen == NULL || sh->alive == NULL || sh->last_read_ns == NULL || sh->credits == NULL ||
        sh->sent == NULL) {
        st = SHS_ERR_NO_MEMORY;
        goto err_free_arrays;
    }
    if (sh->algo == SHS_SHADOW_BMUF) {
        sh->wg = malloc(count * sizeof(float));
        sh->D = calloc(count, sizeof(float));
        if (sh->wg == NULL || sh->D == NULL) {
            st = SHS_ERR_NO_MEMORY;
            goto err_free_arrays;
        }
        memcpy(sh->wg, sh->w, count * sizeof(float));
    }

    /* collective registrations, in the same order on every rank */
    sh->slot_bytes = ALIGN_UP(count * sizeof(float), 64);
    st = shs_region_alloc(ctx, PUB_DATA_OFF + 2 * sh->slot_bytes, SHS_ACCESS_REMOTE_READ,
                          &sh->pub);
    if (st != SHS_OK)
        goto err_free_arrays;
    sh->hdr = shs_region_addr(sh->pub);
    sh->slot[0] = (float *)((uint8_t *)sh->hdr + slot_off(sh, 0));
    sh->slot[1] = (float *)((uint8_t *)sh->hdr + slot_off(sh, 1));

    sh->recv_off = 2 * (size_t)SHS_GROUP_MAX * HDR_BYTES;
    size_t scratch_len = sh->recv_off + (size_t)(sh->gmax > 1 ? sh->gmax - 1 : 1) *
                                            sh->chunk * sizeof(float);
    st = shs_region_alloc(ctx, scratch_len, SHS_ACCESS_LOCAL_WRITE, &sh->scratch);
    if (st != SHS_OK)
        goto err_destroy_pub;
    sh->scratch_mem = shs_region_addr(sh->scratch);

    st = shs_region_alloc(ctx, count * sizeof(float), SHS_ACCESS_LOCAL_WRITE, &sh->acc_reg);
    if (st != SHS_OK)
        goto err_destroy_scratch;
    sh->acc = shs_region_addr(sh->acc_reg);

    if (sh->path == SHS_SHADOW_PATH_RING) {
        shs_coll_params_t cp;
        memset(&cp, 0, sizeof(cp));
        cp.field_mask = SHS_COLL_PARAM_STAGE_BYTES | SHS_COLL_PARAM_TIMEOUT;
        cp.stage_bytes = 0; /* the engine reduces its own registered buffer */
        cp.timeout_ms = sh->wait_ms;
        st = shs_coll_create(ctx, &cp, &sh->coll);
        if (st != SHS_OK)
            goto err_destroy_acc;
    }
    if (sh->algo == SHS_SHADOW_EASGD) {
        unsigned chan;
        st = shs__ctx_channel_take(ctx, sh->want_channel, "a shadow engine (EASGD inbox)",
                                   &chan);
        if (st != SHS_OK)
            goto err_destroy_coll;
        sh->channel_taken = true;
        sh->channel = (uint32_t)chan << IMM_CHANNEL_SHIFT;
        shs__easgd_slice(count, sh->size, 0, &sh->my_off, &sh->slice_max);
        shs__easgd_slice(count, sh->size, sh->rank, &sh->my_off, &sh->my_len);
        st = shs_region_alloc(ctx, sh->slice_max * sizeof(float) + sizeof(float),
                              SHS_ACCESS_REMOTE_READ | SHS_ACCESS_LOCAL_WRITE, &sh->center_reg);
        if (st != SHS_OK)
            goto err_give_channel;
        sh->center = shs_region_addr(sh->center_reg);
        st = shs_region_alloc(ctx,
                              np * EASGD_CREDITS * sh->slice_max * sizeof(float) + sizeof(float),
                              SHS_ACCESS_REMOTE_WRITE, &sh->inbox_reg);
        if (st != SHS_OK)
            goto err_destroy_center;
        sh->inbox = shs_region_addr(sh->inbox_reg);
        st = shs_region_alloc(ctx, count * sizeof(float), SHS_ACCESS_LOCAL_WRITE, &sh->dbuf_reg);
        if (st != SHS_OK)
            goto err_destroy_inbox;
        sh->dbuf = shs_region_addr(sh->dbuf_reg);
        for (int p = 0; p < sh->size; p++)
            sh->credits[p] = EASGD_CREDITS;
        st = easgd_init_center(sh);
        if (st != SHS_OK)
            goto err_destroy_dbuf;
    }

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sh->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&sh->lock, NULL);
    SHS_DEBUG("shadow: %zu floats, algorithm %d, path %d, schedule %d (g %d), chunk %zu floats",
              count, (int)sh->algo, (int)sh->path, (int)sh->sched.kind, sh->gmax, sh->chunk);
    shs__region_hold(model, "a shadow engine (its model)");
    *shadow_p = sh;
    return SHS_OK;

err_destroy_dbuf:
    shs_region_destroy(sh->dbuf_reg);
err_destroy_inbox:
    shs_region_destroy(sh->inbox_reg);
err_destroy_center:
    shs_region_destroy(sh->center_reg);
err_give_channel:
    if (sh->channel_taken)
        shs__ctx_channel_give(ctx, sh->channel >> IMM_CHANNEL_SHIFT);
err_destroy_coll:
    shs_coll_destroy(sh->coll);
err_destroy_acc:
    shs_region_destroy(sh->acc_reg);
err_destroy_scratch:
    shs_region_destroy(sh->scratch);
err_destroy_pub:
    shs_region_destroy(sh->pub);
err_free_arrays:
    free_arrays(sh);
err_free:
    free(sh);
    return st;
}

void shs_shadow_destroy(shs_shadow_t *sh)
{
    if (sh == NULL)
        return;
    shs_shadow_stop(sh);
    __atomic_store_n(&sh->hdr->stopped, 1, __ATOMIC_RELEASE);
    /* every rank stops reading and writing this rank's regions before any
     * of them is deregistered */
    (void)shs_flush(sh->ctx, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
    if (sh->ndead > 0) {
        /* the barrier counts every rank: with a peer gone it could only
         * fail, after SHS_BOOTSTRAP_TIMEOUT_MS when the peer's host went
         * away silently. A survivor still reading this rank's snapshots
         * gets an access error and counts this rank as failed: harmless
         * at the end of a job. */
        SHS_INFO("shadow: %d peer(s) failed or gone: the final barrier is skipped", sh->ndead);
    } else {
        shs_status_t st = shs_ctx_barrier(sh->ctx);
        if (st != SHS_OK)
            SHS_WARN("shadow: final barrier failed (%s); releasing the regions anyway",
                     shs_status_string(st));
    }
    if (sh->algo == SHS_SHADOW_EASGD) {
        (void)service_inbox(sh, false);
        shs_region_destroy(sh->dbuf_reg);
        shs_region_destroy(sh->inbox_reg);
        shs_region_destroy(sh->center_reg);
        shs__ctx_channel_give(sh->ctx, sh->channel >> IMM_CHANNEL_SHIFT);
    }
    shs__region_release(sh->model);
    shs_coll_destroy(sh->coll);
    shs_region_destroy(sh->acc_reg);
    shs_region_destroy(sh->scratch);
    shs_region_destroy(sh->pub);
    pthread_cond_destroy(&sh->cond);
    pthread_mutex_destroy(&sh->lock);
    free_arrays(sh);
    free(sh);
}

/*
 * Internal: the shadow engine's layout and what its files share. The
 * semantics are in include/shadowsync/shadow.h; the update rules in
 * algorithms/rules.h.
 *
 *   engine.c      create (parameters and knobs, regions), destroy
 *   thread.c      one round, the shadow thread, start/stop/sync/finish
 *   view.c        the failure view (pure: unit-tested on the host)
 *   snapshot.c    published headers: seqlock writer, header reads, the
 *                 engine's one wait skeleton, the failure glue
 *   admit.c       stragglers: the agreed verdicts, the slot guard, catch-up
 *   rejoin.c      a rank that rejoined: its view, model and first round
 *   path_pull.c   the pull data path (RDMA READ of the snapshots)
 *   path_ring.c   the ring data path (check-in, ring allreduce)
 *   path_easgd.c  EASGD: the center slices and the inboxes
 *   stats.c       statistics
 *
 * Memory of one engine (n = model elements, g = largest group):
 *   pub      REMOTE_READ   header (stamps, stopped flag), the told table (the
 *                          membership gossip), two snapshot slots
 *   scratch  LOCAL_WRITE   header read-backs, a told table's read-back,
 *                          (g - 1) receive chunks
 *   acc      LOCAL_WRITE   n floats: the round's mean / result; EASGD: the
 *                          center as read
 *   admit    REMOTE_ATOMIC SHS__ADMIT_WORDS verdict words (8 KiB), swapped
 *                          only by peers
 *   EASGD only: center (REMOTE_READ, the owned slice), inbox (REMOTE_WRITE,
 *   two slots per sender), dbuf (the outgoing d, source of the writes).
 *   BMUF only: w_g and D (private memory).
 */
#ifndef SHS_ALGORITHMS_SHADOW_ENGINE_H
#define SHS_ALGORITHMS_SHADOW_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <shadowsync/collective.h>
#include <shadowsync/shadow.h>

#include "algorithms/rules.h"
#include "algorithms/shadow/view.h"
#include "runtime/wait.h"

/* The published header, at offset 0 of the pub region. Written only by the
 * owning rank's engine with plain aligned 8-byte stores; read by peers. */
typedef struct shs__pub_hdr {
    uint64_t seq[2];   /* seqlock of each slot: odd while the slot is written */
    uint64_t round[2]; /* round stamped in each slot (valid when seq is even, > 0) */
    uint64_t stopped;  /* nonzero: this rank's engine is stopped */
    uint64_t checkin;  /* ring path: (round << 1) | leaving, written once per round */
    uint64_t pulling;  /* nonzero: the ring path fell back to the pull path (sticky) */
    uint64_t fence;    /* EASGD: the finish phases this rank has reached (path_easgd.c) */
    uint64_t told_ver; /* moves whenever the told table (SHS__PUB_TOLD_OFF) changes */
    uint64_t life;     /* this rank's own counter (view.h): even, its incarnation */
    uint64_t wire;     /* 1 + shs_wire_t of the slots, set before the first publish */
    uint64_t done;     /* 1 + the last round this rank has finished (its move applied, or
                          left out, or sat out; after a catch-up, the round before the
                          next it runs); 0: none yet */
    uint64_t out[2];   /* per slot (round parity): 1 + a round this rank sat out or
                          withdrew from (admit.c) */
    uint64_t out_v[2]; /* the verdict word it concluded for that round: written
                          after out, read after it (admit.c, "withdrawal") */
    uint64_t memb[2];  /* per slot: the digest of the view its round's group came
                          from (written inside the slot's seqlock; admit.c) */
} shs__pub_hdr_t;

#define SHS__HDR_BYTES sizeof(shs__pub_hdr_t)
#define SHS__PUB_TOLD_OFF 2048 /* the view's told table (view.h) */
#define SHS__PUB_DATA_OFF 4096 /* slots start on their own page */
_Static_assert(sizeof(shs__pub_hdr_t) <= SHS__PUB_TOLD_OFF &&
                   SHS__PUB_TOLD_OFF + SHS__VIEW_TOLD_RANKS * sizeof(shs__life_t) <=
                       SHS__PUB_DATA_OFF,
               "the header, then the told table, then the slots");

/* Verdict words per rank (admit.c): round r's word is r mod SHS__ADMIT_WORDS. */
#define SHS__ADMIT_WORDS 1024
/* Recent full rounds the straggler bound takes its median over. */
#define SHS__ROUND_HIST 16

/* Outcome of trying to include a peer in a round. */
enum { SHS__PEER_PENDING = 0, SHS__PEER_OK = 1, SHS__PEER_SKIP = 2 };

typedef struct shs_shadow shs_shadow_t;

/*
 * A data path: chosen once at create (EASGD by the algorithm, else by
 * shs_shadow_params_t.path). NULL members do nothing.
 */
typedef struct shs__path_ops {
    const char *name;
    /* collective setup at create, after the common regions (same order on
     * every rank); undone by teardown */
    shs_status_t (*setup)(shs_shadow_t *sh);
    /* round r over grp (this rank's group of the view) */
    shs_status_t (*round)(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp);
    /* a stop was requested: true when the path needs one more round to
     * leave (the ring's check-in with the leaving bit) */
    bool (*leave)(shs_shadow_t *sh);
    /* the shadow thread ends: take in what is in flight */
    void (*quiesce)(shs_shadow_t *sh);
    /* shs_shadow_finish, once this rank's writes have landed; the path
     * meets the other ranks itself (a barrier, or EASGD's fences, which
     * keep serving the inbox) */
    shs_status_t (*finish)(shs_shadow_t *sh);
    /* shs_shadow_destroy, after the final barrier */
    void (*teardown)(shs_shadow_t *sh);
} shs__path_ops_t;

extern const shs__path_ops_t shs__path_pull, shs__path_ring, shs__path_easgd;

/* Parameters as resolved at create (engine.c, the one place knobs are read). */
typedef struct shs__shadow_cfg {
    shs_shadow_algorithm_t algo;
    shs_schedule_t sched;
    shs_shadow_path_t path;
    uint32_t min_interval_us;
    char pin[64];
    shs__bmuf_coef_t bmuf_fg, bmuf_bg; /* foreground rounds, the shadow thread */
    float alpha;
    int wait_ms;
    int nap_pct;      /* SHS_SHADOW_NAP: share of a transfer's expected time slept */
    int want_channel; /* SHS_SHADOW_CHANNEL: -1 = allocated */
    size_t chunk;     /* floats per pulled piece */
    int wire;         /* shs_wire_t of the published snapshots */
    int gmax;         /* the largest group */
    int straggler_ms; /* SHS_SHADOW_STRAGGLER_MS: -1 auto */
} shs__shadow_cfg_t;

/* EASGD's center and inboxes (path_easgd.c). */
typedef struct shs__easgd {
    shs_region_t *center_reg, *inbox_reg, *dbuf_reg, *stamp_reg;
    float *center, *inbox, *dbuf;
    uint64_t *seq;    /* the center's seqlock stamp (odd: a write in progress) */
    uint64_t *stamps; /* read-back: two stamps per owner (before, after a read) */
    size_t slice_max; /* floats: the longest slice, the stride of the inbox */
    size_t my_off, my_len;
    int *credits;
    unsigned *sent;   /* deltas sent to each owner (parity of the next slot) */
    uint64_t fence;   /* the last fence value this rank published (finish) */
    uint32_t channel; /* channel << IMM_CHANNEL_SHIFT */
} shs__easgd_t;

typedef struct shs__shadow_stats {
    _Atomic uint64_t rounds, idle, bytes_read, bytes_written, round_ns_sum, round_ns_last,
        round_ns_max, wait_ns_sum, torn, skipped, errors, rounds_after_fail, first_fail_ns,
        straggler_skips, left_out;
    atomic_int failed;
    atomic_int last_error;
    _Atomic uint64_t run_ns_total, run_start_ns, first_round_ns, first_sync_ns;
    _Atomic uint64_t *last_read_ns; /* per peer */
    _Atomic uint64_t *peer_skips;   /* per peer: rounds it was left out as late */
} shs__shadow_stats_t;

struct shs_shadow {
    shs_ctx_t *ctx; /* the caller's: regions, barriers, the knobs */
    shs_ctx_t *io;  /* the engine's endpoint of ctx: every read, write and poll
                       of a round, lent to the shadow thread while it runs */
    int rank, size;
    bool rejoining; /* made by a rank that rejoined, replaying the job's set-up
                       (rejoin.c): not collective, the job's engine joined */
    shs_region_t *model;
    size_t model_off; /* bytes */
    size_t n;         /* float32 elements */
    float *w;         /* the live model */
    shs__shadow_cfg_t cfg;
    const shs__path_ops_t *ops;
    shs__bmuf_coef_t bmuf; /* what the rounds use: cfg.bmuf_fg or cfg.bmuf_bg */
    double ns_per_byte;    /* moving average of pulled transfers (0: none measured yet) */

    shs_region_t *pub;
    shs__pub_hdr_t *hdr;
    size_t slot_bytes;
    float *slot[2];   /* bf16 wire: the slots hold uint16_t (shs__slot16) */
    float *snap;      /* bf16 wire: this rank's published snapshot, decoded: what
                         its mean and its apply use (private memory) */
    float *dec;       /* bf16 wire: the receive chunks, decoded ((g - 1) chunks) */
    shs_region_t *scratch;
    uint8_t *scratch_mem;
    size_t recv_off; /* offset of the receive chunks in scratch */
    shs_region_t *acc_reg;
    float *acc;
    /* stragglers (admit.c): the verdict words peers swap, this rank's
     * read-backs of theirs, what their headers said */
    shs_region_t *admit_reg;
    const uint64_t *admit; /* loaded only: peers' compare-and-swaps write it */
    size_t word_off;       /* offset in scratch of one 8-byte word per member */
    size_t told_off;       /* offset in scratch of a peer's told table read back */
    uint64_t *told_seen;   /* per peer: its header's told_ver when its table was
                              last taken in */
    uint32_t grp_dig;      /* the view's digest when this round's group was formed */
    uint64_t *done_seen;   /* per peer: its header's done as last read */
    bool *late;            /* per peer: it kept a slot of this rank past the straggler
                              bound (the guard gives it one look until it finishes) */
    uint64_t round_t0;     /* when this rank published the current round */
    uint64_t full_ns[SHS__ROUND_HIST]; /* durations of recent rounds that left no one out */
    unsigned full_n;
    uint64_t full_med_ns;  /* their median (0: too few yet): the straggler bound's
                              base, and the pace of the waits' naps (one round
                              that held a stopped rank must not slow them) */
    uint64_t next_round;   /* set by a round that catches up: the next round to run */
    bool ahead;            /* a round found every living peer behind this rank */
    /* per slot: the round it holds and who reads it (self_in false: no one) */
    uint64_t slot_round[2];
    bool slot_held[2];
    shs_group_t slot_grp[2];
    bool slot_in[2][SHS_GROUP_MAX];
    float *wg, *D; /* BMUF */

    /* ring path */
    shs_coll_t *coll;
    bool leaving;   /* a stop was requested: the next check-in says so */
    bool ring_off;  /* fell back to pull for good */
    bool rerun;     /* the round gave way to the pull path: run it again */
    bool pull_set;  /* pull_from is set */
    uint64_t pull_from; /* first round on the pull path (ring fallback) */

    shs__easgd_t easgd;

    /* per peer */
    uint64_t *published_seen; /* highest round seen published + 1 (0: none) */
    uint64_t *seen_seq;       /* seq of the slot read in this round */
    uint8_t *state;           /* SHS__PEER_* in this round */
    bool *warned;             /* a wait timeout was logged for this peer */

    shs__view_t view;
    _Atomic uint64_t round;
    int round_peers; /* peers the current round synced with */
    bool poisoned;
    bool ran_background; /* shs_shadow_start was called: no foreground rounds after */
    bool finished;       /* shs_shadow_finish ran: no rounds after */

    /* thread */
    pthread_t thread;
    pthread_mutex_t lock; /* only for the interval sleep and stop */
    pthread_cond_t cond;
    atomic_bool stop_req;
    atomic_int running;

    shs__shadow_stats_t st;
};

#define SHS__RELAXED memory_order_relaxed

static inline void shs__stat_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, SHS__RELAXED);
}

static inline shs_status_t shs__first_error(shs_status_t a, shs_status_t b)
{
    return a != SHS_OK ? a : b;
}

static inline bool shs__bf16_wire(const shs_shadow_t *sh)
{
    return sh->cfg.wire == SHS_WIRE_BF16;
}

/* Bytes per published element: 4, or 2 on a bf16 wire. */
static inline size_t shs__wire_bytes(const shs_shadow_t *sh)
{
    return shs__bf16_wire(sh) ? 2 : sizeof(float);
}

/* This rank's round-r snapshot as float32: the slot, or its decoding. */
static inline const float *shs__own_snapshot(const shs_shadow_t *sh, int s)
{
    return shs__bf16_wire(sh) ? sh->snap : sh->slot[s];
}

static inline bool shs__shadow_stop_requested(const shs_shadow_t *sh)
{
    return atomic_load_explicit(&sh->stop_req, memory_order_acquire);
}

/* stats.c */
void shs__shadow_note_error(shs_shadow_t *sh, shs_status_t st);
void shs__shadow_note_read(shs_shadow_t *sh, const shs_group_t *grp);
void shs__shadow_note_round(shs_shadow_t *sh, uint64_t dt_ns, shs_status_t st);

/* snapshot.c: the published snapshot and headers */
size_t shs__slot_off(const shs_shadow_t *sh, int s);
void shs__publish(shs_shadow_t *sh, uint64_t r);
void shs__reset_states(shs_shadow_t *sh, const shs_group_t *grp);
void shs__check_failures(shs_shadow_t *sh);
shs_status_t shs__wait_slot(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r);
bool shs__verify_stamps(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r,
                        shs_status_t *err);
shs_status_t shs__read_header(shs_shadow_t *sh, int p, size_t loc);
/* A rank that rejoined the running job (engine create): its view from a
 * living peer's table and, unless SHS_SHADOW_REJOIN_SEED=own, its model
 * from that peer's newest published snapshot; its rounds start at the
 * peers' newest. SHS_ERR_PEER_FAILED when no peer is left to ask. */
shs_status_t shs__rejoin_seed(shs_shadow_t *sh);
/* Wait for this rank's operations to peer p; a failure makes p PEER_SKIP. */
shs_status_t shs__flush_peer(shs_shadow_t *sh, int p);

/*
 * The engine's one wait: poll until it says done, a stop (when
 * cancellable), or wait_ms. Built on the runtime's waiter: a few polls back
 * to back, then naps doubling up to SHS__IDLE_SLEEP_MAX_NS or 1/32 of the
 * last round's time when that is longer (every poll is an RDMA READ that
 * costs the device as much as a small transfer: a rank waiting for a slow
 * peer must not flood the link that peer needs; waiting 3% of a round
 * longer than necessary is cheap). The time is counted as waiting.
 * Returns SHS_OK (done), SHS_ERR_CANCELED or SHS_ERR_TIMEOUT.
 */
typedef bool (*shs__shadow_poll_fn)(shs_shadow_t *sh, void *arg);
shs_status_t shs__shadow_wait(shs_shadow_t *sh, shs__shadow_poll_fn poll, void *arg,
                              bool cancellable);
/* As shs__shadow_wait, bounded by ms instead of SHS_SHADOW_WAIT_MS. */
shs_status_t shs__shadow_wait_ms(shs_shadow_t *sh, shs__shadow_poll_fn poll, void *arg,
                                 bool cancellable, int ms);
/* The longest nap of a wait (above), in ns. */
long shs__shadow_nap_max_ns(const shs_shadow_t *sh);

/*
 * Waits on the peers' published headers: read the header of every member
 * of grp whose state is SHS__PEER_PENDING (into read-back `which`), take in
 * its view, and classify it, until no member is pending (or `abort` is
 * set). Read failures skip the peer (err); at the deadline the members
 * still pending are skipped with a warning that they did not `what`.
 */
typedef struct shs__hdr_wait shs__hdr_wait_t;
struct shs__hdr_wait {
    const shs_group_t *grp;
    uint64_t r;
    int which;        /* header read-back 0 or 1 */
    int k;            /* set for classify: the member's index in grp */
    bool admit;       /* also read each member's round-r verdict word (scratch word k) */
    int bound_ms;     /* 0: SHS_SHADOW_WAIT_MS; else this bound (ms), and no warning */
    const char *what; /* "publish its snapshot", for the timeout warning */
    /* the new state of member p (SHS__PEER_*) given its header h */
    uint8_t (*classify)(shs_shadow_t *sh, shs__hdr_wait_t *hw, int p, const shs__pub_hdr_t *h);
    shs_status_t err; /* first read or protocol error */
    bool abort;       /* classify: stop waiting after this pass */
};
shs_status_t shs__wait_headers(shs_shadow_t *sh, shs__hdr_wait_t *hw, bool cancellable);

/* snapshot.c: what a header read tells about a peer's published rounds */
uint64_t shs__published_plus1(const shs__pub_hdr_t *h);
bool shs__slot_written(const shs__pub_hdr_t *h, int s);
void shs__note_published(shs_shadow_t *sh, int p, const shs__pub_hdr_t *h);

/* admit.c: stragglers (shadow.h, "Stragglers") */
/* Before publishing round r: wait (within the straggler bound) until the
 * readers of slot r mod 2's snapshot have finished with it. *sit: they did
 * not, and this rank sits round r out (shs__sit_out). */
shs_status_t shs__guard_slot(shs_shadow_t *sh, uint64_t r, bool *sit);
void shs__sit_out(shs_shadow_t *sh, uint64_t r);
/* Round r ended on another path (the ring): the header says so. */
void shs__note_finished(shs_shadow_t *sh, uint64_t r);
/* The verdicts of round r over grp: members in get state PEER_OK, members
 * out PEER_SKIP; *in: this rank is in with at least one other member. */
shs_status_t shs__decide_members(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r, bool *in);
/* Round r ended for this rank: `applied` (it was in with the members
 * whose state is PEER_OK, who read its slot), or not (out, or alone: it
 * catches up). */
void shs__round_done(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r, bool applied);
/* After a round that found every living peer behind this rank (ahead):
 * wait, within the straggler bound, until one of them has published the
 * round before this rank's next, so that they meet there. */
void shs__hold_ahead(shs_shadow_t *sh);
/* Whether a member taken in for round r withdrew from it (its header h read
 * after its verdict): 1 it withdrew (it is out), 0 it did not, or is in
 * all the same, -1 its conclusion is not written yet. */
int shs__withdrew(const shs__pub_hdr_t *h, uint64_t r);

/* path_ring.c: a collective for the engine's own registered memory, set up
 * on sh->ctx, its calls on io (sh->io for the thread's, sh->ctx for the
 * caller's) */
shs_status_t shs__shadow_coll(shs_shadow_t *sh, shs_ctx_t *io, shs_coll_t **coll_p);

/* path_pull.c */
shs_status_t shs__round_pull(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp);
void shs__apply_result(shs_shadow_t *sh, const float *snap);

/* thread.c: shs_shadow_finish for MA and BMUF, the exact mean of the models */
shs_status_t shs__finish_mean(shs_shadow_t *sh);

/* path_easgd.c: take every pending immediate (ack: acknowledge deltas) */
shs_status_t shs__easgd_service(shs_shadow_t *sh, bool ack);

#endif

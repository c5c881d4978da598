/*
 * shadowsync: shadow synchronization of a dense model (ShadowSync, Zheng,
 * Su et al. 2020).
 *
 * Each rank trains one shared float32 copy of the model with Hogwild worker
 * threads that never wait for the network. A shadow engine keeps that copy
 * in sync with the other ranks: in the background on its own thread
 * (shs_shadow_start: S-MA, S-BMUF, S-EASGD) or in the foreground when the
 * caller asks for one round (shs_shadow_sync: FR-MA, FR-BMUF, FR-EASGD).
 * How rounds, snapshots and the paths work, and why the defaults are what
 * they are: docs/design.md, "The shadow engine".
 *
 * Rounds. Every rank counts rounds 0, 1, 2, ... In round r a rank syncs
 * with its group of round r in a DS-Sync schedule (schedule.h;
 * SHS_SCHED_ALL: every rank, every round). Each round combines the group's
 * round-r snapshots of the model with the algorithm's rule and applies the
 * result as a delta against this rank's snapshot s:
 *   w[i] = result[i] + (w[i] - s[i])
 * so what the workers wrote during the round is kept. Each element is
 * loaded and stored once, without locks: a worker write that lands between
 * that load and that store of the same element is lost.
 *
 * Paths (shs_shadow_params_t.path):
 *   SHS_SHADOW_PATH_PULL  RDMA READ of the peers' published snapshots under a
 *                         sequence lock: the members of a group combine the
 *                         same values, so averaging conserves the group's sum.
 *   SHS_SHADOW_PATH_RING  ring allreduce of the snapshots (collective.h); the
 *                         members of a group run the round in lockstep; sums
 *                         are conserved. A rank stopped on this path cannot be
 *                         started again.
 *   SHS_SHADOW_PATH_LIVE  refused: shs_shadow_create returns
 *                         SHS_ERR_UNSUPPORTED. A READ of a model that workers
 *                         write can return floats torn within their bytes,
 *                         and a Hogwild model has nothing to verify them by.
 *
 * Algorithms (N: ranks of the job):
 *   SHS_SHADOW_MA     result = mean of the group's round-r snapshots.
 *   SHS_SHADOW_BMUF   block momentum over the last result w_g: G = mean - w_g;
 *                     D = eta*D + zeta*G; result = w_g + D + eta*D (Nesterov)
 *                     or w_g + D; w_g = result. Defaults: zeta = 1; in
 *                     shs_shadow_sync eta = 1 - 1/N with Nesterov; on the
 *                     shadow thread eta = min(1 - 1/N, 0.5) without it.
 *   SHS_SHADOW_EASGD  elastic averaging against a center model sharded over
 *                     the ranks (rank k owns a contiguous slice): d =
 *                     alpha*(s - c), w -= d, and each slice of d is sent to
 *                     its owner, which applies c += d at its next round;
 *                     replicas + center is conserved. The center starts as
 *                     the mean of the ranks' models at shs_shadow_create.
 *                     Default alpha = 0.5/N. Pull path only.
 *
 * Wire (shs_shadow_params_t.wire, SHS_SHADOW_WIRE). SHS_WIRE_BF16 publishes
 * each snapshot as bfloat16 (rounded to nearest even): every round reads
 * half the bytes. Each member decodes what it reads and takes the mean in
 * float32, and a rank applies the result against the decoding of its own
 * published snapshot, w += result - bf16(snapshot), not against its float32
 * model: the members' moves still sum to zero (the group's sum is kept to
 * float32 rounding, as with float32 snapshots), and each rank keeps its own
 * rounding residual (at most 2^-8 of each value) in its model, where the
 * next round publishes it again. So the replicas agree to bf16 precision,
 * not exactly; shs_shadow_finish makes them equal (it averages in float32).
 * MA and BMUF on the pull path only (other combinations: SHS_ERR_UNSUPPORTED).
 * Every rank must use the same wire: shs_shadow_create fails with
 * SHS_ERR_SIZE_MISMATCH on every rank otherwise (its agreement; a rank that
 * rejoined, which skips it, is caught by the rounds: each rank skips the
 * peers whose header shows the other format, and the round returns
 * SHS_ERR_SIZE_MISMATCH).
 *
 * Failures. A peer counts as failed when the transport failed it (rma.h) or
 * when a living peer's published header says so, which spreads a failure to
 * every survivor within a few rounds. The engine logs the peer once, stops
 * reading it, and forms the groups of later rounds over the living ranks
 * with the same rule on every survivor, until a new process of that rank
 * rejoins (below). The ring path
 * falls back to the pull path for good; EASGD leaves the dead owner's center
 * slice alone. A peer seen stopped that then goes away is left out the same
 * way but not counted as failed. The round in which a rank first sees a
 * failure returns SHS_ERR_PEER_FAILED (shs_shadow_sync) and is counted in
 * `errors`; later rounds succeed over the living ranks (failed_peers and
 * rounds_after_failure in the stats).
 *
 * Rejoin (MA and BMUF: pull, live and ring paths). A rank whose process died and
 * was started again with SHS_REJOIN=1 (context.h) makes the same regions and
 * calls shs_shadow_create as at the start; the call is not collective
 * there. Its engine takes the membership from a living peer, its model from
 * that peer's newest published snapshot (SHS_SHADOW_REJOIN_SEED=own keeps
 * the model the program put in the region, such as its checkpoint), and
 * starts at the newest round the living peers have published. Each rank
 * keeps a counter per rank (its incarnation: alive even, failed odd; a
 * rejoiner takes the next even one) that only grows and that peers gossip,
 * so a report of an old incarnation's failure cannot remove the new one. A
 * living rank takes the rejoiner back when it reads the rejoiner's own
 * header over the connection made to the new process (within a round or
 * two of the rejoiner's first round); from then its groups include it. The
 * members of a round agree on who averaged with whom while their views
 * differ: each verdict word carries the digest of the view its decider
 * formed the round's group from, and a member is in only for the members
 * with the same digest (the same living ranks, hence the same group), so
 * every round conserves the sum over ranks across the re-admission as
 * across a straggler. Stats: failed_peers drops back; first_sync_ns on the
 * rejoiner. After a rejoin shs_shadow_finish (MA, BMUF) settles the
 * replicas on the mean over the context, the rejoiner with the others:
 * every rank knows of the rejoin, and the connections decide who is
 * alive, not the engine's view (its thread may have stopped before it
 * took the rejoiner back). On the ring path the living ranks have fallen back to
 * pulling at the failure, and the rejoiner pulls from the start (it passes
 * the ring collective's regions: it cannot join that collective). Not
 * covered: EASGD on a rejoiner (SHS_ERR_UNSUPPORTED at create: its center
 * and inboxes are set up among ranks that create their engines together).
 *
 * Stragglers (pull path: MA and BMUF, all or DS-Sync groups). A member that
 * is alive but late (stopped, swapped, throttled) does not slow its group.
 * The rule: round r's members are the set F_r that every member of the
 * group agrees on; each member of F_r averages over exactly F_r and moves
 * by mean - its own snapshot, so the moves sum to zero over F_r; a member
 * out of F_r moves by nothing that round. F_r is agreed through one 8-byte
 * verdict word per member and round, in that member's memory, written only
 * by its peers' compare-and-swaps (shs_cas) and decided once: "in" by the
 * first peer that saw its round-r snapshot published, "out" by the first
 * peer whose straggler bound ran out (SHS_SHADOW_STRAGGLER_MS: auto is 4x
 * the median of the recent rounds that left no one out, at least 200 ms;
 * the foreground rounds of shs_shadow_sync keep SHS_SHADOW_WAIT_MS); every
 * other member reads the word and follows. A member stuck two rounds or
 * more behind is left out at once. A member whose own word no peer decided
 * within the bound (the peers that took it in stopped or died first: a
 * DS-Sync pair) withdraws: it marks round r withdrawn in its published
 * header, then reads its word once; decided "in" by then, it is in, else
 * out, and it publishes that conclusion. A peer that decides its word later
 * reads that header before reading its snapshot, sees the mark, and follows
 * the conclusion, so the members still agree. A member left out catches up:
 * it jumps to the highest round any living peer has published (the round
 * its group is in; one past it when it was 512 rounds or more behind), and
 * is read again from there. A member that was in a round and then
 * stopped while reading keeps its peers from overwriting that round's
 * snapshot slot: they sit every second round out (at no cost in time) until
 * it finishes. A straggler is never counted failed: stats count
 * straggler_skips, rounds_left_out and, per peer, shs_shadow_peer_skips.
 * SHS_SHADOW_WAIT_MS bounds only the waits no rule can cut short (a torn
 * read retried, the foreground rounds), after which the round ends with an
 * error. On this path a silent peer whose connection lives is never counted
 * failed, however long it is silent (that would end its part in the job
 * until it rejoins as a new process): only the transport fails a peer (an error
 * completion, a disconnect, SHS_OP_TIMEOUT_MS). Not covered: the ring and
 * live paths and EASGD wait as before (up to SHS_SHADOW_WAIT_MS per round),
 * and a member more than 1024 rounds behind inside one round ends that
 * round with SHS_ERR_PROTOCOL.
 *
 * Threads. The engine moves its data on an endpoint of its own (context.h),
 * created by shs_shadow_create: the shadow thread drives it between
 * shs_shadow_start and shs_shadow_stop, and the calling thread keeps the
 * context. So collectives, regions, barriers and embedding lookups on the
 * same context go on while the engine syncs; only the engine's model region
 * (shs_region_destroy) and the context (shs_ctx_destroy: its endpoint is
 * alive) are refused until shs_shadow_destroy. Engine calls (create, sync,
 * finish, destroy) are made on the thread that drives the context. To wait
 * until every rank's engine is done: shs_shadow_stop on every rank, then
 * shs_shadow_finish (collective) or shs_ctx_barrier. Foreground
 * rounds (shs_shadow_sync) run on the calling thread. Worker threads only
 * read and write the model memory; they never call the library.
 * shs_shadow_stats, shs_shadow_peer_staleness and shs_shadow_round may be
 * called from any thread at any time.
 *
 * Floating point: rounds run with subnormals flushed to zero (x86 FTZ and
 * DAZ, on the shadow thread, and around shs_shadow_sync on the caller's
 * thread, whose mode is restored): a result below FLT_MIN is written as 0.
 *
 * Hot path: a round allocates nothing and takes no lock; it posts RDMA
 * operations and polls for their completion, sleeping briefly while it waits
 * for a peer. Every wait is bounded (wait_timeout_ms).
 */
#ifndef SHADOWSYNC_SHADOW_H
#define SHADOWSYNC_SHADOW_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/context.h>
#include <shadowsync/defs.h>
#include <shadowsync/region.h>
#include <shadowsync/schedule.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque: the layout is private to the library. */
typedef struct shs_shadow shs_shadow_t;

typedef enum shs_shadow_algorithm {
    SHS_SHADOW_MA = 0,
    SHS_SHADOW_BMUF = 1,
    SHS_SHADOW_EASGD = 2
} shs_shadow_algorithm_t;

typedef enum shs_shadow_path {
    SHS_SHADOW_PATH_PULL = 0, /* RDMA READ of the peers' published round-r snapshots */
    SHS_SHADOW_PATH_RING = 1, /* ring allreduce of the snapshot inside the group */
    SHS_SHADOW_PATH_LIVE = 2  /* refused at create (SHS_ERR_UNSUPPORTED, see above) */
} shs_shadow_path_t;

/* Bits of shs_shadow_params_t.field_mask: a field is used only when its bit
 * is set; otherwise its default (or its SHS_* knob) applies. */
enum {
    SHS_SHADOW_PARAM_ALGORITHM = 1u << 0,
    SHS_SHADOW_PARAM_SCHEDULE = 1u << 1,
    SHS_SHADOW_PARAM_PATH = 1u << 2,
    SHS_SHADOW_PARAM_MIN_INTERVAL = 1u << 3,
    SHS_SHADOW_PARAM_PIN_CPUS = 1u << 4,
    SHS_SHADOW_PARAM_BMUF_ETA = 1u << 5,
    SHS_SHADOW_PARAM_BMUF_ZETA = 1u << 6,
    SHS_SHADOW_PARAM_BMUF_NESTEROV = 1u << 7,
    SHS_SHADOW_PARAM_EASGD_ALPHA = 1u << 8,
    SHS_SHADOW_PARAM_WAIT_TIMEOUT = 1u << 9,
    SHS_SHADOW_PARAM_CHUNK = 1u << 10,
    SHS_SHADOW_PARAM_WIRE = 1u << 11
};

/*
 * Parameters of shs_shadow_create(). Zero the struct, set the fields you want
 * and their bits in field_mask. Every rank must pass the same values (the
 * engine registers regions whose sizes follow from them; ranks that
 * disagree get SHS_ERR_SIZE_MISMATCH, or silently wrong groups for a
 * schedule mismatch). Strings are copied.
 */
typedef struct shs_shadow_params {
    uint64_t field_mask;
    shs_shadow_algorithm_t algorithm; /* default SHS_SHADOW_MA */
    shs_schedule_t schedule;          /* peer set per round; default SHS_SCHED_ALL */
    shs_shadow_path_t path;           /* default SHS_SHADOW_PATH_PULL */
    uint32_t min_interval_us;         /* least time from one round's start to the next
                                         (background only); default 0: back to back */
    const char *pin_cpus;             /* CPUs for the shadow thread: a list such as "3"
                                         or "2-3", "auto" (the last CPU this process
                                         may use: leave the low CPUs to the workers) or
                                         "none"; default: the SHS_SHADOW_PIN knob */
    float bmuf_eta;                   /* block momentum; default 1 - 1/N in shs_shadow_sync,
                                         min(1 - 1/N, 0.5) on the shadow thread */
    float bmuf_zeta;                  /* block learning rate; default 1 */
    int bmuf_nesterov;                /* nonzero: Nesterov look-ahead; default: on in
                                         shs_shadow_sync, off on the shadow thread */
    float easgd_alpha;                /* moving rate; default 0.5 / N */
    int wait_timeout_ms;              /* bound on waiting for one peer's snapshot or
                                         inbox credit; default SHS_SHADOW_WAIT_MS */
    size_t chunk_bytes;               /* pull granularity (bounds the receive buffers:
                                         (g - 1) chunks); default SHS_SHADOW_CHUNK */
    int wire;                         /* shs_wire_t of the published snapshots (see
                                         Wire); default SHS_SHADOW_WIRE */
} shs_shadow_params_t;

/* Statistics (shs_shadow_stats). Times in microseconds. Counters are
 * cumulative since shs_shadow_create. */
typedef struct shs_shadow_stats {
    uint64_t rounds;          /* rounds that synced with at least one peer
                                 (background and foreground) */
    double syncs_per_min;     /* rounds per minute of running time (background:
                                 since shs_shadow_start; foreground: since the first
                                 round) */
    uint64_t bytes_read;      /* RDMA READ payload, stamps included */
    uint64_t bytes_written;   /* RDMA WRITE payload (EASGD deltas) */
    double round_us_mean;     /* mean wall time of a round */
    double round_us_last;
    double round_us_max;
    double wait_us_mean;      /* mean time per round spent waiting for peers */
    uint64_t torn_retries;    /* snapshot reads retried (stamp changed, not yet published) */
    uint64_t peers_skipped;   /* peer reads given up: peer stopped, failed or timed out */
    uint64_t errors;          /* rounds that ended with an error */
    shs_status_t last_error;  /* SHS_OK if none */
    double staleness_ms_max;  /* largest per-peer staleness among the peers ever read
                                 (-1: none read yet) */
    int running;              /* nonzero while the shadow thread runs */
    uint64_t idle_rounds;     /* rounds that synced with no peer: every peer of the group
                                 was stopped or skipped, or the group was this rank
                                 alone (not counted in rounds; a one-rank job's thread
                                 runs one and then sleeps until the stop) */
    int failed_peers;         /* peers this engine counts as failed (see "Failures");
                                 a peer that stopped and then ended is not counted
                                 unless this rank missed its "stopped" */
    uint64_t rounds_after_failure; /* rounds (as in `rounds`) run while some peer was
                                 counted as failed */
    uint64_t first_failure_ns; /* CLOCK_MONOTONIC time at which the first failure was
                                 seen, 0: none */
    uint64_t straggler_skips; /* (member, round) pairs this rank's rounds left out as late
                                 (see "Stragglers"): a late peer is not counted failed */
    uint64_t rounds_left_out; /* rounds in which this rank was itself out: left out as
                                 late, withdrawn, or sat out (see "Stragglers"); it
                                 applied no move */
    uint64_t first_sync_ns;   /* CLOCK_MONOTONIC time at which the first round that
                                 synced with a peer ended, 0: none yet (on a rank that
                                 rejoined: when it was syncing again) */
} shs_shadow_stats_t;

/*
 * shs_shadow_create - set up shadow synchronization of `count` float32
 * values at byte offset `offset` of `model` (a region of ctx, 4-byte
 * aligned offset). Collective over every rank of ctx: each rank registers
 * the snapshot slots and scratch regions (and for EASGD the center slice and
 * inbox) and, for EASGD, the ranks compute the initial center (the mean of
 * their models). Does not start a thread. params may be NULL (defaults).
 *
 * Ownership: the model region stays the caller's and must outlive the
 * engine (shs_region_destroy refuses it until shs_shadow_destroy); *shadow_p
 * is the caller's, released with shs_shadow_destroy().
 *
 * Access flags the model region needs: none beyond what the caller uses it
 * for on the pull and ring paths (the engine copies it into its own
 * registered snapshot slots; the ring allreduce of shs_shadow_finish reads
 * it locally); SHS_ACCESS_REMOTE_READ on the live path, whose peers read it
 * directly. Every path works with SHS_ACCESS_LOCAL_WRITE |
 * SHS_ACCESS_REMOTE_READ.
 *
 * The arguments are checked on each rank before anything is sent; then the
 * ranks agree: the same bad argument everywhere gives every rank the same
 * status and message; a rank given another count, algorithm, path,
 * schedule, wire, BMUF or EASGD value, or whose own arguments (pin, range)
 * are bad, fails every rank with SHS_ERR_SIZE_MISMATCH (the bad one: its
 * own status); docs/failures.md, "Bad arguments".
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL, count 0, misaligned offset,
 * range outside the region, bad parameter (chunk_bytes above 1 GiB or
 * min_interval_us above INT32_MAX included: negative values cast), unknown
 * schedule); SHS_ERR_SIZE_MISMATCH;
 * SHS_ERR_UNSUPPORTED (EASGD on a path other than pull; EASGD on a context
 * that rejoined a running job, see "Rejoin"); SHS_ERR_NO_MEMORY;
 * on a rejoined rank also SHS_ERR_PEER_FAILED (no living peer to take the
 * job's state from), SHS_ERR_CONFIG or SHS_ERR_SIZE_MISMATCH (its regions
 * do not match the job's: region.h);
 * SHS_ERR_CONFIG (pin_cpus other than "auto", "none" or a CPU list);
 * SHS_ERR_BAD_STATE (ctx is an endpoint, or SHS_SHADOW_CHANNEL names a
 * channel already taken); and what shs_ctx_endpoint_create,
 * shs_region_alloc and shs_ctx_barrier return.
 */
SHS_API shs_status_t shs_shadow_create(shs_ctx_t *ctx, shs_region_t *model, size_t offset,
                                       size_t count, const shs_shadow_params_t *params,
                                       shs_shadow_t **shadow_p);

/*
 * shs_shadow_start - start the shadow thread, which runs rounds back to back
 * (at most one per min_interval_us) until shs_shadow_stop, on the engine's
 * endpoint; the context stays the caller's (see Threads). Engines on one
 * context run side by side. Not collective, but every rank should
 * start: peers wait for this rank's snapshots (bounded).
 * Status: SHS_OK; SHS_ERR_BAD_STATE (already running, poisoned by a device
 * failure, finished, or stopped before on the ring path);
 * SHS_ERR_NO_RESOURCE (no thread).
 */
SHS_API shs_status_t shs_shadow_start(shs_shadow_t *shadow);

/*
 * shs_shadow_stop - ask the thread to finish its current round, mark this
 * rank stopped in its published header (peers that would read it in later
 * rounds skip it without waiting), and join the thread. A round whose
 * snapshot this rank already published is completed first (its peers apply
 * it with this rank's snapshot in their mean): bounded by about twice
 * wait_timeout_ms when a member neither publishes nor stops, plus
 * SHS_OP_TIMEOUT_MS per peer that died silently. Workers may keep writing
 * the model. Not collective. Returns
 * SHS_OK (also when not running).
 */
SHS_API shs_status_t shs_shadow_stop(shs_shadow_t *shadow);

/*
 * shs_shadow_sync - run one round now on the calling thread (FR-* modes:
 * the caller pauses its workers first, then resumes them). Every member of
 * this rank's group must call it for the same round (the round numbers of
 * all ranks advance together when every rank calls it equally often).
 *
 * Mixing: foreground rounds may come before a background run (every rank
 * called shs_shadow_sync equally often, so the rounds line up), never after
 * one: once shs_shadow_start has run on an engine, shs_shadow_sync returns
 * SHS_ERR_BAD_STATE (the ranks stopped at different rounds, and a stopped
 * rank is skipped by its peers: a round would include a peer on one side
 * only). For foreground rounds after a background run, destroy the engine
 * and create a new one (collective).
 *
 * FR-EASGD: an owner applies and acknowledges the deltas in its inbox only
 * inside its own shs_shadow_sync and shs_shadow_finish, and a sender whose
 * two inbox slots at an owner are full waits for that owner (up to
 * SHS_SHADOW_WAIT_MS, then the slice is skipped and the round returns
 * SHS_ERR_TIMEOUT). So after its last round a rank calls shs_shadow_finish
 * before any other collective step (a barrier first would leave a slower
 * rank waiting for this rank's credits); the finish keeps serving the inbox
 * until every rank has settled.
 * Status: SHS_OK; SHS_ERR_BAD_STATE (the shadow thread is running, it ran
 * before, shs_shadow_finish ran, or poisoned); the round's error
 * (SHS_ERR_TIMEOUT, SHS_ERR_PEER_FAILED, ...) when a peer could not be read:
 * the round then used the members it could read.
 */
SHS_API shs_status_t shs_shadow_sync(shs_shadow_t *shadow);

/*
 * shs_shadow_finish - end the run: settle what is in flight and make the
 * result exact. Collective; the thread must be stopped on every rank (after
 * shs_shadow_stop, or after the last foreground round), and the workers
 * should be done. A background round keeps the progress a rank's workers
 * made while it ran (see Rounds above), so after the stop each rank's own
 * model differs from the others by what its workers did since its last
 * round; for parameters that every example writes (output biases) that
 * drift can leave a rank's own model visibly miscalibrated
 * (docs/design.md, "Stop and finish"). So:
 *   MA, BMUF: every rank's model becomes the exact mean of the ranks'
 *             models (one ring allreduce); the sum is kept. The living
 *             ranks first vote over the mesh (each: every peer alive, its
 *             writes landed), so all settle or none does, each returning
 *             the same reason.
 *   EASGD:    every delta sent so far is applied to its owner's center
 *             slice and acknowledged, so replicas + center is conserved and
 *             shs_shadow_center reads a settled slice; replicas are kept.
 *             The ranks meet through their published headers, each serving
 *             its inbox while it waits, so a rank may enter the finish
 *             while others still run their last foreground rounds.
 * It is also the way to wait until every rank's engine is done. Once per
 * engine: afterwards it runs no more rounds and finishes no more (start,
 * sync and finish return SHS_ERR_BAD_STATE): destroy it. The ranks should
 * enter it within SHS_SHADOW_WAIT_MS of each other (EASGD waits that long
 * for each peer's fence).
 * Status: SHS_OK; SHS_ERR_BAD_STATE (this rank's thread runs, or the
 * engine finished already); SHS_ERR_PEER_FAILED (a peer failed, ended,
 * did not vote, or gave up its own finish; after a rejoin, a peer whose
 * connection is down: nothing more is changed); SHS_ERR_UNSUPPORTED (EASGD after a
 * rank rejoined during the run: nothing is changed, on every rank; see
 * "Rejoin"); SHS_ERR_TIMEOUT (a peer did not reach the finish in time);
 * SHS_ERR_INVALID_ARG; what
 * shs_coll_create and shs_allreduce_region return.
 */
SHS_API shs_status_t shs_shadow_finish(shs_shadow_t *shadow);

/*
 * shs_shadow_stats - copy the statistics to *stats_p. Thread-safe.
 * Status: SHS_OK, SHS_ERR_INVALID_ARG.
 */
SHS_API shs_status_t shs_shadow_stats(const shs_shadow_t *shadow, shs_shadow_stats_t *stats_p);

/*
 * shs_shadow_peer_staleness - age in milliseconds of the last successful
 * read of peer's snapshot (or center slice), in *ms_p; -1 when this rank
 * never read it (a peer never in its groups yet). Thread-safe.
 * Status: SHS_OK, SHS_ERR_INVALID_ARG (peer out of range or own rank).
 */
SHS_API shs_status_t shs_shadow_peer_staleness(const shs_shadow_t *shadow, int peer,
                                               double *ms_p);

/*
 * shs_shadow_peer_skips - rounds in which this rank's engine left `peer` out
 * as a straggler (it had not published the round within the straggler bound;
 * see "Stragglers"). Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL, peer out of
 * range or this rank).
 */
SHS_API shs_status_t shs_shadow_peer_skips(const shs_shadow_t *shadow, int peer,
                                           uint64_t *skips_p);

/*
 * shs_shadow_round - the next round this rank will run. Thread-safe.
 */
SHS_API uint64_t shs_shadow_round(const shs_shadow_t *shadow);

/*
 * shs_shadow_center - EASGD only: this rank's slice of the center, which
 * covers model elements [*offset_p, *offset_p + *count_p). The memory is the
 * engine's and is updated by it; read it while the engine is stopped (or
 * accept a racy read). Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL, or the
 * algorithm is not EASGD).
 */
SHS_API shs_status_t shs_shadow_center(const shs_shadow_t *shadow, const float **slice_p,
                                       size_t *offset_p, size_t *count_p);

/*
 * shs_shadow_destroy - stop the thread if it runs, wait until every rank has
 * come here (a barrier over the bootstrap: no peer reads this rank's
 * snapshots afterwards), and release the engine's regions and memory.
 * Collective. The model region is left alone. NULL is ignored.
 */
SHS_API void shs_shadow_destroy(shs_shadow_t *shadow);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_SHADOW_H */

/*
 * Guest integration test of the shadow engine, one process per rank,
 * started by tools/shs-launch (which sets SHS_RANK/SHS_SIZE/SHS_BOOTSTRAP):
 *
 *   shs-launch -n 4 --need-rdma -- shs_test_shadow CASE
 *
 * Cases (the model: rank r holds w[i] = value(r, i), workers stopped unless
 * said otherwise):
 *   ma-all     one foreground round (FR-MA) gives every rank the exact mean;
 *              then from the initial values again, the shadow thread (S-MA,
 *              all ranks) converges every rank to the mean; stats: rounds > 0,
 *              no errors, staleness below a bound while running
 *   ma-ds      S-MA with the hypercube schedule, g = 2: the exact mean
 *   ring-all, ring-ds  the same two over the ring data path (ring allreduce)
 *   easgd      S-EASGD: every replica and the center converge to the mean;
 *              after a few rounds, stop and shs_shadow_finish: replicas +
 *              center hold their initial sum (no delta left in an inbox)
 *   stop       S-MA while two worker threads keep writing the model: rank 1
 *              stops early and the others skip it without errors; stop joins
 *              within a bound; workers never blocked
 *   stop-ring  the same on the ring path (the leaving check-in)
 *   conserve   S-MA while workers add known increments: the sum over ranks
 *              is the initial sum plus every increment (bar the few lost in
 *              the delta application's load-store window); then
 *              shs_shadow_finish: every replica equal, the sum kept, no
 *              rounds accepted after it
 *   fr-easgd   FR-EASGD, rank 0 slower than the others: the ranks that
 *              are done enter shs_shadow_finish while rank 0 still needs
 *              their inbox credits; every round and the finish succeed,
 *              nothing is skipped, replicas + center keep their sum; a
 *              second finish is refused
 *   bmuf       FR-BMUF with identical replicas plus per-rank offsets: one
 *              round gives the BMUF step of the mean (checked by hand rule)
 *   wire-mismatch  rank 0 asks for bf16 snapshots, the others float32:
 *              shs_shadow_create fails with SHS_ERR_SIZE_MISMATCH on every
 *              rank, for a model of 16 floats (both slot sizes round to 64
 *              bytes) as for a larger one, and leaves the model alone; the
 *              same wire everywhere then syncs
 *   bf16-rule  one FR-MA round on bf16 snapshots of w = 1 + r/4 + 2^-10 (bf16
 *              keeps 1 + r/4 and drops the 2^-10): every rank ends at the
 *              mean of the bf16 values plus its own 2^-10, so the sum over
 *              ranks is kept; a rank that applied against its float32 model
 *              would lose the 2^-10 everywhere
 *   stall      rank 3 is stopped (SIGSTOP) while S-MA runs with workers
 *              adding, until each of the others synced 2 rounds without it
 *              (within 20 s, below the 30 s a straggler once cost every
 *              round; files named by the job token tell the stopped rank's
 *              watcher, so a slow host only makes the stall longer): the
 *              others leave it out (peer skips), never count it failed,
 *              read it again once it continues; back, it is left out of at
 *              most 5 rounds while it syncs 10; no errors and the sum over
 *              ranks is kept
 *   stall-ds   the same in DS-Sync pairs (hypercube, g = 2): a partner
 *              that took it in before it stopped withdraws
 *   rejoin     S-MA over all ranks: once the models agree, rank 2 is killed
 *              and started again by the launcher (--restart 2); the new
 *              process's engine starts from a survivor's snapshot (the
 *              mean), the survivors take it back (it is read again, no
 *              peer counted failed) and all four keep the mean; then
 *              shs_shadow_finish makes every replica equal, the sum kept
 *   rejoin-ring the same on the ring path: the survivors fall back to
 *              pulling when rank 2 dies, the rejoiner pulls from the start
 *   rejoin-ds  the same in DS-Sync pairs (hypercube, g = 2), the rejoiner
 *              starting from its own initial model (SHS_SHADOW_REJOIN_SEED
 *              =own): every rank converges to (3 mean + its model) / 4, so
 *              the rounds across the re-admission kept the sum
 *   finish-failed S-MA over all ranks, rank 2 killed (not started again):
 *              every survivor's shs_shadow_finish returns
 *              SHS_ERR_PEER_FAILED (the ranks' vote: none settles) and
 *              leaves its model as it was
 * With SHS_SHADOW_WIRE=bf16 in the environment the cases run on bf16
 * snapshots (CMake runs conserve and stop-conserve so).
 *
 * Exit status: 0 pass, 1 fail, 77 no RDMA device.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shadowsync/shadowsync.h>
#include <shadowsync/shadow.h>

#include "harness.h"

#define N_ELEMS 30011             /* not a multiple of anything: partial chunks and slices */
#define CHUNK_BYTES (64 * 1024)   /* several pieces per snapshot */
#define STALENESS_BOUND_MS 10000.0
#define STOP_BOUND_S 15.0
#define RUN_BOUND_S 120.0
#define FR_EASGD_ROUNDS 12
#define FR_EASGD_SLOW_US (300 * 1000) /* rank 0's pause before each round */

/* Rank r's initial value of element i: spread over ranks and positions. */
static float value(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 17)) - 3.5f * (float)r + (float)(i % 5) * 0.25f;
}

static float mean_value(int n, size_t i)
{
    double s = 0;
    for (int r = 0; r < n; r++)
        s += value(r, i);
    return (float)(s / n);
}

static void fill(float *w, int r)
{
    for (size_t i = 0; i < N_ELEMS; i++)
        w[i] = value(r, i);
}

/* every element within tol of the mean (relative to max(1, |mean|)) */
static void check_mean(const float *w, size_t off, size_t len, int n, float tol,
                       const char *what)
{
    for (size_t k = 0; k < len; k++) {
        float want = mean_value(n, off + k);
        float scale = fabsf(want) > 1.0f ? fabsf(want) : 1.0f;
        if (fabsf(w[k] - want) > tol * scale)
            fail("%s: element %zu is %.9g, the mean is %.9g", what, off + k, (double)w[k],
                 (double)want);
    }
}

/* Wait until this rank's engine has done `rounds` rounds; check(arg), when
 * given, runs before each poll (it fails the test itself). */
static void wait_rounds_checked(shs_shadow_t *sh, uint64_t rounds, void (*check)(const void *),
                                const void *arg)
{
    double t0 = now_s();
    shs_shadow_stats_t s;
    for (;;) {
        if (check != NULL)
            check(arg);
        CHECK_OK(shs_shadow_stats(sh, &s));
        if (s.rounds >= rounds)
            return;
        if (!s.running)
            fail("the shadow thread stopped by itself after %llu rounds (%s)",
                 (unsigned long long)s.rounds, shs_status_string(s.last_error));
        if (now_s() - t0 > RUN_BOUND_S)
            fail("only %llu of %llu rounds in %.0f s", (unsigned long long)s.rounds,
                 (unsigned long long)rounds, RUN_BOUND_S);
        usleep(10 * 1000);
    }
}

static void wait_rounds(shs_shadow_t *sh, uint64_t rounds)
{
    wait_rounds_checked(sh, rounds, NULL, NULL);
}

static void check_stats(shs_shadow_t *sh, int n, const char *what)
{
    shs_shadow_stats_t s;
    CHECK_OK(shs_shadow_stats(sh, &s));
    if (s.rounds == 0 || s.syncs_per_min <= 0 || s.bytes_read == 0 || s.round_us_mean <= 0)
        fail("%s: stats rounds %llu, syncs/min %.1f, bytes %llu, round %.1f us", what,
             (unsigned long long)s.rounds, s.syncs_per_min, (unsigned long long)s.bytes_read,
             s.round_us_mean);
    if (s.errors != 0)
        fail("%s: %llu rounds with errors (last: %s)", what, (unsigned long long)s.errors,
             shs_status_string(s.last_error));
    if (!(s.staleness_ms_max >= 0 && s.staleness_ms_max < STALENESS_BOUND_MS))
        fail("%s: staleness %.1f ms", what, s.staleness_ms_max);
    for (int p = 0; p < n; p++) {
        double ms;
        if (p == g_rank)
            continue;
        CHECK_OK(shs_shadow_peer_staleness(sh, p, &ms));
        if (ms > STALENESS_BOUND_MS)
            fail("%s: staleness of peer %d is %.1f ms", what, p, ms);
    }
    if (g_rank == 0)
        printf("%s: %llu rounds, %.0f syncs/min, %.1f us/round, staleness max %.1f ms, "
               "%llu torn retries, %llu skipped\n",
               what, (unsigned long long)s.rounds, s.syncs_per_min, s.round_us_mean,
               s.staleness_ms_max, (unsigned long long)s.torn_retries,
               (unsigned long long)s.peers_skipped);
}

static shs_shadow_params_t base_params(shs_shadow_algorithm_t algo)
{
    shs_shadow_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_SHADOW_PARAM_ALGORITHM | SHS_SHADOW_PARAM_CHUNK | SHS_SHADOW_PARAM_PIN_CPUS;
    p.algorithm = algo;
    p.chunk_bytes = CHUNK_BYTES;
    p.pin_cpus = "none";
    return p;
}

/* S-MA over all ranks, or in DS-Sync pairs (hypercube, g = 2). */
static shs_shadow_params_t ma_params(bool pairs)
{
    shs_shadow_params_t p = base_params(SHS_SHADOW_MA);
    if (pairs) {
        p.field_mask |= SHS_SHADOW_PARAM_SCHEDULE;
        p.schedule.kind = SHS_SCHED_HYPERCUBE;
        p.schedule.group_size = 2;
    }
    return p;
}

/* ------------------------------------------------------------------ MA */

static void case_ma(shs_ctx_t *ctx, shs_region_t *model, bool ds, bool ring)
{
    int n = shs_ctx_size(ctx);
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = ma_params(ds);
    const char *what = ring ? (ds ? "s-ma ring hypercube g=2" : "s-ma ring all ranks")
                            : (ds ? "s-ma hypercube g=2" : "s-ma all ranks");
    if (ring) {
        p.field_mask |= SHS_SHADOW_PARAM_PATH;
        p.path = SHS_SHADOW_PATH_RING;
    }
    shs_shadow_t *sh;
    fill(w, g_rank);
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));

    if (!ds) {
        /* FR-MA: one foreground round of all ranks is the exact mean */
        CHECK_OK(shs_shadow_sync(sh));
        check_mean(w, 0, N_ELEMS, n, 1e-6f, "one foreground round");
        if (shs_shadow_round(sh) != 1)
            fail("round counter %llu after one round", (unsigned long long)shs_shadow_round(sh));
        fill(w, g_rank);
    }

    /* S-MA in the background; hypercube g = 2 needs log2(n) rounds */
    CHECK_OK(shs_shadow_start(sh));
    if (shs_shadow_start(sh) != SHS_ERR_BAD_STATE)
        fail("a second start was accepted");
    if (shs_shadow_sync(sh) != SHS_ERR_BAD_STATE)
        fail("a foreground round was accepted while the thread runs");
    wait_rounds(sh, 20);
    check_stats(sh, n, what);
    CHECK_OK(shs_shadow_stop(sh));
    check_mean(w, 0, N_ELEMS, n, 1e-5f, what);
    shs_shadow_destroy(sh);
}

/* --------------------------------------------------------------- EASGD */

/* After shs_shadow_finish: the replicas and the center slices together
 * hold the initial sum (the center starts at the mean: (1 + 1/n) x the sum
 * of the ranks' initial models). Collective. */
static void check_easgd_sum(shs_ctx_t *ctx, shs_shadow_t *sh, const float *w, const char *what)
{
    int n = shs_ctx_size(ctx);
    const float *c;
    size_t off, len;
    CHECK_OK(shs_shadow_center(sh, &c, &off, &len));
    shs_region_t *res;
    CHECK_OK(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &res));
    double *mine = shs_region_addr(res);
    mine[0] = 0;
    for (size_t i = 0; i < N_ELEMS; i++)
        mine[0] += w[i];
    for (size_t i = 0; i < len; i++)
        mine[0] += c[i];
    CHECK_OK(shs_ctx_barrier(ctx));
    if (g_rank == 0) {
        double total = mine[0], want = 0;
        for (int r = 1; r < n; r++) {
            CHECK_OK(shs_read(ctx, r, res, 64, res, 0, 8, SHS_OP_SIGNAL));
            CHECK_OK(shs_flush(ctx, r, SHS_TIMEOUT_DEFAULT));
            total += mine[8];
        }
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < N_ELEMS; i++)
                want += value(r, i) * (1.0 + 1.0 / n);
        printf("%s: replicas + center %.3f, initial %.3f\n", what, total, want);
        if (fabs(total - want) > 1e-5 * fabs(want) + 1.0)
            fail("%s: replicas + center is %.3f, expected %.3f", what, total, want);
    }
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_region_destroy(res);
}

/* The replicas stay near the hull of the initial values: every EASGD step
 * moves w toward a center that is itself a mix of the replicas. A center
 * read torn within a float (a read racing the owner's update) is garbage
 * far outside it, and moves w by alpha times that garbage. Watched on the
 * live model while the engine runs, not only at the end (later rounds
 * would hide it). */
typedef struct hull_arg {
    const float *w;
    int n;
} hull_arg_t;

static void check_in_hull(const void *arg)
{
    const float *w = ((const hull_arg_t *)arg)->w;
    int n = ((const hull_arg_t *)arg)->n;
    for (size_t i = 0; i < N_ELEMS; i++) {
        uint32_t bits = __atomic_load_n((const uint32_t *)(const void *)&w[i], __ATOMIC_RELAXED);
        float v, lo = value(0, i), hi = lo;
        memcpy(&v, &bits, sizeof(v));
        for (int r = 1; r < n; r++) {
            lo = fminf(lo, value(r, i));
            hi = fmaxf(hi, value(r, i));
        }
        float margin = 0.25f * (hi - lo) + 0.01f;
        if (!(v >= lo - margin && v <= hi + margin))
            fail("s-easgd: element %zu of the live model is %.6g, outside [%.6g, %.6g] "
                 "(a torn read of the center?)", i, (double)v, (double)(lo - margin),
                 (double)(hi + margin));
    }
}

static void case_easgd(shs_ctx_t *ctx, shs_region_t *model)
{
    int n = shs_ctx_size(ctx);
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = base_params(SHS_SHADOW_EASGD);
    shs_shadow_t *sh;
    fill(w, g_rank);
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    const float *c;
    size_t off, len;
    CHECK_OK(shs_shadow_center(sh, &c, &off, &len));
    if (len == 0 || off + len > N_ELEMS)
        fail("center slice [%zu, +%zu)", off, len);
    check_mean(c, off, len, n, 1e-6f, "initial center");

    CHECK_OK(shs_shadow_start(sh));
    /* alpha = 0.5/n: the replicas close 1/8 of their gap per round (n = 4) */
    hull_arg_t hull = {.w = w, .n = n};
    wait_rounds_checked(sh, 100, check_in_hull, &hull);
    check_stats(sh, n, "s-easgd");
    CHECK_OK(shs_shadow_stop(sh));
    CHECK_OK(shs_shadow_finish(sh)); /* every rank stopped, every delta applied */
    check_mean(w, 0, N_ELEMS, n, 1e-3f, "s-easgd replica");
    check_mean(c, off, len, n, 1e-3f, "s-easgd center");
    shs_shadow_destroy(sh);

    /* a few rounds only, so the last deltas are large: after the finish the
     * replicas and the center together hold their initial sum */
    fill(w, g_rank);
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    CHECK_OK(shs_shadow_start(sh));
    wait_rounds(sh, 3 + (uint64_t)g_rank);
    CHECK_OK(shs_shadow_stop(sh));
    CHECK_OK(shs_shadow_finish(sh));
    check_easgd_sum(ctx, sh, w, "s-easgd finish");
    shs_shadow_destroy(sh);
}

/* FR-EASGD at unequal paces: rank 0 sleeps between its rounds, so the
 * others do theirs and enter shs_shadow_finish while rank 0 still needs
 * their inbox credits; an owner inside finish keeps serving its inbox, so
 * every round and the finish succeed, nothing is skipped, and the sum is
 * kept. */
static void case_fr_easgd(shs_ctx_t *ctx, shs_region_t *model)
{
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = base_params(SHS_SHADOW_EASGD);
    shs_shadow_t *sh;
    fill(w, g_rank);
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    for (int r = 0; r < FR_EASGD_ROUNDS; r++) {
        if (g_rank == 0)
            usleep(FR_EASGD_SLOW_US);
        CHECK_OK(shs_shadow_sync(sh));
    }
    CHECK_OK(shs_shadow_finish(sh));
    if (shs_shadow_finish(sh) != SHS_ERR_BAD_STATE) /* once per engine */
        fail("fr-easgd: a second shs_shadow_finish was not refused");
    shs_shadow_stats_t s;
    CHECK_OK(shs_shadow_stats(sh, &s));
    if (s.rounds != FR_EASGD_ROUNDS || s.errors != 0 || s.peers_skipped != 0)
        fail("fr-easgd: %llu rounds, %llu errors, %llu skipped (last error %s)",
             (unsigned long long)s.rounds, (unsigned long long)s.errors,
             (unsigned long long)s.peers_skipped, shs_status_string(s.last_error));
    check_easgd_sum(ctx, sh, w, "fr-easgd finish");
    shs_shadow_destroy(sh);
}

/* ---------------------------------------------------------------- stop */

typedef struct worker {
    float *w;
    atomic_bool *quit;
    unsigned long steps;
    int id;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *wk = arg;
    unsigned x = (unsigned)(g_rank * 7919 + wk->id);
    while (!atomic_load_explicit(wk->quit, memory_order_relaxed)) {
        x = x * 1103515245u + 12345u;
        size_t i = (x >> 8) % N_ELEMS;
        wk->w[i] += 0.001f; /* Hogwild: plain, unsynchronized */
        wk->steps++;
    }
    return NULL;
}

static void case_stop(shs_ctx_t *ctx, shs_region_t *model, bool ring)
{
    int n = shs_ctx_size(ctx);
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = base_params(SHS_SHADOW_MA);
    if (ring) {
        p.field_mask |= SHS_SHADOW_PARAM_PATH;
        p.path = SHS_SHADOW_PATH_RING;
    }
    shs_shadow_t *sh;
    fill(w, g_rank);
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));

    atomic_bool quit = false;
    worker_t wk[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        wk[i] = (worker_t){.w = w, .quit = &quit, .id = i};
        if (pthread_create(&th[i], NULL, worker_main, &wk[i]) != 0)
            fail("worker thread");
    }
    CHECK_OK(shs_shadow_start(sh));
    /* rank 1 stops early: the others must skip it, not hang or fail */
    wait_rounds(sh, g_rank == 1 ? 5 : 15);
    double t0 = now_s();
    CHECK_OK(shs_shadow_stop(sh));
    double took = now_s() - t0;
    if (took > STOP_BOUND_S)
        fail("stop took %.1f s while workers write", took);
    /* no foreground round after a background run, on either path (the ring
     * path once answered SHS_ERR_CANCELED, which shadow.h does not list) */
    if (shs_shadow_sync(sh) != SHS_ERR_BAD_STATE)
        fail("a foreground round after the background run was not refused");
    /* the workers were never blocked: they still advance (under emulation
     * with 8 workers on 2 CPUs, give them a moment to be scheduled) */
    unsigned long before = wk[0].steps + wk[1].steps;
    for (int i = 0; i < 50 && wk[0].steps + wk[1].steps == before; i++)
        usleep(100 * 1000);
    if (wk[0].steps + wk[1].steps == before)
        fail("the workers made no progress in 5 s after stop");
    atomic_store(&quit, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    shs_shadow_stats_t s;
    CHECK_OK(shs_shadow_stats(sh, &s));
    if (s.running || s.rounds < 5)
        fail("after stop: running %d, rounds %llu", s.running, (unsigned long long)s.rounds);
    if (s.errors != 0)
        fail("%llu rounds with errors (last: %s): a stopped rank must be skipped, not waited for",
             (unsigned long long)s.errors, shs_status_string(s.last_error));
    for (size_t i = 0; i < N_ELEMS; i++)
        if (!isfinite(w[i]))
            fail("element %zu is not finite", i);
    if (g_rank == 0)
        printf("%s: joined in %.3f s while workers wrote (%lu worker steps), %llu rounds, "
               "%llu peers skipped\n",
               ring ? "stop (ring)" : "stop", took, wk[0].steps + wk[1].steps,
               (unsigned long long)s.rounds,
               (unsigned long long)s.peers_skipped);
    (void)n;
    shs_shadow_destroy(sh);
}

/* ------------------------------------------------------------ conserve */

typedef struct counter {
    float *w;
    atomic_bool *quit;
    unsigned long adds;
    float inc; /* what one add adds (exact in float for the sums here) */
    int id;
} counter_t;

/* Adds 1 to elements of its own parity only: the two workers of a rank never
 * race with each other, so every lost increment is one the shadow thread's
 * delta application overwrote. */
static void *counter_main(void *arg)
{
    counter_t *c = arg;
    unsigned x = (unsigned)(g_rank * 7919 + c->id * 104729 + 1);
    while (!atomic_load_explicit(c->quit, memory_order_relaxed)) {
        x = x * 1103515245u + 12345u;
        size_t i = ((x >> 8) % (N_ELEMS / 2)) * 2 + (size_t)c->id;
        c->w[i] += c->inc;
        c->adds++;
    }
    return NULL;
}

/* Rank 0: the sum over ranks of the models is the initial sum plus every
 * increment (adds: this rank's), within the Hogwild races of
 * shs__delta_apply. Returns the sum (rank 0; 0 elsewhere). */
static double check_conserved(shs_ctx_t *ctx, shs_region_t *res, const float *w, double initial,
                              double adds_mine, const char *what, uint64_t rounds)
{
    int n = shs_ctx_size(ctx);
    double *mine = shs_region_addr(res);
    double before = 0;
    mine[0] = 0;
    for (size_t i = 0; i < N_ELEMS; i++)
        mine[0] += w[i];
    mine[1] = adds_mine;
    CHECK_OK(shs_ctx_barrier(ctx));
    if (g_rank == 0) {
        double total = mine[0], adds = mine[1];
        for (int r = 1; r < n; r++) {
            CHECK_OK(shs_read(ctx, r, res, 64, res, 0, 16, SHS_OP_SIGNAL));
            CHECK_OK(shs_flush(ctx, r, SHS_TIMEOUT_DEFAULT));
            total += mine[8];
            adds += mine[9];
        }
        double lost = initial + adds - total;
        printf("%s: %.0f added over %llu rounds, sum off by %.3f (lost increments "
               "or rounding)\n", what, adds, (unsigned long long)rounds, lost);
        /* the Hogwild races of shs__delta_apply (rules.h): a worker's
         * increment lost (lost > 0) or a round's move of one element lost
         * under a worker's read-modify-write (either sign; seen: -39.75 of
         * 31.6M increments); plus rounding, a few ulps per element and round */
        if (lost < -1.0 - adds * 1e-3 || lost > 1.0 + adds * 1e-3)
            fail("%s: the ranks' sum is %.3f, expected %.3f (+%.0f increments)", what, total,
                 initial + adds, adds);
        before = total;
    }
    return before;
}

/* Rank 0: the sum over ranks of the models (res: this rank's sum at 0,
 * peers' read to 64). Returns the sum (rank 0; 0 elsewhere). */
static double ranks_sum(shs_ctx_t *ctx, shs_region_t *res, const float *w, double *chk_p)
{
    double *mine = shs_region_addr(res);
    if (shs_ctx_size(ctx) > 64)
        fail("ranks_sum: more than 64 ranks");
    mine[0] = 0;
    mine[1] = 0;
    for (size_t i = 0; i < N_ELEMS; i++) {
        mine[0] += w[i];
        mine[1] += w[i] * (double)(i % 97);
    }
    CHECK_OK(shs_ctx_barrier(ctx));
    double total = 0;
    if (g_rank == 0) {
        total = mine[0];
        for (int r = 1; r < shs_ctx_size(ctx); r++) {
            CHECK_OK(shs_read(ctx, r, res, 64, res, 0, 16, SHS_OP_SIGNAL));
            CHECK_OK(shs_flush(ctx, r, SHS_TIMEOUT_DEFAULT));
            total += mine[8];
            chk_p[2 * r] = mine[8];
            chk_p[2 * r + 1] = mine[9];
        }
        chk_p[0] = mine[0];
        chk_p[1] = mine[1];
    }
    CHECK_OK(shs_ctx_barrier(ctx)); /* res is free again */
    return total;
}

/* After shs_shadow_finish (MA, BMUF): every replica equal (its sum and a
 * weighted checksum), the sum over ranks still before (rank 0's). */
static void check_finished(shs_ctx_t *ctx, shs_region_t *res, const float *w, double before,
                           const char *what)
{
    double chk[2 * 64];
    double total = ranks_sum(ctx, res, w, chk);
    if (g_rank != 0)
        return;
    for (int r = 1; r < shs_ctx_size(ctx); r++)
        if (fabs(chk[2 * r] - chk[0]) > 1e-6 * fabs(chk[0]) + 1.0 ||
            fabs(chk[2 * r + 1] - chk[1]) > 1e-6 * fabs(chk[1]) + 1.0)
            fail("%s: rank %d holds sum %.3f / checksum %.3f, rank 0 %.3f / %.3f: the "
                 "replicas differ", what, r, chk[2 * r], chk[2 * r + 1], chk[0], chk[1]);
    printf("%s: every replica equal, sum %.3f (before %.3f)\n", what, total, before);
    if (fabs(total - before) > 1e-5 * fabs(before) + 1.0)
        fail("%s: the sum moved from %.3f to %.3f", what, before, total);
}

/*
 * S-MA with workers adding known increments while rounds run: every round
 * averages the same snapshots on all its members, and each result is applied
 * as a delta, so sum over ranks of the models = initial sum + every
 * increment, except increments lost in the load-store window of the delta
 * application (a handful). A corrupted, torn or misapplied round shows as a
 * large difference either way.
 */
static void case_conserve(shs_ctx_t *ctx, shs_region_t *model, bool staggered)
{
    int n = shs_ctx_size(ctx);
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = base_params(SHS_SHADOW_MA);
    shs_shadow_t *sh;
    shs_region_t *res;
    fill(w, g_rank);
    CHECK_OK(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &res));
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    double initial = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < N_ELEMS; i++)
            initial += value(r, i);

    atomic_bool quit = false;
    counter_t c[2];
    pthread_t th[2];
    CHECK_OK(shs_shadow_start(sh));
    for (int i = 0; i < 2; i++) {
        /* staggered: the ranks add at different rates, so their models
         * differ at every round, and stop one after the other while the
         * workers still add: a rank that stopped without applying a round
         * its peers applied with its snapshot breaks the sum */
        c[i] = (counter_t){.w = w, .quit = &quit, .id = i,
                           .inc = staggered ? (float)(g_rank + 1) : 1.0f};
        if (pthread_create(&th[i], NULL, counter_main, &c[i]) != 0)
            fail("worker thread");
    }
    shs_shadow_stats_t s;
    if (staggered) {
        /* round numbers, not synced rounds: the last rank to stop runs
         * rounds alone, which do not count as syncs */
        uint64_t until = 6 + 3 * (uint64_t)g_rank;
        double t0 = now_s();
        while (shs_shadow_round(sh) < until) {
            if (now_s() - t0 > RUN_BOUND_S)
                fail("stop-conserve: round %llu of %llu in %.0f s",
                     (unsigned long long)shs_shadow_round(sh), (unsigned long long)until,
                     RUN_BOUND_S);
            usleep(2000);
        }
        CHECK_OK(shs_shadow_stop(sh));
        CHECK_OK(shs_ctx_barrier(ctx)); /* every rank stopped; then the workers */
        atomic_store(&quit, true);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
    } else {
        wait_rounds(sh, 8);
        atomic_store(&quit, true);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        CHECK_OK(shs_shadow_stats(sh, &s));
        wait_rounds(sh, s.rounds + 3); /* rounds with the workers done */
        CHECK_OK(shs_shadow_stop(sh));
    }
    CHECK_OK(shs_shadow_stats(sh, &s));
    if (s.errors != 0)
        fail("conserve: %llu rounds with errors (%s)", (unsigned long long)s.errors,
             shs_status_string(s.last_error));

    double before = check_conserved(ctx, res, w, initial,
                                     (double)(c[0].adds + c[1].adds) * (double)c[0].inc,
                                     staggered ? "conserve (staggered stops)" : "conserve",
                                     s.rounds);
    /* the end of the run: every replica becomes the exact mean (the drift
     * since each rank's last round is gone), the sum is kept */
    CHECK_OK(shs_shadow_finish(sh));
    check_finished(ctx, res, w, before, "finish");
    if (shs_shadow_start(sh) != SHS_ERR_BAD_STATE || shs_shadow_sync(sh) != SHS_ERR_BAD_STATE)
        fail("rounds accepted after shs_shadow_finish");
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_shadow_destroy(sh);
    shs_region_destroy(res);
}

/* ---------------------------------------------------------------- stall */

#define STALL_RANK 3
#define STALL_AT_MS 500      /* after the start barrier */
#define STALL_SYNC_BOUND_S 20.0 /* the others' 2 rounds without it: below
                                   SHS_SHADOW_WAIT_MS (30 s) */
#define STALL_MAX_S 90.0     /* the watcher continues it by then, whatever */

static int g_stall_pipe = -1; /* STALL_RANK: the watcher's go */
static pid_t g_watcher = -1;

/* The files through which the ranks and the stopped rank's watcher meet:
 * <TMPDIR or /tmp>/shs-stall-<job token>.<what>. */
static void stall_path(char *buf, size_t len, const char *what)
{
    const char *dir = getenv("TMPDIR"), *token = getenv("SHS_JOB_TOKEN");
    if (token == NULL)
        fail("stall: SHS_JOB_TOKEN is unset (run it under shs-launch)");
    snprintf(buf, len, "%s/shs-stall-%.64s.%s", dir != NULL ? dir : "/tmp", token, what);
}

static void stall_put(const char *what, double t)
{
    char path[512], tmp[530];
    stall_path(path, sizeof(path), what);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%.6f\n", t) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
        fail("stall: cannot write %s: %s", path, strerror(errno));
}

/* The time in file `what`, once it is there (at most bound_s); -1 if not. */
static double stall_get(const char *what, double bound_s)
{
    char path[512];
    stall_path(path, sizeof(path), what);
    for (double t0 = now_s(); now_s() - t0 < bound_s; usleep(20 * 1000)) {
        FILE *f = fopen(path, "r");
        double t;
        if (f == NULL)
            continue;
        int got = fscanf(f, "%lf", &t);
        fclose(f);
        if (got == 1)
            return t;
    }
    return -1;
}

static void stall_cleanup(int n)
{
    char path[512], what[32];
    stall_path(path, sizeof(path), "stopped");
    unlink(path);
    stall_path(path, sizeof(path), "cont");
    unlink(path);
    for (int r = 0; r < n; r++) {
        snprintf(what, sizeof(what), "done%d", r);
        stall_path(path, sizeof(path), what);
        unlink(path);
    }
}

/* Before any verbs resource (a fork after registration is unsafe): a child
 * that, told to, stops this process (SIGSTOP), and continues it once every
 * other rank says it synced without it (or after STALL_MAX_S). */
static void stall_watcher_fork(int n)
{
    int fd[2];
    if (pipe(fd) != 0)
        fail("pipe: %s", strerror(errno));
    pid_t parent = getpid();
    g_watcher = fork();
    if (g_watcher < 0)
        fail("fork: %s", strerror(errno));
    if (g_watcher == 0) {
        char go;
        close(fd[1]);
        if (read(fd[0], &go, 1) != 1)
            _exit(0); /* the parent ended first */
        usleep(STALL_AT_MS * 1000);
        kill(parent, SIGSTOP);
        double t_stop = now_s();
        stall_put("stopped", t_stop);
        fprintf(stderr, "rank %d stopped (SIGSTOP)\n", g_rank);
        for (int r = 0; r < n && now_s() - t_stop < STALL_MAX_S; r++) {
            char what[32];
            snprintf(what, sizeof(what), "done%d", r);
            if (r != g_rank)
                (void)stall_get(what, STALL_MAX_S - (now_s() - t_stop));
        }
        kill(parent, SIGCONT);
        stall_put("cont", now_s());
        fprintf(stderr, "rank %d continued (SIGCONT) after %.2f s\n", g_rank,
                now_s() - t_stop);
        _exit(0);
    }
    close(fd[0]);
    g_stall_pipe = fd[1];
}

/*
 * A rank stopped while S-MA runs with workers adding (the
 * models differ at every round): the others keep syncing among themselves
 * during the stall, never count it failed, leave it out of rounds
 * (shs_shadow_peer_skips), read it again once it continues, and the sum over
 * ranks is conserved throughout.
 */
static void case_stall(shs_ctx_t *ctx, shs_region_t *model, bool ds)
{
    int n = shs_ctx_size(ctx);
    float *w = shs_region_addr(model);
    /* pairs: the straggler's partner may have taken it in before it
     * stopped, and then withdraws (admit.c) */
    shs_shadow_params_t p = ma_params(ds);
    shs_shadow_t *sh;
    shs_region_t *res;
    fill(w, g_rank);
    CHECK_OK(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &res));
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    double initial = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < N_ELEMS; i++)
            initial += value(r, i);
    atomic_bool quit = false;
    counter_t c[2];
    pthread_t th[2];
    CHECK_OK(shs_shadow_start(sh));
    for (int i = 0; i < 2; i++) {
        c[i] = (counter_t){.w = w, .quit = &quit, .id = i, .inc = (float)(g_rank + 1)};
        if (pthread_create(&th[i], NULL, counter_main, &c[i]) != 0)
            fail("worker thread");
    }
    wait_rounds(sh, 8); /* the straggler bound has round times to go by */
    CHECK_OK(shs_ctx_barrier(ctx));
    if (g_rank == STALL_RANK && write(g_stall_pipe, "g", 1) != 1)
        fail("watcher pipe: %s", strerror(errno));
    shs_shadow_stats_t s;
    if (g_rank != STALL_RANK) {
        /* inside the stall (a round in flight at the stop has ended): the
         * others sync among themselves */
        double t_stop = stall_get("stopped", RUN_BOUND_S);
        if (t_stop < 0)
            fail("stall: rank %d was not stopped within %.0f s", STALL_RANK, RUN_BOUND_S);
        while (now_s() - t_stop < 0.5)
            usleep(10000);
        uint64_t r0 = shs_shadow_round(sh), skips = 0;
        CHECK_OK(shs_shadow_stats(sh, &s));
        uint64_t synced0 = s.rounds, out0 = s.rounds_left_out;
        /* in pairs (hypercube over 4 ranks) rank 0 never meets it, and its
         * partners may sit its rounds out instead (a slot it was reading) */
        bool meets = !ds || (g_rank ^ STALL_RANK) == 1 || (g_rank ^ STALL_RANK) == 2;
        for (;;) {
            CHECK_OK(shs_shadow_stats(sh, &s));
            CHECK_OK(shs_shadow_peer_skips(sh, STALL_RANK, &skips));
            bool went_on = s.rounds >= synced0 + 2;
            bool left_out = !meets || skips > 0 || s.rounds_left_out > out0;
            if (went_on && left_out)
                break;
            if (now_s() - t_stop > STALL_SYNC_BOUND_S)
                fail("stall: %.0f s into the stall, %llu rounds synced (2 expected), peer %d "
                     "left out of %llu, this rank of %llu", STALL_SYNC_BOUND_S,
                     (unsigned long long)(s.rounds - synced0), STALL_RANK,
                     (unsigned long long)skips,
                     (unsigned long long)(s.rounds_left_out - out0));
            usleep(10000);
        }
        printf("rank %d: during the stall rounds %llu -> %llu, %llu synced, peer %d left out "
               "of %llu rounds (%.2f s)\n", g_rank, (unsigned long long)r0,
               (unsigned long long)shs_shadow_round(sh),
               (unsigned long long)(s.rounds - synced0), STALL_RANK, (unsigned long long)skips,
               now_s() - t_stop);
        if (s.failed_peers != 0)
            fail("stall: a straggler was counted failed");
        char what[32];
        snprintf(what, sizeof(what), "done%d", g_rank);
        stall_put(what, now_s());
        /* after it continues: read again (its staleness restarts) */
        double t_back = stall_get("cont", STALL_MAX_S + 10.0);
        if (t_back < 0)
            fail("stall: rank %d was not continued", STALL_RANK);
        for (; meets;) {
            double ms;
            CHECK_OK(shs_shadow_peer_staleness(sh, STALL_RANK, &ms));
            if (ms >= 0 && now_s() - ms / 1e3 > t_back)
                break;
            if (now_s() - t_back > RUN_BOUND_S)
                fail("stall: peer %d not read again within %.0f s of continuing",
                     STALL_RANK, RUN_BOUND_S);
            usleep(10000);
        }
        if (meets)
            printf("rank %d: peer %d read again %.2f s after it continued\n", g_rank,
                   STALL_RANK, now_s() - t_back);
    } else {
        if (stall_get("cont", STALL_MAX_S + 10.0) < 0) /* it runs again: it wrote it */
            fail("stall: no record of the continue");
        usleep(500 * 1000);
        /* back, it keeps the group's pace: the round that held it stopped
         * must not slow the next ones (its transfer rate and naps once
         * learned the stop, and it was left out of every second round for
         * seconds) */
        CHECK_OK(shs_shadow_stats(sh, &s));
        uint64_t out0 = s.rounds_left_out;
        wait_rounds(sh, s.rounds + 10);
        CHECK_OK(shs_shadow_stats(sh, &s));
        printf("rank %d: back: left out of %llu rounds while it synced 10\n", g_rank,
               (unsigned long long)(s.rounds_left_out - out0));
        if (s.rounds_left_out - out0 > 5)
            fail("stall: left out of %llu rounds while it synced 10 after it continued",
                 (unsigned long long)(s.rounds_left_out - out0));
    }
    CHECK_OK(shs_shadow_stats(sh, &s));
    wait_rounds(sh, s.rounds + 5); /* rounds with everyone back */
    atomic_store(&quit, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_OK(shs_shadow_stats(sh, &s));
    wait_rounds(sh, s.rounds + 3); /* rounds with the workers done */
    CHECK_OK(shs_ctx_barrier(ctx));
    CHECK_OK(shs_shadow_stop(sh));
    CHECK_OK(shs_shadow_stats(sh, &s));
    printf("rank %d: %llu rounds synced, %llu left out, %llu straggler skips, errors %llu "
           "\n", g_rank, (unsigned long long)s.rounds,
           (unsigned long long)s.rounds_left_out, (unsigned long long)s.straggler_skips,
           (unsigned long long)s.errors);
    if (s.errors != 0 || s.failed_peers != 0)
        fail("stall: %llu rounds with errors (%s), %d peers failed",
             (unsigned long long)s.errors, shs_status_string(s.last_error), s.failed_peers);
    CHECK_OK(shs_ctx_barrier(ctx));
    check_conserved(ctx, res, w, initial, (double)(c[0].adds + c[1].adds) * (double)c[0].inc,
                    "stall", s.rounds);
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_shadow_destroy(sh);
    shs_region_destroy(res);
    if (g_watcher > 0) {
        waitpid(g_watcher, NULL, 0);
        stall_cleanup(n); /* every rank read them: the barrier above */
    }
}

/* ---------------------------------------------------------------- rejoin */

#define REJOIN_RANK 2
#define REJOIN_TOL 1e-4f

/* Element i of the model every rank ends at: the survivors held the mean
 * of the four initial models when rank REJOIN_RANK was killed; `own`: it
 * came back with its initial model, and the rounds keep the sum. */
static float rejoin_target(size_t i, bool own)
{
    float m = mean_value(4, i);
    return own ? (3.0f * m + value(REJOIN_RANK, i)) / 4.0f : m;
}

/* The first element of w off rejoin_target (N_ELEMS: none). */
static size_t rejoin_off(const float *w, bool own)
{
    for (size_t i = 0; i < N_ELEMS; i++) {
        float want = rejoin_target(i, own), scale = fabsf(want) > 1.0f ? fabsf(want) : 1.0f;
        if (!(fabsf(w[i] - want) <= REJOIN_TOL * scale))
            return i;
    }
    return N_ELEMS;
}

/* Wait (the engine running) until the model is rejoin_target. */
static void wait_target(shs_shadow_t *sh, const float *w, bool own, const char *what)
{
    double t0 = now_s();
    size_t i;
    while ((i = rejoin_off(w, own)) != N_ELEMS) {
        shs_shadow_stats_t s;
        CHECK_OK(shs_shadow_stats(sh, &s));
        if (!s.running)
            fail("%s: the shadow thread stopped by itself (%s)", what,
                 shs_status_string(s.last_error));
        if (now_s() - t0 > RUN_BOUND_S)
            fail("%s: element %zu is %.9g after %.0f s, expected %.9g", what, i, (double)w[i],
                 RUN_BOUND_S, (double)rejoin_target(i, own));
        usleep(20 * 1000);
    }
    printf("rank %d: %s after %.2f s\n", g_rank, what, now_s() - t0);
}

/* Survivors: until rank REJOIN_RANK is taken back (no peer counted failed)
 * and, when this rank meets it, read after t_gone. */
static void wait_taken_back(shs_shadow_t *sh, bool meets, double t_gone)
{
    double t0 = now_s();
    for (;;) {
        shs_shadow_stats_t s;
        double ms = -1;
        CHECK_OK(shs_shadow_stats(sh, &s));
        CHECK_OK(shs_shadow_peer_staleness(sh, REJOIN_RANK, &ms));
        bool read = !meets || (ms >= 0 && now_s() - ms / 1e3 > t_gone);
        if (s.failed_peers == 0 && read)
            break;
        if (now_s() - t0 > RUN_BOUND_S)
            fail("rejoin: rank %d not taken back within %.0f s (failed peers %d)", REJOIN_RANK,
                 RUN_BOUND_S, s.failed_peers);
        usleep(20 * 1000);
    }
    printf("rank %d: rank %d taken back %.2f s after it was killed\n", g_rank, REJOIN_RANK,
           now_s() - t_gone);
}

/*
 * Rank REJOIN_RANK is killed once the models agree and started again by
 * the launcher (SHS_REJOIN=1): the same regions and engine set-up rejoin
 * the running job. ds: DS-Sync pairs and the rejoiner's own model; ring:
 * the ring path.
 */
static void case_rejoin(shs_ctx_t *ctx, shs_region_t *model, bool ds, bool ring)
{
    float *w = shs_region_addr(model);
    bool back = shs_ctx_rejoined(ctx) != 0, own = ds;
    shs_shadow_params_t p = ma_params(ds);
    if (ring) {
        p.field_mask |= SHS_SHADOW_PARAM_PATH;
        p.path = SHS_SHADOW_PATH_RING;
    }
    shs_shadow_t *sh;
    shs_region_t *res;
    fill(w, g_rank);
    CHECK_OK(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &res));
    double t_made = now_s();
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    if (back) {
        printf("rank %d: rejoined; engine made in %.2f s\n", g_rank, now_s() - t_made);
        if (!own && rejoin_off(w, false) != N_ELEMS)
            fail("rejoin: the engine did not start from a survivor's snapshot (element %zu is "
                 "%.9g, the survivors hold %.9g)", rejoin_off(w, false),
                 (double)w[rejoin_off(w, false)], (double)rejoin_target(rejoin_off(w, false), false));
        CHECK_OK(shs_shadow_start(sh));
        wait_rounds(sh, 3); /* synced: the others took it back */
    } else {
        CHECK_OK(shs_shadow_start(sh));
        wait_rounds(sh, 4);
        wait_target(sh, w, false, "models agree");
        CHECK_OK(shs_ctx_barrier(ctx));
        if (g_rank == REJOIN_RANK) {
            fflush(stdout);
            usleep(200 * 1000);
            raise(SIGKILL);
        }
        /* in pairs over 4 ranks, ranks 0 and 3 meet it */
        bool meets = !ds || (g_rank ^ REJOIN_RANK) == 1 || (g_rank ^ REJOIN_RANK) == 2;
        wait_taken_back(sh, meets, now_s() + 0.5);
    }
    wait_target(sh, w, own, own ? "at (3 mean + its model) / 4" : "at the mean");
    CHECK_OK(shs_ctx_barrier(ctx));
    CHECK_OK(shs_shadow_stop(sh));
    shs_shadow_stats_t s;
    CHECK_OK(shs_shadow_stats(sh, &s));
    printf("rank %d: %llu rounds synced, %d peers failed, %llu errors\n", g_rank,
           (unsigned long long)s.rounds, s.failed_peers, (unsigned long long)s.errors);
    if (s.failed_peers != 0 || s.rounds == 0)
        fail("rejoin: %d peers counted failed, %llu rounds synced at the end", s.failed_peers,
             (unsigned long long)s.rounds);
    if (back && s.errors != 0)
        fail("rejoin: the rejoined rank had %llu rounds with errors (%s)",
             (unsigned long long)s.errors, shs_status_string(s.last_error));
    /* every rank knows of the rejoin; the mean is over the context, the
     * rejoiner with the others: each rank's model moved by its own amount
     * first, so a finish that changed nothing, or left a rank out, shows */
    for (size_t i = 0; i < N_ELEMS; i++)
        w[i] += (float)(g_rank + 1) * 0.25f;
    double chk[2 * 64], before = ranks_sum(ctx, res, w, chk);
    CHECK_OK(shs_shadow_finish(sh));
    check_finished(ctx, res, w, before, "rejoin finish");
    shs_shadow_destroy(sh);
    shs_region_destroy(res);
}

/* A rank killed for good: the survivors' finish refuses alike, changing
 * nothing (each rank's model moved by its own amount first, so a finish
 * that averaged the survivors would show). */
static void case_finish_failed(shs_ctx_t *ctx, shs_region_t *model)
{
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = ma_params(false);
    shs_shadow_t *sh;
    fill(w, g_rank);
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    CHECK_OK(shs_shadow_start(sh));
    wait_rounds(sh, 3);
    CHECK_OK(shs_ctx_barrier(ctx));
    if (g_rank == REJOIN_RANK) {
        fflush(stdout);
        usleep(200 * 1000);
        raise(SIGKILL);
    }
    shs_shadow_stats_t s;
    for (double t0 = now_s();; usleep(20 * 1000)) {
        CHECK_OK(shs_shadow_stats(sh, &s));
        if (s.failed_peers > 0)
            break;
        if (now_s() - t0 > RUN_BOUND_S)
            fail("finish-failed: rank %d not counted failed within %.0f s", REJOIN_RANK,
                 RUN_BOUND_S);
    }
    CHECK_OK(shs_shadow_stop(sh));
    double before = 0, after = 0;
    for (size_t i = 0; i < N_ELEMS; i++) {
        w[i] += (float)(g_rank + 1) * 0.25f;
        before += w[i] * (double)(i % 97 + 1);
    }
    shs_status_t st = shs_shadow_finish(sh);
    for (size_t i = 0; i < N_ELEMS; i++)
        after += w[i] * (double)(i % 97 + 1);
    printf("rank %d: finish with rank %d gone: %s\n", g_rank, REJOIN_RANK,
           shs_status_string(st));
    if (st != SHS_ERR_PEER_FAILED)
        fail("finish-failed: shs_shadow_finish returned %s, expected SHS_ERR_PEER_FAILED",
             shs_status_string(st));
    if (after != before)
        fail("finish-failed: the refused finish changed the model (checksum %.6f -> %.6f)",
             before, after);
    CHECK_OK(shs_ctx_barrier(ctx)); /* among the living */
    shs_shadow_destroy(sh);
}

/* ------------------------------------------------------- wire mismatch */

static void case_wire_mismatch(shs_ctx_t *ctx, shs_region_t *model)
{
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = base_params(SHS_SHADOW_MA);
    p.field_mask |= SHS_SHADOW_PARAM_WIRE;
    p.wire = g_rank == 0 ? SHS_WIRE_BF16 : SHS_WIRE_NATIVE;
    shs_shadow_t *sh = NULL;
    const size_t tiny = 16;
    fill(w, g_rank);
    /* the ranks agree on their arguments at create: a tiny model (whose
     * slots would be the same size) and a full one fail alike */
    const size_t counts[] = {tiny, N_ELEMS};
    for (size_t k = 0; k < 2; k++) {
        shs_status_t st = shs_shadow_create(ctx, model, 0, counts[k], &p, &sh);
        if (st != SHS_ERR_SIZE_MISMATCH || sh != NULL)
            fail("wire-mismatch: create of %zu floats returned %s, expected "
                 "SHS_ERR_SIZE_MISMATCH", counts[k], shs_status_string(st));
    }
    for (size_t i = 0; i < tiny; i++)
        if (w[i] != value(g_rank, i))
            fail("wire-mismatch: a refused create changed element %zu", i);
    /* nobody was left behind: the same wire everywhere works */
    p.wire = SHS_WIRE_NATIVE;
    CHECK_OK(shs_shadow_create(ctx, model, 0, tiny, &p, &sh));
    CHECK_OK(shs_shadow_sync(sh));
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_shadow_destroy(sh);
}

static void case_bf16_rule(shs_ctx_t *ctx, shs_region_t *model)
{
    int n = shs_ctx_size(ctx);
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = base_params(SHS_SHADOW_MA);
    p.field_mask |= SHS_SHADOW_PARAM_WIRE;
    p.wire = SHS_WIRE_BF16;
    const double resid = ldexp(1.0, -10);
    for (size_t i = 0; i < N_ELEMS; i++)
        w[i] = (float)(1.0 + g_rank / 4.0 + resid);
    shs_shadow_t *sh;
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    CHECK_OK(shs_shadow_sync(sh));
    double mean = 1.0 + (n - 1) / 8.0; /* of 1 + r/4, exact in float */
    for (size_t i = 0; i < N_ELEMS; i++)
        if (fabs(w[i] - (mean + resid)) > 1e-6)
            fail("bf16-rule: element %zu is %.9g, expected the bf16 mean %.9g plus this "
                 "rank's residual %.9g", i, (double)w[i], mean, resid);
    shs_shadow_stats_t s;
    CHECK_OK(shs_shadow_stats(sh, &s));
    /* (n - 1) peers' bf16 slots, headers and stamps besides */
    if (s.bytes_read < (uint64_t)(n - 1) * N_ELEMS * 2 ||
        s.bytes_read >= (uint64_t)(n - 1) * N_ELEMS * 4)
        fail("bf16-rule: read %llu bytes for %d peers' snapshots of %d floats: expected "
             "about 2 bytes a float", (unsigned long long)s.bytes_read, n - 1, N_ELEMS);
    if (g_rank == 0)
        printf("bf16-rule: every rank at the mean plus its residual, %llu bytes read\n",
               (unsigned long long)s.bytes_read);
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_shadow_destroy(sh);
}

/* ---------------------------------------------------------------- BMUF */

static void case_bmuf(shs_ctx_t *ctx, shs_region_t *model)
{
    int n = shs_ctx_size(ctx);
    float *w = shs_region_addr(model);
    shs_shadow_params_t p = base_params(SHS_SHADOW_BMUF);
    shs_shadow_t *sh;
    /* every rank starts at 1 (w_g = 1), then moves by a per-rank offset:
     * mean = 1 + mean offset; G = mean - 1; D = G (D was 0, zeta 1);
     * w_g = 1 + G; Nesterov result = w_g + eta*D with eta = 1 - 1/n, and
     * the rank's local offset since the snapshot is kept: none here */
    for (size_t i = 0; i < N_ELEMS; i++)
        w[i] = 1.0f;
    CHECK_OK(shs_shadow_create(ctx, model, 0, N_ELEMS, &p, &sh));
    for (size_t i = 0; i < N_ELEMS; i++)
        w[i] = 1.0f + (float)g_rank * 0.5f + (float)(i % 3);
    CHECK_OK(shs_shadow_sync(sh));
    float eta = 1.0f - 1.0f / (float)n;
    double mean_off = 0;
    for (int r = 0; r < n; r++)
        mean_off += r * 0.5;
    mean_off /= n;
    for (size_t i = 0; i < N_ELEMS; i++) {
        float g = (float)(mean_off + (double)(i % 3));
        float want = 1.0f + g + eta * g;
        if (fabsf(w[i] - want) > 1e-5f * fabsf(want))
            fail("bmuf: element %zu is %.9g, expected %.9g", i, (double)w[i], (double)want);
    }
    if (g_rank == 0)
        printf("bmuf: one foreground round matches the hand rule (eta %.3f)\n", (double)eta);
    shs_shadow_destroy(sh);
}

/* -------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr,
                "usage: shs-launch -n 4 -- %s ma-all|ma-ds|ring-all|ring-ds|easgd|fr-easgd|stop|stop-ring|conserve|stop-conserve|bmuf|wire-mismatch|bf16-rule|stall|stall-ds|rejoin|rejoin-ds|rejoin-ring\n",
                argv[0]);
        return RC_FAIL;
    }
    if (getenv("SHS_RANK") == NULL) {
        fprintf(stderr, "%s: run it under tools/shs-launch\n", argv[0]);
        return RC_FAIL;
    }
    g_rank = atoi(getenv("SHS_RANK"));
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with a killed rank's */
    if (strncmp(argv[1], "stall", 5) == 0 && g_rank == STALL_RANK)
        stall_watcher_fork(atoi(getenv("SHS_SIZE") != NULL ? getenv("SHS_SIZE") : "4"));
    if (strcmp(argv[1], "rejoin-ds") == 0)
        setenv("SHS_SHADOW_REJOIN_SEED", "own", 1); /* read by the rejoiner's context */
    shs_ctx_t *ctx;
    shs_status_t st = shs_ctx_create(NULL, &ctx);
    if (st == SHS_ERR_NO_DEVICE) {
        fprintf(stderr, "rank %d: no RDMA device: skipped\n", g_rank);
        return RC_SKIP;
    }
    CHECK_OK(st);
    shs_region_t *model;
    CHECK_OK(shs_region_alloc(ctx, N_ELEMS * sizeof(float),
                              SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &model));
    double t0 = now_s();
    const char *which = argv[1];
    if (strcmp(which, "ma-all") == 0)
        case_ma(ctx, model, false, false);
    else if (strcmp(which, "ma-ds") == 0)
        case_ma(ctx, model, true, false);
    else if (strcmp(which, "ring-all") == 0)
        case_ma(ctx, model, false, true);
    else if (strcmp(which, "ring-ds") == 0)
        case_ma(ctx, model, true, true);
    else if (strcmp(which, "easgd") == 0)
        case_easgd(ctx, model);
    else if (strcmp(which, "stop") == 0)
        case_stop(ctx, model, false);
    else if (strcmp(which, "stop-ring") == 0)
        case_stop(ctx, model, true);
    else if (strcmp(which, "conserve") == 0)
        case_conserve(ctx, model, false);
    else if (strcmp(which, "stop-conserve") == 0)
        case_conserve(ctx, model, true);
    else if (strcmp(which, "fr-easgd") == 0)
        case_fr_easgd(ctx, model);
    else if (strcmp(which, "bmuf") == 0)
        case_bmuf(ctx, model);
    else if (strcmp(which, "wire-mismatch") == 0)
        case_wire_mismatch(ctx, model);
    else if (strcmp(which, "stall") == 0 || strcmp(which, "stall-ds") == 0)
        case_stall(ctx, model, which[5] != '\0');
    else if (strcmp(which, "bf16-rule") == 0)
        case_bf16_rule(ctx, model);
    else if (strcmp(which, "rejoin") == 0 || strcmp(which, "rejoin-ds") == 0 ||
             strcmp(which, "rejoin-ring") == 0)
        case_rejoin(ctx, model, strcmp(which, "rejoin-ds") == 0,
                    strcmp(which, "rejoin-ring") == 0);
    else if (strcmp(which, "finish-failed") == 0)
        case_finish_failed(ctx, model);
    else
        fail("unknown case %s", which);
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_region_destroy(model);
    shs_ctx_destroy(ctx);
    if (g_rank == 0)
        printf("PASS %s (%.1f s)\n", which, now_s() - t0);
    return RC_OK;
}

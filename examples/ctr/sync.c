/*
 * The sync driver of shs-ctr: the shadow engine's parameters from the
 * options, its start and stop around the training pass (S modes), the
 * foreground round that the workers stop for (FR modes), the end of the run
 * (shs_shadow_finish, the average of the ranks' models), and --sync-only.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

static bool power_of(int n, int g)
{
    if (g < 2)
        return false;
    while (n > 1 && n % g == 0)
        n /= g;
    return n == 1;
}

void ctr_shadow_params(const ctr_run_t *r, shs_shadow_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = SHS_SHADOW_PARAM_ALGORITHM | SHS_SHADOW_PARAM_PATH;
    p->algorithm = r->algo;
    p->path = strcmp(r->o.path, "live") == 0 ? SHS_SHADOW_PATH_LIVE
              : strcmp(r->o.path, "ring") == 0 ? SHS_SHADOW_PATH_RING
                                               : SHS_SHADOW_PATH_PULL;
    if (r->o.ds > 0 && r->o.ds < r->size) {
        p->field_mask |= SHS_SHADOW_PARAM_SCHEDULE;
        bool cube = (r->o.ds & (r->o.ds - 1)) == 0 && power_of(r->size, r->o.ds);
        p->schedule.kind = cube ? SHS_SCHED_HYPERCUBE : SHS_SCHED_GENERAL;
        p->schedule.group_size = r->o.ds;
    }
    if (r->o.interval_us > 0) {
        p->field_mask |= SHS_SHADOW_PARAM_MIN_INTERVAL;
        p->min_interval_us = r->o.interval_us;
    }
    if (r->o.pin != NULL) {
        p->field_mask |= SHS_SHADOW_PARAM_PIN_CPUS;
        p->pin_cpus = r->o.pin;
    }
    /* negative: the engine's default; other out-of-range values reach the
     * engine, which refuses them */
    if (r->o.bmuf_eta >= 0) {
        p->field_mask |= SHS_SHADOW_PARAM_BMUF_ETA;
        p->bmuf_eta = r->o.bmuf_eta;
    }
    if (r->o.bmuf_zeta >= 0) {
        p->field_mask |= SHS_SHADOW_PARAM_BMUF_ZETA;
        p->bmuf_zeta = r->o.bmuf_zeta;
    }
    if (r->o.bmuf_nesterov >= 0) {
        p->field_mask |= SHS_SHADOW_PARAM_BMUF_NESTEROV;
        p->bmuf_nesterov = r->o.bmuf_nesterov;
    }
    if (r->o.easgd_alpha >= 0) {
        p->field_mask |= SHS_SHADOW_PARAM_EASGD_ALPHA;
        p->easgd_alpha = r->o.easgd_alpha;
    }
}

void ctr_fg_sync(ctr_run_t *r)
{
    if (pthread_barrier_wait(&r->bar) == PTHREAD_BARRIER_SERIAL_THREAD) {
        atomic_store(&r->syncing, 1);
        shs_status_t st = shs_shadow_sync(r->sh);
        atomic_store(&r->syncing, 0);
        if (st != SHS_OK)
            atomic_fetch_add(&r->sync_errors, 1);
    }
    pthread_barrier_wait(&r->bar);
}

void ctr_sync_start(ctr_run_t *r)
{
    if (r->foreground) {
        uint64_t per_worker = r->o.examples / (uint64_t)r->size / (uint64_t)r->o.workers;
        r->nsync = per_worker / r->o.fr_every;
        pthread_barrier_init(&r->bar, NULL, (unsigned)r->o.workers);
    } else if (r->sync && !r->rejoined) {
        CTR_CHECK(shs_shadow_start(r->sh)); /* a rejoiner's runs already (run.c) */
    }
}

static void failure_figures(const ctr_run_t *r, const shs_shadow_stats_t *s, ctr_result_t *res,
                            ctr_fail_mark_t *mark, double t0)
{
    double end = ctr_now();
    if (mark->t == 0) { /* seen after the workers finished */
        mark->t = end;
        mark->done = res->examples;
    }
    res->fail_seen_s = (double)s->first_failure_ns / 1e9;
    res->rounds_after = s->rounds_after_failure;
    double after = end - mark->t, train_end = t0 + res->train_s;
    res->eps_after =
        train_end > mark->t ? (double)(res->examples - mark->done) / (train_end - mark->t) : 0;
    res->syncs_per_min_after = after > 0 ? (double)s->rounds_after_failure * 60.0 / after : 0;
    printf("%-10s rank %d: %d failed peer(s), first seen at %.3f s (CLOCK_MONOTONIC); "
           "after it: %.0f EPS, %llu rounds, %.1f syncs/min\n",
           r->o.label, r->rank, s->failed_peers, res->fail_seen_s, res->eps_after,
           (unsigned long long)s->rounds_after_failure, res->syncs_per_min_after);
}

/* The rounds that left a late member out (shadow.h, Stragglers): printed
 * when there were some, and always with --stall-rank. */
static void straggler_figures(const ctr_run_t *r, const shs_shadow_stats_t *s)
{
    if (s->straggler_skips == 0 && s->rounds_left_out == 0 && r->o.stall_rank < 0)
        return;
    printf("%-10s rank %d: stragglers: %llu skips, this rank left out of %llu rounds", r->o.label,
           r->rank, (unsigned long long)s->straggler_skips,
           (unsigned long long)s->rounds_left_out);
    for (int p = 0; p < r->size; p++) {
        uint64_t n;
        if (p != r->rank && shs_shadow_peer_skips(r->sh, p, &n) == SHS_OK && n > 0)
            printf("; left out peer %d in %llu rounds", p, (unsigned long long)n);
    }
    printf("\n");
}

/* After the pass (workers joined, res->examples and train_s set): stops the
 * shadow thread and takes the engine's figures into res. */
void ctr_sync_stop(ctr_run_t *r, ctr_result_t *res, ctr_fail_mark_t *mark, double t0)
{
    if (!r->sync)
        return;
    if (!r->foreground) {
        if (r->hooks != NULL && r->hooks->pass_done != NULL)
            r->hooks->pass_done(r);
        CTR_CHECK(shs_shadow_stop(r->sh));
    }
    ctr_series_sample(r, true);
    shs_shadow_stats_t s;
    CTR_CHECK(shs_shadow_stats(r->sh, &s));
    res->rounds = s.rounds;
    /* per minute of training, in both modes */
    res->syncs_per_min = (double)s.rounds * 60.0 / res->train_s;
    res->round_ms = s.round_us_mean / 1e3;
    res->wait_ms = s.wait_us_mean / 1e3;
    res->bytes = s.bytes_read + s.bytes_written;
    res->errors = s.errors + (uint64_t)atomic_load(&r->sync_errors);
    res->skipped = s.peers_skipped;
    res->torn = s.torn_retries;
    res->staleness_ms = s.staleness_ms_max;
    res->failed = s.failed_peers;
    res->straggler_skips = s.straggler_skips;
    res->rounds_left_out = s.rounds_left_out;
    if (s.failed_peers > 0)
        failure_figures(r, &s, res, mark, t0);
    straggler_figures(r, &s);
    ctr_series_print(r);
}

/* Whether every rank may run the job-wide steps: each rank's own answer
 * (ok), put together among the living ranks (a table of votes over RDMA,
 * then a barrier), so that all take the same way: a rank that saw a failure
 * the others did not, or whose engine had not taken a rejoined rank back
 * when it stopped, makes every rank skip them; a failed rank, which does
 * not vote, too. */
static bool agree(ctr_run_t *r, bool ok)
{
    shs_region_t *t;
    const int n = r->size;
    CTR_CHECK(shs_region_alloc(r->ctx, (size_t)n * 8,
                               SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_WRITE, &t));
    uint64_t *v = shs_region_addr(t); /* zeroed by the allocation */
    size_t mine = (size_t)r->rank * 8;
    v[r->rank] = ok ? 2 : 1;
    for (int p = 0; p < n; p++) /* a failed peer does not vote either */
        if (p != r->rank && shs_ctx_peer_status(r->ctx, p, NULL) == SHS_OK)
            (void)shs_write(r->ctx, p, t, mine, t, mine, 8, 0);
    (void)shs_flush(r->ctx, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
    CTR_CHECK(shs_ctx_barrier(r->ctx));
    bool all = true;
    for (int p = 0; p < n; p++)
        all &= __atomic_load_n(&v[p], __ATOMIC_ACQUIRE) == 2;
    CTR_CHECK(shs_ctx_barrier(r->ctx)); /* every vote read before the table goes */
    shs_region_destroy(t);
    if (ok && !all)
        printf("%-10s rank %d: another rank saw a failure (or had not taken a rejoined rank "
               "back): the job-wide steps are skipped\n", r->o.label, r->rank);
    return all;
}

/* Whether the job-wide steps at the end (shs_shadow_finish, barriers, the
 * final allreduce) may run: not after a peer failure, where the survivors
 * evaluate their own models. Runs the first of them, shs_shadow_finish, and
 * a barrier. The finish: MA/BMUF replicas become their exact mean, EASGD's
 * center takes its last deltas; without it each rank's own model carries
 * the drift since its last round. */
bool ctr_sync_teardown(ctr_run_t *r, const ctr_result_t *res)
{
    if (r->ctx == NULL)
        return true;
    /* a connection the transport failed after the engine's last look also
     * rules the job-wide steps out (a rank that rejoined is taken back on
     * the context at its next poll: one first) */
    (void)shs_progress(r->ctx);
    int gone = 0;
    for (int p = 0; p < r->size; p++)
        gone += p != r->rank && shs_ctx_peer_status(r->ctx, p, NULL) != SHS_OK;
    if (!agree(r, res->failed == 0 && gone == 0))
        return false;
    /* the finish first: in FR-EASGD a rank still in its last rounds needs
     * this rank's inbox credits, which a plain barrier would not give */
    shs_status_t st = SHS_OK;
    const char *step = "shs_shadow_finish";
    if (r->sync && !r->o.no_finish) {
        st = shs_shadow_finish(r->sh);
        /* EASGD after a rejoin (shs-ctr refuses that pairing, but a
         * finish may say so): not settled, on every rank alike; the barrier
         * and the average (over the mesh, the rejoiner with them) go on */
        if (st == SHS_ERR_UNSUPPORTED) {
            printf("%-10s rank %d: the finish did not settle the models (EASGD after a "
                   "rejoin); the average of the ranks' models is taken\n", r->o.label, r->rank);
            st = SHS_OK;
        }
        /* a peer failed or did not come: the job-wide steps are skipped
         * below, as after a failure seen in the pass */
        if (st != SHS_OK && st != SHS_ERR_PEER_FAILED && st != SHS_ERR_TIMEOUT)
            ctr_die("shs_shadow_finish: %s", shs_status_string(st));
    }
    /* a peer that saw a failure this rank did not see skips the rest */
    if (st == SHS_OK) {
        step = "barrier after training";
        st = shs_ctx_barrier(r->ctx);
    }
    if (st != SHS_OK) {
        fprintf(stderr, "shs-ctr rank %d: %s: %s; the job-wide steps are skipped\n", r->rank,
                step, shs_status_string(st));
        return false;
    }
    return true;
}

/* avg = the mean of the ranks' final models (the shadow thread is stopped:
 * the context is this thread's again). */
void ctr_final_average(ctr_run_t *r, float *avg)
{
    shs_coll_params_t cp;
    shs_coll_t *coll;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = SHS_COLL_PARAM_STAGE_BYTES | SHS_COLL_PARAM_WIRE;
    cp.stage_bytes = 0; /* the model is a region: zero-copy */
    cp.wire = SHS_WIRE_NATIVE; /* the exact mean, whatever SHS_COLL_WIRE says */
    CTR_CHECK(shs_coll_create(r->ctx, &cp, &coll));
    memcpy(avg, r->model, r->nparams * sizeof(float));
    CTR_CHECK(shs_allreduce_region(coll, NULL, r->region, 0, r->nparams, SHS_DTYPE_FLOAT32,
                                   SHS_REDUCE_AVG));
    /* keep the rank's own model in the region (it is what the rank holds) */
    for (size_t i = 0; i < r->nparams; i++) {
        float mean = r->model[i];
        r->model[i] = avg[i];
        avg[i] = mean;
    }
    CTR_CHECK(shs_ctx_barrier(r->ctx));
    shs_coll_destroy(coll);
}

void ctr_sync_only(ctr_run_t *r)
{
    CTR_CHECK(shs_ctx_barrier(r->ctx));
    CTR_CHECK(shs_shadow_start(r->sh));
    r->t0 = ctr_now();
    ctr_stall_start(r);
    /* in slices, to sample the rounds series (--stall-rank) on the way */
    for (double left; (left = r->t0 + r->o.sync_only_s - ctr_now()) > 0;) {
        ctr_series_sample(r, false);
        usleep((useconds_t)(fmin(left, 0.1) * 1e6));
    }
    ctr_stall_end(r);
    CTR_CHECK(shs_shadow_stop(r->sh));
    ctr_series_sample(r, true);
    shs_shadow_stats_t s;
    CTR_CHECK(shs_shadow_stats(r->sh, &s));
    printf("sync-only rank %d: %zu params (%.1f MB), %s%s, %llu rounds, %.1f syncs/min, "
           "%.1f ms/round (%.1f ms waiting), %.1f MB read, staleness max %.0f ms, %llu errors\n",
           r->rank, r->nparams, (double)r->nparams * 4 / 1e6, r->o.mode,
           r->o.ds ? " (ds)" : "", (unsigned long long)s.rounds, s.syncs_per_min,
           s.round_us_mean / 1e3, s.wait_us_mean / 1e3, (double)s.bytes_read / 1e6,
           s.staleness_ms_max, (unsigned long long)s.errors);
    straggler_figures(r, &s);
    ctr_series_print(r);
    ctr_result_t res;
    memset(&res, 0, sizeof(res));
    res.rounds = s.rounds;
    res.syncs_per_min = s.syncs_per_min;
    res.round_ms = s.round_us_mean / 1e3;
    res.wait_ms = s.wait_us_mean / 1e3;
    res.bytes = s.bytes_read + s.bytes_written;
    res.errors = s.errors;
    res.staleness_ms = s.staleness_ms_max;
    res.straggler_skips = s.straggler_skips;
    res.rounds_left_out = s.rounds_left_out;
    r->nckpt = 0;
    ctr_write_json(r, &res);
}

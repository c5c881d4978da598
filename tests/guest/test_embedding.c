/*
 * Guest integration test of the sharded embedding tables, N ranks under
 * tools/shs-launch:
 *
 *   shs_test_embedding CASE
 *
 *   rows     every lookup returns the reference rows (initialization by row
 *            id) for uniform and repeated ids across shards: every path
 *            (READ, owner, auto), both mappings, all ranks or a subset as
 *            holders, plain, started/waited and pooled lookups
 *   update   4 ranks x 2 worker threads send known SGD updates while they
 *            look up: after every flush the table equals the reference
 *            exactly (each update applied once: no loss, no duplicate)
 *   shadow   lookups and updates on two worker threads while the shadow
 *            thread syncs a dense model: rows exact, replicas equal after
 *            finish
 *   kill     rank 2 is killed: lookups and updates of its rows fail with
 *            SHS_ERR_PEER_FAILED within the op timeout, the rest of the
 *            table keeps working, the stats count the failures
 *   bad      bad input refused with nothing sent; ranks that disagree on
 *            the table fail every rank
 *   save     save, then load into 2 holders with the other mapping: the
 *            same rows; a spoilt save (shards of two saves, a flipped byte
 *            in rows, header or optimizer state, swapped, truncated or
 *            missing shard files) or one of another dim is refused with the
 *            same status and the same logged reason (the file, the bytes)
 *            on every rank, and every rank's rows stay as they were
 *   rejoin   (under shs-launch --restart 2) updates, a save, more updates,
 *            then rank 2 is killed and started again: it makes the table
 *            again with rejoin_dir, the survivors' lookups of its rows work
 *            again, every rank's updates after that land exactly once in
 *            every shard (its rows as saved, plus what came after), and a
 *            save and a load after the rejoin keep them
 *   cache    a hot-row cache (age 6): repeated lookups are served from it
 *            with the reference rows; this rank's own updates are seen by
 *            its next lookup after its flush (SHS_EMB_CACHE_OWN=keep: within
 *            6 lookups); the other ranks' updates at the latest after 6
 *            more lookups; bad sizes are refused
 *   torn     on every rank one worker updates a small hot table flat out
 *            (every element of a row counts the updates it got, so a row is
 *            whole exactly when its elements are equal and integral) while
 *            another looks rows up by the READ path, then by auto: over
 *            10^6 rows read in all, none may come back torn; the checks'
 *            retries are printed
 *
 * Exit status: 0 pass, 1 fail, 77 no RDMA device.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <shadowsync/shadowsync.h>

#include "algorithms/embedding/plan.h"
#include "runtime/log.h"
#include "harness.h"

#define ROWS 10007
#define DIM 16
#define BATCH 512
#define SEED 42

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

static shs_emb_params_t params(shs_emb_map_t map, shs_emb_path_t path, int workers)
{
    shs_emb_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_EMB_PARAM_MAP | SHS_EMB_PARAM_PATH | SHS_EMB_PARAM_WORKERS |
                   SHS_EMB_PARAM_INIT | SHS_EMB_PARAM_MAX_BATCH;
    p.rows = ROWS;
    p.dim = DIM;
    p.map = map;
    p.path = path;
    p.workers = workers;
    p.init_scale = 0.5f;
    p.seed = SEED;
    p.max_batch = BATCH;
    return p;
}

/* out must hold row ids[k] as initialized (scale: the table's init_scale),
 * shifted by `delta` (per row). */
static void expect_scaled(const uint64_t *ids, size_t n, const float *out, float scale,
                          const float *delta, const char *what)
{
    float want[DIM];
    for (size_t k = 0; k < n; k++) {
        shs_emb_init_row(SEED, ids[k], scale, want, DIM);
        for (int j = 0; j < DIM; j++) {
            float w = want[j] + (delta != NULL ? delta[ids[k] * DIM + (size_t)j] : 0.0f);
            if (out[k * DIM + (size_t)j] != w)
                fail("%s: id %llu (position %zu) col %d is %g, expected %g", what,
                     (unsigned long long)ids[k], k, j, (double)out[k * DIM + (size_t)j],
                     (double)w);
        }
    }
}

static void expect_rows(const uint64_t *ids, size_t n, const float *out, const float *delta,
                        const char *what)
{
    expect_scaled(ids, n, out, 0.5f, delta, what);
}

static void batch_of(uint64_t *ids, size_t n, uint64_t *seed, bool repeats)
{
    for (size_t k = 0; k < n; k++)
        ids[k] = repeats ? rng_next(seed) % 97 * 103 % ROWS : rng_next(seed) % ROWS;
}

/* ------------------------------------------------------------------ rows */

static void check_table(shs_ctx_t *ctx, shs_emb_params_t p, const char *what)
{
    static uint64_t ids[BATCH];
    static float out[BATCH * DIM];
    shs_emb_t *emb;
    uint64_t seed = 7 + (uint64_t)g_rank;
    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    shs_emb_worker_t *w = shs_emb_worker(emb, 0);
    /* the path auto measured its threshold at create (calibrate.c) without
     * a trace in this worker's counters (the holder's may already count
     * the peers' first requests) */
    shs_emb_stats_t s0;
    CHECK_OK(shs_emb_stats(emb, &s0));
    if (s0.lookups != 0 || s0.reads != 0 || s0.rows_owner != 0 || s0.owner_reads < 1 ||
        s0.owner_reads > (1u << 20))
        fail("%s: after create: lookups %llu reads %llu owner rows %llu, owner_reads %u", what,
             (unsigned long long)s0.lookups, (unsigned long long)s0.reads,
             (unsigned long long)s0.rows_owner, s0.owner_reads);
    for (int b = 0; b < 12; b++) {
        size_t n = b == 0 ? 1 : b == 1 ? BATCH : 1 + rng_next(&seed) % BATCH;
        batch_of(ids, n, &seed, b % 2 == 1);
        if (b % 3 == 2) {
            CHECK_OK(shs_emb_lookup_start(w, ids, n));
            CHECK_OK(shs_emb_lookup_wait(w, out, sizeof(out) / sizeof(out[0])));
        } else {
            CHECK_OK(shs_emb_lookup(w, ids, n, out, sizeof(out) / sizeof(out[0])));
        }
        expect_rows(ids, n, out, NULL, what);
    }
    /* pooled: bags of 0..5 ids, sum and mean */
    uint32_t offsets[65];
    float pooled[64 * DIM], row[DIM];
    offsets[0] = 0;
    for (int b = 0; b < 64; b++)
        offsets[b + 1] = offsets[b] + (uint32_t)(b % 6);
    batch_of(ids, offsets[64], &seed, true);
    for (int mean = 0; mean < 2; mean++) {
        CHECK_OK(shs_emb_lookup_pooled(w, ids, offsets, 64, mean, pooled, 64 * DIM));
        for (int b = 0; b < 64; b++) {
            for (int j = 0; j < DIM; j++) {
                float s = 0.0f;
                for (uint32_t k = offsets[b]; k < offsets[b + 1]; k++) {
                    shs_emb_init_row(SEED, ids[k], 0.5f, row, DIM);
                    s += row[j];
                }
                uint32_t cnt = offsets[b + 1] - offsets[b];
                if (mean && cnt > 1)
                    s *= 1.0f / (float)cnt;
                if (fabsf(pooled[b * DIM + j] - s) > 1e-5f)
                    fail("%s: pooled bag %d col %d is %g, expected %g", what, b, j,
                         (double)pooled[b * DIM + j], (double)s);
            }
        }
    }
    shs_emb_stats_t s;
    CHECK_OK(shs_emb_stats(emb, &s));
    if (s.lookups != 14 || s.dup_ids == 0 || s.rows_local == 0 ||
        (p.path == SHS_EMB_PATH_READ && (s.rows_read == 0 || s.rows_owner != 0)) ||
        (p.path == SHS_EMB_PATH_OWNER && (s.rows_owner == 0 || s.rows_read != 0)))
        fail("%s: stats lookups %llu dup %llu local %llu read %llu owner %llu", what,
             (unsigned long long)s.lookups, (unsigned long long)s.dup_ids,
             (unsigned long long)s.rows_local, (unsigned long long)s.rows_read,
             (unsigned long long)s.rows_owner);
    shs_emb_destroy(emb);
}

static void case_rows(shs_ctx_t *ctx)
{
    static const int subset[] = {1, 3};
    check_table(ctx, params(SHS_EMB_MAP_MODULO, SHS_EMB_PATH_READ, 1), "modulo/read");
    check_table(ctx, params(SHS_EMB_MAP_RANGE, SHS_EMB_PATH_OWNER, 1), "range/owner");
    check_table(ctx, params(SHS_EMB_MAP_MODULO, SHS_EMB_PATH_AUTO, 1), "modulo/auto");
    shs_emb_params_t p = params(SHS_EMB_MAP_RANGE, SHS_EMB_PATH_AUTO, 1);
    p.field_mask |= SHS_EMB_PARAM_HOLDERS;
    p.holders = subset;
    p.nholders = 2;
    if (g_rank == 1 || g_rank == 3) {
        check_table(ctx, p, "holders 1 3");
    } else { /* a non-holder copies nothing of its own */
        shs_emb_t *emb;
        static uint64_t ids[BATCH];
        static float out[BATCH * DIM];
        uint64_t seed = 99;
        CHECK_OK(shs_emb_create(ctx, &p, &emb));
        batch_of(ids, BATCH, &seed, false);
        CHECK_OK(shs_emb_lookup(shs_emb_worker(emb, 0), ids, BATCH, out, BATCH * DIM));
        expect_rows(ids, BATCH, out, NULL, "non-holder");
        shs_emb_stats_t s;
        CHECK_OK(shs_emb_stats(emb, &s));
        if (s.rows_local != 0 || s.shard_rows != 0 || s.shard_bytes != 0)
            fail("non-holder: %llu local rows, shard of %llu rows",
                 (unsigned long long)s.rows_local, (unsigned long long)s.shard_rows);
        shs_emb_destroy(emb);
    }
}

/* ---------------------------------------------------------------- update */

#define UPD_ROUNDS 30
#define UPD_N 64
#define LR 0.5f

/* The gradient rank r's worker t sends in round k for position i: ids and
 * values any rank can recompute; multiples of 1/64, so that every sum in
 * any order is exact in float. */
static void update_batch(int r, int t, int k, uint64_t *ids, float *g)
{
    uint64_t seed = (uint64_t)(r * 1000 + t * 100 + k + 1);
    for (int i = 0; i < UPD_N; i++) {
        ids[i] = rng_next(&seed) % 300; /* a hot set: every rank hits every row */
        for (int j = 0; j < DIM; j++)
            g[i * DIM + j] = (float)((int)(rng_next(&seed) % 17) - 8) / 64.0f;
    }
}

typedef struct upd_job {
    shs_emb_worker_t *w;
    int rank, t, n;
    shs_status_t st;
} upd_job_t;

static void *upd_worker(void *arg)
{
    upd_job_t *j = arg;
    static _Thread_local uint64_t ids[UPD_N];
    static _Thread_local float g[UPD_N * DIM], out[UPD_N * DIM];
    for (int k = 0; k < UPD_ROUNDS && j->st == SHS_OK; k++) {
        update_batch(j->rank, j->t, k, ids, g);
        j->st = shs_emb_update(j->w, ids, UPD_N, g);
        if (j->st == SHS_OK) /* and look up meanwhile: Hogwild, not checked */
            j->st = shs_emb_lookup(j->w, ids, UPD_N, out, UPD_N * DIM);
    }
    if (j->st == SHS_OK)
        j->st = shs_emb_flush(j->w, SHS_TIMEOUT_DEFAULT);
    return NULL;
}

/* delta[row] -= LR * gradient, for rank r's worker t's rounds [k0, k1),
 * except on the rows of holder `skip` (of n, modulo; -1: none) */
static void add_rounds(float *delta, int r, int t, int k0, int k1, int skip, int n)
{
    uint64_t ids[UPD_N];
    float g[UPD_N * DIM];
    for (int k = k0; k < k1; k++) {
        update_batch(r, t, k, ids, g);
        for (int i = 0; i < UPD_N; i++)
            for (int j = 0; j < DIM && (int)(ids[i] % (uint64_t)n) != skip; j++)
                delta[ids[i] * DIM + (size_t)j] -= LR * g[i * DIM + j];
    }
}

/* delta[row] = -LR * every gradient every rank's every worker sent */
static float *reference_delta(int n, int workers)
{
    float *delta = calloc((size_t)ROWS * DIM, sizeof(float));
    if (delta == NULL)
        fail("calloc");
    for (int r = 0; r < n; r++)
        for (int t = 0; t < workers; t++)
            add_rounds(delta, r, t, 0, UPD_ROUNDS, -1, n);
    return delta;
}

static void run_updates(shs_emb_t *emb, int workers)
{
    upd_job_t job[2];
    pthread_t th[2];
    for (int t = 0; t < workers; t++) {
        job[t] = (upd_job_t){.w = shs_emb_worker(emb, t), .rank = g_rank, .t = t,
                             .st = SHS_OK};
        if (pthread_create(&th[t], NULL, upd_worker, &job[t]) != 0)
            fail("pthread_create");
    }
    for (int t = 0; t < workers; t++) {
        pthread_join(th[t], NULL);
        if (job[t].st != SHS_OK)
            fail("worker %d: %s", t, shs_status_string(job[t].st));
    }
}

/* Every row the hot set touches, and a few it does not, equal the
 * reference delta exactly (the rows start at 0). */
static void check_updated(shs_emb_t *emb, const float *delta, const char *what)
{
    static uint64_t ids[BATCH];
    static float out[BATCH * DIM];
    for (uint64_t base = 0; base < 300 + BATCH; base += BATCH) {
        for (size_t k = 0; k < BATCH; k++)
            ids[k] = (base + k) % ROWS;
        CHECK_OK(shs_emb_lookup(shs_emb_worker(emb, 0), ids, BATCH, out, BATCH * DIM));
        expect_scaled(ids, BATCH, out, 0.0f, delta, what);
    }
}

static shs_emb_params_t update_params(shs_emb_path_t path)
{
    shs_emb_params_t p = params(SHS_EMB_MAP_MODULO, path, 2);
    p.field_mask |= SHS_EMB_PARAM_LR;
    p.lr = LR;
    p.init_scale = 0.0f; /* rows start at 0: every sum of the updates is exact */
    return p;
}

static void case_update(shs_ctx_t *ctx)
{
    int n = shs_ctx_size(ctx);
    float *delta = reference_delta(n, 2);
    for (int path = SHS_EMB_PATH_READ; path <= SHS_EMB_PATH_OWNER; path++) {
        shs_emb_t *emb;
        shs_emb_params_t p = update_params((shs_emb_path_t)path);
        CHECK_OK(shs_emb_create(ctx, &p, &emb));
        run_updates(emb, 2);
        CHECK_OK(shs_ctx_barrier(ctx)); /* every rank's workers flushed */
        check_updated(emb, delta, path == SHS_EMB_PATH_READ ? "updated/read" : "updated/owner");
        shs_emb_stats_t s;
        CHECK_OK(shs_emb_stats(emb, &s));
        if (s.updates != 2 * UPD_ROUNDS || s.applied_batches == 0 || s.peer_failures != 0)
            fail("stats: updates %llu applied batches %llu failures %llu",
                 (unsigned long long)s.updates, (unsigned long long)s.applied_batches,
                 (unsigned long long)s.peer_failures);
        /* SHS_EMB_SLOTS when the test sets it, else auto's 4..32 */
        const char *knob = getenv("SHS_EMB_SLOTS");
        unsigned want = knob != NULL ? (unsigned)atoi(knob) : 0;
        if (want != 0 ? s.slots != want : s.slots < 4 || s.slots > 32)
            fail("stats: %u slots (SHS_EMB_SLOTS %s)", s.slots, knob != NULL ? knob : "unset");
        shs_emb_destroy(emb);
    }
    free(delta);
}

/* ---------------------------------------------------------------- shadow */

static void case_shadow(shs_ctx_t *ctx)
{
    enum { MODEL = 4096 };
    int n = shs_ctx_size(ctx);
    shs_region_t *model;
    shs_shadow_t *sh;
    shs_emb_t *emb;
    shs_emb_params_t p = update_params(SHS_EMB_PATH_AUTO);
    float *delta = reference_delta(n, 2);

    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    CHECK_OK(shs_region_alloc(ctx, MODEL * sizeof(float),
                              SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ |
                                  SHS_ACCESS_REMOTE_WRITE,
                              &model));
    float *m = shs_region_addr(model);
    for (int i = 0; i < MODEL; i++)
        m[i] = (float)(g_rank * MODEL + i);
    CHECK_OK(shs_shadow_create(ctx, model, 0, MODEL, NULL, &sh));
    CHECK_OK(shs_shadow_start(sh));
    run_updates(emb, 2); /* the workers' endpoints beside the engine's */
    CHECK_OK(shs_shadow_stop(sh));
    CHECK_OK(shs_shadow_finish(sh));
    for (int i = 0; i < MODEL; i++) { /* the mean of rank*MODEL + i over the ranks */
        float want = (float)((n - 1) * MODEL) / 2.0f + (float)i;
        if (fabsf(m[i] - want) > 1e-3f * fabsf(want) + 1e-3f)
            fail("model[%d] = %g after finish, expected %g", i, (double)m[i], (double)want);
    }
    CHECK_OK(shs_ctx_barrier(ctx));
    check_updated(emb, delta, "with the shadow thread");
    shs_shadow_destroy(sh);
    shs_region_destroy(model);
    shs_emb_destroy(emb);
    free(delta);
}

/* ------------------------------------------------------------------ kill */

/* The survivors wait for each other before they exit: a survivor that left
 * early would take its apply thread with it while another still flushes an
 * update to it. A bootstrap barrier fails as soon as the dead rank is seen,
 * so the ranks (one host, one guest) meet through files named by the job's
 * token, bounded by a deadline. */
static void survivors_meet(int survivors)
{
    char dir[160], path[200];
    const char *token = getenv("SHS_JOB_TOKEN");
    snprintf(dir, sizeof(dir), "/tmp/shs-emb-kill-%s", token != NULL ? token : "none");
    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/%d", dir, g_rank);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        fail("cannot create %s", path);
    fclose(f);
    double t0 = now_s();
    for (;;) {
        int here = 0;
        DIR *d = opendir(dir);
        for (struct dirent *de; d != NULL && (de = readdir(d)) != NULL;)
            here += de->d_name[0] != '.';
        if (d != NULL)
            closedir(d);
        if (here >= survivors)
            return;
        if (now_s() - t0 > 120.0)
            fail("only %d of %d survivors reached the end", here, survivors);
        usleep(20 * 1000);
    }
}

static void case_kill(shs_ctx_t *ctx)
{
    enum { VICTIM = 2 };
    static uint64_t ids[BATCH];
    static float out[BATCH * DIM], g[BATCH * DIM];
    shs_emb_t *emb;
    shs_emb_params_t p = params(SHS_EMB_MAP_MODULO, SHS_EMB_PATH_AUTO, 1);
    int n = shs_ctx_size(ctx);
    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    CHECK_OK(shs_ctx_barrier(ctx));
    if (g_rank == VICTIM)
        raise(SIGKILL);
    usleep(300 * 1000);
    shs_emb_worker_t *w = shs_emb_worker(emb, 0);

    /* rows of the victim (id % n == VICTIM): refused within the bound */
    for (size_t k = 0; k < 8; k++)
        ids[k] = (uint64_t)(VICTIM + (int)k * n);
    double t0 = now_s();
    shs_status_t st = shs_emb_lookup(w, ids, 8, out, BATCH * DIM);
    if (st != SHS_ERR_PEER_FAILED && st != SHS_ERR_TIMEOUT)
        fail("lookup of the dead holder's rows: %s", shs_status_string(st));
    if (now_s() - t0 > 60.0)
        fail("the dead holder's lookup took %.0f s", now_s() - t0);
    CHECK_EQ(shs_emb_lookup(w, ids, 8, out, BATCH * DIM), SHS_ERR_PEER_FAILED);
    memset(g, 0, sizeof(g));
    CHECK_EQ(shs_emb_update(w, ids, 8, g), SHS_ERR_PEER_FAILED);

    /* everybody else's rows still work, updates included */
    size_t m = 0;
    for (uint64_t r = 0; m < BATCH; r++)
        if ((int)(r % (uint64_t)n) != VICTIM)
            ids[m++] = r;
    CHECK_OK(shs_emb_update(w, ids, BATCH, g));
    CHECK_OK(shs_emb_flush(w, SHS_TIMEOUT_DEFAULT));
    CHECK_OK(shs_emb_lookup(w, ids, BATCH, out, BATCH * DIM));
    expect_rows(ids, BATCH, out, NULL, "survivor rows");
    shs_emb_stats_t s;
    CHECK_OK(shs_emb_stats(emb, &s));
    if (s.peer_failures < 2)
        fail("stats count %llu peer failures", (unsigned long long)s.peer_failures);
    printf("rank %d: dead holder refused in %.1f s; the rest works\n", g_rank, now_s() - t0);
    /* a save cannot hold the dead holder's shard: every survivor refuses
     * it and none writes its own (a partial save would load as garbage) */
    char dir[160];
    const char *token = getenv("SHS_JOB_TOKEN");
    snprintf(dir, sizeof(dir), "/tmp/shs-emb-kill-save-%s", token != NULL ? token : "none");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        fail("mkdir %s: %s", dir, strerror(errno));
    CHECK_EQ(shs_emb_save(emb, dir), SHS_ERR_PEER_FAILED);
    DIR *d = opendir(dir);
    if (d == NULL)
        fail("opendir %s: %s", dir, strerror(errno));
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        if (strncmp(de->d_name, "shard-", 6) == 0)
            fail("a save with a dead holder wrote %s/%s", dir, de->d_name);
    closedir(d);
    fflush(stdout);
    survivors_meet(n - 1);
    _exit(RC_OK); /* no collective teardown with a dead rank */
}

/* ------------------------------------------------------------------- bad */

static void case_bad(shs_ctx_t *ctx)
{
    static uint64_t ids[BATCH + 1];
    static float out[(BATCH + 1) * DIM];
    shs_emb_t *emb;
    shs_emb_params_t p = params(SHS_EMB_MAP_MODULO, SHS_EMB_PATH_AUTO, 1);
    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    shs_emb_worker_t *w = shs_emb_worker(emb, 0);
    for (int k = 0; k <= BATCH; k++)
        ids[k] = (uint64_t)k;
    ids[5] = ROWS; /* out of range */
    CHECK_EQ(shs_emb_lookup(w, ids, 8, out, BATCH * DIM), SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_emb_update(w, ids, 8, out), SHS_ERR_INVALID_ARG);
    ids[5] = 5;
    CHECK_EQ(shs_emb_lookup(w, ids, BATCH + 1, out, (BATCH + 1) * DIM), SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_emb_lookup(w, ids, 8, out, 8 * DIM - 1), SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_emb_lookup(w, NULL, 8, out, BATCH * DIM), SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_emb_lookup_wait(w, out, BATCH * DIM), SHS_ERR_BAD_STATE);
    CHECK_OK(shs_emb_lookup_start(w, ids, 8));
    CHECK_EQ(shs_emb_lookup_start(w, ids, 8), SHS_ERR_BAD_STATE);
    /* an update between start and wait leaves the lookup's rows alone */
    static uint64_t other[64];
    static float zero[64 * DIM];
    for (int k = 0; k < 64; k++)
        other[k] = (uint64_t)(1000 + 7 * k);
    CHECK_OK(shs_emb_update(w, other, 64, zero));
    CHECK_OK(shs_emb_lookup_wait(w, out, BATCH * DIM));
    expect_rows(ids, 8, out, NULL, "start, update, wait");
    if (shs_emb_worker(emb, 1) != NULL || shs_emb_worker(emb, -1) != NULL)
        fail("a worker out of range");
    shs_emb_stats_t s;
    CHECK_OK(shs_emb_stats(emb, &s));
    if (s.lookups != 1 || s.updates != 1 || s.bytes_fetched > 8 * DIM * sizeof(float))
        fail("refused calls sent something: lookups %llu updates %llu bytes %llu",
             (unsigned long long)s.lookups, (unsigned long long)s.updates,
             (unsigned long long)s.bytes_fetched);
    shs_emb_destroy(emb);

    /* the last rank asks for another dim: every rank fails */
    shs_status_t st0;
    p.dim = g_rank == shs_ctx_size(ctx) - 1 ? DIM + 1 : DIM;
    CHECK_EQ(shs_emb_create(ctx, &p, &emb), SHS_ERR_SIZE_MISMATCH);
    /* the last rank asks for other slots: every rank fails */
    p.field_mask |= SHS_EMB_PARAM_SLOTS;
    p.slots = g_rank == shs_ctx_size(ctx) - 1 ? 5 : 6;
    CHECK_EQ(shs_emb_create(ctx, &p, &emb), SHS_ERR_SIZE_MISMATCH);
    /* slots out of range on the last rank: refused there, a mismatch for
     * the others (no peer died) */
    p.slots = g_rank == shs_ctx_size(ctx) - 1 ? SHS_EMB_SLOTS_MAX + 1 : 6;
    st0 = shs_emb_create(ctx, &p, &emb);
    if (st0 != (g_rank == shs_ctx_size(ctx) - 1 ? SHS_ERR_INVALID_ARG : SHS_ERR_SIZE_MISMATCH))
        fail("create with slots out of range on one rank: %s", shs_status_string(st0));
    p.slots = 0;
    /* the last rank gives rows 0: it is refused, the others hear of it */
    p.dim = DIM;
    p.rows = g_rank == shs_ctx_size(ctx) - 1 ? 0 : ROWS;
    shs_status_t st = shs_emb_create(ctx, &p, &emb);
    if (st != (g_rank == shs_ctx_size(ctx) - 1 ? SHS_ERR_INVALID_ARG : SHS_ERR_SIZE_MISMATCH))
        fail("create with a bad rank: %s", shs_status_string(st));
}

/* ------------------------------------------------------------------ save */

#define SAVE_DIR "/tmp/shs-emb-save-test"

/* Every row of a and b equal, looked up through each table. */
/* Every row (sample false), or one batch of rows spread over the table,
 * every shard's among them (a load changes every row or none). */
static bool rows_equal(shs_emb_t *a, shs_emb_t *b, const char *what, bool fatal, bool sample)
{
    static uint64_t ids[BATCH];
    static float before[BATCH * DIM], after[BATCH * DIM];
    for (uint64_t base = 0; base < (sample ? 1 : ROWS); base += BATCH) {
        size_t m = ROWS - base < BATCH ? ROWS - base : BATCH;
        for (size_t k = 0; k < m; k++)
            ids[k] = sample ? k * 19 % ROWS : base + k;
        CHECK_OK(shs_emb_lookup(shs_emb_worker(a, 0), ids, m, before, BATCH * DIM));
        CHECK_OK(shs_emb_lookup(shs_emb_worker(b, 0), ids, m, after, BATCH * DIM));
        if (memcmp(before, after, m * DIM * sizeof(float)) != 0) {
            if (fatal)
                fail("%s: rows %llu..%llu differ", what, (unsigned long long)base,
                     (unsigned long long)(base + m - 1));
            fprintf(stderr, "FAIL rank %d: %s: rows %llu..%llu differ\n", g_rank, what,
                    (unsigned long long)base, (unsigned long long)(base + m - 1));
            return false;
        }
    }
    return true;
}

static bool same_rows(shs_emb_t *a, shs_emb_t *b, const char *what, bool fatal)
{
    return rows_equal(a, b, what, fatal, false);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    if (system(cmd) != 0)
        fail("%s", cmd);
}

/* XOR one byte of a file; at < 0 counts from its end. */
static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    if (f == NULL || fseek(f, at, at < 0 ? SEEK_END : SEEK_SET) != 0)
        fail("open %s at %ld: %s", path, at, strerror(errno));
    int c = fgetc(f);
    if (c == EOF || fseek(f, -1, SEEK_CUR) != 0 || fputc(c ^ 0x40, f) == EOF || fclose(f) != 0)
        fail("flip a byte of %s at %ld", path, at);
}

/* Ways to spoil a save (of n shards, with Adagrad state) that every rank's
 * load must refuse alike. Offsets hold in every format version: byte 56 is
 * in the header, 203 the high byte of a float of shard 1's rows, the last
 * byte one of its state. */
enum { SPOIL_MIXED, SPOIL_ROWS, SPOIL_HEADER, SPOIL_SWAPPED, SPOIL_STATE, SPOIL_SHORT,
       SPOIL_MISSING, SPOILS };
static const char *const spoil_name[SPOILS] = {
    "shard 1 from another save", "a flipped byte in shard 1's rows",
    "a flipped byte in shard 1's header", "shards 0 and 1 swapped",
    "a flipped byte in shard 1's optimizer state", "shard 1 truncated", "shard 1 missing"};
static const shs_status_t spoil_status[SPOILS] = {
    SHS_ERR_PROTOCOL, SHS_ERR_PROTOCOL, SHS_ERR_PROTOCOL, SHS_ERR_PROTOCOL,
    SHS_ERR_PROTOCOL, SHS_ERR_IO, SHS_ERR_IO};

/* What every rank's refusal must say of each spoilt save (of n shards). */
static void spoil_words(int how, int n, char *buf, size_t len)
{
    static const char *const fmt[SPOILS] = {
        "shard-1-of-%d.emb is of save", "shard-1-of-%d.emb: the rows block (bytes 128..",
        "shard-1-of-%d.emb: the header block (bytes 0..127)",
        "shard-0-of-%d.emb holds shard 1 of", "shard-1-of-%d.emb: the optimizer state block",
        "shard-1-of-%d.emb is short: bytes 100..127", "cannot open embedding shard "
        SAVE_DIR "-spoilt/shard-1-of-%d.emb"};
    snprintf(buf, len, fmt[how], n);
}

/* Whether the lines logged to f hold the load's refusal with these words. */
static bool logged_refusal(FILE *f, const char *words)
{
    char line[2048];
    rewind(f);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, "shs_emb_load: rank ") != NULL && strstr(line, words) != NULL)
            return true;
    return false;
}

static void spoil(int how, const char *dir, const char *other, int n)
{
    char one[256];
    snprintf(one, sizeof(one), "%s/shard-1-of-%d.emb", dir, n);
    sh("rm -rf %s && cp -r %s %s", dir, SAVE_DIR, dir);
    switch (how) {
    case SPOIL_MIXED: sh("cp %s/shard-1-of-%d.emb %s", other, n, one); break;
    case SPOIL_ROWS: flip_byte(one, 203); break;
    case SPOIL_HEADER: flip_byte(one, 56); break;
    case SPOIL_SWAPPED:
        sh("cd %s && mv shard-0-of-%d.emb t && mv shard-1-of-%d.emb shard-0-of-%d.emb && "
           "mv t shard-1-of-%d.emb", dir, n, n, n, n);
        break;
    case SPOIL_STATE: flip_byte(one, -1); break;
    case SPOIL_SHORT:
        if (truncate(one, 100) != 0)
            fail("truncate %s: %s", one, strerror(errno));
        break;
    case SPOIL_MISSING: sh("rm %s", one); break;
    }
}

static void case_save(shs_ctx_t *ctx)
{
    static const int two[] = {0, 1};
    static uint64_t ids[BATCH];
    static float after[BATCH * DIM];
    int n = shs_ctx_size(ctx);
    shs_emb_t *a, *b;
    shs_emb_params_t pa = update_params(SHS_EMB_PATH_AUTO);
    pa.field_mask |= SHS_EMB_PARAM_OPTIMIZER;
    pa.optimizer = SHS_EMB_OPT_ADAGRAD;
    CHECK_OK(shs_emb_create(ctx, &pa, &a));
    run_updates(a, 2);
    CHECK_OK(shs_ctx_barrier(ctx));
    const char *dir = SAVE_DIR, *other = SAVE_DIR "-again", *bad = SAVE_DIR "-spoilt";
    if (g_rank == 0)
        sh("rm -rf %s %s && mkdir -p %s %s", dir, other, dir, other);
    CHECK_OK(shs_ctx_barrier(ctx));
    CHECK_OK(shs_emb_save(a, dir));
    CHECK_OK(shs_emb_save(a, other)); /* the same rows, another save */

    shs_emb_params_t pb = pa;
    pb.map = SHS_EMB_MAP_RANGE;
    pb.field_mask |= SHS_EMB_PARAM_HOLDERS;
    pb.holders = two;
    pb.nholders = 2;
    CHECK_OK(shs_emb_create(ctx, &pb, &b));
    CHECK_OK(shs_emb_load(b, dir));
    same_rows(a, b, "after the load into 2 holders", true);

    /* a spoilt save is refused with one status on every rank, holder or
     * not, and no rank's rows change; every case is tried, then reported */
    int wrong = 0;
    for (int how = 0; how < SPOILS; how++) {
        CHECK_OK(shs_ctx_barrier(ctx));
        if (g_rank == 0)
            spoil(how, bad, other, n);
        CHECK_OK(shs_ctx_barrier(ctx));
        FILE *log = tmpfile();
        if (log == NULL)
            fail("tmpfile: %s", strerror(errno));
        shs__log_set_stream(log);
        shs_status_t st = shs_emb_load(b, bad);
        shs__log_set_stream(NULL);
        char words[256];
        spoil_words(how, n, words, sizeof(words));
        bool ok = st == spoil_status[how];
        if (!ok)
            fprintf(stderr, "FAIL rank %d: load of a save with %s: %s, expected %s\n", g_rank,
                    spoil_name[how], shs_status_string(st),
                    shs_status_string(spoil_status[how]));
        if (!logged_refusal(log, words)) {
            fprintf(stderr, "FAIL rank %d: load of a save with %s: no refusal \"%s\" logged\n",
                    g_rank, spoil_name[how], words);
            ok = false;
        }
        fclose(log);
        if (!rows_equal(a, b, spoil_name[how], false, true))
            ok = false;
        wrong += !ok;
        CHECK_OK(shs_emb_load(b, dir)); /* the next case starts from the right rows */
    }
    if (wrong > 0)
        fail("%d of %d spoilt saves not refused alike", wrong, SPOILS);
    same_rows(a, b, "after the spoilt saves", true);

    /* a save of another dim is refused alike and leaves the shard as it was */
    shs_emb_params_t pc = pb;
    pc.dim = DIM / 2;
    shs_emb_t *c;
    CHECK_OK(shs_emb_create(ctx, &pc, &c));
    CHECK_EQ(shs_emb_load(c, dir), SHS_ERR_SIZE_MISMATCH);
    for (size_t k = 0; k < BATCH; k++) /* every rank still sees the rows it had: 0 */
        ids[k] = k;
    CHECK_OK(shs_emb_lookup(shs_emb_worker(c, 0), ids, BATCH, after, BATCH * DIM));
    for (size_t k = 0; k < BATCH * (DIM / 2); k++)
        if (after[k] != 0.0f)
            fail("a failed load changed value %zu to %g", k, (double)after[k]);
    shs_emb_destroy(c);
    shs_emb_destroy(b);
    shs_emb_destroy(a);
}

/* ---------------------------------------------------------------- rejoin */

#define RJ_VICTIM 2
#define RJ_SETS 10 /* rounds of update_batch per set */

/* Rank r's worker 0 sends set `set` (rounds set*RJ_SETS ..) of updates. */
static void rejoin_send(shs_emb_worker_t *w, int set)
{
    static uint64_t ids[UPD_N];
    static float g[UPD_N * DIM];
    for (int k = set * RJ_SETS; k < (set + 1) * RJ_SETS; k++) {
        update_batch(g_rank, 0, k, ids, g);
        CHECK_OK(shs_emb_update(w, ids, UPD_N, g));
    }
    CHECK_OK(shs_emb_flush(w, SHS_TIMEOUT_DEFAULT));
}

/* What every row holds after sets 0 and 2 of every rank, and set 1 on the
 * rows the victim does not hold (set 1 came after the save it reloads). */
static float *rejoin_reference(int n)
{
    float *delta = calloc((size_t)ROWS * DIM, sizeof(float));
    if (delta == NULL)
        fail("calloc");
    for (int r = 0; r < n; r++) {
        add_rounds(delta, r, 0, 0, RJ_SETS, -1, n);
        add_rounds(delta, r, 0, RJ_SETS, 2 * RJ_SETS, RJ_VICTIM, n);
        add_rounds(delta, r, 0, 2 * RJ_SETS, 3 * RJ_SETS, -1, n);
    }
    return delta;
}

static void case_rejoin(shs_ctx_t *ctx)
{
    static uint64_t ids[8];
    static float out[8 * DIM];
    int n = shs_ctx_size(ctx);
    bool back = shs_ctx_rejoined(ctx) != 0;
    char dir[160];
    const char *token = getenv("SHS_JOB_TOKEN");
    snprintf(dir, sizeof(dir), "/tmp/shs-emb-rejoin-%s", token != NULL ? token : "none");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        fail("mkdir %s: %s", dir, strerror(errno));
    shs_emb_params_t p = update_params(SHS_EMB_PATH_AUTO);
    p.workers = 1;
    p.field_mask |= SHS_EMB_PARAM_REJOIN_DIR;
    p.rejoin_dir = dir;
    shs_emb_t *emb;
    double t0 = now_s();
    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    shs_emb_worker_t *w = shs_emb_worker(emb, 0);
    if (back) {
        printf("rank %d: rejoined; table made, shard loaded in %.2f s\n", g_rank,
               now_s() - t0);
    } else {
        rejoin_send(w, 0);
        CHECK_OK(shs_ctx_barrier(ctx));
        CHECK_OK(shs_emb_save(emb, dir));
        rejoin_send(w, 1); /* not in the save: lost on the victim's rows */
        CHECK_OK(shs_ctx_barrier(ctx));
        if (g_rank == RJ_VICTIM) {
            fflush(stdout);
            raise(SIGKILL);
        }
        /* the victim's rows fail while it is gone, and work once it is back */
        for (int k = 0; k < 8; k++)
            ids[k] = (uint64_t)(RJ_VICTIM + k * n);
        double t_kill = now_s();
        int refused = 0;
        for (;;) {
            (void)shs_progress(ctx); /* the context takes the rejoiner in */
            shs_status_t st = shs_emb_lookup(w, ids, 8, out, 8 * DIM);
            if (st == SHS_OK && refused > 0)
                break;
            if (st != SHS_OK && st != SHS_ERR_PEER_FAILED && st != SHS_ERR_TIMEOUT)
                fail("lookup of the victim's rows: %s", shs_status_string(st));
            refused += st != SHS_OK;
            if (now_s() - t_kill > 150.0)
                fail("rank %d's rows not back %.0f s after it was killed (%d refusals)",
                     RJ_VICTIM, now_s() - t_kill, refused);
            usleep(50 * 1000);
        }
        printf("rank %d: rank %d's rows back %.2f s after it was killed\n", g_rank, RJ_VICTIM,
               now_s() - t_kill);
    }
    rejoin_send(w, 2); /* both ways: to and from the rejoined rank */
    CHECK_OK(shs_ctx_barrier(ctx));
    float *delta = rejoin_reference(n);
    check_updated(emb, delta, back ? "after the rejoin (rejoined rank)" : "after the rejoin");
    free(delta);
    shs_emb_stats_t s;
    CHECK_OK(shs_emb_stats(emb, &s));
    if (!back && s.peer_failures == 0)
        fail("stats: no peer failure counted while rank %d was gone", RJ_VICTIM);
    if (back && s.peer_failures != 0)
        fail("stats: the rejoined rank counts %llu peer failures",
             (unsigned long long)s.peer_failures);
    /* save and load agree among the living, the rejoined rank with them:
     * a save after the rejoin, then a load of it, leave the rows as they are */
    double ts = now_s();
    CHECK_OK(shs_emb_save(emb, dir));
    CHECK_OK(shs_emb_load(emb, dir));
    delta = rejoin_reference(n);
    check_updated(emb, delta, back ? "saved and loaded again (rejoined rank)"
                                   : "saved and loaded again");
    free(delta);
    printf("rank %d: rows right after the rejoin, saved and loaded again in %.1f s\n", g_rank,
           now_s() - ts);
    shs_emb_destroy(emb);
}

/* ----------------------------------------------------------------- cache */

#define CACHE_AGE 6
#define CACHE_N 200

static void cache_ids(int r, uint64_t *ids)
{
    for (int i = 0; i < CACHE_N; i++)
        ids[i] = (uint64_t)(r * 1000 + i * 3) % ROWS;
}

/* delta of the rows rank r updates in its round k: -LR * (k + 1) / 8 */
static void cache_expect(const uint64_t *ids, const float *out, float add, const char *what)
{
    float want[DIM];
    for (int i = 0; i < CACHE_N; i++) {
        shs_emb_init_row(SEED, ids[i], 0.5f, want, DIM);
        for (int j = 0; j < DIM; j++)
            if (out[i * DIM + j] != want[j] + add)
                fail("%s: id %llu col %d is %.9g, expected %.9g", what,
                     (unsigned long long)ids[i], j, (double)out[i * DIM + j],
                     (double)(want[j] + add));
    }
}

static void case_cache_path(shs_ctx_t *ctx, shs_emb_path_t path, const char *what)
{
    static uint64_t mine[CACHE_N], theirs[CACHE_N];
    static float out[CACHE_N * DIM], g[CACHE_N * DIM];
    shs_emb_params_t p = params(SHS_EMB_MAP_MODULO, path, 1);
    p.field_mask |= SHS_EMB_PARAM_CACHE | SHS_EMB_PARAM_LR;
    p.lr = 1.0f;
    p.cache_rows = 1024;
    p.cache_age = CACHE_AGE;
    shs_emb_t *emb;
    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    shs_emb_worker_t *w = shs_emb_worker(emb, 0);
    int n = shs_ctx_size(ctx);
    cache_ids(g_rank, mine);
    cache_ids((g_rank + 1) % n, theirs); /* the next rank updates these */
    /* repeated lookups: rows right, and served from the cache */
    for (int k = 0; k < 3; k++) {
        CHECK_OK(shs_emb_lookup(w, mine, CACHE_N, out, CACHE_N * DIM));
        cache_expect(mine, out, 0.0f, what);
        CHECK_OK(shs_emb_lookup(w, theirs, CACHE_N, out, CACHE_N * DIM));
        cache_expect(theirs, out, 0.0f, what);
    }
    shs_emb_stats_t s;
    CHECK_OK(shs_emb_stats(emb, &s));
    if (s.cache_hits == 0 || s.cache_admitted == 0 || s.cache_rows < 1024 ||
        s.cache_age != CACHE_AGE)
        fail("%s: %llu hits, %llu admitted, %u rows, age %u", what,
             (unsigned long long)s.cache_hits, (unsigned long long)s.cache_admitted,
             s.cache_rows, s.cache_age);
    CHECK_OK(shs_ctx_barrier(ctx));
    /* this rank's update of its rows (cached now): its next lookup after
     * the flush sees it */
    for (size_t i = 0; i < CACHE_N * DIM; i++)
        g[i] = -0.25f;
    CHECK_OK(shs_emb_update(w, mine, CACHE_N, g));
    CHECK_OK(shs_emb_flush(w, SHS_TIMEOUT_DEFAULT));
    /* SHS_EMB_CACHE_OWN=keep: the own update too is seen within the age */
    const char *own = getenv("SHS_EMB_CACHE_OWN");
    bool keep = own != NULL && strcmp(own, "keep") == 0;
    for (int k = 0; keep && k < CACHE_AGE - 1; k++)
        CHECK_OK(shs_emb_lookup(w, mine, CACHE_N, out, CACHE_N * DIM));
    CHECK_OK(shs_emb_lookup(w, mine, CACHE_N, out, CACHE_N * DIM));
    cache_expect(mine, out, 0.25f, keep ? "own update, CACHE_AGE lookups later" : "own update");
    /* the others' updates of rows cached here: seen after at most
     * CACHE_AGE more lookups */
    CHECK_OK(shs_ctx_barrier(ctx)); /* every rank updated and flushed */
    for (int k = 0; k < CACHE_AGE; k++)
        CHECK_OK(shs_emb_lookup(w, theirs, CACHE_N, out, CACHE_N * DIM));
    cache_expect(theirs, out, 0.25f, "the next rank's update, CACHE_AGE lookups later");
    CHECK_OK(shs_emb_stats(emb, &s));
    printf("rank %d: %s: %llu hits, %llu misses, %llu expired, %llu admitted, %llu rejected, "
           "mean hit age %.2f lookups, %llu cache bytes\n", g_rank, what,
           (unsigned long long)s.cache_hits, (unsigned long long)s.cache_misses,
           (unsigned long long)s.cache_expired, (unsigned long long)s.cache_admitted,
           (unsigned long long)s.cache_rejected, s.cache_hit_age,
           (unsigned long long)s.cache_bytes);
    shs_emb_destroy(emb);
}

static void case_cache(shs_ctx_t *ctx)
{
    case_cache_path(ctx, SHS_EMB_PATH_READ, "cache/read");
    case_cache_path(ctx, SHS_EMB_PATH_OWNER, "cache/owner");
    /* bad sizes: refused alike on every rank */
    shs_emb_params_t p = params(SHS_EMB_MAP_MODULO, SHS_EMB_PATH_AUTO, 1);
    p.field_mask |= SHS_EMB_PARAM_CACHE;
    shs_emb_t *emb = NULL;
    p.cache_rows = 16;
    p.cache_age = 1000001;
    CHECK_EQ(shs_emb_create(ctx, &p, &emb), SHS_ERR_CONFIG);
    p.cache_age = 4;
    p.cache_rows = 1u << 28; /* 2^28 rows of 64 bytes: more than half this guest has */
    CHECK_EQ(shs_emb_create(ctx, &p, &emb), SHS_ERR_CONFIG);
    if (emb != NULL)
        fail("a refused create wrote the handle");
}

/* ------------------------------------------------------------------ torn */

#define TORN_ROWS 4096
#define TORN_DIM 16
#define TORN_N 2048    /* ids per lookup and per update: an update touches 40 % of the rows */
#define TORN_READS 130000 /* distinct rows each rank fetches per path: 4 x 2 x this > 10^6 */

typedef struct torn_job {
    shs_emb_worker_t *w;
    atomic_bool *stop;
    uint64_t calls;
    shs_status_t st;
} torn_job_t;

/* Grads of -1 with lr 1: each update adds 1 to every element of its rows. */
static void *torn_updater(void *arg)
{
    torn_job_t *j = arg;
    static uint64_t ids[TORN_N];
    static float g[TORN_N * TORN_DIM];
    uint64_t seed = 5 + (uint64_t)g_rank;
    for (size_t i = 0; i < TORN_N * TORN_DIM; i++)
        g[i] = -1.0f;
    while (!atomic_load(j->stop) && j->st == SHS_OK) {
        for (int i = 0; i < TORN_N; i++)
            ids[i] = rng_next(&seed) % TORN_ROWS;
        j->st = shs_emb_update(j->w, ids, TORN_N, g);
        j->calls++;
    }
    if (j->st == SHS_OK)
        j->st = shs_emb_flush(j->w, SHS_TIMEOUT_DEFAULT);
    return NULL;
}

/* Every returned row: its elements equal and a whole, non-negative count. */
static void torn_check(const uint64_t *ids, const float *out, const char *what)
{
    for (int k = 0; k < TORN_N; k++) {
        const float *row = out + (size_t)k * TORN_DIM;
        bool whole = row[0] >= 0.0f && row[0] < 16777216.0f && row[0] == floorf(row[0]);
        for (int j = 1; j < TORN_DIM && whole; j++)
            whole = row[j] == row[0];
        if (!whole) {
            int j = 1;
            while (j < TORN_DIM - 1 && row[j] == row[0])
                j++;
            fail("%s: row %llu came back torn: col 0 is %.9g, col %d is %.9g", what,
                 (unsigned long long)ids[k], (double)row[0], j, (double)row[j]);
        }
    }
}

static void torn_phase(shs_ctx_t *ctx, shs_emb_path_t path, const char *what)
{
    static uint64_t ids[TORN_N];
    static float out[TORN_N * TORN_DIM];
    shs_emb_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_EMB_PARAM_MAP | SHS_EMB_PARAM_PATH | SHS_EMB_PARAM_WORKERS |
                   SHS_EMB_PARAM_INIT | SHS_EMB_PARAM_MAX_BATCH | SHS_EMB_PARAM_LR;
    p.rows = TORN_ROWS;
    p.dim = TORN_DIM;
    p.map = SHS_EMB_MAP_MODULO;
    p.path = path;
    p.workers = 2;
    p.init_scale = 0.0f;
    p.lr = 1.0f;
    p.max_batch = TORN_N;
    shs_emb_t *emb;
    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    atomic_bool stop = false;
    torn_job_t up = {.w = shs_emb_worker(emb, 1), .stop = &stop, .st = SHS_OK};
    pthread_t th;
    if (pthread_create(&th, NULL, torn_updater, &up) != 0)
        fail("pthread_create");
    shs_emb_worker_t *w = shs_emb_worker(emb, 0);
    uint64_t seed = 11 + (uint64_t)g_rank, read = 0, calls = 0;
    shs_emb_stats_t s;
    double t0 = now_s();
    while (read < TORN_READS) {
        /* a window of adjacent ids: one long READ per holder, racing many
         * of the apply thread's row updates */
        uint64_t at = rng_next(&seed) % TORN_ROWS;
        for (int i = 0; i < TORN_N; i++)
            ids[i] = (at + (uint64_t)i) % TORN_ROWS;
        shs_status_t st = shs_emb_lookup(w, ids, TORN_N, out, TORN_N * TORN_DIM);
        if (st != SHS_OK)
            fail("%s: lookup: %s", what, shs_status_string(st));
        torn_check(ids, out, what);
        CHECK_OK(shs_emb_stats(emb, &s));
        read = s.rows_read + s.rows_local + s.rows_owner; /* distinct rows of each call */
        calls++;
    }
    atomic_store(&stop, true);
    pthread_join(th, NULL);
    if (up.st != SHS_OK)
        fail("%s: updater: %s", what, shs_status_string(up.st));
    CHECK_OK(shs_emb_stats(emb, &s));
    printf("rank %d: %s: %llu rows read (%llu lookups) in %.1f s beside %llu updates, none "
           "torn; "
           "%llu row checks failed and were read again, %llu rows taken by the owner "
           "path instead; %llu rows read remote, %llu local, %llu by the owner\n",
           g_rank, what, (unsigned long long)read, (unsigned long long)calls, now_s() - t0,
           (unsigned long long)up.calls, (unsigned long long)s.torn_retries,
           (unsigned long long)s.torn_fallbacks, (unsigned long long)s.rows_read,
           (unsigned long long)s.rows_local, (unsigned long long)s.rows_owner);
    CHECK_OK(shs_ctx_barrier(ctx)); /* every rank's updates are in */
    shs_emb_destroy(emb);
}

static void case_torn(shs_ctx_t *ctx)
{
    torn_phase(ctx, SHS_EMB_PATH_READ, "torn/read");
    torn_phase(ctx, SHS_EMB_PATH_AUTO, "torn/auto");
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s rows|update|shadow|kill|bad|save|rejoin|torn|cache\n", argv[0]);
        return RC_FAIL;
    }
    if (!have_rdma_device()) {
        fprintf(stderr, "no RDMA device: skipped\n");
        return RC_SKIP;
    }
    shs_ctx_t *ctx;
    shs_status_t st = shs_ctx_create(NULL, &ctx);
    if (st != SHS_OK)
        fail("shs_ctx_create: %s", shs_status_string(st));
    g_rank = shs_ctx_rank(ctx);
    if (strcmp(argv[1], "rows") == 0)
        case_rows(ctx);
    else if (strcmp(argv[1], "update") == 0)
        case_update(ctx);
    else if (strcmp(argv[1], "shadow") == 0)
        case_shadow(ctx);
    else if (strcmp(argv[1], "kill") == 0)
        case_kill(ctx);
    else if (strcmp(argv[1], "bad") == 0)
        case_bad(ctx);
    else if (strcmp(argv[1], "save") == 0)
        case_save(ctx);
    else if (strcmp(argv[1], "rejoin") == 0)
        case_rejoin(ctx);
    else if (strcmp(argv[1], "torn") == 0)
        case_torn(ctx);
    else if (strcmp(argv[1], "cache") == 0)
        case_cache(ctx);
    else
        fail("unknown case %s", argv[1]);
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_ctx_destroy(ctx);
    printf("rank %d: %s passed\n", g_rank, argv[1]);
    return RC_OK;
}

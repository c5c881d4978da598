/*
 * Force-included (-include) into the README's trainer skeleton, so that the
 * skeleton itself is run through a rejoin, unchanged (rdma.readme.rejoin,
 * under shs-launch -n 4 --restart 2). It wraps two calls:
 *   shs_ctx_create    keeps the context;
 *   shs_shadow_start  starts the engine, then, in the job's first
 *                     processes: a barrier (every rank past its set-up),
 *                     and rank 2 dies (SIGKILL) after 2 rounds; the
 *                     survivors wait until the new rank 2 has synced (a
 *                     file named by the job token), and stop at once,
 *                     their engines often not yet taking it back (the
 *                     finish must settle them all the same). The new rank
 *                     2 syncs 3 rounds, then says so.
 * The skeleton then trains, stops, finishes and exits as written: it exits
 * 0 only when its shs_shadow_finish settled every rank.
 */
#ifndef SHS_TEST_README_REJOIN_H
#define SHS_TEST_README_REJOIN_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <shadowsync/shadowsync.h>

#define RR_VICTIM 2
#define RR_BOUND_S 120.0

static shs_ctx_t *rr_ctx;

static double rr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void rr_fail(const char *what)
{
    fprintf(stderr, "readme-rejoin rank %d: FAIL: %s\n", shs_ctx_rank(rr_ctx), what);
    exit(1);
}

static void rr_flag_path(char *buf, size_t len)
{
    const char *token = getenv("SHS_JOB_TOKEN");
    if (token == NULL)
        rr_fail("SHS_JOB_TOKEN is unset (run under shs-launch --restart 2)");
    snprintf(buf, len, "/tmp/shs-readme-rejoin-%.64s", token);
}

static void rr_unlink_flag(void)
{
    char path[128];
    rr_flag_path(path, sizeof(path));
    unlink(path);
}

/* Wait, the engine running, until cond(sh) holds. */
static void rr_wait(shs_shadow_t *sh, int (*cond)(shs_shadow_t *, const shs_shadow_stats_t *),
                    const char *what)
{
    double t0 = rr_now();
    for (;;) {
        shs_shadow_stats_t s;
        if (shs_shadow_stats(sh, &s) != SHS_OK || !s.running)
            rr_fail("the shadow thread stopped by itself");
        (void)shs_progress(rr_ctx); /* the context is this thread's: take a rejoiner in */
        if (cond(sh, &s))
            return;
        if (rr_now() - t0 > RR_BOUND_S)
            rr_fail(what);
        usleep(20 * 1000);
    }
}

static uint64_t rr_rounds0;

static int rr_rounds(shs_shadow_t *sh, const shs_shadow_stats_t *s)
{
    (void)sh;
    return s->rounds >= rr_rounds0;
}

static int rr_back(shs_shadow_t *sh, const shs_shadow_stats_t *s)
{
    char path[128];
    (void)sh;
    rr_flag_path(path, sizeof(path));
    (void)s;
    return access(path, F_OK) == 0;
}

static shs_status_t rr_ctx_create(const shs_ctx_params_t *params, shs_ctx_t **ctx_p)
{
    shs_status_t st = shs_ctx_create(params, ctx_p);
    if (st == SHS_OK)
        rr_ctx = *ctx_p;
    if (st == SHS_OK && shs_ctx_size(rr_ctx) <= RR_VICTIM)
        rr_fail("needs more than 2 ranks");
    return st;
}

static shs_status_t rr_shadow_start(shs_shadow_t *sh)
{
    shs_status_t st = shs_shadow_start(sh);
    if (st != SHS_OK)
        return st;
    int me = shs_ctx_rank(rr_ctx);
    if (shs_ctx_rejoined(rr_ctx)) {
        rr_rounds0 = 3;
        rr_wait(sh, rr_rounds, "the rejoined rank did not sync 3 rounds");
        char path[128];
        rr_flag_path(path, sizeof(path));
        FILE *f = fopen(path, "w");
        if (f == NULL || fclose(f) != 0)
            rr_fail("cannot write the flag file");
        printf("readme-rejoin rank %d: rejoined and synced\n", me);
        return st;
    }
    if (shs_ctx_barrier(rr_ctx) != SHS_OK) /* every rank past its set-up */
        rr_fail("the barrier before the kill failed");
    if (me == RR_VICTIM) {
        rr_rounds0 = 2;
        rr_wait(sh, rr_rounds, "rank 2 did not sync 2 rounds");
        fflush(stdout);
        raise(SIGKILL);
    }
    if (me == 0)
        atexit(rr_unlink_flag);
    rr_wait(sh, rr_back, "rank 2 was not back and taken back in time");
    shs_shadow_stats_t s;
    if (shs_shadow_stats(sh, &s) != SHS_OK)
        rr_fail("shs_shadow_stats");
    printf("readme-rejoin rank %d: rank %d back (%s by this engine)\n", me, RR_VICTIM,
           s.failed_peers == 0 ? "taken back" : "not yet taken back");
    return st;
}

#define shs_ctx_create(params, ctx_p) rr_ctx_create(params, ctx_p)
#define shs_shadow_start(sh) rr_shadow_start(sh)

#endif

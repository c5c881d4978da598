/*
 * --restart-rank R|any --restart-after S [--restarts K] [--restart-every E]:
 * ranks killed (SIGKILL) and started again by the launcher (shs-launch
 * --restart R|any), K times: kill j (0..K-1) comes S + j E seconds into the
 * job's pass, to rank R or, with `any`, to a rank drawn from --seed and j.
 *
 * Before it dies the victim writes its data position and the job's start
 * to a file (the demo's stand-in for a trainer's data-loader checkpoint).
 * The new process (SHS_REJOIN=1, set by the launcher) reads it, rejoins the
 * running job with the same regions and engine (the model seeded from a
 * survivor's snapshot), skips what only the job's start-up does (the memory
 * check's collective, the start barrier) and trains the rest of its share.
 * It reports when it was syncing again, counted from its process start.
 * A kill waits until the previous kill's victim has made its set-up again
 * (a count in a file named by the token: the launcher's ranks share a
 * host), so the cycles are one rank down at a time; none comes past 80 % of
 * the victim's share (a rejoiner would arrive while the others run the end
 * steps).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

static void state_path(const ctr_run_t *r, char *buf, size_t len)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, len, "%s/shs-ctr-restart-%s.rank%d", dir != NULL && *dir ? dir : "/tmp",
             getenv("SHS_JOB_TOKEN"), r->rank);
}

/* The job's count of kills whose victim is syncing again (one host: the
 * launcher's), so that kill j waits for kill j - 1's victim to be back. */
static void job_path(char *buf, size_t len, const char *what)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, len, "%s/shs-ctr-restart-%s.%s", dir != NULL && *dir ? dir : "/tmp",
             getenv("SHS_JOB_TOKEN"), what);
}

/* A count the job's ranks share (0 when not written yet). */
static int job_count(const char *what)
{
    char path[4096];
    job_path(path, sizeof(path), what);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &n) != 1)
            n = 0;
        fclose(f);
    }
    return n;
}

static void job_count_raise(const char *what, int n)
{
    char path[4096], tmp[4200];
    job_path(path, sizeof(path), what);
    if (job_count(what) >= n)
        return;
    snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%d\n", n) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
        ctr_die("--restart-rank: cannot write %s: %s", path, strerror(errno));
}

/* kills done ("killed"), their victims set up again ("back"), ranks whose
 * pass has ended ("ending") */
static int kills_back(void)
{
    return job_count("back");
}

/* This rejoiner (of kill next - 1) has made its set-up again. */
static void mark_back(int next)
{
    job_count_raise("back", next);
}

/* How long a rejoiner's pass runs at most before a kill that was due
 * while it started may come (s). */
#define RESTART_SETTLE_S 3.0
/* No kill once the victim has trained this share of its examples. */
#define RESTART_LAST 0.8

/* The rank kill j goes to. */
static int victim(const ctr_run_t *r, int j)
{
    if (r->o.restart_rank >= 0)
        return r->o.restart_rank;
    uint64_t x = r->o.seed * 0x9e3779b97f4a7c15ull + (uint64_t)j + 1;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (int)((x ^ (x >> 31)) % (uint64_t)r->size);
}

void ctr_restart_init(ctr_run_t *r)
{
    r->rejoined = shs_ctx_rejoined(r->ctx) != 0;
    if (r->o.restart_rank == CTR_RESTART_NONE && !r->rejoined)
        return;
    if (getenv("SHS_JOB_TOKEN") == NULL)
        ctr_die("--restart-rank: run it under shs-launch --restart (SHS_JOB_TOKEN is unset)");
    if (r->o.restart_rank >= r->size)
        ctr_die("--restart-rank %d: the job has %d rank(s), 0..%d", r->o.restart_rank, r->size,
                r->size - 1);
    if (!r->rejoined)
        return;
    char path[4096];
    state_path(r, path, sizeof(path));
    FILE *f = fopen(path, "r");
    double t0 = 0;
    int next = 0;
    unsigned long long pos = 0;
    if (f == NULL || fscanf(f, "%lf %d %llu", &t0, &next, &pos) != 3)
        ctr_die("rejoined, but %s (the killed process's position) %s", path,
                f == NULL ? strerror(errno) : "is not readable");
    fclose(f);
    r->job_t0 = t0;
    r->restart_next = next;
    r->rejoin_kill = next;
    r->start_pos = pos;
    printf("%-10s rank %d: started again (SHS_REJOIN=1); rejoins the running job; resumes at "
           "example %llu of its share\n", r->o.label, r->rank, pos);
    fflush(stdout);
}

/* How long a rank that ended its pass waits for the rejoiners (s). */
#define RESTART_END_WAIT_S 600.0

void ctr_restart_end(ctr_run_t *r)
{
    if (r->o.restart_rank == CTR_RESTART_NONE && !r->rejoined)
        return;
    job_count_raise("ending", 1);
    double t0 = ctr_now();
    for (;;) {
        shs_shadow_stats_t s;
        bool whole = r->sh == NULL ||
                     (shs_shadow_stats(r->sh, &s) == SHS_OK && s.failed_peers == 0);
        if (kills_back() >= job_count("killed") && whole)
            return;
        if (ctr_now() - t0 > RESTART_END_WAIT_S) {
            printf("%-10s rank %d: a killed rank was not back %.0f s after this rank's pass "
                   "ended; going on\n", r->o.label, r->rank, RESTART_END_WAIT_S);
            fflush(stdout);
            return;
        }
        if (r->ctx != NULL) /* the context takes the rejoiner in */
            (void)shs_progress(r->ctx);
        usleep(20 * 1000);
    }
}

void ctr_restart_ready(const ctr_run_t *r)
{
    if (r->rejoined)
        mark_back(r->rejoin_kill);
}

void ctr_restart_tick(ctr_run_t *r, uint64_t done)
{
    double now = ctr_now();
    if (r->rejoined && r->rejoin_sync_s == 0 && r->sh != NULL) {
        shs_shadow_stats_t s;
        if (shs_shadow_stats(r->sh, &s) == SHS_OK && s.first_sync_ns != 0) {
            r->rejoin_sync_s = (double)s.first_sync_ns / 1e9 - r->proc_t0;
            printf("%-10s rank %d: rejoined: syncing again %.2f s after its process started "
                   "(at %.3f s, CLOCK_MONOTONIC)\n", r->o.label, r->rank, r->rejoin_sync_s,
                   (double)s.first_sync_ns / 1e9);
            fflush(stdout);
        }
    }
    while (r->o.restart_rank != CTR_RESTART_NONE && r->restart_next < r->o.restarts) {
        int j = r->restart_next;
        double at = r->o.restart_after + j * r->o.restart_every;
        if (r->o.restart_pct ? (double)done < (double)r->ntrain * at / 100.0
                             : now < r->t0 + at)
            return;
        if (victim(r, j) != r->rank) {
            r->restart_next++;
            continue;
        }
        /* not near the end: a rejoiner arriving while the others run the
         * job's end steps would not meet them (docs/failures.md) */
        if ((double)done > RESTART_LAST * (double)r->ntrain) {
            printf("%-10s rank %d: kill %d of %d not done: %.0f %% of its share trained (a "
                   "rejoiner would come back after the others ended)\n", r->o.label, r->rank,
                   j + 1, r->o.restarts, 100.0 * (double)done / (double)r->ntrain);
            fflush(stdout);
            r->restart_next++;
            continue;
        }
        /* a kill due while this process was still starting (a rejoiner
         * drawing its held-out data) comes once it has synced again, or its pass has
         * run for RESTART_SETTLE_S */
        if (r->rejoined && r->rejoin_sync_s == 0 && now < r->pass_t0 + RESTART_SETTLE_S)
            return;
        /* one rank down at a time: not before the previous kill's victim
         * has made its set-up again (a rank killed while another still makes
         * the job's regions again cannot rejoin: docs/failures.md, "Not
         * covered"; and its death may not be seen here yet) */
        if (j > 0 && kills_back() < j)
            return;
        /* counted first, then the end looked for (ctr_restart_end does the
         * opposite): a kill either comes before any rank ends its pass, or
         * does not come and is counted back at once */
        job_count_raise("killed", j + 1);
        if (job_count("ending") > 0) {
            printf("%-10s rank %d: kill %d of %d not done: a rank has ended its pass\n",
                   r->o.label, r->rank, j + 1, r->o.restarts);
            fflush(stdout);
            mark_back(j + 1);
            r->restart_next++;
            continue;
        }
        char path[4096];
        state_path(r, path, sizeof(path));
        FILE *f = fopen(path, "w");
        if (f == NULL || fprintf(f, "%.9f %d %llu\n", r->t0, j + 1,
                                 (unsigned long long)done) < 0 || fclose(f) != 0)
            ctr_die("--restart-rank: cannot write %s: %s", path, strerror(errno));
        printf("%-10s rank %d: killed (restart %d of %d) at %.2f s into the pass (at %.3f s, "
               "CLOCK_MONOTONIC), after %llu examples\n", r->o.label, r->rank, j + 1,
               r->o.restarts, now - r->t0, now, (unsigned long long)done);
        fflush(stdout);
        raise(SIGKILL);
    }
}

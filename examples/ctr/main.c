/*
 * shs-ctr: a Hogwild click-through-rate trainer that reproduces ShadowSync's
 * comparisons on a synthetic click log (see data.c and model.c).
 *
 *   shs-launch -n 4 -- shs-ctr --mode s-ma [options]     N ranks (SHS_RANK/SHS_SIZE/...)
 *   shs-ctr --mode single [options]                      the one-process reference
 *
 * Each rank materializes its 1/N share of the training stream once (one
 * pass, as in the paper), trains the model held in a registered region with
 * W lock-free worker threads, and keeps it in sync with the other ranks
 * according to the mode:
 *
 *   none                    no sync: N independent models on 1/N of the data each
 *   s-ma, s-bmuf, s-easgd   the shadow thread syncs in the background (shadow.h)
 *   fr-ma, fr-bmuf, fr-easgd  every --fr-every examples per worker, all workers
 *                           stop at a barrier, one of them runs a sync round
 *                           (which waits for the group's peers), all resume
 *   single                  one process, W workers, all the data, no RDMA
 *
 * --ds G uses DS-Sync groups of G ranks (hypercube schedule when N is a power
 * of G, the general one otherwise) instead of all ranks.
 *
 * Output: one line per rank on stdout, and with --out DIR a JSON file per
 * rank (DIR/<label>.rank<r>.json) that tools/ctr-report.py turns into the
 * table and the picture. --sync-only S measures the shadow engine alone
 * (no workers) for S seconds: syncs per minute for the model size.
 */
#include <errno.h>
#include <getopt.h>
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
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <shadowsync/shadowsync.h>
#include <shadowsync/shadow.h>

#include "ctr.h"

#define MAX_WORKERS 64
#define MAX_CKPT 64
#define PROGRESS_EVERY 64 /* examples between a worker's progress publications */
#define MONITOR_SLEEP_US 5000
#define TRACE_MAX 4096 /* --dump samples: 20 s at one per monitor tick */

typedef struct opts {
    const char *mode;
    int ds;
    int workers;
    uint64_t examples, eval_n, seed;
    double ctr;
    ctr_shape_t shape;
    size_t target_params;
    float lr;
    float lr_end;
    uint64_t fr_every;
    uint32_t interval_us;
    const char *path;
    const char *pin;
    int checkpoints;
    const char *out;
    const char *label;
    double sync_only_s;
    int worker_nice;
    int kill_rank;   /* fault runs: this rank SIGKILLs itself ... */
    double kill_at;  /* ... when this fraction of its pass is done */
    const char *fault_cmd; /* ... or runs this shell command instead (and trains on) */
    double hold_s;   /* S modes: after the pass, keep syncing until a peer failure is
                        seen or this many seconds pass (fault tests) */
    float bmuf_eta, bmuf_zeta, easgd_alpha; /* < 0: the engine's default */
    int bmuf_nesterov;                      /* < 0: the engine's default */
    int dump;                               /* write the final model next to the JSON */
    int no_finish;                          /* skip shs_shadow_finish at the end */
} opts_t;

typedef struct run {
    opts_t o;
    int rank, size;
    bool sync, foreground;
    shs_shadow_algorithm_t algo;
    ctr_layout_t lay;
    float *model;
    shs_region_t *region;
    ctr_example_t *train;
    size_t ntrain;
    shs_shadow_t *sh;
    pthread_barrier_t bar;
    uint64_t nsync; /* foreground syncs per worker */
    atomic_int sync_errors;
    atomic_int syncing; /* FR: a foreground round is rewriting the model */
    /* checkpoints: copies of the model and the examples seen (all ranks) */
    float *ckpt;
    uint64_t ckpt_seen[MAX_CKPT + 1];
    int nckpt;
    int failed; /* peers failed during the run: skip the job-wide teardown steps */
} run_t;

typedef struct worker {
    run_t *run;
    int id;
    pthread_t th;
    _Atomic uint64_t done;
    double loss;
    double pos;
    uint64_t count;
} worker_t;

static int g_rank;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "shs-ctr rank %d: ", g_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CHECK_OK(expr)                                                               \
    do {                                                                             \
        shs_status_t st_ = (expr);                                                   \
        if (st_ != SHS_OK)                                                           \
            die("%s: %s", #expr, shs_status_string(st_));                            \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- workers */

static void fg_sync(run_t *r)
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

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    run_t *r = w->run;
    /* Linux: nice applies to the calling thread */
    if (r->o.worker_nice != 0 && setpriority(PRIO_PROCESS, 0, r->o.worker_nice) != 0)
        fprintf(stderr, "shs-ctr rank %d: worker nice %d refused: %s\n", r->rank,
                r->o.worker_nice, strerror(errno));
    const int W = r->o.workers;
    uint64_t cnt = 0, syncs = 0;
    /* the rate decays linearly to lr_end * lr over the pass: the final
     * model is then an average of its last steps rather than one noisy
     * iterate, which makes modes comparable run to run */
    const float lr0 = r->o.lr, lr1 = r->o.lr * r->o.lr_end;
    const double inv_n = 1.0 / (double)(r->ntrain > 0 ? r->ntrain : 1);
    for (size_t i = (size_t)w->id; i < r->ntrain; i += (size_t)W) {
        const ctr_example_t *ex = &r->train[i];
        float lr = lr0 + (lr1 - lr0) * (float)((double)i * inv_n);
        float q = ctr_sgd_step(&r->lay, r->model, ex, lr);
        w->loss += ctr_logloss(q, ex->label);
        w->pos += ex->label;
        cnt++;
        if (cnt % PROGRESS_EVERY == 0)
            atomic_store_explicit(&w->done, cnt, memory_order_relaxed);
        if (r->foreground && syncs < r->nsync && cnt % r->o.fr_every == 0) {
            fg_sync(r);
            syncs++;
        }
    }
    w->count = cnt;
    atomic_store_explicit(&w->done, cnt, memory_order_relaxed);
    return NULL;
}

/* -------------------------------------------------------------- setup */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shs-ctr --mode none|s-ma|fr-ma|s-bmuf|fr-bmuf|s-easgd|fr-easgd|single [options]\n"
            "  --ds G            DS-Sync groups of G ranks (default: all ranks)\n"
            "  --workers W       Hogwild worker threads per rank (default 2)\n"
            "  --examples T      training examples over all ranks (default 400000)\n"
            "  --eval E          held-out examples (default 20000)\n"
            "  --seed S          dataset and initial model (default 3)\n"
            "  --ctr C           base click-through rate of the teacher (default 0.03)\n"
            "  --buckets B --dim K --hidden H   model shape (default 4096, 4, 16)\n"
            "  --params P        choose buckets for about P parameters\n"
            "  --lr X            SGD learning rate (default 0.05)\n"
            "  --lr-end F        the rate decays linearly to F * X over the pass (default 0.1)\n"
            "  --fr-every K      FR modes: examples per worker between syncs (default 2000)\n"
            "  --interval-us U   S modes: least time between two rounds (default 0)\n"
            "  --path pull|live|ring  S/FR data path (default pull)\n"
            "  --pin CPUS        shadow thread CPUs: auto|none|list (default none)\n"
            "  --checkpoints C   model copies evaluated for the curve (default 6)\n"
            "  --out DIR --label NAME   write DIR/NAME.rank<r>.json\n"
            "  --sync-only S     no training: run the shadow engine alone for S seconds\n"
            "  --worker-nice N   nice value of the worker threads (default 0)\n"
            "  --kill-rank R --kill-at F   fault run: rank R SIGKILLs itself when the\n"
            "                    fraction F of its pass is done (survivors sync on)\n"
            "  --fault-cmd CMD   with --kill-rank: run the shell command CMD instead of\n"
            "                    SIGKILL (e.g. power the guest off, take its link down)\n"
            "  --hold S          S modes: after the pass keep syncing until a failed peer\n"
            "                    is seen or S seconds pass (fault tests)\n"
            "  --bmuf-eta E --bmuf-zeta Z --bmuf-nesterov 0|1 --easgd-alpha A\n"
            "                    the rules' parameters (default: the engine's, shadow.h)\n"
            "  --dump            also write the final model (raw float32) and a trace of\n"
            "                    the output biases over time beside the JSON\n"
            "  --no-finish       sync modes: evaluate each rank's model as the last round\n"
            "                    left it (no shs_shadow_finish)\n");
}

static void parse(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->mode = "none";
    o->workers = 2;
    o->examples = 400000;
    o->eval_n = 20000;
    o->seed = 3;
    o->ctr = 0.03;
    o->shape = (ctr_shape_t){.buckets = 4096, .dim = 4, .hidden = 16};
    o->lr = 0.05f;
    o->lr_end = 0.1f;
    o->fr_every = 2000;
    o->path = "pull";
    /* the ranks of the demo share one machine's CPUs: pinning every rank's
     * shadow thread to the same "last" CPU would only crowd it */
    o->pin = "none";
    o->checkpoints = 6;
    o->kill_rank = -1;
    o->bmuf_eta = o->bmuf_zeta = o->easgd_alpha = -1.0f;
    o->bmuf_nesterov = -1;
    o->kill_at = 0.5;
    static const struct option lo[] = {
        {"mode", 1, NULL, 'm'},     {"ds", 1, NULL, 'g'},        {"workers", 1, NULL, 'w'},
        {"examples", 1, NULL, 'T'}, {"eval", 1, NULL, 'E'},      {"seed", 1, NULL, 's'},
        {"ctr", 1, NULL, 'c'},      {"buckets", 1, NULL, 'B'},   {"dim", 1, NULL, 'K'},
        {"hidden", 1, NULL, 'H'},   {"params", 1, NULL, 'P'},    {"lr", 1, NULL, 'l'},
        {"fr-every", 1, NULL, 'k'}, {"interval-us", 1, NULL, 'i'}, {"path", 1, NULL, 'p'},
        {"pin", 1, NULL, 'x'},      {"checkpoints", 1, NULL, 'C'}, {"out", 1, NULL, 'o'},
        {"label", 1, NULL, 'L'},    {"sync-only", 1, NULL, 'S'}, {"help", 0, NULL, 'h'},
        {"worker-nice", 1, NULL, 'n'},  {"lr-end", 1, NULL, 'e'},
        {"kill-rank", 1, NULL, 'X'},    {"kill-at", 1, NULL, 'Y'},
        {"fault-cmd", 1, NULL, 'F'},    {"hold", 1, NULL, 'O'},
        {"bmuf-eta", 1, NULL, 'a'},     {"bmuf-zeta", 1, NULL, 'z'},
        {"bmuf-nesterov", 1, NULL, 'N'}, {"easgd-alpha", 1, NULL, 'A'},
        {"dump", 0, NULL, 'D'},         {"no-finish", 0, NULL, 'Q'},
        {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->mode = optarg; break;
        case 'g': o->ds = atoi(optarg); break;
        case 'w': o->workers = atoi(optarg); break;
        case 'T': o->examples = strtoull(optarg, NULL, 0); break;
        case 'E': o->eval_n = strtoull(optarg, NULL, 0); break;
        case 's': o->seed = strtoull(optarg, NULL, 0); break;
        case 'c': o->ctr = atof(optarg); break;
        case 'B': o->shape.buckets = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'K': o->shape.dim = atoi(optarg); break;
        case 'H': o->shape.hidden = atoi(optarg); break;
        case 'P': o->target_params = (size_t)strtod(optarg, NULL); break;
        case 'l': o->lr = (float)atof(optarg); break;
        case 'k': o->fr_every = strtoull(optarg, NULL, 0); break;
        case 'i': o->interval_us = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'p': o->path = optarg; break;
        case 'x': o->pin = optarg; break;
        case 'C': o->checkpoints = atoi(optarg); break;
        case 'o': o->out = optarg; break;
        case 'L': o->label = optarg; break;
        case 'S': o->sync_only_s = atof(optarg); break;
        case 'n': o->worker_nice = atoi(optarg); break;
        case 'e': o->lr_end = (float)atof(optarg); break;
        case 'X': o->kill_rank = atoi(optarg); break;
        case 'Y': o->kill_at = atof(optarg); break;
        case 'F': o->fault_cmd = optarg; break;
        case 'O': o->hold_s = atof(optarg); break;
        case 'a': o->bmuf_eta = (float)atof(optarg); break;
        case 'z': o->bmuf_zeta = (float)atof(optarg); break;
        case 'N': o->bmuf_nesterov = atoi(optarg); break;
        case 'A': o->easgd_alpha = (float)atof(optarg); break;
        case 'D': o->dump = 1; break;
        case 'Q': o->no_finish = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (o->workers < 1 || o->workers > MAX_WORKERS || o->examples == 0 || o->eval_n == 0 ||
        o->fr_every == 0 || o->checkpoints < 1 || o->checkpoints > MAX_CKPT ||
        o->shape.buckets == 0 || o->shape.dim < 1 || o->shape.hidden < 1 || !(o->lr > 0) ||
        !(o->ctr > 0 && o->ctr < 0.5)) {
        usage(stderr);
        exit(2);
    }
    if (o->target_params > 0) {
        ctr_layout_t l;
        o->shape.buckets = 1;
        ctr_layout_init(&l, &o->shape);
        size_t per_bucket = (size_t)CTR_FIELDS * (size_t)(1 + o->shape.dim);
        size_t fixed = l.count - per_bucket;
        o->shape.buckets =
            o->target_params > fixed + per_bucket ? (uint32_t)((o->target_params - fixed) / per_bucket)
                                                  : 1;
    }
    if (o->label == NULL)
        o->label = o->mode;
}

static void mode_of(run_t *r)
{
    const char *m = r->o.mode;
    r->sync = strcmp(m, "none") != 0 && strcmp(m, "single") != 0;
    r->foreground = strncmp(m, "fr-", 3) == 0;
    if (!r->sync)
        return;
    const char *a = m + (r->foreground ? 3 : 2);
    if (strncmp(m, "s-", 2) != 0 && !r->foreground)
        die("unknown mode %s", m);
    if (strcmp(a, "ma") == 0)
        r->algo = SHS_SHADOW_MA;
    else if (strcmp(a, "bmuf") == 0)
        r->algo = SHS_SHADOW_BMUF;
    else if (strcmp(a, "easgd") == 0)
        r->algo = SHS_SHADOW_EASGD;
    else
        die("unknown mode %s", m);
}

static bool power_of(int n, int g)
{
    if (g < 2)
        return false;
    while (n > 1 && n % g == 0)
        n /= g;
    return n == 1;
}

static void shadow_params(const run_t *r, shs_shadow_params_t *p)
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

/* ------------------------------------------------------------- output */

typedef struct result {
    double train_s, eps, train_ne, eval_ne, auc, avg_ne, avg_auc, syncs_per_min, round_ms, wait_ms, staleness_ms;
    uint64_t examples, rounds, bytes, errors, skipped, torn;
    /* after a peer failure (failed > 0): when it was seen (CLOCK_MONOTONIC
     * s), this rank's EPS and syncs per minute from then to the end */
    int failed;
    double fail_seen_s, eps_after, syncs_per_min_after;
    uint64_t rounds_after;
    double curve_ne[MAX_CKPT + 1], curve_auc[MAX_CKPT + 1];
} result_t;

static void write_json(const run_t *r, const result_t *res)
{
    if (r->o.out == NULL)
        return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.rank%d.json", r->o.out, r->o.label, r->rank);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        die("cannot write %s: %s", path, strerror(errno));
    fprintf(f,
            "{\"label\": \"%s\", \"mode\": \"%s\", \"ds\": %d, \"rank\": %d, \"size\": %d, "
            "\"workers\": %d, \"params\": %zu, \"examples\": %llu, \"train_s\": %.4f, "
            "\"eps\": %.2f, \"train_ne\": %.6f, \"eval_ne\": %.6f, \"auc\": %.6f, "
            "\"avg_ne\": %.6f, \"avg_auc\": %.6f, "
            "\"rounds\": %llu, \"syncs_per_min\": %.3f, \"round_ms\": %.3f, \"wait_ms\": %.3f, "
            "\"staleness_ms\": %.3f, \"bytes\": %llu, \"errors\": %llu, \"skipped\": %llu, "
            "\"torn\": %llu, \"fr_every\": %llu, \"interval_us\": %u, \"path\": \"%s\", "
            "\"worker_nice\": %d, \"failed_peers\": %d, \"fail_seen_s\": %.4f, "
            "\"eps_after\": %.2f, \"rounds_after\": %llu, \"syncs_per_min_after\": %.3f, "
            "\"curve\": [",
            r->o.label, r->o.mode, r->o.ds, r->rank, r->size, r->o.workers, r->lay.count,
            (unsigned long long)res->examples, res->train_s, res->eps, res->train_ne,
            res->eval_ne, res->auc, res->avg_ne, res->avg_auc, (unsigned long long)res->rounds, res->syncs_per_min,
            res->round_ms, res->wait_ms, res->staleness_ms, (unsigned long long)res->bytes,
            (unsigned long long)res->errors, (unsigned long long)res->skipped,
            (unsigned long long)res->torn, (unsigned long long)(r->foreground ? r->o.fr_every : 0),
            r->o.interval_us, r->o.path, r->o.worker_nice, res->failed, res->fail_seen_s,
            res->eps_after, (unsigned long long)res->rounds_after, res->syncs_per_min_after);
    for (int i = r->rank == 0 ? 0 : r->nckpt - 1; i < r->nckpt; i++)
        fprintf(f, "%s[%llu, %.6f, %.6f]", i && r->rank == 0 ? ", " : "",
                (unsigned long long)r->ckpt_seen[i], res->curve_ne[i], res->curve_auc[i]);
    /* the final model's output biases: a rank whose predictions are all
     * shifted alike shows here first */
    const float *fin = r->nckpt > 0 ? r->ckpt + (size_t)(r->nckpt - 1) * r->lay.count : NULL;
    fprintf(f, "], \"bias\": %.6f, \"b2\": %.6f}\n", fin != NULL ? fin[r->lay.bias] : 0.0,
            fin != NULL ? fin[r->lay.b2] : 0.0);
    fclose(f);
    if (r->o.dump && fin != NULL) {
        snprintf(path, sizeof(path), "%s/%s.rank%d.model", r->o.out, r->o.label, r->rank);
        f = fopen(path, "wb");
        if (f == NULL || fwrite(fin, sizeof(float), r->lay.count, f) != r->lay.count)
            die("cannot write %s", path);
        fclose(f);
    }
}

/* ------------------------------------------------------------ the run */

/* avg = the mean of the ranks' final models (the shadow thread is stopped:
 * the context is this thread's again). */
static void final_average(run_t *r, shs_ctx_t *ctx, float *avg)
{
    shs_coll_params_t cp;
    shs_coll_t *coll;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = SHS_COLL_PARAM_STAGE_BYTES;
    cp.stage_bytes = 0; /* the model is a region: zero-copy */
    CHECK_OK(shs_coll_create(ctx, &cp, &coll));
    memcpy(avg, r->model, r->lay.count * sizeof(float));
    CHECK_OK(shs_allreduce_region(coll, NULL, r->region, 0, r->lay.count, SHS_DTYPE_FLOAT32,
                                  SHS_REDUCE_AVG));
    float *tmp = avg;
    /* keep the rank's own model in the region (it is what the rank holds) */
    for (size_t i = 0; i < r->lay.count; i++) {
        float mean = r->model[i];
        r->model[i] = tmp[i];
        tmp[i] = mean;
    }
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_coll_destroy(coll);
}

static void sync_only(run_t *r, shs_ctx_t *ctx)
{
    CHECK_OK(shs_ctx_barrier(ctx));
    CHECK_OK(shs_shadow_start(r->sh));
    usleep((useconds_t)(r->o.sync_only_s * 1e6));
    CHECK_OK(shs_shadow_stop(r->sh));
    shs_shadow_stats_t s;
    CHECK_OK(shs_shadow_stats(r->sh, &s));
    printf("sync-only rank %d: %zu params (%.1f MB), %s%s, %llu rounds, %.1f syncs/min, "
           "%.1f ms/round (%.1f ms waiting), %.1f MB read, staleness max %.0f ms, %llu errors\n",
           r->rank, r->lay.count, (double)r->lay.count * 4 / 1e6, r->o.mode,
           r->o.ds ? " (ds)" : "", (unsigned long long)s.rounds, s.syncs_per_min,
           s.round_us_mean / 1e3, s.wait_us_mean / 1e3, (double)s.bytes_read / 1e6,
           s.staleness_ms_max, (unsigned long long)s.errors);
    result_t res;
    memset(&res, 0, sizeof(res));
    res.rounds = s.rounds;
    res.syncs_per_min = s.syncs_per_min;
    res.round_ms = s.round_us_mean / 1e3;
    res.wait_ms = s.wait_us_mean / 1e3;
    res.bytes = s.bytes_read + s.bytes_written;
    res.errors = s.errors;
    res.staleness_ms = s.staleness_ms_max;
    r->nckpt = 0;
    write_json(r, &res);
}

static void train(run_t *r, shs_ctx_t *ctx, const ctr_example_t *eval)
{
    worker_t *ws = calloc((size_t)r->o.workers, sizeof(worker_t));
    r->ckpt = malloc((size_t)(r->o.checkpoints + 1) * r->lay.count * sizeof(float));
    float *scratch = malloc(2 * r->o.eval_n * sizeof(float));
    if (ws == NULL || r->ckpt == NULL || scratch == NULL)
        die("out of memory");
    if (r->foreground) {
        uint64_t per_worker = r->o.examples / (uint64_t)r->size / (uint64_t)r->o.workers;
        r->nsync = per_worker / r->o.fr_every;
        pthread_barrier_init(&r->bar, NULL, (unsigned)r->o.workers);
    }
    if (ctx != NULL)
        CHECK_OK(shs_ctx_barrier(ctx));
    double t0 = now_s();
    if (r->sync && !r->foreground)
        CHECK_OK(shs_shadow_start(r->sh));
    for (int i = 0; i < r->o.workers; i++) {
        ws[i].run = r;
        ws[i].id = i;
        if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i]) != 0)
            die("cannot start worker %d", i);
    }
    /* checkpoints at equal fractions of the local pass; a fault run's
     * victim dies on the way; survivors note when they first see a failure */
    r->nckpt = 0;
    /* --dump: the output biases over time (t, bias, b2, rounds), one sample
     * per monitor tick, for the per-rank drift between rounds */
    static double trace[TRACE_MAX][4];
    int ntrace = 0;
    double fail_t = 0;
    uint64_t fail_done = 0;
    for (;;) {
        uint64_t done = 0;
        for (int i = 0; i < r->o.workers; i++)
            done += atomic_load_explicit(&ws[i].done, memory_order_relaxed);
        if (r->rank == r->o.kill_rank && (double)done >= r->o.kill_at * (double)r->ntrain) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
            if (r->o.fault_cmd != NULL) {
                printf("%-10s rank %d: fault command at %.3f s (CLOCK_MONOTONIC), %llu "
                       "examples done: %s\n", r->o.label, r->rank, t,
                       (unsigned long long)done, r->o.fault_cmd);
                fflush(stdout);
                r->o.kill_rank = -1; /* once */
                if (system(r->o.fault_cmd) != 0)
                    fprintf(stderr, "shs-ctr rank %d: the fault command failed\n", r->rank);
            } else {
                printf("%-10s rank %d: SIGKILL to itself at %.3f s (CLOCK_MONOTONIC), %llu "
                       "examples done\n", r->o.label, r->rank, t, (unsigned long long)done);
                fflush(stdout);
                raise(SIGKILL);
            }
        }
        if (r->sync && fail_t == 0) {
            shs_shadow_stats_t s;
            if (shs_shadow_stats(r->sh, &s) == SHS_OK && s.failed_peers > 0) {
                fail_t = now_s();
                fail_done = done;
            }
        }
        if (r->nckpt < r->o.checkpoints) {
            uint64_t next =
                r->ntrain * (uint64_t)(r->nckpt + 1) / (uint64_t)(r->o.checkpoints + 1);
            /* never copy a model half way through a foreground round (the
             * workers never see one either) */
            if (done >= next && !atomic_load(&r->syncing)) {
                memcpy(r->ckpt + (size_t)r->nckpt * r->lay.count, r->model,
                       r->lay.count * sizeof(float));
                r->ckpt_seen[r->nckpt++] = done * (uint64_t)r->size;
                continue;
            }
        }
        if (done >= r->ntrain)
            break;
        if (r->o.dump && ntrace < TRACE_MAX) {
            shs_shadow_stats_t s;
            double *t = trace[ntrace++];
            t[0] = now_s() - t0;
            t[1] = r->model[r->lay.bias];
            t[2] = r->model[r->lay.b2];
            t[3] = r->sync && shs_shadow_stats(r->sh, &s) == SHS_OK ? (double)s.rounds : 0;
        }
        usleep(MONITOR_SLEEP_US);
    }
    if (r->o.dump && r->o.out != NULL) {
        char tp[4096];
        snprintf(tp, sizeof(tp), "%s/%s.rank%d.trace", r->o.out, r->o.label, r->rank);
        FILE *tf = fopen(tp, "w");
        for (int i = 0; tf != NULL && i < ntrace; i++)
            fprintf(tf, "%.4f %.6f %.6f %.0f\n", trace[i][0], trace[i][1], trace[i][2],
                    trace[i][3]);
        if (tf != NULL)
            fclose(tf);
    }
    result_t res;
    memset(&res, 0, sizeof(res));
    double loss = 0, pos = 0;
    for (int i = 0; i < r->o.workers; i++) {
        pthread_join(ws[i].th, NULL);
        loss += ws[i].loss;
        pos += ws[i].pos;
        res.examples += ws[i].count;
    }
    res.train_s = now_s() - t0;
    if (r->sync) {
        /* fault tests: a rank whose pass ended first keeps syncing until it
         * sees the failure (the fault is timed by another rank's progress) */
        for (double until = now_s() + r->o.hold_s; !r->foreground && now_s() < until;) {
            shs_shadow_stats_t s;
            if (shs_shadow_stats(r->sh, &s) == SHS_OK && s.failed_peers > 0)
                break;
            usleep(20000);
        }
        if (!r->foreground)
            CHECK_OK(shs_shadow_stop(r->sh));
        shs_shadow_stats_t s;
        CHECK_OK(shs_shadow_stats(r->sh, &s));
        res.rounds = s.rounds;
        /* per minute of training, in both modes */
        res.syncs_per_min = (double)s.rounds * 60.0 / res.train_s;
        res.round_ms = s.round_us_mean / 1e3;
        res.wait_ms = s.wait_us_mean / 1e3;
        res.bytes = s.bytes_read + s.bytes_written;
        res.errors = s.errors + (uint64_t)atomic_load(&r->sync_errors);
        res.skipped = s.peers_skipped;
        res.torn = s.torn_retries;
        res.staleness_ms = s.staleness_ms_max;
        res.failed = s.failed_peers;
        if (s.failed_peers > 0) {
            double end = now_s();
            if (fail_t == 0) { /* seen after the workers finished */
                fail_t = end;
                fail_done = res.examples;
            }
            res.fail_seen_s = (double)s.first_failure_ns / 1e9;
            res.rounds_after = s.rounds_after_failure;
            double after = end - fail_t, train_end = t0 + res.train_s;
            res.eps_after = train_end > fail_t
                                ? (double)(res.examples - fail_done) / (train_end - fail_t)
                                : 0;
            res.syncs_per_min_after = after > 0 ? (double)s.rounds_after_failure * 60.0 / after
                                                : 0;
            printf("%-10s rank %d: %d failed peer(s), first seen at %.3f s (CLOCK_MONOTONIC); "
                   "after it: %.0f EPS, %llu rounds, %.1f syncs/min\n",
                   r->o.label, r->rank, s.failed_peers, res.fail_seen_s, res.eps_after,
                   (unsigned long long)s.rounds_after_failure, res.syncs_per_min_after);
        }
    }
    /* a connection the transport failed after the engine's last look also
     * rules out the job-wide steps below */
    int gone = 0;
    for (int p = 0; ctx != NULL && p < r->size; p++)
        gone += p != r->rank && shs_ctx_peer_status(ctx, p, NULL) != SHS_OK;
    bool teardown = res.failed == 0 && gone == 0;
    memcpy(r->ckpt + (size_t)r->nckpt * r->lay.count, r->model, r->lay.count * sizeof(float));
    r->ckpt_seen[r->nckpt++] = res.examples * (uint64_t)r->size;
    res.eps = (double)res.examples / res.train_s;
    res.train_ne = loss / (double)res.examples / ctr_entropy(pos / (double)res.examples);

    /* evaluation after training, off the clock; after a peer failure the
     * job-wide steps (barriers, the final allreduce) are skipped: the
     * survivors evaluate their own models */
    if (ctx != NULL && teardown) {
        /* a peer that saw a failure this rank did not see skips it */
        shs_status_t st = shs_ctx_barrier(ctx);
        if (st != SHS_OK) {
            fprintf(stderr, "shs-ctr rank %d: barrier after training: %s; the job-wide steps "
                    "are skipped\n", r->rank, shs_status_string(st));
            teardown = false;
        }
    }
    /* the end of the run (shs_shadow_finish): MA/BMUF replicas become their
     * exact mean, EASGD's center takes its last deltas; without it each
     * rank's own model carries the drift since its last round */
    if (r->sync && teardown && !r->o.no_finish) {
        shs_status_t st = shs_shadow_finish(r->sh);
        if (st != SHS_OK)
            die("shs_shadow_finish: %s", shs_status_string(st));
        memcpy(r->ckpt + (size_t)(r->nckpt - 1) * r->lay.count, r->model,
               r->lay.count * sizeof(float));
    }
    /* the ranks' own models are evaluated as they are; for the sync modes,
     * also the average of the ranks' final models (one ring allreduce, the
     * model a job would export): it separates what the sync achieved from
     * how far the ranks drifted since their last round */
    float *avg = NULL;
    if (r->sync && teardown) {
        avg = malloc(r->lay.count * sizeof(float));
        if (avg == NULL)
            die("out of memory");
        final_average(r, ctx, avg);
    }
    /* rank 0 evaluates every checkpoint (the curve), the others their final
     * model only (the table's means): evaluation is slow under emulation */
    double tev = now_s();
    for (int i = r->rank == 0 ? 0 : r->nckpt - 1; i < r->nckpt; i++)
        ctr_evaluate(&r->lay, r->ckpt + (size_t)i * r->lay.count, eval, r->o.eval_n, scratch,
                     &res.curve_ne[i], &res.curve_auc[i]);
    tev = now_s() - tev;
    res.eval_ne = res.curve_ne[r->nckpt - 1];
    res.auc = res.curve_auc[r->nckpt - 1];
    res.avg_ne = res.eval_ne;
    res.avg_auc = res.auc;
    if (avg != NULL && r->rank == 0)
        ctr_evaluate(&r->lay, avg, eval, r->o.eval_n, scratch, &res.avg_ne, &res.avg_auc);
    free(avg);
    printf("%-10s rank %d/%d: %llu examples in %.1f s = %.0f EPS, train NE %.4f, eval NE %.4f, "
           "AUC %.4f, %llu syncs (%.1f/min, %.0f ms/round), %llu errors (eval %.1f s)%s\n",
           r->o.label, r->rank, r->size, (unsigned long long)res.examples, res.train_s, res.eps,
           res.train_ne, res.eval_ne, res.auc, (unsigned long long)res.rounds,
           res.syncs_per_min, res.round_ms, (unsigned long long)res.errors, tev, "");
    if (r->sync && r->rank == 0 && teardown)
        printf("%-10s averaged final model: eval NE %.4f, AUC %.4f\n", r->o.label, res.avg_ne,
               res.avg_auc);
    write_json(r, &res);
    r->failed = teardown ? 0 : 1;
    if (r->foreground)
        pthread_barrier_destroy(&r->bar);
    free(scratch);
    free(r->ckpt);
    free(ws);
}

int main(int argc, char **argv)
{
    run_t r;
    memset(&r, 0, sizeof(r));
    parse(argc, argv, &r.o);
    mode_of(&r);
    bool single = strcmp(r.o.mode, "single") == 0;
    if (single) {
        r.rank = 0;
        r.size = 1;
    } else {
        if (getenv("SHS_RANK") == NULL || getenv("SHS_SIZE") == NULL)
            die("run the ranks under tools/shs-launch (SHS_RANK/SHS_SIZE unset), or use --mode single");
        r.rank = atoi(getenv("SHS_RANK"));
        r.size = atoi(getenv("SHS_SIZE"));
    }
    g_rank = r.rank;
    ctr_layout_init(&r.lay, &r.o.shape);

    /* this rank's share of the stream, and the held-out examples after it */
    ctr_teacher_t teacher;
    ctr_teacher_init(&teacher, r.o.seed, r.o.ctr);
    uint64_t lo = r.o.examples * (uint64_t)r.rank / (uint64_t)r.size;
    uint64_t hi = r.o.examples * (uint64_t)(r.rank + 1) / (uint64_t)r.size;
    r.ntrain = r.o.sync_only_s > 0 ? 0 : (size_t)(hi - lo);
    size_t neval = r.o.sync_only_s > 0 ? 0 : (size_t)r.o.eval_n;
    r.train = malloc((r.ntrain + 1) * sizeof(ctr_example_t));
    ctr_example_t *eval = malloc((neval + 1) * sizeof(ctr_example_t));
    if (r.train == NULL || eval == NULL)
        die("out of memory for %zu examples", r.ntrain);
    double tgen = now_s();
    for (size_t i = 0; i < r.ntrain; i++)
        ctr_example(&teacher, lo + i, &r.train[i]);
    for (size_t i = 0; i < neval; i++)
        ctr_example(&teacher, r.o.examples + i, &eval[i]);
    tgen = now_s() - tgen;

    shs_ctx_t *ctx = NULL;
    shs_region_t *region = NULL;
    if (single) {
        r.model = malloc(r.lay.count * sizeof(float));
        if (r.model == NULL)
            die("out of memory for the model");
    } else {
        CHECK_OK(shs_ctx_create(NULL, &ctx));
        CHECK_OK(shs_region_alloc(ctx, r.lay.count * sizeof(float),
                                  SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &region));
        r.model = shs_region_addr(region);
        r.region = region;
    }
    ctr_model_init(&r.lay, r.model, r.o.seed, r.o.ctr);
    if (r.sync) {
        shs_shadow_params_t p;
        shadow_params(&r, &p);
        CHECK_OK(shs_shadow_create(ctx, region, 0, r.lay.count, &p, &r.sh));
    }
    if (r.rank == 0)
        printf("%-10s %d rank(s) x %d workers, %zu params (%.1f MB), %llu training examples, "
               "%llu held out%s (data drawn in %.1f s)\n",
               r.o.label, r.size, r.o.workers, r.lay.count, (double)r.lay.count * 4 / 1e6,
               (unsigned long long)r.o.examples, (unsigned long long)r.o.eval_n,
               r.o.ds ? ", DS-Sync" : "", tgen);
    fflush(stdout);

    if (r.o.sync_only_s > 0) {
        if (!r.sync || r.foreground)
            die("--sync-only needs an s-* mode");
        sync_only(&r, ctx);
    } else {
        train(&r, ctx, eval);
    }

    if (r.sh != NULL)
        shs_shadow_destroy(r.sh);
    if (ctx != NULL) {
        if (r.failed == 0 && shs_ctx_barrier(ctx) != SHS_OK)
            fprintf(stderr, "shs-ctr rank %d: final barrier failed\n", r.rank);
        shs_region_destroy(region);
        shs_ctx_destroy(ctx);
    } else {
        free(r.model);
    }
    free(eval);
    free(r.train);
    return 0;
}

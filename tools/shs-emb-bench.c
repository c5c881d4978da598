/*
 * shs-emb-bench: throughput and latency of the sharded embedding tables,
 * perftest style. Run one process per rank (shs-launch, mpirun, ...):
 *
 *   shs-launch -n 4 -- shs-emb-bench [options]
 *
 * For every dim x batch, every rank makes a table of --rows rows (every rank
 * a holder), and each of its --workers threads runs --iters calls (after
 * --warmup) on batches drawn beforehand (uniform, or zipfian over rows
 * scattered across the table). Rank 0 prints one line per configuration:
 * calls and ids per second summed over every worker of every rank, the row
 * bytes moved per second, the distinct ids per batch, the share of
 * distinct rows that lived on another rank, rank 0 worker 0's median and
 * 99th percentile call time, and what the updates cost the holders: the
 * share of worker time spent waiting for a free inbox slot, the share of
 * time the apply threads were busy, and their largest backlog. --json
 * prints the same (and the distinct update rows per second) as one JSON
 * object per line. Public API only.
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shadowsync/shadowsync.h>

#include "idgen.h"

#define MAX_LIST 16
#define MAX_WORKERS 16

typedef enum { MODE_LOOKUP, MODE_UPDATE, MODE_MIXED } mode_t_;

typedef struct opts {
    uint64_t rows;
    uint32_t dims[MAX_LIST], batches[MAX_LIST];
    int ndims, nbatches;
    bool zipf;
    double zipf_s;
    shs_emb_path_t path;
    mode_t_ mode;
    int iters, warmup, workers;
    bool json;
    uint64_t seed;
} opts_t;

typedef struct job {
    const opts_t *o;
    shs_emb_worker_t *w;
    uint32_t dim, batch;
    uint64_t *ids;   /* (warmup + iters) x batch, drawn beforehand */
    float *out, *grads;
    double *lat_us;  /* per timed call */
    int k0, k1;      /* this pass runs batches [k0, k1) */
    bool timed;      /* the timed pass: record each call's time */
    shs_status_t st;
    double seconds;  /* this pass, its closing flush included */
} job_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shs-emb-bench [--rows R] [--dim D[,D...]] [--batch B[,B...]]\n"
            "         [--dist uniform|zipf] [--zipf-s S] [--path auto|read|owner]\n"
            "         [--mode lookup|update|mixed] [--iters N] [--warmup N] [--workers W]\n"
            "         [--seed S] [--json]\n"
            "defaults: --rows 1000000 --dim 16,64,128 --batch 64,512,4096 --dist uniform\n"
            "          --zipf-s 1.05 --path auto --mode lookup --iters 200 --warmup 20\n"
            "          --workers 1\n");
}

static int parse_list(const char *s, uint32_t *out, int *n)
{
    *n = 0;
    for (const char *p = s; *p != '\0' && *n < MAX_LIST;) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v == 0 || v > (1ul << 20))
            return -1;
        out[(*n)++] = (uint32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return *n > 0 ? 0 : -1;
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"rows", 1, 0, 'r'}, {"dim", 1, 0, 'd'}, {"batch", 1, 0, 'b'}, {"dist", 1, 0, 't'},
        {"zipf-s", 1, 0, 'z'}, {"path", 1, 0, 'p'}, {"mode", 1, 0, 'm'}, {"iters", 1, 0, 'n'},
        {"warmup", 1, 0, 'w'}, {"workers", 1, 0, 'W'}, {"seed", 1, 0, 's'},
        {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *o = (opts_t){.rows = 1000000, .dims = {16, 64, 128}, .ndims = 3,
                  .batches = {64, 512, 4096}, .nbatches = 3, .zipf_s = 1.05,
                  .path = SHS_EMB_PATH_AUTO, .iters = 200, .warmup = 20, .workers = 1,
                  .seed = 1};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'r': o->rows = strtoull(optarg, NULL, 10); break;
        case 'd': if (parse_list(optarg, o->dims, &o->ndims) != 0) return 2; break;
        case 'b': if (parse_list(optarg, o->batches, &o->nbatches) != 0) return 2; break;
        case 't':
            if (strcmp(optarg, "zipf") != 0 && strcmp(optarg, "uniform") != 0)
                return 2;
            o->zipf = strcmp(optarg, "zipf") == 0;
            break;
        case 'z': o->zipf_s = atof(optarg); break;
        case 'p':
            if (strcmp(optarg, "auto") == 0) o->path = SHS_EMB_PATH_AUTO;
            else if (strcmp(optarg, "read") == 0) o->path = SHS_EMB_PATH_READ;
            else if (strcmp(optarg, "owner") == 0) o->path = SHS_EMB_PATH_OWNER;
            else return 2;
            break;
        case 'm':
            if (strcmp(optarg, "lookup") == 0) o->mode = MODE_LOOKUP;
            else if (strcmp(optarg, "update") == 0) o->mode = MODE_UPDATE;
            else if (strcmp(optarg, "mixed") == 0) o->mode = MODE_MIXED;
            else return 2;
            break;
        case 'n': o->iters = atoi(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 'W': o->workers = atoi(optarg); break;
        case 's': o->seed = strtoull(optarg, NULL, 10); break;
        case 'j': o->json = true; break;
        case 'h': usage(stdout); exit(0);
        default: return 2;
        }
    }
    if (o->rows == 0 || o->iters < 1 || o->warmup < 0 || o->workers < 1 ||
        o->workers > MAX_WORKERS || !(o->zipf_s > 0.0))
        return 2;
    return 0;
}

/* This process's resident set in bytes (/proc/self/statm), 0 if unknown. */
static double rss_bytes(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0.0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *run_job(void *arg)
{
    job_t *j = arg;
    const opts_t *o = j->o;
    size_t out_len = (size_t)j->batch * j->dim;
    double t0 = now_s();
    for (int k = j->k0; k < j->k1 && j->st == SHS_OK; k++) {
        const uint64_t *ids = j->ids + (size_t)k * j->batch;
        double c0 = now_s();
        if (o->mode != MODE_UPDATE)
            j->st = shs_emb_lookup(j->w, ids, j->batch, j->out, out_len);
        if (j->st == SHS_OK && o->mode != MODE_LOOKUP)
            j->st = shs_emb_update(j->w, ids, j->batch, j->grads);
        if (j->timed)
            j->lat_us[k - j->k0] = (now_s() - c0) * 1e6;
    }
    if (j->st == SHS_OK && o->mode != MODE_LOOKUP)
        j->st = shs_emb_flush(j->w, SHS_TIMEOUT_DEFAULT);
    j->seconds = now_s() - t0;
    return NULL;
}

static int prepare(job_t *j, const opts_t *o, int rank, int t)
{
    size_t n = (size_t)(o->warmup + o->iters) * j->batch;
    j->ids = malloc(n * sizeof(uint64_t));
    j->out = malloc((size_t)j->batch * j->dim * sizeof(float));
    j->grads = calloc((size_t)j->batch * j->dim, sizeof(float));
    j->lat_us = malloc((size_t)o->iters * sizeof(double));
    if (j->ids == NULL || j->out == NULL || j->grads == NULL || j->lat_us == NULL)
        return -1;
    idgen_t g;
    idgen_init(&g, o->rows, o->zipf, o->zipf_s, idgen_seed(o->seed, rank, t));
    for (size_t i = 0; i < n; i++)
        j->ids[i] = idgen_next(&g);
    for (size_t i = 0; i < (size_t)j->batch * j->dim; i++)
        j->grads[i] = 1e-4f;
    return 0;
}

static void release(job_t *j)
{
    free(j->ids);
    free(j->out);
    free(j->grads);
    free(j->lat_us);
}

static const char *mode_name(mode_t_ m)
{
    return m == MODE_LOOKUP ? "lookup" : m == MODE_UPDATE ? "update" : "mixed";
}

static const char *path_name(shs_emb_path_t p)
{
    return p == SHS_EMB_PATH_READ ? "read" : p == SHS_EMB_PATH_OWNER ? "owner" : "auto";
}

static shs_status_t reduce(shs_coll_t *coll, double *v, size_t n)
{
    return shs_allreduce(coll, NULL, v, n, SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM);
}

/* Run every worker over batches [k0, k0 + n) in its own thread; 0 when all
 * succeeded. *secs_p: the slowest worker's time, *sum_p: their sum. */
static int run_pass(job_t *job, int workers, int rank, int k0, int n, bool timed,
                    double *secs_p, double *sum_p)
{
    pthread_t th[MAX_WORKERS];
    int rc = 0;
    for (int t = 0; t < workers; t++) {
        job[t].k0 = k0;
        job[t].k1 = k0 + n;
        job[t].timed = timed;
        pthread_create(&th[t], NULL, run_job, &job[t]);
    }
    *secs_p = *sum_p = 0.0;
    for (int t = 0; t < workers; t++) {
        pthread_join(th[t], NULL);
        if (job[t].st != SHS_OK) {
            fprintf(stderr, "shs-emb-bench rank %d worker %d: %s\n", rank, t,
                    shs_status_string(job[t].st));
            rc = 1;
        }
        *secs_p = job[t].seconds > *secs_p ? job[t].seconds : *secs_p;
        *sum_p += job[t].seconds;
    }
    return rc;
}

/* The counters of b that grew since a (the table's stats count from create). */
static shs_emb_stats_t stats_since(const shs_emb_stats_t *a, const shs_emb_stats_t *b)
{
    shs_emb_stats_t d = *b;
    d.lookups -= a->lookups;
    d.updates -= a->updates;
    d.update_rows -= a->update_rows;
    d.rows_local -= a->rows_local;
    d.rows_read -= a->rows_read;
    d.rows_owner -= a->rows_owner;
    d.reads -= a->reads;
    d.slot_waits -= a->slot_waits;
    d.slot_wait_ms -= a->slot_wait_ms;
    d.apply_busy_ms -= a->apply_busy_ms;
    return d;
}

static int one_config(shs_ctx_t *ctx, shs_coll_t *coll, const opts_t *o, uint32_t dim,
                      uint32_t batch)
{
    int rank = shs_ctx_rank(ctx), size = shs_ctx_size(ctx);
    shs_emb_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_EMB_PARAM_PATH | SHS_EMB_PARAM_WORKERS | SHS_EMB_PARAM_MAX_BATCH;
    p.rows = o->rows;
    p.dim = dim;
    p.path = o->path;
    p.workers = o->workers;
    p.max_batch = batch;
    shs_emb_t *emb;
    shs_status_t st = shs_emb_create(ctx, &p, &emb);
    if (st != SHS_OK) {
        fprintf(stderr, "shs-emb-bench rank %d: shs_emb_create: %s\n", rank,
                shs_status_string(st));
        return 1;
    }
    job_t job[MAX_WORKERS];
    int rc = 0;
    for (int t = 0; t < o->workers; t++) {
        job[t] = (job_t){.o = o, .w = shs_emb_worker(emb, t), .dim = dim, .batch = batch,
                         .st = SHS_OK};
        if (prepare(&job[t], o, rank, t) != 0) {
            fprintf(stderr, "shs-emb-bench rank %d: out of memory\n", rank);
            return 1;
        }
    }
    /*
     * The warmup is a pass of its own, flushed, and the barrier after it
     * returns once every rank's warmup updates are applied (each rank's
     * flush waited for its holders): the stats taken then are where the
     * timed pass starts. The barrier after the timed pass likewise closes
     * the holders' share of it, so the apply threads' busy time is counted
     * over [t0, t1], every rank's updates in and nothing else. Only
     * apply_lag_max cannot be split (a max): it is since create, warmup
     * included.
     */
    double secs = 0.0, worker_secs = 0.0;
    if (shs_ctx_barrier(ctx) != SHS_OK)
        return 1;
    if (o->warmup > 0)
        rc |= run_pass(job, o->workers, rank, 0, o->warmup, false, &secs, &worker_secs);
    shs_emb_stats_t s0, s1;
    if (shs_ctx_barrier(ctx) != SHS_OK)
        return 1;
    shs_emb_stats(emb, &s0);
    double t0 = now_s();
    rc |= run_pass(job, o->workers, rank, o->warmup, o->iters, true, &secs, &worker_secs);
    if (shs_ctx_barrier(ctx) != SHS_OK)
        return 1;
    double elapsed = now_s() - t0;
    shs_emb_stats(emb, &s1);
    shs_emb_stats_t s = stats_since(&s0, &s1);
    uint64_t distinct = s.rows_local + s.rows_read + s.rows_owner;
    uint64_t batches = s.lookups; /* the calls that distinct counts */
    if (o->mode == MODE_UPDATE) {
        distinct = s.update_rows;
        batches = s.updates;
    }
    double calls = (double)o->iters * o->workers;
    bool holder = s.shard_rows > 0;
    /*
     * Per rank, summed over the ranks: calls/s, ids/s and update rows/s of
     * its workers over the slowest worker's time; the time its workers
     * waited for a free inbox slot and the time they ran (each worker's
     * timed pass, flush included), so stall_pct is the share of all worker
     * time spent so; the share of [t0, t1] its apply thread was busy, as a
     * holder; then each rank's apply_lag_max in its own entry, for the max.
     */
    enum { V_N = 15 };
    double *v = calloc(V_N + (size_t)size, sizeof(double));
    if (v == NULL)
        return 1;
    double fixed[V_N] = {calls / secs, calls * batch / secs, (double)distinct,
                         (double)(s.rows_read + s.rows_owner), (double)(s.lookups + s.updates),
                         (double)rc, (double)s.reads / secs, (double)s.registered_bytes,
                         rss_bytes(), (double)s.update_rows / secs, s.slot_wait_ms,
                         worker_secs * 1e3,
                         holder ? 100.0 * s.apply_busy_ms / (elapsed * 1e3) : 0.0,
                         holder ? 1.0 : 0.0, (double)batches};
    memcpy(v, fixed, sizeof(fixed));
    v[V_N + rank] = (double)s.apply_lag_max;
    st = reduce(coll, v, V_N + (size_t)size);
    double lag = 0.0;
    for (int r = 0; r < size; r++)
        lag = v[V_N + r] > lag ? v[V_N + r] : lag;
    double stall = v[11] > 0 ? 100.0 * v[10] / v[11] : 0.0;
    double busy = v[13] > 0 ? v[12] / v[13] : 0.0;
    if (st != SHS_OK || v[5] != 0.0) {
        fprintf(stderr, "shs-emb-bench rank %d: %s\n", rank,
                st != SHS_OK ? shs_status_string(st) : "a rank failed");
        rc = 1;
    } else if (rank == 0) {
        qsort(job[0].lat_us, (size_t)o->iters, sizeof(double), cmp_double);
        double p50 = job[0].lat_us[o->iters / 2];
        double p99 = job[0].lat_us[(size_t)(o->iters * 0.99) < (size_t)o->iters
                                       ? (size_t)(o->iters * 0.99)
                                       : (size_t)o->iters - 1];
        double uniq = v[14] > 0 ? v[2] / v[14] : 0.0;
        double remote = v[2] > 0 ? 100.0 * v[3] / v[2] : 0.0;
        double mbs = v[1] * dim * sizeof(float) / 1e6;
        if (o->json)
            printf("{\"ranks\": %d, \"workers\": %d, \"rows\": %llu, \"dist\": \"%s\", "
                   "\"mode\": \"%s\", \"path\": \"%s\", \"dim\": %u, \"batch\": %u, "
                   "\"calls_per_s\": %.6g, \"ids_per_s\": %.6g, \"mb_per_s\": %.6g, "
                   "\"distinct_per_batch\": %.6g, \"remote_pct\": %.6g, \"p50_us\": %.6g, "
                   "\"p99_us\": %.6g, \"calls\": %.0f, \"reads_per_s\": %.6g, "
                   "\"registered_bytes_per_rank\": %.0f, \"rss_bytes_per_rank\": %.0f, "
                   "\"table_bytes\": %.0f, \"update_rows_per_s\": %.6g, \"stall_pct\": %.4g, "
                   "\"apply_busy_pct\": %.4g, \"apply_lag_max\": %.0f, \"owner_reads\": %u, "
                   "\"slots\": %u}\n", size, o->workers,
                   (unsigned long long)o->rows, o->zipf ? "zipf" : "uniform",
                   mode_name(o->mode), path_name(o->path), dim, batch, v[0], v[1], mbs,
                   uniq, remote, p50, p99, v[4], v[6], v[7] / size, v[8] / size,
                   (double)o->rows * dim * sizeof(float), v[9], stall, busy, lag, s1.owner_reads,
                   s1.slots);
        else
            printf(" %5u %6u %9.1f %7.1f %11.5g %11.5g %9.4g %9.1f %9.1f %6.2f %6.1f %4.0f\n",
                   dim, batch, uniq, remote, v[0], v[1], mbs, p50, p99, stall, busy, lag);
        fflush(stdout);
    }
    free(v);
    for (int t = 0; t < o->workers; t++)
        release(&job[t]);
    shs_emb_destroy(emb);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    shs_ctx_t *ctx;
    shs_status_t st = shs_ctx_create(NULL, &ctx);
    if (st != SHS_OK) {
        fprintf(stderr, "shs-emb-bench: shs_ctx_create: %s\n", shs_status_string(st));
        return 1;
    }
    shs_coll_t *coll;
    /* its float64 sums on a native wire, whatever SHS_COLL_WIRE says */
    shs_coll_params_t cp = {.field_mask = SHS_COLL_PARAM_WIRE, .wire = SHS_WIRE_NATIVE};
    st = shs_coll_create(ctx, &cp, &coll);
    if (st != SHS_OK) {
        fprintf(stderr, "shs-emb-bench: shs_coll_create: %s\n", shs_status_string(st));
        return 1;
    }
    if (shs_ctx_rank(ctx) == 0 && !o.json) {
        char dist[32];
        snprintf(dist, sizeof(dist), o.zipf ? "zipf(s=%g)" : "uniform", o.zipf_s);
        printf("# shs-emb-bench: %d ranks x %d worker(s), %llu rows, %s ids, %s, path %s\n",
               shs_ctx_size(ctx), o.workers, (unsigned long long)o.rows, dist,
               mode_name(o.mode), path_name(o.path));
        printf("# %5s %6s %9s %7s %11s %11s %9s %9s %9s %6s %6s %4s\n", "dim", "batch",
               "distinct", "remote%", "calls/s", "ids/s", "MB/s", "p50_us", "p99_us", "stall%",
               "apply%", "lag");
    }
    int rc = 0;
    for (int d = 0; d < o.ndims && rc == 0; d++)
        for (int b = 0; b < o.nbatches && rc == 0; b++)
            rc = one_config(ctx, coll, &o, o.dims[d], o.batches[b]);
    shs_coll_destroy(coll);
    if (shs_ctx_barrier(ctx) != SHS_OK)
        rc = 1;
    shs_ctx_destroy(ctx);
    return rc;
}

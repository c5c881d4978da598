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
 * distinct rows that lived on another rank, and rank 0 worker 0's median
 * and 99th percentile call time. --json prints the same as one JSON object
 * per line. Public API only.
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
    shs_status_t st;
    double seconds;
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
    double t0 = 0.0;
    for (int k = 0; k < o->warmup + o->iters && j->st == SHS_OK; k++) {
        if (k == o->warmup)
            t0 = now_s();
        const uint64_t *ids = j->ids + (size_t)k * j->batch;
        double c0 = now_s();
        if (o->mode != MODE_UPDATE)
            j->st = shs_emb_lookup(j->w, ids, j->batch, j->out, out_len);
        if (j->st == SHS_OK && o->mode != MODE_LOOKUP)
            j->st = shs_emb_update(j->w, ids, j->batch, j->grads);
        if (k >= o->warmup)
            j->lat_us[k - o->warmup] = (now_s() - c0) * 1e6;
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

/* Sums over the ranks: calls, ids, distinct, remote distinct, seconds (max). */
static shs_status_t reduce(shs_coll_t *coll, double *v, size_t n)
{
    return shs_allreduce(coll, NULL, v, n, SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM);
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
    pthread_t th[MAX_WORKERS];
    int rc = 0;
    for (int t = 0; t < o->workers; t++) {
        job[t] = (job_t){.o = o, .w = shs_emb_worker(emb, t), .dim = dim, .batch = batch,
                         .st = SHS_OK};
        if (prepare(&job[t], o, rank, t) != 0) {
            fprintf(stderr, "shs-emb-bench rank %d: out of memory\n", rank);
            return 1;
        }
    }
    if (shs_ctx_barrier(ctx) != SHS_OK)
        return 1;
    for (int t = 0; t < o->workers; t++)
        pthread_create(&th[t], NULL, run_job, &job[t]);
    double secs = 0.0;
    for (int t = 0; t < o->workers; t++) {
        pthread_join(th[t], NULL);
        if (job[t].st != SHS_OK) {
            fprintf(stderr, "shs-emb-bench rank %d worker %d: %s\n", rank, t,
                    shs_status_string(job[t].st));
            rc = 1;
        }
        secs = job[t].seconds > secs ? job[t].seconds : secs;
    }
    shs_emb_stats_t s;
    shs_emb_stats(emb, &s);
    uint64_t distinct = s.rows_local + s.rows_read + s.rows_owner;
    if (o->mode == MODE_UPDATE)
        distinct = s.update_rows;
    double calls = (double)o->iters * o->workers;
    /* per rank: calls/s and ids/s of its workers, over the slowest worker's time */
    double v[9] = {calls / secs, calls * batch / secs, (double)distinct,
                   (double)(s.rows_read + s.rows_owner), (double)(s.lookups + s.updates),
                   (double)rc, (double)s.reads / secs, (double)s.registered_bytes, rss_bytes()};
    st = reduce(coll, v, 9);
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
        double uniq = v[4] > 0 ? v[2] / v[4] : 0.0;
        double remote = v[2] > 0 ? 100.0 * v[3] / v[2] : 0.0;
        double mbs = v[1] * dim * sizeof(float) / 1e6;
        if (o->json)
            printf("{\"ranks\": %d, \"workers\": %d, \"rows\": %llu, \"dist\": \"%s\", "
                   "\"mode\": \"%s\", \"path\": \"%s\", \"dim\": %u, \"batch\": %u, "
                   "\"calls_per_s\": %.6g, \"ids_per_s\": %.6g, \"mb_per_s\": %.6g, "
                   "\"distinct_per_batch\": %.6g, \"remote_pct\": %.6g, \"p50_us\": %.6g, "
                   "\"p99_us\": %.6g, \"calls\": %.0f, \"reads_per_s\": %.6g, "
                   "\"registered_bytes_per_rank\": %.0f, \"rss_bytes_per_rank\": %.0f, "
                   "\"table_bytes\": %.0f}\n", size, o->workers,
                   (unsigned long long)o->rows, o->zipf ? "zipf" : "uniform",
                   mode_name(o->mode), path_name(o->path), dim, batch, v[0], v[1], mbs,
                   uniq, remote, p50, p99, v[4], v[6], v[7] / size, v[8] / size,
                   (double)o->rows * dim * sizeof(float));
        else
            printf(" %5u %6u %9.1f %7.1f %11.5g %11.5g %9.4g %9.1f %9.1f\n", dim, batch, uniq,
                   remote, v[0], v[1], mbs, p50, p99);
        fflush(stdout);
    }
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
    st = shs_coll_create(ctx, NULL, &coll);
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
        printf("# %5s %6s %9s %7s %11s %11s %9s %9s %9s\n", "dim", "batch", "distinct",
               "remote%", "calls/s", "ids/s", "MB/s", "p50_us", "p99_us");
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

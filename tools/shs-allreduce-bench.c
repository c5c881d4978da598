/*
 * shs-allreduce-bench: allreduce benchmark in the style of nccl-tests, on
 * the public API. One process per rank, started by tools/shs-launch (or any
 * launcher that sets SHS_RANK / SHS_SIZE / SHS_BOOTSTRAP):
 *
 *   shs-launch -n 8 -- shs-allreduce-bench -b 4k -e 16m -f 4 -n 20 -w 5
 *   shs-launch -n 8 -- shs-allreduce-bench -s hypercube -g 2 -b 4k -e 16m
 *
 * For each size from -b to -e (times -f), rank 0 prints one row:
 *
 *   size count type redop time(us) algbw(MB/s) busbw(MB/s) #wrong p50(us) p99(us)
 *
 * time is the mean time of one allreduce over the timed iterations (each
 * rank times every call, the per-call times are averaged over the ranks),
 * algbw = size / time, busbw = algbw * 2 (n - 1) / n with n the size of the
 * group that reduces together (all ranks, or g with a DS-Sync schedule, where
 * iteration i uses the groups of round i and the groups of a round run
 * concurrently). #wrong counts the elements, over all ranks, that differ
 * from a reference computed on the host, after one checked call per size
 * (inputs are small integers, so sums are exact). p50 and p99 are
 * percentiles of the per-call times.
 *
 * Options: -b -e sizes in bytes (k/m/g suffixes), -f factor, -n iterations,
 * -w warmup iterations, -d float|double, -o sum|avg, -s all|hypercube|general
 * |random, -g group size, -m region|staged (zero-copy from a registered
 * region, or shs_allreduce on malloc'ed memory through the staging area),
 * -c 0|1 (check), -r seed of the random schedule.
 *
 * Exit status: 0 ok (and no wrong element), 1 failure or wrong results,
 * 2 usage, 77 no RDMA device.
 */
#include <dirent.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shadowsync/shadowsync.h>

#include "rdma_device.h"

#define MAX_ITERS 100000

typedef struct opts {
    size_t min_bytes, max_bytes;
    double factor;
    int iters, warmup;
    shs_dtype_t dtype;
    shs_reduce_t op;
    shs_schedule_t sched;
    bool staged;
    bool check;
} opts_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int die(int rank, const char *what, shs_status_t st)
{
    fprintf(stderr, "shs-allreduce-bench rank %d: %s: %s\n", rank, what, shs_status_string(st));
    return 1;
}

static bool parse_bytes(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (end == s || *end != '\0' || v < 0)
        return false;
    *out = (size_t)(v * mult);
    return true;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: shs-allreduce-bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS]\n"
               "         [-w WARMUP] [-d float|double] [-o sum|avg] [-s all|hypercube|general|random]\n"
               "         [-g GROUP] [-m region|staged] [-c 0|1] [-r SEED]\n");
}

static int parse(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->min_bytes = 4096;
    o->max_bytes = 16u << 20;
    o->factor = 4;
    o->iters = 20;
    o->warmup = 5;
    o->check = true;
    o->sched.kind = SHS_SCHED_ALL;
    o->sched.group_size = 2;
    int c;
    while ((c = getopt(argc, argv, "b:e:f:n:w:d:o:s:g:m:c:r:h")) != -1) {
        switch (c) {
        case 'b': if (!parse_bytes(optarg, &o->min_bytes)) return 2; break;
        case 'e': if (!parse_bytes(optarg, &o->max_bytes)) return 2; break;
        case 'f': o->factor = atof(optarg); break;
        case 'n': o->iters = atoi(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 'd':
            if (strcmp(optarg, "float") == 0)
                o->dtype = SHS_DTYPE_FLOAT32;
            else if (strcmp(optarg, "double") == 0)
                o->dtype = SHS_DTYPE_FLOAT64;
            else
                return 2;
            break;
        case 'o':
            if (strcmp(optarg, "sum") == 0)
                o->op = SHS_REDUCE_SUM;
            else if (strcmp(optarg, "avg") == 0)
                o->op = SHS_REDUCE_AVG;
            else
                return 2;
            break;
        case 's':
            if (strcmp(optarg, "all") == 0)
                o->sched.kind = SHS_SCHED_ALL;
            else if (strcmp(optarg, "hypercube") == 0)
                o->sched.kind = SHS_SCHED_HYPERCUBE;
            else if (strcmp(optarg, "general") == 0)
                o->sched.kind = SHS_SCHED_GENERAL;
            else if (strcmp(optarg, "random") == 0)
                o->sched.kind = SHS_SCHED_RANDOM;
            else
                return 2;
            break;
        case 'g': o->sched.group_size = atoi(optarg); break;
        case 'm':
            if (strcmp(optarg, "region") == 0)
                o->staged = false;
            else if (strcmp(optarg, "staged") == 0)
                o->staged = true;
            else
                return 2;
            break;
        case 'c': o->check = atoi(optarg) != 0; break;
        case 'r': o->sched.seed = strtoull(optarg, NULL, 0); break;
        case 'h': usage(stdout); exit(0);
        default: return 2;
        }
    }
    if (o->min_bytes == 0 || o->max_bytes < o->min_bytes || o->factor <= 1 || o->iters < 1 ||
        o->iters > MAX_ITERS || o->warmup < 0)
        return 2;
    return 0;
}

static int input(int r, size_t i)
{
    return (int)((i * 7 + (size_t)r * 13) % 17) - 8;
}

static void fill(void *buf, shs_dtype_t dt, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == SHS_DTYPE_FLOAT32)
            ((float *)buf)[i] = (float)input(rank, i);
        else
            ((double *)buf)[i] = (double)input(rank, i);
    }
}

static size_t count_wrong(const void *buf, shs_dtype_t dt, shs_reduce_t op, size_t count,
                          const shs_group_t *grp)
{
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
        long sum = 0;
        for (int k = 0; k < grp->size; k++)
            sum += input(grp->ranks[k], i);
        double got = dt == SHS_DTYPE_FLOAT32 ? (double)((const float *)buf)[i]
                                              : ((const double *)buf)[i];
        double want = op == SHS_REDUCE_SUM ? (double)sum : (double)sum / grp->size;
        double tol = op == SHS_REDUCE_SUM ? 0 : (dt == SHS_DTYPE_FLOAT32 ? 4e-7 : 1e-15) * fabs(want);
        if (!(fabs(got - want) <= tol))
            wrong++;
    }
    return wrong;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench {
    shs_ctx_t *ctx;
    shs_coll_t *coll;
    shs_coll_t *meta;      /* the bench's own sums (times, wrong counts): float64 on
                              a native wire, whatever SHS_COLL_WIRE says */
    int rank, size;
    opts_t o;
    shs_region_t *region;
    void *plain;
    double *times;         /* per-iteration times, then their average over ranks */
} bench_t;

static shs_status_t group_of(const bench_t *b, uint64_t round, shs_group_t *grp)
{
    if (b->o.sched.kind == SHS_SCHED_ALL && b->size > SHS_GROUP_MAX) {
        grp->size = 0; /* all ranks: NULL group below */
        return SHS_OK;
    }
    return shs_schedule_group(&b->o.sched, b->size, b->rank, round, grp);
}

static shs_status_t one_call(bench_t *b, uint64_t round, size_t count)
{
    shs_group_t grp;
    shs_status_t st = group_of(b, round, &grp);
    if (st != SHS_OK)
        return st;
    const shs_group_t *g = grp.size == 0 ? NULL : &grp;
    if (b->o.staged)
        return shs_allreduce(b->coll, g, b->plain, count, b->o.dtype, b->o.op);
    return shs_allreduce_region(b->coll, g, b->region, 0, count, b->o.dtype, b->o.op);
}

static int run_size(bench_t *b, size_t bytes, int *wrong_total)
{
    size_t es = shs_dtype_size(b->o.dtype);
    size_t count = bytes / es;
    void *buf = b->o.staged ? b->plain : shs_region_addr(b->region);
    shs_status_t st;
    double wrong = 0;
    uint64_t round = 0;

    if (b->o.check) {
        shs_group_t grp;
        if ((st = group_of(b, round, &grp)) != SHS_OK)
            return die(b->rank, "schedule", st);
        if (grp.size == 0) {
            grp.size = b->size;
            for (int r = 0; r < b->size && r < SHS_GROUP_MAX; r++)
                grp.ranks[r] = r;
        }
        fill(buf, b->o.dtype, count, b->rank);
        if ((st = one_call(b, round++, count)) != SHS_OK)
            return die(b->rank, "allreduce (check)", st);
        wrong = (double)count_wrong(buf, b->o.dtype, b->o.op, count, &grp);
        if ((st = shs_allreduce(b->meta, NULL, &wrong, 1, SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM)) !=
            SHS_OK)
            return die(b->rank, "allreduce (wrong count)", st);
    }
    /* the timed calls start from data that stays finite for a sum */
    fill(buf, b->o.dtype, count, b->rank);
    for (int i = 0; i < b->o.warmup; i++)
        if ((st = one_call(b, round++, count)) != SHS_OK)
            return die(b->rank, "allreduce (warmup)", st);
    if ((st = shs_ctx_barrier(b->ctx)) != SHS_OK)
        return die(b->rank, "barrier", st);
    for (int i = 0; i < b->o.iters; i++) {
        double t0 = now_us();
        if ((st = one_call(b, round++, count)) != SHS_OK)
            return die(b->rank, "allreduce", st);
        b->times[i] = now_us() - t0;
    }
    /* average every iteration's time over the ranks */
    if ((st = shs_allreduce(b->meta, NULL, b->times, (size_t)b->o.iters, SHS_DTYPE_FLOAT64,
                            SHS_REDUCE_AVG)) != SHS_OK)
        return die(b->rank, "allreduce (times)", st);
    double mean = 0;
    for (int i = 0; i < b->o.iters; i++)
        mean += b->times[i];
    mean /= b->o.iters;
    qsort(b->times, (size_t)b->o.iters, sizeof(double), cmp_double);
    double p50 = b->times[(b->o.iters - 1) / 2];
    int k99 = (int)ceil(0.99 * b->o.iters) - 1;
    double p99 = b->times[k99 < 0 ? 0 : k99];
    int gsize = b->o.sched.kind == SHS_SCHED_ALL ? b->size
                : b->o.sched.group_size < b->size ? b->o.sched.group_size : b->size;
    double algbw = (double)(count * es) / mean; /* bytes per us = MB/s */
    double busbw = algbw * 2.0 * (gsize - 1) / gsize;
    if (b->rank == 0)
        printf("%12zu %12zu %6s %6s %11.1f %12.2f %12.2f %7.0f %10.1f %10.1f\n", count * es,
               count, b->o.dtype == SHS_DTYPE_FLOAT32 ? "float" : "double",
               b->o.op == SHS_REDUCE_SUM ? "sum" : "avg", mean, algbw, busbw, wrong, p50, p99);
    fflush(stdout);
    *wrong_total += (int)wrong;
    return 0;
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof(b));
    if (parse(argc, argv, &b.o) != 0) {
        usage(stderr);
        return 2;
    }
    if (!have_rdma_device()) {
        fprintf(stderr, "shs-allreduce-bench: no RDMA device: skipped\n");
        return 77;
    }
    shs_status_t st = shs_ctx_create(NULL, &b.ctx);
    if (st != SHS_OK)
        return die(-1, "shs_ctx_create", st);
    b.rank = shs_ctx_rank(b.ctx);
    b.size = shs_ctx_size(b.ctx);
    if (b.o.sched.kind != SHS_SCHED_ALL || b.size <= SHS_GROUP_MAX) {
        shs_group_t probe;
        if ((st = shs_schedule_group(&b.o.sched, b.size, b.rank, 0, &probe)) != SHS_OK)
            return die(b.rank, "schedule (N must be a power of g for the hypercube)", st);
    }
    if ((st = shs_coll_create(b.ctx, NULL, &b.coll)) != SHS_OK)
        return die(b.rank, "shs_coll_create", st);
    shs_coll_params_t mp = {.field_mask = SHS_COLL_PARAM_WIRE | SHS_COLL_PARAM_STAGE_BYTES,
                            .wire = SHS_WIRE_NATIVE, .stage_bytes = 1u << 20};
    if ((st = shs_coll_create(b.ctx, &mp, &b.meta)) != SHS_OK)
        return die(b.rank, "shs_coll_create (bookkeeping)", st);
    size_t max = b.o.max_bytes + 64;
    b.times = calloc((size_t)b.o.iters, sizeof(double));
    if (b.o.staged)
        b.plain = malloc(max);
    else if ((st = shs_region_alloc(b.ctx, max, SHS_ACCESS_LOCAL_WRITE, &b.region)) != SHS_OK)
        return die(b.rank, "shs_region_alloc", st);
    if (b.times == NULL || (b.o.staged && b.plain == NULL))
        return die(b.rank, "malloc", SHS_ERR_NO_MEMORY);

    if (b.rank == 0) {
        const char *kinds[] = {"all", "hypercube", "general", "random"};
        printf("# shs-allreduce-bench: %d ranks, schedule %s", b.size, kinds[b.o.sched.kind]);
        if (b.o.sched.kind != SHS_SCHED_ALL)
            printf(" (g = %d)", b.o.sched.group_size);
        printf(", %s, %d iterations after %d warmup\n", b.o.staged ? "staged" : "zero-copy region",
               b.o.iters, b.o.warmup);
        printf("# %10s %12s %6s %6s %11s %12s %12s %7s %10s %10s\n", "size", "count", "type",
               "redop", "time(us)", "algbw(MB/s)", "busbw(MB/s)", "#wrong", "p50(us)",
               "p99(us)");
    }
    int wrong = 0, rc = 0;
    size_t es = shs_dtype_size(b.o.dtype);
    for (double bytes = (double)b.o.min_bytes; bytes <= (double)b.o.max_bytes * 1.0001;
         bytes *= b.o.factor) {
        size_t s = ((size_t)bytes / es) * es;
        if (s == 0)
            continue;
        if ((rc = run_size(&b, s, &wrong)) != 0)
            break;
    }
    if (rc == 0 && b.rank == 0 && b.o.check)
        printf("# wrong elements: %d\n", wrong);
    if (rc == 0)
        shs_ctx_barrier(b.ctx);
    shs_coll_destroy(b.meta);
    shs_coll_destroy(b.coll);
    shs_region_destroy(b.region);
    free(b.plain);
    free(b.times);
    shs_ctx_destroy(b.ctx);
    return rc != 0 ? rc : wrong != 0;
}

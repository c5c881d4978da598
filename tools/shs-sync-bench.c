/*
 * shs-sync-bench: the time of one foreground sync round (shs_shadow_sync,
 * FR-MA over all ranks, the pull path) of a model of N float32 in a
 * registered region, on the public API. One process per rank under
 * shs-launch; rank 0 prints one JSON line:
 *
 *   shs-launch -n 4 -- shs-sync-bench [-c COUNT] [-n ITERS] [-w WARMUP]
 *
 *   {"count": N, "iters": I, "mean_us": ..., "p50_us": ..., "p99_us": ...}
 *
 * Every rank times each call; the per-call times are averaged over the
 * ranks, then sorted (as shs-allreduce-bench does). The Python binding's
 * overhead benchmark (tools/python-overhead) times the same call from
 * Python with the same sizes and counts.
 *
 * Exit status: 0 ok, 1 failure, 2 usage, 77 no RDMA device.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shadowsync/shadowsync.h>

#define MAX_ITERS 100000

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage(void)
{
    fprintf(stderr, "usage: shs-sync-bench [-c COUNT] [-n ITERS] [-w WARMUP]\n"
                    "defaults: -c 1048576 -n 50 -w 5\n");
    return 2;
}

int main(int argc, char **argv)
{
    size_t count = 1u << 20;
    int iters = 50, warmup = 5, c;
    while ((c = getopt(argc, argv, "c:n:w:h")) != -1) {
        switch (c) {
        case 'c': count = strtoull(optarg, NULL, 0); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        default: return usage();
        }
    }
    if (count == 0 || iters < 1 || iters > MAX_ITERS || warmup < 0)
        return usage();

    int rc = 1;
    shs_ctx_t *ctx;
    shs_status_t st = shs_ctx_create(NULL, &ctx);
    if (st == SHS_ERR_NO_DEVICE) {
        fprintf(stderr, "shs-sync-bench: no RDMA device\n");
        return 77;
    }
    if (st != SHS_OK) {
        fprintf(stderr, "shs-sync-bench: shs_ctx_create: %s\n", shs_status_string(st));
        return 1;
    }
    const char *what = "shs_region_alloc";
    shs_region_t *model = NULL;
    shs_coll_t *coll = NULL;
    shs_shadow_t *sh = NULL;
    double *times = calloc((size_t)iters, sizeof(double));
    if (times == NULL)
        goto out;
    st = shs_region_alloc(ctx, count * sizeof(float),
                          SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &model);
    if (st != SHS_OK)
        goto out;
    float *w = shs_region_addr(model);
    for (size_t i = 0; i < count; i++)
        w[i] = (float)(i % 97) * 0.01f + (float)shs_ctx_rank(ctx);
    what = "shs_coll_create";
    /* its float64 sums on a native wire, whatever SHS_COLL_WIRE says */
    shs_coll_params_t cp = {.field_mask = SHS_COLL_PARAM_WIRE, .wire = SHS_WIRE_NATIVE};
    if ((st = shs_coll_create(ctx, &cp, &coll)) != SHS_OK)
        goto out;
    shs_shadow_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_SHADOW_PARAM_ALGORITHM;
    p.algorithm = SHS_SHADOW_MA;
    what = "shs_shadow_create";
    if ((st = shs_shadow_create(ctx, model, 0, count, &p, &sh)) != SHS_OK)
        goto out;
    what = "shs_shadow_sync";
    for (int i = 0; i < warmup; i++)
        if ((st = shs_shadow_sync(sh)) != SHS_OK)
            goto out;
    what = "shs_ctx_barrier";
    if ((st = shs_ctx_barrier(ctx)) != SHS_OK)
        goto out;
    what = "shs_shadow_sync";
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        if ((st = shs_shadow_sync(sh)) != SHS_OK)
            goto out;
        times[i] = now_us() - t0;
    }
    what = "shs_allreduce (times)";
    st = shs_allreduce(coll, NULL, times, (size_t)iters, SHS_DTYPE_FLOAT64, SHS_REDUCE_AVG);
    if (st != SHS_OK)
        goto out;
    double mean = 0;
    for (int i = 0; i < iters; i++)
        mean += times[i];
    mean /= iters;
    qsort(times, (size_t)iters, sizeof(double), cmp_double);
    int k99 = (int)ceil(0.99 * iters) - 1;
    if (shs_ctx_rank(ctx) == 0)
        printf("{\"count\": %zu, \"iters\": %d, \"mean_us\": %.6g, \"p50_us\": %.6g, "
               "\"p99_us\": %.6g}\n",
               count, iters, mean, times[(iters - 1) / 2], times[k99 < 0 ? 0 : k99]);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "shs-sync-bench rank %d: %s: %s\n", shs_ctx_rank(ctx), what,
                times == NULL ? "out of memory" : shs_status_string(st));
    shs_shadow_destroy(sh);
    shs_coll_destroy(coll);
    shs_region_destroy(model);
    free(times);
    shs_ctx_barrier(ctx);
    shs_ctx_destroy(ctx);
    return rc;
}

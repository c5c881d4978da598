/*
 * One run of shs-ctr: the context (rank and size come from it, whatever
 * started the ranks), this rank's share of the data, the model in a
 * registered region, the shadow engine, then the pass or --sync-only, and
 * the teardown in reverse.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer.h"

static int g_rank;

void ctr_die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "shs-ctr rank %d: ", g_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

double ctr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This rank's share of the stream, and the held-out examples after it.
 * Returns the seconds it took. */
static double draw_data(ctr_run_t *r)
{
    ctr_teacher_t teacher;
    ctr_teacher_init(&teacher, r->o.seed, r->o.ctr);
    uint64_t lo = r->o.examples * (uint64_t)r->rank / (uint64_t)r->size;
    uint64_t hi = r->o.examples * (uint64_t)(r->rank + 1) / (uint64_t)r->size;
    r->ntrain = r->o.sync_only_s > 0 ? 0 : (size_t)(hi - lo);
    size_t neval = r->o.sync_only_s > 0 ? 0 : (size_t)r->o.eval_n;
    r->train = malloc((r->ntrain + 1) * sizeof(ctr_example_t));
    r->eval = malloc((neval + 1) * sizeof(ctr_example_t));
    if (r->train == NULL || r->eval == NULL)
        ctr_die("out of memory for %zu examples", r->ntrain);
    double t = ctr_now();
    for (size_t i = 0; i < r->ntrain; i++)
        ctr_example(&teacher, lo + i, &r->train[i]);
    for (size_t i = 0; i < neval; i++)
        ctr_example(&teacher, r->o.examples + i, &r->eval[i]);
    return ctr_now() - t;
}

/* The model: plain memory in --mode single, else a registered region that
 * the shadow engine (sync modes) keeps in step with the other ranks. */
static void setup_model(ctr_run_t *r)
{
    if (r->ctx == NULL) {
        r->model = malloc(r->nparams * sizeof(float));
        if (r->model == NULL)
            ctr_die("out of memory for the model");
    } else {
        CTR_CHECK(shs_region_alloc(r->ctx, r->nparams * sizeof(float),
                                   SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &r->region));
        r->model = shs_region_addr(r->region);
    }
    if (r->hy != NULL)
        ctr_hybrid_init_model(r);
    else
        ctr_model_init(&r->lay, r->model, r->o.seed, r->o.ctr);
    if (r->sync) {
        shs_shadow_params_t p;
        ctr_shadow_params(r, &p);
        CTR_CHECK(shs_shadow_create(r->ctx, r->region, 0, r->nparams, &p, &r->sh));
    }
}

static void teardown(ctr_run_t *r)
{
    if (r->sh != NULL)
        shs_shadow_destroy(r->sh);
    if (r->hy != NULL)
        ctr_hybrid_teardown(r);
    if (r->ctx != NULL) {
        if (r->failed == 0 && shs_ctx_barrier(r->ctx) != SHS_OK)
            fprintf(stderr, "shs-ctr rank %d: final barrier failed\n", r->rank);
        shs_region_destroy(r->region);
        shs_ctx_destroy(r->ctx);
    } else {
        free(r->model);
    }
    free(r->eval);
    free(r->train);
}

int ctr_main(int argc, char **argv, const ctr_hooks_t *hooks)
{
    ctr_run_t r;
    memset(&r, 0, sizeof(r));
    r.hooks = hooks;
    ctr_parse(argc, argv, &r.o);
    ctr_mode_of(&r);
    r.rank = 0;
    r.size = 1;
    if (strcmp(r.o.mode, "single") != 0) {
        /* the library finds rank and size: shs-launch, Open MPI, Slurm,
         * torchrun, or SHS_RANK/SHS_SIZE */
        CTR_CHECK(shs_ctx_create(NULL, &r.ctx));
        r.rank = shs_ctx_rank(r.ctx);
        r.size = shs_ctx_size(r.ctx);
    }
    g_rank = r.rank;
    double tgen;
    if (strcmp(r.o.model, "dlrm") == 0) {
        ctr_hybrid_setup(&r, &tgen);
    } else {
        ctr_layout_init(&r.lay, &r.o.shape);
        r.nparams = r.lay.count;
        tgen = draw_data(&r);
    }
    setup_model(&r);
    if (r.rank == 0)
        printf("%-10s %d rank(s) x %d workers, %zu params (%.1f MB), %llu training examples, "
               "%llu held out%s (data drawn in %.1f s)\n",
               r.o.label, r.size, r.o.workers, r.nparams, (double)r.nparams * 4 / 1e6,
               (unsigned long long)r.o.examples, (unsigned long long)r.o.eval_n,
               r.o.ds ? ", DS-Sync" : "", tgen);
    fflush(stdout);
    if (r.o.eval_only != NULL) {
        if (r.hy == NULL || r.sync)
            ctr_die("--eval-only needs --mode none or single");
        ctr_hybrid_eval_only(&r);
    } else if (r.o.sync_only_s > 0) {
        if (!r.sync || r.foreground)
            ctr_die("--sync-only needs an s-* mode");
        ctr_sync_only(&r);
    } else {
        ctr_train(&r);
    }
    teardown(&r);
    return 0;
}

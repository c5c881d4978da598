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
#include <unistd.h>

#include "trainer.h"

static int g_rank;

void ctr_die(const char *fmt, ...)
{
    /* one write, so that the ranks' messages do not interleave */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "shs-ctr rank %d: %s\n", g_rank, msg);
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
    /* a rejoiner: none now; its workers draw what is left of its share as
     * they reach it (train.c), so it trains as soon as it is back instead
     * of lagging the others by the drawing */
    r->teacher = teacher;
    r->train_lo = lo;
    r->draw_lazy = r->rejoined;
    for (size_t i = 0; !r->draw_lazy && i < r->ntrain; i++)
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

/* MiB the kernel says it can still give (MemAvailable), 0 when unknown */
static double mem_available_mb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double mb = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "MemAvailable:", 13) == 0)
            mb = atof(line + 13) / 1024.0;
    if (f != NULL)
        fclose(f);
    return mb;
}

/* 52 bits of an FNV-1a hash of this machine's name: exact in a double */
static double host_tag(void)
{
    char host[256];
    if (gethostname(host, sizeof(host)) != 0)
        host[0] = '\0';
    host[sizeof(host) - 1] = '\0';
    uint64_t h = 1469598103934665603ull;
    for (const char *c = host; *c != '\0'; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return (double)(h >> 12);
}

/*
 * Before the model is allocated: will it fit? Each rank needs its model
 * array (nparams floats) and, in sync modes, the shadow engine's copies of
 * it (about three more). Every rank publishes its machine's tag and the
 * memory available there (one allreduce: a slot per rank), so every rank
 * sees how many ranks share each machine and takes the same decision: a
 * model that cannot fit ends the job on every rank with the figures,
 * rather than one rank killed by the kernel's OOM killer mid-setup.
 */
static void check_memory(ctr_run_t *r)
{
    const size_t n = (size_t)r->size;
    double *v = calloc(2 * n, sizeof(double));
    if (v == NULL)
        ctr_die("out of memory");
    v[r->rank] = host_tag();
    v[n + (size_t)r->rank] = mem_available_mb();
    shs_coll_params_t cp;
    shs_coll_t *coll;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = SHS_COLL_PARAM_STAGE_BYTES | SHS_COLL_PARAM_WIRE;
    cp.stage_bytes = 2 * n * sizeof(double);
    cp.wire = SHS_WIRE_NATIVE; /* float64 sums, whatever SHS_COLL_WIRE says */
    CTR_CHECK(shs_coll_create(r->ctx, &cp, &coll));
    CTR_CHECK(shs_allreduce(coll, NULL, v, 2 * n, SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM));
    CTR_CHECK(shs_ctx_barrier(r->ctx));
    shs_coll_destroy(coll);
    const double need = (double)r->nparams * sizeof(float) * (r->sync ? 4 : 1) / 1048576.0;
    for (size_t i = 0; i < n; i++) {
        int here = 0;
        double avail = v[n + i];
        for (size_t j = 0; j < n; j++)
            if (v[j] == v[i]) {
                here++;
                if (v[n + j] < avail)
                    avail = v[n + j];
            }
        if (avail > 0 && need * here > avail - 64) {
            double mb = v[n + i];
            free(v);
            ctr_die("the model (%zu params, %.0f MB) needs about %.0f MB a rank%s; %d rank(s) "
                    "share the machine of rank %zu and it has ~%.0f MB available%s",
                    r->nparams, (double)r->nparams * 4 / 1e6, need,
                    r->sync ? " with the shadow engine's copies" : "", here, i, mb,
                    r->hy != NULL && strcmp(r->o.tables, "replicated") == 0
                        ? ": --tables sharded spreads the tables over the ranks"
                        : "");
        }
    }
    free(v);
}

static void teardown(ctr_run_t *r)
{
    ctr_stall_end(r);
    if (r->sh != NULL)
        shs_shadow_destroy(r->sh);
    if (r->hy != NULL)
        ctr_hybrid_teardown(r);
    if (r->ctx != NULL) {
        /* among the living, after a failure too (rank 0's included) */
        shs_status_t st = shs_ctx_barrier(r->ctx);
        if (st != SHS_OK)
            fprintf(stderr, "shs-ctr rank %d: final barrier failed: %s\n", r->rank,
                    shs_status_string(st));
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
    r.proc_t0 = ctr_now();
    ctr_parse(argc, argv, &r.o);
    ctr_mode_of(&r);
    r.rank = 0;
    r.size = 1;
    /* before the context: no verbs resource may exist when the watcher forks */
    ctr_stall_fork(&r);
    if (strcmp(r.o.mode, "single") != 0) {
        /* the library finds rank and size: shs-launch, Open MPI, Slurm,
         * torchrun, or SHS_RANK/SHS_SIZE */
        CTR_CHECK(shs_ctx_create(NULL, &r.ctx));
        r.rank = shs_ctx_rank(r.ctx);
        r.size = shs_ctx_size(r.ctx);
    }
    g_rank = r.rank;
    ctr_stall_rank(&r);
    double tgen;
    if (r.ctx != NULL)
        ctr_restart_init(&r);
    if (r.rejoined) {
        /* back into the running job first: the engine syncs while the
         * held-out data is drawn (its training examples are drawn as its
         * workers reach them). It skips the start-up's collective (the memory check):
         * the job made it long ago and destroyed its regions, which a
         * rejoiner does not make again (docs/failures.md) */
        ctr_layout_init(&r.lay, &r.o.shape);
        r.nparams = r.lay.count;
        setup_model(&r);
        CTR_CHECK(shs_shadow_start(r.sh));
        ctr_restart_ready(&r);
        tgen = draw_data(&r);
    } else if (strcmp(r.o.model, "dlrm") == 0) {
        ctr_hybrid_setup(&r, &tgen);
    } else {
        ctr_layout_init(&r.lay, &r.o.shape);
        r.nparams = r.lay.count;
        tgen = draw_data(&r);
    }
    if (r.ctx != NULL && !r.rejoined)
        check_memory(&r);
    if (!r.rejoined)
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

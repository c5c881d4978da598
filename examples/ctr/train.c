/*
 * The training pass of shs-ctr: W Hogwild workers on this rank's share of
 * the stream, and the monitor (this thread) that takes the checkpoints, notes
 * when a failed peer is first seen and, with --dump, samples the output
 * biases (with --stall-rank, the rounds once a second). Then the end of the
 * run: teardown, evaluation, report.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "trainer.h"

#define PROGRESS_EVERY 64 /* examples between a worker's progress publications */
#define MONITOR_SLEEP_US 5000
#define TRACE_MAX 4096 /* --dump samples: 20 s at one per monitor tick */

void ctr_worker_tick(ctr_worker_t *w, uint64_t *syncs)
{
    ctr_run_t *r = w->run;
    w->count++;
    if (w->count % PROGRESS_EVERY == 0)
        atomic_store_explicit(&w->done, w->count, memory_order_relaxed);
    if (r->foreground && *syncs < r->nsync && w->count % r->o.fr_every == 0) {
        ctr_fg_sync(r);
        (*syncs)++;
    }
}

/* the wide model: one example at a time, the whole model in the region */
static void wide_work(ctr_worker_t *w)
{
    ctr_run_t *r = w->run;
    const int W = r->o.workers;
    uint64_t syncs = 0;
    /* the rate decays linearly to lr_end * lr over the pass: the final
     * model is then an average of its last steps rather than one noisy
     * iterate, which makes modes comparable run to run */
    const float lr0 = r->o.lr, lr1 = r->o.lr * r->o.lr_end;
    const double inv_n = 1.0 / (double)(r->ntrain > 0 ? r->ntrain : 1);
    /* a rejoiner: where its predecessor stopped (restart.c) */
    size_t from = (size_t)(r->start_pos - r->start_pos % (uint64_t)W);
    ctr_example_t drawn;
    for (size_t i = from + (size_t)w->id; i < r->ntrain; i += (size_t)W) {
        const ctr_example_t *ex = &r->train[i];
        if (r->draw_lazy) { /* a rejoiner (run.c) */
            ctr_example(&r->teacher, r->train_lo + i, &drawn);
            ex = &drawn;
        }
        float lr = lr0 + (lr1 - lr0) * (float)((double)i * inv_n);
        float q = ctr_sgd_step(&r->lay, r->model, ex, lr);
        w->loss += ctr_logloss(q, ex->label);
        w->pos += ex->label;
        w->trained++;
        ctr_worker_tick(w, &syncs);
    }
}

static void *worker_main(void *arg)
{
    ctr_worker_t *w = arg;
    ctr_run_t *r = w->run;
    /* Linux: nice applies to the calling thread */
    if (r->o.worker_nice != 0 && setpriority(PRIO_PROCESS, 0, r->o.worker_nice) != 0)
        fprintf(stderr, "shs-ctr rank %d: worker nice %d refused: %s\n", r->rank,
                r->o.worker_nice, strerror(errno));
    if (r->hy != NULL)
        ctr_hybrid_work(w);
    else
        wide_work(w);
    atomic_store_explicit(&w->done, w->count, memory_order_relaxed);
    return NULL;
}

static uint64_t workers_done(ctr_worker_t *ws, int n)
{
    uint64_t done = 0;
    for (int i = 0; i < n; i++)
        done += atomic_load_explicit(&ws[i].done, memory_order_relaxed);
    return done;
}

/* A point of the curve: the wide model is copied and evaluated after the
 * pass; the hybrid one is evaluated now, with the tables as they are (its
 * copy, kept for the end, is the dense part only). */
static void checkpoint(ctr_run_t *r, uint64_t seen)
{
    r->ckpt_t[r->nckpt] = ctr_now() - r->t0;
    size_t slot = r->hy != NULL ? 0 : (size_t)r->nckpt;
    memcpy(r->ckpt + slot * r->nparams, r->model, r->nparams * sizeof(float));
    if (r->hy != NULL)
        ctr_hybrid_curve_point(r, r->nckpt);
    r->ckpt_seen[r->nckpt++] = seen * (uint64_t)r->size;
}

const float *ctr_final_model(const ctr_run_t *r)
{
    if (r->nckpt == 0)
        return NULL;
    return r->ckpt + (r->hy != NULL ? 0 : (size_t)(r->nckpt - 1) * r->nparams);
}

/* Until the workers are done: checkpoints at equal fractions of the local
 * pass, the first sight of a failed peer, the --dump trace (the output
 * biases over time: t, bias, b2, rounds). */
static void monitor(ctr_run_t *r, ctr_worker_t *ws, double t0, ctr_fail_mark_t *mark)
{
    static double trace[TRACE_MAX][4];
    int ntrace = 0;
    r->nckpt = 0;
    for (;;) {
        uint64_t done = workers_done(ws, r->o.workers);
        if (r->hooks != NULL && r->hooks->progress != NULL)
            r->hooks->progress(r, done);
        ctr_restart_tick(r, done);
        /* the thread that drives the context polls it: a rank that rejoined
         * is taken back on the context there (its engine's endpoint takes
         * it back by itself), which a later rejoin of that rank needs */
        if (r->ctx != NULL)
            (void)shs_progress(r->ctx);
        ctr_series_sample(r, false);
        shs_shadow_stats_t s;
        if (r->sync && mark->t == 0 && shs_shadow_stats(r->sh, &s) == SHS_OK &&
            s.failed_peers > 0) {
            mark->t = ctr_now();
            mark->done = done;
        }
        if (r->nckpt < r->o.checkpoints) {
            uint64_t next =
                r->ntrain * (uint64_t)(r->nckpt + 1) / (uint64_t)(r->o.checkpoints + 1);
            /* never copy a model half way through a foreground round (the
             * workers never see one either) */
            if (done >= next && !atomic_load(&r->syncing)) {
                checkpoint(r, done);
                continue;
            }
        }
        if (done >= r->ntrain)
            break;
        if (r->o.dump && r->hy == NULL && ntrace < TRACE_MAX) {
            double *t = trace[ntrace++];
            t[0] = ctr_now() - t0;
            t[1] = r->model[r->lay.bias];
            t[2] = r->model[r->lay.b2];
            t[3] = r->sync && shs_shadow_stats(r->sh, &s) == SHS_OK ? (double)s.rounds : 0;
        }
        usleep(MONITOR_SLEEP_US);
    }
    ctr_write_trace(r, (const double (*)[4])trace, ntrace);
}

/* The pass: workers started, monitored and joined; their totals in res. */
static void run_pass(ctr_run_t *r, ctr_result_t *res, ctr_fail_mark_t *mark, double t0)
{
    ctr_worker_t *ws = calloc((size_t)r->o.workers, sizeof(ctr_worker_t));
    if (ws == NULL)
        ctr_die("out of memory");
    uint64_t before = r->start_pos / (uint64_t)r->o.workers; /* each worker's, done */
    for (int i = 0; i < r->o.workers; i++) {
        ws[i].run = r;
        ws[i].id = i;
        ws[i].count = before;
        atomic_store(&ws[i].done, before);
        if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i]) != 0)
            ctr_die("cannot start worker %d", i);
    }
    monitor(r, ws, t0, mark);
    double loss = 0, pos = 0;
    uint64_t trained = 0;
    for (int i = 0; i < r->o.workers; i++) {
        pthread_join(ws[i].th, NULL);
        loss += ws[i].loss;
        trained += ws[i].trained;
        pos += ws[i].pos;
        res->examples += ws[i].count;
    }
    res->examples -= before * (uint64_t)r->o.workers; /* this process's */
    res->train_s = ctr_now() - (r->rejoined ? r->pass_t0 : t0);
    res->eps = (double)res->examples / res->train_s;
    /* on the examples trained on (a skipped one has no loss) */
    double h = trained > 0 ? ctr_entropy(pos / (double)trained) : 0;
    res->train_ne = h > 0 ? loss / (double)trained / h : 0;
    free(ws);
}

void ctr_train(ctr_run_t *r)
{
    ctr_result_t res;
    ctr_fail_mark_t mark = {0, 0};
    memset(&res, 0, sizeof(res));
    size_t copies = r->hy != NULL ? 1 : (size_t)(r->o.checkpoints + 1);
    r->ckpt = malloc(copies * r->nparams * sizeof(float));
    if (r->ckpt == NULL)
        ctr_die("out of memory");
    /* the pass starts together (a rejoiner: the job's started long ago) */
    if (r->ctx != NULL && !r->rejoined)
        CTR_CHECK(shs_ctx_barrier(r->ctx));
    r->pass_t0 = ctr_now();
    double t0 = r->rejoined ? r->job_t0 : r->pass_t0;
    r->t0 = t0;
    ctr_sync_start(r);
    ctr_stall_start(r);
    run_pass(r, &res, &mark, t0);
    ctr_restart_end(r);
    ctr_stall_end(r);
    if (r->hy != NULL)
        ctr_hybrid_end_pass(r);
    ctr_sync_stop(r, &res, &mark, t0);
    /* after a peer failure the job-wide steps (barriers, the final
     * allreduce) are skipped: the survivors evaluate their own models */
    bool teardown = ctr_sync_teardown(r, &res);
    if (r->hy != NULL)
        ctr_hybrid_figures(r);
    checkpoint(r, res.examples);
    /* the ranks' own models are evaluated as they are; for the sync modes,
     * also the average of the ranks' final models (one ring allreduce, the
     * model a job would export): it separates what the sync achieved from
     * how far the ranks drifted since their last round */
    float *avg = NULL;
    if ((r->sync || r->o.save != NULL) && teardown && r->ctx != NULL) {
        avg = malloc(r->nparams * sizeof(float));
        if (avg == NULL)
            ctr_die("out of memory");
        ctr_final_average(r, avg);
    }
    if (r->o.save != NULL && r->hy != NULL && teardown)
        ctr_hybrid_save(r, avg != NULL ? avg : ctr_final_model(r));
    double eval_s = ctr_evaluate_run(r, avg, &res);
    free(avg);
    ctr_print_result(r, &res, eval_s, r->sync && teardown);
    ctr_write_json(r, &res);
    r->failed = teardown ? 0 : 1;
    if (r->foreground)
        pthread_barrier_destroy(&r->bar);
    free(r->ckpt);
}

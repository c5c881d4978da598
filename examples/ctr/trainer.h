/*
 * The parts of the CTR trainer (shs-ctr) and what they share: the options
 * (options.c), one run's state, the workers and the monitor (train.c), the
 * sync driver (sync.c: the shadow engine or the foreground rounds), the
 * evaluation and the output (report.c), --stall-rank (stall.c), and the
 * entry point (run.c).
 * Public API calls only, as in tools/.
 *
 * ctr_main() takes hooks: a test driver (tests/guest/ctr_fault.c, the
 * shs-ctr-fault binary) uses them to inject faults into a run; shs-ctr
 * passes none.
 */
#ifndef SHS_EXAMPLES_CTR_TRAINER_H
#define SHS_EXAMPLES_CTR_TRAINER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <shadowsync/shadowsync.h>
#include <shadowsync/shadow.h>

#include "ctr.h"
#include "dlrm.h"

#define CTR_MAX_WORKERS 64
#define CTR_MAX_CKPT 64

typedef struct ctr_opts {
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
    float bmuf_eta, bmuf_zeta, easgd_alpha; /* < 0: the engine's default */
    int bmuf_nesterov;                      /* < 0: the engine's default */
    int dump;                               /* write the final model next to the JSON */
    int no_finish;                          /* skip shs_shadow_finish at the end */
    /* --model dlrm: the hybrid trainer (hybrid.c) */
    const char *model;                      /* "wide" (default) or "dlrm" */
    const char *tables;                     /* dlrm: "sharded" (default) or "replicated" */
    uint64_t rows;                          /* embedding table rows over all fields */
    int bottom, top;                        /* hidden units of the two MLPs */
    int batch;                              /* examples per lookup and update */
    float emb_lr;                           /* the tables' row-wise Adagrad rate */
    uint32_t emb_cache, emb_cache_age;      /* the tables' hot-row cache (0: the knobs) */
    int emb_cache_own;                      /* shs_emb_cache_own_t (0: the knob) */
    const char *save;                       /* dlrm: write the final model to DIR */
    const char *eval_only;                  /* dlrm: load DIR's model, evaluate it */
    int stall_rank;                         /* --stall-rank: the rank to stop, -1: none */
    double stall_for, stall_after;          /* its stall and when it starts (s) */
    int restart_rank;                       /* --restart-rank: a rank, CTR_RESTART_ANY or _NONE */
    double restart_after, restart_every;    /* the first kill, the time between kills (s,
                                               or % of the share with restart_pct) */
    bool restart_pct;                       /* --restart-after/-every given as N% */
    int restarts;                           /* --restarts: kills in the run */
} ctr_opts_t;

#define CTR_RESTART_NONE (-1)
#define CTR_RESTART_ANY (-2)

typedef struct ctr_hybrid ctr_hybrid_t;

typedef struct ctr_run ctr_run_t;

/* Calls into a test driver; any may be NULL. */
typedef struct ctr_hooks {
    /* each monitor tick of the training pass, with the examples this
     * rank's workers have done */
    void (*progress)(ctr_run_t *r, uint64_t done);
    /* S modes: the pass is done, the shadow thread still runs */
    void (*pass_done)(ctr_run_t *r);
} ctr_hooks_t;

struct ctr_run {
    ctr_opts_t o;
    const ctr_hooks_t *hooks;
    int rank, size;
    bool sync, foreground;
    shs_shadow_algorithm_t algo;
    ctr_layout_t lay;
    ctr_hybrid_t *hy; /* --model dlrm: the tables, the data, the figures */
    dlrm_layout_t dl; /* --model dlrm: the dense part in model */
    size_t nparams;   /* floats in model: the synced dense part */
    shs_ctx_t *ctx;   /* NULL in --mode single */
    float *model;
    shs_region_t *region;
    ctr_example_t *train, *eval;
    /* a rejoiner draws its examples as its workers reach them (from the
     * teacher, by index from train_lo) instead of all before its pass */
    bool draw_lazy;
    ctr_teacher_t teacher;
    uint64_t train_lo;
    size_t ntrain;
    shs_shadow_t *sh;
    pthread_barrier_t bar;
    uint64_t nsync; /* foreground syncs per worker */
    atomic_int sync_errors;
    atomic_int syncing; /* FR: a foreground round is rewriting the model */
    /* checkpoints: copies of the model and the examples seen (all ranks) */
    float *ckpt;
    uint64_t ckpt_seen[CTR_MAX_CKPT + 1];
    double ckpt_t[CTR_MAX_CKPT + 1]; /* seconds since the pass started */
    int nckpt;
    double t0; /* the pass started (ctr_now) */
    int failed; /* peers failed during the run: skip the job-wide teardown steps */
    pid_t stall_pid; /* --stall-rank: the watcher child (stall.c), 0: none */
    int stall_fd;    /* its socket, while stall_pid != 0 */
    /* restarts (restart.c) */
    bool rejoined;        /* this process is a restarted rank (SHS_REJOIN=1) */
    double proc_t0;       /* this process started (ctr_now) */
    double job_t0;        /* a rejoiner: the job's pass started (its t0) */
    double pass_t0;       /* this process's pass started */
    double rejoin_sync_s; /* a rejoiner: its first synced round, from proc_t0 */
    uint64_t start_pos;   /* a rejoiner: examples of its share done before it died */
    int restart_next;     /* the next kill of the schedule */
    int rejoin_kill;      /* a rejoiner: 1 + the kill that ended its last process */
};

/* One Hogwild worker thread of the pass (train.c). */
typedef struct ctr_worker {
    ctr_run_t *run;
    int id;
    pthread_t th;
    _Atomic uint64_t done;
    double loss;
    double pos;
    uint64_t count;   /* examples of the pass done */
    uint64_t trained; /* of them, trained on (the hybrid skips a batch whose rows failed) */
} ctr_worker_t;

/* What one rank reports (stdout, DIR/<label>.rank<r>.json). */
typedef struct ctr_result {
    double train_s, eps, train_ne, eval_ne, auc, avg_ne, avg_auc, syncs_per_min, round_ms,
        wait_ms, staleness_ms;
    uint64_t examples, rounds, bytes, errors, skipped, torn;
    /* after a peer failure (failed > 0): when it was seen (CLOCK_MONOTONIC
     * s), this rank's EPS and syncs per minute from then to the end */
    int failed;
    double fail_seen_s, eps_after, syncs_per_min_after;
    uint64_t rounds_after;
    uint64_t straggler_skips, rounds_left_out; /* the engine's straggler counters */
    double curve_ne[CTR_MAX_CKPT + 1], curve_auc[CTR_MAX_CKPT + 1];
} ctr_result_t;

/* When this rank first saw a failed peer during the pass (0: not seen). */
typedef struct ctr_fail_mark {
    double t;
    uint64_t done;
} ctr_fail_mark_t;

/* run.c */
int ctr_main(int argc, char **argv, const ctr_hooks_t *hooks);
void ctr_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
double ctr_now(void);

#define CTR_CHECK(expr)                                                                \
    do {                                                                               \
        shs_status_t st_ = (expr);                                                     \
        if (st_ != SHS_OK)                                                             \
            ctr_die("%s: %s", #expr, shs_status_string(st_));                          \
    } while (0)

/* options.c */
void ctr_usage(FILE *f);
void ctr_parse(int argc, char **argv, ctr_opts_t *o);
void ctr_mode_of(ctr_run_t *r);

/* train.c */
void ctr_train(ctr_run_t *r);
/* the final model's copy (the last checkpoint) */
const float *ctr_final_model(const ctr_run_t *r);
/* a worker's bookkeeping after each example: progress, FR syncs */
void ctr_worker_tick(ctr_worker_t *w, uint64_t *syncs);

/* hybrid.c: --model dlrm. setup after the context and before the model
 * region (sets nparams, draws the data); work is a worker's pass; evaluate
 * scores the dense part p (the rank's own, or the average) with the tables
 * as they are; report adds the tables' figures to the output */
void ctr_hybrid_setup(ctr_run_t *r, double *draw_s);
void ctr_hybrid_init_model(ctr_run_t *r);
void ctr_hybrid_work(ctr_worker_t *w);
void ctr_hybrid_end_pass(ctr_run_t *r);
void ctr_hybrid_curve_point(ctr_run_t *r, int i);
void ctr_hybrid_curve(const ctr_run_t *r, ctr_result_t *res);
void ctr_hybrid_figures(ctr_run_t *r);
void ctr_hybrid_evaluate(ctr_run_t *r, const float *p, double *ne_p, double *auc_p);
void ctr_hybrid_print(const ctr_run_t *r, const ctr_result_t *res);
void ctr_hybrid_json(const ctr_run_t *r, FILE *f, const ctr_result_t *res);
void ctr_hybrid_teardown(ctr_run_t *r);
/* --save DIR: the averaged dense part (and local tables) by rank 0, the
 * sharded tables by their holders (collective) */
void ctr_hybrid_save(ctr_run_t *r, const float *avg);
/* --eval-only DIR: the options of the run that saved it (before setup) */
void ctr_hybrid_read_header(ctr_opts_t *o);
/* --eval-only DIR: load the model into this job's ranks and evaluate it */
void ctr_hybrid_eval_only(ctr_run_t *r);

/* sync.c */
void ctr_shadow_params(const ctr_run_t *r, shs_shadow_params_t *p);
void ctr_fg_sync(ctr_run_t *r);
void ctr_sync_start(ctr_run_t *r);
void ctr_sync_stop(ctr_run_t *r, ctr_result_t *res, ctr_fail_mark_t *mark, double t0);
bool ctr_sync_teardown(ctr_run_t *r, const ctr_result_t *res);
void ctr_final_average(ctr_run_t *r, float *avg);
void ctr_sync_only(ctr_run_t *r);

/* report.c */
double ctr_evaluate_run(ctr_run_t *r, const float *avg, ctr_result_t *res);
void ctr_print_result(const ctr_run_t *r, const ctr_result_t *res, double eval_s, bool averaged);
void ctr_write_json(const ctr_run_t *r, const ctr_result_t *res);
void ctr_write_trace(const ctr_run_t *r, const double (*trace)[4], int n);

/* stall.c: --stall-rank. fork before the context (every rank: the rank is
 * not known yet); rank once it is known (checks R, dismisses the other
 * ranks' watchers); start when the pass starts (rank R: the watcher's clock
 * runs); end when it ends (a stall not begun is called off; the watcher is
 * reaped). The series: each rank's rounds once a second (sample from the
 * monitor; last: the final point, whenever it is taken). */
void ctr_stall_fork(ctr_run_t *r);
void ctr_stall_rank(ctr_run_t *r);
void ctr_stall_start(ctr_run_t *r);
void ctr_stall_end(ctr_run_t *r);
void ctr_series_sample(ctr_run_t *r, bool last);
void ctr_series_print(const ctr_run_t *r);
void ctr_series_json(FILE *f);

/* restart.c: --restart-rank. init once the rank is known (a rejoiner reads
 * where its predecessor stopped); tick from the pass's monitor (the kill
 * schedule; a rejoiner's first synced round) */
void ctr_restart_init(ctr_run_t *r);
void ctr_restart_tick(ctr_run_t *r, uint64_t done);
/* a rejoiner whose set-up is done (its regions and engine made again): the
 * next kill may come */
void ctr_restart_ready(const ctr_run_t *r);
/* a rank whose pass ended, with kills in the run: waits until every kill's
 * victim is back and its engine counts no failed peer, so that the job's
 * end steps start with every rank (bounded); a kill never comes after a
 * rank ended its pass */
void ctr_restart_end(ctr_run_t *r);

#endif

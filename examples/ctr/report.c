/*
 * What shs-ctr reports: the evaluation of the checkpoints and of the
 * averaged model, the line per rank on stdout, and with --out the JSON per
 * rank (tools/shs_report reads it), the final model and the bias trace.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"

/* DIR/<label>.rank<r>.<ext> of --out DIR, open for writing. */
static FILE *open_out(const ctr_run_t *r, const char *ext)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.rank%d.%s", r->o.out, r->o.label, r->rank, ext);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        ctr_die("cannot write %s: %s", path, strerror(errno));
    return f;
}

void ctr_write_json(const ctr_run_t *r, const ctr_result_t *res)
{
    if (r->o.out == NULL)
        return;
    FILE *f = open_out(r, "json");
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
            "\"straggler_skips\": %llu, \"rounds_left_out\": %llu, \"rejoined\": %d, "
            "\"rejoin_sync_s\": %.3f, \"curve\": [",
            r->o.label, r->o.mode, r->o.ds, r->rank, r->size, r->o.workers, r->nparams,
            (unsigned long long)res->examples, res->train_s, res->eps, res->train_ne,
            res->eval_ne, res->auc, res->avg_ne, res->avg_auc, (unsigned long long)res->rounds,
            res->syncs_per_min,
            res->round_ms, res->wait_ms, res->staleness_ms, (unsigned long long)res->bytes,
            (unsigned long long)res->errors, (unsigned long long)res->skipped,
            (unsigned long long)res->torn, (unsigned long long)(r->foreground ? r->o.fr_every : 0),
            r->o.interval_us, r->o.path, r->o.worker_nice, res->failed, res->fail_seen_s,
            res->eps_after, (unsigned long long)res->rounds_after, res->syncs_per_min_after,
            (unsigned long long)res->straggler_skips, (unsigned long long)res->rounds_left_out,
            r->rejoined ? 1 : 0, r->rejoin_sync_s);
    /* rank 0: the whole curve; the others: their last point (none when no
     * checkpoint was taken: --sync-only, --eval-only) */
    int first = r->rank == 0 || r->nckpt == 0 ? 0 : r->nckpt - 1;
    for (int i = first; i < r->nckpt; i++)
        fprintf(f, "%s[%llu, %.6f, %.6f, %.3f]", i > first ? ", " : "",
                (unsigned long long)r->ckpt_seen[i], res->curve_ne[i], res->curve_auc[i],
                r->ckpt_t[i]);
    /* the final model's output biases: a rank whose predictions are all
     * shifted alike shows here first */
    const float *fin = ctr_final_model(r);
    /* the DLRM part has one output bias: the top MLP's */
    size_t bias = r->hy != NULL ? r->dl.tb2 : r->lay.bias;
    fprintf(f, "], \"bias\": %.6f, \"b2\": %.6f", fin != NULL ? fin[bias] : 0.0,
            fin != NULL && r->hy == NULL ? fin[r->lay.b2] : 0.0);
    ctr_series_json(f);
    if (r->hy != NULL)
        ctr_hybrid_json(r, f, res);
    fprintf(f, "}\n");
    fclose(f);
    if (r->o.dump && fin != NULL) {
        f = open_out(r, "model");
        if (fwrite(fin, sizeof(float), r->nparams, f) != r->nparams)
            ctr_die("cannot write the model: %s", strerror(errno));
        fclose(f);
    }
}

void ctr_write_trace(const ctr_run_t *r, const double (*trace)[4], int n)
{
    if (!r->o.dump || r->o.out == NULL)
        return;
    FILE *f = open_out(r, "trace");
    for (int i = 0; i < n; i++)
        fprintf(f, "%.4f %.6f %.6f %.0f\n", trace[i][0], trace[i][1], trace[i][2], trace[i][3]);
    fclose(f);
}

/* The hybrid model: the curve was taken during the pass (on part of the
 * held-out set); the table's figures are of the final model on all of it. */
static double evaluate_hybrid(ctr_run_t *r, const float *avg, ctr_result_t *res)
{
    double t = ctr_now();
    ctr_hybrid_curve(r, res);
    ctr_hybrid_evaluate(r, ctr_final_model(r), &res->eval_ne, &res->auc);
    if (r->rank != 0) { /* only rank 0 takes the curve; the others' last point */
        res->curve_ne[r->nckpt - 1] = res->eval_ne;
        res->curve_auc[r->nckpt - 1] = res->auc;
    }
    t = ctr_now() - t;
    res->avg_ne = res->eval_ne;
    res->avg_auc = res->auc;
    if (avg != NULL && r->rank == 0)
        ctr_hybrid_evaluate(r, avg, &res->avg_ne, &res->avg_auc);
    return t;
}

/* Rank 0 evaluates every checkpoint (the curve), the others their final
 * model only (the table's means): evaluation is slow under emulation. avg,
 * if not NULL, is the average of the ranks' final models, evaluated on rank
 * 0. Returns the seconds it took. */
double ctr_evaluate_run(ctr_run_t *r, const float *avg, ctr_result_t *res)
{
    if (r->hy != NULL)
        return evaluate_hybrid(r, avg, res);
    float *scratch = malloc(2 * r->o.eval_n * sizeof(float));
    if (scratch == NULL)
        ctr_die("out of memory");
    double t = ctr_now();
    for (int i = r->rank == 0 ? 0 : r->nckpt - 1; i < r->nckpt; i++)
        ctr_evaluate(&r->lay, r->ckpt + (size_t)i * r->nparams, r->eval, r->o.eval_n, scratch,
                     &res->curve_ne[i], &res->curve_auc[i]);
    t = ctr_now() - t;
    res->eval_ne = res->curve_ne[r->nckpt - 1];
    res->auc = res->curve_auc[r->nckpt - 1];
    res->avg_ne = res->eval_ne;
    res->avg_auc = res->auc;
    if (avg != NULL && r->rank == 0)
        ctr_evaluate(&r->lay, avg, r->eval, r->o.eval_n, scratch, &res->avg_ne, &res->avg_auc);
    free(scratch);
    return t;
}

void ctr_print_result(const ctr_run_t *r, const ctr_result_t *res, double eval_s, bool averaged)
{
    printf("%-10s rank %d/%d: %llu examples in %.1f s = %.0f EPS, train NE %.4f, eval NE %.4f, "
           "AUC %.4f, %llu syncs (%.1f/min, %.0f ms/round), %llu errors (eval %.1f s)\n",
           r->o.label, r->rank, r->size, (unsigned long long)res->examples, res->train_s,
           res->eps, res->train_ne, res->eval_ne, res->auc, (unsigned long long)res->rounds,
           res->syncs_per_min, res->round_ms, (unsigned long long)res->errors, eval_s);
    if (averaged && r->rank == 0)
        printf("%-10s averaged final model: eval NE %.4f, AUC %.4f\n", r->o.label, res->avg_ne,
               res->avg_auc);
    if (r->hy != NULL)
        ctr_hybrid_print(r, res);
}

/*
 * --model dlrm: the hybrid trainer, ShadowSync's architecture. The 26
 * embedding tables (one sharded table, a range of rows per field) are model
 * parallel: every rank holds a shard, workers read rows with
 * shs_emb_lookup and send row gradients with shs_emb_update, and the
 * holders' apply threads run row-wise Adagrad. The DLRM dense part is the
 * registered region that the sync modes keep in step (S-* in the
 * background, FR-* in the foreground), as the wide model's whole array is.
 *
 * A worker looks the next batch's rows up while it computes the current
 * batch (shs_emb_lookup_start / _wait), then sends that batch's row
 * gradients. With --tables replicated (and in --mode single) the tables are
 * plain memory after the dense part in the model array instead: every rank
 * holds all of them, its workers apply row-wise Adagrad themselves, and the
 * sync modes sync them with the dense part (the everything-replicated
 * trainer, for comparison where the tables fit).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <shadowsync/embedding.h>

#include "trainer.h"

#define INIT_SCALE 0.05f /* rows start uniform in [-0.05, 0.05) */
#define CURVE_EVAL 1000  /* held-out examples of a curve point (lookups are slow on rxe) */
#define ADAGRAD_EPS 1e-8f

/* A worker's buffers, allocated at setup (nothing on the hot path). */
typedef struct hy_buf {
    uint64_t *ids[2];
    float *rows[2];
    float *grads;
} hy_buf_t;

struct ctr_hybrid {
    dlrm_tables_t tb;
    dlrm_example_t *train, *eval;
    size_t ntrain, neval;
    int batch;
    shs_emb_t *emb;          /* sharded tables; NULL when local */
    float *state;            /* local tables: Adagrad's sums per row */
    hy_buf_t buf[CTR_MAX_WORKERS];
    uint64_t *eval_ids;      /* batch x fields, for the evaluation */
    float *eval_rows;        /* batch x fields x dim, for the evaluation */
    float *eval_pairs;       /* 2 x neval */
    _Atomic uint64_t emb_errors;
    double curve_ne[CTR_MAX_CKPT + 1], curve_auc[CTR_MAX_CKPT + 1];
    shs_emb_stats_t st;      /* at the end of the pass */
    double rss_mb;
};

static size_t row_floats(const ctr_run_t *r)
{
    return (size_t)DLRM_FIELDS * (size_t)r->dl.dim;
}

static void draw(ctr_run_t *r, ctr_hybrid_t *hy)
{
    dlrm_teacher_t t;
    dlrm_teacher_init(&t, r->o.seed, r->o.ctr);
    uint64_t lo = r->o.examples * (uint64_t)r->rank / (uint64_t)r->size;
    uint64_t hi = r->o.examples * (uint64_t)(r->rank + 1) / (uint64_t)r->size;
    hy->ntrain = (size_t)(hi - lo);
    hy->neval = (size_t)r->o.eval_n;
    hy->train = malloc((hy->ntrain + 1) * sizeof(dlrm_example_t));
    hy->eval = malloc((hy->neval + 1) * sizeof(dlrm_example_t));
    if (hy->train == NULL || hy->eval == NULL)
        ctr_die("out of memory for %zu examples", hy->ntrain);
    for (size_t i = 0; i < hy->ntrain; i++)
        dlrm_example(&t, lo + i, &hy->train[i]);
    for (size_t i = 0; i < hy->neval; i++)
        dlrm_example(&t, r->o.examples + i, &hy->eval[i]);
}

static float *alloc_floats(size_t n)
{
    float *p = malloc((n > 0 ? n : 1) * sizeof(float));
    if (p == NULL)
        ctr_die("out of memory (%zu floats)", n);
    return p;
}

/* Local tables: the rows from (seed, row) alone, as the library draws
 * them, after the dense part in the model array. */
static void local_tables_init(ctr_run_t *r, float *table)
{
    ctr_hybrid_t *hy = r->hy;
    for (uint64_t row = 0; row < hy->tb.rows; row++) {
        uint64_t s = ctr_h3(r->o.seed, row, 0x726f77696e6974ull);
        for (int j = 0; j < r->dl.dim; j++) {
            s = mix(s);
            table[row * (size_t)r->dl.dim + (size_t)j] = (float)((2 * ctr_unif(s) - 1) * INIT_SCALE);
        }
        hy->state[row] = 0;
    }
}

static bool local(const ctr_run_t *r)
{
    return r->hy->emb == NULL;
}

/* the rows of model array p (local tables) */
static float *table_of(const ctr_run_t *r, float *p)
{
    return p + r->dl.count;
}

void ctr_hybrid_init_model(ctr_run_t *r)
{
    dlrm_dense_init(&r->dl, r->model, r->o.seed, r->o.ctr);
    if (local(r))
        local_tables_init(r, table_of(r, r->model));
}

static void sharded_tables(ctr_run_t *r, ctr_hybrid_t *hy)
{
    shs_emb_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_EMB_PARAM_OPTIMIZER | SHS_EMB_PARAM_LR | SHS_EMB_PARAM_INIT |
                   SHS_EMB_PARAM_MAX_BATCH | SHS_EMB_PARAM_WORKERS;
    p.rows = hy->tb.rows;
    p.dim = (uint32_t)r->dl.dim;
    p.optimizer = SHS_EMB_OPT_ADAGRAD;
    p.lr = r->o.emb_lr;
    p.init_scale = INIT_SCALE;
    p.seed = r->o.seed;
    p.max_batch = (uint32_t)(hy->batch * DLRM_FIELDS);
    p.workers = r->o.workers + 1; /* the last one evaluates */
    if (r->o.emb_cache > 0) {
        p.field_mask |= SHS_EMB_PARAM_CACHE;
        p.cache_rows = r->o.emb_cache;
        p.cache_age = r->o.emb_cache_age;
        p.cache_own = (shs_emb_cache_own_t)r->o.emb_cache_own;
    }
    CTR_CHECK(shs_emb_create(r->ctx, &p, &hy->emb));
}

void ctr_hybrid_setup(ctr_run_t *r, double *draw_s)
{
    ctr_hybrid_t *hy = calloc(1, sizeof(*hy));
    if (hy == NULL)
        ctr_die("out of memory");
    r->hy = hy;
    if (dlrm_layout_init(&r->dl, r->o.shape.dim, r->o.bottom, r->o.top) != 0)
        ctr_die("--dim 1..%d, --bottom and --top 1..%d", DLRM_MAX_DIM, DLRM_MAX_HIDDEN);
    if (dlrm_tables_init(&hy->tb, r->o.rows) != 0)
        ctr_die("--rows %llu: at least %d", (unsigned long long)r->o.rows, DLRM_FIELDS);
    bool sharded = r->ctx != NULL && strcmp(r->o.tables, "sharded") == 0;
    r->nparams = r->dl.count + (sharded ? 0 : (size_t)hy->tb.rows * (size_t)r->dl.dim);
    hy->batch = r->o.batch;
    double t = ctr_now();
    draw(r, hy);
    if (r->o.eval_only != NULL)
        hy->ntrain = 0; /* the held-out set only */
    *draw_s = ctr_now() - t;
    r->ntrain = hy->ntrain;
    if (sharded)
        sharded_tables(r, hy);
    else
        hy->state = alloc_floats((size_t)hy->tb.rows);
    size_t rf = row_floats(r), nb = (size_t)hy->batch;
    for (int w = 0; w < r->o.workers; w++) {
        hy_buf_t *b = &hy->buf[w];
        for (int k = 0; k < 2; k++) {
            b->ids[k] = malloc(nb * DLRM_FIELDS * sizeof(uint64_t));
            b->rows[k] = alloc_floats(nb * rf);
            if (b->ids[k] == NULL)
                ctr_die("out of memory");
        }
        b->grads = alloc_floats(nb * rf);
    }
    hy->eval_ids = malloc(nb * DLRM_FIELDS * sizeof(uint64_t));
    if (hy->eval_ids == NULL)
        ctr_die("out of memory");
    hy->eval_rows = alloc_floats(nb * rf);
    hy->eval_pairs = alloc_floats(2 * hy->neval);
}

/* the table rows of examples [i, i + n * stride) of set ex, stride apart */
static size_t fill_ids(const ctr_hybrid_t *hy, const dlrm_example_t *ex, size_t i, size_t end,
                       size_t stride, uint64_t *ids)
{
    size_t n = 0;
    for (; i < end && n < (size_t)hy->batch; i += stride, n++)
        for (int f = 0; f < DLRM_FIELDS; f++)
            ids[n * DLRM_FIELDS + (size_t)f] = dlrm_row(&hy->tb, f, ex[i].cat[f]);
    return n;
}

static void local_lookup(const ctr_run_t *r, const float *table, const uint64_t *ids, size_t n,
                         float *out)
{
    size_t d = (size_t)r->dl.dim;
    for (size_t k = 0; k < n; k++)
        memcpy(out + k * d, table + ids[k] * d, d * sizeof(float));
}

/* row-wise Adagrad, as the holders apply it (embedding.h), per id */
static void local_update(const ctr_run_t *r, const uint64_t *ids, size_t n, const float *g)
{
    const int d = r->dl.dim;
    const float lr = r->o.emb_lr;
    for (size_t k = 0; k < n; k++) {
        float *w = table_of(r, r->model) + ids[k] * (size_t)d;
        const float *gk = g + k * (size_t)d;
        float sq = 0;
        for (int j = 0; j < d; j++)
            sq += gk[j] * gk[j];
        float *s = &r->hy->state[ids[k]];
        *s += sq / (float)d;
        float step = lr / (sqrtf(*s) + ADAGRAD_EPS);
        for (int j = 0; j < d; j++)
            w[j] -= step * gk[j];
    }
}

static bool emb_ok(ctr_run_t *r, shs_status_t st, const char *what)
{
    if (st == SHS_OK)
        return true;
    if (atomic_fetch_add(&r->hy->emb_errors, 1) == 0)
        fprintf(stderr, "shs-ctr rank %d: %s: %s (counted in emb_errors)\n", r->rank, what,
                shs_status_string(st));
    return false;
}

/* A worker's pass: its examples are i = id, id + W, ...; batches of them
 * looked up one ahead of the compute. */
void ctr_hybrid_work(ctr_worker_t *w)
{
    ctr_run_t *r = w->run;
    ctr_hybrid_t *hy = r->hy;
    hy_buf_t *b = &hy->buf[w->id];
    shs_emb_worker_t *ew = hy->emb != NULL ? shs_emb_worker(hy->emb, w->id) : NULL;
    const size_t W = (size_t)r->o.workers, rf = row_floats(r), nf = DLRM_FIELDS;
    const size_t step = W * (size_t)hy->batch, rows_len = (size_t)hy->batch * rf;
    const float lr0 = r->o.lr, lr1 = r->o.lr * r->o.lr_end;
    const double inv_n = 1.0 / (double)(hy->ntrain > 0 ? hy->ntrain : 1);
    uint64_t syncs = 0;
    size_t start = (size_t)w->id;
    size_t n = fill_ids(hy, hy->train, start, hy->ntrain, W, b->ids[0]);
    bool have = ew == NULL || n == 0 ||
                emb_ok(r, shs_emb_lookup_start(ew, b->ids[0], n * nf), "lookup");
    for (int cur = 0; n > 0; cur ^= 1) {
        if (ew == NULL)
            local_lookup(r, table_of(r, r->model), b->ids[cur], n * nf, b->rows[cur]);
        else if (have)
            have = emb_ok(r, shs_emb_lookup_wait(ew, b->rows[cur], rows_len), "lookup");
        /* the next batch's rows travel while this one is computed */
        size_t next = start + step;
        size_t nn = fill_ids(hy, hy->train, next, hy->ntrain, W, b->ids[cur ^ 1]);
        bool next_have = ew == NULL || nn == 0 ||
                         emb_ok(r, shs_emb_lookup_start(ew, b->ids[cur ^ 1], nn * nf), "lookup");
        size_t i = start;
        for (size_t k = 0; k < n; k++, i += W) {
            const dlrm_example_t *ex = &hy->train[i];
            float lr = lr0 + (lr1 - lr0) * (float)((double)i * inv_n);
            /* a batch whose rows did not come is skipped, but still
             * counted: FR syncs meet at equal counts on every worker */
            if (have) {
                float q = dlrm_step(&r->dl, r->model, ex, b->rows[cur] + k * rf, lr,
                                    b->grads + k * rf);
                w->loss += ctr_logloss(q, ex->label);
                w->pos += ex->label;
                w->trained++;
            }
            ctr_worker_tick(w, &syncs);
        }
        if (ew == NULL)
            local_update(r, b->ids[cur], n * nf, b->grads);
        else if (have)
            (void)emb_ok(r, shs_emb_update(ew, b->ids[cur], n * nf, b->grads), "update");
        start = next;
        n = nn;
        have = next_have;
    }
}

/* After the workers joined: every update this rank sent is applied before
 * the evaluation. */
void ctr_hybrid_end_pass(ctr_run_t *r)
{
    ctr_hybrid_t *hy = r->hy;
    if (hy->emb != NULL)
        for (int w = 0; w < r->o.workers; w++)
            (void)emb_ok(r, shs_emb_flush(shs_emb_worker(hy->emb, w), SHS_TIMEOUT_DEFAULT),
                         "flush");
    /* resident memory of this process now: the shard, the data, the buffers */
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            hy->rss_mb = atof(line + 6) / 1024.0;
    if (f != NULL)
        fclose(f);
}

/* The tables' figures, once every rank has flushed (after the job-wide
 * barrier at the end of the pass: a holder's applied count then includes
 * every rank's updates; without it, as after a failure, it is this
 * moment's). */
void ctr_hybrid_figures(ctr_run_t *r)
{
    if (r->hy->emb != NULL)
        CTR_CHECK(shs_emb_stats(r->hy->emb, &r->hy->st));
}

/* NE and AUC of model p (the dense part, then local tables) with the
 * tables as they are, on the first neval held-out examples, batch by
 * batch through the table's last worker (the evaluator's). */
static void evaluate_on(ctr_run_t *r, const float *p, size_t neval, double *ne_p,
                        double *auc_p)
{
    const float *table = p + r->dl.count; /* local tables: p's own */
    ctr_hybrid_t *hy = r->hy;
    shs_emb_worker_t *ew = hy->emb != NULL ? shs_emb_worker(hy->emb, r->o.workers) : NULL;
    uint64_t *ids = hy->eval_ids;
    const size_t rf = row_floats(r);
    for (size_t i = 0; i < neval;) {
        size_t n = fill_ids(hy, hy->eval, i, neval, 1, ids);
        if (ew == NULL)
            local_lookup(r, table, ids, n * DLRM_FIELDS, hy->eval_rows);
        else if (!emb_ok(r, shs_emb_lookup(ew, ids, n * DLRM_FIELDS, hy->eval_rows,
                                           (size_t)hy->batch * rf), "evaluation lookup")) {
            /* a holder failed or timed out: no score (-1), the run goes on */
            *ne_p = *auc_p = -1;
            return;
        }
        for (size_t k = 0; k < n; k++, i++) {
            hy->eval_pairs[2 * i] = dlrm_predict(&r->dl, p, &hy->eval[i], hy->eval_rows + k * rf);
            hy->eval_pairs[2 * i + 1] = hy->eval[i].label;
        }
    }
    ctr_score(hy->eval_pairs, neval, ne_p, auc_p);
}

void ctr_hybrid_evaluate(ctr_run_t *r, const float *p, double *ne_p, double *auc_p)
{
    evaluate_on(r, p, r->hy->neval, ne_p, auc_p);
}

/* Curve point i: rank 0 scores the live model now (workers still write it:
 * Hogwild reads) on the first CURVE_EVAL held-out examples. */
void ctr_hybrid_curve_point(ctr_run_t *r, int i)
{
    if (r->rank != 0)
        return;
    size_t n = r->hy->neval < CURVE_EVAL ? r->hy->neval : CURVE_EVAL;
    evaluate_on(r, r->model, n, &r->hy->curve_ne[i], &r->hy->curve_auc[i]);
}

void ctr_hybrid_curve(const ctr_run_t *r, ctr_result_t *res)
{
    for (int i = 0; i < r->nckpt; i++) {
        res->curve_ne[i] = r->hy->curve_ne[i];
        res->curve_auc[i] = r->hy->curve_auc[i];
    }
}

/* the training pass's lookups: 26 ids an example (the stats also count
 * the evaluator's) */
static double ids_per_s(const ctr_result_t *res)
{
    return res->train_s > 0 ? (double)res->examples * DLRM_FIELDS / res->train_s : 0;
}

static double per_s(uint64_t n, const ctr_result_t *res)
{
    return res->train_s > 0 ? (double)n / res->train_s : 0;
}

static double table_mb(const ctr_run_t *r)
{
    return (double)r->hy->tb.rows * (double)r->dl.dim * 4.0 / 1e6;
}

void ctr_hybrid_print(const ctr_run_t *r, const ctr_result_t *res)
{
    const ctr_hybrid_t *hy = r->hy;
    const shs_emb_stats_t *s = &hy->st;
    if (hy->emb == NULL) {
        printf("%-10s rank %d: tables %llu rows x %d (%.1f MB) replicated in the model, "
               "RSS %.1f MB\n", r->o.label, r->rank, (unsigned long long)hy->tb.rows,
               r->dl.dim, table_mb(r), hy->rss_mb);
        return;
    }
    uint64_t fetched = s->rows_local + s->rows_read + s->rows_owner;
    printf("%-10s rank %d: tables %llu rows x %d (%.1f MB; shard here %.1f MB), RSS %.1f MB, "
           "%.0f ids looked up/s (%.0f %% of rows remote), %.0f rows updated/s, "
           "%llu rows sent, %llu applied here, %llu emb errors\n",
           r->o.label, r->rank, (unsigned long long)hy->tb.rows, r->dl.dim, table_mb(r),
           (double)s->shard_bytes / 1e6, hy->rss_mb,
           ids_per_s(res),
           fetched > 0 ? 100.0 * (double)(s->rows_read + s->rows_owner) / (double)fetched : 0.0,
           per_s(s->update_rows, res), (unsigned long long)s->update_rows,
           (unsigned long long)s->applied_rows, (unsigned long long)atomic_load(&hy->emb_errors));
    uint64_t asked = s->cache_hits + s->cache_misses + s->cache_expired;
    if (s->cache_rows > 0)
        printf("%-10s rank %d: hot-row cache of %u rows x %d workers (age %u lookups): "
               "%.1f %% of remote rows served from it, mean age of a hit %.2f lookups, "
               "%llu admitted, %llu rejected\n",
               r->o.label, r->rank, s->cache_rows, r->o.workers + 1, s->cache_age,
               asked > 0 ? 100.0 * (double)s->cache_hits / (double)asked : 0.0,
               s->cache_hit_age, (unsigned long long)s->cache_admitted,
               (unsigned long long)s->cache_rejected);
}

void ctr_hybrid_json(const ctr_run_t *r, FILE *f, const ctr_result_t *res)
{
    const ctr_hybrid_t *hy = r->hy;
    const shs_emb_stats_t *s = &hy->st;
    fprintf(f,
            ", \"model\": \"dlrm\", \"tables\": \"%s\", \"table_rows\": %llu, \"dim\": %d, \"table_mb\": %.3f, "
            "\"shard_mb\": %.3f, \"registered_mb\": %.3f, \"rss_mb\": %.1f, "
            "\"lookup_ids\": %llu, \"rows_local\": %llu, \"rows_remote\": %llu, "
            "\"update_rows\": %llu, \"applied_rows\": %llu, \"lookup_ids_per_s\": %.1f, "
            "\"update_rows_per_s\": %.1f, \"emb_errors\": %llu, \"cache_rows\": %u, "
            "\"cache_hits\": %llu, \"cache_misses\": %llu, \"cache_expired\": %llu, "
            "\"cache_hit_age\": %.3f",
            local(r) ? "replicated" : "sharded", (unsigned long long)hy->tb.rows, r->dl.dim,
            table_mb(r), hy->emb != NULL ? (double)s->shard_bytes / 1e6 : table_mb(r),
            (double)s->registered_bytes / 1e6, hy->rss_mb, (unsigned long long)s->ids,
            (unsigned long long)s->rows_local,
            (unsigned long long)(s->rows_read + s->rows_owner),
            (unsigned long long)s->update_rows, (unsigned long long)s->applied_rows,
            ids_per_s(res), per_s(s->update_rows, res),
            (unsigned long long)atomic_load(&hy->emb_errors), s->cache_rows,
            (unsigned long long)s->cache_hits, (unsigned long long)s->cache_misses,
            (unsigned long long)s->cache_expired, s->cache_hit_age);
}

void ctr_hybrid_teardown(ctr_run_t *r)
{
    ctr_hybrid_t *hy = r->hy;
    if (hy->emb != NULL)
        shs_emb_destroy(hy->emb);
    for (int w = 0; w < r->o.workers; w++) {
        for (int k = 0; k < 2; k++) {
            free(hy->buf[w].ids[k]);
            free(hy->buf[w].rows[k]);
        }
        free(hy->buf[w].grads);
    }
    free(hy->eval_ids);
    free(hy->eval_rows);
    free(hy->eval_pairs);
    free(hy->state);
    free(hy->train);
    free(hy->eval);
    free(hy);
    r->hy = NULL;
}

/* ------------------------------------------------- the exported model */

#define MODEL_MAGIC "shs-ctr dlrm model 1"

static void model_path(char *buf, size_t len, const char *dir, const char *name)
{
    if ((size_t)snprintf(buf, len, "%s/%s", dir, name) >= len)
        ctr_die("path too long: %s/%s", dir, name);
}

void ctr_hybrid_save(ctr_run_t *r, const float *avg)
{
    ctr_hybrid_t *hy = r->hy;
    const char *dir = r->o.save;
    if (r->rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        ctr_die("--save %s: %s", dir, strerror(errno));
    if (hy->emb != NULL) { /* the holders write their shards: collective */
        CTR_CHECK(shs_ctx_barrier(r->ctx));
        CTR_CHECK(shs_emb_save(hy->emb, dir));
    }
    if (r->rank != 0)
        return;
    char path[4096];
    model_path(path, sizeof(path), dir, "model.txt");
    FILE *f = fopen(path, "w");
    if (f == NULL)
        ctr_die("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "%s\nrows %llu\ndim %d\nbottom %d\ntop %d\nseed %llu\nctr %.17g\n"
            "examples %llu\neval %llu\ntables %s\nparams %zu\n",
            MODEL_MAGIC, (unsigned long long)r->o.rows, r->dl.dim, r->dl.bh, r->dl.th,
            (unsigned long long)r->o.seed, r->o.ctr, (unsigned long long)r->o.examples,
            (unsigned long long)r->o.eval_n, local(r) ? "replicated" : "sharded", r->nparams);
    fclose(f);
    model_path(path, sizeof(path), dir, "dense.f32");
    f = fopen(path, "wb");
    if (f == NULL || fwrite(avg, sizeof(float), r->nparams, f) != r->nparams || fclose(f) != 0)
        ctr_die("cannot write %s: %s", path, strerror(errno));
    printf("%-10s model saved to %s (%zu floats of dense part%s)\n", r->o.label, dir,
           r->nparams, local(r) ? " and tables" : "; the tables' shards beside them");
}

void ctr_hybrid_read_header(ctr_opts_t *o)
{
    char path[4096], magic[64], tables[32];
    unsigned long long rows, seed, examples, evaln;
    int dim, bottom, top;
    double ctr;
    model_path(path, sizeof(path), o->eval_only, "model.txt");
    FILE *f = fopen(path, "r");
    if (f == NULL)
        ctr_die("--eval-only: cannot read %s: %s", path, strerror(errno));
    int n = fscanf(f, "%63[^\n] rows %llu dim %d bottom %d top %d seed %llu ctr %lf "
                   "examples %llu eval %llu tables %31s",
                   magic, &rows, &dim, &bottom, &top, &seed, &ctr, &examples, &evaln, tables);
    fclose(f);
    if (n != 10 || strcmp(magic, MODEL_MAGIC) != 0)
        ctr_die("--eval-only: %s is not a model saved by shs-ctr --save", path);
    static char tables_kind[32];
    snprintf(tables_kind, sizeof(tables_kind), "%s", tables);
    o->model = "dlrm";
    o->rows = rows;
    o->shape.dim = dim;
    o->bottom = bottom;
    o->top = top;
    o->seed = seed;
    o->ctr = ctr;
    o->examples = examples;
    o->eval_n = evaln;
    o->tables = tables_kind;
}

void ctr_hybrid_eval_only(ctr_run_t *r)
{
    ctr_hybrid_t *hy = r->hy;
    const char *dir = r->o.eval_only;
    char path[4096];
    if (strcmp(r->o.tables, "sharded") == 0 && hy->emb == NULL)
        ctr_die("--eval-only %s: its tables are sharded: evaluate it with ranks "
                "(--mode none, any number of them)", dir);
    model_path(path, sizeof(path), dir, "dense.f32");
    FILE *f = fopen(path, "rb");
    if (f == NULL || fread(r->model, sizeof(float), r->nparams, f) != r->nparams)
        ctr_die("--eval-only: cannot read %zu floats from %s", r->nparams, path);
    fclose(f);
    if (hy->emb != NULL)
        CTR_CHECK(shs_emb_load(hy->emb, dir));
    double t = ctr_now(), ne, auc;
    ctr_hybrid_evaluate(r, r->model, &ne, &auc);
    printf("%-10s rank %d/%d: the model of %s on its %zu held-out examples: eval NE %.6f, "
           "AUC %.6f (%.1f s)\n", r->o.label, r->rank, r->size, dir, hy->neval, ne, auc,
           ctr_now() - t);
    if (r->o.out != NULL) {
        ctr_result_t res;
        memset(&res, 0, sizeof(res));
        res.eval_ne = res.avg_ne = ne;
        res.auc = res.avg_auc = auc;
        r->nckpt = 0;
        ctr_write_json(r, &res);
    }
}

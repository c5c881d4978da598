/* Sharded embedding tables: create, destroy, stats, save and load
 * (embedding.h; the layout of memory in emb.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms/embedding/emb.h"
#include "algorithms/embedding/store.h"
#include "runtime/crypto.h"
#include "runtime/log.h"
#include "transport/services.h"

#define DEFAULT_LR 0.01f
#define DEFAULT_EPS 1e-8f
#define DEFAULT_INIT_SCALE 0.01f
#define DEFAULT_MAX_BATCH 4096u
#define MAX_BATCH_CAP (1u << 20)
#define LOAD_SCRATCH_ROWS 1024

/* What every rank must agree on, gathered at create: the arguments as
 * given (before their checks), so that the same call gives the same bytes
 * on every rank, valid or not. */
typedef struct emb_sig {
    uint64_t rows;
    uint32_t dim;
    uint32_t map, opt, max_batch;
    int32_t workers, nholders, path, slots;
    uint64_t holders_hash;
    uint64_t seed;
    float lr, eps, init_scale;
    uint32_t pad;
} emb_sig_t;

/* the holder set, in the create's agreement and in a save's header */
static uint64_t hash_holders(const int *h, int n)
{
    return shs__hash64(h, (size_t)n * sizeof(int), 0);
}

static shs_status_t resolve(shs_emb_t *e, const shs_emb_params_t *p)
{
    uint64_t m = p->field_mask;
    e->rows = p->rows;
    e->dim = p->dim;
    e->layout.map = (m & SHS_EMB_PARAM_MAP) ? (shs__emb_map_t)p->map : SHS__EMB_MAP_MODULO;
    e->opt = (m & SHS_EMB_PARAM_OPTIMIZER) ? p->optimizer : SHS_EMB_OPT_SGD;
    e->lr = (m & SHS_EMB_PARAM_LR) ? p->lr : DEFAULT_LR;
    e->eps = (m & SHS_EMB_PARAM_EPS) ? p->eps : DEFAULT_EPS;
    e->init_scale = (m & SHS_EMB_PARAM_INIT) ? p->init_scale : DEFAULT_INIT_SCALE;
    e->seed = (m & SHS_EMB_PARAM_INIT) ? p->seed : 0;
    e->max_batch = (m & SHS_EMB_PARAM_MAX_BATCH) ? p->max_batch : DEFAULT_MAX_BATCH;
    e->nworkers = (m & SHS_EMB_PARAM_WORKERS) ? p->workers : 1;
    e->path = (m & SHS_EMB_PARAM_PATH) ? p->path : SHS_EMB_PATH_AUTO;
    int slots = (m & SHS_EMB_PARAM_SLOTS) ? p->slots : 0;
    if (slots != 0)
        e->want_slots = slots; /* -1 is the knob's auto: refused below as a parameter */
    if (slots < 0 || (e->want_slots != -1 && (e->want_slots < SHS_EMB_SLOTS_MIN ||
                                              e->want_slots > SHS_EMB_SLOTS_MAX))) {
        SHS_ERROR("shs_emb_create: slots %d: expected %d..%d, or 0 for SHS_EMB_SLOTS",
                  e->want_slots, SHS_EMB_SLOTS_MIN, SHS_EMB_SLOTS_MAX);
        return SHS_ERR_INVALID_ARG;
    }
    if (e->rows == 0 || e->dim == 0 || e->dim > EMB_MAX_DIM) {
        SHS_ERROR("shs_emb_create: rows %llu, dim %u: rows >= 1 and dim 1..%d",
                  (unsigned long long)e->rows, e->dim, EMB_MAX_DIM);
        return SHS_ERR_INVALID_ARG;
    }
    /* a row's stride is at most dim floats and two words: every shard's
     * byte count must be addressable (a negative count cast to rows is not) */
    if (e->rows > SIZE_MAX / ((size_t)e->dim * sizeof(float) + 2 * sizeof(uint64_t))) {
        SHS_ERROR("shs_emb_create: rows %llu of dim %u: more bytes than this machine can "
                  "address (a negative count?)", (unsigned long long)e->rows, e->dim);
        return SHS_ERR_INVALID_ARG;
    }
    if (e->max_batch == 0 || e->max_batch > MAX_BATCH_CAP || e->nworkers < 1 ||
        e->nworkers > EMB_MAX_WORKERS) {
        SHS_ERROR("shs_emb_create: max_batch %u (1..%u), workers %d (1..%d)", e->max_batch,
                  MAX_BATCH_CAP, e->nworkers, EMB_MAX_WORKERS);
        return SHS_ERR_INVALID_ARG;
    }
    if ((unsigned)e->layout.map > SHS__EMB_MAP_RANGE || (unsigned)e->opt > SHS_EMB_OPT_ADAGRAD ||
        (unsigned)e->path > SHS_EMB_PATH_OWNER || !(e->lr > 0.0f) || !(e->eps > 0.0f) ||
        !(e->init_scale >= 0.0f)) {
        SHS_ERROR("shs_emb_create: unknown map %d, optimizer %d or path %d, or lr %g, eps %g, "
                  "init_scale %g not positive", (int)e->layout.map, (int)e->opt, (int)e->path,
                  (double)e->lr, (double)e->eps, (double)e->init_scale);
        return SHS_ERR_INVALID_ARG;
    }
    return SHS_OK;
}

static shs_status_t resolve_holders(shs_emb_t *e, const shs_emb_params_t *p)
{
    bool given = (p->field_mask & SHS_EMB_PARAM_HOLDERS) != 0;
    int n = given ? p->nholders : e->size;
    e->holder_rank = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    e->holder_of = malloc((size_t)e->size * sizeof(int));
    if (e->holder_rank == NULL || e->holder_of == NULL)
        return SHS_ERR_NO_MEMORY;
    for (int r = 0; r < e->size; r++)
        e->holder_of[r] = -1;
    if (n < 1 || (given && p->holders == NULL)) {
        SHS_ERROR("shs_emb_create: %d holders; at least one", n);
        return SHS_ERR_INVALID_ARG;
    }
    for (int i = 0; i < n; i++) {
        int r = given ? p->holders[i] : i;
        if (r < 0 || r >= e->size || (i > 0 && r <= e->holder_rank[i - 1])) {
            SHS_ERROR("shs_emb_create: holders[%d] = %d: holders are ascending ranks of 0..%d",
                      i, r, e->size - 1);
            return SHS_ERR_INVALID_ARG;
        }
        e->holder_rank[i] = r;
        e->holder_of[r] = i;
    }
    e->me = e->holder_of[e->rank];
    return shs__emb_layout_init(&e->layout, e->rows, (uint32_t)n, e->layout.map);
}

static emb_sig_t sig_of(const shs_emb_t *e, const shs_emb_params_t *p)
{
    bool given = (p->field_mask & SHS_EMB_PARAM_HOLDERS) != 0;
    int n = given ? p->nholders : e->size;
    /* the list as given, read only as far as a valid one can reach */
    uint64_t hh = given && p->holders != NULL && n > 0 && n <= e->size
                      ? hash_holders(p->holders, n)
                      : 0;
    return (emb_sig_t){.rows = e->rows, .dim = e->dim, .map = (uint32_t)e->layout.map,
                       .opt = (uint32_t)e->opt, .max_batch = e->max_batch,
                       .workers = e->nworkers, .nholders = n, .path = (int32_t)e->path,
                       .slots = e->want_slots, .holders_hash = hh, .seed = e->seed,
                       .lr = e->lr, .eps = e->eps, .init_scale = e->init_scale};
}

static void explain_sig(const char *call, int r, const void *theirs, const void *mine)
{
    const emb_sig_t *a = theirs, *z = mine;
    SHS_ERROR("%s: rank %d / this rank: rows %llu/%llu dim %u/%u map %u/%u optimizer %u/%u "
              "max_batch %u/%u workers %d/%d holders %d/%d%s path %d/%d slots %d/%d, or seed, "
              "lr, eps, init_scale", call, r, (unsigned long long)a->rows,
              (unsigned long long)z->rows, a->dim, z->dim, a->map, z->map, a->opt, z->opt,
              a->max_batch, z->max_batch, a->workers, z->workers, a->nholders, z->nholders,
              a->holders_hash != z->holders_hash ? " (other ranks)" : "", a->path, z->path,
              a->slots, z->slots);
}

/* auto: the slots of one (worker, holder) pair fill about this many bytes,
 * 4 to 32 of them. A slot takes a whole max_batch, so small batches get
 * many (their round trip to the apply thread is what stalls a worker) and
 * large ones few (one of them keeps the apply thread busy for long). */
#define AUTO_SLOT_BYTES (512u << 10)
#define AUTO_SLOTS_MIN 4u
#define AUTO_SLOTS_MAX 32u

static void plan_sizes(shs_emb_t *e)
{
    size_t S = e->layout.shards;
    e->row_bytes = (size_t)e->dim * sizeof(float);
    e->check_off = (e->row_bytes + 7u) & ~(size_t)7u;
    e->stride_bytes = e->check_off + sizeof(uint64_t);
    e->stride = e->stride_bytes / sizeof(float);
    e->slot_bytes = (emb_msg_bytes(e, EMB_MSG_UPDATE, e->max_batch) + 63u) & ~(size_t)63u;
    if (e->want_slots > 0) {
        e->slots = (uint32_t)e->want_slots;
    } else {
        size_t fit = AUTO_SLOT_BYTES / e->slot_bytes;
        e->slots = fit < AUTO_SLOTS_MIN   ? AUTO_SLOTS_MIN
                   : fit > AUTO_SLOTS_MAX ? AUTO_SLOTS_MAX
                                          : (uint32_t)fit;
    }
    e->nslots = (size_t)e->size * (size_t)e->nworkers * e->slots;
    e->w_rows_off = 0;
    e->w_send_off = (size_t)e->max_batch * e->stride_bytes;
    e->w_ack_off = e->w_send_off + S * e->slots * e->slot_bytes;
    e->w_answer_off = e->w_ack_off + S * sizeof(uint64_t);
    e->w_bytes = (e->w_answer_off + S * sizeof(uint64_t) + 63u) & ~(size_t)63u;
    e->s_ack_off = 0;
    e->s_answer_stamp_off = (size_t)e->size * (size_t)e->nworkers * sizeof(uint64_t);
    e->s_answer_buf_off = (2 * e->s_answer_stamp_off + 63u) & ~(size_t)63u;
    e->shard_rows = e->me >= 0 ? shs__emb_shard_rows(&e->layout, (uint32_t)e->me) : 0;
}

static shs_status_t alloc_regions(shs_emb_t *e)
{
    bool h = e->me >= 0;
    const unsigned lw = SHS_ACCESS_LOCAL_WRITE;
    size_t srv = e->s_answer_buf_off + EMB_ANSWER_BUFS * (size_t)e->max_batch * e->stride_bytes;
    shs_status_t st;

    if ((st = shs__region_alloc_uneven(e->ctx, e->shard_rows * e->stride_bytes,
                                       lw | SHS_ACCESS_REMOTE_READ, &e->shard)) != SHS_OK)
        return st;
    if ((st = shs__region_alloc_uneven(e->ctx, h ? e->nslots * e->slot_bytes : 0,
                                       lw | SHS_ACCESS_REMOTE_WRITE, &e->inbox)) != SHS_OK)
        return st;
    if ((st = shs_region_alloc(e->ctx, (size_t)e->nworkers * e->w_bytes,
                               lw | SHS_ACCESS_REMOTE_WRITE, &e->wbuf)) != SHS_OK)
        return st;
    if ((st = shs__region_alloc_uneven(e->ctx, h ? srv : 0, lw, &e->srv)) != SHS_OK)
        return st;
    e->data = e->shard_rows > 0 ? shs_region_addr(e->shard) : NULL;
    for (uint64_t k = 0; k < e->shard_rows; k++) {
        float *row = emb_shard_row(e, k);
        shs_emb_init_row(e->seed, shs__emb_global_row(&e->layout, (uint32_t)e->me, k),
                         e->init_scale, row, e->dim);
        emb_row_seal(e, row, k);
    }
    return SHS_OK;
}

/* Everything a rank allocates alone, before the collective steps, so that a
 * failure here reaches every rank through agree() instead of leaving the
 * peers waiting in an exchange this rank never joins. */
static shs_status_t alloc_local(shs_emb_t *e)
{
    size_t S = e->layout.shards, senders = (size_t)e->size * (size_t)e->nworkers;
    e->expect = malloc(senders * sizeof(uint64_t));
    e->answer_pending = calloc(EMB_ANSWER_BUFS, sizeof(bool));
    e->workers = calloc((size_t)e->nworkers, sizeof(*e->workers));
    e->sender_gen = calloc((size_t)e->size, sizeof(unsigned));
    if (e->expect == NULL || e->answer_pending == NULL || e->workers == NULL ||
        e->sender_gen == NULL)
        return SHS_ERR_NO_MEMORY;
    for (size_t i = 0; i < senders; i++)
        e->expect[i] = 1;
    if (e->me >= 0 && e->opt == SHS_EMB_OPT_ADAGRAD) {
        e->state = calloc((size_t)(e->shard_rows > 0 ? e->shard_rows : 1), sizeof(float));
        if (e->state == NULL)
            return SHS_ERR_NO_MEMORY;
    }
    for (int i = 0; i < e->nworkers; i++) {
        shs_emb_worker_t *w = &e->workers[i];
        w->emb = e;
        w->index = i;
        shs_status_t st = shs__emb_plan_init(&w->plan, &e->layout, e->max_batch);
        if (st == SHS_OK)
            st = shs__emb_plan_init(&w->uplan, &e->layout, e->max_batch);
        if (st != SHS_OK)
            return st;
        w->grads = malloc((size_t)e->max_batch * e->row_bytes);
        w->torn = malloc((size_t)e->max_batch * sizeof(uint32_t));
        w->iov = malloc((size_t)e->max_batch * sizeof(*w->iov));
        w->sent = calloc(S, sizeof(uint64_t));
        w->answer_want = calloc(S, sizeof(uint64_t));
        w->via = calloc(S, 1);
        w->gone = calloc(S, sizeof(bool));
        w->holder_gen = calloc(S, sizeof(unsigned));
        w->lost = calloc(S, sizeof(bool));
        if (w->grads == NULL || w->torn == NULL || w->iov == NULL || w->sent == NULL || w->answer_want == NULL || w->via == NULL ||
            w->gone == NULL || w->holder_gen == NULL || w->lost == NULL)
            return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

/* Bytes of memory the kernel says it can still give (MemAvailable); 0
 * when unknown. */
static uint64_t mem_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    char line[128];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}

/* The hot-row cache's size and staleness bound (embedding.h, Cache): the
 * params over the knobs; a cache the machine cannot hold twice over is
 * refused. Local to each rank: ranks may differ. */
static shs_status_t resolve_cache(shs_emb_t *e, const shs_emb_params_t *p,
                                  const shs__config_t *cfg)
{
    bool set = (p->field_mask & SHS_EMB_PARAM_CACHE) != 0;
    e->cache_rows = set ? p->cache_rows : (uint32_t)cfg->emb_cache_rows;
    e->cache_age = set && p->cache_age != 0 ? p->cache_age : (uint32_t)cfg->emb_cache_age;
    if (set && p->cache_own != SHS_EMB_CACHE_OWN_KNOB)
        e->cache_keep_own = p->cache_own == SHS_EMB_CACHE_OWN_KEEP;
    if (set && (unsigned)p->cache_own > SHS_EMB_CACHE_OWN_KEEP) {
        SHS_ERROR("shs_emb_create: cache_own %d: expected SHS_EMB_CACHE_OWN_KNOB (0), "
                  "_REFETCH (1) or _KEEP (2)", (int)p->cache_own);
        return SHS_ERR_INVALID_ARG;
    }
    if (e->cache_rows > (1u << 28) || e->cache_age < 1 || e->cache_age > 1000000) {
        SHS_ERROR("shs_emb_create: cache_rows %u (0..%u, SHS_EMB_CACHE_ROWS), cache_age %u "
                  "(1..1000000 lookups, or 0 for SHS_EMB_CACHE_AGE)", e->cache_rows, 1u << 28,
                  e->cache_age);
        return SHS_ERR_CONFIG;
    }
    if (e->cache_rows == 0)
        return SHS_OK;
    uint64_t need = (uint64_t)e->nworkers * shs__emb_cache_bytes(e->cache_rows, e->stride);
    uint64_t avail = mem_available_bytes();
    if (avail != 0 && need > avail / 2) {
        SHS_ERROR("shs_emb_create: a hot-row cache of %u rows x %d worker(s) needs %.1f MiB; "
                  "the machine has %.1f MiB available, and a cache may take at most half of "
                  "it (SHS_EMB_CACHE_ROWS, cache_rows)", e->cache_rows, e->nworkers,
                  (double)need / 1048576.0, (double)avail / 1048576.0);
        return SHS_ERR_CONFIG;
    }
    return SHS_OK;
}

/* Each worker's cache and scratch, and the rank's update epochs. */
static shs_status_t alloc_caches(shs_emb_t *e)
{
    if (e->cache_rows == 0)
        return SHS_OK;
    if (!e->cache_keep_own) { /* keep: no epochs, own updates leave cached rows be */
        uint32_t n = 1024;
        while (n < 4u * e->cache_rows && n < (1u << 24))
            n <<= 1;
        e->epoch = calloc(n, sizeof(*e->epoch));
        e->last_upd = calloc(n, sizeof(*e->last_upd));
        if (e->epoch == NULL || e->last_upd == NULL)
            return SHS_ERR_NO_MEMORY;
        e->epoch_mask = n - 1;
    }
    for (int i = 0; i < e->nworkers; i++) {
        shs_emb_worker_t *w = &e->workers[i];
        shs_status_t st = shs__emb_cache_init(&w->cache, e->cache_rows, e->stride,
                                              e->cache_age);
        if (st != SHS_OK)
            return st;
        w->hit = malloc(e->max_batch);
        w->hit_src = malloc((size_t)e->max_batch * sizeof(*w->hit_src));
        w->fetch_epoch = malloc((size_t)e->max_batch * sizeof(*w->fetch_epoch));
        if (w->hit == NULL || w->hit_src == NULL || w->fetch_epoch == NULL)
            return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

static shs_status_t make_endpoints(shs_emb_t *e)
{
    /* endpoints pair by creation order on every rank: the apply thread's
     * first, then one per worker */
    shs_status_t st = shs_ctx_endpoint_create(e->ctx, &e->apply_ep);
    for (int i = 0; st == SHS_OK && i < e->nworkers; i++)
        st = shs_ctx_endpoint_create(e->ctx, &e->workers[i].ep);
    if (st != SHS_OK)
        return st;
    /* the incarnations the sequences start with (emb.h, Rejoins) */
    for (int r = 0; r < e->size; r++)
        if (r != e->rank)
            e->sender_gen[r] = shs__ctx_peer_incarnation(e->apply_ep, r);
    for (int i = 0; i < e->nworkers; i++)
        for (uint32_t o = 0; o < e->layout.shards; o++)
            if ((int)o != e->me)
                e->workers[i].holder_gen[o] =
                    shs__ctx_peer_incarnation(e->workers[i].ep, e->holder_rank[o]);
    return SHS_OK;
}

static shs_status_t load_stage(shs_emb_t *e, const char *dir, float **rows_p, float **state_p,
                               shs__emb_fault_t *fault);

/* The staged rows (and Adagrad state) become the shard's. */
static void load_commit(shs_emb_t *e, const float *rows, const float *state)
{
    for (uint64_t k = 0; k < e->shard_rows; k++) {
        float *row = emb_shard_row(e, k);
        memcpy(row, rows + k * e->dim, e->row_bytes);
        emb_row_seal(e, row, k);
    }
    if (state != NULL)
        memcpy(e->state, state, (size_t)e->shard_rows * sizeof(float));
}

/* A rank that rejoined a running job: its shard from the program's last
 * save, before any endpoint lets a peer read or update it; its workers
 * wait for each holder to take them back (emb.h, Rejoins). */
static shs_status_t rejoin_prepare(shs_emb_t *e, const shs_emb_params_t *p)
{
    for (int i = 0; i < e->nworkers; i++)
        for (uint32_t o = 0; o < e->layout.shards; o++)
            if ((int)o != e->me)
                atomic_store(emb_ack_word(e, i, (int)o), EMB_ACK_UNREADY);
    if (e->me < 0 || e->shard_rows == 0)
        return SHS_OK;
    const char *dir = (p->field_mask & SHS_EMB_PARAM_REJOIN_DIR) ? p->rejoin_dir : NULL;
    if (dir == NULL) {
        SHS_WARN("shs_emb_create: rank %d rejoined without a save to load (rejoin_dir): its "
                 "shard of %llu rows starts from its initial values; the job's updates to "
                 "them are lost", e->rank, (unsigned long long)e->shard_rows);
        return SHS_OK;
    }
    float *rows = NULL, *state = NULL;
    shs__emb_fault_t fault;
    shs_status_t st = load_stage(e, dir, &rows, &state, &fault);
    if (st == SHS_OK) {
        load_commit(e, rows, state);
        SHS_INFO("shs_emb_create: rank %d rejoined: its shard of %llu rows loaded from %s",
                 e->rank, (unsigned long long)e->shard_rows, dir);
    } else {
        SHS_ERROR("shs_emb_create: rank %d rejoined and cannot load its shard from %s (%s); "
                  "the table is not made", e->rank, dir, shs_status_string(st));
    }
    free(rows);
    free(state);
    return st;
}

static void free_table(shs_emb_t *e)
{
    for (int i = 0; e->workers != NULL && i < e->nworkers; i++) {
        shs_emb_worker_t *w = &e->workers[i];
        shs_ctx_destroy(w->ep);
        shs__emb_plan_fini(&w->plan);
        shs__emb_plan_fini(&w->uplan);
        free(w->gone);
        free(w->holder_gen);
        free(w->lost);
        free(w->grads);
        free(w->torn);
        free(w->iov);
        shs__emb_cache_fini(&w->cache);
        free(w->hit);
        free(w->hit_src);
        free(w->fetch_epoch);
        free(w->sent);
        free(w->answer_want);
        free(w->via);
    }
    free(e->workers);
    shs_ctx_destroy(e->apply_ep);
    shs_region_destroy(e->srv);
    shs_region_destroy(e->wbuf);
    shs_region_destroy(e->inbox);
    shs_region_destroy(e->shard);
    free(e->state);
    free(e->epoch);
    free(e->last_upd);
    free(e->expect);
    free(e->sender_gen);
    free(e->answer_pending);
    free(e->holder_rank);
    free(e->holder_of);
    free(e);
}

shs_status_t shs_emb_create(shs_ctx_t *ctx, const shs_emb_params_t *params, shs_emb_t **emb_p)
{
    if (ctx == NULL || params == NULL || emb_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_emb_create"))
        return SHS_ERR_BAD_STATE;
    shs_emb_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return SHS_ERR_NO_MEMORY;
    e->ctx = ctx;
    e->rank = shs_ctx_rank(ctx);
    e->size = shs_ctx_size(ctx);
    const shs__config_t *cfg = shs__ctx_config(ctx);
    e->op_timeout_ms = cfg->op_timeout_ms;
    e->spin = cfg->poll_spin < 0 ? 0u : (unsigned)cfg->poll_spin;
    /* auto: measured at the end of create; until then the Soft-RoCE figure */
    e->owner_reads_auto = cfg->emb_owner_reads < 0;
    e->owner_reads = e->owner_reads_auto ? 3u : (uint32_t)cfg->emb_owner_reads;
    e->apply_nap_ns = (long)cfg->emb_apply_nap_us * 1000L;
    e->want_slots = cfg->emb_slots; /* -1: auto */
    e->read_tries = (unsigned)cfg->emb_read_tries;
    e->cache_keep_own = cfg->emb_cache_own == 1;
    atomic_init(&e->apply_stop, false);
    /* a rank that rejoined, making the job's tables again: the job's ranks
     * are not in this call, so nothing below is collective (docs/failures.md) */
    e->rejoined = shs__ctx_replaying(ctx);

    /* every check is local, before anything is sent: the agreement then
     * fails every rank alike (shs__ctx_agree_args) */
    shs_status_t st = resolve(e, params);
    emb_sig_t sig = sig_of(e, params);
    if (st == SHS_OK)
        st = resolve_holders(e, params);
    if (st == SHS_OK) {
        plan_sizes(e);
        st = resolve_cache(e, params, cfg);
    }
    if (st == SHS_OK)
        st = alloc_local(e);
    if (st == SHS_OK)
        st = alloc_caches(e);
    if (!e->rejoined)
        st = shs__ctx_agree_args(ctx, "shs_emb_create", st, &sig, sizeof(sig), explain_sig);
    if (st != SHS_OK)
        goto err_free;
    if ((st = alloc_regions(e)) != SHS_OK ||
        (e->rejoined && (st = rejoin_prepare(e, params)) != SHS_OK) ||
        (st = make_endpoints(e)) != SHS_OK)
        goto err_free;
    if (e->me >= 0 && (st = shs__emb_apply_start(e)) != SHS_OK)
        goto err_free;
    /* nobody sends before every holder's apply thread runs (a rejoiner's
     * peers run theirs; what it sends waits in their inboxes until then) */
    if (!e->rejoined &&
        ((st = shs_ctx_barrier(ctx)) != SHS_OK || (st = shs__emb_calibrate(e)) != SHS_OK))
        goto err_stop;
    SHS_INFO("embedding table: %llu rows x %u over %u holder(s), %llu rows here, %d worker(s)",
             (unsigned long long)e->rows, e->dim, e->layout.shards,
             (unsigned long long)e->shard_rows, e->nworkers);
    *emb_p = e;
    return SHS_OK;

err_stop:
    shs__emb_apply_stop(e);
err_free:
    free_table(e);
    return st;
}

void shs_emb_destroy(shs_emb_t *e)
{
    if (e == NULL)
        return;
    if (shs__ctx_refused(e->ctx, "shs_emb_destroy"))
        return; /* logged: a forked child releases nothing */
    /* no peer writes into this rank's inboxes after everyone is here */
    shs_status_t st = shs_ctx_barrier(e->ctx);
    if (st != SHS_OK)
        SHS_WARN("shs_emb_destroy: barrier: %s; releasing anyway", shs_status_string(st));
    shs__emb_apply_stop(e);
    free_table(e);
}

shs_emb_worker_t *shs_emb_worker(shs_emb_t *e, int i)
{
    return e != NULL && i >= 0 && i < e->nworkers ? &e->workers[i] : NULL;
}

static uint64_t rd(const _Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

shs_status_t shs_emb_stats(const shs_emb_t *e, shs_emb_stats_t *s)
{
    if (e == NULL || s == NULL)
        return SHS_ERR_INVALID_ARG;
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < e->nworkers; i++) {
        const emb_counters_t *c = &e->workers[i].c;
        s->lookups += rd(&c->lookups);
        s->ids += rd(&c->ids);
        s->dup_ids += rd(&c->dup_ids);
        s->rows_local += rd(&c->rows_local);
        s->rows_read += rd(&c->rows_read);
        s->rows_owner += rd(&c->rows_owner);
        s->reads += rd(&c->reads);
        s->bytes_fetched += rd(&c->bytes_fetched);
        s->updates += rd(&c->updates);
        s->update_rows += rd(&c->update_rows);
        s->slot_waits += rd(&c->slot_waits);
        s->slot_wait_ms += (double)rd(&c->slot_wait_ns) * 1e-6;
        s->peer_failures += rd(&c->peer_failures);
        s->torn_retries += rd(&c->torn_retries);
        s->torn_fallbacks += rd(&c->torn_fallbacks);
        s->cache_hits += rd(&c->cache_hits);
        s->cache_misses += rd(&c->cache_misses);
        s->cache_expired += rd(&c->cache_expired);
        s->cache_admitted += rd(&c->cache_admitted);
        s->cache_rejected += rd(&c->cache_rejected);
        s->cache_hit_age += (double)rd(&c->cache_hit_age_sum);
        s->cache_bytes += shs__emb_cache_bytes(e->cache_rows, e->stride);
    }
    s->cache_hit_age = s->cache_hits > 0 ? s->cache_hit_age / (double)s->cache_hits : 0.0;
    s->cache_rows = e->workers != NULL ? e->workers[0].cache.capacity : 0;
    s->cache_age = e->cache_age;
    s->applied_batches = rd(&e->applied_batches);
    s->applied_rows = rd(&e->applied_rows);
    s->served_lookups = rd(&e->served_lookups);
    s->served_rows = rd(&e->served_rows);
    s->apply_lag_max = rd(&e->lag_max);
    s->apply_busy_ms = (double)rd(&e->busy_ns) * 1e-6;
    s->shard_rows = e->shard_rows;
    s->slots = e->slots;
    s->owner_reads = e->owner_reads;
    s->shard_bytes = e->shard_rows * e->stride_bytes;
    s->state_bytes = e->state != NULL ? e->shard_rows * sizeof(float) : 0;
    s->registered_bytes = shs_region_len(e->shard) + shs_region_len(e->inbox) +
                          shs_region_len(e->wbuf) + shs_region_len(e->srv);
    return SHS_OK;
}

/* What a rank brings to the save's and the load's agreement: its status,
 * the save id it drew (save) or why it refused the save (load). */
typedef struct emb_vote {
    int32_t status;
    uint32_t reserved;
    uint64_t save_id[2];
    shs__emb_fault_t fault;
} emb_vote_t;

_Static_assert(sizeof(emb_vote_t) <= 56, "a vote fits a living allgather");

/* The living ranks' votes (over the mesh once it is up: a rejoined rank
 * takes part, rank 0's death does not stop it). *bad_p: the first rank
 * whose status is not SHS_OK (logged), or a holder that is not there
 * (failed); -1 when none. *pick_p: rank *bad_p's vote (a missing holder's
 * says SHS_ERR_PEER_FAILED), or with none the lowest living rank's, so that
 * every rank takes the same. */
static shs_status_t agree_living(shs_emb_t *e, const emb_vote_t *mine, emb_vote_t *pick_p,
                                 int *bad_p)
{
    emb_vote_t *all = calloc((size_t)e->size, sizeof(*all));
    bool *present = calloc((size_t)e->size, sizeof(bool));
    shs_status_t st = all != NULL && present != NULL
                          ? shs__ctx_living_allgather(e->ctx, mine, sizeof(*mine), all, present)
                          : SHS_ERR_NO_MEMORY;
    int lead = -1;
    *bad_p = -1;
    for (int r = 0; st == SHS_OK && r < e->size && *bad_p < 0; r++) {
        if (!present[r] && e->holder_of[r] >= 0) {
            SHS_ERROR("embedding: holder rank %d is not among the living ranks", r);
            *bad_p = r;
            *pick_p = (emb_vote_t){.status = SHS_ERR_PEER_FAILED};
        } else if (present[r] && all[r].status != SHS_OK) {
            if (r != e->rank)
                SHS_ERROR("embedding: rank %d: %s", r,
                          shs_status_string((shs_status_t)all[r].status));
            *bad_p = r;
            *pick_p = all[r];
        } else if (present[r] && lead < 0) {
            lead = r;
        }
    }
    if (st == SHS_OK && *bad_p < 0)
        *pick_p = all[lead >= 0 ? lead : e->rank];
    free(all);
    free(present);
    return st;
}

shs_status_t shs_emb_save(shs_emb_t *e, const char *dir)
{
    if (e == NULL || dir == NULL)
        return SHS_ERR_INVALID_ARG;
    /* every rank is here, its workers flushed: no update still on its way */
    shs_status_t st = shs_ctx_barrier(e->ctx);
    if (st != SHS_OK)
        return st;
    /* a save without a dead holder's shard cannot be loaded (or is taken
     * for whole): the living ranks agree, and none writes unless every
     * holder is alive and here */
    emb_vote_t mine = {.status = SHS_OK}, pick;
    for (uint32_t o = 0; o < e->layout.shards && mine.status == SHS_OK; o++) {
        int r = e->holder_rank[o];
        if (r != e->rank && shs_ctx_peer_status(e->ctx, r, NULL) != SHS_OK) {
            SHS_ERROR("shs_emb_save: holder %u (rank %d) has failed: its shard cannot be "
                      "saved; no rank writes", o, r);
            mine.status = SHS_ERR_PEER_FAILED;
        }
    }
    /* one save id for every file of this save: the lowest living rank's */
    if (mine.status == SHS_OK)
        mine.status = shs__random(mine.save_id, sizeof(mine.save_id));
    int bad = -1;
    st = agree_living(e, &mine, &pick, &bad);
    if (st == SHS_OK && bad >= 0)
        st = bad == e->rank ? (shs_status_t)mine.status : SHS_ERR_PEER_FAILED;
    if (st == SHS_OK && e->me >= 0) {
        shs__emb_save_info_t info = {
            .holders_hash = hash_holders(e->holder_rank, (int)e->layout.shards),
            .optimizer = (uint32_t)e->opt};
        memcpy(info.id, pick.save_id, sizeof(info.id));
        st = shs__emb_shard_save(dir, &e->layout, (uint32_t)e->me, e->dim, e->stride, e->data,
                                  e->state, &info);
    }
    shs_status_t bs = shs_ctx_barrier(e->ctx);
    return st != SHS_OK ? st : bs;
}

/* Read this holder's part of the save into staging copies. */
static shs_status_t load_stage(shs_emb_t *e, const char *dir, float **rows_p, float **state_p,
                               shs__emb_fault_t *fault)
{
    size_t n = (size_t)e->shard_rows;
    float *rows = malloc((n > 0 ? n : 1) * e->row_bytes);
    float *state = e->state != NULL ? malloc((n > 0 ? n : 1) * sizeof(float)) : NULL;
    float *scratch = malloc((size_t)LOAD_SCRATCH_ROWS * e->row_bytes);
    shs_status_t st = SHS_ERR_NO_MEMORY;
    *fault = (shs__emb_fault_t){.cause = SHS__EMB_FAULT_MEMORY};
    if (rows != NULL && scratch != NULL && (e->state == NULL || state != NULL))
        st = shs__emb_shard_load(dir, &e->layout, (uint32_t)e->me, e->dim, rows, state,
                                 scratch, LOAD_SCRATCH_ROWS, fault);
    else
        SHS_ERROR("shs_emb_load: cannot allocate the staging copy of %llu rows",
                  (unsigned long long)n);
    free(scratch);
    *rows_p = rows;
    *state_p = state;
    return st;
}

shs_status_t shs_emb_load(shs_emb_t *e, const char *dir)
{
    if (e == NULL || dir == NULL)
        return SHS_ERR_INVALID_ARG;
    /* every rank is here, its workers flushed: the apply threads are idle */
    shs_status_t st = shs_ctx_barrier(e->ctx);
    if (st != SHS_OK)
        return st;
    float *rows = NULL, *state = NULL;
    emb_vote_t mine = {.status = SHS_OK}, pick;
    if (e->me >= 0 && e->shard_rows > 0)
        mine.status = load_stage(e, dir, &rows, &state, &mine.fault);
    /* every holder commits or none does: a table half old, half loaded
     * would be a silent wrong result. And every rank refuses in the same
     * words, those of the first rank that refused, holder or not. */
    int bad = -1;
    st = agree_living(e, &mine, &pick, &bad);
    if (st == SHS_OK && bad >= 0) {
        char why[SHS__EMB_PATH_MAX + 256];
        if (pick.fault.cause != SHS__EMB_FAULT_NONE)
            shs__emb_fault_format(&pick.fault, dir, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "%s", shs_status_string((shs_status_t)pick.status));
        SHS_ERROR("shs_emb_load: rank %d refused %s: %s; no rank changed its rows", bad, dir,
                  why);
        st = (shs_status_t)pick.status;
    }
    if (st == SHS_OK && rows != NULL)
        load_commit(e, rows, state);
    if (st == SHS_OK) /* every worker's cache holds rows of before */
        atomic_fetch_add(&e->cache_gen, 1);
    free(rows);
    free(state);
    shs_status_t bs = shs_ctx_barrier(e->ctx);
    return st != SHS_OK ? st : bs;
}

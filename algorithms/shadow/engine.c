/*
 * Creating and destroying a shadow engine: its parameters (the one place
 * that reads the knobs), its data path, its per-peer state and the regions
 * every rank registers in the same order.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/shadow/engine.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "transport/services.h"

#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))
/* SHS_SHADOW_CHUNK's bound; a larger chunk_bytes is a negative count cast */
#define CHUNK_MAX ((size_t)1 << 30)

/* The parameters: each field from params when its bit is set, else from the
 * context's knobs (resolved once at context create) or the default. */
static void resolve_params(shs_shadow_t *sh, const shs_shadow_params_t *p, size_t *chunk_bytes_p)
{
    const shs__config_t *knobs = shs__ctx_config(sh->ctx);
    shs__shadow_cfg_t *c = &sh->cfg;
    uint64_t m = p != NULL ? p->field_mask : 0;

    c->algo = (m & SHS_SHADOW_PARAM_ALGORITHM) ? p->algorithm : SHS_SHADOW_MA;
    memset(&c->sched, 0, sizeof(c->sched));
    c->sched.kind = SHS_SCHED_ALL;
    if (m & SHS_SHADOW_PARAM_SCHEDULE)
        c->sched = p->schedule;
    c->path = (m & SHS_SHADOW_PARAM_PATH) ? p->path : SHS_SHADOW_PATH_PULL;
    c->min_interval_us = (m & SHS_SHADOW_PARAM_MIN_INTERVAL) ? p->min_interval_us : 0;
    snprintf(c->pin, sizeof(c->pin), "%s",
             (m & SHS_SHADOW_PARAM_PIN_CPUS) && p->pin_cpus != NULL ? p->pin_cpus
                                                                     : knobs->shadow_pin);
    /* BMUF: the paper's defaults in the foreground; on the shadow thread,
     * where a result reaches the workers a round late, no look-ahead and a
     * block momentum of at most 0.5 (rules.h gives the figures) */
    c->bmuf_fg = shs__bmuf_defaults(sh->size);
    c->bmuf_bg = c->bmuf_fg;
    c->bmuf_bg.nesterov = false;
    if (c->bmuf_bg.eta > SHS__BMUF_BG_ETA_MAX)
        c->bmuf_bg.eta = SHS__BMUF_BG_ETA_MAX;
    if (m & SHS_SHADOW_PARAM_BMUF_ETA)
        c->bmuf_fg.eta = c->bmuf_bg.eta = p->bmuf_eta;
    if (m & SHS_SHADOW_PARAM_BMUF_ZETA)
        c->bmuf_fg.zeta = c->bmuf_bg.zeta = p->bmuf_zeta;
    if (m & SHS_SHADOW_PARAM_BMUF_NESTEROV)
        c->bmuf_fg.nesterov = c->bmuf_bg.nesterov = p->bmuf_nesterov != 0;
    sh->bmuf = c->bmuf_fg;
    c->alpha = (m & SHS_SHADOW_PARAM_EASGD_ALPHA) ? p->easgd_alpha
                                                  : shs__easgd_default_alpha(sh->size);
    c->wait_ms = (m & SHS_SHADOW_PARAM_WAIT_TIMEOUT) ? p->wait_timeout_ms : knobs->shadow_wait_ms;
    *chunk_bytes_p = (m & SHS_SHADOW_PARAM_CHUNK) ? p->chunk_bytes : knobs->shadow_chunk;
    c->nap_pct = knobs->shadow_nap;
    c->straggler_ms = knobs->shadow_straggler_ms;
    c->wire = (m & SHS_SHADOW_PARAM_WIRE) ? p->wire : knobs->shadow_wire;
    c->want_channel = knobs->shadow_channel; /* -1: allocated (EASGD only uses one) */
}

/* Check the resolved parameters; size the chunks and the largest group. */
static shs_status_t check_params(shs_shadow_t *sh, size_t chunk_bytes)
{
    shs__shadow_cfg_t *c = &sh->cfg;
    if ((unsigned)c->algo > SHS_SHADOW_EASGD || (unsigned)c->path > SHS_SHADOW_PATH_LIVE ||
        c->wait_ms <= 0 || chunk_bytes < sizeof(float) || chunk_bytes > CHUNK_MAX ||
        c->min_interval_us > INT32_MAX || !(sh->bmuf.eta >= 0.0f) ||
        !(sh->bmuf.eta < 1.0f) || !(sh->bmuf.zeta > 0.0f) || !(c->alpha > 0.0f) ||
        !(c->alpha <= 1.0f)) {
        SHS_ERROR("shadow: invalid parameters (algorithm %d, path %d, wait %d ms, chunk %zu "
                  "bytes (4..1 GiB), min interval %u us, eta %g, zeta %g, alpha %g)",
                  (int)c->algo, (int)c->path, c->wait_ms, chunk_bytes, c->min_interval_us,
                  (double)sh->bmuf.eta, (double)sh->bmuf.zeta, (double)c->alpha);
        return SHS_ERR_INVALID_ARG;
    }
    if (!shs__pin_spec_valid(c->pin)) {
        SHS_ERROR("shadow: pin_cpus \"%s\": expected auto, none or a CPU list such as 3, 2-3 "
                  "or 0,2-3", c->pin);
        return SHS_ERR_CONFIG;
    }
    if (c->wire != SHS_WIRE_NATIVE && c->wire != SHS_WIRE_BF16) {
        SHS_ERROR("shadow: wire %d: expected SHS_WIRE_NATIVE (0) or SHS_WIRE_BF16 (1)",
                  c->wire);
        return SHS_ERR_INVALID_ARG;
    }
    if (c->wire == SHS_WIRE_BF16 &&
        (c->algo == SHS_SHADOW_EASGD || c->path != SHS_SHADOW_PATH_PULL)) {
        SHS_ERROR("shadow: bf16 snapshots (SHS_SHADOW_WIRE) work with MA and BMUF on the "
                  "pull path; this engine is %s on the %s path",
                  c->algo == SHS_SHADOW_EASGD ? "EASGD" : c->algo == SHS_SHADOW_BMUF ? "BMUF"
                                                                                  : "MA",
                  c->path == SHS_SHADOW_PATH_RING ? "ring" : "pull");
        return SHS_ERR_UNSUPPORTED;
    }
    if (c->path == SHS_SHADOW_PATH_LIVE) {
        SHS_ERROR("shadow: the live path is refused: an RDMA READ of a model that Hogwild "
                  "workers are writing can return floats torn within their bytes, and "
                  "nothing in the model can tell; use the pull path (snapshots under a "
                  "sequence lock) or the ring");
        return SHS_ERR_UNSUPPORTED;
    }
    if (c->algo == SHS_SHADOW_EASGD && c->path != SHS_SHADOW_PATH_PULL) {
        SHS_ERROR("shadow: easgd reads and writes the center one-sidedly: it needs the pull "
                  "data path");
        return SHS_ERR_UNSUPPORTED;
    }
    /* the largest group: every round's group must fit the receive chunks */
    shs_group_t g;
    if ((unsigned)c->sched.kind > SHS_SCHED_RANDOM) {
        SHS_ERROR("shadow: unknown schedule kind %d (expected SHS_SCHED_ALL, _HYPERCUBE, "
                  "_GENERAL or _RANDOM)", (int)c->sched.kind);
        return SHS_ERR_INVALID_ARG;
    }
    if (shs_schedule_group(&c->sched, sh->size, sh->rank, 0, &g) != SHS_OK) {
        SHS_ERROR("shadow: schedule kind %d with group size %d does not fit %d ranks",
                  (int)c->sched.kind, c->sched.group_size, sh->size);
        return SHS_ERR_INVALID_ARG;
    }
    c->gmax = c->sched.kind == SHS_SCHED_ALL  ? sh->size
              : c->sched.group_size < sh->size ? c->sched.group_size
                                               : sh->size;
    if (g.size > c->gmax)
        c->gmax = g.size;
    c->chunk = chunk_bytes / sizeof(float);
    if (c->chunk > sh->n)
        c->chunk = sh->n;
    return SHS_OK;
}

static const shs__path_ops_t *choose_path(const shs__shadow_cfg_t *c)
{
    if (c->algo == SHS_SHADOW_EASGD)
        return &shs__path_easgd;
    static const shs__path_ops_t *const by_path[] = {
        [SHS_SHADOW_PATH_PULL] = &shs__path_pull,
        [SHS_SHADOW_PATH_RING] = &shs__path_ring,
    };
    return by_path[c->path];
}

static void free_peers(shs_shadow_t *sh)
{
    free(sh->published_seen);
    free(sh->seen_seq);
    free(sh->state);
    free(sh->warned);
    free(sh->done_seen);
    free(sh->late);
    free(sh->told_seen);
    free((void *)sh->st.last_read_ns);
    free((void *)sh->st.peer_skips);
    free(sh->wg);
    free(sh->D);
    free(sh->snap);
    free(sh->dec);
}

/* Per-peer state and BMUF's vectors (private memory). */
static shs_status_t alloc_peers(shs_shadow_t *sh)
{
    size_t np = (size_t)sh->size;
    sh->published_seen = calloc(np, sizeof(uint64_t));
    sh->seen_seq = calloc(np, sizeof(uint64_t));
    sh->state = calloc(np, 1);
    sh->warned = calloc(np, sizeof(bool));
    sh->done_seen = calloc(np, sizeof(uint64_t));
    sh->late = calloc(np, sizeof(bool));
    sh->told_seen = calloc(np, sizeof(uint64_t));
    sh->st.last_read_ns = calloc(np, sizeof(uint64_t));
    sh->st.peer_skips = calloc(np, sizeof(uint64_t));
    if (sh->published_seen == NULL || sh->seen_seq == NULL || sh->state == NULL ||
        sh->warned == NULL || sh->st.last_read_ns == NULL || sh->st.peer_skips == NULL ||
        sh->done_seen == NULL || sh->late == NULL || sh->told_seen == NULL)
        return SHS_ERR_NO_MEMORY;
    if (sh->cfg.algo == SHS_SHADOW_BMUF) {
        sh->wg = malloc(sh->n * sizeof(float));
        sh->D = calloc(sh->n, sizeof(float));
        if (sh->wg == NULL || sh->D == NULL)
            return SHS_ERR_NO_MEMORY;
        memcpy(sh->wg, sh->w, sh->n * sizeof(float));
    }
    if (sh->cfg.wire == SHS_WIRE_BF16) {
        size_t gm1 = (size_t)(sh->cfg.gmax > 1 ? sh->cfg.gmax - 1 : 1);
        sh->snap = malloc(sh->n * sizeof(float));
        sh->dec = malloc(gm1 * sh->cfg.chunk * sizeof(float));
        if (sh->snap == NULL || sh->dec == NULL)
            return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

/* The common regions, in the same order on every rank: pub, scratch, acc,
 * admit. Scratch: header read-backs (two per member), one word per member
 * (verdicts), a told table, the receive chunks. */
static shs_status_t alloc_regions(shs_shadow_t *sh)
{
    size_t gm1 = (size_t)(sh->cfg.gmax > 1 ? sh->cfg.gmax - 1 : 1);
    sh->slot_bytes = ALIGN_UP(sh->n * shs__wire_bytes(sh), 64);
    shs_status_t st = shs_region_alloc(sh->ctx, SHS__PUB_DATA_OFF + 2 * sh->slot_bytes,
                                       SHS_ACCESS_REMOTE_READ, &sh->pub);
    if (st != SHS_OK)
        return st;
    sh->hdr = shs_region_addr(sh->pub);
    sh->slot[0] = (float *)((uint8_t *)sh->hdr + shs__slot_off(sh, 0));
    sh->slot[1] = (float *)((uint8_t *)sh->hdr + shs__slot_off(sh, 1));
    /* before any round: peers compare it with theirs (snapshot.c) */
    __atomic_store_n(&sh->hdr->wire, 1u + (unsigned)sh->cfg.wire, __ATOMIC_RELEASE);

    sh->word_off = ALIGN_UP(2 * (size_t)SHS_GROUP_MAX * SHS__HDR_BYTES, 8);
    sh->told_off = ALIGN_UP(sh->word_off + (size_t)SHS_GROUP_MAX * 8, 64);
    sh->recv_off = ALIGN_UP(sh->told_off + SHS__VIEW_TOLD_RANKS * sizeof(shs__life_t), 64);
    st = shs_region_alloc(sh->ctx, sh->recv_off + gm1 * sh->cfg.chunk * sizeof(float),
                          SHS_ACCESS_LOCAL_WRITE, &sh->scratch);
    if (st != SHS_OK)
        goto err_destroy_pub;
    sh->scratch_mem = shs_region_addr(sh->scratch);

    st = shs_region_alloc(sh->ctx, sh->n * sizeof(float), SHS_ACCESS_LOCAL_WRITE, &sh->acc_reg);
    if (st != SHS_OK)
        goto err_destroy_scratch;
    sh->acc = shs_region_addr(sh->acc_reg);

    /* zeroed by the allocation, before any peer can swap it */
    st = shs_region_alloc(sh->ctx, SHS__ADMIT_WORDS * sizeof(uint64_t),
                          SHS_ACCESS_REMOTE_ATOMIC | SHS_ACCESS_REMOTE_READ, &sh->admit_reg);
    if (st != SHS_OK)
        goto err_destroy_acc;
    sh->admit = shs_region_addr(sh->admit_reg);
    return SHS_OK;

err_destroy_acc:
    shs_region_destroy(sh->acc_reg);
err_destroy_scratch:
    shs_region_destroy(sh->scratch);
err_destroy_pub:
    shs_region_destroy(sh->pub);
    return st;
}

static void free_regions(shs_shadow_t *sh)
{
    shs_region_destroy(sh->admit_reg);
    shs_region_destroy(sh->acc_reg);
    shs_region_destroy(sh->scratch);
    shs_region_destroy(sh->pub);
}

static shs_status_t check_model(shs_region_t *model, size_t offset, size_t count,
                                shs_shadow_t **shadow_p)
{
    if (model == NULL || shadow_p == NULL) {
        SHS_ERROR("shs_shadow_create: %s is NULL",
                  model == NULL ? "the model region" : "shadow_p (the output)");
        return SHS_ERR_INVALID_ARG;
    }
    if (count == 0 || offset % sizeof(float) != 0 || offset > shs_region_len(model) ||
        count > (shs_region_len(model) - offset) / sizeof(float)) {
        SHS_ERROR("shadow: bad model range (offset %zu, %zu floats, region of %zu bytes)",
                  offset, count, shs_region_len(model));
        return SHS_ERR_INVALID_ARG;
    }
    return SHS_OK;
}

/* What every rank's engine must share, as resolved from its arguments
 * (valid or not): the model's length and how it is averaged. The pin, the
 * model's place, the timeouts and the pull chunk are each rank's own. */
typedef struct shadow_sig {
    uint64_t count;
    uint64_t sched_seed;
    int32_t algo, path, sched_kind, group_size, wire, channel;
    float eta, zeta, alpha;
    int32_t nesterov;
} shadow_sig_t;

static shadow_sig_t sig_of(const shs_shadow_t *sh)
{
    const shs__shadow_cfg_t *c = &sh->cfg;
    /* what the schedule's kind ignores may differ */
    bool all = c->sched.kind == SHS_SCHED_ALL, random = c->sched.kind == SHS_SCHED_RANDOM;
    return (shadow_sig_t){.count = sh->n, .sched_seed = random ? c->sched.seed : 0,
                          .algo = (int32_t)c->algo, .path = (int32_t)c->path,
                          .sched_kind = (int32_t)c->sched.kind,
                          .group_size = all ? 0 : c->sched.group_size, .wire = c->wire,
                          .channel = c->want_channel, .eta = c->bmuf_fg.eta,
                          .zeta = c->bmuf_fg.zeta, .alpha = c->alpha,
                          .nesterov = c->bmuf_fg.nesterov};
}

static void explain_sig(const char *call, int r, const void *theirs, const void *mine)
{
    const shadow_sig_t *a = theirs, *z = mine;
    SHS_ERROR("%s: rank %d / this rank: %llu/%llu floats, algorithm %d/%d, path %d/%d, "
              "schedule %d/%d (g %d/%d), wire %d/%d, channel %d/%d, or the BMUF, EASGD or "
              "schedule seed values", call, r, (unsigned long long)a->count,
              (unsigned long long)z->count, a->algo, z->algo, a->path, z->path, a->sched_kind,
              z->sched_kind, a->group_size, z->group_size, a->wire, z->wire, a->channel,
              z->channel);
}

/* A rank that rejoined a running job joins its engine on the pull or ring
 * path (MA, BMUF; on the ring path the living ranks have fallen
 * back to pulling, and so does it): EASGD's center and inboxes are set up
 * among ranks that create their engines together. */
static shs_status_t check_rejoin(const shs_shadow_t *sh)
{
    if (!sh->rejoining || sh->cfg.algo != SHS_SHADOW_EASGD)
        return SHS_OK;
    SHS_ERROR("shs_shadow_create: refused on a rank that rejoined a running job: EASGD's "
              "center slices and inboxes are set up among the ranks that created their "
              "engines together; a rejoined rank takes MA or BMUF: docs/failures.md");
    return SHS_ERR_UNSUPPORTED;
}

shs_status_t shs_shadow_create(shs_ctx_t *ctx, shs_region_t *model, size_t offset, size_t count,
                               const shs_shadow_params_t *params, shs_shadow_t **shadow_p)
{
    size_t chunk_bytes;
    if (ctx == NULL) {
        SHS_ERROR("shs_shadow_create: the context is NULL");
        return SHS_ERR_INVALID_ARG;
    }
    if (shs__ctx_refused(ctx, "shs_shadow_create"))
        return SHS_ERR_BAD_STATE;
    shs_shadow_t *sh = calloc(1, sizeof(*sh));
    if (sh == NULL)
        return SHS_ERR_NO_MEMORY;
    sh->ctx = ctx;
    sh->rank = shs_ctx_rank(ctx);
    sh->size = shs_ctx_size(ctx);
    sh->model = model;
    sh->model_off = offset;
    sh->n = count;
    sh->rejoining = shs__ctx_replaying(ctx);
    /* every check is local, before anything is sent; the ranks then agree,
     * so that a bad argument fails every rank alike (shs__ctx_agree_args) */
    shs_status_t st = check_model(model, offset, count, shadow_p);
    resolve_params(sh, params, &chunk_bytes);
    if (st == SHS_OK)
        st = check_params(sh, chunk_bytes);
    if (st == SHS_OK) {
        sh->w = (float *)((uint8_t *)shs_region_addr(model) + offset);
        sh->ops = choose_path(&sh->cfg);
        st = check_rejoin(sh);
    }
    /* this rank's own memory too: a failure reaches the others here */
    if (st == SHS_OK)
        st = alloc_peers(sh);
    if (!sh->rejoining) {
        shadow_sig_t sig = sig_of(sh);
        st = shs__ctx_agree_args(ctx, "shs_shadow_create", st, &sig, sizeof(sig), explain_sig);
    }
    if (st != SHS_OK)
        goto err_free_peers;
    /* collective from here: the same order on every rank */
    st = shs_ctx_endpoint_create(ctx, &sh->io);
    if (st != SHS_OK)
        goto err_free_peers;
    st = alloc_regions(sh);
    if (st != SHS_OK)
        goto err_destroy_io;
    st = shs__view_init(&sh->view, sh->rank, sh->size,
                        (shs__life_t *)(void *)((uint8_t *)sh->hdr + SHS__PUB_TOLD_OFF),
                        &sh->hdr->told_ver);
    if (st != SHS_OK)
        goto err_free_regions;
    st = sh->ops->setup != NULL ? sh->ops->setup(sh) : SHS_OK;
    if (st == SHS_OK && sh->rejoining)
        st = shs__rejoin_seed(sh);
    if (st != SHS_OK)
        goto err_fini_view;

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sh->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&sh->lock, NULL);
    SHS_DEBUG("shadow: %zu floats, algorithm %d, %s path, schedule %d (g %d), chunk %zu "
              "floats, %s snapshots", count, (int)sh->cfg.algo, sh->ops->name,
              (int)sh->cfg.sched.kind, sh->cfg.gmax, sh->cfg.chunk,
              shs__bf16_wire(sh) ? "bf16" : "float32");
    shs__region_hold(model, "a shadow engine (its model)");
    *shadow_p = sh;
    return SHS_OK;

err_fini_view:
    shs__view_fini(&sh->view);
err_free_regions:
    free_regions(sh);
err_destroy_io:
    shs_ctx_destroy(sh->io);
err_free_peers:
    free_peers(sh);
    free(sh);
    return st;
}

void shs_shadow_destroy(shs_shadow_t *sh)
{
    if (sh == NULL)
        return;
    shs_shadow_stop(sh);
    __atomic_store_n(&sh->hdr->stopped, 1, __ATOMIC_RELEASE);
    /* every rank stops reading and writing this rank's regions before any
     * of them is deregistered */
    (void)shs_flush(sh->io, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
    /* among the living (a failed or gone peer is not waited for): every
     * rank calls it, so that the ranks' barriers stay paired */
    shs_status_t st = shs_ctx_barrier(sh->ctx);
    if (st != SHS_OK)
        SHS_WARN("shadow: final barrier failed (%s); releasing the regions anyway",
                 shs_status_string(st));
    if (sh->ops->teardown != NULL)
        sh->ops->teardown(sh);
    shs__region_release(sh->model);
    shs_ctx_destroy(sh->io);
    free_regions(sh);
    pthread_cond_destroy(&sh->cond);
    pthread_mutex_destroy(&sh->lock);
    shs__view_fini(&sh->view);
    free_peers(sh);
    free(sh);
}

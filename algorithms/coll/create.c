/* A collective's parameters (the knobs, then shs_coll_params_t), their
 * checks, the setup-time agreement of all ranks on them, and create,
 * destroy and stats. */
#include <stdlib.h>
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/coll/coll.h"
#include "runtime/log.h"
#include "transport/services.h"

/* The parameters every rank must agree on, compared at setup. */
typedef struct setup_sig {
    uint64_t magic;
    uint64_t slot_bytes;
    uint64_t stage_bytes;
    uint64_t eager_bytes;
    uint64_t min_chunk;
    uint32_t slots;
    uint32_t channel;
    uint32_t wire;
    uint32_t pad;
    uint64_t valid;          /* this rank's parameters passed their checks */
} setup_sig_t;
#define SETUP_MAGIC 0x73687363u /* "shsc" */
#define SIZE_PARAM_MAX ((size_t)1 << 30)  /* SHS_COLL_EAGER's and _MIN_CHUNK's */
#define STAGE_PARAM_MAX ((size_t)1 << 40) /* SHS_COLL_STAGE's */

/* The only reader of the knobs: everything a collective takes from the
 * context's configuration. */
static void conf_from_knobs(shs__coll_conf_t *conf, const shs__config_t *cfg)
{
    *conf = (shs__coll_conf_t){.slot_bytes = cfg->coll_chunk, .slots = cfg->coll_slots,
                               .stage_bytes = cfg->coll_stage, .eager_bytes = cfg->coll_eager,
                               .min_chunk = cfg->coll_min_chunk, .channel = cfg->coll_channel,
                               .wire = cfg->coll_wire,
                               .timeout_ms = cfg->op_timeout_ms, .rq_depth = cfg->rq_depth,
                               .spin = cfg->poll_spin < 0
                                           ? 0u
                                           : (unsigned)cfg->poll_spin / SHS__COLL_SPIN_DIV};
}

/* The fields of params that its field_mask sets replace the knobs'. A
 * timeout below 1 ms is left out here (shs__coll_conf_check refuses it):
 * the setup itself needs a bound. */
void shs__coll_conf_apply(shs__coll_conf_t *conf, const shs_coll_params_t *params)
{
    if (params == NULL)
        return;
    uint64_t m = params->field_mask;
    if (m & SHS_COLL_PARAM_SLOT_BYTES)
        conf->slot_bytes = params->slot_bytes;
    if (m & SHS_COLL_PARAM_SLOTS)
        conf->slots = params->slots;
    if (m & SHS_COLL_PARAM_STAGE_BYTES)
        conf->stage_bytes = params->stage_bytes;
    if (m & SHS_COLL_PARAM_CHANNEL)
        conf->channel = params->channel;
    if (m & SHS_COLL_PARAM_EAGER_BYTES)
        conf->eager_bytes = params->eager_bytes;
    if (m & SHS_COLL_PARAM_MIN_CHUNK)
        conf->min_chunk = params->min_chunk;
    if (m & SHS_COLL_PARAM_WIRE)
        conf->wire = params->wire;
    if ((m & SHS_COLL_PARAM_TIMEOUT) && params->timeout_ms >= 1)
        conf->timeout_ms = params->timeout_ms;
}

/* SHS_ERR_CONFIG (logged) for a parameter out of range; the eager slot and
 * the smallest chunk are capped at the chunk size. */
shs_status_t shs__coll_conf_check(shs__coll_conf_t *conf, const shs_coll_params_t *params)
{
    if (conf->slot_bytes < 64 || conf->slot_bytes % 8 != 0 ||
        conf->slot_bytes > ((size_t)1 << 30)) {
        SHS_ERROR("collectives: chunk of %zu bytes: expected a multiple of 8 in 64..1 GiB",
                  conf->slot_bytes);
        return SHS_ERR_CONFIG;
    }
    /* Per peer at most: slots + 1 data notifications (the shared slots and
     * the eager one), `slots` credits (n = 2: the same peer is both
     * neighbours), the grant of this call, and the grant and eager chunk
     * of the next. */
    if (conf->slots < 1 || conf->slots > 63 || 2 * conf->slots + 6 > conf->rq_depth) {
        SHS_ERROR("collectives: %d slots: expected 1..63 with 2 * slots + 6 <= "
                  "SHS_RQ_DEPTH (%d)", conf->slots, conf->rq_depth);
        return SHS_ERR_CONFIG;
    }
    /* the knobs' bounds: a larger size_t parameter is a negative value cast */
    if (conf->eager_bytes > SIZE_PARAM_MAX || conf->min_chunk > SIZE_PARAM_MAX ||
        conf->stage_bytes > STAGE_PARAM_MAX) {
        SHS_ERROR("collectives: eager slot %zu, smallest chunk %zu or stage %zu bytes: "
                  "expected at most 1 GiB, 1 GiB and 1 TiB (a negative value?)",
                  conf->eager_bytes, conf->min_chunk, conf->stage_bytes);
        return SHS_ERR_CONFIG;
    }
    if (conf->eager_bytes > conf->slot_bytes)
        conf->eager_bytes = conf->slot_bytes; /* a first chunk is never larger */
    if (conf->min_chunk < 8 || conf->min_chunk % 8 != 0) {
        SHS_ERROR("collectives: smallest chunk of %zu bytes: expected a multiple of 8",
                  conf->min_chunk);
        return SHS_ERR_CONFIG;
    }
    if (conf->min_chunk > conf->slot_bytes)
        conf->min_chunk = conf->slot_bytes;
    if (conf->eager_bytes % 8 != 0) {
        SHS_ERROR("collectives: eager slot of %zu bytes: expected a multiple of 8",
                  conf->eager_bytes);
        return SHS_ERR_CONFIG;
    }
    if (conf->channel < -1 || conf->channel > 255) {
        SHS_ERROR("collectives: channel %d: expected 0..255 (or unset: allocated)",
                  conf->channel);
        return SHS_ERR_CONFIG;
    }
    if (conf->wire != SHS_WIRE_NATIVE && conf->wire != SHS_WIRE_BF16) {
        SHS_ERROR("collectives: wire %d: expected SHS_WIRE_NATIVE (0) or SHS_WIRE_BF16 (1)",
                  conf->wire);
        return SHS_ERR_CONFIG;
    }
    if (params != NULL && (params->field_mask & SHS_COLL_PARAM_TIMEOUT) &&
        params->timeout_ms < 1) {
        SHS_ERROR("collectives: timeout %d ms: expected > 0", params->timeout_ms);
        return SHS_ERR_CONFIG;
    }
    return SHS_OK;
}

/* This rank's parameters, checked, and its channel. The channel is taken
 * last: the caller gives it back on any failure. */
static shs_status_t resolve_params(shs_coll_t *coll, const shs_coll_params_t *params,
                                   const shs__config_t *cfg)
{
    conf_from_knobs(&coll->conf, cfg);
    shs__coll_conf_apply(&coll->conf, params);
    shs_status_t st = shs__coll_conf_check(&coll->conf, params);
    if (st != SHS_OK)
        return st;
    coll->agree = coll->conf.eager_bytes >= SIG_AREA ? &shs__coll_agree_area
                                                     : &shs__coll_agree_hash;
    unsigned chan;
    st = shs__ctx_channel_take(coll->io, coll->conf.channel, "a collective", &chan);
    if (st != SHS_OK)
        return st;
    coll->chan_taken = true;
    coll->chan = chan << IMM_CHAN_SHIFT;
    return SHS_OK;
}

static setup_sig_t setup_sig_of(const shs_coll_t *coll, shs_status_t local)
{
    const shs__coll_conf_t *c = &coll->conf;
    return (setup_sig_t){.magic = SETUP_MAGIC, .slot_bytes = c->slot_bytes,
                         .stage_bytes = c->stage_bytes, .eager_bytes = c->eager_bytes,
                         .min_chunk = c->min_chunk, .slots = (uint32_t)c->slots,
                         .channel = coll->chan >> IMM_CHAN_SHIFT, .wire = (uint32_t)c->wire,
                         .valid = local == SHS_OK};
}

static const char *wire_name(uint32_t wire)
{
    return wire == SHS_WIRE_BF16 ? "bf16" : "native";
}

/* The verdict on the table of all ranks' valid signatures, the same on
 * every rank. */
static shs_status_t setup_verdict(const shs_coll_t *coll, const setup_sig_t *sig)
{
    const setup_sig_t *mine = &sig[coll->rank];
    for (int p = 0; p < coll->size; p++) {
        const setup_sig_t *s = &sig[p];
        if (!s->valid) {
            SHS_ERROR("collective setup: rank %d has invalid SHS_COLL_* parameters", p);
            return SHS_ERR_SIZE_MISMATCH;
        }
        if (memcmp(s, mine, sizeof(*s)) != 0) {
            SHS_ERROR("collective setup: rank %d uses chunk %llu (min %llu), %u slots, stage "
                      "%llu, eager %llu, channel %u, wire %s; this rank uses chunk %llu (min "
                      "%llu), %u slots, stage %llu, eager %llu, channel %u, wire %s: every "
                      "rank must use the same SHS_COLL_* values",
                      p, (unsigned long long)s->slot_bytes, (unsigned long long)s->min_chunk,
                      s->slots, (unsigned long long)s->stage_bytes,
                      (unsigned long long)s->eager_bytes, s->channel, wire_name(s->wire),
                      (unsigned long long)mine->slot_bytes, (unsigned long long)mine->min_chunk,
                      mine->slots, (unsigned long long)mine->stage_bytes,
                      (unsigned long long)mine->eager_bytes, mine->channel,
                      wire_name(mine->wire));
            return SHS_ERR_SIZE_MISMATCH;
        }
    }
    return SHS_OK;
}

/* Every rank writes its signature (its parameters, and whether they were
 * valid) into slot [me] of every peer's table; after a barrier each rank
 * compares the whole table, so all ranks reach the same verdict before any
 * of them registers an inbox whose length depends on the parameters. */
static shs_status_t check_same_params(shs_coll_t *coll, shs_status_t local)
{
    shs_ctx_t *ctx = coll->ctx;
    int n = coll->size, me = coll->rank;
    shs_region_t *table = NULL;
    shs_status_t st = shs_region_alloc(ctx, (size_t)n * sizeof(setup_sig_t),
                                       SHS_ACCESS_REMOTE_WRITE, &table);
    if (st != SHS_OK)
        return st;
    setup_sig_t *sig = shs_region_addr(table);
    sig[me] = setup_sig_of(coll, local);
    size_t off = (size_t)me * sizeof(setup_sig_t);
    for (int p = 0; p < n && st == SHS_OK; p++)
        if (p != me)
            st = shs_write(ctx, p, table, off, table, off, sizeof(setup_sig_t), 0);
    if (st == SHS_OK && n > 1)
        st = shs_flush(ctx, SHS_PEER_ALL, coll->conf.timeout_ms);
    /* both barriers on every rank, whatever happened before: the ranks'
     * barriers stay paired (they meet among the living) */
    shs_status_t bs = shs_ctx_barrier(ctx);
    if (st == SHS_OK)
        st = bs;
    /* this rank's own failure was logged where it was found */
    if (st == SHS_OK)
        st = local != SHS_OK ? local : setup_verdict(coll, sig);
    /* nobody may still be writing into the table when it goes away */
    shs_status_t st2 = shs_ctx_barrier(ctx);
    if (st == SHS_OK)
        st = st2;
    shs_region_destroy(table);
    return st;
}

shs_status_t shs__coll_replay_skip(shs_ctx_t *ctx, const shs_coll_params_t *params)
{
    shs__coll_conf_t c;
    conf_from_knobs(&c, shs__ctx_config(ctx));
    shs__coll_conf_apply(&c, params);
    /* what create registers and keeps: the inbox, the staging area, the
     * bf16 outbox (the parameter check's table is destroyed at once) */
    size_t n = 1 + (c.stage_bytes > 0 ? 1u : 0u) + (c.wire == SHS_WIRE_BF16 ? 1u : 0u);
    return shs__ctx_rejoin_skip(ctx, n);
}

shs_status_t shs_coll_create(shs_ctx_t *ctx, const shs_coll_params_t *params,
                             shs_coll_t **coll_p)
{
    return shs__coll_create_on(ctx, ctx, params, coll_p);
}

shs_status_t shs__coll_create_on(shs_ctx_t *ctx, shs_ctx_t *io, const shs_coll_params_t *params,
                                 shs_coll_t **coll_p)
{
    if (ctx == NULL || io == NULL || coll_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_coll_create"))
        return SHS_ERR_BAD_STATE;
    if (shs__ctx_replay_refused(ctx, "shs_coll_create"))
        return SHS_ERR_UNSUPPORTED;
    const shs__config_t *cfg = shs__ctx_config(ctx);
    shs_status_t st;
    shs_coll_t *coll = calloc(1, sizeof(*coll));
    if (coll == NULL)
        return SHS_ERR_NO_MEMORY;
    coll->ctx = ctx;
    coll->io = io;
    coll->rank = shs_ctx_rank(ctx);
    coll->size = shs_ctx_size(ctx);
    /* A bad parameter on one rank is reported to all through the check, so
     * that no rank is left waiting in a registration the others skip. */
    st = check_same_params(coll, resolve_params(coll, params, cfg));
    if (st != SHS_OK)
        goto err_give_channel;

    coll->calls_from = calloc((size_t)coll->size, sizeof(uint32_t));
    coll->calls_to = calloc((size_t)coll->size, sizeof(uint32_t));
    if (coll->calls_from == NULL || coll->calls_to == NULL) {
        st = SHS_ERR_NO_MEMORY; /* the peers fail in the registration: bounded */
        goto err_free_calls;
    }
    const shs__coll_conf_t *c = &coll->conf;
    st = shs_region_alloc(ctx, (size_t)c->slots * c->slot_bytes +
                                   (size_t)coll->size * c->eager_bytes,
                          SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_WRITE, &coll->inbox);
    if (st != SHS_OK)
        goto err_free_calls;
    /* the staging area is only a WRITE source: local access is enough */
    if (c->stage_bytes > 0) {
        st = shs_region_alloc(ctx, c->stage_bytes, SHS_ACCESS_LOCAL_WRITE, &coll->stage);
        if (st != SHS_OK)
            goto err_destroy_inbox;
    }
    /* bf16 wire: the encoded chunks a rank sends, one per slot of the right
     * neighbour's inbox that it may fill (its shared slots and our eager
     * slot there); a WRITE source only */
    if (c->wire == SHS_WIRE_BF16) {
        st = shs_region_alloc(ctx, (size_t)c->slots * c->slot_bytes + c->eager_bytes,
                              SHS_ACCESS_LOCAL_WRITE, &coll->outbox);
        if (st != SHS_OK)
            goto err_destroy_stage;
    }
    SHS_DEBUG("collectives: %d slots of %zu bytes, eager %zu, stage %zu bytes, channel %u, "
              "wire %s", c->slots, c->slot_bytes, c->eager_bytes, c->stage_bytes,
              coll->chan >> IMM_CHAN_SHIFT, wire_name((uint32_t)c->wire));
    *coll_p = coll;
    return SHS_OK;

err_destroy_stage:
    shs_region_destroy(coll->stage);
err_destroy_inbox:
    shs_region_destroy(coll->inbox);
err_free_calls:
    free(coll->calls_to);
    free(coll->calls_from);
err_give_channel:
    if (coll->chan_taken)
        shs__ctx_channel_give(coll->io, coll->chan >> IMM_CHAN_SHIFT);
    free(coll);
    return st;
}

void shs_coll_destroy(shs_coll_t *coll)
{
    if (coll == NULL)
        return;
    if (shs__ctx_refused(coll->ctx, "shs_coll_destroy"))
        return;
    shs_region_destroy(coll->outbox);
    shs_region_destroy(coll->stage);
    shs_region_destroy(coll->inbox);
    if (coll->chan_taken)
        shs__ctx_channel_give(coll->io, coll->chan >> IMM_CHAN_SHIFT);
    free(coll->calls_to);
    free(coll->calls_from);
    free(coll);
}

shs_status_t shs_coll_get_stats(const shs_coll_t *coll, shs_coll_stats_t *stats_p)
{
    if (coll == NULL || stats_p == NULL)
        return SHS_ERR_INVALID_ARG;
    *stats_p = coll->stats;
    return SHS_OK;
}

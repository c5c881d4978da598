/*
 * A collective for an engine with a thread of its own (the shadow engine's
 * ring path): its setup is collective over ctx, on the thread that drives
 * ctx, and its regions are ctx's; its calls write, poll and take their
 * immediate channel on io, an endpoint of ctx (context.h) that the engine's
 * thread drives. shs_coll_create(ctx, ...) is this with io = ctx.
 * Destroy with shs_coll_destroy on the thread that drives ctx, before io.
 */
#ifndef SHS_ALGORITHMS_COLL_ENDPOINT_H
#define SHS_ALGORITHMS_COLL_ENDPOINT_H

#include <shadowsync/collective.h>

shs_status_t shs__coll_create_on(shs_ctx_t *ctx, shs_ctx_t *io, const shs_coll_params_t *params,
                                 shs_coll_t **coll_p);

/* A rank that rejoined the running job, replaying the job's regions
 * (context.h), passes a collective the job made at start-up and still
 * holds: the collective's regions keep their place in the replay. It
 * cannot join the collective itself (its peers' per-call counts are the old
 * incarnation's). SHS_ERR_BAD_STATE when ctx is not replaying. */
shs_status_t shs__coll_replay_skip(shs_ctx_t *ctx, const shs_coll_params_t *params);

#endif

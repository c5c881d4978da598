/*
 * What the transport offers the layers above it (algorithms/) beyond the
 * public API: the context's resolved configuration, immediate channels
 * allocated by the context, lending the context to a background thread, and
 * holding a region so that it cannot be destroyed under its user.
 */
#ifndef SHS_TRANSPORT_SERVICES_H
#define SHS_TRANSPORT_SERVICES_H

#include <stdbool.h>

#include <shadowsync/context.h>
#include <shadowsync/region.h>
#include <shadowsync/status.h>

#include "runtime/config.h"
#include "runtime/knob.h"
#include "runtime/wait.h"

/* The configuration resolved once by shs_ctx_create (environment, then the
 * context's parameters). Layers above read it here, never the environment. */
const shs__config_t *shs__ctx_config(const shs_ctx_t *ctx);

/* The transport's knob table (transport/knobs.c), for the list of every
 * layer's tables that the top of the link provides (algorithms/knobs.c). */
extern const shs__knob_table_t shs__transport_knob_table;

/* Start a bounded wait with the context's poll budget (SHS_POLL_SPIN);
 * timeout_ms < 0 means SHS_OP_TIMEOUT_MS. */
void shs__ctx_waiter_init(shs__waiter_t *w, const shs_ctx_t *ctx, int timeout_ms);

/* Every rank's `len` bytes, in rank order, into all (size * len bytes).
 * Collective over the bootstrap, on the thread that drives ctx (refused on
 * an endpoint, and with SHS_ERR_UNSUPPORTED on a rejoined rank, which is
 * not part of the bootstrap). For layers above that must check that the
 * ranks agree. */
shs_status_t shs__ctx_allgather(shs_ctx_t *ctx, const void *mine, size_t len, void *all);

/* The agreement step of a collective create (docs/failures.md, "Bad
 * arguments"): every rank checked its arguments alone and passes `local`
 * (SHS_OK or the status it logged) and `sig`, `len` bytes that stand for
 * the arguments every rank must share (made from them as given, valid or
 * not, so that the same call gives the same bytes). Over shs__ctx_allgather.
 * Returns, the same way on every rank:
 *   local, when it is not SHS_OK (every rank that was given the same
 *   invalid arguments returns the same status, having logged the same
 *   message);
 *   SHS_ERR_SIZE_MISMATCH (logged, naming `call` and the first rank that
 *   differs; `explain`, when not NULL, logs how) when a rank's sig differs
 *   from this rank's, or a rank with the same sig refused an argument of
 *   its own (SHS_ERR_INVALID_ARG, _CONFIG, _UNSUPPORTED, _BAD_STATE);
 *   SHS_ERR_PEER_FAILED (logged) when a rank failed otherwise (memory);
 *   the allgather's status when it failed; else SHS_OK. */
typedef void (*shs__args_explain_fn)(const char *call, int rank, const void *theirs,
                                     const void *mine);
shs_status_t shs__ctx_agree_args(shs_ctx_t *ctx, const char *call, shs_status_t local,
                                 const void *sig, size_t len, shs__args_explain_fn explain);

/* The living ranks' `len` bytes (at most 56), in rank order, into all;
 * present[p]: rank p's came (a failed rank's bytes are zero). Once the
 * context's mesh is up, a barrier over it among the living (a rejoined
 * rank takes part, rank 0's death does not stop it); before that, over
 * the bootstrap, every rank present. Collective, on the thread that
 * drives ctx (refused on an endpoint). */
shs_status_t shs__ctx_living_allgather(shs_ctx_t *ctx, const void *mine, size_t len, void *all,
                                       bool *present);

/* Whether `call` must be refused because ctx is a rejoined rank's (it
 * rejoined a running job, SHS_REJOIN): true, logged, for the layers above
 * whose objects the running job's ranks cannot take it back into yet. */
bool shs__ctx_rejoin_refused(const shs_ctx_t *ctx, const char *call);

/* Whether `call`, collective among the ranks, must be refused because ctx
 * is a rejoined rank's still making the regions the job held when it came
 * back (a collective the job made at start-up cannot be made again alone);
 * one made together with the living ranks after that goes over the mesh.
 * True, logged. */
bool shs__ctx_replay_refused(const shs_ctx_t *ctx, const char *call);

/* A rejoined rank replaying the job's regions passes n of them (those of an
 * object of the job it cannot join, such as a collective: its regions keep
 * their place). SHS_ERR_BAD_STATE when it is not replaying. */
shs_status_t shs__ctx_rejoin_skip(shs_ctx_t *ctx, size_t n);

/* Whether ctx is a rejoined rank's that is still making the regions the job
 * held when it came back (its set-up replayed; context.h). */
bool shs__ctx_replaying(const shs_ctx_t *ctx);

/* Whether ctx (or an endpoint's context) is a rejoined rank's. */
bool shs__ctx_is_rejoined(const shs_ctx_t *ctx);

/* The incarnation of peer `rank` that ctx's queue pairs are for: on a
 * context, the times it was taken back after a rejoin; on an endpoint, the
 * one this endpoint was last connected to (read on the thread that drives
 * it). It changes when the rank came back: whatever a layer above kept
 * about the old process (sequence numbers, credits) is void. */
unsigned shs__ctx_peer_incarnation(const shs_ctx_t *ctx, int rank);

/* Whether the job's membership changed under ctx: this rank rejoined, or a
 * peer was taken back after a rejoin (transport/rejoin/). */
bool shs__ctx_members_changed(const shs_ctx_t *ctx);

/* Take an immediate channel (the top 8 bits of a 32-bit immediate) for
 * `user` (a constant string, named in errors): want < 0 takes the highest
 * free channel in 1..255 (the same one on every rank when the ranks take
 * and give channels in the same order, as collective creates do); want in
 * 0..255 takes exactly that one. SHS_ERR_BAD_STATE (logged, naming both
 * users) when it is taken, SHS_ERR_NO_RESOURCE when none is free,
 * SHS_ERR_INVALID_ARG for want > 255. */
shs_status_t shs__ctx_channel_take(shs_ctx_t *ctx, int want, const char *user,
                                   unsigned *chan_p);
void shs__ctx_channel_give(shs_ctx_t *ctx, unsigned chan);

/* Lend the context to a background thread (the shadow thread) for `to`:
 * until shs__ctx_reclaim, calls on the context from any other thread are
 * refused with SHS_ERR_BAD_STATE (void ones log and do nothing).
 * SHS_ERR_BAD_STATE when it is lent already. The borrowing thread calls
 * shs__ctx_adopt(ctx) first thing. */
shs_status_t shs__ctx_lend(shs_ctx_t *ctx, const char *to);
void shs__ctx_adopt(shs_ctx_t *ctx);
void shs__ctx_reclaim(shs_ctx_t *ctx);

/* Whether `call` must be refused on ctx (lent to another thread, or a
 * forked child's copy); logs why. Public entry points of the layers above
 * check it first, so a refused call changes nothing. */
bool shs__ctx_refused(shs_ctx_t *ctx, const char *call);

/* shs_region_alloc whose length may differ between ranks, 0 included (a
 * rank that holds none of it: peers' operations on its copy are out of
 * bounds). For data spread unevenly, such as the shards of an embedding
 * table held by some ranks only. Collective, as shs_region_alloc. */
shs_status_t shs__region_alloc_uneven(shs_ctx_t *ctx, size_t len, unsigned flags,
                                      shs_region_t **region_p);

/* Hold a region for `who` (a constant string): shs_region_destroy refuses it
 * (logged) until every hold is released. */
void shs__region_hold(shs_region_t *region, const char *who);
void shs__region_release(shs_region_t *region);

#endif

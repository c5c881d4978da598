/*
 * Internal: the shadow engine's membership view, a pure module over its own
 * state (no engine, no transport), so that the host unit tests drive it.
 *
 * Each rank's life is a 16-bit counter that only grows: even while the
 * incarnation it counts is alive (0: the process that started with the
 * job), odd once that incarnation failed; a rank that rejoins the running
 * job (SHS_REJOIN) takes the next even value. Counters are compared as
 * serial numbers (the newer wins), so views merge by taking the newer
 * counter of each rank and never go back, in whatever order reports
 * arrive: a failure reported for an old incarnation (odd, below the
 * rejoiner's even value) cannot remove the new one.
 *
 * The view is the set of ranks this rank leaves out ("dead": odd counters,
 * and peers that stopped their engine and then went away, ended rather than
 * failed). Failures spread by gossip: `told`, a table in this rank's
 * published region, holds the counters of the first SHS__VIEW_TOLD_RANKS
 * ranks, and `told_ver` (a header word) moves whenever the table changes,
 * so peers read the table only when it moved. A failure seen by one rank
 * reaches every rank that syncs with it, directly or through others,
 * within a few rounds (a larger job still detects its failures directly,
 * through the transport). A newer even counter is never taken from gossip:
 * it only marks the rank to be looked at (probe); the engine re-admits it
 * from the rank's own header, read over the connection made to the new
 * process (shs__view_admit), so that a read that fails on the old one only
 * ever fails the old incarnation.
 *
 * Groups are formed over the living ranks with the same rule on every rank,
 * so ranks with the same view form the same groups; `digest` names the view
 * (the living ranks and their counters), so that members can tell whether
 * they formed a round's group from the same view (admit.c).
 *
 * Thread-safety: one thread (the engine's) changes a view; `dead` may be
 * read by any thread (shs__view_is_dead), `told` by the device.
 */
#ifndef SHS_ALGORITHMS_SHADOW_VIEW_H
#define SHS_ALGORITHMS_SHADOW_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include <shadowsync/schedule.h>
#include <shadowsync/status.h>

/* Ranks whose counters a header's table tells. */
#define SHS__VIEW_TOLD_RANKS 640
/* The digest's width (bits): it travels in the verdict words (admit.c). */
#define SHS__VIEW_DIGEST_BITS 27

typedef uint16_t shs__life_t;

/* Whether counter a is newer than b (serial-number order). */
static inline bool shs__life_newer(shs__life_t a, shs__life_t b)
{
    return (int16_t)(uint16_t)(a - b) > 0;
}

typedef struct shs__view {
    int rank, size;
    int ndead;          /* ranks left out */
    int nfailed;        /* of which failed (not merely ended after stopping) */
    bool *dead;         /* per rank */
    bool *ended;        /* per rank: left out because it stopped and went away */
    bool *stopped;      /* per rank: its header said "stopped" when last read */
    bool *probe;        /* per rank: gossip told of a newer incarnation: look at it */
    shs__life_t *life;  /* per rank */
    int *alive;         /* scratch of view_group: the living ranks, ascending */
    shs__life_t *told;  /* SHS__VIEW_TOLD_RANKS counters, published */
    uint64_t *told_ver; /* published: moves after each change of told */
    uint32_t digest;    /* of the living ranks and their counters */
    bool self_told;     /* a peer counts this rank's incarnation as failed (logged once) */
} shs__view_t;

/* What shs__view_drop did. */
typedef enum shs__view_change {
    SHS__VIEW_SAME = 0, /* already out, this rank, or out of range */
    SHS__VIEW_ENDED,    /* left out: it stopped, then went away (not told) */
    SHS__VIEW_FAILED    /* left out and counted (and told) as failed */
} shs__view_change_t;

/* Set up the view of `rank` among `size` ranks, every rank alive in its
 * first incarnation; `told` points at SHS__VIEW_TOLD_RANKS counters and
 * `told_ver` at the word this view publishes them with (both cleared).
 * Allocates (setup only): SHS_OK or SHS_ERR_NO_MEMORY. */
shs_status_t shs__view_init(shs__view_t *v, int rank, int size, shs__life_t *told,
                            uint64_t *told_ver);
void shs__view_fini(shs__view_t *v);

/* Whether p is left out; any thread. */
static inline bool shs__view_is_dead(const shs__view_t *v, int p)
{
    return __atomic_load_n(&v->dead[p], __ATOMIC_RELAXED);
}

/* What p's header said about its engine when last read. */
static inline void shs__view_saw_stopped(shs__view_t *v, int p, bool stopped)
{
    v->stopped[p] = stopped;
}

/* Leave p's known incarnation out: `via` is the rank that reported it
 * (gossip), or -1 when the transport did; `reason` (may be NULL) names the
 * transport's cause and `round` the round it happened in, for the log line.
 * A peer that said it stopped and that the transport lost is ended, not
 * failed. */
shs__view_change_t shs__view_drop(shs__view_t *v, int p, int via, const char *reason,
                                  uint64_t round);

/* Take in the counters `their` (SHS__VIEW_TOLD_RANKS, as told in peer
 * `from`'s table) unless `from` is dead itself: newer odd counters leave
 * their ranks out, newer even ones mark their ranks to be probed. Returns
 * how many ranks it newly left out. */
int shs__view_learn(shs__view_t *v, int from, const shs__life_t *their, uint64_t round);

/* p's own header says it lives as incarnation `life` (even): when that is
 * newer than the view's counter, p is taken (back) in. Returns whether it
 * was: the caller then forgets what it knew of p's older incarnation. */
bool shs__view_admit(shs__view_t *v, int p, shs__life_t life, uint64_t round);

/* A rank that rejoined the running job: take a living peer's counters
 * (`base`, SHS__VIEW_TOLD_RANKS of them; ranks past those stay alive until
 * the transport says otherwise) and take this rank's next incarnation, newer
 * than any the job has seen of it. */
void shs__view_rejoin(shs__view_t *v, const shs__life_t *base);

static inline shs__life_t shs__view_life(const shs__view_t *v, int p)
{
    return v->life[p];
}

static inline uint32_t shs__view_digest(const shs__view_t *v)
{
    return v->digest;
}

/* Whether the membership ever changed: a rank failed, ended or rejoined. */
bool shs__view_changed(const shs__view_t *v);

/* This rank's group in round r: `sched` over the living ranks (their
 * positions in ascending rank order; a hypercube over a count that is not a
 * power of g becomes the general schedule with the same g). With no rank
 * out it is the schedule itself. Status of shs_schedule_group. */
shs_status_t shs__view_group(shs__view_t *v, const shs_schedule_t *sched, uint64_t r,
                             shs_group_t *grp);

#endif

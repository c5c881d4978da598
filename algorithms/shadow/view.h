/*
 * Internal: the shadow engine's failure view, a pure module over its own
 * state (no engine, no transport), so that the host unit tests drive it.
 *
 * The view is the set of ranks this rank leaves out for good ("dead"): peers
 * the transport failed, peers another rank reported failed (gossip), and
 * peers that stopped their engine and then went away (ended, not failed).
 * Failed ranks are told to peers through `told`, the failed words of this
 * rank's published header: every header a peer reads carries them, so a
 * failure seen by one rank reaches every rank that syncs with it, directly
 * or through others, within a few rounds. Being dead is sticky. Groups are
 * formed over the living ranks with the same rule on every rank, so ranks
 * with the same view form the same groups.
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

/* Failed ranks told in a header: the first SHS__VIEW_WORDS * 64 (a larger
 * job still detects its failures directly, through the transport). */
#define SHS__VIEW_WORDS 10
#define SHS__VIEW_TOLD_RANKS (SHS__VIEW_WORDS * 64)

typedef struct shs__view {
    int rank, size;
    int ndead;        /* ranks left out */
    int nfailed;      /* of which failed (not merely ended after stopping) */
    bool *dead;       /* per rank, sticky */
    bool *stopped;    /* per rank: its header said "stopped" when last read */
    int *alive;       /* scratch of view_group: the living ranks, ascending */
    uint64_t *told;   /* SHS__VIEW_WORDS words: bit p % 64 of word p / 64 = p failed */
    bool self_told;   /* a peer counts this rank as failed (logged once) */
} shs__view_t;

/* What shs__view_drop did. */
typedef enum shs__view_change {
    SHS__VIEW_SAME = 0, /* already out, this rank, or out of range */
    SHS__VIEW_ENDED,    /* left out: it stopped, then went away (not told) */
    SHS__VIEW_FAILED    /* left out and counted (and told) as failed */
} shs__view_change_t;

/* Set up the view of `rank` among `size` ranks, every rank alive; `told`
 * points at SHS__VIEW_WORDS words this view writes its failed set to (they
 * are cleared). Allocates (setup only): SHS_OK or SHS_ERR_NO_MEMORY. */
shs_status_t shs__view_init(shs__view_t *v, int rank, int size, uint64_t *told);
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

/* Leave p out: `via` is the rank that reported it (gossip), or -1 when the
 * transport did; `reason` (may be NULL) names the transport's cause and
 * `round` the round it happened in, for the log line. A peer that said it
 * stopped and that the transport lost is ended, not failed. */
shs__view_change_t shs__view_drop(shs__view_t *v, int p, int via, const char *reason,
                                  uint64_t round);

/* Take in the failed set `words` (SHS__VIEW_WORDS words, as told in peer
 * `from`'s header) unless `from` is dead itself. Returns how many ranks it
 * newly left out. */
int shs__view_learn(shs__view_t *v, int from, const uint64_t *words, uint64_t round);

/* This rank's group in round r: `sched` over the living ranks (their
 * positions in ascending rank order; a hypercube over a count that is not a
 * power of g becomes the general schedule with the same g). With no rank
 * out it is the schedule itself. Status of shs_schedule_group. */
shs_status_t shs__view_group(shs__view_t *v, const shs_schedule_t *sched, uint64_t r,
                             shs_group_t *grp);

#endif

/*
 * shadowsync: DS-Sync group schedules.
 *
 * DS-Sync (Wang et al., 2020) splits the N ranks into small groups that
 * synchronize only inside the group, and changes the grouping every round so
 * that information still mixes across the whole job. A schedule is a pure
 * function of (N, parameters, round): every rank computes the same partition
 * without talking to anyone, so a round needs no rendezvous and uses only the
 * connections made when the context was created.
 *
 * Schedules:
 *   SHS_SCHED_ALL        one group of all N ranks every round (plain allreduce).
 *   SHS_SCHED_HYPERCUBE  groups of g = 2^k along hypercube (butterfly)
 *                        dimensions: round r pairs ranks that differ in digit
 *                        (r mod log_g N) of their base-g index. When N is a
 *                        power of g, averaging inside the groups for log_g N
 *                        consecutive rounds gives every rank the exact global
 *                        average. Requires N to be a power of g.
 *   SHS_SCHED_GENERAL    any N and g: groups of g consecutive positions of a
 *                        round-dependent deterministic permutation (the last
 *                        group may be smaller); every pair of ranks shares a
 *                        group within a bounded number of rounds. The
 *                        permutation is the rotation of the round-robin
 *                        tournament ("circle method"): with M = N (N odd) or
 *                        N - 1 (N even), any M consecutive rounds put every
 *                        pair in one group when g is even, any 2M rounds when
 *                        g is odd (shs_schedule_mix_rounds returns that
 *                        bound). g = 2 meets the lower bound N - 1 for even N.
 *                        With 2 <= g < N every group has at least 2 ranks,
 *                        except when g divides N - 1: then the last group is
 *                        the single rank (round mod M), so no rank is alone
 *                        twice in any M consecutive rounds (M >= N - 1; for
 *                        even N rank N - 1 is never alone).
 *   SHS_SCHED_RANDOM     groups of g from a permutation drawn from a seeded
 *                        generator for each round (same seed: same groups on
 *                        every rank). The permutation is a keyed Feistel
 *                        bijection, so a group costs O(g) to compute for any
 *                        N; the mapping of a (seed, round) is fixed across
 *                        versions of the library.
 *
 * With g >= N (GENERAL, RANDOM) the only group is all N ranks; with g = 1
 * every rank is alone (no synchronization).
 *
 * All functions here are pure and thread-safe.
 */
#ifndef SHADOWSYNC_SCHEDULE_H
#define SHADOWSYNC_SCHEDULE_H

#include <stdint.h>

#include <shadowsync/defs.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest group a schedule produces (and shs_group_t can hold). */
#define SHS_GROUP_MAX 64

typedef enum shs_schedule_kind {
    SHS_SCHED_ALL = 0,
    SHS_SCHED_HYPERCUBE = 1,
    SHS_SCHED_GENERAL = 2,
    SHS_SCHED_RANDOM = 3
} shs_schedule_kind_t;

typedef struct shs_schedule {
    uint64_t field_mask;       /* reserved for growth; set to 0 */
    shs_schedule_kind_t kind;
    int group_size;            /* g (ignored for SHS_SCHED_ALL) */
    uint64_t seed;             /* SHS_SCHED_RANDOM only */
} shs_schedule_t;

/* One rank's group in one round: the member ranks in ascending order. */
typedef struct shs_group {
    int size;                  /* number of members, 1..SHS_GROUP_MAX */
    int index;                 /* position of the calling rank in ranks[] */
    int ranks[SHS_GROUP_MAX];
} shs_group_t;

/*
 * shs_schedule_group - the group of `rank` in round `round` of schedule
 * `sched` over `nranks` ranks, written to *group_p.
 * Returns SHS_OK, or SHS_ERR_INVALID_ARG (NULL pointer, rank out of range,
 * group size < 1 or > SHS_GROUP_MAX, nranks not a power of g for
 * SHS_SCHED_HYPERCUBE, nranks > SHS_GROUP_MAX for SHS_SCHED_ALL).
 */
SHS_API shs_status_t shs_schedule_group(const shs_schedule_t *sched, int nranks,
                                        int rank, uint64_t round,
                                        shs_group_t *group_p);

/*
 * shs_schedule_mix_rounds - the number of consecutive rounds after which
 * every rank has (transitively) mixed with every other: log_g N for the
 * hypercube, the bound of the general schedule, 1 for SHS_SCHED_ALL; 0 for
 * SHS_SCHED_RANDOM (no deterministic bound). Negative status on bad input.
 * The bound holds for any window of that many consecutive rounds, not only
 * from round 0. For the general schedule it is a bound on direct pairing
 * (every pair shares a group), which implies transitive mixing; 1 when
 * g >= N and N <= SHS_GROUP_MAX, 0 when g = 1 and N > 1 (never mixes). For
 * N = 1 every kind returns 1.
 */
SHS_API int shs_schedule_mix_rounds(const shs_schedule_t *sched, int nranks);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_SCHEDULE_H */

/*
 * Unit tests of the shadow engine's failure view (algorithms/shadow/view.h),
 * a pure module: ranks are simulated as an array of views whose "headers"
 * are their told tables, read by the members of each rank's group.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "algorithms/shadow/view.h"
#include "log_capture.h"
#include "unit.h"

#define NR 8

/* NR simulated ranks: a view each and the told table of its header. */
typedef struct sim {
    int n;
    shs__view_t v[NR];
    shs__life_t told[NR][SHS__VIEW_TOLD_RANKS];
    uint64_t ver[NR];
    bool gone[NR]; /* really gone: its header cannot be read */
} sim_t;

static void sim_init(sim_t *s, int n)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    for (int r = 0; r < n; r++)
        ck_assert_int_eq(shs__view_init(&s->v[r], r, n, s->told[r], &s->ver[r]), SHS_OK);
}

static void sim_fini(sim_t *s)
{
    for (int r = 0; r < s->n; r++)
        shs__view_fini(&s->v[r]);
}

/* One round r: every living rank reads the headers of the members of its
 * group (formed under its own view) that are not really gone. */
static void sim_round(sim_t *s, const shs_schedule_t *sched, uint64_t r)
{
    for (int me = 0; me < s->n; me++) {
        if (s->gone[me])
            continue;
        shs_group_t g;
        ck_assert_int_eq(shs__view_group(&s->v[me], sched, r, &g), SHS_OK);
        for (int k = 0; k < g.size; k++) {
            int p = g.ranks[k];
            if (p != me && !s->gone[p])
                shs__view_learn(&s->v[me], p, s->told[p], r);
        }
    }
}

static bool sim_all_know(const sim_t *s, int dead)
{
    for (int r = 0; r < s->n; r++)
        if (!s->gone[r] && !shs__view_is_dead(&s->v[r], dead))
            return false;
    return true;
}

/* Schedule kind i (0..3: all, hypercube, general, random), in pairs. */
static shs_schedule_t pairs_of_kind(int i)
{
    static const shs_schedule_kind_t kinds[] = {SHS_SCHED_ALL, SHS_SCHED_HYPERCUBE,
                                                SHS_SCHED_GENERAL, SHS_SCHED_RANDOM};
    shs_schedule_t sched;
    memset(&sched, 0, sizeof(sched));
    sched.kind = kinds[i];
    sched.group_size = 2;
    return sched;
}

/* Rank 0's transport sees rank 3 go; nobody else reads rank 3 (its reads
 * would hang): the gossip alone must reach every living rank, through
 * ranks that never share a group with rank 0 as well. */
START_TEST(test_gossip_reaches_everyone)
{
    shs_schedule_t sched = pairs_of_kind(_i);
    sim_t s;
    sim_init(&s, NR);
    s.gone[3] = true;
    ck_assert_int_eq(shs__view_drop(&s.v[0], 3, -1, "retry count exceeded", 5),
                     SHS__VIEW_FAILED);
    ck_assert_uint_eq(s.told[0][3], 1); /* incarnation 0 failed */
    ck_assert(!sim_all_know(&s, 3));
    int rounds = 0;
    while (!sim_all_know(&s, 3) && rounds < 64)
        sim_round(&s, &sched, (uint64_t)rounds++);
    ck_assert_msg(sim_all_know(&s, 3), "schedule %d: the death did not reach everyone",
                  (int)sched.kind);
    if (sched.kind != SHS_SCHED_ALL)
        ck_assert_int_gt(rounds, 1); /* pairs: it took relays */
    for (int r = 0; r < NR; r++) {
        if (r == 3)
            continue;
        ck_assert_int_eq(s.v[r].ndead, 1);
        ck_assert_int_eq(s.v[r].nfailed, 1);
        ck_assert_uint_eq(s.told[r][3], 1); /* and each tells it on */
    }
    sim_fini(&s);
}
END_TEST

/* Every living rank computes the same groups over the living ranks: each
 * group holds only living ranks, the calling rank at its index, in
 * ascending order, and every member of a group computes that group. */
static void check_groups(sim_t *s, const shs_schedule_t *sched, uint64_t r)
{
    for (int me = 0; me < s->n; me++) {
        if (s->gone[me])
            continue;
        shs_group_t g, h;
        ck_assert_int_eq(shs__view_group(&s->v[me], sched, r, &g), SHS_OK);
        ck_assert_int_eq(g.ranks[g.index], me);
        for (int k = 0; k < g.size; k++) {
            ck_assert(!s->gone[g.ranks[k]]);
            if (k > 0)
                ck_assert_int_lt(g.ranks[k - 1], g.ranks[k]);
            ck_assert_int_eq(shs__view_group(&s->v[g.ranks[k]], sched, r, &h), SHS_OK);
            ck_assert_int_eq(h.size, g.size);
            ck_assert_mem_eq(h.ranks, g.ranks, (size_t)g.size * sizeof(int));
        }
    }
}

START_TEST(test_regroup_over_living)
{
    shs_schedule_t sched = pairs_of_kind(_i);
    sim_t s;
    sim_init(&s, NR);
    /* no one out: the view's groups are the schedule's */
    for (uint64_t r = 0; r < 4; r++) {
        shs_group_t a, b;
        ck_assert_int_eq(shs__view_group(&s.v[5], &sched, r, &a), SHS_OK);
        ck_assert_int_eq(shs_schedule_group(&sched, NR, 5, r, &b), SHS_OK);
        ck_assert_int_eq(a.size, b.size);
        ck_assert_mem_eq(a.ranks, b.ranks, (size_t)a.size * sizeof(int));
    }
    /* 4 living (a power of 2 for the hypercube), then 3 (not: it becomes
     * the general schedule), everyone knowing the same */
    const int out[] = {1, 4, 6, 7};
    for (int i = 0; i < 4; i++) {
        s.gone[out[i]] = true;
        for (int r = 0; r < NR; r++)
            shs__view_drop(&s.v[r], out[i], -1, NULL, 0);
        if (i < 3)
            continue;
        for (uint64_t r = 0; r < 6; r++)
            check_groups(&s, &sched, r);
        shs_group_t g;
        ck_assert_int_eq(shs__view_group(&s.v[0], &sched, 0, &g), SHS_OK);
        ck_assert_int_eq(g.size, sched.kind == SHS_SCHED_ALL ? 4 : 2);
    }
    s.gone[5] = true;
    for (int r = 0; r < NR; r++)
        shs__view_drop(&s.v[r], 5, -1, NULL, 0);
    for (uint64_t r = 0; r < 6; r++)
        check_groups(&s, &sched, r);
    shs_group_t g;
    ck_assert_int_eq(shs__view_group(&s.v[2], &sched, 0, &g), SHS_OK);
    if (sched.kind == SHS_SCHED_ALL) {
        ck_assert_int_eq(g.size, 3);
        ck_assert_mem_eq(g.ranks, ((const int[]){0, 2, 3}), 3 * sizeof(int));
        ck_assert_int_eq(g.index, 1);
    }
    sim_fini(&s);
}
END_TEST

/* Rank 0 saw rank 2 go and rank 1 saw rank 5 go: their groups differ
 * until each reads the other's header; then their views are the same and
 * so are their groups. */
START_TEST(test_disagreeing_views_converge)
{
    shs_schedule_t sched;
    memset(&sched, 0, sizeof(sched));
    sched.kind = SHS_SCHED_ALL;
    sim_t s;
    sim_init(&s, 6);
    s.gone[2] = s.gone[5] = true;
    shs__view_drop(&s.v[0], 2, -1, NULL, 0);
    shs__view_drop(&s.v[1], 5, -1, NULL, 0);
    shs_group_t a, b;
    ck_assert_int_eq(shs__view_group(&s.v[0], &sched, 0, &a), SHS_OK);
    ck_assert_int_eq(shs__view_group(&s.v[1], &sched, 0, &b), SHS_OK);
    ck_assert_int_eq(a.size, 5);
    ck_assert_int_eq(b.size, 5);
    ck_assert_int_ne(memcmp(a.ranks, b.ranks, 5 * sizeof(int)), 0);

    ck_assert_int_eq(shs__view_learn(&s.v[0], 1, s.told[1], 1), 1);
    ck_assert_int_eq(shs__view_learn(&s.v[1], 0, s.told[0], 1), 1);
    ck_assert_int_eq(shs__view_learn(&s.v[1], 0, s.told[0], 2), 0); /* nothing new */
    ck_assert_int_eq(memcmp(s.told[0], s.told[1], sizeof(s.told[0])), 0);
    ck_assert_int_eq(s.v[0].ndead, 2);
    ck_assert_int_eq(s.v[1].nfailed, 2);
    ck_assert_int_eq(shs__view_group(&s.v[0], &sched, 2, &a), SHS_OK);
    ck_assert_int_eq(shs__view_group(&s.v[1], &sched, 2, &b), SHS_OK);
    ck_assert_int_eq(a.size, 4);
    ck_assert_int_eq(b.size, 4);
    ck_assert_mem_eq(a.ranks, b.ranks, 4 * sizeof(int));
    ck_assert_mem_eq(a.ranks, ((const int[]){0, 1, 3, 4}), 4 * sizeof(int));

    /* ranks 3 and 4 learn it from either, in one round over all */
    sim_round(&s, &sched, 3);
    check_groups(&s, &sched, 4);
    sim_fini(&s);
}
END_TEST

/* A peer that stopped and then went away is left out but neither counted
 * nor told; a report that names this rank, or that comes from a rank this
 * view left out, changes nothing; the log names the reporter. */
START_TEST(test_ended_self_and_dead_reporter)
{
    sim_t s;
    sim_init(&s, 4);
    shs__view_saw_stopped(&s.v[0], 2, true);
    ck_assert_int_eq(shs__view_drop(&s.v[0], 2, -1, NULL, 7), SHS__VIEW_ENDED);
    ck_assert_int_eq(shs__view_drop(&s.v[0], 2, -1, NULL, 7), SHS__VIEW_SAME);
    ck_assert_int_eq(shs__view_drop(&s.v[0], 0, -1, NULL, 7), SHS__VIEW_SAME);
    ck_assert(shs__view_is_dead(&s.v[0], 2));
    ck_assert_int_eq(s.v[0].ndead, 1);
    ck_assert_int_eq(s.v[0].nfailed, 0);
    ck_assert_uint_eq(s.told[0][2], 0);

    /* rank 1's header reports 2 (which only stopped, for rank 0) and rank 3
     * itself: rank 3 leaves 2 out as failed and itself in */
    static shs__life_t table[SHS__VIEW_TOLD_RANKS];
    memset(table, 0, sizeof(table));
    table[2] = table[3] = 1;
    ck_assert_int_eq(shs__view_learn(&s.v[3], 1, table, 9), 1);
    ck_assert(shs__view_is_dead(&s.v[3], 2));
    ck_assert(!shs__view_is_dead(&s.v[3], 3));
    ck_assert_int_eq(s.v[3].nfailed, 1);
    ck_assert(s.v[3].self_told);
    ck_assert_ptr_nonnull(strstr(captured(), "peer 1 counts this rank as failed"));
    ck_assert_ptr_nonnull(strstr(captured(), "peer 2 failed (reported by peer 1)"));

    /* rank 0 left 2 out: 2's reports are not taken in */
    memset(table, 0, sizeof(table));
    table[1] = 1;
    ck_assert_int_eq(shs__view_learn(&s.v[0], 2, table, 9), 0);
    ck_assert(!shs__view_is_dead(&s.v[0], 1));
    sim_fini(&s);
}
END_TEST

/* Rank 3 fails and rejoins: its new incarnation is taken back from its own
 * header only (gossip marks it to be probed), a report of the old
 * incarnation's failure that arrives afterwards changes nothing, and the
 * views that agree on who lives have the same digest. */
START_TEST(test_rejoin_takes_back)
{
    shs_schedule_t sched = pairs_of_kind(_i);
    sim_t s;
    sim_init(&s, NR);
    uint32_t d_all = shs__view_digest(&s.v[0]);
    for (int r = 1; r < NR; r++)
        ck_assert_uint_eq(shs__view_digest(&s.v[r]), d_all);
    s.gone[3] = true;
    shs__view_drop(&s.v[0], 3, -1, "retry count exceeded", 5);
    int rounds = 0;
    while (!sim_all_know(&s, 3) && rounds < 64)
        sim_round(&s, &sched, (uint64_t)rounds++);
    ck_assert(sim_all_know(&s, 3));
    uint32_t d_without = shs__view_digest(&s.v[0]);
    ck_assert_uint_ne(d_without, d_all);
    ck_assert_uint_eq(shs__view_digest(&s.v[5]), d_without);

    /* the new process: its view from rank 1's table, its next incarnation */
    shs__view_fini(&s.v[3]);
    ck_assert_int_eq(shs__view_init(&s.v[3], 3, NR, s.told[3], &s.ver[3]), SHS_OK);
    shs__view_rejoin(&s.v[3], s.told[1]);
    s.gone[3] = false;
    ck_assert_uint_eq(shs__view_life(&s.v[3], 3), 2);
    ck_assert_uint_eq(s.told[3][3], 2);
    ck_assert_int_eq(s.v[3].ndead, 0);

    /* rank 0 reads its header (life 2): takes it back; an old report
     * (rank 6's table still says 1) changes nothing */
    ck_assert(shs__view_admit(&s.v[0], 3, 2, 40));
    ck_assert(!shs__view_is_dead(&s.v[0], 3));
    ck_assert_int_eq(s.v[0].ndead, 0);
    ck_assert_int_eq(s.v[0].nfailed, 0);
    ck_assert_int_eq(shs__view_learn(&s.v[0], 6, s.told[6], 41), 0);
    ck_assert(!shs__view_is_dead(&s.v[0], 3));
    ck_assert(!shs__view_admit(&s.v[0], 3, 2, 41)); /* once */
    /* rank 6 learns of it from rank 0's table: a probe, not an admission */
    ck_assert_int_eq(shs__view_learn(&s.v[6], 0, s.told[0], 41), 0);
    ck_assert(shs__view_is_dead(&s.v[6], 3));
    ck_assert(s.v[6].probe[3]);
    ck_assert_uint_ne(shs__view_digest(&s.v[6]), shs__view_digest(&s.v[0]));
    for (int r = 1; r < NR; r++)
        if (r != 3)
            ck_assert(shs__view_admit(&s.v[r], 3, 2, 42));
    for (int r = 0; r < NR; r++)
        ck_assert_uint_eq(shs__view_digest(&s.v[r]), shs__view_digest(&s.v[0]));
    /* same ranks living, but a newer incarnation of one: another view */
    ck_assert_uint_ne(shs__view_digest(&s.v[0]), d_all);
    check_groups(&s, &sched, 43);

    /* it fails again: the failure of incarnation 1 (life 3) spreads */
    s.gone[3] = true;
    shs__view_drop(&s.v[1], 3, -1, NULL, 50);
    ck_assert_uint_eq(s.told[1][3], 3);
    rounds = 0;
    while (!sim_all_know(&s, 3) && rounds < 64)
        sim_round(&s, &sched, (uint64_t)(50 + rounds++));
    ck_assert(sim_all_know(&s, 3));
    ck_assert_int_eq(s.v[7].nfailed, 1);
    sim_fini(&s);
}
END_TEST

/* A rank that rejoins before anyone saw it die: its next incarnation is
 * past the one they know (4 after 2), and a peer that never saw it go
 * takes it in from its header as a newer incarnation. */
START_TEST(test_rejoin_unseen_death)
{
    sim_t s;
    sim_init(&s, 4);
    ck_assert(shs__view_admit(&s.v[0], 2, 2, 1)); /* it had rejoined once */
    shs__view_fini(&s.v[2]);
    ck_assert_int_eq(shs__view_init(&s.v[2], 2, 4, s.told[2], &s.ver[2]), SHS_OK);
    shs__view_rejoin(&s.v[2], s.told[0]);
    ck_assert_uint_eq(shs__view_life(&s.v[2], 2), 4);
    ck_assert(shs__view_admit(&s.v[0], 2, 4, 2));
    ck_assert_int_eq(s.v[0].ndead, 0);
    ck_assert_uint_eq(s.told[0][2], 4);
    ck_assert(shs__view_changed(&s.v[0]));
    ck_assert(!shs__view_changed(&s.v[1]));
    sim_fini(&s);
}
END_TEST

Suite *shadow_view_suite(void)
{
    Suite *s = suite_create("shadow_view");
    TCase *tc = tcase_create("view");
    tcase_add_checked_fixture(tc, capture_start, capture_stop); /* quiet, and asserted on */
    tcase_add_loop_test(tc, test_gossip_reaches_everyone, 0, 4);
    tcase_add_loop_test(tc, test_regroup_over_living, 0, 4);
    tcase_add_test(tc, test_disagreeing_views_converge);
    tcase_add_test(tc, test_ended_self_and_dead_reporter);
    tcase_add_loop_test(tc, test_rejoin_takes_back, 0, 4);
    tcase_add_test(tc, test_rejoin_unseen_death);
    suite_add_tcase(s, tc);
    return s;
}

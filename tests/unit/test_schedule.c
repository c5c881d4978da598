/* DS-Sync schedules: partitions, exact hypercube mixing, the general
 * schedule's pair bound, seeded shuffles. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shadowsync/shadowsync.h>

#include "unit.h"

#define NMAX 128

/* Check sends every passing ck_assert to its parent process (a system call
 * each); these loops make millions of checks, so only failures reach Check. */
#define EXPECT(cond, ...)                                                       \
    do {                                                                        \
        if (!(cond))                                                            \
            ck_abort_msg(__VA_ARGS__);                                          \
    } while (0)
#define EXPECT_OK(expr) EXPECT((expr) == SHS_OK, "%s failed", #expr)

static shs_schedule_t sched_of(shs_schedule_kind_t kind, int g, uint64_t seed)
{
    shs_schedule_t s;
    memset(&s, 0, sizeof(s));
    s.kind = kind;
    s.group_size = g;
    s.seed = seed;
    return s;
}

static bool same_members(const shs_group_t *a, const shs_group_t *b)
{
    return a->size == b->size && memcmp(a->ranks, b->ranks, (size_t)a->size * sizeof(int)) == 0;
}

/* Every rank's group in round `round`: a partition, ascending, self at
 * index, members agreeing on the group, sizes as the schedule promises. */
static void assert_partition(const shs_schedule_t *s, int n, uint64_t round)
{
    static shs_group_t grp[NMAX];
    int full = 0, small = 0;
    int cap = s->kind == SHS_SCHED_ALL ? n : s->group_size;

    for (int r = 0; r < n; r++) {
        EXPECT_OK(shs_schedule_group(s, n, r, round, &grp[r]));
        EXPECT(grp[r].size >= 1 && grp[r].size <= (cap < n ? cap : n), "group size %d", grp[r].size);
        EXPECT(grp[r].ranks[grp[r].index] == r, "rank %d not at its index", r);
        for (int k = 0; k < grp[r].size; k++) {
            EXPECT(grp[r].ranks[k] >= 0 && grp[r].ranks[k] < n, "member %d out of range", grp[r].ranks[k]);
            EXPECT(k == 0 || grp[r].ranks[k - 1] < grp[r].ranks[k], "members not ascending");
        }
    }
    for (int r = 0; r < n; r++) {
        for (int k = 0; k < grp[r].size; k++)
            EXPECT(same_members(&grp[r], &grp[grp[r].ranks[k]]),
                          "kind %d g %d n %d round %llu: ranks %d and %d disagree on their group",
                          s->kind, s->group_size, n, (unsigned long long)round, r,
                          grp[r].ranks[k]);
        if (grp[r].index == 0) { /* count each group once */
            if (grp[r].size == (cap < n ? cap : n))
                full++;
            else
                small++;
        }
    }
    /* groups of g, the last one possibly smaller */
    EXPECT(small <= 1, "%d short groups", small);
    EXPECT(full + small == (n + (cap < n ? cap : n) - 1) / (cap < n ? cap : n), "%d groups",
           full + small);
}

START_TEST(test_partition_every_round)
{
    for (int n = 1; n <= 40; n++) {
        for (int g = 1; g <= 9; g++) {
            shs_schedule_t gen = sched_of(SHS_SCHED_GENERAL, g, 0);
            shs_schedule_t rnd = sched_of(SHS_SCHED_RANDOM, g, 0x5eedull * (uint64_t)g);
            int bound = shs_schedule_mix_rounds(&gen, n);
            ck_assert_int_ge(bound, 0);
            for (uint64_t round = 0; round < (uint64_t)(2 * bound + 3); round++)
                assert_partition(&gen, n, round);
            for (uint64_t round = 0; round < 12; round++)
                assert_partition(&rnd, n, round * 977);
        }
        shs_schedule_t all = sched_of(SHS_SCHED_ALL, 0, 0);
        assert_partition(&all, n, 0);
        assert_partition(&all, n, 123456789);
    }
    const int cube[][2] = {{2, 1}, {2, 2}, {2, 8}, {2, 64}, {2, 128}, {4, 4}, {4, 16},
                           {4, 64}, {8, 64}, {16, 16}, {64, 64}};
    for (size_t k = 0; k < sizeof(cube) / sizeof(cube[0]); k++) {
        shs_schedule_t s = sched_of(SHS_SCHED_HYPERCUBE, cube[k][0], 0);
        for (uint64_t round = 0; round < 16; round++)
            assert_partition(&s, cube[k][1], round);
    }
    /* large N: still a partition, computed without tables */
    shs_schedule_t big = sched_of(SHS_SCHED_RANDOM, 4, 7);
    shs_group_t g0, gm;
    ck_assert_int_eq(shs_schedule_group(&big, 100003, 99999, 5, &g0), SHS_OK);
    for (int k = 0; k < g0.size; k++) {
        ck_assert_int_eq(shs_schedule_group(&big, 100003, g0.ranks[k], 5, &gm), SHS_OK);
        ck_assert(same_members(&g0, &gm));
    }
}
END_TEST

/* W_r[i][j] = 1/|group of i| when j is in it: one averaging round. */
static void mixing_matrix(const shs_schedule_t *s, int n, uint64_t round, double *w)
{
    memset(w, 0, sizeof(double) * (size_t)n * (size_t)n);
    for (int i = 0; i < n; i++) {
        shs_group_t grp;
        EXPECT_OK(shs_schedule_group(s, n, i, round, &grp));
        for (int k = 0; k < grp.size; k++)
            w[i * n + grp.ranks[k]] = 1.0 / grp.size;
    }
}

static void matmul(const double *a, const double *b, double *c, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int k = 0; k < n; k++)
                acc += a[i * n + k] * b[k * n + j];
            c[i * n + j] = acc;
        }
}

START_TEST(test_hypercube_exact_average)
{
    const int cube[][2] = {{2, 2}, {2, 4}, {2, 8}, {2, 16}, {2, 32}, {2, 64},
                           {4, 16}, {4, 64}, {8, 64}};
    static double p[64 * 64], w[64 * 64], t[64 * 64];
    for (size_t k = 0; k < sizeof(cube) / sizeof(cube[0]); k++) {
        int g = cube[k][0], n = cube[k][1];
        shs_schedule_t s = sched_of(SHS_SCHED_HYPERCUBE, g, 0);
        int d = shs_schedule_mix_rounds(&s, n);
        int want = 0;
        for (int x = 1; x < n; x *= g)
            want++;
        ck_assert_int_eq(d, want);
        /* from any starting round: log_g N consecutive rounds average exactly */
        for (uint64_t start = 0; start < (uint64_t)d + 2; start++) {
            mixing_matrix(&s, n, start, p);
            for (int r = 1; r < d; r++) {
                mixing_matrix(&s, n, start + (uint64_t)r, w);
                matmul(p, w, t, n);
                memcpy(p, t, sizeof(double) * (size_t)n * (size_t)n);
            }
            for (int i = 0; i < n * n; i++)
                EXPECT(p[i] == 1.0 / n, "g %d n %d start %llu: entry %d is %.17g, not 1/%d",
                              g, n, (unsigned long long)start, i, p[i], n);
            if (d > 1) { /* and one round fewer does not */
                mixing_matrix(&s, n, start, p);
                ck_assert(p[0] != 1.0 / n);
            }
        }
    }
}
END_TEST

/* Every pair shares a group within any window of mix_rounds rounds. */
START_TEST(test_general_pair_bound)
{
    static unsigned char met[NMAX][NMAX];
    for (int n = 2; n <= 40; n++) {
        for (int g = 2; g <= 9; g++) {
            shs_schedule_t s = sched_of(SHS_SCHED_GENERAL, g, 0);
            int bound = shs_schedule_mix_rounds(&s, n);
            ck_assert_int_ge(bound, 1);
            if (g < n)
                ck_assert_int_ge(bound, (n - 1 + g - 2) / (g - 1)); /* a rank meets g-1 per round */
            const uint64_t starts[] = {0, 1, (uint64_t)bound - 1, 7 * (uint64_t)bound + 3, 1000003};
            for (size_t k = 0; k < sizeof(starts) / sizeof(starts[0]); k++) {
                memset(met, 0, sizeof(met));
                for (uint64_t r = starts[k]; r < starts[k] + (uint64_t)bound; r++)
                    for (int i = 0; i < n; i++) {
                        shs_group_t grp;
                        EXPECT_OK(shs_schedule_group(&s, n, i, r, &grp));
                        for (int m = 0; m < grp.size; m++)
                            met[i][grp.ranks[m]] = 1;
                    }
                for (int i = 0; i < n; i++)
                    for (int j = 0; j < n; j++)
                        EXPECT(met[i][j], "n %d g %d: ranks %d and %d never share a group "
                                      "in rounds %llu..+%d", n, g, i, j,
                                      (unsigned long long)starts[k], bound);
            }
        }
    }
}
END_TEST

/* Small N, every g: each round of the general schedule is a partition
 * (every rank in exactly one group, at most g members, each member reporting
 * the same group) and, with g < N, not the partition of the round before. */
START_TEST(test_general_partition_reshuffles)
{
    static shs_group_t cur[16], prev[16];
    for (int n = 2; n <= 16; n++) {
        for (int g = 2; g <= (n < 8 ? n : 8); g++) {
            shs_schedule_t s = sched_of(SHS_SCHED_GENERAL, g, 0);
            int bound = shs_schedule_mix_rounds(&s, n);
            ck_assert_int_ge(bound, 1);
            const uint64_t starts[] = {0, 1000003};
            for (size_t k = 0; k < sizeof(starts) / sizeof(starts[0]); k++) {
                for (uint64_t r = starts[k]; r < starts[k] + 2 * (uint64_t)bound + 3; r++) {
                    int owner[16];
                    for (int i = 0; i < n; i++)
                        owner[i] = -1;
                    for (int i = 0; i < n; i++) {
                        EXPECT_OK(shs_schedule_group(&s, n, i, r, &cur[i]));
                        EXPECT(cur[i].size >= 1 && cur[i].size <= g, "n %d g %d round %llu: "
                               "group of %d has %d members", n, g, (unsigned long long)r, i,
                               cur[i].size);
                        EXPECT(cur[i].ranks[cur[i].index] == i, "rank %d not at its index", i);
                    }
                    for (int i = 0; i < n; i++)
                        for (int m = 0; m < cur[i].size; m++) {
                            int j = cur[i].ranks[m];
                            EXPECT(j >= 0 && j < n, "member %d out of range", j);
                            EXPECT(same_members(&cur[i], &cur[j]), "n %d g %d round %llu: ranks "
                                   "%d and %d disagree on their group", n, g,
                                   (unsigned long long)r, i, j);
                            EXPECT(owner[j] == -1 || owner[j] == cur[i].ranks[0],
                                   "rank %d in two groups", j);
                            owner[j] = cur[i].ranks[0];
                        }
                    for (int i = 0; i < n; i++)
                        EXPECT(owner[i] != -1, "rank %d in no group", i);
                    if (g < n && r > starts[k]) {
                        bool same = true;
                        for (int i = 0; i < n && same; i++)
                            same = same_members(&cur[i], &prev[i]);
                        EXPECT(!same, "n %d g %d: round %llu repeats the partition of the "
                               "round before", n, g, (unsigned long long)r);
                    }
                    memcpy(prev, cur, sizeof(cur));
                }
            }
        }
    }
}
END_TEST

/* A rank alone synchronizes with nobody. With N > g >= 2 a group of one
 * exists only when g divides N - 1, exactly one, rank (round mod M): no
 * rank is alone twice in any N - 1 consecutive rounds (so never in two
 * consecutive ones), across lap boundaries too. */
START_TEST(test_general_alone_rotates)
{
    for (int n = 3; n <= 40; n++) {
        for (int g = 2; g < n && g <= 9; g++) {
            shs_schedule_t s = sched_of(SHS_SCHED_GENERAL, g, 0);
            int bound = shs_schedule_mix_rounds(&s, n);
            const uint64_t starts[] = {0, 1000003, (uint64_t)1 << 40};
            for (size_t k = 0; k < sizeof(starts) / sizeof(starts[0]); k++) {
                uint64_t last[NMAX];
                bool was_alone[NMAX] = {false};
                for (uint64_t r = starts[k]; r < starts[k] + 3 * (uint64_t)bound + 3; r++) {
                    int alone = 0;
                    for (int i = 0; i < n; i++) {
                        shs_group_t grp;
                        EXPECT_OK(shs_schedule_group(&s, n, i, r, &grp));
                        if (grp.size != 1)
                            continue;
                        alone++;
                        int m = n % 2 == 1 ? n : n - 1; /* as schedule.h promises */
                        EXPECT((uint64_t)i == r % (uint64_t)m, "n %d g %d round %llu: rank %d "
                               "alone, not %llu", n, g, (unsigned long long)r, i,
                               (unsigned long long)(r % (uint64_t)m));
                        EXPECT(!was_alone[i] || r - last[i] >= (uint64_t)(n - 1),
                               "n %d g %d: rank %d alone in rounds %llu and %llu", n, g, i,
                               (unsigned long long)last[i], (unsigned long long)r);
                        was_alone[i] = true;
                        last[i] = r;
                    }
                    EXPECT(alone == ((n - 1) % g == 0 ? 1 : 0),
                           "n %d g %d round %llu: %d ranks alone", n, g,
                           (unsigned long long)r, alone);
                }
            }
        }
    }
}
END_TEST

static double sq_dev(const double *x, int n)
{
    double mean = 0, d = 0;
    for (int i = 0; i < n; i++)
        mean += x[i] / n;
    for (int i = 0; i < n; i++)
        d += (x[i] - mean) * (x[i] - mean);
    return d;
}

static void average_round(const shs_schedule_t *s, int n, uint64_t round, double *x)
{
    double y[NMAX];
    for (int i = 0; i < n; i++) {
        shs_group_t grp;
        double acc = 0;
        EXPECT_OK(shs_schedule_group(s, n, i, round, &grp));
        for (int m = 0; m < grp.size; m++)
            acc += x[grp.ranks[m]];
        y[i] = acc / grp.size;
    }
    memcpy(x, y, sizeof(double) * (size_t)n);
}

/* N = g + 1: each round averages all ranks but one. After any round, g ranks
 * hold a and one holds b, with sum of squared deviations 3/4 (b - a)^2 for
 * g = 3 (in general g/(g+1) (b - a)^2). If the next round leaves out another
 * rank, b joins g - 1 of the a's: the gap becomes (b - a)/g, the deviation
 * shrinks by exactly g^2. Leaving out the same rank again changes nothing.
 * From x_k = k on 4 ranks (deviation 5), round 0 gives 3 and four more
 * rounds 3/9^4 = 4.6e-4 < 1e-3; one repeat in those rounds leaves 4.1e-3. */
START_TEST(test_general_mixes)
{
    for (int g = 3; g <= 8; g++) {
        int n = g + 1;
        shs_schedule_t s = sched_of(SHS_SCHED_GENERAL, g, 0);
        int bound = shs_schedule_mix_rounds(&s, n);
        const uint64_t starts[] = {0, 1, (uint64_t)bound / 2 - 1, (uint64_t)bound - 1, 1000003};
        for (size_t k = 0; k < sizeof(starts) / sizeof(starts[0]); k++) {
            double x[NMAX] = {1}; /* one-hot: after a round a != b (x_k = k can give a == b) */
            average_round(&s, n, starts[k], x);
            for (uint64_t r = starts[k] + 1; r < starts[k] + 2 * (uint64_t)bound + 2; r++) {
                /* averaging commutes with x -> (x - mean) / scale: rescale to
                 * deviation 1 so rounding never reaches the ratio */
                double mean = 0, scale = sqrt(sq_dev(x, n));
                for (int i = 0; i < n; i++)
                    mean += x[i] / n;
                for (int i = 0; i < n; i++)
                    x[i] = (x[i] - mean) / scale;
                average_round(&s, n, r, x);
                double after = sq_dev(x, n);
                EXPECT(after <= 1.0 / (g * g) * (1 + 1e-9),
                       "n %d g %d round %llu: deviation 1 -> %.3g, not reduced %d-fold", n, g,
                       (unsigned long long)r, after, g * g);
            }
        }
    }
    shs_schedule_t s = sched_of(SHS_SCHED_GENERAL, 3, 0);
    double x[4] = {0, 1, 2, 3};
    for (uint64_t r = 0; r < 5; r++)
        average_round(&s, 4, r, x);
    ck_assert_msg(sq_dev(x, 4) < 1e-3, "4 ranks g 3: deviation %.3g after 5 rounds",
                  sq_dev(x, 4));
}
END_TEST

START_TEST(test_random_seeded)
{
    const int n = 16, g = 4;
    shs_schedule_t a = sched_of(SHS_SCHED_RANDOM, g, 42), b = sched_of(SHS_SCHED_RANDOM, g, 42);
    shs_schedule_t c = sched_of(SHS_SCHED_RANDOM, g, 43);
    int differ_seed = 0, differ_round = 0;
    for (uint64_t round = 0; round < 50; round++) {
        for (int r = 0; r < n; r++) {
            shs_group_t ga, gb, gc, gn;
            ck_assert_int_eq(shs_schedule_group(&a, n, r, round, &ga), SHS_OK);
            ck_assert_int_eq(shs_schedule_group(&b, n, r, round, &gb), SHS_OK);
            ck_assert_int_eq(shs_schedule_group(&c, n, r, round, &gc), SHS_OK);
            ck_assert_int_eq(shs_schedule_group(&a, n, r, round + 1, &gn), SHS_OK);
            ck_assert(same_members(&ga, &gb) && ga.index == gb.index);
            differ_seed += !same_members(&ga, &gc);
            differ_round += !same_members(&ga, &gn);
        }
    }
    ck_assert_int_gt(differ_seed, 50 * n / 2);
    ck_assert_int_gt(differ_round, 50 * n / 2);

    /* A pinned value: ranks running different builds must agree, so the
     * shuffle of a given seed never changes silently. */
    shs_schedule_t pin = sched_of(SHS_SCHED_RANDOM, 2, 42);
    int partner[8];
    for (int r = 0; r < 8; r++) {
        shs_group_t grp;
        ck_assert_int_eq(shs_schedule_group(&pin, 8, r, 3, &grp), SHS_OK);
        partner[r] = grp.ranks[1 - grp.index];
    }
    const int want[8] = {6, 7, 5, 4, 3, 2, 0, 1};
    for (int r = 0; r < 8; r++)
        ck_assert_int_eq(partner[r], want[r]);

    /* over many rounds every pair meets (mixing), with about the expected
     * frequency (g-1)/(n-1) per round */
    static int meet[16][16];
    memset(meet, 0, sizeof(meet));
    for (uint64_t round = 0; round < 3000; round++)
        for (int r = 0; r < n; r++) {
            shs_group_t grp;
            EXPECT_OK(shs_schedule_group(&a, n, r, round, &grp));
            for (int m = 0; m < grp.size; m++)
                meet[r][grp.ranks[m]]++;
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j) /* expected 600; 6 sigma is about 130 */
                ck_assert_msg(meet[i][j] > 450 && meet[i][j] < 750, "pair %d,%d met %d times",
                              i, j, meet[i][j]);
}
END_TEST

START_TEST(test_bounds_and_bad_input)
{
    shs_schedule_t all = sched_of(SHS_SCHED_ALL, 0, 0);
    shs_schedule_t cube = sched_of(SHS_SCHED_HYPERCUBE, 2, 0);
    shs_schedule_t cube4 = sched_of(SHS_SCHED_HYPERCUBE, 4, 0);
    shs_schedule_t gen = sched_of(SHS_SCHED_GENERAL, 2, 0);
    shs_schedule_t gen3 = sched_of(SHS_SCHED_GENERAL, 3, 0);
    shs_schedule_t rnd = sched_of(SHS_SCHED_RANDOM, 2, 1);
    shs_group_t grp;

    ck_assert_int_eq(shs_schedule_mix_rounds(&all, 8), 1);
    ck_assert_int_eq(shs_schedule_mix_rounds(&cube, 8), 3);
    ck_assert_int_eq(shs_schedule_mix_rounds(&cube4, 64), 3);
    ck_assert_int_eq(shs_schedule_mix_rounds(&cube, 1), 1);
    ck_assert_int_eq(shs_schedule_mix_rounds(&gen, 8), 7);
    ck_assert_int_eq(shs_schedule_mix_rounds(&gen, 7), 7);
    ck_assert_int_eq(shs_schedule_mix_rounds(&gen3, 8), 14);
    ck_assert_int_eq(shs_schedule_mix_rounds(&rnd, 8), 0);

    ck_assert_int_lt(shs_schedule_mix_rounds(&cube, 6), 0);   /* not a power of g */
    ck_assert_int_lt(shs_schedule_mix_rounds(&cube4, 8), 0);
    ck_assert_int_lt(shs_schedule_mix_rounds(&all, SHS_GROUP_MAX + 1), 0);
    ck_assert_int_lt(shs_schedule_mix_rounds(NULL, 8), 0);
    ck_assert_int_eq(shs_schedule_group(&cube, 6, 0, 0, &grp), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs_schedule_group(&gen, 8, 8, 0, &grp), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs_schedule_group(&gen, 8, -1, 0, &grp), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs_schedule_group(&gen, 8, 0, 0, NULL), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs_schedule_group(&gen, 0, 0, 0, &grp), SHS_ERR_INVALID_ARG);
    shs_schedule_t bad = sched_of(SHS_SCHED_GENERAL, SHS_GROUP_MAX + 1, 0);
    ck_assert_int_eq(shs_schedule_group(&bad, 100, 0, 0, &grp), SHS_ERR_INVALID_ARG);
    bad = sched_of(SHS_SCHED_HYPERCUBE, 3, 0);
    ck_assert_int_eq(shs_schedule_group(&bad, 9, 0, 0, &grp), SHS_ERR_INVALID_ARG);
    bad = sched_of((shs_schedule_kind_t)99, 2, 0);
    ck_assert_int_eq(shs_schedule_group(&bad, 4, 0, 0, &grp), SHS_ERR_INVALID_ARG);

    /* the hypercube's rounds walk the dimensions: rank 5 of 8 meets 4, 7, 1 */
    const int partner[3] = {4, 7, 1};
    for (int r = 0; r < 6; r++) {
        ck_assert_int_eq(shs_schedule_group(&cube, 8, 5, (uint64_t)r, &grp), SHS_OK);
        ck_assert_int_eq(grp.size, 2);
        ck_assert_int_eq(grp.ranks[1 - grp.index], partner[r % 3]);
    }
}
END_TEST

Suite *schedule_suite(void)
{
    Suite *s = suite_create("schedule");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_partition_every_round);
    tcase_add_test(tc, test_hypercube_exact_average);
    tcase_add_test(tc, test_general_pair_bound);
    tcase_add_test(tc, test_general_partition_reshuffles);
    tcase_add_test(tc, test_general_alone_rotates);
    tcase_add_test(tc, test_general_mixes);
    tcase_add_test(tc, test_random_seeded);
    tcase_add_test(tc, test_bounds_and_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

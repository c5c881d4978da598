/*
 * Guest test of the collectives (and of the transport's channel-filtered
 * immediates they rely on). One rank per process, started by
 * tools/shs-launch (SHS_RANK, SHS_SIZE, SHS_BOOTSTRAP in the environment):
 *
 *   shs_test_coll allreduce [--big] [--large]   every count class (0, 1,
 *                 N-1, N, N+1, primes, chunk boundaries), float32 and float64,
 *                 sum and average, staged and zero-copy, all ranks and two
 *                 concurrent subgroups, against a reference computed here;
 *                 --big adds 1 Mi + 3 elements (several chunks per segment),
 *                 --large 64 Mi float32 elements (256 MiB per rank, zero-copy)
 *   shs_test_coll bf16     a collective with SHS_WIRE_BF16: float32 sums and
 *                 averages of values of mixed magnitude and sign (some made to
 *                 cancel), staged and zero-copy, all ranks and concurrent
 *                 subgroups, each element within collective.h's bound of the
 *                 exact result and bit-identical on every member; half the
 *                 bytes of a native call; float64 refused without poisoning
 *   shs_test_coll dssync   3 rounds of the hypercube schedule with g = 2 on
 *                 8 ranks holding 0..7: every element of every rank is exactly
 *                 3.5; then 8 rounds of the general and random schedules,
 *                 compared with a simulation of the schedule
 *   shs_test_coll imm      shs_poll_imm_match / shs_wait_imm_match: channels
 *                 taken out of order, order kept within a channel
 *   shs_test_coll errors   bad arguments, a peer that does not join (timeout,
 *                 then the collective refuses further calls), parameters that
 *                 differ between ranks
 *   shs_test_coll mismatch [count|small|passes|dtype|op|group]
 *                 members that disagree on the count (rank 0 passes
 *                 1000 elements, the others 2000; counts below the group size;
 *                 a staged call of several passes), the dtype, the op and the
 *                 group (a rotation: same neighbours, other segments): every
 *                 rank gets SHS_ERR_SIZE_MISMATCH well before the timeout;
 *                 the collective then refuses further calls
 *                 (SHS_ERR_BAD_STATE) and a new one works
 *   shs_test_coll channels two collectives on one context take different
 *                 channels (an explicit channel equal to either is refused
 *                 on every rank, also when only one rank collides) and work
 *                 interleaved
 *   shs_test_coll beside-shadow  while a shadow engine runs its rounds
 *                 (ring path, on its own endpoint), collectives on the same
 *                 context work and are exact; the engine syncs meanwhile,
 *                 and its finish leaves the model at the ranks' mean
 *
 * Reference values: inputs are small integers, so every float32/float64 sum
 * is exact and compared with ==; an average is the exact sum times the
 * rounded 1/n and must be within 2 ulp of sum / n (4e-7 relative for
 * float32, 1e-15 for float64).
 *
 * Exit status: 0 pass, 1 fail, 77 no RDMA device.
 */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shadowsync/shadowsync.h>

#include "harness.h"

/* Input of rank r at element i: a small integer in -8..8, different per
 * rank and position so a misplaced chunk shows. */
static int input(int r, size_t i)
{
    return (int)((i * 7 + (size_t)r * 13 + (i >> 10) * 3) % 17) - 8;
}

/* ---------------------------------------------------------------- allreduce */

typedef struct buffers {
    shs_region_t *region;  /* zero-copy path */
    void *plain;           /* staged path: ordinary memory */
    size_t cap;            /* bytes of each */
} buffers_t;

static void fill(void *buf, shs_dtype_t dt, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == SHS_DTYPE_FLOAT32)
            ((float *)buf)[i] = (float)input(rank, i);
        else
            ((double *)buf)[i] = (double)input(rank, i);
    }
}

static void verify(const void *buf, shs_dtype_t dt, shs_reduce_t op, size_t count,
                   const int *members, int n, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        long sum = 0;
        for (int k = 0; k < n; k++)
            sum += input(members[k], i);
        double got = dt == SHS_DTYPE_FLOAT32 ? (double)((const float *)buf)[i]
                                              : ((const double *)buf)[i];
        bool ok;
        if (op == SHS_REDUCE_SUM) {
            ok = got == (double)sum;
        } else {
            double want = (double)sum / n;
            double tol = (dt == SHS_DTYPE_FLOAT32 ? 4e-7 : 1e-15) * fabs(want);
            ok = fabs(got - want) <= tol;
        }
        if (!ok)
            fail("%s: element %zu of %zu is %.9g, expected %s %ld over %d ranks", what, i,
                 count, got, op == SHS_REDUCE_SUM ? "sum" : "average of sum", sum, n);
    }
}

static void one_allreduce(shs_coll_t *coll, const shs_group_t *group, const int *members,
                          int n, buffers_t *b, size_t count, shs_dtype_t dt, shs_reduce_t op,
                          bool staged)
{
    size_t es = shs_dtype_size(dt);
    if (count * es > b->cap)
        fail("test buffer too small for %zu elements", count);
    size_t off = staged ? 0 : es; /* exercise a non-zero region offset too */
    if (!staged && off + count * es > b->cap)
        off = 0;
    void *buf = staged ? b->plain : (char *)shs_region_addr(b->region) + off;
    fill(buf, dt, count, g_rank);
    /* a guard element after the range must survive */
    size_t guard_at = off + count * es;
    bool guard = !staged && guard_at + es <= b->cap;
    if (guard)
        memset((char *)shs_region_addr(b->region) + guard_at, 0x5a, es);
    if (staged)
        CHECK_OK(shs_allreduce(coll, group, buf, count, dt, op));
    else
        CHECK_OK(shs_allreduce_region(coll, group, b->region, off, count, dt, op));
    char what[160];
    snprintf(what, sizeof(what), "%s %s %s of %zu over %d ranks", staged ? "staged" : "region",
             dt == SHS_DTYPE_FLOAT32 ? "f32" : "f64", op == SHS_REDUCE_SUM ? "sum" : "avg",
             count, n);
    verify(buf, dt, op, count, members, n, what);
    if (guard) {
        const unsigned char *g = (const unsigned char *)shs_region_addr(b->region) + guard_at;
        for (size_t k = 0; k < es; k++)
            if (g[k] != 0x5a)
                fail("%s: wrote past the end of the range", what);
    }
}

/* The ranks of this rank's parity, in descending order (the ring follows
 * the list): two disjoint groups that run concurrently. */
static shs_group_t parity_group(int n)
{
    shs_group_t grp = {.size = 0};
    for (int r = n - 1; r >= 0; r--)
        if (r % 2 == g_rank % 2) {
            if (r == g_rank)
                grp.index = grp.size;
            grp.ranks[grp.size++] = r;
        }
    return grp;
}

static void case_allreduce(shs_ctx_t *ctx, bool big_count, bool large)
{
    int n = shs_ctx_size(ctx);
    shs_coll_t *coll;
    CHECK_OK(shs_coll_create(ctx, NULL, &coll));
    /* counts around the chunk size (SHS_COLL_CHUNK as bytes or with a k suffix) */
    const char *c = getenv("SHS_COLL_CHUNK");
    size_t chunk_f64 = (c != NULL ? strtoul(c, NULL, 10) * (strchr(c, 'k') ? 1024 : 1)
                                  : 256 * 1024) / sizeof(double);
    const size_t big = ((size_t)1 << 20) + 3;
    buffers_t b;
    b.cap = big * sizeof(double) + 64;
    CHECK_OK(shs_region_alloc(ctx, b.cap, SHS_ACCESS_LOCAL_WRITE, &b.region));
    b.plain = malloc(b.cap);
    if (b.plain == NULL)
        fail("malloc");

    int all[SHS_GROUP_MAX];
    for (int r = 0; r < n; r++)
        all[r] = r;
    const size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n, (size_t)n + 1, 7, 97, 1009,
                             4099, chunk_f64 - 1, chunk_f64 * (size_t)n + 1,
                             2 * chunk_f64 * (size_t)n + 17, 65537, big_count ? big : 0};
    double t0 = now_s();
    /* Every count once with a (type, op, path) that rotates with it, so
     * that each combination meets every count class over the N values; the
     * chunk-boundary counts with all four (type, op) pairs. Calls are
     * latency-bound here: the number of calls is what costs time. */
    const size_t ncounts = sizeof(counts) / sizeof(counts[0]);
    for (size_t k = 0; k < ncounts; k++) {
        bool all_combos = k >= 9 && k <= 11;
        for (unsigned v = 0; v < 4; v++) {
            unsigned combo = (unsigned)(k + (size_t)n + v) % 4;
            if (v > 0 && !all_combos)
                break;
            one_allreduce(coll, NULL, all, n, &b, counts[k], (shs_dtype_t)(combo & 1),
                          (shs_reduce_t)(combo >> 1), (k + v + (size_t)n) % 2 == 0);
        }
    }
    if (g_rank == 0)
        printf("rank 0: %d ranks, all counts ok (%.1f s)\n", n, now_s() - t0);

    /* a subgroup of the even ranks and one of the odd ranks, concurrently,
     * listed in descending order (the ring follows the list) */
    if (n >= 3) {
        shs_group_t grp = parity_group(n);
        for (size_t k = 1; k < ncounts - 1; k += 2) /* the heavy count not again */
            one_allreduce(coll, &grp, grp.ranks, grp.size, &b, counts[k], SHS_DTYPE_FLOAT32,
                          SHS_REDUCE_SUM, k % 4 == 1);
        if (g_rank == 0)
            printf("rank 0: concurrent subgroups of %d ok\n", grp.size);
    }
    CHECK_OK(shs_ctx_barrier(ctx));

    if (large) {
        /* 64 Mi float32 elements, zero-copy (the staged path's passes are
         * covered with a small SHS_COLL_STAGE in another test) */
        const size_t huge = (size_t)64 << 20;
        shs_region_t *hr;
        CHECK_OK(shs_region_alloc(ctx, huge * sizeof(float), SHS_ACCESS_LOCAL_WRITE, &hr));
        buffers_t hb = {.region = hr, .plain = NULL, .cap = huge * sizeof(float)};
        double t1 = now_s();
        one_allreduce(coll, NULL, all, n, &hb, huge, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM, false);
        if (g_rank == 0)
            printf("rank 0: 64 Mi float32 elements (zero-copy) ok in %.1f s\n", now_s() - t1);
        CHECK_OK(shs_ctx_barrier(ctx));
        shs_region_destroy(hr);
    }

    shs_coll_stats_t stats;
    CHECK_OK(shs_coll_get_stats(coll, &stats));
    if (stats.calls == 0 || stats.bytes_sent == 0)
        fail("stats report no traffic");
    CHECK_OK(shs_ctx_barrier(ctx));
    free(b.plain);
    shs_region_destroy(b.region);
    shs_coll_destroy(coll);
}

/* --------------------------------------------------------------------- bf16 */

/* Input of rank r at element i for the bf16 test: a float of 24 significant
 * bits between about 2^-6 and 2^18 in magnitude, of either sign; at every
 * fifth element the ranks cancel pairwise (r odd holds minus r - 1's). */
static float input_wide(int r, size_t i)
{
    if (i % 5 == 0 && r % 2 == 1)
        return -input_wide(r - 1, i);
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull + (uint64_t)r * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 32;
    float m = (float)(h & 0xffffffu) / (float)(1u << 24) + 0.5f; /* 0.5 .. 1.5 */
    float v = ldexpf(m, (int)((h >> 24) % 25) - 6);
    return (h >> 40) & 1 ? -v : v;
}

/* Every element within n (2^-8 + 2^-23) (1 + 2^-7)^n sum |x| of the exact
 * sum (over n for an average), and the same on every member: the sums of
 * the results and of their squares over the group (native float64, exact
 * for equal bf16 values) are n times this rank's. */
static void verify_bf16(shs_coll_t *exact, const shs_group_t *group, const float *got,
                        size_t count, shs_reduce_t op, const int *members, int n,
                        const char *what)
{
    double factor = n * (ldexp(1.0, -8) + ldexp(1.0, -23)) * pow(1 + ldexp(1.0, -7), n);
    double div = op == SHS_REDUCE_AVG ? n : 1, worst = 0;
    double *chk = malloc(2 * count * sizeof(double));
    if (chk == NULL)
        fail("malloc");
    for (size_t i = 0; i < count; i++) {
        double sum = 0, abs_sum = 0;
        for (int k = 0; k < n; k++) {
            float x = input_wide(members[k], i);
            sum += x;
            abs_sum += fabs(x);
        }
        double err = fabs((double)got[i] - sum / div), bound = factor * abs_sum / div;
        if (!(err <= bound))
            fail("%s: element %zu is %.9g, exact %.9g: off by %.3g, bound %.3g", what, i,
                 (double)got[i], sum / div, err, bound);
        if (abs_sum > 0 && err / (abs_sum / div) > worst)
            worst = err / (abs_sum / div);
        chk[i] = got[i];
        chk[count + i] = (double)got[i] * got[i];
    }
    CHECK_OK(shs_allreduce(exact, group, chk, 2 * count, SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM));
    for (size_t i = 0; i < count; i++)
        if (chk[i] != n * (double)got[i] || chk[count + i] != n * (double)got[i] * got[i])
            fail("%s: element %zu differs between members (this rank %.9g)", what, i,
                 (double)got[i]);
    free(chk);
    if (g_rank == 0 && count > 1000)
        printf("rank 0: %s ok, worst error %.3g of sum |x| (bound %.3g)\n", what, worst,
               factor);
}

static void bf16_allreduce(shs_coll_t *coll, shs_coll_t *exact, const shs_group_t *group,
                           const int *members, int n, shs_region_t *reg, float *plain,
                           size_t count, shs_reduce_t op, bool staged)
{
    float *buf = staged ? plain : shs_region_addr(reg);
    for (size_t i = 0; i < count; i++)
        buf[i] = input_wide(g_rank, i);
    if (staged)
        CHECK_OK(shs_allreduce(coll, group, buf, count, SHS_DTYPE_FLOAT32, op));
    else
        CHECK_OK(shs_allreduce_region(coll, group, reg, 0, count, SHS_DTYPE_FLOAT32, op));
    char what[160];
    snprintf(what, sizeof(what), "bf16 wire, %s %s of %zu over %d ranks",
             staged ? "staged" : "region", op == SHS_REDUCE_SUM ? "sum" : "avg", count, n);
    verify_bf16(exact, group, buf, count, op, members, n, what);
}

static void case_bf16(shs_ctx_t *ctx)
{
    int n = shs_ctx_size(ctx);
    shs_coll_t *coll, *exact;
    shs_coll_params_t p = {.field_mask = SHS_COLL_PARAM_WIRE, .wire = SHS_WIRE_BF16};
    CHECK_OK(shs_coll_create(ctx, &p, &coll));
    /* the checks (one staged pass each), and the byte count */
    shs_coll_params_t ep = {.field_mask = SHS_COLL_PARAM_STAGE_BYTES, .stage_bytes = 8u << 20};
    CHECK_OK(shs_coll_create(ctx, &ep, &exact));
    const size_t counts[] = {1, (size_t)n + 1, 4099, 65537, 300001};
    const size_t ncounts = sizeof(counts) / sizeof(counts[0]);
    size_t cap = counts[ncounts - 1] * sizeof(double);
    shs_region_t *reg;
    CHECK_OK(shs_region_alloc(ctx, cap, SHS_ACCESS_LOCAL_WRITE, &reg));
    float *plain = malloc(cap);
    if (plain == NULL)
        fail("malloc");
    int all[SHS_GROUP_MAX];
    for (int r = 0; r < n; r++)
        all[r] = r;
    for (size_t k = 0; k < ncounts; k++)
        for (unsigned v = 0; v < 2; v++)
            bf16_allreduce(coll, exact, NULL, all, n, reg, plain, counts[k],
                           (shs_reduce_t)((k + v) % 2), (k / 2 + v) % 2 == 1);
    if (n >= 3) {
        shs_group_t grp = parity_group(n);
        for (size_t k = 1; k < ncounts; k++)
            bf16_allreduce(coll, exact, &grp, grp.ranks, grp.size, reg, plain, counts[k],
                           (shs_reduce_t)(k % 2), k % 2 == 0);
    }

    /* half the bytes of the same call on a native wire */
    shs_coll_stats_t a0, a1, b0, b1;
    CHECK_OK(shs_coll_get_stats(coll, &a0));
    CHECK_OK(shs_coll_get_stats(exact, &b0));
    CHECK_OK(shs_allreduce_region(coll, NULL, reg, 0, 65537, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM));
    CHECK_OK(shs_allreduce_region(exact, NULL, reg, 0, 65537, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM));
    CHECK_OK(shs_coll_get_stats(coll, &a1));
    CHECK_OK(shs_coll_get_stats(exact, &b1));
    if (2 * (a1.bytes_sent - a0.bytes_sent) != b1.bytes_sent - b0.bytes_sent)
        fail("bf16 call sent %llu bytes, native %llu: expected half",
             (unsigned long long)(a1.bytes_sent - a0.bytes_sent),
             (unsigned long long)(b1.bytes_sent - b0.bytes_sent));

    /* float64 is refused, and the collective still works */
    if (shs_allreduce(coll, NULL, plain, 16, SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM) !=
        SHS_ERR_UNSUPPORTED)
        fail("float64 on a bf16 wire was not refused");
    bf16_allreduce(coll, exact, NULL, all, n, reg, plain, 4099, SHS_REDUCE_SUM, false);
    if (g_rank == 0)
        printf("rank 0: bf16 wire on %d ranks: all counts within the bound, identical on "
               "every member, half the bytes\n", n);
    CHECK_OK(shs_ctx_barrier(ctx));
    free(plain);
    shs_region_destroy(reg);
    shs_coll_destroy(exact);
    shs_coll_destroy(coll);
}

/* ------------------------------------------------------------------- dssync */

/* Run `rounds` rounds of averaging in the groups of sched and compare every
 * element with the same rounds simulated here for all ranks. */
static void run_schedule(shs_ctx_t *ctx, shs_coll_t *coll, const shs_schedule_t *sched,
                         int rounds, size_t count, const char *name)
{
    int n = shs_ctx_size(ctx);
    double *mine = malloc(count * sizeof(double));
    double sim[SHS_GROUP_MAX], next[SHS_GROUP_MAX];
    if (mine == NULL)
        fail("malloc");
    for (size_t i = 0; i < count; i++)
        mine[i] = g_rank + (double)(i % 5) * 8; /* rank r: r, r+8, ... */
    for (int r = 0; r < n; r++)
        sim[r] = r;
    for (int round = 0; round < rounds; round++) {
        shs_group_t grp;
        CHECK_OK(shs_schedule_group(sched, n, g_rank, (uint64_t)round, &grp));
        CHECK_OK(shs_allreduce(coll, &grp, mine, count, SHS_DTYPE_FLOAT64, SHS_REDUCE_AVG));
        for (int r = 0; r < n; r++) {
            shs_group_t gr;
            CHECK_OK(shs_schedule_group(sched, n, r, (uint64_t)round, &gr));
            double s = 0;
            for (int k = 0; k < gr.size; k++)
                s += sim[gr.ranks[k]];
            next[r] = s / gr.size;
        }
        memcpy(sim, next, sizeof(sim));
        for (size_t i = 0; i < count; i++) {
            double want = sim[g_rank] + (double)(i % 5) * 8;
            if (fabs(mine[i] - want) > 1e-12 * (fabs(want) + 1))
                fail("%s round %d: element %zu is %.17g, expected %.17g", name, round, i,
                     mine[i], want);
        }
    }
    free(mine);
}

static void case_dssync(shs_ctx_t *ctx)
{
    int n = shs_ctx_size(ctx);
    shs_coll_t *coll;
    CHECK_OK(shs_coll_create(ctx, NULL, &coll));

    /* the check: 3 hypercube rounds, g = 2, values 0..7 -> 3.5 */
    if (n == 8) {
        const size_t count = 100003;
        float *v = malloc(count * sizeof(float));
        if (v == NULL)
            fail("malloc");
        for (size_t i = 0; i < count; i++)
            v[i] = (float)g_rank;
        shs_schedule_t cube = {.kind = SHS_SCHED_HYPERCUBE, .group_size = 2};
        int rounds = shs_schedule_mix_rounds(&cube, n);
        if (rounds != 3)
            fail("hypercube mix rounds %d, expected 3", rounds);
        for (int round = 0; round < rounds; round++) {
            shs_group_t grp;
            CHECK_OK(shs_schedule_group(&cube, n, g_rank, (uint64_t)round, &grp));
            CHECK_OK(shs_allreduce(coll, &grp, v, count, SHS_DTYPE_FLOAT32, SHS_REDUCE_AVG));
        }
        for (size_t i = 0; i < count; i++)
            if (v[i] != 3.5f)
                fail("after 3 DS-Sync rounds element %zu is %.9g, not exactly 3.5", i, v[i]);
        if (g_rank == 0)
            printf("rank 0: 3 hypercube rounds g=2 on 8 ranks: every element exactly 3.5\n");
        free(v);
    }
    shs_schedule_t gen = {.kind = SHS_SCHED_GENERAL, .group_size = 3};
    shs_schedule_t rnd = {.kind = SHS_SCHED_RANDOM, .group_size = 2, .seed = 2020};
    run_schedule(ctx, coll, &gen, 8, 10007, "general g=3");
    run_schedule(ctx, coll, &rnd, 8, 10007, "random g=2");
    if (g_rank == 0)
        printf("rank 0: 8 rounds of general g=3 and random g=2 schedules match the "
               "simulation\n");
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_coll_destroy(coll);
}

/* ---------------------------------------------------------------------- imm */

static void case_imm(shs_ctx_t *ctx)
{
    int n = shs_ctx_size(ctx);
    shs_region_t *r;
    CHECK_OK(shs_region_alloc(ctx, 4096, SHS_ACCESS_REMOTE_WRITE, &r));
    const uint32_t A = 0x11000000u, B = 0x22000000u, M = 0xff000000u;
    if (g_rank == 0) {
        /* to rank 1: A0 B0 A1 B1 ... A9 B9, then a final plain one */
        for (uint32_t i = 0; i < 10; i++) {
            CHECK_OK(shs_write_imm(ctx, 1, r, 0, r, 0, 8, A | i, 0));
            CHECK_OK(shs_write_imm(ctx, 1, r, 0, r, 0, 0, B | i, 0));
        }
        CHECK_OK(shs_write_imm(ctx, 1, r, 0, r, 0, 0, 0x33000000u, SHS_OP_SIGNAL));
        CHECK_OK(shs_flush(ctx, 1, SHS_TIMEOUT_DEFAULT));
    } else if (g_rank == 1) {
        uint32_t imm;
        int from;
        /* the B channel first, in order, although A came first */
        for (uint32_t i = 0; i < 10; i++) {
            CHECK_OK(shs_wait_imm_match(ctx, 0, M, B, &from, &imm, 20000));
            if (imm != (B | i) || from != 0)
                fail("channel B: got 0x%x from %d, expected 0x%x from 0", imm, from, B | i);
        }
        CHECK_EQ(shs_poll_imm_match(ctx, 0, M, B, NULL, &imm), SHS_ERR_TIMEOUT);
        CHECK_EQ(shs_poll_imm_match(ctx, 0, 0x0f000000u, 0x11000000u, NULL, &imm),
                 SHS_ERR_INVALID_ARG); /* match outside mask */
        /* any peer, channel A: still in order */
        for (uint32_t i = 0; i < 10; i++) {
            CHECK_OK(shs_wait_imm_match(ctx, SHS_PEER_ANY, M, A, &from, &imm, 20000));
            if (imm != (A | i) || from != 0)
                fail("channel A: got 0x%x from %d, expected 0x%x from 0", imm, from, A | i);
        }
        /* what is left is the plain one */
        CHECK_OK(shs_wait_imm(ctx, 0, &from, &imm, 20000));
        if (imm != 0x33000000u)
            fail("last immediate 0x%x", imm);
        CHECK_EQ(shs_poll_imm(ctx, 0, NULL, &imm), SHS_ERR_TIMEOUT);
        /* more than the receive queue holds in total, over many waits: the
         * receives taken out of order are given back */
    }
    CHECK_OK(shs_ctx_barrier(ctx));
    if (n >= 2 && g_rank == 0)
        printf("rank 0: immediates by channel ok\n");
    shs_region_destroy(r);
}

/* ------------------------------------------------------------------- errors */

static void case_errors(shs_ctx_t *ctx)
{
    int n = shs_ctx_size(ctx);
    shs_coll_t *coll;
    if (n < 3)
        fail("errors needs 3 ranks or more");

    /* parameters that differ: every rank fails, none hangs */
    shs_coll_params_t p = {.field_mask = SHS_COLL_PARAM_SLOTS, .slots = 3};
    if (g_rank == n - 1)
        p.slots = 5;
    CHECK_EQ(shs_coll_create(ctx, &p, &coll), SHS_ERR_SIZE_MISMATCH);
    p.slots = g_rank == 1 ? 0 : 3; /* invalid on rank 1 only */
    CHECK_EQ(shs_coll_create(ctx, &p, &coll),
             g_rank == 1 ? SHS_ERR_CONFIG : SHS_ERR_SIZE_MISMATCH);

    shs_coll_params_t q = {.field_mask = SHS_COLL_PARAM_TIMEOUT, .timeout_ms = 1500};
    CHECK_OK(shs_coll_create(ctx, &q, &coll));
    float v[16] = {0};
    shs_group_t bad = {.size = 2, .index = 0, .ranks = {g_rank == 0 ? 1 : 0, g_rank}};
    CHECK_EQ(shs_allreduce(coll, &bad, v, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
             SHS_ERR_INVALID_ARG); /* not at its index */
    shs_group_t dup = {.size = 2, .index = 0, .ranks = {g_rank, g_rank}};
    CHECK_EQ(shs_allreduce(coll, &dup, v, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
             SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_allreduce(coll, NULL, v, 16, (shs_dtype_t)7, SHS_REDUCE_SUM),
             SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_allreduce(coll, NULL, NULL, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
             SHS_ERR_INVALID_ARG);
    CHECK_OK(shs_allreduce(coll, NULL, NULL, 0, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM));
    shs_group_t solo = {.size = 1, .index = 0, .ranks = {g_rank}};
    v[0] = 42;
    CHECK_OK(shs_allreduce(coll, &solo, v, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_AVG));
    if (v[0] != 42)
        fail("a group of one changed the data");
    shs_region_t *small;
    CHECK_OK(shs_region_alloc(ctx, 64, SHS_ACCESS_LOCAL_WRITE, &small));
    CHECK_EQ(shs_allreduce_region(coll, NULL, small, 4, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
             SHS_ERR_OUT_OF_BOUNDS);
    CHECK_EQ(shs_allreduce_region(coll, NULL, small, 2, 1, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
             SHS_ERR_OUT_OF_BOUNDS); /* misaligned */

    /* ranks 0 and 1 call with the group {0, 1, 2} but rank 2 stays away:
     * rank 0 waits for data from its left neighbour 2, rank 1 for the grant
     * of its right neighbour 2; both time out, then refuse further calls */
    CHECK_OK(shs_ctx_barrier(ctx));
    if (g_rank <= 1) {
        shs_group_t three = {.size = 3, .index = g_rank, .ranks = {0, 1, 2}};
        double t0 = now_s();
        CHECK_EQ(shs_allreduce(coll, &three, v, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
                 SHS_ERR_TIMEOUT);
        if (now_s() - t0 > 10)
            fail("the timeout of 1.5 s took %.1f s", now_s() - t0);
        CHECK_EQ(shs_allreduce(coll, &three, v, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
                 SHS_ERR_BAD_STATE);
        printf("rank %d: a missing member gives a timeout, then a refusal\n", g_rank);
    }
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_region_destroy(small);
    shs_coll_destroy(coll);
}

/* ----------------------------------------------------------------- mismatch */

/* One call of a collective on which this rank passes its own (count, dtype,
 * op, group): it must fail with SHS_ERR_SIZE_MISMATCH, on time. */
static void expect_mismatch(shs_coll_t *coll, buffers_t *b, const shs_group_t *group,
                            size_t count, shs_dtype_t dt, shs_reduce_t op, bool staged,
                            const char *what)
{
    size_t es = shs_dtype_size(dt);
    if (count * es > b->cap)
        fail("test buffer too small for %zu elements", count);
    void *buf = staged ? b->plain : shs_region_addr(b->region);
    fill(buf, dt, count, g_rank);
    double t0 = now_s();
    shs_status_t st = staged ? shs_allreduce(coll, group, buf, count, dt, op)
                             : shs_allreduce_region(coll, group, b->region, 0, count, dt, op);
    double took = now_s() - t0;
    if (st != SHS_ERR_SIZE_MISMATCH)
        fail("%s: %s (count %zu, %s, %s), expected %s", what, shs_status_string(st), count,
             dt == SHS_DTYPE_FLOAT32 ? "f32" : "f64", op == SHS_REDUCE_SUM ? "sum" : "avg",
             shs_status_string(SHS_ERR_SIZE_MISMATCH));
    if (took > 4.0)
        fail("%s: the mismatch took %.1f s to report (the timeout is 8 s)", what, took);
    /* poisoned: both entry points refuse, on every member */
    CHECK_EQ(shs_allreduce(coll, NULL, b->plain, 16, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
             SHS_ERR_BAD_STATE);
    CHECK_EQ(shs_allreduce_region(coll, NULL, b->region, 0, 16, SHS_DTYPE_FLOAT32,
                                  SHS_REDUCE_SUM),
             SHS_ERR_BAD_STATE);
    if (g_rank == 0)
        printf("rank 0: %s: every rank failed with a mismatch in %.3f s\n", what, took);
}

/* only: NULL for every disagreement, or one of count, small, passes, dtype,
 * op, group */
static void case_mismatch(shs_ctx_t *ctx, const char *only)
{
    int n = shs_ctx_size(ctx);
    if (n < 2)
        fail("mismatch needs 2 ranks or more");
    /* small slots and stage keep seven collectives' regions small; several
     * passes of the stage for the large call */
    shs_coll_params_t p = {.field_mask = SHS_COLL_PARAM_SLOT_BYTES | SHS_COLL_PARAM_STAGE_BYTES |
                                         SHS_COLL_PARAM_TIMEOUT,
                           .slot_bytes = 64 << 10, .stage_bytes = 1 << 20, .timeout_ms = 8000};
    enum { NCOLL = 7 };
    shs_coll_t *coll[NCOLL];
    for (int k = 0; k < NCOLL; k++)
        CHECK_OK(shs_coll_create(ctx, &p, &coll[k]));
    buffers_t b;
    b.cap = 300000 * sizeof(double);
    CHECK_OK(shs_region_alloc(ctx, b.cap, SHS_ACCESS_LOCAL_WRITE, &b.region));
    b.plain = malloc(b.cap);
    if (b.plain == NULL)
        fail("malloc");
    int odd = n > 2 ? 2 : 1; /* a rank that is no neighbour of rank 0 when n > 3 */

#define WANT(name) (only == NULL || strcmp(only, name) == 0)
    /* the user's report: rank 0 passes 1000 elements, the others 2000 */
    if (WANT("count"))
        expect_mismatch(coll[0], &b, NULL, g_rank == 0 ? 1000 : 2000, SHS_DTYPE_FLOAT32,
                        SHS_REDUCE_SUM, true, "count 1000 on rank 0, 2000 elsewhere");
    /* counts below the group size (empty segments, no eager first chunk) */
    if (WANT("small"))
        expect_mismatch(coll[1], &b, NULL, g_rank == odd ? 1 : (size_t)n + 1,
                        SHS_DTYPE_FLOAT64, SHS_REDUCE_AVG, false,
                        "count 1 on one rank, n + 1 elsewhere");
    /* several chunks and passes of the stage; the first pass has the same
     * length everywhere, the call's count differs */
    if (WANT("passes"))
        expect_mismatch(coll[2], &b, NULL, g_rank == n - 1 ? 200000 : 300000,
                        SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM, true,
                        "count 200000 on the last rank, 300000 elsewhere");
    if (WANT("dtype"))
        expect_mismatch(coll[3], &b, NULL, 1000,
                        g_rank == n - 1 ? SHS_DTYPE_FLOAT64 : SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM,
                        false, "float64 on the last rank, float32 elsewhere");
    if (WANT("op"))
        expect_mismatch(coll[4], &b, NULL, 1000, SHS_DTYPE_FLOAT32,
                        g_rank == odd ? SHS_REDUCE_AVG : SHS_REDUCE_SUM, true,
                        "avg on one rank, sum elsewhere");
    /* one rank lists the ring rotated: the same neighbours, but other
     * segments would be its own */
    shs_group_t rot = {.size = n};
    for (int k = 0; k < n; k++)
        rot.ranks[k] = (k + 1) % n;
    rot.index = (g_rank + n - 1) % n;
    if (WANT("group"))
        expect_mismatch(coll[5], &b, g_rank == odd ? &rot : NULL, 1000, SHS_DTYPE_FLOAT32,
                        SHS_REDUCE_SUM, false, "a rotated group on one rank");
#undef WANT

    /* a collective created meanwhile (another channel) is untouched */
    int all[SHS_GROUP_MAX];
    for (int r = 0; r < n; r++)
        all[r] = r;
    one_allreduce(coll[6], NULL, all, n, &b, 2000, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM, true);
    one_allreduce(coll[6], NULL, all, n, &b, 300000, SHS_DTYPE_FLOAT64, SHS_REDUCE_AVG, false);
    if (g_rank == 0)
        printf("rank 0: the collective created beside them works\n");
    CHECK_OK(shs_ctx_barrier(ctx));
    for (int k = 0; k < NCOLL; k++)
        shs_coll_destroy(coll[k]);
    free(b.plain);
    shs_region_destroy(b.region);
}

/* ----------------------------------------------------------------- channels */

static void case_channels(shs_ctx_t *ctx)
{
    int n = shs_ctx_size(ctx);
    if (n < 2)
        fail("channels needs 2 ranks or more");
    shs_coll_t *a, *b, *c = NULL;
    /* the same invalid value on every rank: every rank says SHS_ERR_CONFIG
     * (its own reason), none SHS_ERR_SIZE_MISMATCH */
    shs_coll_params_t bad = {.field_mask = SHS_COLL_PARAM_SLOTS, .slots = 100};
    shs_status_t bst = shs_coll_create(ctx, &bad, &c);
    if (bst != SHS_ERR_CONFIG || c != NULL)
        fail("100 slots on every rank: %s, expected %s on every rank", shs_status_string(bst),
             shs_status_string(SHS_ERR_CONFIG));
    CHECK_OK(shs_coll_create(ctx, NULL, &a));
    CHECK_OK(shs_coll_create(ctx, NULL, &b));
    /* allocated from the top, in the same order on every rank: a has 255,
     * b 254; asking for either again is refused on every rank */
    shs_coll_params_t p = {.field_mask = SHS_COLL_PARAM_CHANNEL};
    for (int ch = 255; ch >= 254; ch--) {
        p.channel = ch;
        CHECK_EQ(shs_coll_create(ctx, &p, &c), SHS_ERR_BAD_STATE);
    }
    /* only rank 0 collides: it is refused, and the others fail too */
    p.channel = g_rank == 0 ? 254 : 200;
    CHECK_EQ(shs_coll_create(ctx, &p, &c), g_rank == 0 ? SHS_ERR_BAD_STATE : SHS_ERR_SIZE_MISMATCH);
    /* the channel the others took for the failed create was given back */
    p.channel = 200;
    CHECK_OK(shs_coll_create(ctx, &p, &c));
    if (c == NULL)
        fail("no collective");
    shs_coll_destroy(c);
    if (g_rank == 0)
        printf("rank 0: channels 255 and 254 taken, a taken one refused on every rank\n");

    /* interleaved calls: a rank that has finished its call on one collective
     * starts the next on the other while its neighbours still finish theirs */
    buffers_t buf;
    buf.cap = 70000 * sizeof(double) + 64;
    CHECK_OK(shs_region_alloc(ctx, buf.cap, SHS_ACCESS_LOCAL_WRITE, &buf.region));
    buf.plain = malloc(buf.cap);
    if (buf.plain == NULL)
        fail("malloc");
    int all[SHS_GROUP_MAX];
    for (int r = 0; r < n; r++)
        all[r] = r;
    const size_t counts[] = {1, (size_t)n, 97, 1009, 4099, 65537};
    for (int it = 0; it < 24; it++) {
        size_t cnt = counts[it % 6];
        one_allreduce(it % 2 ? b : a, NULL, all, n, &buf, cnt, (shs_dtype_t)(it / 2 % 2),
                      (shs_reduce_t)(it / 4 % 2), it % 3 == 0);
    }
    shs_coll_stats_t sa, sb;
    CHECK_OK(shs_coll_get_stats(a, &sa));
    CHECK_OK(shs_coll_get_stats(b, &sb));
    if (sa.calls != 12 || sb.calls != 12)
        fail("calls counted: %llu and %llu, expected 12 each", (unsigned long long)sa.calls,
             (unsigned long long)sb.calls);
    if (g_rank == 0)
        printf("rank 0: two collectives interleaved, 24 calls ok\n");
    CHECK_OK(shs_ctx_barrier(ctx));
    free(buf.plain);
    shs_region_destroy(buf.region);
    shs_coll_destroy(b);
    shs_coll_destroy(a);
}

/* ------------------------------------------------------------ beside-shadow */

/* The shadow engine runs its rounds (ring path: a collective of its own, on
 * its endpoint) while this thread runs collectives on the same context. */
static void case_beside_shadow(shs_ctx_t *ctx)
{
    int n = shs_ctx_size(ctx);
    shs_coll_t *coll;
    CHECK_OK(shs_coll_create(ctx, NULL, &coll));
    buffers_t b;
    b.cap = 4096 * sizeof(double);
    CHECK_OK(shs_region_alloc(ctx, b.cap, SHS_ACCESS_LOCAL_WRITE, &b.region));
    b.plain = malloc(b.cap);
    if (b.plain == NULL)
        fail("malloc");
    shs_region_t *model;
    CHECK_OK(shs_region_alloc(ctx, 1024 * sizeof(float),
                              SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &model));
    float *w = shs_region_addr(model);
    for (int i = 0; i < 1024; i++)
        w[i] = (float)(g_rank + 1);
    shs_shadow_params_t sp;
    memset(&sp, 0, sizeof(sp));
    sp.field_mask = SHS_SHADOW_PARAM_PIN_CPUS | SHS_SHADOW_PARAM_PATH;
    sp.pin_cpus = "none";
    sp.path = SHS_SHADOW_PATH_RING;
    shs_shadow_t *sh;
    CHECK_OK(shs_shadow_create(ctx, model, 0, 1024, &sp, &sh));
    CHECK_OK(shs_shadow_start(sh));
    int all[SHS_GROUP_MAX];
    for (int r = 0; r < n; r++)
        all[r] = r;
    /* collectives on the context until the engine has synced twice on
     * every rank (the ranks agree on the last call with one more) */
    shs_shadow_stats_t s = {0};
    int calls = 0;
    double t0 = now_s();
    for (;;) {
        one_allreduce(coll, NULL, all, n, &b, 1000, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM, true);
        one_allreduce(coll, NULL, all, n, &b, 4000, SHS_DTYPE_FLOAT64, SHS_REDUCE_AVG, false);
        calls += 2;
        CHECK_OK(shs_shadow_stats(sh, &s));
        double done = s.rounds >= 2 ? 1.0 : 0.0;
        CHECK_OK(shs_allreduce(coll, NULL, &done, 1, SHS_DTYPE_FLOAT64, SHS_REDUCE_SUM));
        if (done == (double)n)
            break;
        if (now_s() - t0 > 120.0)
            fail("the engine made %llu rounds in 120 s beside %d collective calls",
                 (unsigned long long)s.rounds, calls);
    }
    CHECK_OK(shs_shadow_stop(sh));
    CHECK_OK(shs_shadow_finish(sh));
    float mean = (float)(n + 1) / 2.0f;
    for (int i = 0; i < 1024; i++)
        if (w[i] != mean)
            fail("model element %d is %g after the finish, not the mean %g", i, (double)w[i],
                 (double)mean);
    if (g_rank == 0)
        printf("rank 0: %d collective calls beside %llu shadow rounds, model at the mean\n",
               calls, (unsigned long long)s.rounds);
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_shadow_destroy(sh);
    shs_region_destroy(model);
    free(b.plain);
    shs_region_destroy(b.region);
    shs_coll_destroy(coll);
}

/* --------------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s allreduce [--big] [--large] | bf16 | dssync | imm | errors | mismatch "
                "[count|small|passes|dtype|op|group] | channels | beside-shadow\n",
                argv[0]);
        return RC_FAIL;
    }
    if (!have_rdma_device()) {
        fprintf(stderr, "no RDMA device: skipped\n");
        return RC_SKIP;
    }
    const char *r = getenv("SHS_RANK");
    g_rank = r != NULL ? atoi(r) : -1;
    shs_ctx_t *ctx;
    shs_status_t st = shs_ctx_create(NULL, &ctx);
    if (st != SHS_OK)
        fail("shs_ctx_create: %s", shs_status_string(st));
    g_rank = shs_ctx_rank(ctx);

    if (strcmp(argv[1], "allreduce") == 0) {
        bool big = false, large = false;
        for (int a = 2; a < argc; a++) {
            big |= strcmp(argv[a], "--big") == 0;
            large |= strcmp(argv[a], "--large") == 0;
        }
        case_allreduce(ctx, big, large);
    } else if (strcmp(argv[1], "bf16") == 0)
        case_bf16(ctx);
    else if (strcmp(argv[1], "dssync") == 0)
        case_dssync(ctx);
    else if (strcmp(argv[1], "imm") == 0)
        case_imm(ctx);
    else if (strcmp(argv[1], "errors") == 0)
        case_errors(ctx);
    else if (strcmp(argv[1], "mismatch") == 0)
        case_mismatch(ctx, argc > 2 ? argv[2] : NULL);
    else if (strcmp(argv[1], "channels") == 0)
        case_channels(ctx);
    else if (strcmp(argv[1], "beside-shadow") == 0)
        case_beside_shadow(ctx);
    else
        fail("unknown case %s", argv[1]);
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_ctx_destroy(ctx);
    return 0;
}

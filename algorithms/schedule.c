/* DS-Sync group schedules: pure functions of (schedule, N, rank, round).
 * No allocation and no communication, so every rank derives the same
 * partition on its own, in O(g) time however large N is. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowsync/schedule.h>

/* ------------------------------------------------------------ helpers */

static bool is_pow2(uint64_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

/* d with g^d == n, or -1 when n is not a power of g (g >= 2). */
static int log_exact(uint64_t n, uint64_t g)
{
    int d = 0;
    while (n > 1) {
        if (n % g != 0)
            return -1;
        n /= g;
        d++;
    }
    return d;
}

static void sort_group(shs_group_t *grp, int rank)
{
    for (int a = 1; a < grp->size; a++) {
        int v = grp->ranks[a], b = a;
        for (; b > 0 && grp->ranks[b - 1] > v; b--)
            grp->ranks[b] = grp->ranks[b - 1];
        grp->ranks[b] = v;
    }
    for (int a = 0; a < grp->size; a++)
        if (grp->ranks[a] == rank)
            grp->index = a;
}

/* -------------------------------------------------- general: circle method
 *
 * The rotating "circle method" of round-robin tournaments, cut into blocks.
 * M = N (N odd) or N - 1 (N even, rank N-1 stays put). In round r of an
 * unshifted lap, with c = r mod M, the ranks are laid out as
 *     c+1, c-1, c+2, c-2, ..., c+(M-1)/2, c-(M-1)/2 [, N-1], c   (mod M)
 * and consecutive blocks of g positions are the groups. The pairs of the
 * tournament sit at positions (2k, 2k+1), so with g even no block boundary
 * splits one, and every pair of ranks is paired once in any M consecutive
 * rounds (a and b < M pair when 2c = a + b mod M, M odd; a and N-1 when
 * c = a). With g odd a boundary may split a pair; every other lap of M
 * rounds shifts the layout left by one position, and a pair split in one
 * layout (boundary before position 2k+1) is whole in the other (boundary
 * before 2k or 2k+2 only: g >= 3 does not divide two consecutive integers).
 * Hence the bound: M rounds for even g, 2M for odd g. Blocks hold other
 * pairs too, so in practice pairs meet far sooner.
 *
 * When g divides N - 1 the last position is a group of its own. It must
 * hold a rotating rank, never the fixed N-1 (which would sit alone for a
 * whole lap, and with g = N - 1 the other block would hold every rotating
 * rank, so the partition would not change for M rounds). So c goes last,
 * after N-1. A shifted lap uses c = (r - 1) mod M and the order
 * ..., c, N-1, so that after the shift the last position holds c + 1, again
 * rank r mod M: the lone rank is r mod M in every round, never twice within
 * M rounds, across lap boundaries too. With g not dividing N - 1, c and N-1
 * share a block, so their order changes no group. */

typedef struct circle {
    uint64_t m;     /* rotating ranks */
    uint64_t c;     /* rotation of this round */
    bool shifted;   /* odd g, odd lap: layout moved left by one */
    uint64_t n;
} circle_t;

static circle_t circle_of(uint64_t n, int g, uint64_t round)
{
    circle_t cr;
    cr.n = n;
    cr.m = n % 2 == 1 ? n : n - 1;
    cr.shifted = g % 2 == 1 && (round / cr.m) % 2 == 1;
    /* a shifted lap runs one rotation behind (see above) */
    cr.c = (round % cr.m + (cr.shifted ? cr.m - 1 : 0)) % cr.m;
    return cr;
}

/* Positions before the shift: the pairs (c+k, c-k) at (2k-2, 2k-1), then c
 * and the fixed rank. An unshifted lap puts c last, a shifted lap puts it
 * before the fixed rank; only the order inside that pair differs. */
static uint64_t circle_pos(const circle_t *cr, uint64_t x)
{
    uint64_t p;
    if (x >= cr->m) {
        p = cr->shifted ? cr->n - 1 : cr->n - 2; /* the fixed rank N-1 */
    } else {
        uint64_t d = (x + cr->m - cr->c) % cr->m;
        if (d == 0)
            p = cr->shifted ? cr->m - 1 : cr->n - 1;
        else if (d <= (cr->m - 1) / 2)
            p = 2 * d - 2;
        else
            p = 2 * (cr->m - d) - 1;
    }
    return cr->shifted ? (p + cr->n - 1) % cr->n : p;
}

static uint64_t circle_rank(const circle_t *cr, uint64_t p)
{
    if (cr->shifted)
        p = (p + 1) % cr->n;
    if (p >= cr->m - 1) { /* the last one or two positions: c and N-1 */
        bool c_here = cr->shifted ? p == cr->m - 1 : p == cr->n - 1;
        return c_here ? cr->c : cr->n - 1;
    }
    uint64_t k = p / 2 + 1;
    return p % 2 == 0 ? (cr->c + k) % cr->m : (cr->c + cr->m - k) % cr->m;
}

/* ------------------------------------------------ random: keyed bijection
 *
 * A 4-round Feistel network over the smallest even number of bits covering
 * [0, N), restricted to [0, N) by cycle walking: a seeded pseudo-random
 * permutation whose forward and inverse maps cost O(1) each, so a rank's
 * group is found without materializing the permutation. */

static uint64_t mix64(uint64_t x)
{
    /* splitmix64 finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct feistel {
    uint64_t key[4];
    unsigned half;  /* bits per half */
    uint64_t mask;
    uint64_t n;
} feistel_t;

static feistel_t feistel_of(uint64_t n, uint64_t seed, uint64_t round)
{
    feistel_t f;
    unsigned bits = 1;
    while (bits < 64 && (1ull << bits) < n)
        bits++;
    f.half = (bits + 1) / 2;
    f.mask = (1ull << f.half) - 1;
    f.n = n;
    uint64_t k = mix64(seed ^ mix64(round + 0x632be59bd9b4e019ull));
    for (int i = 0; i < 4; i++) {
        k = mix64(k + (uint64_t)i);
        f.key[i] = k;
    }
    return f;
}

static uint64_t feistel_fwd(const feistel_t *f, uint64_t x)
{
    uint64_t l = x >> f->half, r = x & f->mask;
    for (int i = 0; i < 4; i++) {
        uint64_t t = l ^ (mix64(r ^ f->key[i]) & f->mask);
        l = r;
        r = t;
    }
    return (l << f->half) | r;
}

static uint64_t feistel_inv(const feistel_t *f, uint64_t x)
{
    uint64_t l = x >> f->half, r = x & f->mask;
    for (int i = 3; i >= 0; i--) {
        uint64_t t = r ^ (mix64(l ^ f->key[i]) & f->mask);
        r = l;
        l = t;
    }
    return (l << f->half) | r;
}

/* Cycle walking: the domain is at most 4N, so a few steps on average. */
static uint64_t random_pos(const feistel_t *f, uint64_t x)
{
    do
        x = feistel_fwd(f, x);
    while (x >= f->n);
    return x;
}

static uint64_t random_rank(const feistel_t *f, uint64_t p)
{
    do
        p = feistel_inv(f, p);
    while (p >= f->n);
    return p;
}

/* ------------------------------------------------------------- public */

static shs_status_t check(const shs_schedule_t *sched, int nranks, int *levels_p)
{
    if (sched == NULL || nranks < 1)
        return SHS_ERR_INVALID_ARG;
    switch (sched->kind) {
    case SHS_SCHED_ALL:
        return nranks <= SHS_GROUP_MAX ? SHS_OK : SHS_ERR_INVALID_ARG;
    case SHS_SCHED_HYPERCUBE: {
        int g = sched->group_size;
        if (g < 2 || g > SHS_GROUP_MAX || !is_pow2((uint64_t)g))
            return SHS_ERR_INVALID_ARG;
        int d = log_exact((uint64_t)nranks, (uint64_t)g);
        if (d < 0)
            return SHS_ERR_INVALID_ARG;
        if (levels_p != NULL)
            *levels_p = d;
        return SHS_OK;
    }
    case SHS_SCHED_GENERAL:
    case SHS_SCHED_RANDOM:
        return sched->group_size >= 1 && sched->group_size <= SHS_GROUP_MAX
                   ? SHS_OK
                   : SHS_ERR_INVALID_ARG;
    }
    return SHS_ERR_INVALID_ARG;
}

/* Members of the block of g positions holding position pos of n. */
#define FILL_BLOCK(grp, n, g, pos, rank_at)                                    \
    do {                                                                       \
        uint64_t first_ = ((pos) / (uint64_t)(g)) * (uint64_t)(g);             \
        uint64_t end_ = first_ + (uint64_t)(g) < (n) ? first_ + (uint64_t)(g) : (n); \
        (grp)->size = (int)(end_ - first_);                                    \
        for (uint64_t q_ = first_; q_ < end_; q_++)                            \
            (grp)->ranks[q_ - first_] = (int)(rank_at(q_));                    \
    } while (0)

shs_status_t shs_schedule_group(const shs_schedule_t *sched, int nranks, int rank,
                                uint64_t round, shs_group_t *group_p)
{
    int levels = 0;
    shs_status_t st = check(sched, nranks, &levels);
    if (st != SHS_OK || group_p == NULL || rank < 0 || rank >= nranks)
        return st != SHS_OK ? st : SHS_ERR_INVALID_ARG;

    shs_group_t grp;
    uint64_t n = (uint64_t)nranks, me = (uint64_t)rank;
    int g = sched->group_size;

    bool blocks = sched->kind == SHS_SCHED_GENERAL || sched->kind == SHS_SCHED_RANDOM;
    if (nranks == 1 || sched->kind == SHS_SCHED_ALL || (blocks && g >= nranks)) {
        grp.size = nranks;
        for (int r = 0; r < nranks; r++)
            grp.ranks[r] = r;
        grp.index = rank;
        *group_p = grp;
        return SHS_OK;
    }

    switch (sched->kind) {
    case SHS_SCHED_HYPERCUBE: {
        uint64_t stride = 1;
        for (uint64_t j = round % (uint64_t)levels; j > 0; j--)
            stride *= (uint64_t)g;
        uint64_t digit = (me / stride) % (uint64_t)g;
        uint64_t base = me - digit * stride;
        grp.size = g;
        grp.index = (int)digit;
        for (int m = 0; m < g; m++)
            grp.ranks[m] = (int)(base + (uint64_t)m * stride);
        *group_p = grp;
        return SHS_OK;
    }
    case SHS_SCHED_GENERAL: {
        circle_t cr = circle_of(n, g, round);
#define CIRCLE_RANK(q) circle_rank(&cr, (q))
        FILL_BLOCK(&grp, n, g, circle_pos(&cr, me), CIRCLE_RANK);
#undef CIRCLE_RANK
        break;
    }
    case SHS_SCHED_RANDOM: {
        feistel_t f = feistel_of(n, sched->seed, round);
#define RANDOM_RANK(q) random_rank(&f, (q))
        FILL_BLOCK(&grp, n, g, random_pos(&f, me), RANDOM_RANK);
#undef RANDOM_RANK
        break;
    }
    default:
        return SHS_ERR_INVALID_ARG;
    }
    sort_group(&grp, rank);
    *group_p = grp;
    return SHS_OK;
}

int shs_schedule_mix_rounds(const shs_schedule_t *sched, int nranks)
{
    int levels = 0;
    shs_status_t st = check(sched, nranks, &levels);
    if (st != SHS_OK)
        return (int)st;
    if (nranks == 1 || sched->kind == SHS_SCHED_ALL)
        return 1;
    switch (sched->kind) {
    case SHS_SCHED_HYPERCUBE:
        return levels;
    case SHS_SCHED_GENERAL: {
        if (sched->group_size >= nranks)
            return 1;
        if (sched->group_size == 1)
            return 0; /* singletons never mix */
        int m = nranks % 2 == 1 ? nranks : nranks - 1;
        if (sched->group_size % 2 == 0)
            return m;
        return m <= INT32_MAX / 2 ? 2 * m : (int)SHS_ERR_INVALID_ARG;
    }
    default:
        return 0; /* random: no deterministic bound */
    }
}

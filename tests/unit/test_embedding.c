/* Embedding tables, the pure pieces: layout and re-sharding, initialization
 * by row id, the owners' optimizers, and the batch plan (dedupe, packing per
 * owner, scatter, pooling, gradient sums). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include <shadowsync/embedding.h>

#include "algorithms/embedding/cache.h"
#include "algorithms/embedding/plan.h"
#include "algorithms/embedding/store.h"
#include "unit.h"

#define EXPECT(cond, ...)                                                       \
    do {                                                                        \
        if (!(cond))                                                            \
            ck_abort_msg(__VA_ARGS__);                                          \
    } while (0)

static const shs__emb_map_t maps[] = {SHS__EMB_MAP_MODULO, SHS__EMB_MAP_RANGE};

START_TEST(layout_roundtrip)
{
    static const uint64_t rows_list[] = {1, 2, 3, 7, 64, 1000, 1001, 4099};
    for (size_t m = 0; m < 2; m++) {
        for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(rows_list[0]); ri++) {
            for (uint32_t shards = 1; shards <= 9; shards++) {
                uint64_t rows = rows_list[ri], total = 0, lo = UINT64_MAX, hi = 0;
                shs__emb_layout_t l;
                ck_assert_int_eq(shs__emb_layout_init(&l, rows, shards, maps[m]), SHS_OK);
                for (uint32_t s = 0; s < shards; s++) {
                    uint64_t n = shs__emb_shard_rows(&l, s);
                    total += n;
                    lo = n < lo ? n : lo;
                    hi = n > hi ? n : hi;
                }
                EXPECT(total == rows, "map %zu rows %llu shards %u: shards hold %llu rows", m,
                       (unsigned long long)rows, shards, (unsigned long long)total);
                EXPECT(hi - lo <= 1, "unbalanced shards %llu..%llu", (unsigned long long)lo,
                       (unsigned long long)hi);
                for (uint64_t r = 0; r < rows; r++) {
                    uint32_t s;
                    uint64_t loc;
                    shs__emb_locate(&l, r, &s, &loc);
                    EXPECT(s < shards && loc < shs__emb_shard_rows(&l, s),
                           "row %llu at shard %u local %llu", (unsigned long long)r, s,
                           (unsigned long long)loc);
                    EXPECT(shs__emb_global_row(&l, s, loc) == r, "row %llu does not come back",
                           (unsigned long long)r);
                    if (maps[m] == SHS__EMB_MAP_RANGE && r > 0) { /* contiguous */
                        uint32_t ps;
                        uint64_t pl;
                        shs__emb_locate(&l, r - 1, &ps, &pl);
                        EXPECT((ps == s && pl + 1 == loc) || (ps < s && loc == 0),
                               "range map not contiguous at row %llu", (unsigned long long)r);
                    }
                }
            }
        }
    }
    shs__emb_layout_t l;
    ck_assert_int_eq(shs__emb_layout_init(&l, 0, 2, SHS__EMB_MAP_MODULO), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__emb_layout_init(&l, 10, 0, SHS__EMB_MAP_MODULO), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__emb_layout_init(&l, 10, 2, (shs__emb_map_t)7), SHS_ERR_INVALID_ARG);
}
END_TEST

/* Shards written by one layout and read into another (the load path):
 * every row of every new shard equals its initial value by row id. */
START_TEST(reshard)
{
    enum { ROWS = 103, DIM = 3 };
    for (size_t mo = 0; mo < 2; mo++) {
        for (size_t mn = 0; mn < 2; mn++) {
            for (uint32_t so = 1; so <= 5; so++) {
                for (uint32_t sn = 1; sn <= 5; sn++) {
                    shs__emb_layout_t lo, ln;
                    ck_assert_int_eq(shs__emb_layout_init(&lo, ROWS, so, maps[mo]), SHS_OK);
                    ck_assert_int_eq(shs__emb_layout_init(&ln, ROWS, sn, maps[mn]), SHS_OK);
                    float old[5][ROWS][DIM], want[DIM];
                    for (uint32_t s = 0; s < so; s++)
                        for (uint64_t k = 0; k < shs__emb_shard_rows(&lo, s); k++)
                            shs_emb_init_row(42, shs__emb_global_row(&lo, s, k), 0.5f, old[s][k],
                                              DIM);
                    for (uint32_t s = 0; s < sn; s++) {
                        for (uint64_t k = 0; k < shs__emb_shard_rows(&ln, s); k++) {
                            uint64_t g = shs__emb_global_row(&ln, s, k);
                            uint32_t os;
                            uint64_t ok;
                            shs__emb_locate(&lo, g, &os, &ok);
                            shs_emb_init_row(42, g, 0.5f, want, DIM);
                            EXPECT(memcmp(old[os][ok], want, sizeof(want)) == 0,
                                   "row %llu wrong after %u -> %u shards",
                                   (unsigned long long)g, so, sn);
                        }
                    }
                }
            }
        }
    }
}
END_TEST

START_TEST(init_by_row)
{
    enum { DIM = 16, ROWS = 2000 };
    float a[DIM], b[DIM];
    double sum = 0;
    shs_emb_init_row(7, 12345, 0.25f, a, DIM);
    shs_emb_init_row(7, 12345, 0.25f, b, DIM);
    ck_assert(memcmp(a, b, sizeof(a)) == 0);
    shs_emb_init_row(8, 12345, 0.25f, b, DIM);
    ck_assert(memcmp(a, b, sizeof(a)) != 0); /* the seed matters */
    shs_emb_init_row(7, 12346, 0.25f, b, DIM);
    ck_assert(memcmp(a, b, sizeof(a)) != 0); /* so does the row */
    for (uint64_t r = 0; r < ROWS; r++) {
        shs_emb_init_row(7, r, 0.25f, a, DIM);
        for (int j = 0; j < DIM; j++) {
            EXPECT(a[j] >= -0.25f && a[j] < 0.25f, "row %llu col %d: %g", (unsigned long long)r,
                   j, a[j]);
            sum += a[j];
        }
    }
    /* uniform on [-0.25, 0.25): sd 0.144, so the mean of 32000 draws is
     * within 4 sd (0.0032) of 0 */
    ck_assert_double_lt(fabs(sum / (ROWS * DIM)), 0.0032);
}
END_TEST

/* The generator exactly as embedding.h documents it, written again here. */
static uint64_t doc_mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z;
}

static float doc_init_value(uint64_t seed, uint64_t row, uint32_t j, float scale)
{
    const uint64_t g = 0x9e3779b97f4a7c15ull;
    uint64_t key = doc_mix64(seed ^ doc_mix64(row + g));
    uint64_t z = doc_mix64(key + (uint64_t)j * g);
    float x = (float)((int32_t)(z >> 40) - (1 << 23)) * 0x1p-23f;
    float v = x * scale;
    return v < scale || !(scale > 0.0f) ? v : nextafterf(scale, 0.0f);
}

/* Every value of every row of a large table (100000 rows x 64, the default
 * seed 0 and init_scale 0.01; 20000 rows at 0.5) lies in [-scale, scale): the
 * generator before, a double rounded to float, put seed 0's row 44774 at
 * +scale. The values are the documented formula's, bit for bit, and
 * stretch over the range; odd scales (subnormal, huge, 0) keep the range. */
START_TEST(init_range_large_table)
{
    enum { DIM = 64, ROWS = 100000 };
    static const float scales[] = {0.01f, 0.5f};
    static const uint64_t nrows[] = {ROWS, ROWS / 5};
    float a[DIM];
    for (size_t si = 0; si < sizeof(scales) / sizeof(scales[0]); si++) {
        float scale = scales[si], lo = scale, hi = -scale;
        uint64_t bad = 0;
        for (uint64_t r = 0; r < nrows[si]; r++) {
            shs_emb_init_row(0, r, scale, a, DIM);
            for (int j = 0; j < DIM; j++) {
                if (!(a[j] >= -scale && a[j] < scale) && bad++ == 0)
                    EXPECT(false, "scale %g row %llu col %d: %.9g outside [-scale, scale)",
                           (double)scale, (unsigned long long)r, j, (double)a[j]);
                lo = a[j] < lo ? a[j] : lo;
                hi = a[j] > hi ? a[j] : hi;
            }
            if (r % 997 == 0)
                for (uint32_t j = 0; j < DIM; j++)
                    ck_assert_msg(a[j] == doc_init_value(0, r, j, scale),
                                  "row %llu col %u: %.9g, the documented formula gives %.9g",
                                  (unsigned long long)r, j, (double)a[j],
                                  (double)doc_init_value(0, r, j, scale));
        }
        ck_assert_msg(bad == 0, "scale %g: %llu of %llu values out of range", (double)scale,
                      (unsigned long long)bad, (unsigned long long)nrows[si] * DIM);
        /* over a million draws reach within 1e-4 of both ends */
        ck_assert_float_lt(lo, -scale * (1.0f - 1e-4f));
        ck_assert_float_gt(hi, scale * (1.0f - 1e-4f));
    }
    static const float odd[] = {1e-40f, 1.4e-45f, 1e-38f, 3.0e38f, 0.0f};
    for (size_t si = 0; si < sizeof(odd) / sizeof(odd[0]); si++)
        for (uint64_t r = 0; r < 2000; r++) {
            shs_emb_init_row(3, r, odd[si], a, DIM);
            for (int j = 0; j < DIM; j++)
                ck_assert_msg(odd[si] == 0.0f ? a[j] == 0.0f
                                              : a[j] >= -odd[si] && a[j] < odd[si],
                              "scale %g row %llu col %d: %g", (double)odd[si],
                              (unsigned long long)r, j, (double)a[j]);
        }
}
END_TEST

/* The hot-row cache: a fresh row is served until max_age lookups passed or
 * its epoch moved; a full set admits a row only when it is asked for more
 * often than the way it would replace. */
START_TEST(cache_age_epoch_admission)
{
    enum { STRIDE = 6 };
    shs__emb_cache_t c;
    float row[STRIDE] = {1, 2, 3, 4, 5, 6}, other[STRIDE] = {9, 9, 9, 9, 9, 9};
    ck_assert_int_eq(shs__emb_cache_init(&c, 0, STRIDE, 4), SHS_OK); /* off */
    ck_assert_ptr_null(shs__emb_cache_get(&c, 7, 1, 0));
    shs__emb_cache_offer(&c, 7, row, 1, 0);
    ck_assert_ptr_null(shs__emb_cache_get(&c, 7, 1, 0));
    shs__emb_cache_fini(&c);
    ck_assert_int_eq(shs__emb_cache_init(&c, 8, 0, 4), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__emb_cache_init(&c, 8, STRIDE, 0), SHS_ERR_INVALID_ARG);

    ck_assert_int_eq(shs__emb_cache_init(&c, 8, STRIDE, 4), SHS_OK);
    ck_assert_uint_eq(c.capacity, 8);
    ck_assert_ptr_null(shs__emb_cache_get(&c, 7, 1, 0)); /* a miss */
    shs__emb_cache_offer(&c, 7, row, 1, 0);
    for (uint64_t t = 1; t < 5; t++) { /* fetched at 1: served at 1..4 */
        const float *got = shs__emb_cache_get(&c, 7, t, 0);
        ck_assert_ptr_nonnull(got);
        ck_assert(memcmp(got, row, sizeof(row)) == 0);
    }
    ck_assert_ptr_null(shs__emb_cache_get(&c, 7, 5, 0)); /* too old */
    ck_assert_uint_eq(c.expired, 1);
    shs__emb_cache_offer(&c, 7, row, 5, 3);
    ck_assert_ptr_null(shs__emb_cache_get(&c, 7, 6, 4)); /* updated since */
    ck_assert_uint_eq(c.expired, 2);
    ck_assert_uint_eq(c.hits, 4);
    ck_assert_uint_eq(c.hit_age_sum, 0 + 1 + 2 + 3);
    shs__emb_cache_fini(&c);

    /* one set of 4 ways: ids 0..3 fill it; id 100, asked for once, does
     * not displace the hot ones; asked for often, it does */
    ck_assert_int_eq(shs__emb_cache_init(&c, 4, STRIDE, 1000), SHS_OK);
    for (uint64_t id = 0; id < 4; id++) {
        for (int k = 0; k < 5; k++)
            (void)shs__emb_cache_get(&c, id, 1, 0);
        shs__emb_cache_offer(&c, id, row, 1, 0);
    }
    (void)shs__emb_cache_get(&c, 100, 2, 0);
    shs__emb_cache_offer(&c, 100, other, 2, 0);
    ck_assert_uint_eq(c.rejected, 1);
    ck_assert_ptr_null(shs__emb_cache_get(&c, 100, 3, 0));
    for (int k = 0; k < 20; k++)
        (void)shs__emb_cache_get(&c, 100, 3, 0);
    shs__emb_cache_offer(&c, 100, other, 3, 0);
    ck_assert_uint_eq(c.evicted, 1);
    const float *got = shs__emb_cache_get(&c, 100, 4, 0);
    ck_assert_ptr_nonnull(got);
    ck_assert(memcmp(got, other, sizeof(other)) == 0);
    int kept = 0;
    for (uint64_t id = 0; id < 4; id++)
        kept += shs__emb_cache_get(&c, id, 4, 0) != NULL;
    ck_assert_int_eq(kept, 3);
    ck_assert_uint_gt(shs__emb_cache_bytes(4, STRIDE), 4 * STRIDE * sizeof(float));
    shs__emb_cache_fini(&c);
}
END_TEST

/* A split sets an owner's cached rows apart: the rest keep their order
 * (and runs), and every id of the batch still finds its row. */
START_TEST(plan_split_cached)
{
    shs__emb_layout_t l;
    shs__emb_plan_t p;
    ck_assert_int_eq(shs__emb_layout_init(&l, 64, 2, SHS__EMB_MAP_MODULO), SHS_OK);
    ck_assert_int_eq(shs__emb_plan_init(&p, &l, 16), SHS_OK);
    const uint64_t ids[] = {2, 4, 6, 8, 10, 4, 3, 5, 2};
    uint32_t bad;
    ck_assert_int_eq(shs__emb_plan_build(&p, ids, 9, &bad), SHS_OK);
    /* owner 0: ids 2, 4, 6, 8, 10 at packed 0..4 (local 1..5) */
    ck_assert_uint_eq(p.owner_start[1], 5);
    ck_assert_uint_eq(shs__emb_plan_run(&p, 0, 0, 100), 5);
    uint8_t hit[16] = {0};
    hit[1] = 1; /* id 4 */
    hit[3] = 1; /* id 8 */
    ck_assert_uint_eq(p.fetch_end[0], 5);
    shs__emb_plan_split(&p, 0, hit, 9);
    ck_assert_uint_eq(p.fetch_end[0], 3);
    ck_assert_uint_eq(p.fetch_end[1], p.owner_start[2]);
    ck_assert_uint_eq(p.row[0], 2);
    ck_assert_uint_eq(p.row[1], 6);
    ck_assert_uint_eq(p.row[2], 10);
    ck_assert_uint_eq(p.row[3], 4);
    ck_assert_uint_eq(p.row[4], 8);
    ck_assert_uint_eq(p.remap[1], 3);
    ck_assert_uint_eq(p.remap[3], 4);
    ck_assert_uint_eq(shs__emb_plan_run(&p, 0, 0, 100), 1); /* local 1, then 3 */
    for (uint32_t k = 0; k < 9; k++) {
        ck_assert_uint_eq(p.row[p.slot[k]], ids[k]);
        uint32_t o;
        uint64_t loc;
        shs__emb_locate(&l, ids[k], &o, &loc);
        ck_assert_uint_eq(p.local[p.slot[k]], loc);
    }
    shs__emb_plan_fini(&p);
}
END_TEST

START_TEST(optimizers_by_hand)
{
    float w[2] = {1.0f, 2.0f};
    const float g[2] = {0.5f, -1.0f};
    shs__emb_sgd_row(w, g, 2, 0.1f);
    ck_assert_float_eq_tol(w[0], 0.95f, 1e-7f);
    ck_assert_float_eq_tol(w[1], 2.1f, 1e-7f);

    /* state 0.1 + (0.25 + 1) / 2 = 0.725; step 0.1 / sqrt(0.725) = 0.1174440 */
    float v[2] = {1.0f, 2.0f}, state = 0.1f;
    shs__emb_adagrad_row(v, g, 2, 0.1f, 1e-8f, &state);
    ck_assert_float_eq_tol(state, 0.725f, 1e-7f);
    ck_assert_float_eq_tol(v[0], 1.0f - 0.5f * 0.1174440f, 1e-6f);
    ck_assert_float_eq_tol(v[1], 2.0f + 0.1174440f, 1e-6f);
    /* a zero gradient moves nothing and adds nothing */
    const float z[2] = {0.0f, 0.0f};
    shs__emb_adagrad_row(v, z, 2, 0.1f, 1e-8f, &state);
    ck_assert_float_eq_tol(state, 0.725f, 1e-7f);
    ck_assert_float_eq_tol(v[1], 2.0f + 0.1174440f, 1e-6f);
}
END_TEST

/* A plan against brute force: every id's slot names its own row; buckets
 * hold exactly their owner's ids, each once, sorted by local row. */
static void check_plan(const shs__emb_plan_t *p, const uint64_t *ids, uint32_t n)
{
    const shs__emb_layout_t *l = p->layout;
    for (uint32_t k = 0; k < n; k++) {
        EXPECT(p->slot[k] < p->nuniq && p->row[p->slot[k]] == ids[k],
               "id %u (%llu) planned to slot %u", k, (unsigned long long)ids[k], p->slot[k]);
    }
    uint32_t distinct = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t j = 0;
        while (j < k && ids[j] != ids[k])
            j++;
        distinct += j == k;
    }
    EXPECT(p->nuniq == distinct, "%u distinct ids planned, %u in the batch", p->nuniq, distinct);
    EXPECT(p->owner_start[0] == 0 && p->owner_start[l->shards] == p->nuniq, "bucket bounds");
    for (uint32_t o = 0; o < l->shards; o++) {
        for (uint32_t i = p->owner_start[o]; i < p->owner_start[o + 1]; i++) {
            uint32_t s;
            uint64_t loc;
            shs__emb_locate(l, p->row[i], &s, &loc);
            EXPECT(s == o && loc == p->local[i], "row %llu in owner %u's bucket",
                   (unsigned long long)p->row[i], o);
            EXPECT(i == p->owner_start[o] || p->local[i - 1] < p->local[i],
                   "owner %u's bucket not sorted at %u", o, i);
        }
    }
}

START_TEST(plan_dedupe_pack)
{
    enum { CAP = 512, DIM = 4 };
    shs__emb_layout_t l;
    shs__emb_plan_t p;
    static uint64_t ids[CAP];
    static float packed[CAP * DIM], out[CAP * DIM], grads[CAP * DIM], sums[CAP * DIM];
    uint64_t rng = 99;
    for (size_t m = 0; m < 2; m++) {
        ck_assert_int_eq(shs__emb_layout_init(&l, 1000, 4, maps[m]), SHS_OK);
        ck_assert_int_eq(shs__emb_plan_init(&p, &l, CAP), SHS_OK);
        for (int batch = 0; batch < 50; batch++) { /* the plan is reused */
            uint32_t n = 1 + (uint32_t)(batch * 37 % CAP), bad = 0;
            for (uint32_t k = 0; k < n; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                ids[k] = (rng >> 33) % (batch % 2 ? 1000 : 40); /* many repeats */
            }
            ck_assert_int_eq(shs__emb_plan_build(&p, ids, n, &bad), SHS_OK);
            check_plan(&p, ids, n);
            for (uint32_t u = 0; u < p.nuniq; u++) /* "fetched" rows: the row id */
                for (int j = 0; j < DIM; j++)
                    packed[u * DIM + j] = (float)p.row[u] + 0.25f * (float)j;
            shs__emb_plan_scatter(&p, packed, DIM, DIM, n, out);
            for (uint32_t k = 0; k < n; k++)
                EXPECT(out[k * DIM + 3] == (float)ids[k] + 0.75f, "scatter of id %u", k);
            for (uint32_t k = 0; k < n * DIM; k++)
                grads[k] = (float)(k % 7) - 3.0f;
            shs__emb_plan_sum(&p, grads, DIM, n, sums);
            for (uint32_t u = 0; u < p.nuniq; u++) {
                for (int j = 0; j < DIM; j++) {
                    float want = 0.0f;
                    for (uint32_t k = 0; k < n; k++)
                        if (ids[k] == p.row[u])
                            want += grads[k * DIM + j];
                    EXPECT(sums[u * DIM + j] == want, "gradient sum of row %llu col %d",
                           (unsigned long long)p.row[u], j);
                }
            }
        }
        shs__emb_plan_fini(&p);
    }
}
END_TEST

START_TEST(plan_refuses_bad_ids)
{
    shs__emb_layout_t l;
    shs__emb_plan_t p;
    uint64_t ids[5] = {1, 2, 3, 10, 4};
    uint32_t bad = 0;
    ck_assert_int_eq(shs__emb_layout_init(&l, 10, 3, SHS__EMB_MAP_MODULO), SHS_OK);
    ck_assert_int_eq(shs__emb_plan_init(&p, &l, 4), SHS_OK);
    ck_assert_int_eq(shs__emb_plan_build(&p, ids, 4, &bad), SHS_ERR_INVALID_ARG);
    ck_assert_uint_eq(bad, 3);
    ck_assert_uint_eq(p.nuniq, 0);
    ck_assert_int_eq(shs__emb_plan_build(&p, ids, 5, &bad), SHS_ERR_INVALID_ARG);
    ck_assert_uint_eq(bad, UINT32_MAX); /* more ids than the plan's capacity */
    ck_assert_int_eq(shs__emb_plan_build(&p, ids, 3, &bad), SHS_OK);
    check_plan(&p, ids, 3);
    /* the generation counter wraps: the stamps of the batch {1, 2, 3} must
     * not match again in a later generation 1 */
    p.gen = UINT32_MAX;
    const uint64_t later[3] = {3, 9, 3};
    ck_assert_int_eq(shs__emb_plan_build(&p, later, 3, &bad), SHS_OK);
    check_plan(&p, later, 3);
    shs__emb_plan_fini(&p);
    ck_assert_int_eq(shs__emb_plan_init(&p, &l, 0), SHS_ERR_INVALID_ARG);
}
END_TEST

START_TEST(plan_runs_and_pooling)
{
    enum { DIM = 2 };
    shs__emb_layout_t l;
    shs__emb_plan_t p;
    /* range map, 2 shards of 50: rows 10..14 and 17 on shard 0, 60 61 on 1 */
    const uint64_t ids[] = {12, 10, 61, 11, 14, 13, 17, 60, 12};
    const uint32_t n = sizeof(ids) / sizeof(ids[0]);
    uint32_t bad;
    float packed[16 * DIM], out[3 * DIM];
    ck_assert_int_eq(shs__emb_layout_init(&l, 100, 2, SHS__EMB_MAP_RANGE), SHS_OK);
    ck_assert_int_eq(shs__emb_plan_init(&p, &l, 16), SHS_OK);
    ck_assert_int_eq(shs__emb_plan_build(&p, ids, n, &bad), SHS_OK);
    ck_assert_uint_eq(p.owner_start[1], 6);
    ck_assert_uint_eq(shs__emb_plan_run(&p, 0, 0, 64), 5); /* 10..14 */
    ck_assert_uint_eq(shs__emb_plan_run(&p, 0, 0, 3), 3);  /* capped */
    ck_assert_uint_eq(shs__emb_plan_run(&p, 0, 5, 64), 1); /* 17 */
    ck_assert_uint_eq(shs__emb_plan_run(&p, 1, 6, 64), 2); /* 60 61 */
    ck_assert_uint_eq(shs__emb_plan_run(&p, 1, 8, 64), 0); /* past the bucket */
    for (uint32_t u = 0; u < p.nuniq; u++)
        for (int j = 0; j < DIM; j++)
            packed[u * DIM + j] = (float)p.row[u] * (j ? -1.0f : 1.0f);
    const uint32_t offsets[] = {0, 3, 3, 9}; /* bags {12,10,61} {} {11,14,13,17,60,12} */
    shs__emb_plan_pool(&p, packed, DIM, DIM, offsets, 3, 0, out);
    ck_assert_float_eq(out[0], 83.0f);
    ck_assert_float_eq(out[1], -83.0f);
    ck_assert_float_eq(out[2], 0.0f);
    ck_assert_float_eq(out[4], 127.0f);
    shs__emb_plan_pool(&p, packed, DIM, DIM, offsets, 3, 1, out);
    ck_assert_float_eq_tol(out[0], 83.0f / 3.0f, 1e-5f);
    ck_assert_float_eq(out[2], 0.0f);
    ck_assert_float_eq_tol(out[5], -127.0f / 6.0f, 1e-5f);
    shs__emb_plan_fini(&p);
}
END_TEST

/* ---- save and load ---- */

enum { SV_ROWS = 37, SV_DIM = 3 };

static void fill_shard(const shs__emb_layout_t *l, uint32_t s, float *rows, float *state)
{
    for (uint64_t k = 0; k < shs__emb_shard_rows(l, s); k++) {
        uint64_t g = shs__emb_global_row(l, s, k);
        shs_emb_init_row(5, g, 1.0f, rows + k * SV_DIM, SV_DIM);
        if (state != NULL)
            state[k] = (float)g * 0.5f;
    }
}

/* a save's identity; `which` tells two saves of one table apart */
static shs__emb_save_info_t save_info(uint64_t which)
{
    return (shs__emb_save_info_t){.id = {0x5eed0000u + which, ~which}, .holders_hash = 77,
                                  .optimizer = SHS_EMB_OPT_ADAGRAD};
}

static void save_all_as(const char *dir, const shs__emb_layout_t *l, bool with_state,
                        uint64_t which)
{
    static float rows[SV_ROWS * SV_DIM], state[SV_ROWS];
    shs__emb_save_info_t info = save_info(which);
    for (uint32_t s = 0; s < l->shards; s++) {
        fill_shard(l, s, rows, state);
        ck_assert_int_eq(shs__emb_shard_save(dir, l, s, SV_DIM, SV_DIM, rows,
                                             with_state ? state : NULL, &info),
                         SHS_OK);
    }
}

static void save_all(const char *dir, const shs__emb_layout_t *l, bool with_state)
{
    save_all_as(dir, l, with_state, 1);
}

static char *make_dir(void)
{
    static char dir[64];
    strcpy(dir, "/tmp/shs-emb-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    return dir;
}

static void rm_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(save_load_reshard)
{
    static float rows[SV_ROWS * SV_DIM], state[SV_ROWS], want[SV_ROWS * SV_DIM],
        want_state[SV_ROWS], scratch[2 * SV_DIM];
    for (uint32_t so = 1; so <= 4; so++) {
        for (uint32_t sn = 1; sn <= 4; sn++) {
            char *dir = make_dir();
            shs__emb_layout_t lo, ln;
            ck_assert_int_eq(shs__emb_layout_init(&lo, SV_ROWS, so, maps[so % 2]), SHS_OK);
            ck_assert_int_eq(shs__emb_layout_init(&ln, SV_ROWS, sn, maps[sn % 2 ^ 1]), SHS_OK);
            save_all(dir, &lo, true);
            for (uint32_t s = 0; s < sn; s++) {
                memset(rows, 0xff, sizeof(rows));
                memset(state, 0xff, sizeof(state));
                /* scratch of 2 rows: the load streams */
                ck_assert_int_eq(
                    shs__emb_shard_load(dir, &ln, s, SV_DIM, rows, state, scratch, 2, NULL),
                    SHS_OK);
                fill_shard(&ln, s, want, want_state);
                size_t n = shs__emb_shard_rows(&ln, s);
                EXPECT(memcmp(rows, want, n * SV_DIM * sizeof(float)) == 0,
                       "rows of shard %u after %u -> %u", s, so, sn);
                EXPECT(memcmp(state, want_state, n * sizeof(float)) == 0,
                       "state of shard %u after %u -> %u", s, so, sn);
            }
            rm_dir(dir);
        }
    }
}
END_TEST

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

START_TEST(load_refuses_bad_saves)
{
    static float rows[SV_ROWS * SV_DIM], state[SV_ROWS], scratch[4 * SV_DIM];
    shs__emb_layout_t l2, l3, other;
    char path[256];
    ck_assert_int_eq(shs__emb_layout_init(&l2, SV_ROWS, 2, SHS__EMB_MAP_MODULO), SHS_OK);
    ck_assert_int_eq(shs__emb_layout_init(&l3, SV_ROWS, 3, SHS__EMB_MAP_RANGE), SHS_OK);
    ck_assert_int_eq(shs__emb_layout_init(&other, SV_ROWS + 1, 2, SHS__EMB_MAP_MODULO), SHS_OK);

    char *dir = make_dir();
    ck_assert_int_eq(shs__emb_shard_load(dir, &l2, 0, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_IO); /* no save at all */
    save_all(dir, &l2, false);
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 1, SV_DIM, rows, NULL, scratch, 4, NULL), SHS_OK);
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 1, SV_DIM + 1, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(shs__emb_shard_load(dir, &other, 1, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 1, SV_DIM, rows, state, scratch, 4, NULL),
                     SHS_ERR_UNSUPPORTED); /* saved without Adagrad's state */
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 3, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_INVALID_ARG);

    /* shard 1 truncated */
    snprintf(path, sizeof(path), "%s/shard-1-of-2.emb", dir);
    ck_assert_int_eq(truncate(path, SHS__EMB_HDR_BYTES + 10), 0);
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 0, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_IO);
    /* shard 1 missing */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 0, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_IO);
    /* shard 1 is not a shard file */
    char junk[128];
    memset(junk, 'x', sizeof(junk));
    write_file(dir, "shard-1-of-2.emb", junk, sizeof(junk));
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 0, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_PROTOCOL);
    /* two saves of different shard counts in one folder */
    save_all(dir, &l2, false);
    save_all(dir, &l3, false);
    ck_assert_int_eq(shs__emb_shard_load(dir, &l3, 0, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_ERR_PROTOCOL);
    rm_dir(dir);
}
END_TEST

/* XOR one byte of dir/name; at < 0 counts from the end. */
static void flip(const char *dir, const char *name, long at)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, at, at < 0 ? SEEK_END : SEEK_SET), 0);
    int c = fgetc(f);
    ck_assert_int_ne(c, EOF);
    ck_assert_int_eq(fseek(f, -1, SEEK_CUR), 0);
    ck_assert_int_ne(fputc(c ^ 0x01, f), EOF);
    ck_assert_int_eq(fclose(f), 0);
}

static void sh(const char *cmd)
{
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
}

/* Shard 0 of l from dir is refused with status `want` and cause `cause` in
 * shard file `file` (bytes [a, b) when b != 0), and the message says so. */
static void expect_refused(const char *dir, const shs__emb_layout_t *l, bool with_state,
                           shs_status_t want, shs__emb_cause_t cause, uint32_t file,
                           uint64_t a, uint64_t b, const char *words)
{
    static float rows[SV_ROWS * SV_DIM], state[SV_ROWS], scratch[4 * SV_DIM];
    shs__emb_fault_t fault;
    char msg[1024], name[64], range[64];
    ck_assert_int_eq(shs__emb_shard_load(dir, l, 0, SV_DIM, rows, with_state ? state : NULL,
                                         scratch, 4, &fault),
                     want);
    ck_assert_uint_eq(fault.cause, cause);
    ck_assert_uint_eq(fault.file, file);
    ck_assert_int_eq(shs__emb_fault_status(&fault), want);
    shs__emb_fault_format(&fault, dir, msg, sizeof(msg));
    snprintf(name, sizeof(name), "/shard-%u-of-%u.emb", file, fault.shards);
    EXPECT(strstr(msg, name) != NULL && strstr(msg, words) != NULL,
           "message \"%s\" names no %s or no \"%s\"", msg, name, words);
    if (b != 0) {
        ck_assert_uint_eq(fault.a, a);
        ck_assert_uint_eq(fault.b, b);
        snprintf(range, sizeof(range), "bytes %llu..%llu", (unsigned long long)a,
                 (unsigned long long)(b - 1));
        EXPECT(strstr(msg, range) != NULL, "message \"%s\" has no \"%s\"", msg, range);
    }
}

/* Every way a save can be spoilt after it was written is refused, by the
 * first file where it shows, with the byte range of a checksum that fails. */
START_TEST(load_refuses_spoilt_saves)
{
    enum { HDR = SHS__EMB_HDR_BYTES };
    static float rows[SV_ROWS * SV_DIM], scratch[4 * SV_DIM];
    shs__emb_layout_t l2;
    char cmd[512];
    ck_assert_int_eq(shs__emb_layout_init(&l2, SV_ROWS, 2, SHS__EMB_MAP_MODULO), SHS_OK);
    uint64_t n1 = shs__emb_shard_rows(&l2, 1);
    uint64_t rows_end = HDR + n1 * SV_DIM * sizeof(float), state_end = rows_end + n1 * 4;
    char *d = make_dir();
    char good[64], other[64];
    snprintf(good, sizeof(good), "%s/good", d);
    snprintf(other, sizeof(other), "%s/other", d);
    const char *dir = d;
    snprintf(cmd, sizeof(cmd), "mkdir %s %s", good, other);
    sh(cmd);
    save_all_as(good, &l2, true, 1);
    save_all_as(other, &l2, true, 2); /* the same rows, another save */
#define FRESH()                                                                    \
    do {                                                                           \
        snprintf(cmd, sizeof(cmd), "rm -f %s/*.emb && cp %s/*.emb %s", dir, good, dir); \
        sh(cmd);                                                                   \
    } while (0)

    FRESH();
    ck_assert_int_eq(shs__emb_shard_load(dir, &l2, 0, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_OK);
    /* shard 1 of another save of the same table */
    snprintf(cmd, sizeof(cmd), "cp %s/shard-1-of-2.emb %s", other, dir);
    sh(cmd);
    expect_refused(dir, &l2, true, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_MIXED, 1, 0, 0,
                   "two saves");
    /* a flipped byte: in the rows, first and last; in the header; in the
     * state (refused whether the loader keeps the state or not) */
    FRESH();
    flip(dir, "shard-1-of-2.emb", HDR);
    expect_refused(dir, &l2, true, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_ROWS, 1, HDR, rows_end,
                   "rows");
    FRESH();
    flip(dir, "shard-1-of-2.emb", (long)rows_end - 1);
    expect_refused(dir, &l2, false, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_ROWS, 1, HDR, rows_end,
                   "checksum");
    static const long in_header[] = {12, 41, 70, 99, HDR - 3}; /* dtype .. the sum itself */
    for (size_t i = 0; i < sizeof(in_header) / sizeof(in_header[0]); i++) {
        FRESH();
        flip(dir, "shard-1-of-2.emb", in_header[i]);
        expect_refused(dir, &l2, true, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_HEADER, 1, 0, HDR,
                       "header");
    }
    FRESH();
    flip(dir, "shard-1-of-2.emb", -1);
    expect_refused(dir, &l2, true, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_STATE, 1, rows_end,
                   state_end, "optimizer state");
    expect_refused(dir, &l2, false, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_STATE, 1, rows_end,
                   state_end, "optimizer state");
    /* shard 0's file and shard 1's swapped */
    FRESH();
    snprintf(cmd, sizeof(cmd), "cd %s && mv shard-0-of-2.emb t && mv shard-1-of-2.emb "
             "shard-0-of-2.emb && mv t shard-1-of-2.emb", dir);
    sh(cmd);
    expect_refused(dir, &l2, true, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_PLACE, 0, 0, 0,
                   "swapped");
    /* truncated in its rows, in its header, missing, longer */
    FRESH();
    char path[256];
    snprintf(path, sizeof(path), "%s/shard-1-of-2.emb", dir);
    ck_assert_int_eq(truncate(path, HDR + 10), 0);
    expect_refused(dir, &l2, true, SHS_ERR_IO, SHS__EMB_FAULT_SHORT, 1, HDR, rows_end,
                   "short");
    ck_assert_int_eq(truncate(path, HDR - 1), 0);
    expect_refused(dir, &l2, true, SHS_ERR_IO, SHS__EMB_FAULT_SHORT, 1, HDR - 1, HDR,
                   "short");
    ck_assert_int_eq(unlink(path), 0);
    expect_refused(dir, &l2, true, SHS_ERR_IO, SHS__EMB_FAULT_OPEN, 1, 0, 0, "cannot open");
    FRESH();
    snprintf(cmd, sizeof(cmd), "echo x >> %s/shard-1-of-2.emb", dir);
    sh(cmd);
    expect_refused(dir, &l2, true, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_LONG, 1, 0, 0, "longer");
    /* a save of format version 1 (a 64-byte header, no checksums) */
    FRESH();
    uint32_t v1 = 1;
    snprintf(path, sizeof(path), "%s/shard-0-of-2.emb", dir);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 8, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(&v1, sizeof(v1), 1, f), 1);
    ck_assert_int_eq(fclose(f), 0);
    expect_refused(dir, &l2, true, SHS_ERR_PROTOCOL, SHS__EMB_FAULT_FORMAT, 0, 0, 0,
                   "version 1");
#undef FRESH
    rm_dir(d);
}
END_TEST

/* Rows in memory carry padding and a check word; the file holds only their
 * dim floats, so the format does not depend on the in-memory stride. */
START_TEST(save_drops_the_stride)
{
    enum { STRIDE = SV_DIM + 3 };
    static float wide[SV_ROWS * STRIDE], rows[SV_ROWS * SV_DIM], want[SV_ROWS * SV_DIM],
        scratch[4 * SV_DIM];
    shs__emb_layout_t l1;
    ck_assert_int_eq(shs__emb_layout_init(&l1, SV_ROWS, 1, SHS__EMB_MAP_MODULO), SHS_OK);
    fill_shard(&l1, 0, want, NULL);
    for (size_t k = 0; k < SV_ROWS; k++) {
        memcpy(wide + k * STRIDE, want + k * SV_DIM, SV_DIM * sizeof(float));
        for (int j = SV_DIM; j < STRIDE; j++)
            wide[k * STRIDE + (size_t)j] = 1e9f; /* must not reach the file */
    }
    char *dir = make_dir();
    shs__emb_save_info_t info = save_info(3);
    ck_assert_int_eq(shs__emb_shard_save(dir, &l1, 0, SV_DIM, STRIDE, wide, NULL, &info),
                     SHS_OK);
    char path[256];
    snprintf(path, sizeof(path), "%s/shard-0-of-1.emb", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    ck_assert_int_eq(ftell(f), SHS__EMB_HDR_BYTES + SV_ROWS * SV_DIM * sizeof(float));
    fclose(f);
    ck_assert_int_eq(shs__emb_shard_load(dir, &l1, 0, SV_DIM, rows, NULL, scratch, 4, NULL),
                     SHS_OK);
    EXPECT(memcmp(rows, want, sizeof(want)) == 0, "rows saved with a stride load wrong");
    rm_dir(dir);
}
END_TEST

/* The measured crossover: 16 READs in 800 us (50 us each) against one
 * owner-path request of 150 us: the owner path pays off past 3 READs. */
START_TEST(owner_reads_crossover)
{
    ck_assert_uint_eq(shs__emb_owner_reads_from(800000, 16, 150000), 3);
    /* a NIC: 16 READs in 16 us, a request through a holder's thread 40 us */
    ck_assert_uint_eq(shs__emb_owner_reads_from(16000, 16, 40000), 40);
    /* bounds: never below 1, never above 2^20, nothing measured: read */
    ck_assert_uint_eq(shs__emb_owner_reads_from(800000, 16, 1000), 1);
    ck_assert_uint_eq(shs__emb_owner_reads_from(1, 16, 1000000000), 1u << 20);
    ck_assert_uint_eq(shs__emb_owner_reads_from(0, 16, 1000), 1u << 20);
}
END_TEST

Suite *embedding_suite(void)
{
    Suite *s = suite_create("embedding");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, layout_roundtrip);
    tcase_add_test(tc, reshard);
    tcase_add_test(tc, init_by_row);
    tcase_add_test(tc, optimizers_by_hand);
    tcase_add_test(tc, plan_dedupe_pack);
    tcase_add_test(tc, plan_refuses_bad_ids);
    tcase_add_test(tc, plan_runs_and_pooling);
    tcase_add_test(tc, save_load_reshard);
    tcase_add_test(tc, load_refuses_bad_saves);
    tcase_add_test(tc, load_refuses_spoilt_saves);
    tcase_add_test(tc, save_drops_the_stride);
    tcase_add_test(tc, owner_reads_crossover);
    tcase_add_test(tc, cache_age_epoch_admission);
    tcase_add_test(tc, plan_split_cached);
    suite_add_tcase(s, tc);
    /* 7.7 million values: a second of CPU, more under valgrind or load */
    TCase *big = tcase_create("init");
    tcase_set_timeout(big, 30);
    tcase_add_test(big, init_range_large_table);
    suite_add_tcase(s, big);
    return s;
}

/* Collectives on the host: the reduction kernels (every tail length and
 * alignment, both types, the scaled form of an average), the argument
 * checks that need no device, and the pure pieces of algorithms/coll/
 * (parameter checks, chunk sizing, the plan of a call's streams, call
 * signatures). The ring itself runs in the guest (tests/guest/test_coll.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shadowsync/shadowsync.h>

#include "algorithms/coll/coll.h"
#include "algorithms/reduce.h"
#include "log_capture.h"
#include "unit.h"

#define LEN 300

START_TEST(test_sum_f32_every_length_and_offset)
{
    static float dst[LEN + 8], src[LEN + 8], want[LEN + 8];
    for (size_t off = 0; off < 4; off++) {
        for (size_t n = 0; n <= 260; n++) {
            for (size_t i = 0; i < LEN + 8; i++) {
                dst[i] = (float)(i % 13) - 6;
                src[i] = (float)(i % 7) * 3;
                want[i] = dst[i] + (i >= off && i < off + n ? src[i] : 0);
            }
            shs__reduce_sum_f32(dst + off, src + off, n);
            if (memcmp(dst, want, sizeof(dst)) != 0)
                ck_abort_msg("f32 sum of %zu at offset %zu is wrong (or wrote outside)", n, off);
        }
    }
}
END_TEST

START_TEST(test_sum_f64_and_scale)
{
    static double dst[LEN], src[LEN];
    static float fd[LEN], fs[LEN];
    for (size_t n = 0; n <= 200; n += 7) {
        for (size_t i = 0; i < LEN; i++) {
            dst[i] = (double)i;
            src[i] = 2.0 * (double)i + 1;
            fd[i] = (float)i;
            fs[i] = 3.0f;
        }
        shs__reduce_sum_scale_f64(dst, src, n, 0.25);
        shs__reduce_sum_scale_f32(fd, fs, n, 0.5f);
        for (size_t i = 0; i < LEN; i++) {
            double w = i < n ? (3.0 * (double)i + 1) * 0.25 : (double)i;
            float wf = i < n ? ((float)i + 3.0f) * 0.5f : (float)i;
            if (dst[i] != w || fd[i] != wf)
                ck_abort_msg("scaled sum of %zu: element %zu is %g/%g, expected %g/%g", n, i,
                             dst[i], (double)fd[i], w, (double)wf);
        }
        shs__reduce_sum_f64(dst, src, n);
        for (size_t i = 0; i < n; i++)
            if (dst[i] != (3.0 * (double)i + 1) * 0.25 + 2.0 * (double)i + 1)
                ck_abort_msg("f64 sum of %zu: element %zu", n, i);
    }
}
END_TEST

/* ---- bfloat16 on the wire */

static float f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint16_t enc1(float f)
{
    uint16_t h;
    shs__bf16_encode(&h, &f, 1);
    return h;
}

static float dec1(uint16_t h)
{
    float f;
    shs__bf16_decode(&f, &h, 1);
    return f;
}

/* Every one of the 65536 bf16 values: it survives decode then encode; the
 * floats just below, exactly at and just above the midpoint to the next
 * value round down, to even, and up; a NaN stays a NaN even when only its
 * low bits are set (a plain rounding would carry it into infinity). */
START_TEST(test_bf16_rounds_to_nearest_even)
{
    for (uint32_t h = 0; h < 65536; h++) {
        bool nan = (h & 0x7fffu) > 0x7f80u, inf = (h & 0x7fffu) == 0x7f80u;
        uint16_t back = enc1(dec1((uint16_t)h));
        if (nan) {
            ck_assert_msg(isnan(dec1(back)), "NaN 0x%04x came back as 0x%04x", h, back);
            continue;
        }
        ck_assert_msg(back == h, "0x%04x came back as 0x%04x", h, back);
        if (inf)
            continue;
        uint32_t bits = h << 16;
        uint16_t up = (uint16_t)(h + 1), even = (h & 1u) ? up : (uint16_t)h;
        ck_assert_uint_eq(enc1(f32_bits(bits | 0x7fffu)), h);
        ck_assert_msg(enc1(f32_bits(bits | 0x8000u)) == even, "tie above 0x%04x", h);
        ck_assert_uint_eq(enc1(f32_bits(bits | 0x8001u)), up);
        ck_assert_uint_eq(enc1(f32_bits(bits | 0xffffu)), up);
    }
    ck_assert(isnan(dec1(enc1(f32_bits(0x7f800001u)))));  /* low-bit NaN */
    ck_assert(isnan(dec1(enc1(f32_bits(0xffc00000u)))));
    ck_assert_uint_eq(enc1(-0.0f), 0x8000u);
    ck_assert_uint_eq(enc1(f32_bits(0x7f7fffffu)), 0x7f80u); /* FLT_MAX: infinity */
    ck_assert_uint_eq(enc1(1.0f), 0x3f80u);
    /* relative error of a normal float: at most 2^-8 */
    uint32_t x = 12345;
    for (int i = 0; i < 100000; i++) {
        x = x * 1664525u + 1013904223u;
        float f = f32_bits((x & 0x3fffffffu) | 0x00800000u); /* normal, below 2^65 */
        float g = dec1(enc1(f));
        ck_assert_msg(fabs((double)g - (double)f) <= ldexp(fabs((double)f), -8),
                      "%a became %a", (double)f, (double)g);
    }
}
END_TEST

/* The five bf16 kernels over every tail length and offset, and nothing
 * written outside [off, off + n). */
START_TEST(test_bf16_kernels_every_length)
{
    static float dst[LEN + 8], want[LEN + 8], src[LEN + 8];
    static uint16_t h[LEN + 8], hwant[LEN + 8];
    for (size_t off = 0; off < 3; off++)
        for (size_t n = 0; n <= 200; n += 1 + n / 20) {
            for (size_t i = 0; i < LEN + 8; i++) {
                src[i] = ((float)(i % 29) - 14.0f) * 1.001f;
                h[i] = hwant[i] = (uint16_t)(0x3f80u + i % 7); /* 1.0 .. 1.047 */
                dst[i] = want[i] = (float)i;
            }
            bool in;
            shs__bf16_encode(h + off, src + off, n);
            for (size_t i = 0; i < LEN + 8; i++) {
                in = i >= off && i < off + n;
                ck_assert_uint_eq(h[i], in ? enc1(src[i]) : hwant[i]);
            }
            shs__reduce_sum_bf16(dst + off, h + off, n);
            for (size_t i = 0; i < LEN + 8; i++) {
                in = i >= off && i < off + n;
                ck_assert(dst[i] == (in ? want[i] + dec1(h[i]) : want[i]));
                want[i] = dst[i];
            }
            shs__reduce_sum_scale_bf16(dst + off, h + off, n, 0.25f);
            for (size_t i = 0; i < LEN + 8; i++) {
                in = i >= off && i < off + n;
                ck_assert(dst[i] == (in ? (want[i] + dec1(h[i])) * 0.25f : want[i]));
                want[i] = dst[i];
            }
            shs__bf16_round(dst + off, n);
            for (size_t i = 0; i < LEN + 8; i++) {
                in = i >= off && i < off + n;
                ck_assert(dst[i] == (in ? dec1(enc1(want[i])) : want[i]));
                want[i] = dst[i];
            }
            shs__bf16_decode(dst + off, h + off, n);
            for (size_t i = 0; i < LEN + 8; i++) {
                in = i >= off && i < off + n;
                ck_assert(dst[i] == (in ? dec1(h[i]) : want[i]));
            }
        }
}
END_TEST

/* The arithmetic of one segment's trip round a bf16 ring, in ring.c's
 * order: the first rank's value is encoded, each next rank decodes, adds
 * its own in float32 (the last one scales for an average), encodes again;
 * the owner rounds the final value, which the allgather copies. The result
 * stays within collective.h's bound, n (2^-8 + 2^-23) (1 + 2^-7)^n sum |x|,
 * on inputs made to cancel and of mixed magnitudes, for n = 2..16. */
START_TEST(test_bf16_ring_error_bound)
{
    enum { ELEMS = 4096, NMAX = 16 };
    static float x[NMAX][ELEMS], acc[ELEMS];
    static uint16_t wire[ELEMS];
    uint32_t seed = 99;
    for (int n = 2; n <= NMAX; n++)
        for (int op = 0; op < 2; op++) {
            for (int k = 0; k < n; k++)
                for (size_t i = 0; i < ELEMS; i++) {
                    seed = seed * 1664525u + 1013904223u;
                    double mag = ldexp(1.0, (int)(seed >> 27) - 8); /* 2^-8 .. 2^23 */
                    double v = mag * ((double)(seed & 0xffffu) / 65536.0 - 0.5);
                    /* element i % 3 == 0: the ranks cancel (x, -x, x, ...) */
                    x[k][i] = i % 3 != 0 || k == 0 ? (float)v : k % 2 ? -x[0][i] : x[0][i];
                }
            memcpy(acc, x[0], sizeof(acc));
            for (int k = 1; k < n; k++) {
                shs__bf16_encode(wire, acc, ELEMS);
                memcpy(acc, x[k], sizeof(acc));
                if (op == 1 && k == n - 1)
                    shs__reduce_sum_scale_bf16(acc, wire, ELEMS, (float)(1.0 / n));
                else
                    shs__reduce_sum_bf16(acc, wire, ELEMS);
            }
            shs__bf16_round(acc, ELEMS);
            double factor = n * (ldexp(1.0, -8) + ldexp(1.0, -23)) * pow(1 + ldexp(1.0, -7), n);
            for (size_t i = 0; i < ELEMS; i++) {
                double sum = 0, abs_sum = 0;
                for (int k = 0; k < n; k++) {
                    sum += x[k][i];
                    abs_sum += fabs(x[k][i]);
                }
                double div = op == 1 ? n : 1;
                double err = fabs((double)acc[i] - sum / div), bound = factor * abs_sum / div;
                ck_assert_msg(err <= bound, "n %d %s element %zu: %a off (bound %a)", n,
                              op ? "avg" : "sum", i, err, bound);
            }
        }
}
END_TEST

START_TEST(test_arguments_without_a_device)
{
    ck_assert_uint_eq(shs_dtype_size(SHS_DTYPE_FLOAT32), 4);
    ck_assert_uint_eq(shs_dtype_size(SHS_DTYPE_FLOAT64), 8);
    ck_assert_uint_eq(shs_dtype_size((shs_dtype_t)9), 0);
    shs_coll_t *coll = (shs_coll_t *)0x1;
    ck_assert_int_eq(shs_coll_create(NULL, NULL, &coll), SHS_ERR_INVALID_ARG);
    ck_assert_ptr_eq(coll, (shs_coll_t *)0x1); /* untouched on failure */
    float v = 1;
    ck_assert_int_eq(shs_allreduce(NULL, NULL, &v, 1, SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM),
                     SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs_allreduce_region(NULL, NULL, NULL, 0, 1, SHS_DTYPE_FLOAT32,
                                          SHS_REDUCE_SUM), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs_coll_get_stats(NULL, NULL), SHS_ERR_INVALID_ARG);
    shs_coll_destroy(NULL);
}
END_TEST

/* ---- parameters */

static shs__coll_conf_t knob_conf(void)
{
    return (shs__coll_conf_t){.slot_bytes = 1 << 20, .slots = 4, .stage_bytes = 16 << 20,
                              .eager_bytes = 32 << 10, .min_chunk = 16 << 10, .channel = -1,
                              .timeout_ms = 10000, .rq_depth = 64};
}

START_TEST(test_params_apply_only_the_masked_fields)
{
    shs__coll_conf_t c = knob_conf();
    shs_coll_params_t p = {.field_mask = SHS_COLL_PARAM_SLOTS | SHS_COLL_PARAM_CHANNEL,
                           .slot_bytes = 4096, .slots = 2, .channel = 7, .timeout_ms = 5,
                           .eager_bytes = 8, .min_chunk = 8, .stage_bytes = 0};
    shs__coll_conf_apply(&c, &p);
    ck_assert_int_eq(c.slots, 2);
    ck_assert_int_eq(c.channel, 7);
    ck_assert_uint_eq(c.slot_bytes, 1 << 20); /* not in the mask: the knob's */
    ck_assert_uint_eq(c.stage_bytes, 16 << 20);
    ck_assert_uint_eq(c.eager_bytes, 32 << 10);
    ck_assert_uint_eq(c.min_chunk, 16 << 10);
    ck_assert_int_eq(c.timeout_ms, 10000);
    p.field_mask = SHS_COLL_PARAM_SLOT_BYTES | SHS_COLL_PARAM_STAGE_BYTES |
                   SHS_COLL_PARAM_EAGER_BYTES | SHS_COLL_PARAM_MIN_CHUNK | SHS_COLL_PARAM_TIMEOUT;
    shs__coll_conf_apply(&c, &p);
    ck_assert_uint_eq(c.slot_bytes, 4096);
    ck_assert_uint_eq(c.stage_bytes, 0);
    ck_assert_uint_eq(c.eager_bytes, 8);
    ck_assert_uint_eq(c.min_chunk, 8);
    ck_assert_int_eq(c.timeout_ms, 5);
    ck_assert_int_eq(c.wire, SHS_WIRE_NATIVE);
    p.field_mask = SHS_COLL_PARAM_WIRE;
    p.wire = SHS_WIRE_BF16;
    shs__coll_conf_apply(&c, &p);
    ck_assert_int_eq(c.wire, SHS_WIRE_BF16);
    shs__coll_conf_apply(&c, NULL); /* nothing to apply */
    ck_assert_uint_eq(c.slot_bytes, 4096);
}
END_TEST

START_TEST(test_params_check_caps_and_refuses)
{
    capture_start();
    shs__coll_conf_t c = knob_conf();
    ck_assert_int_eq(shs__coll_conf_check(&c, NULL), SHS_OK);
    ck_assert_str_eq(captured(), "");
    c.slot_bytes = 4096;
    c.eager_bytes = 8192;
    c.min_chunk = 65536;
    ck_assert_int_eq(shs__coll_conf_check(&c, NULL), SHS_OK);
    ck_assert_uint_eq(c.eager_bytes, 4096); /* capped at the chunk */
    ck_assert_uint_eq(c.min_chunk, 4096);

    static const struct {
        size_t slot_bytes, eager_bytes, min_chunk;
        int slots, channel, rq_depth;
        const char *says;
    } bad[] = {
        {63, 0, 8, 4, -1, 64, "chunk of 63 bytes"},
        {100, 0, 8, 4, -1, 64, "chunk of 100 bytes"},
        {((size_t)1 << 30) + 8, 0, 8, 4, -1, 64, "chunk of"},
        {4096, 0, 8, 0, -1, 64, "0 slots"},
        {4096, 0, 8, 64, -1, 1024, "64 slots"},
        {4096, 0, 8, 8, -1, 21, "SHS_RQ_DEPTH (21)"},
        {4096, 0, 4, 4, -1, 64, "smallest chunk of 4 bytes"},
        {4096, 0, 12, 4, -1, 64, "smallest chunk of 12 bytes"},
        {4096, 12, 8, 4, -1, 64, "eager slot of 12 bytes"},
        {4096, 0, 8, 4, 256, 64, "channel 256"},
        {4096, 0, 8, 4, -2, 64, "channel -2"},
        /* a negative size cast to size_t: refused, not capped at the chunk */
        {4096, (size_t)-1, 8, 4, -1, 64, "(a negative value?)"},
        {4096, 0, (size_t)-8, 4, -1, 64, "(a negative value?)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        capture_stop();
        capture_start();
        c = knob_conf();
        c.slot_bytes = bad[i].slot_bytes;
        c.eager_bytes = bad[i].eager_bytes;
        c.min_chunk = bad[i].min_chunk;
        c.slots = bad[i].slots;
        c.channel = bad[i].channel;
        c.rq_depth = bad[i].rq_depth;
        ck_assert_msg(shs__coll_conf_check(&c, NULL) == SHS_ERR_CONFIG, "case %zu passed", i);
        ck_assert_msg(strstr(captured(), bad[i].says) != NULL, "case %zu logged: %s", i,
                      captured());
    }
    /* 2 * slots + 6 == SHS_RQ_DEPTH is the largest that fits */
    c = knob_conf();
    c.slots = 8;
    c.rq_depth = 22;
    ck_assert_int_eq(shs__coll_conf_check(&c, NULL), SHS_OK);

    /* a wire that is neither native nor bf16 */
    c = knob_conf();
    c.wire = 2;
    ck_assert_int_eq(shs__coll_conf_check(&c, NULL), SHS_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(captured(), "wire 2"));

    /* a timeout below 1 ms is refused, and never replaces the knob's */
    c = knob_conf();
    shs_coll_params_t p = {.field_mask = SHS_COLL_PARAM_TIMEOUT, .timeout_ms = 0};
    shs__coll_conf_apply(&c, &p);
    ck_assert_int_eq(c.timeout_ms, 10000);
    ck_assert_int_eq(shs__coll_conf_check(&c, &p), SHS_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(captured(), "timeout 0 ms"));
    capture_stop();
}
END_TEST

/* ---- chunk sizing and the plan of a call */

START_TEST(test_chunk_elems)
{
    shs__coll_conf_t c = knob_conf(); /* 1 MiB chunks, 4 slots, 16 KiB floor */
    ck_assert_uint_eq(shs__coll_chunk_elems(&c, 1u << 20, 4), 1u << 18); /* a slot's worth */
    ck_assert_uint_eq(shs__coll_chunk_elems(&c, 100000, 4), 25000);     /* seg / slots */
    ck_assert_uint_eq(shs__coll_chunk_elems(&c, 1000001, 4), 250008);   /* rounded up to 8 */
    ck_assert_uint_eq(shs__coll_chunk_elems(&c, 10, 4), 4096);          /* the floor */
    ck_assert_uint_eq(shs__coll_chunk_elems(&c, 10, 8), 2048);
    c.min_chunk = c.slot_bytes; /* never cut below a slot */
    ck_assert_uint_eq(shs__coll_chunk_elems(&c, 10, 8), (1u << 20) / 8);

    c = knob_conf();
    c.slot_bytes = 4096;
    c.min_chunk = 64;
    c.slots = 3;
    for (size_t es = 4; es <= 8; es += 4)
        for (size_t seg = 1; seg < 5000; seg += 37) {
            size_t e = shs__coll_chunk_elems(&c, seg, es);
            size_t chunks = (seg + e - 1) / e;
            ck_assert_uint_le(e, c.slot_bytes / es);
            ck_assert_uint_ge(e, c.min_chunk / es);
            ck_assert_uint_eq(e % 8, 0);
            /* `slots` chunks pipeline unless the slots cannot hold the segment */
            if (seg <= (size_t)c.slots * (c.slot_bytes / es))
                ck_assert_msg(chunks <= (size_t)c.slots, "seg %zu es %zu: %zu chunks of %zu",
                              seg, es, chunks, e);
        }
}
END_TEST

/* Every rank's receive stream is its left neighbour's send stream: the same
 * number of chunks, and the same choice of the eager slot for the first. */
START_TEST(test_plan_streams_match_neighbours)
{
    static const size_t counts[] = {1, 2, 3, 7, 8, 9, 100, 1000, 4099, 100003};
    static const size_t eagers[] = {0, 32, 96, 512};
    for (int n = 2; n <= 9; n++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (size_t ei = 0; ei < sizeof(eagers) / sizeof(eagers[0]); ei++) {
                struct shs_coll coll = {.rank = 0, .size = n};
                coll.conf = knob_conf();
                coll.conf.slot_bytes = 1024;
                coll.conf.min_chunk = 64;
                coll.conf.eager_bytes = eagers[ei];
                coll.agree = eagers[ei] >= SIG_AREA ? &shs__coll_agree_area
                                                    : &shs__coll_agree_hash;
                shs__coll_ring_t r[9];
                for (int me = 0; me < n; me++) {
                    shs__coll_ring_init(&r[me], &coll, NULL, n, me, NULL, 0, counts[ci],
                                        counts[ci], SHS_DTYPE_FLOAT32, SHS_REDUCE_SUM);
                    shs__coll_ring_plan(&r[me]);
                }
                uint64_t all = 0;
                for (int me = 0; me < n; me++) {
                    const shs__coll_ring_t *left = &r[(me + n - 1) % n];
                    ck_assert_int_eq(r[me].left, (me + n - 1) % n);
                    ck_assert_msg(r[me].recv_total == left->send_total &&
                                  r[me].recv_eager == left->send_eager,
                                  "n %d count %zu eager %zu rank %d: receives %llu (eager %u), "
                                  "its left sends %llu (eager %u)", n, counts[ci], eagers[ei],
                                  me, (unsigned long long)r[me].recv_total, r[me].recv_eager,
                                  (unsigned long long)left->send_total, left->send_eager);
                    /* a first chunk from a later step (count < n leaves segments
                     * empty) is not in the chain that frees the eager slot */
                    ck_assert(!r[me].send_eager || r[me].su == 0);
                    all += r[me].send_total;
                }
                /* each of the n segments makes 2 (n - 1) hops */
                size_t ce = r[0].chunk_elems, q = counts[ci] / (size_t)n,
                       rem = counts[ci] % (size_t)n;
                uint64_t per_round = rem * ((q + 1 + ce - 1) / ce) + (n - rem) * ((q + ce - 1) / ce);
                ck_assert_uint_eq(all, per_round * 2 * (uint64_t)(n - 1));
                /* rank 0's first chunk (of segment 0) goes eager exactly when it
                 * fits beside the signatures */
                size_t cap = eagers[ei] >= SIG_AREA ? eagers[ei] - SIG_AREA : eagers[ei];
                size_t first = q + (rem > 0) < ce ? q + (rem > 0) : ce;
                ck_assert_uint_eq(r[0].send_eager, first * 4 <= cap);
            }
    /* bf16 wire: chunks and the eager choice count two bytes per float32;
     * float64 keeps its own size (the call is refused before it runs) */
    struct shs_coll coll = {.rank = 0, .size = 4};
    coll.conf = knob_conf();
    coll.conf.slot_bytes = 1024;
    coll.conf.min_chunk = 64;
    coll.conf.eager_bytes = 512 + SIG_AREA;
    coll.conf.wire = SHS_WIRE_BF16;
    coll.agree = &shs__coll_agree_area;
    shs__coll_ring_t r;
    shs__coll_ring_init(&r, &coll, NULL, 4, 0, NULL, 0, 4096, 4096, SHS_DTYPE_FLOAT32,
                        SHS_REDUCE_SUM);
    shs__coll_ring_plan(&r);
    ck_assert_uint_eq(r.wes, 2);
    ck_assert_uint_eq(r.chunk_elems, 256); /* 1024 floats a segment, 4 slots */
    ck_assert_uint_eq(r.send_eager, 1);    /* 512 bytes of bf16 fit the eager slot */
    shs__coll_ring_init(&r, &coll, NULL, 4, 0, NULL, 0, 4096, 4096, SHS_DTYPE_FLOAT64,
                        SHS_REDUCE_SUM);
    ck_assert_uint_eq(r.wes, 8);
}
END_TEST

START_TEST(test_slots_of_eager_and_shared_items)
{
    struct shs_coll coll = {.rank = 1, .size = 4};
    coll.conf = knob_conf();
    coll.conf.slot_bytes = 1024;
    coll.conf.slots = 3;
    coll.conf.eager_bytes = 256;
    size_t shared = 3 * 1024;
    ck_assert_uint_eq(shs__coll_slot_of(&coll, 2, 0, 1), shared + 2 * 256); /* eager */
    ck_assert_uint_eq(shs__coll_slot_of(&coll, 2, 1, 1), 0);
    ck_assert_uint_eq(shs__coll_slot_of(&coll, 2, 3, 1), 2 * 1024);
    ck_assert_uint_eq(shs__coll_slot_of(&coll, 2, 4, 1), 0); /* round again */
    ck_assert_uint_eq(shs__coll_slot_of(&coll, 2, 0, 0), 0);
    ck_assert_uint_eq(shs__coll_slot_of(&coll, 0, 5, 0), 2 * 1024);
}
END_TEST

/* ---- call signatures */

START_TEST(test_signature_compare_and_hash)
{
    const shs__call_sig_t a = {.count = 1000, .elems = 1000, .group = 0x1234, .seq = 5, .n = 4,
                               .dtype = SHS_DTYPE_FLOAT32, .op = SHS_REDUCE_SUM};
    shs__call_sig_t b = a;
    b.seq = 6; /* the sequence number is not part of the agreement */
    ck_assert_uint_eq(shs__coll_sig_why(&a, &b), WHY_OTHER);
    ck_assert_uint_eq(shs__coll_sig_hash(&a), shs__coll_sig_hash(&b));
    ck_assert_uint_eq(shs__coll_sig_hash(&a) & ~(CTRL_HASH - 1), 0);

    static const struct {
        int field;
        unsigned why;
    } cases[] = {{0, WHY_COUNT}, {1, WHY_COUNT}, {2, WHY_GROUP}, {3, WHY_GROUP},
                 {4, WHY_DTYPE}, {5, WHY_OP}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        b = a;
        switch (cases[i].field) {
        case 0: b.count = 2000; break;
        case 1: b.elems = 500; break;
        case 2: b.group = 0x1235; break;
        case 3: b.n = 5; break;
        case 4: b.dtype = SHS_DTYPE_FLOAT64; break;
        case 5: b.op = SHS_REDUCE_AVG; break;
        }
        ck_assert_uint_eq(shs__coll_sig_why(&b, &a), cases[i].why);
        ck_assert_msg(shs__coll_sig_hash(&b) != shs__coll_sig_hash(&a), "field %d", cases[i].field);
    }
    /* the group is named before the count, the count before the type */
    b = a;
    b.n = 3;
    b.count = 1;
    b.dtype = SHS_DTYPE_FLOAT64;
    ck_assert_uint_eq(shs__coll_sig_why(&a, &b), WHY_GROUP);
    b.n = a.n;
    ck_assert_uint_eq(shs__coll_sig_why(&a, &b), WHY_COUNT);
    ck_assert_str_eq(shs__coll_why_name(WHY_COUNT), "count");
    ck_assert_str_eq(shs__coll_why_name(WHY_OTHER), "group, count, dtype or op");

    char buf[160];
    b = a;
    b.count = 2000;
    b.op = SHS_REDUCE_AVG;
    shs__coll_sig_describe(buf, sizeof(buf), &b);
    ck_assert_str_eq(buf, "count 2000 (1000 in this pass), float32, avg, group of 4 ranks "
                          "0000000000001234");
    shs__coll_sig_describe(buf, 12, &b); /* truncated, terminated */
    ck_assert_str_eq(buf, "count 2000 ");
}
END_TEST

START_TEST(test_group_hash_and_abort_payload)
{
    shs_group_t g = {.size = 4, .index = 0, .ranks = {0, 1, 2, 3}};
    ck_assert_uint_eq(shs__coll_group_hash(&g, 4), shs__coll_group_hash(NULL, 4));
    uint64_t h = shs__coll_group_hash(&g, 4);
    shs_group_t rot = {.size = 4, .index = 0, .ranks = {1, 2, 3, 0}};
    ck_assert_uint_ne(shs__coll_group_hash(&rot, 4), h); /* a rotation is another ring */
    ck_assert_uint_ne(shs__coll_group_hash(NULL, 3), h);
    for (int n = 1; n < 40; n++)
        ck_assert_uint_ne(shs__coll_group_hash(NULL, n), 0);

    static const int origins[] = {0, 1, 7, 1000, (1 << 18) - 1};
    for (unsigned why = WHY_OTHER; why <= WHY_OP; why++)
        for (size_t i = 0; i < sizeof(origins) / sizeof(origins[0]); i++) {
            uint32_t p = shs__coll_abort_payload(why, origins[i]);
            ck_assert_uint_eq(p & ~(CTRL_HASH - 1), 0); /* an abort, not a hash */
            unsigned w;
            int o;
            shs__coll_abort_decode(0xab000000u | (uint32_t)KIND_CTRL << IMM_KIND_SHIFT | p, &w,
                                   &o);
            ck_assert_uint_eq(w, why);
            ck_assert_int_eq(o, origins[i]);
        }
}
END_TEST

Suite *collective_suite(void)
{
    Suite *s = suite_create("collective");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sum_f32_every_length_and_offset);
    tcase_add_test(tc, test_sum_f64_and_scale);
    tcase_add_test(tc, test_bf16_rounds_to_nearest_even);
    tcase_add_test(tc, test_bf16_kernels_every_length);
    tcase_add_test(tc, test_bf16_ring_error_bound);
    tcase_add_test(tc, test_arguments_without_a_device);
    tcase_add_test(tc, test_params_apply_only_the_masked_fields);
    tcase_add_test(tc, test_params_check_caps_and_refuses);
    tcase_add_test(tc, test_chunk_elems);
    tcase_add_test(tc, test_plan_streams_match_neighbours);
    tcase_add_test(tc, test_slots_of_eager_and_shared_items);
    tcase_add_test(tc, test_signature_compare_and_hash);
    tcase_add_test(tc, test_group_hash_and_abort_payload);
    suite_add_tcase(s, tc);
    return s;
}

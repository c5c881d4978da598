/* Collectives on the host: the reduction kernels (every tail length and
 * alignment, both types, the scaled form of an average) and the argument
 * checks that need no device. The ring itself runs in the guest
 * (tests/guest/test_coll.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shadowsync/shadowsync.h>

#include "algorithms/reduce.h"
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

Suite *collective_suite(void)
{
    Suite *s = suite_create("collective");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sum_f32_every_length_and_offset);
    tcase_add_test(tc, test_sum_f64_and_scale);
    tcase_add_test(tc, test_arguments_without_a_device);
    suite_add_tcase(s, tc);
    return s;
}

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime/log.h"
#include "log_capture.h"
#include "unit.h"

START_TEST(test_level_parse)
{
    ck_assert_int_eq(shs__log_level_parse("error"), SHS_LOG_LVL_ERROR);
    ck_assert_int_eq(shs__log_level_parse("WARN"), SHS_LOG_LVL_WARN);
    ck_assert_int_eq(shs__log_level_parse("warning"), SHS_LOG_LVL_WARN);
    ck_assert_int_eq(shs__log_level_parse("info"), SHS_LOG_LVL_INFO);
    ck_assert_int_eq(shs__log_level_parse("Debug"), SHS_LOG_LVL_DEBUG);
    ck_assert_int_eq(shs__log_level_parse("trace"), SHS_LOG_LVL_TRACE);
    ck_assert_int_eq(shs__log_level_parse("0"), SHS_LOG_LVL_ERROR);
    ck_assert_int_eq(shs__log_level_parse("3"), SHS_LOG_LVL_DEBUG);
    ck_assert_int_eq(shs__log_level_parse("5"), -1);
    ck_assert_int_eq(shs__log_level_parse("10"), -1);
    ck_assert_int_eq(shs__log_level_parse("loud"), -1);
    ck_assert_int_eq(shs__log_level_parse("info "), -1);
    ck_assert_int_eq(shs__log_level_parse(""), -1);
    ck_assert_int_eq(shs__log_level_parse(NULL), -1);
}
END_TEST

START_TEST(test_level_names_and_clamp)
{
    ck_assert_str_eq(shs__log_level_name(SHS_LOG_LVL_INFO), "info");
    ck_assert_str_eq(shs__log_level_name(7), "?");
    shs__log_set_level(99);
    ck_assert_int_eq(shs__log_level(), SHS_LOG_LVL_TRACE);
    shs__log_set_level(-5);
    ck_assert_int_eq(shs__log_level(), SHS_LOG_LVL_ERROR);
}
END_TEST

START_TEST(test_format_with_rank)
{
    shs__log_set_rank(3);
    SHS_WARN("peer %d qp 0x%x unreachable", 2, 0x1a2b);
    ck_assert_str_eq(captured(), "shadowsync[rank 3] warn: peer 2 qp 0x1a2b unreachable\n");
}
END_TEST

START_TEST(test_format_unknown_rank_and_newline)
{
    SHS_ERROR("bootstrap failed\n");
    ck_assert_str_eq(captured(), "shadowsync[rank ?] error: bootstrap failed\n");
}
END_TEST

START_TEST(test_threshold_filters)
{
    SHS_INFO("hidden at warn");
    SHS_DEBUG("hidden too");
    SHS_TRACE("compiled out");
    ck_assert_str_eq(captured(), "");
    shs__log_set_level(SHS_LOG_LVL_INFO);
    SHS_INFO("shown");
    ck_assert_str_eq(captured(), "shadowsync[rank ?] info: shown\n");
}
END_TEST

START_TEST(test_debug_adds_location)
{
    shs__log_set_level(SHS_LOG_LVL_DEBUG);
    SHS_DEBUG("where");
    const char *out = captured();
    ck_assert_ptr_nonnull(strstr(out, "debug: where (test_log.c:"));
    ck_assert_int_eq(out[strlen(out) - 1], '\n');
}
END_TEST

START_TEST(test_errno_preserved)
{
    errno = EBADF;
    SHS_ERROR("a failing call: %s", strerror(errno));
    ck_assert_int_eq(errno, EBADF);
    errno = ECONNRESET;
    SHS_INFO("filtered, still must not touch errno");
    ck_assert_int_eq(errno, ECONNRESET);
}
END_TEST

START_TEST(test_long_message_truncated_to_one_line)
{
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    SHS_ERROR("%s", big);
    const char *out = captured();
    size_t len = strlen(out);
    ck_assert_uint_lt(len, 1025);
    ck_assert_uint_gt(len, 1000);
    ck_assert_int_eq(out[len - 1], '\n');
    ck_assert_ptr_eq(strchr(out, '\n'), out + len - 1);
    ck_assert_int_eq(strncmp(out + len - 4, "...", 3), 0);
}
END_TEST

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, capture_start, capture_stop);
    tcase_add_test(tc, test_level_parse);
    tcase_add_test(tc, test_level_names_and_clamp);
    tcase_add_test(tc, test_format_with_rank);
    tcase_add_test(tc, test_format_unknown_rank_and_newline);
    tcase_add_test(tc, test_threshold_filters);
    tcase_add_test(tc, test_debug_adds_location);
    tcase_add_test(tc, test_errno_preserved);
    tcase_add_test(tc, test_long_message_truncated_to_one_line);
    suite_add_tcase(s, tc);
    return s;
}

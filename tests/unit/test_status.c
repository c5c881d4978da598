#include <string.h>

#include <shadowsync/shadowsync.h>

#include "unit.h"

START_TEST(test_every_code_has_a_distinct_string)
{
    const shs_status_t codes[] = {
        SHS_OK, SHS_ERR_NO_MEMORY, SHS_ERR_NO_RESOURCE, SHS_ERR_NO_DEVICE,
        SHS_ERR_IO, SHS_ERR_DEVICE, SHS_ERR_PEER_FAILED, SHS_ERR_CONNECT,
        SHS_ERR_REMOTE_ACCESS, SHS_ERR_TRANSPORT, SHS_ERR_PROTOCOL,
        SHS_ERR_CONFIG, SHS_ERR_TOKEN_MISMATCH, SHS_ERR_VERSION_MISMATCH,
        SHS_ERR_SIZE_MISMATCH, SHS_ERR_UNSUPPORTED, SHS_ERR_INVALID_ARG,
        SHS_ERR_OUT_OF_BOUNDS, SHS_ERR_BAD_STATE, SHS_ERR_TIMEOUT,
        SHS_ERR_CANCELED,
    };
    size_t n = sizeof(codes) / sizeof(codes[0]);
    for (size_t i = 0; i < n; i++) {
        const char *s = shs_status_string(codes[i]);
        ck_assert_ptr_nonnull(s);
        ck_assert_str_ne(s, "unknown status");
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(s, shs_status_string(codes[j]));
    }
}
END_TEST

START_TEST(test_unknown_code)
{
    ck_assert_str_eq(shs_status_string((shs_status_t)-12345), "unknown status");
}
END_TEST

START_TEST(test_scope_macros)
{
    ck_assert(SHS_STATUS_IS_LOCAL(SHS_ERR_NO_MEMORY));
    ck_assert(SHS_STATUS_IS_PEER(SHS_ERR_PEER_FAILED));
    ck_assert(!SHS_STATUS_IS_PEER(SHS_ERR_TIMEOUT));
    ck_assert(SHS_STATUS_IS_CONFIG(SHS_ERR_TOKEN_MISMATCH));
    ck_assert(SHS_STATUS_IS_ARG(SHS_ERR_OUT_OF_BOUNDS));
    ck_assert(SHS_STATUS_IS_TIMEOUT(SHS_ERR_TIMEOUT));
    ck_assert(!SHS_STATUS_IS_LOCAL(SHS_OK));
}
END_TEST

START_TEST(test_version)
{
    ck_assert_str_eq(shs_version(), SHS_VERSION_STRING);
}
END_TEST

Suite *status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_every_code_has_a_distinct_string);
    tcase_add_test(tc, test_unknown_code);
    tcase_add_test(tc, test_scope_macros);
    tcase_add_test(tc, test_version);
    suite_add_tcase(s, tc);
    return s;
}

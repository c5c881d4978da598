/* transport: GID choice from a fake sysfs tree, transfer splitting, the
 * params/config merge and completion-error hints. No device needed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/config.h"
#include "runtime/log.h"
#include "log_capture.h"
#include "transport/transport.h"
#include "unit.h"

/* ---- a fake /sys/class/infiniband tree in a temp dir ---- */

static char root[256];

static void mkdirs(const char *path)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    mkdir(buf, 0755);
}

static void put(const char *dev, int port, const char *kind, int idx, const char *text)
{
    char dir[512], path[600];
    snprintf(dir, sizeof(dir), "%s/%s/ports/%d/%s", root, dev, port, kind);
    mkdirs(dir);
    snprintf(path, sizeof(path), "%s/%d", dir, idx);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", text);
    fclose(f);
}

static void gid(const char *dev, int idx, const char *g, const char *type)
{
    put(dev, 1, "gids", idx, g);
    if (type != NULL)
        put(dev, 1, "gid_attrs/types", idx, type);
}

#define ZERO "0000:0000:0000:0000:0000:0000:0000:0000"
#define LL "fe80:0000:0000:0000:5054:00ff:fe12:3456"
#define V4 "0000:0000:0000:0000:0000:ffff:0a00:0001"
#define V6 "2001:0db8:0000:0000:0000:0000:0000:0042"

static void tree_setup(void)
{
    capture_start(); /* the error paths log on purpose; some tests read it */
    snprintf(root, sizeof(root), "/tmp/shs-unit-sysfs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    /* rxe's table as seen in the guest: link-local v1/v2, then IPv4 v1/v2,
     * then empty entries (no type file) */
    gid("rxe0", 0, LL, "IB/RoCE v1");
    gid("rxe0", 1, LL, "RoCE v2");
    gid("rxe0", 2, V4, "IB/RoCE v1");
    gid("rxe0", 3, V4, "RoCE v2");
    gid("rxe0", 4, ZERO, NULL);
    gid("rxe0", 5, ZERO, NULL);
    /* a device with only IPv6 */
    gid("v6dev", 0, LL, "IB/RoCE v1");
    gid("v6dev", 1, V6, "RoCE v2");
    gid("v6dev", 2, V4, "IB/RoCE v1");
    /* a device whose table is empty */
    gid("empty", 0, ZERO, NULL);
    /* InfiniBand: no gid_attrs types at all */
    gid("ib0", 0, LL, NULL);
}

static void tree_teardown(void)
{
    capture_stop();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_gid_prefers_roce_v2_ipv4)
{
    shs__gid_choice_t c;
    ck_assert_int_eq(shs__gid_select(root, "rxe0", 1, -1, &c), SHS_OK);
    ck_assert_int_eq(c.index, 3);
    ck_assert(c.roce_v2);
    ck_assert(c.ipv4_mapped);
    ck_assert_uint_eq(c.gid[10], 0xff);
    ck_assert_uint_eq(c.gid[12], 10);
    ck_assert_uint_eq(c.gid[15], 1);
}
END_TEST

START_TEST(test_gid_v6_global_beats_v1_ipv4)
{
    shs__gid_choice_t c;
    ck_assert_int_eq(shs__gid_select(root, "v6dev", 1, -1, &c), SHS_OK);
    ck_assert_int_eq(c.index, 1);
    ck_assert(c.roce_v2);
    ck_assert(!c.ipv4_mapped);
}
END_TEST

START_TEST(test_gid_override)
{
    shs__gid_choice_t c = {.index = 77};
    ck_assert_int_eq(shs__gid_select(root, "rxe0", 1, 1, &c), SHS_OK);
    ck_assert_int_eq(c.index, 1);
    ck_assert(c.roce_v2);
    ck_assert(!c.ipv4_mapped);
    /* an empty or missing entry is refused, and *choice_p is left alone */
    c.index = 77;
    ck_assert_int_eq(shs__gid_select(root, "rxe0", 1, 4, &c), SHS_ERR_NO_DEVICE);
    ck_assert_int_eq(shs__gid_select(root, "rxe0", 1, 40, &c), SHS_ERR_NO_DEVICE);
    ck_assert_int_eq(c.index, 77);
    ck_assert_ptr_nonnull(strstr(captured(), "rxe0 port 1: gid index 4 is empty"));
}
END_TEST

START_TEST(test_gid_none_usable)
{
    shs__gid_choice_t c;
    ck_assert_int_eq(shs__gid_select(root, "empty", 1, -1, &c), SHS_ERR_NO_DEVICE);
    ck_assert_int_eq(shs__gid_select(root, "nodev", 1, -1, &c), SHS_ERR_NO_DEVICE);
    ck_assert_int_eq(shs__gid_select(root, "rxe0", 2, -1, &c), SHS_ERR_NO_DEVICE);
    ck_assert_int_eq(shs__gid_select(NULL, "rxe0", 1, -1, &c), SHS_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_gid_infiniband_without_types)
{
    shs__gid_choice_t c;
    ck_assert_int_eq(shs__gid_select(root, "ib0", 1, -1, &c), SHS_OK);
    ck_assert_int_eq(c.index, 0);
    ck_assert(!c.roce_v2);
}
END_TEST

START_TEST(test_gid_parse)
{
    uint8_t g[16];
    ck_assert(shs__gid_parse(V4, g));
    ck_assert_uint_eq(g[11], 0xff);
    ck_assert_uint_eq(g[12], 0x0a);
    ck_assert(shs__gid_parse("FE80:0000:0000:0000:0000:0000:0000:0001\n", g));
    ck_assert_uint_eq(g[0], 0xfe);
    ck_assert_uint_eq(g[15], 1);
    ck_assert(!shs__gid_parse("fe80::1", g));
    ck_assert(!shs__gid_parse("0000:0000:0000:0000:0000:ffff:0a00", g));
    ck_assert(!shs__gid_parse("0000:0000:0000:0000:0000:ffff:0a00:0001:0000", g));
    ck_assert(!shs__gid_parse("zzzz:0000:0000:0000:0000:ffff:0a00:0001", g));
    ck_assert(!shs__gid_parse("", g));
}
END_TEST

START_TEST(test_gid_to_string)
{
    uint8_t g[16];
    char s[64];
    ck_assert(shs__gid_parse(V4, g));
    shs__gid_to_string(g, s, sizeof(s));
    ck_assert_str_eq(s, "10.0.0.1");
    ck_assert(shs__gid_parse(V6, g));
    shs__gid_to_string(g, s, sizeof(s));
    ck_assert_str_eq(s, "2001:db8::42");
}
END_TEST

/* ---- splitting ---- */

#define MiB ((size_t)1 << 20)

START_TEST(test_chunk_size)
{
    ck_assert_uint_eq(shs__chunk_size(0, 8 * MiB), 8 * MiB);
    ck_assert_uint_eq(shs__chunk_size(1 * MiB, 8 * MiB), 1 * MiB);
    ck_assert_uint_eq(shs__chunk_size(16 * MiB, 8 * MiB), 8 * MiB); /* the device wins */
    ck_assert_uint_eq(shs__chunk_size(4096, 0), 4096);
    ck_assert_uint_eq(shs__chunk_size(0, 0), (size_t)1 << 30);
    ck_assert_uint_eq(shs__chunk_size(0, (size_t)4 << 30), (size_t)1 << 30);
}
END_TEST

START_TEST(test_read_chunk_size)
{
    ck_assert_uint_eq(shs__read_chunk_size(1 * MiB, 8 * MiB, 4 * MiB), 1 * MiB);
    ck_assert_uint_eq(shs__read_chunk_size(0, 8 * MiB, 0), 8 * MiB);         /* as writes */
    ck_assert_uint_eq(shs__read_chunk_size(16 * MiB, 8 * MiB, 0), 8 * MiB);  /* the device */
    ck_assert_uint_eq(shs__read_chunk_size(4 * MiB, 8 * MiB, 4 * MiB), 2 * MiB); /* budget/2 */
    ck_assert_uint_eq(shs__read_chunk_size(0, 8 * MiB, 1), 1);               /* never 0 */
}
END_TEST

START_TEST(test_split_count)
{
    ck_assert_uint_eq(shs__split_count(0, 8 * MiB), 0);
    ck_assert_uint_eq(shs__split_count(1, 8 * MiB), 1);
    ck_assert_uint_eq(shs__split_count(8 * MiB - 1, 8 * MiB), 1);
    ck_assert_uint_eq(shs__split_count(8 * MiB, 8 * MiB), 1);
    ck_assert_uint_eq(shs__split_count(8 * MiB + 1, 8 * MiB), 2);
    ck_assert_uint_eq(shs__split_count(64 * MiB, 8 * MiB), 8);
    ck_assert_uint_eq(shs__split_count(64 * MiB + 3, 8 * MiB), 9);
}
END_TEST

START_TEST(test_split_pieces_tile_the_range)
{
    const size_t lens[] = {1, 4095, 4096, 4097, 3 * 4096 + 17, 64 * MiB + 5};
    const size_t chunks[] = {1, 4096, 8 * MiB};
    for (size_t a = 0; a < sizeof(lens) / sizeof(lens[0]); a++) {
        for (size_t b = 0; b < sizeof(chunks) / sizeof(chunks[0]); b++) {
            size_t len = lens[a], chunk = chunks[b];
            if (len / chunk > 100000)
                continue;
            size_t n = shs__split_count(len, chunk), next = 0;
            for (size_t i = 0; i < n; i++) {
                size_t off, plen;
                shs__split_piece(len, chunk, i, &off, &plen);
                ck_assert_uint_eq(off, next);
                ck_assert_uint_gt(plen, 0);
                ck_assert_uint_le(plen, chunk);
                next = off + plen;
            }
            ck_assert_uint_eq(next, len);
        }
    }
}
END_TEST

START_TEST(test_qp_timeout_auto)
{
    /* auto: a longer ack timeout on Soft-RoCE only; a set knob always wins */
    ck_assert_int_eq(shs__qp_timeout_for(-1, SHS__RXE_VENDOR_ID), 18);
    ck_assert_int_eq(shs__qp_timeout_for(-1, 0x02c9), 14); /* Mellanox */
    ck_assert_int_eq(shs__qp_timeout_for(14, SHS__RXE_VENDOR_ID), 14);
    ck_assert_int_eq(shs__qp_timeout_for(20, 0x02c9), 20);
}
END_TEST

START_TEST(test_range_ok)
{
    ck_assert(shs__range_ok(0, 4096, 4096));
    ck_assert(shs__range_ok(4096, 0, 4096));
    ck_assert(shs__range_ok(4095, 1, 4096));
    ck_assert(!shs__range_ok(4095, 2, 4096));
    ck_assert(!shs__range_ok(4097, 0, 4096));
    ck_assert(!shs__range_ok(1, SIZE_MAX, 4096)); /* off + len would wrap */
    ck_assert(!shs__range_ok(SIZE_MAX, 1, 4096));
}
END_TEST

/* ---- params over config ---- */

static const char *const *fake_env;

static const char *fake_getenv(const char *name)
{
    for (const char *const *e = fake_env; e != NULL && e[0] != NULL; e += 2)
        if (strcmp(e[0], name) == 0)
            return e[1];
    return NULL;
}

static void load_env(shs__config_t *cfg, const char *const *env)
{
    fake_env = env;
    ck_assert_int_eq(shs__config_load_from(cfg, fake_getenv), SHS_OK);
}

START_TEST(test_params_null_keeps_env)
{
    shs__config_t c;
    char sysfs[256];
    const char *const env[] = {"SHS_RANK", "1", "SHS_SIZE", "4", "SHS_DEVICE", "mlx5_0",
                               "SHS_CONNECT", "oob", NULL};
    load_env(&c, env);
    ck_assert_int_eq(shs__ctx_params_apply(NULL, &c, sysfs, sizeof(sysfs)), SHS_OK);
    ck_assert_int_eq(c.rank, 1);
    ck_assert_int_eq(c.size, 4);
    ck_assert_str_eq(c.device, "mlx5_0");
    ck_assert_int_eq(c.connect_mode, SHS_CONNECT_OOB);
    ck_assert_str_eq(sysfs, "/sys/class/infiniband");
}
END_TEST

START_TEST(test_params_override_only_masked_fields)
{
    shs__config_t c;
    char sysfs[256];
    const char *const env[] = {"SHS_RANK", "1", "SHS_SIZE", "4", "SHS_DEVICE", "mlx5_0",
                               "SHS_GID_INDEX", "3", "SHS_OP_TIMEOUT_MS", "500", NULL};
    load_env(&c, env);
    shs_ctx_params_t p = {
        .field_mask = SHS_CTX_PARAM_DEVICE | SHS_CTX_PARAM_CONNECT_MODE |
                      SHS_CTX_PARAM_SYSFS_ROOT | SHS_CTX_PARAM_RANK,
        .rank = 2,
        .size = 99,      /* not in the mask: ignored */
        .device = "rxe0",
        .gid_index = 7,  /* not in the mask: ignored */
        .connect_mode = SHS_CONNECT_MODE_OOB,
        .sysfs_root = "/tmp/fake",
    };
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_OK);
    ck_assert_int_eq(c.rank, 2);
    ck_assert_int_eq(c.size, 4);
    ck_assert_str_eq(c.device, "rxe0");
    ck_assert_int_eq(c.gid_index, 3);
    ck_assert_int_eq(c.op_timeout_ms, 500);
    ck_assert_int_eq(c.connect_mode, SHS_CONNECT_OOB);
    ck_assert_str_eq(sysfs, "/tmp/fake");
}
END_TEST

START_TEST(test_params_supply_missing_rank_size)
{
    shs__config_t c;
    char sysfs[256];
    const char *const env[] = {NULL};
    load_env(&c, env);
    ck_assert_int_eq(shs__ctx_params_apply(NULL, &c, sysfs, sizeof(sysfs)), SHS_ERR_CONFIG);
    shs_ctx_params_t p = {.field_mask = SHS_CTX_PARAM_RANK | SHS_CTX_PARAM_SIZE,
                          .rank = 0, .size = 2};
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_OK);
    ck_assert_int_eq(c.size, 2);
}
END_TEST

START_TEST(test_params_refused)
{
    shs__config_t c;
    char sysfs[256], longname[200];
    const char *const env[] = {"SHS_RANK", "0", "SHS_SIZE", "2", NULL};
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';

    load_env(&c, env);
    shs_ctx_params_t p = {.field_mask = SHS_CTX_PARAM_RANK, .rank = 2};
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_ERR_CONFIG);

    load_env(&c, env);
    p = (shs_ctx_params_t){.field_mask = SHS_CTX_PARAM_DEVICE, .device = longname};
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_ERR_CONFIG);

    load_env(&c, env);
    p = (shs_ctx_params_t){.field_mask = SHS_CTX_PARAM_CONNECT_MODE,
                           .connect_mode = (shs_connect_mode_t)5};
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(captured(), "connect_mode 5 is neither rdmacm nor oob"));

    load_env(&c, env);
    p = (shs_ctx_params_t){.field_mask = SHS_CTX_PARAM_OP_TIMEOUT, .op_timeout_ms = 0};
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_ERR_CONFIG);

    load_env(&c, env);
    p = (shs_ctx_params_t){.field_mask = SHS_CTX_PARAM_GID_INDEX, .gid_index = -5};
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_ERR_CONFIG);
}
END_TEST

/* ---- completion errors ---- */

START_TEST(test_wc_status_mapping)
{
    ck_assert_int_eq(shs__wc_status_to_status(IBV_WC_SUCCESS), SHS_OK);
    ck_assert_int_eq(shs__wc_status_to_status(IBV_WC_RETRY_EXC_ERR), SHS_ERR_PEER_FAILED);
    ck_assert_int_eq(shs__wc_status_to_status(IBV_WC_REM_ACCESS_ERR), SHS_ERR_REMOTE_ACCESS);
    ck_assert_int_eq(shs__wc_status_to_status(IBV_WC_WR_FLUSH_ERR), SHS_ERR_PEER_FAILED);
    ck_assert_int_eq(shs__wc_status_to_status(IBV_WC_GENERAL_ERR), SHS_ERR_TRANSPORT);
    ck_assert_ptr_nonnull(strstr(shs__wc_status_hint(IBV_WC_RETRY_EXC_ERR), "GID index"));
    ck_assert_ptr_nonnull(strstr(shs__wc_status_hint(IBV_WC_REM_ACCESS_ERR), "rkey"));
    ck_assert_ptr_nonnull(strstr(shs__wc_status_hint(IBV_WC_WR_FLUSH_ERR), "already in error"));
    ck_assert_ptr_nonnull(strstr(shs__wc_status_hint(IBV_WC_RNR_RETRY_EXC_ERR), "not ready"));
}
END_TEST

Suite *transport_suite(void)
{
    Suite *s = suite_create("transport");
    TCase *tc = tcase_create("gid");
    tcase_add_checked_fixture(tc, tree_setup, tree_teardown);
    tcase_add_test(tc, test_gid_prefers_roce_v2_ipv4);
    tcase_add_test(tc, test_gid_v6_global_beats_v1_ipv4);
    tcase_add_test(tc, test_gid_override);
    tcase_add_test(tc, test_gid_none_usable);
    tcase_add_test(tc, test_gid_infiniband_without_types);
    tcase_add_test(tc, test_gid_parse);
    tcase_add_test(tc, test_gid_to_string);
    suite_add_tcase(s, tc);

    tc = tcase_create("split");
    tcase_add_test(tc, test_chunk_size);
    tcase_add_test(tc, test_read_chunk_size);
    tcase_add_test(tc, test_split_count);
    tcase_add_test(tc, test_split_pieces_tile_the_range);
    tcase_add_test(tc, test_range_ok);
    tcase_add_test(tc, test_qp_timeout_auto);
    suite_add_tcase(s, tc);

    tc = tcase_create("params");
    tcase_add_checked_fixture(tc, capture_start, capture_stop);
    tcase_add_test(tc, test_params_null_keeps_env);
    tcase_add_test(tc, test_params_override_only_masked_fields);
    tcase_add_test(tc, test_params_supply_missing_rank_size);
    tcase_add_test(tc, test_params_refused);
    tcase_add_test(tc, test_wc_status_mapping);
    suite_add_tcase(s, tc);
    return s;
}

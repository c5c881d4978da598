#include <errno.h>
#include <ftw.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/memory.h"
#include "unit.h"

static char root[64];

static void write_file(const char *rel, const char *text)
{
    char path[256], dir[256];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    /* mkdir -p of the parent */
    snprintf(dir, sizeof(dir), "%s", path);
    for (char *p = dir + strlen(root) + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0755);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void setup(void)
{
    snprintf(root, sizeof(root), "/tmp/shs-sysfs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    write_file("class/infiniband/node0dev/device/numa_node", "0\n");
    write_file("class/infiniband/nonuma/device/numa_node", "-1\n");
    write_file("class/infiniband/garbage/device/numa_node", "zero\n");
    write_file("class/infiniband/node3dev/device/numa_node", "3\n");
    write_file("kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    shs__log_set_level(SHS_LOG_LVL_ERROR);
}

static void teardown(void)
{
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static size_t meminfo(const char *key)
{
    char line[128];
    size_t v = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, strlen(key)) == 0 && sscanf(line + strlen(key), " %zu", &v) == 1)
            break;
    fclose(f);
    return v;
}

static int thp_enabled(void)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL)
        return 0;
    if (fgets(buf, sizeof(buf), f) == NULL)
        buf[0] = '\0';
    fclose(f);
    return buf[0] != '\0' && strstr(buf, "[never]") == NULL;
}

START_TEST(test_numa_node_from_sysfs)
{
    ck_assert_int_eq(shs__dev_numa_node(root, "node0dev"), 0);
    ck_assert_int_eq(shs__dev_numa_node(root, "node3dev"), 3);
    ck_assert_int_eq(shs__dev_numa_node(root, "nonuma"), -1);
    ck_assert_int_eq(shs__dev_numa_node(root, "garbage"), -1);
    ck_assert_int_eq(shs__dev_numa_node(root, "absent"), -1);
    ck_assert_int_eq(shs__dev_numa_node(root, "../../kernel"), -1);
    ck_assert_int_eq(shs__dev_numa_node(root, NULL), -1);
    ck_assert_int_eq(shs__dev_numa_node(root, ""), -1);
}
END_TEST

START_TEST(test_alloc_small_pages)
{
    shs__mem_params_t p;
    shs__mem_t m;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    shs__mem_params_init(&p, 3 * page + 1);
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_OK);
    ck_assert_uint_eq(m.length, 4 * page);
    ck_assert_uint_eq(m.page_size, page);
    ck_assert_uint_eq((uintptr_t)m.addr % page, 0);
    /* small regions stay on small pages even in auto */
    ck_assert_int_eq(m.kind, SHS_MEM_PAGES);
    ck_assert_int_eq(m.numa_node, -1);
    memset(m.addr, 0xa5, m.length);
    ck_assert_uint_eq(((uint8_t *)m.addr)[m.length - 1], 0xa5);
    shs__mem_free(&m);
    ck_assert_ptr_null(m.addr);
    shs__mem_free(&m); /* second free is a no-op */
    shs__mem_free(NULL);
}
END_TEST

START_TEST(test_alloc_rejects_bad_args)
{
    shs__mem_params_t p;
    shs__mem_t m = {.addr = (void *)0x1};
    shs__mem_params_init(&p, 0);
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_ERR_INVALID_ARG);
    ck_assert_ptr_eq(m.addr, (void *)0x1);
    ck_assert_int_eq(shs__mem_alloc(NULL, &m), SHS_ERR_INVALID_ARG);
    shs__mem_params_init(&p, SIZE_MAX);
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_alloc_hugepages_auto)
{
    shs__mem_params_t p;
    shs__mem_t m;
    size_t len = (size_t)8 << 20;

    shs__mem_params_init(&p, len + 5);
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_OK);
    ck_assert_uint_ge(m.length, len + 5);
    ck_assert_uint_eq(m.length % m.page_size, 0);
    ck_assert_uint_eq((uintptr_t)m.addr % m.page_size, 0);
    if (meminfo("HugePages_Free:") * meminfo("Hugepagesize:") * 1024 >= m.length) {
        ck_assert_int_eq(m.kind, SHS_MEM_HUGETLB);
    } else if (thp_enabled()) {
        ck_assert_int_eq(m.kind, SHS_MEM_THP);
        ck_assert_uint_ge(m.page_size, (size_t)2 << 20);
    } else {
        ck_assert_int_eq(m.kind, SHS_MEM_PAGES);
    }
    memset(m.addr, 1, m.length);
    shs__mem_free(&m);
}
END_TEST

START_TEST(test_alloc_hugepages_off)
{
    shs__mem_params_t p;
    shs__mem_t m;
    shs__mem_params_init(&p, (size_t)8 << 20);
    p.hugepages = SHS_TRI_OFF;
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_OK);
    ck_assert_int_eq(m.kind, SHS_MEM_PAGES);
    ck_assert_uint_eq(m.length, (size_t)8 << 20);
    shs__mem_free(&m);
}
END_TEST

START_TEST(test_hugepages_on_without_any)
{
    shs__mem_params_t p;
    shs__mem_t m;
    /* THP is "[never]" in the fake tree; only a hugetlb pool could serve. */
    shs__mem_params_init(&p, 4096);
    p.hugepages = SHS_TRI_ON;
    p.sysfs_root = root;
    shs_status_t st = shs__mem_alloc(&p, &m);
    if (meminfo("HugePages_Free:") > 0) {
        ck_assert_int_eq(st, SHS_OK);
        ck_assert_int_eq(m.kind, SHS_MEM_HUGETLB);
        shs__mem_free(&m);
    } else {
        ck_assert_int_eq(st, SHS_ERR_NO_RESOURCE);
        /* auto falls back instead */
        p.hugepages = SHS_TRI_AUTO;
        p.length = (size_t)4 << 20;
        ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_OK);
        ck_assert_int_eq(m.kind, SHS_MEM_PAGES);
        shs__mem_free(&m);
    }
}
END_TEST

START_TEST(test_alloc_numa_local_to_device)
{
    shs__mem_params_t p;
    shs__mem_t m;
    shs__mem_params_init(&p, 1 << 16);
    p.device = "node0dev";
    p.sysfs_root = root;
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_OK);
    ck_assert_int_eq(m.numa_node, 0);
    if (numa_available() >= 0) {
        int mode = -1;
        unsigned long mask[16] = {0};
        ck_assert_int_eq(get_mempolicy(&mode, mask, sizeof(mask) * 8, m.addr, MPOL_F_ADDR), 0);
        ck_assert_int_eq(mode, MPOL_PREFERRED);
        ck_assert_uint_eq(mask[0], 1);
    }
    shs__mem_free(&m);

    /* a node this host does not have is only a preference: still memory */
    p.device = "node3dev";
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_OK);
    ck_assert_int_eq(m.numa_node, 3);
    shs__mem_free(&m);

    p.device = "nonuma";
    ck_assert_int_eq(shs__mem_alloc(&p, &m), SHS_OK);
    ck_assert_int_eq(m.numa_node, -1);
    if (numa_available() >= 0) {
        int mode = -1;
        ck_assert_int_eq(get_mempolicy(&mode, NULL, 0, m.addr, MPOL_F_ADDR), 0);
        ck_assert_int_eq(mode, MPOL_DEFAULT);
    }
    shs__mem_free(&m);
}
END_TEST

START_TEST(test_pin_to_cpu_list)
{
    cpu_set_t before, after;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(before), &before), 0);
    int cpu = -1;
    for (int i = CPU_SETSIZE - 1; i >= 0; i--)
        if (CPU_ISSET(i, &before))
            cpu = i;
    ck_assert_int_ge(cpu, 0);
    char list[16];
    snprintf(list, sizeof(list), "%d", cpu);
    ck_assert_int_eq(shs__pin_thread_near(list), SHS_OK);
    ck_assert_int_eq(sched_getaffinity(0, sizeof(after), &after), 0);
    ck_assert_int_eq(CPU_COUNT(&after), 1);
    ck_assert(CPU_ISSET(cpu, &after));
}
END_TEST

START_TEST(test_pin_refusals)
{
    ck_assert_int_eq(shs__pin_thread_near(NULL), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__pin_thread_near(""), SHS_ERR_INVALID_ARG);
    /* a cpu this process may not use */
    ck_assert_int_eq(shs__pin_thread_near("4000"), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__pin_thread_near("no_such_rdma_device"), SHS_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_memlock_advice)
{
    char buf[512];
    shs__memlock_advice(64 << 10, 4 << 20, buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "RLIMIT_MEMLOCK is 64 KiB; registering 4 MiB needs more"));
    ck_assert_ptr_nonnull(strstr(buf, "ulimit -l unlimited"));
    ck_assert_ptr_nonnull(strstr(buf, "LimitMEMLOCK=infinity"));
    shs__memlock_advice(8ull << 30, (size_t)3 << 29, buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "RLIMIT_MEMLOCK is 8 GiB; registering 1536 MiB"));
    shs__memlock_advice(8 << 20, 0, buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "RLIMIT_MEMLOCK is 8 MiB: registering more than that fails"));
    shs__memlock_advice(SHS_MEMLOCK_UNLIMITED, 1 << 20, buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "unlimited"));
    /* truncation is safe */
    shs__memlock_advice(64 << 10, 4 << 20, buf, 16);
    ck_assert_uint_eq(strlen(buf), 15);
}
END_TEST

/* The limit reported follows setrlimit, unless CAP_IPC_LOCK lifts it. */
START_TEST(test_memlock_limit)
{
    struct rlimit rl = {256 << 10, 256 << 10};
    struct rlimit old;
    ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &old), 0);
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < rl.rlim_max)
        rl.rlim_cur = rl.rlim_max = old.rlim_max;
    ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0); /* in Check's forked child */
    uint64_t got = shs__memlock_limit();
    ck_assert(got == rl.rlim_cur || got == SHS_MEMLOCK_UNLIMITED);
    if (geteuid() != 0)
        ck_assert_uint_eq(got, rl.rlim_cur);
}
END_TEST

Suite *memory_suite(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_numa_node_from_sysfs);
    tcase_add_test(tc, test_alloc_small_pages);
    tcase_add_test(tc, test_alloc_rejects_bad_args);
    tcase_add_test(tc, test_alloc_hugepages_auto);
    tcase_add_test(tc, test_alloc_hugepages_off);
    tcase_add_test(tc, test_hugepages_on_without_any);
    tcase_add_test(tc, test_alloc_numa_local_to_device);
    tcase_add_test(tc, test_pin_to_cpu_list);
    tcase_add_test(tc, test_pin_refusals);
    tcase_add_test(tc, test_memlock_advice);
    tcase_add_test(tc, test_memlock_limit);
    suite_add_tcase(s, tc);
    return s;
}

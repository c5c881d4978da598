#include <errno.h>
#include <hwloc.h>
#include <numa.h>
#include <numaif.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/memory.h"

/* Used when the kernel does not say: x86-64 and aarch64 (4 KiB pages) PMD size. */
#define FALLBACK_HUGE_SIZE ((size_t)2 << 20)

static bool read_small(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return n > 0;
}

static const char *sysfs(const char *root)
{
    return root != NULL ? root : "/sys";
}

int shs__dev_numa_node(const char *sysfs_root, const char *dev)
{
    char path[512], buf[32], *end;

    if (dev == NULL || *dev == '\0' || strchr(dev, '/') != NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/class/infiniband/%s/device/numa_node", sysfs(sysfs_root),
             dev);
    if (!read_small(path, buf, sizeof(buf)))
        return -1;
    long v = strtol(buf, &end, 10);
    return *end == '\0' && v >= 0 && v < 4096 ? (int)v : -1;
}

static size_t hugetlb_size(void)
{
    char line[128];
    size_t kb = 0;
    FILE *f = fopen("/proc/meminfo", "re");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Hugepagesize: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* THP size, or 0 when THP is off ("[never]") or not built in. */
static size_t thp_size(const char *root)
{
    char path[512], buf[128], *end;

    snprintf(path, sizeof(path), "%s/kernel/mm/transparent_hugepage/enabled", sysfs(root));
    if (!read_small(path, buf, sizeof(buf)) || strstr(buf, "[never]") != NULL)
        return 0;
    snprintf(path, sizeof(path), "%s/kernel/mm/transparent_hugepage/hpage_pmd_size",
             sysfs(root));
    if (!read_small(path, buf, sizeof(buf)))
        return FALLBACK_HUGE_SIZE;
    unsigned long long v = strtoull(buf, &end, 10);
    return *end == '\0' && v > 0 && (v & (v - 1)) == 0 ? (size_t)v : FALLBACK_HUGE_SIZE;
}

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

void shs__mem_params_init(shs__mem_params_t *p, size_t length)
{
    memset(p, 0, sizeof(*p));
    p->length = length;
    p->numa_node = SHS_NUMA_FROM_DEVICE;
    p->hugepages = SHS_TRI_AUTO;
}

static void *map_anon(size_t len, int extra_flags)
{
    void *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags,
                   -1, 0);
    return a == MAP_FAILED ? NULL : a;
}

/* THP only backs PMD-aligned ranges: over-map by one huge page and trim. */
static void *map_thp(size_t len, size_t huge)
{
    uint8_t *raw = map_anon(len + huge, 0);
    if (raw == NULL)
        return NULL;
    uint8_t *start = (uint8_t *)round_up((uintptr_t)raw, huge);
    size_t head = (size_t)(start - raw);
    if (head > 0)
        munmap(raw, head);
    if (huge - head > 0)
        munmap(start + len, huge - head);
    if (madvise(start, len, MADV_HUGEPAGE) != 0) {
        SHS_DEBUG("madvise(MADV_HUGEPAGE) on %zu bytes: %s", len, strerror(errno));
        munmap(start, len);
        return NULL;
    }
    return start;
}

static void prefer_node(void *addr, size_t len, int node)
{
    if (numa_available() < 0 || node > numa_max_node()) {
        SHS_DEBUG("numa node %d not usable here; memory placed by first touch", node);
        return;
    }
    struct bitmask *mask = numa_allocate_nodemask();
    if (mask == NULL)
        return;
    numa_bitmask_setbit(mask, (unsigned)node);
    /* PREFERRED, not BIND: a full node should spill, not fail registration. */
    if (mbind(addr, len, MPOL_PREFERRED, mask->maskp, mask->size + 1, 0) != 0)
        SHS_WARN("mbind of %zu bytes to numa node %d failed: %s; memory placed by first touch",
                 len, node, strerror(errno));
    numa_bitmask_free(mask);
}

shs_status_t shs__mem_alloc(const shs__mem_params_t *p, shs__mem_t *mem_p)
{
    shs__mem_t m = {.numa_node = -1, .kind = SHS_MEM_PAGES};
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    if (p == NULL || mem_p == NULL || p->length == 0 || p->length > SIZE_MAX / 2)
        return SHS_ERR_INVALID_ARG;
    m.numa_node = p->numa_node == SHS_NUMA_FROM_DEVICE
                      ? shs__dev_numa_node(p->sysfs_root, p->device)
                      : p->numa_node;

    if (p->hugepages != SHS_TRI_OFF) {
        size_t tlb = hugetlb_size();
        size_t thp = thp_size(p->sysfs_root);
        /* In auto mode a region smaller than a hugepage stays on small pages:
         * rounding 4 KiB up to 2 MiB wastes more than the TLB saves. */
        bool want = p->hugepages == SHS_TRI_ON;
        if (tlb > 0 && (want || p->length >= tlb)) {
            m.length = round_up(p->length, tlb);
            m.addr = map_anon(m.length, MAP_HUGETLB);
            if (m.addr != NULL) {
                m.kind = SHS_MEM_HUGETLB;
                m.page_size = tlb;
            } else {
                SHS_DEBUG("no hugetlb pages for %zu bytes (%s)", m.length, strerror(errno));
            }
        }
        if (m.addr == NULL && thp > 0 && (want || p->length >= thp)) {
            m.length = round_up(p->length, thp);
            m.addr = map_thp(m.length, thp);
            if (m.addr != NULL) {
                m.kind = SHS_MEM_THP;
                m.page_size = thp;
            }
        }
        if (m.addr == NULL && want) {
            SHS_ERROR("SHS_HUGEPAGES=on but no hugepages for %zu bytes: reserve some "
                      "(/proc/sys/vm/nr_hugepages) or enable transparent hugepages",
                      p->length);
            return SHS_ERR_NO_RESOURCE;
        }
    }
    if (m.addr == NULL) {
        m.length = round_up(p->length, page);
        m.page_size = page;
        m.addr = map_anon(m.length, 0);
        if (m.addr == NULL) {
            SHS_ERROR("mmap of %zu bytes failed: %s", m.length, strerror(errno));
            return SHS_ERR_NO_MEMORY;
        }
    }
    if (m.numa_node >= 0)
        prefer_node(m.addr, m.length, m.numa_node);
    SHS_DEBUG("allocated %zu bytes at %p (%s, numa node %d)", m.length, m.addr,
              m.kind == SHS_MEM_HUGETLB ? "hugetlb" : m.kind == SHS_MEM_THP ? "thp" : "pages",
              m.numa_node);
    *mem_p = m;
    return SHS_OK;
}

void shs__mem_free(shs__mem_t *mem)
{
    if (mem == NULL || mem->addr == NULL)
        return;
    if (munmap(mem->addr, mem->length) != 0)
        SHS_WARN("munmap of %zu bytes at %p failed: %s", mem->length, mem->addr,
                 strerror(errno));
    mem->addr = NULL;
    mem->length = 0;
}

/* The CPUs near dev: its local_cpulist, else its NUMA node's CPUs. */
static shs_status_t device_cpus(hwloc_topology_t topo, const char *dev, hwloc_bitmap_t set)
{
    char path[512], buf[1024];

    if (strchr(dev, '/') != NULL)
        return SHS_ERR_INVALID_ARG;
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/local_cpulist", dev);
    if (read_small(path, buf, sizeof(buf)) && hwloc_bitmap_list_sscanf(set, buf) == 0)
        return SHS_OK;
    int node = shs__dev_numa_node(NULL, dev);
    hwloc_obj_t obj = node >= 0 ? hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node)
                                : NULL;
    if (obj == NULL || obj->cpuset == NULL) {
        SHS_DEBUG("no cpu locality known for device %s", dev);
        return SHS_ERR_UNSUPPORTED;
    }
    hwloc_bitmap_copy(set, obj->cpuset);
    return SHS_OK;
}

shs_status_t shs__pin_thread_near(const char *what)
{
    hwloc_topology_t topo;
    shs_status_t st;

    if (what == NULL || *what == '\0')
        return SHS_ERR_INVALID_ARG;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL)
        return SHS_ERR_NO_MEMORY;
    if (hwloc_topology_init(&topo) != 0) {
        st = SHS_ERR_NO_MEMORY;
        goto err_free_set;
    }
    if (hwloc_topology_load(topo) != 0) {
        SHS_ERROR("hwloc could not load the topology: %s", strerror(errno));
        st = SHS_ERR_IO;
        goto err_destroy_topo;
    }
    if (what[0] >= '0' && what[0] <= '9') {
        if (hwloc_bitmap_list_sscanf(set, what) != 0) {
            SHS_ERROR("bad cpu list \"%s\"", what);
            st = SHS_ERR_INVALID_ARG;
            goto err_destroy_topo;
        }
    } else {
        st = device_cpus(topo, what, set);
        if (st != SHS_OK)
            goto err_destroy_topo;
    }
    hwloc_bitmap_and(set, set, hwloc_topology_get_allowed_cpuset(topo));
    if (hwloc_bitmap_iszero(set)) {
        SHS_ERROR("none of the cpus near %s are allowed to this process", what);
        st = SHS_ERR_INVALID_ARG;
        goto err_destroy_topo;
    }
    if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) != 0) {
        SHS_ERROR("binding the thread near %s failed: %s", what, strerror(errno));
        st = SHS_ERR_IO;
        goto err_destroy_topo;
    }
    st = SHS_OK;

err_destroy_topo:
    hwloc_topology_destroy(topo);
err_free_set:
    hwloc_bitmap_free(set);
    return st;
}

/* ---- locked-memory limit ---- */

/* CAP_IPC_LOCK lifts RLIMIT_MEMLOCK for registration; read it from
 * /proc/self/status (CapEff) rather than depend on libcap for one bit. */
static bool has_cap_ipc_lock(void)
{
    enum { CAP_IPC_LOCK_BIT = 14 };
    char line[256];
    bool found = false;
    unsigned long long caps = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return false;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "CapEff: %llx", &caps) == 1) {
            found = true;
            break;
        }
    fclose(f);
    return found && (caps >> CAP_IPC_LOCK_BIT) & 1u;
}

uint64_t shs__memlock_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        has_cap_ipc_lock())
        return SHS_MEMLOCK_UNLIMITED;
    return (uint64_t)rl.rlim_cur;
}

static void human_bytes(uint64_t v, char *buf, size_t len)
{
    if (v >= (1ull << 30) && v % (1ull << 30) == 0)
        snprintf(buf, len, "%llu GiB", (unsigned long long)(v >> 30));
    else if (v >= (1ull << 20))
        snprintf(buf, len, "%.0f MiB", (double)v / (1 << 20));
    else
        snprintf(buf, len, "%llu KiB", (unsigned long long)(v >> 10));
}

void shs__memlock_advice(uint64_t limit, size_t want, char *buf, size_t len)
{
    static const char how[] = "ulimit -l unlimited in the shell that starts the job, "
                              "LimitMEMLOCK=infinity for a systemd service, "
                              "--ulimit memlock=-1 for docker, or a memlock line in "
                              "/etc/security/limits.conf";
    char lim[32], w[32];

    if (limit == SHS_MEMLOCK_UNLIMITED) {
        snprintf(buf, len, "RLIMIT_MEMLOCK is unlimited (or lifted by CAP_IPC_LOCK)");
        return;
    }
    human_bytes(limit, lim, sizeof(lim));
    if (want == 0) {
        snprintf(buf, len, "RLIMIT_MEMLOCK is %s: registering more than that fails; raise it "
                 "with %s", lim, how);
        return;
    }
    human_bytes(want, w, sizeof(w));
    snprintf(buf, len, "RLIMIT_MEMLOCK is %s; registering %s needs more (with what is already "
             "registered): %s", lim, w, how);
}

/*
 * Internal memory placement: page-aligned allocations that live on the NUMA
 * node of an RDMA device, on hugepages when they are available, and pinning of
 * a thread next to a device. Setup path only (mmap and sysfs reads).
 *
 * Placement is a preference, never a reason to fail: a node that is full, a
 * host without NUMA or a device without a numa_node entry gives ordinary
 * memory. Hugepages are the one exception: SHS_HUGEPAGES=on turns "none
 * available" into SHS_ERR_NO_RESOURCE.
 *
 * Thread-safety: every function may be called from any thread; a shs__mem_t
 * belongs to its caller.
 */
#ifndef SHS_RUNTIME_MEMORY_H
#define SHS_RUNTIME_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

#include "runtime/config.h"

typedef enum shs__mem_kind {
    SHS_MEM_PAGES = 0,   /* ordinary pages */
    SHS_MEM_HUGETLB = 1, /* MAP_HUGETLB from the reserved pool */
    SHS_MEM_THP = 2      /* aligned to the THP size and madvise(MADV_HUGEPAGE) */
} shs__mem_kind_t;

#define SHS_NUMA_FROM_DEVICE (-2) /* shs__mem_params_t.numa_node: look it up */

typedef struct shs__mem_params {
    size_t length;             /* bytes wanted, > 0 */
    const char *device;        /* RDMA device name for the NUMA lookup, or NULL */
    int numa_node;             /* SHS_NUMA_FROM_DEVICE, -1 (none) or a node */
    shs__tristate_t hugepages; /* auto: only for lengths of a hugepage or more */
    const char *sysfs_root;    /* NULL = "/sys"; tests pass a fake tree */
} shs__mem_params_t;

typedef struct shs__mem {
    void *addr;           /* aligned to page_size */
    size_t length;        /* usable bytes: params.length rounded up to page_size */
    size_t page_size;     /* 4 KiB, or the hugepage size of kind */
    int numa_node;        /* the node asked of the kernel, -1 if none */
    shs__mem_kind_t kind;
} shs__mem_t;

/* Defaults: no device, node from the device, hugepages auto, real sysfs. */
void shs__mem_params_init(shs__mem_params_t *p, size_t length);

/* Map the memory and set its NUMA policy; pages are faulted in later (by the
 * first touch or by memory registration), so the policy places them.
 * SHS_ERR_INVALID_ARG for length 0, SHS_ERR_NO_RESOURCE when hugepages are
 * "on" but unavailable, SHS_ERR_NO_MEMORY when mmap fails. *mem_p is written
 * only on success. */
shs_status_t shs__mem_alloc(const shs__mem_params_t *p, shs__mem_t *mem_p);

/* Unmap; NULL or a zeroed shs__mem_t is a no-op. Logs a failure. */
void shs__mem_free(shs__mem_t *mem);

/* NUMA node of an RDMA device from <sysfs_root>/class/infiniband/<dev>/device/
 * numa_node (sysfs_root NULL = "/sys"); -1 when unknown or not NUMA. */
int shs__dev_numa_node(const char *sysfs_root, const char *dev);

/* Bind the calling thread to the CPUs near an RDMA device (its local_cpulist,
 * else its NUMA node), or to a CPU list such as "0-3,8" when the argument
 * starts with a digit. CPUs outside this process's allowed set are dropped.
 * SHS_ERR_INVALID_ARG for a bad list or no allowed CPU left,
 * SHS_ERR_UNSUPPORTED when the device's locality is unknown, SHS_ERR_IO when
 * the kernel refuses the binding. */
shs_status_t shs__pin_thread_near(const char *dev_or_cpus);

/* ---- locked-memory limit (RDMA registration pins pages) ---- */

#define SHS_MEMLOCK_UNLIMITED UINT64_MAX

/* This process's RLIMIT_MEMLOCK soft limit in bytes, SHS_MEMLOCK_UNLIMITED
 * when it is infinite or does not apply (the process has CAP_IPC_LOCK, as
 * root usually does). */
uint64_t shs__memlock_limit(void);

/* An actionable sentence for a registration of want bytes under limit
 * (SHS_MEMLOCK_UNLIMITED: none), e.g. "RLIMIT_MEMLOCK is 64 KiB; registering
 * 4 MiB needs more: ulimit -l unlimited, ...". want 0: the limit alone. Pure:
 * unit tests pass any limit. */
void shs__memlock_advice(uint64_t limit, size_t want, char *buf, size_t len);

#endif

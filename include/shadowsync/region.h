/*
 * shadowsync: registered memory regions.
 *
 * A region is memory that the RDMA device may access, registered on every
 * rank at once: registration is collective, so that after it returns every
 * rank knows the address, key and length of every peer's copy, and a
 * one-sided operation (rma.h) names "region R on peer p" with no further
 * exchange. Every rank must register regions in the same order and with the
 * same length. Once the context is up the exchange goes over the mesh among
 * the living ranks (no rank is special: it works after rank 0 died, and
 * with a rank that rejoined); a rank that failed has no copy of a region
 * made after its failure (an operation on it: SHS_ERR_OUT_OF_BOUNDS). A
 * rank that rejoined replays the job's regions first (context.h).
 *
 * Threads: like the context, driven by one thread at a time.
 */
#ifndef SHADOWSYNC_REGION_H
#define SHADOWSYNC_REGION_H

#include <stddef.h>

#include <shadowsync/context.h>
#include <shadowsync/defs.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque: the layout is private to the library. */
typedef struct shs_region shs_region_t;

/*
 * Access flags: grant the minimum the use needs. Local reads (the source of
 * shs_write, the data peers read) are always allowed.
 */
enum {
    SHS_ACCESS_LOCAL_WRITE = 1u << 0,  /* may be the destination of shs_read */
    SHS_ACCESS_REMOTE_READ = 1u << 1,  /* peers may shs_read from it */
    SHS_ACCESS_REMOTE_WRITE = 1u << 2, /* peers may shs_write into it (implies local write) */
    SHS_ACCESS_REMOTE_ATOMIC = 1u << 3 /* peers may shs_cas its 8-byte words (implies local
                                          write); the owner must not store to a word peers
                                          swap (the device's atomics are atomic only among
                                          themselves), only load it */
};

/* Alignment of a registered region's address: the elements that collectives
 * and averaging combine (float, double) must not straddle machine words. */
#define SHS_REGION_ALIGN 8

/*
 * shs_region_register - register caller memory [addr, addr + len) with the
 * given SHS_ACCESS_* flags. Collective over all ranks of ctx. addr must be
 * aligned to SHS_REGION_ALIGN bytes (malloc's and mmap's are).
 *
 * The caller keeps ownership of the memory and must keep it allocated until
 * shs_region_destroy(). *region_p is owned by the caller.
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL or unaligned addr, len 0,
 * unknown flags: every rank fails, this one with the reason logged);
 * SHS_ERR_SIZE_MISMATCH on every rank if the ranks' len differ (the log
 * names the ranks and their sizes); SHS_ERR_NO_RESOURCE if the device
 * refused the registration on this rank (the log says why, e.g. RLIMIT_MEMLOCK
 * too low and how to raise it); SHS_ERR_BAD_STATE in a forked child for a
 * context of its parent, or on an endpoint; SHS_ERR_PEER_FAILED on the other
 * ranks when registration failed on some rank (or a rank left);
 * SHS_ERR_TIMEOUT.
 */
SHS_API shs_status_t shs_region_register(shs_ctx_t *ctx, void *addr, size_t len,
                                         unsigned flags, shs_region_t **region_p);

/*
 * shs_region_alloc - allocate len bytes (zeroed, page-aligned, on the NUMA
 * node of the device when known) and register them like shs_region_register.
 * The library owns the memory; shs_region_destroy() frees it.
 * Status: as shs_region_register, plus SHS_ERR_NO_MEMORY.
 */
SHS_API shs_status_t shs_region_alloc(shs_ctx_t *ctx, size_t len, unsigned flags,
                                      shs_region_t **region_p);

/*
 * shs_region_destroy - deregister (and free, for shs_region_alloc) a region.
 * Not collective, but peers must no longer access it: end its use with a
 * shs_flush() and shs_ctx_barrier(). NULL is ignored. Refused (logged, the
 * region stays registered and valid) while the region is in use by a library
 * object (the model of a shadow engine: destroy the engine first), and in a
 * forked child.
 */
SHS_API void shs_region_destroy(shs_region_t *region);

/*
 * shs_region_check - whether the region's memory is still mapped. Memory
 * freed (unmapped) while registered stays pinned by the device, so peers
 * would read stale data and writes would be lost without any error: this
 * names it. Costs one mincore() per 256 pages; the shadow engine calls it in
 * shs_shadow_start, shs_region_destroy for caller memory. Memory returned to
 * malloc's pool without being unmapped (small blocks) cannot be told from
 * live memory. Status: SHS_OK; SHS_ERR_BAD_STATE (unmapped: the log says
 * what to do); SHS_ERR_INVALID_ARG (NULL). Thread-safe.
 */
SHS_API shs_status_t shs_region_check(const shs_region_t *region);

/* shs_region_addr / shs_region_len - this rank's copy of the region (NULL and
 * 0 for a NULL region). Thread-safe. */
SHS_API void *shs_region_addr(const shs_region_t *region);
SHS_API size_t shs_region_len(const shs_region_t *region);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_REGION_H */

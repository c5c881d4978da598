/* Regions: local registration plus a collective exchange of address, key and
 * length, so that every rank can name every peer's copy. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/memory.h"
#include "transport/services.h"
#include "transport/transport.h"

#define SHS__ACCESS_ALL                                                                      \
    (SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ | SHS_ACCESS_REMOTE_WRITE |                \
     SHS_ACCESS_REMOTE_ATOMIC)

/* What every rank contributes to the registration exchange. */
typedef struct reg_rec {
    uint64_t addr;
    uint64_t len;
    uint32_t rkey;
    uint32_t flags;
    int32_t status; /* this rank's local outcome: all ranks fail together */
    uint32_t pad;
} reg_rec_t;

static int ibv_access_of(unsigned flags)
{
    int a = 0;
    /* verbs requires local write for remote write */
    if (flags & (SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_WRITE | SHS_ACCESS_REMOTE_ATOMIC))
        a |= IBV_ACCESS_LOCAL_WRITE;
    if (flags & SHS_ACCESS_REMOTE_ATOMIC)
        a |= IBV_ACCESS_REMOTE_ATOMIC;
    if (flags & SHS_ACCESS_REMOTE_WRITE)
        a |= IBV_ACCESS_REMOTE_WRITE;
    if (flags & SHS_ACCESS_REMOTE_READ)
        a |= IBV_ACCESS_REMOTE_READ;
    return a;
}


/* Counted, numbered in creation order and listed on the context (the
 * rejoin thread reads the list). */
static void region_link(shs_ctx_t *ctx, shs_region_t *region)
{
    ctx->live_regions++;
    if (region->mr != NULL) /* as destroy uncounts it */
        shs__fork_regions_add(1);
    pthread_mutex_lock(&ctx->reg_lock);
    region->seq = ctx->region_seq++;
    region->next = ctx->regions;
    ctx->regions = region;
    pthread_mutex_unlock(&ctx->reg_lock);
}

static void region_unlink(shs_ctx_t *ctx, shs_region_t *region)
{
    pthread_mutex_lock(&ctx->reg_lock);
    shs_region_t **pp = &ctx->regions;
    while (*pp != NULL && *pp != region)
        pp = &(*pp)->next;
    if (*pp != NULL)
        *pp = region->next;
    pthread_mutex_unlock(&ctx->reg_lock);
}

/* A rejoined rank's region: its own key, the others' from the tables they
 * sent, and its key sent to each of them. */
static shs_status_t rejoined_finish(shs_ctx_t *ctx, shs_region_t *region, const reg_rec_t *mine)
{
    region->remote = calloc((size_t)ctx->size, sizeof(*region->remote));
    if (region->remote == NULL)
        return SHS_ERR_NO_MEMORY;
    region->remote[ctx->rank].addr = mine->addr;
    region->remote[ctx->rank].len = mine->len;
    region->remote[ctx->rank].rkey = mine->rkey;
    region->remote[ctx->rank].flags = mine->flags;
    shs_status_t st = shs__rejoin_region(ctx, region);
    if (st != SHS_OK) {
        free(region->remote);
        region->remote = NULL;
        return st;
    }
    /* numbered as the job numbered it (region_link takes the number) */
    ctx->rj_regions++;
    ctx->region_seq = region->seq;
    return SHS_OK;
}

/* Collective part, shared by register and alloc. The region's memory is set;
 * local_status says whether this rank got that far. */
static shs_status_t region_finish(shs_ctx_t *ctx, shs_region_t *region,
                                  shs_status_t local_status)
{
    shs_status_t status;
    reg_rec_t mine = {.status = local_status};
    reg_rec_t *all = calloc((size_t)ctx->size, sizeof(*all));
    bool *present = calloc((size_t)ctx->size, sizeof(bool));

    if (all == NULL || present == NULL) {
        free(all);
        free(present);
        return SHS_ERR_NO_MEMORY; /* peers time out in the allgather: rare and bounded */
    }
    if (local_status == SHS_OK && region->len == 0) {
        mine.flags = region->flags; /* an uneven region this rank holds none of */
    } else if (local_status == SHS_OK) {
        region->mr = ibv_reg_mr(ctx->pd, region->addr, region->len,
                                ibv_access_of(region->flags));
        if (region->mr == NULL) {
            shs__reg_mr_explain(ctx->dev_name, region->len, errno);
            mine.status = SHS_ERR_NO_RESOURCE;
        } else {
            mine.addr = (uintptr_t)region->addr;
            mine.len = region->len;
            mine.rkey = region->mr->rkey;
            mine.flags = region->flags;
        }
    }
    if (shs__rejoin_replaying(ctx)) {
        /* a region the job holds: no exchange, the peers' keys came with
         * the rejoin, and this rank's goes to each of them (rejoin/) */
        status = (shs_status_t)mine.status;
        if (status == SHS_OK)
            status = rejoined_finish(ctx, region, &mine);
        if (status != SHS_OK)
            goto err_dereg;
        free(all);
        free(present);
        region_link(ctx, region);
        return SHS_OK;
    }
    /* once the mesh is up, over it among the living (no rank is special
     * after start-up: rank 0's death, or a rank that rejoined and is not
     * part of the bootstrap, does not stop it); a rank absent from it
     * (failed) has no copy of the region */
    if (ctx->mesh_ready) {
        status = shs__mesh_allgather(ctx, &mine, sizeof(mine), all, present);
    } else {
        status = shs__boot_allgather(ctx->boot, &mine, sizeof(mine), all);
        for (int r = 0; r < ctx->size; r++)
            present[r] = true;
    }
    if (status != SHS_OK)
        goto err_dereg;

    status = (shs_status_t)mine.status;
    int first = -1; /* the first rank present: what the others' sizes must match */
    for (int r = 0; r < ctx->size && status == SHS_OK; r++) {
        if (!present[r])
            continue;
        if (first < 0)
            first = r;
        if (all[r].status != SHS_OK) {
            SHS_ERROR("region registration failed on rank %d (%s)", r,
                      shs_status_string((shs_status_t)all[r].status));
            status = SHS_ERR_PEER_FAILED;
        }
    }
    if (status != SHS_OK)
        goto err_dereg;
    for (int r = first + 1; r < ctx->size && !region->uneven && first >= 0; r++) {
        if (present[r] && all[r].len != all[first].len) {
            /* every rank sees the same table, so every rank fails the same way */
            SHS_ERROR("region registration: rank %d registered %llu bytes but rank %d "
                      "registered %llu; every rank must register the same size",
                      r, (unsigned long long)all[r].len, first,
                      (unsigned long long)all[first].len);
            status = SHS_ERR_SIZE_MISMATCH;
        }
    }
    if (status != SHS_OK)
        goto err_dereg;

    region->remote = calloc((size_t)ctx->size, sizeof(*region->remote));
    if (region->remote == NULL) {
        status = SHS_ERR_NO_MEMORY;
        goto err_dereg;
    }
    for (int r = 0; r < ctx->size; r++) {
        region->remote[r].addr = all[r].addr;
        region->remote[r].len = all[r].len;
        region->remote[r].rkey = all[r].rkey;
        region->remote[r].flags = all[r].flags;
    }
    free(all);
    free(present);
    region_link(ctx, region);
    return SHS_OK;

err_dereg:
    if (region->mr != NULL)
        ibv_dereg_mr(region->mr);
    region->mr = NULL;
    free(all);
    free(present);
    return status;
}

static shs_status_t check_args(size_t len, unsigned flags)
{
    if (len == 0) {
        SHS_ERROR("region: length 0; a region holds at least one byte");
        return SHS_ERR_INVALID_ARG;
    }
    if ((flags & ~(unsigned)SHS__ACCESS_ALL) != 0) {
        SHS_ERROR("region: unknown access flags 0x%x (known: 0x%x)",
                  flags & ~(unsigned)SHS__ACCESS_ALL, (unsigned)SHS__ACCESS_ALL);
        return SHS_ERR_INVALID_ARG;
    }
    return SHS_OK;
}

static shs_status_t check_addr(const void *addr)
{
    if (addr == NULL) {
        SHS_ERROR("region: NULL address");
        return SHS_ERR_INVALID_ARG;
    }
    if ((uintptr_t)addr % SHS_REGION_ALIGN != 0) {
        SHS_ERROR("region: address %p is not aligned to %d bytes (the elements that "
                  "collectives and averaging combine must not straddle words)", addr,
                  SHS_REGION_ALIGN);
        return SHS_ERR_INVALID_ARG;
    }
    return SHS_OK;
}

static shs_region_t *region_new(shs_ctx_t *ctx, void *addr, size_t len, unsigned flags)
{
    shs_region_t *region = calloc(1, sizeof(*region));
    if (region != NULL) {
        region->ctx = ctx;
        region->addr = addr;
        region->len = len;
        region->flags = flags;
    }
    return region;
}

shs_status_t shs_region_register(shs_ctx_t *ctx, void *addr, size_t len, unsigned flags,
                                 shs_region_t **region_p)
{
    if (ctx == NULL || region_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_region_register") ||
        shs__ctx_endpoint_refused(ctx, "shs_region_register"))
        return SHS_ERR_BAD_STATE;
    shs_region_t *region = region_new(ctx, addr, len, flags);
    if (region == NULL)
        return SHS_ERR_NO_MEMORY;

    /* a bad argument still takes part in the exchange, so peers fail at once
     * instead of waiting for this rank until the bootstrap timeout */
    shs_status_t local = check_addr(addr);
    if (local == SHS_OK)
        local = check_args(len, flags);
    shs_status_t status = region_finish(ctx, region, local);
    if (status != SHS_OK) {
        free(region);
        return status;
    }
    *region_p = region;
    return SHS_OK;
}

static shs_status_t region_alloc(shs_ctx_t *ctx, size_t len, unsigned flags, bool uneven,
                                 shs_region_t **region_p)
{
    if (ctx == NULL || region_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_region_alloc") ||
        shs__ctx_endpoint_refused(ctx, "shs_region_alloc"))
        return SHS_ERR_BAD_STATE;
    shs_region_t *region = region_new(ctx, NULL, len, flags);
    if (region == NULL)
        return SHS_ERR_NO_MEMORY;
    region->uneven = uneven;
    shs_status_t local = check_args(uneven && len == 0 ? 1 : len, flags);
    if (local == SHS_OK && len > 0) {
        shs__mem_params_t mp;
        shs__mem_params_init(&mp, len);
        mp.device = ctx->dev_name; /* NUMA node of the device */
        mp.hugepages = ctx->cfg.hugepages;
        local = shs__mem_alloc(&mp, &region->mem);
        if (local == SHS_OK) {
            region->addr = region->mem.addr;
            region->owned = true;
        }
    }
    shs_status_t status = region_finish(ctx, region, local);
    if (status != SHS_OK) {
        shs__mem_free(&region->mem);
        free(region);
        return status;
    }
    *region_p = region;
    return SHS_OK;
}

shs_status_t shs_region_alloc(shs_ctx_t *ctx, size_t len, unsigned flags,
                              shs_region_t **region_p)
{
    return region_alloc(ctx, len, flags, false, region_p);
}

shs_status_t shs__region_alloc_uneven(shs_ctx_t *ctx, size_t len, unsigned flags,
                                      shs_region_t **region_p)
{
    return region_alloc(ctx, len, flags, true, region_p);
}

/* Whether every page of [addr, addr + len) is still mapped: mincore()
 * fails with ENOMEM on a range with an unmapped page. */
static bool range_mapped(const void *addr, size_t len)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)addr & ~(pg - 1), e = (uintptr_t)addr + len;
    unsigned char vec[256];
    for (uintptr_t p = a; p < e; p += 256 * pg) {
        size_t l = e - p < 256 * pg ? (size_t)(e - p) : (size_t)(256 * pg);
        if (mincore((void *)p, l, vec) != 0 && errno == ENOMEM)
            return false;
    }
    return true;
}

shs_status_t shs_region_check(const shs_region_t *region)
{
    if (region == NULL)
        return SHS_ERR_INVALID_ARG;
    if (range_mapped(region->addr, region->len))
        return SHS_OK;
    SHS_ERROR("region %p (%zu bytes): its memory was unmapped while registered (freed before "
              "shs_region_destroy?); the device still holds the old pages, so peers read stale "
              "data and writes to it are lost: destroy the region first, then free the memory",
              region->addr, region->len);
    return SHS_ERR_BAD_STATE;
}

void shs_region_destroy(shs_region_t *region)
{
    if (region == NULL)
        return;
    if (shs__ctx_forked(region->ctx, "shs_region_destroy"))
        return; /* the parent's registration: deregistering here would end it there */
    if (shs__ctx_refused(region->ctx, "shs_region_destroy"))
        return; /* logged; the region stays registered */
    if (region->holds > 0) {
        SHS_ERROR("shs_region_destroy: region %p (%zu bytes) is in use by %s: destroy that "
                  "first; the region stays registered", region->addr, region->len,
                  region->held_by != NULL ? region->held_by : "the library");
        return;
    }
    if (!region->owned)
        (void)shs_region_check(region); /* logs a region freed while registered */
    if (region->mr != NULL)
        shs__fork_regions_add(-1);
    if (region->mr != NULL && ibv_dereg_mr(region->mr) != 0)
        SHS_WARN("region %p: ibv_dereg_mr: %s", region->addr, strerror(errno));
    if (region->owned)
        shs__mem_free(&region->mem);
    region->ctx->live_regions--;
    region_unlink(region->ctx, region);
    free(region->remote);
    free(region);
}

void *shs_region_addr(const shs_region_t *region)
{
    return region != NULL ? region->addr : NULL;
}

size_t shs_region_len(const shs_region_t *region)
{
    return region != NULL ? region->len : 0;
}

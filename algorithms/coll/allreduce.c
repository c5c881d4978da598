/* The public calls: argument checks, then one ring over a region (no copy),
 * or passes through the staging area for any other memory. */
#include <string.h>

#include "algorithms/coll/coll.h"
#include "runtime/log.h"
#include "transport/services.h"

size_t shs_dtype_size(shs_dtype_t dtype)
{
    switch (dtype) {
    case SHS_DTYPE_FLOAT32: return sizeof(float);
    case SHS_DTYPE_FLOAT64: return sizeof(double);
    }
    return 0;
}

/* A group's ranks must be valid and distinct, and name this rank at its index. */
static bool group_valid(const shs_coll_t *coll, const shs_group_t *group)
{
    if (group->size < 1 || group->size > SHS_GROUP_MAX || group->index < 0 ||
        group->index >= group->size || group->ranks[group->index] != coll->rank)
        return false;
    for (int a = 0; a < group->size; a++) {
        if (group->ranks[a] < 0 || group->ranks[a] >= coll->size)
            return false;
        for (int b = 0; b < a; b++)
            if (group->ranks[a] == group->ranks[b])
                return false;
    }
    return true;
}

/* A refused call changes nothing: a forked child's copy, or an endpoint
 * lent to another thread, is not this call's failure. */
static shs_status_t check_call(shs_coll_t *coll, const char *call, const shs_group_t *group,
                               shs_dtype_t dtype, shs_reduce_t op, int *n_p, int *me_p)
{
    if (coll == NULL)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(coll->io, call))
        return SHS_ERR_BAD_STATE;
    if (shs_dtype_size(dtype) == 0 || (op != SHS_REDUCE_SUM && op != SHS_REDUCE_AVG))
        return SHS_ERR_INVALID_ARG;
    if (coll->poisoned)
        return SHS_ERR_BAD_STATE;
    if (coll->conf.wire == SHS_WIRE_BF16 && dtype != SHS_DTYPE_FLOAT32) {
        SHS_ERROR("%s: a bf16-wire collective (SHS_COLL_WIRE) reduces float32 only; use a "
                  "native collective for float64", call);
        return SHS_ERR_UNSUPPORTED;
    }
    if (group != NULL && !group_valid(coll, group))
        return SHS_ERR_INVALID_ARG;
    *n_p = group == NULL ? coll->size : group->size;
    *me_p = group == NULL ? coll->rank : group->index;
    return SHS_OK;
}

shs_status_t shs_allreduce_region(shs_coll_t *coll, const shs_group_t *group,
                                  shs_region_t *region, size_t offset, size_t count,
                                  shs_dtype_t dtype, shs_reduce_t op)
{
    int n, me;
    shs_status_t st = check_call(coll, "shs_allreduce_region", group, dtype, op, &n, &me);
    if (st != SHS_OK)
        return st;
    if (region == NULL)
        return SHS_ERR_INVALID_ARG;
    size_t es = shs_dtype_size(dtype), len = shs_region_len(region);
    if (offset % es != 0 || offset > len || count > (len - offset) / es)
        return SHS_ERR_OUT_OF_BOUNDS;
    if (n == 1 || count == 0)
        return SHS_OK;
    shs__coll_ring_t r;
    shs__coll_ring_init(&r, coll, group, n, me, region, offset, count, count, dtype, op);
    return shs__coll_ring_run(&r);
}

shs_status_t shs_allreduce(shs_coll_t *coll, const shs_group_t *group, void *buf,
                           size_t count, shs_dtype_t dtype, shs_reduce_t op)
{
    int n, me;
    shs_status_t st = check_call(coll, "shs_allreduce", group, dtype, op, &n, &me);
    if (st != SHS_OK)
        return st;
    if (n == 1 || count == 0)
        return SHS_OK;
    if (buf == NULL)
        return SHS_ERR_INVALID_ARG;
    if (coll->stage == NULL)
        return SHS_ERR_UNSUPPORTED;
    size_t es = shs_dtype_size(dtype);
    size_t pass = coll->conf.stage_bytes / es;
    if (pass == 0)
        return SHS_ERR_UNSUPPORTED;
    char *user = buf, *stage = shs_region_addr(coll->stage);
    for (size_t done = 0; done < count; done += pass) {
        size_t k = count - done < pass ? count - done : pass;
        memcpy(stage, user + done * es, k * es);
        shs__coll_ring_t r;
        shs__coll_ring_init(&r, coll, group, n, me, coll->stage, 0, k, count, dtype, op);
        st = shs__coll_ring_run(&r);
        if (st != SHS_OK)
            return st;
        memcpy(user + done * es, stage, k * es);
    }
    return SHS_OK;
}

/* Call signatures: what the members of one call must agree on, as a hash
 * that fits a notification, compared field by field, and described for the
 * log. Pure functions: the unit tests run them on the host. */
#include <stdio.h>

#include "algorithms/coll/coll.h"

static inline uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

/* The group's ranks in ring order (group NULL: 0..n-1); never 0, which
 * callers may use for "not computed yet". */
uint64_t shs__coll_group_hash(const shs_group_t *group, int n)
{
    uint64_t h = mix64(0x73686367u, (uint64_t)n);
    for (int k = 0; k < n; k++)
        h = mix64(h, (uint64_t)(group == NULL ? k : group->ranks[k]));
    return h | 1;
}

/* The part of a signature that fits a notification (no grant area). */
uint32_t shs__coll_sig_hash(const shs__call_sig_t *s)
{
    uint64_t h = mix64(mix64(mix64(s->count, s->elems), s->group),
                       (uint64_t)s->n << 16 | (uint64_t)s->dtype << 8 | s->op);
    return (uint32_t)(h ^ (h >> 21) ^ (h >> 42)) & (CTRL_HASH - 1);
}

/* The first field (in the order of WHY_*) on which a and b disagree;
 * WHY_OTHER when they agree. The sequence number is not compared. */
unsigned shs__coll_sig_why(const shs__call_sig_t *a, const shs__call_sig_t *b)
{
    if (a->n != b->n || a->group != b->group)
        return WHY_GROUP;
    if (a->count != b->count || a->elems != b->elems)
        return WHY_COUNT;
    if (a->dtype != b->dtype)
        return WHY_DTYPE;
    if (a->op != b->op)
        return WHY_OP;
    return WHY_OTHER;
}

const char *shs__coll_why_name(unsigned why)
{
    switch (why) {
    case WHY_GROUP: return "group";
    case WHY_COUNT: return "count";
    case WHY_DTYPE: return "dtype";
    case WHY_OP: return "op";
    }
    return "group, count, dtype or op";
}

void shs__coll_sig_describe(char *buf, size_t len, const shs__call_sig_t *s)
{
    int k = snprintf(buf, len, "count %llu", (unsigned long long)s->count);
    if (k > 0 && (size_t)k < len && s->elems != s->count)
        k += snprintf(buf + k, len - (size_t)k, " (%llu in this pass)",
                      (unsigned long long)s->elems);
    if (k > 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, ", %s, %s, group of %u ranks %016llx",
                 s->dtype == SHS_DTYPE_FLOAT32   ? "float32"
                 : s->dtype == SHS_DTYPE_FLOAT64 ? "float64"
                                                 : "unknown dtype",
                 s->op == SHS_REDUCE_SUM ? "sum" : s->op == SHS_REDUCE_AVG ? "avg" : "unknown op",
                 s->n, (unsigned long long)s->group);
}

/* The payload of an abort notification: the reason and the rank that found
 * the disagreement (its low bits: the payload has room for 2^18 ranks). */
uint32_t shs__coll_abort_payload(unsigned why, int origin)
{
    return why | ((uint32_t)origin & CTRL_ORIGIN_MASK) << CTRL_REASON_BITS;
}

void shs__coll_abort_decode(uint32_t imm, unsigned *why_p, int *origin_p)
{
    *why_p = imm & ((1u << CTRL_REASON_BITS) - 1);
    *origin_p = (int)((imm & (CTRL_HASH - 1)) >> CTRL_REASON_BITS);
}

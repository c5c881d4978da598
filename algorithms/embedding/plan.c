/* Embedding tables: the batch plan (plan.h). Everything is sized at init;
 * building a plan for a batch allocates nothing. */
#include <stdlib.h>
#include <string.h>

#include "algorithms/embedding/plan.h"

#define PLAN_CAP_MAX (1u << 30)

shs_status_t shs__emb_plan_init(shs__emb_plan_t *p, const shs__emb_layout_t *l, uint32_t cap)
{
    if (p == NULL || l == NULL || cap == 0 || cap > PLAN_CAP_MAX)
        return SHS_ERR_INVALID_ARG;
    memset(p, 0, sizeof(*p));
    p->layout = l;
    p->cap = cap;
    uint32_t hsize = 16;
    while (hsize < 2 * cap) /* load factor <= 1/2: short probes */
        hsize *= 2;
    p->hmask = hsize - 1;
    p->row = malloc((size_t)cap * sizeof(*p->row));
    p->local = malloc((size_t)cap * sizeof(*p->local));
    p->owner_start = calloc((size_t)l->shards + 1, sizeof(*p->owner_start));
    p->count = calloc((size_t)l->shards, sizeof(*p->count));
    p->fetch_end = calloc((size_t)l->shards, sizeof(*p->fetch_end));
    p->slot = malloc((size_t)cap * sizeof(*p->slot));
    p->hkey = malloc((size_t)hsize * sizeof(*p->hkey));
    p->hval = malloc((size_t)hsize * sizeof(*p->hval));
    p->hgen = calloc(hsize, sizeof(*p->hgen));
    p->seen = malloc((size_t)cap * sizeof(*p->seen));
    p->remap = malloc((size_t)cap * sizeof(*p->remap));
    if (!p->row || !p->local || !p->owner_start || !p->count || !p->fetch_end || !p->slot ||
        !p->hkey ||
        !p->hval || !p->hgen || !p->seen || !p->remap) {
        shs__emb_plan_fini(p);
        return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

void shs__emb_plan_fini(shs__emb_plan_t *p)
{
    if (p == NULL)
        return;
    free(p->row);
    free(p->local);
    free(p->owner_start);
    free(p->count);
    free(p->fetch_end);
    free(p->slot);
    free(p->hkey);
    free(p->hval);
    free(p->hgen);
    free(p->seen);
    free(p->remap);
    memset(p, 0, sizeof(*p));
}

static uint32_t hash_id(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (uint32_t)id;
}

/* The distinct id's first-seen index, adding it when new. */
static uint32_t intern(shs__emb_plan_t *p, uint64_t id)
{
    uint32_t h = hash_id(id) & p->hmask;
    while (p->hgen[h] == p->gen) {
        if (p->hkey[h] == id)
            return p->hval[h];
        h = (h + 1) & p->hmask;
    }
    p->hgen[h] = p->gen;
    p->hkey[h] = id;
    p->hval[h] = p->nuniq;
    p->seen[p->nuniq] = id;
    return p->nuniq++;
}

static void next_generation(shs__emb_plan_t *p)
{
    if (++p->gen == 0) { /* wrapped: old stamps could match again */
        memset(p->hgen, 0, ((size_t)p->hmask + 1) * sizeof(*p->hgen));
        p->gen = 1;
    }
}

/* One owner's bucket is sorted by local row with a heapsort: in place and
 * without allocation (glibc's qsort may allocate), O(n log n) at worst. */
static void sift(uint64_t *loc, uint64_t *row, uint32_t *from, size_t start, size_t end)
{
    size_t root = start;
    while (2 * root + 1 < end) {
        size_t child = 2 * root + 1;
        if (child + 1 < end && loc[child] < loc[child + 1])
            child++;
        if (loc[root] >= loc[child])
            return;
        uint64_t tl = loc[root], tr = row[root];
        uint32_t tf = from[root];
        loc[root] = loc[child], row[root] = row[child], from[root] = from[child];
        loc[child] = tl, row[child] = tr, from[child] = tf;
        root = child;
    }
}

static void sort_bucket(uint64_t *loc, uint64_t *row, uint32_t *from, size_t n)
{
    if (n < 2)
        return;
    for (size_t s = n / 2; s-- > 0;)
        sift(loc, row, from, s, n);
    for (size_t end = n - 1; end > 0; end--) {
        uint64_t tl = loc[0], tr = row[0];
        uint32_t tf = from[0];
        loc[0] = loc[end], row[0] = row[end], from[0] = from[end];
        loc[end] = tl, row[end] = tr, from[end] = tf;
        sift(loc, row, from, 0, end);
    }
}

shs_status_t shs__emb_plan_build(shs__emb_plan_t *p, const uint64_t *ids, uint32_t n,
                                 uint32_t *bad_p)
{
    const shs__emb_layout_t *l = p->layout;
    p->nuniq = 0;
    if (n > p->cap) {
        *bad_p = UINT32_MAX;
        return SHS_ERR_INVALID_ARG;
    }
    for (uint32_t k = 0; k < n; k++) {
        if (ids[k] >= l->rows) {
            *bad_p = k;
            return SHS_ERR_INVALID_ARG;
        }
    }
    next_generation(p);
    for (uint32_t k = 0; k < n; k++)
        p->slot[k] = intern(p, ids[k]); /* first-seen index for now */

    /* Count per owner, prefix-sum, then place each distinct id in its
     * owner's bucket (p->remap temporarily holds each entry's first-seen
     * index, so that the sort can carry it). */
    memset(p->count, 0, (size_t)l->shards * sizeof(*p->count));
    for (uint32_t u = 0; u < p->nuniq; u++) {
        uint32_t o;
        uint64_t loc;
        shs__emb_locate(l, p->seen[u], &o, &loc);
        p->count[o]++;
    }
    p->owner_start[0] = 0;
    for (uint32_t o = 0; o < l->shards; o++) {
        p->owner_start[o + 1] = p->owner_start[o] + p->count[o];
        p->count[o] = p->owner_start[o]; /* next free place */
    }
    uint32_t *from = p->remap;
    for (uint32_t u = 0; u < p->nuniq; u++) {
        uint32_t o;
        uint64_t loc;
        shs__emb_locate(l, p->seen[u], &o, &loc);
        uint32_t at = p->count[o]++;
        p->row[at] = p->seen[u];
        p->local[at] = loc;
        from[at] = u;
    }
    for (uint32_t o = 0; o < l->shards; o++) {
        uint32_t lo = p->owner_start[o], hi = p->owner_start[o + 1];
        sort_bucket(p->local + lo, p->row + lo, from + lo, hi - lo);
        p->fetch_end[o] = hi;
    }
    /* first-seen index -> packed index (seen[] is free again: reuse it) */
    uint64_t *packed_of = p->seen;
    for (uint32_t at = 0; at < p->nuniq; at++)
        packed_of[from[at]] = at;
    for (uint32_t k = 0; k < n; k++)
        p->slot[k] = (uint32_t)packed_of[p->slot[k]];
    return SHS_OK;
}

void shs__emb_plan_split(shs__emb_plan_t *p, uint32_t o, const uint8_t *hit, uint32_t n)
{
    uint32_t lo = p->owner_start[o], hi = p->owner_start[o + 1], at = lo;
    uint32_t *to = p->remap;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = lo; i < hi; i++)
            if ((hit[i] != 0) == (pass == 1))
                to[i] = at++;
    uint32_t misses = lo;
    for (uint32_t i = lo; i < hi; i++)
        misses += hit[i] == 0;
    uint64_t *tmp = p->seen; /* free after build */
    for (uint32_t i = lo; i < hi; i++)
        tmp[to[i]] = p->row[i];
    memcpy(p->row + lo, tmp + lo, (size_t)(hi - lo) * sizeof(*tmp));
    for (uint32_t i = lo; i < hi; i++)
        tmp[to[i]] = p->local[i];
    memcpy(p->local + lo, tmp + lo, (size_t)(hi - lo) * sizeof(*tmp));
    for (uint32_t k = 0; k < n; k++)
        if (p->slot[k] >= lo && p->slot[k] < hi)
            p->slot[k] = to[p->slot[k]];
    p->fetch_end[o] = misses;
}

uint32_t shs__emb_plan_run(const shs__emb_plan_t *p, uint32_t o, uint32_t i, uint32_t max_rows)
{
    uint32_t hi = p->fetch_end[o];
    if (i >= hi || max_rows == 0)
        return 0;
    uint32_t len = 1;
    while (i + len < hi && len < max_rows && p->local[i + len] == p->local[i] + len)
        len++;
    return len;
}

void shs__emb_plan_scatter(const shs__emb_plan_t *p, const float *packed, size_t stride,
                           uint32_t dim, uint32_t n, float *out)
{
    for (uint32_t k = 0; k < n; k++)
        memcpy(out + (size_t)k * dim, packed + (size_t)p->slot[k] * stride, dim * sizeof(float));
}

void shs__emb_plan_pool(const shs__emb_plan_t *p, const float *packed, size_t stride,
                        uint32_t dim, const uint32_t *offsets, uint32_t nbags, int mean, float *out)
{
    for (uint32_t b = 0; b < nbags; b++) {
        float *o = out + (size_t)b * dim;
        memset(o, 0, dim * sizeof(float));
        for (uint32_t k = offsets[b]; k < offsets[b + 1]; k++) {
            const float *r = packed + (size_t)p->slot[k] * stride;
            for (uint32_t j = 0; j < dim; j++)
                o[j] += r[j];
        }
        uint32_t cnt = offsets[b + 1] - offsets[b];
        if (mean && cnt > 1) {
            float inv = 1.0f / (float)cnt;
            for (uint32_t j = 0; j < dim; j++)
                o[j] *= inv;
        }
    }
}

void shs__emb_plan_sum(const shs__emb_plan_t *p, const float *grads, uint32_t dim, uint32_t n,
                       float *packed)
{
    memset(packed, 0, (size_t)p->nuniq * dim * sizeof(float));
    for (uint32_t k = 0; k < n; k++) {
        float *acc = packed + (size_t)p->slot[k] * dim;
        const float *g = grads + (size_t)k * dim;
        for (uint32_t j = 0; j < dim; j++)
            acc[j] += g[j];
    }
}

uint32_t shs__emb_owner_reads_from(uint64_t read_ns, uint32_t reads, uint64_t owner_ns)
{
    const uint32_t max = 1u << 20;
    if (reads == 0 || read_ns == 0)
        return max; /* READs cost nothing measurable: always read */
    /* the owner path pays off past owner_ns / (read_ns / reads) READs */
    uint64_t t = owner_ns * reads / read_ns;
    return t < 1 ? 1u : t > max ? max : (uint32_t)t;
}

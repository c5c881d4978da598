/*
 * The automatic choice between the two lookup paths (SHS_EMB_OWNER_READS
 * auto), measured on the device at create: worker 0 of every rank times a
 * few lookups of rows of one other holder, once by READs (one per row: the
 * rows are not adjacent) and once through the holder's apply thread, and
 * takes the number of READs that cost as much as one owner-path request.
 * A lookup then asks a holder to pack its rows once it would need more
 * READs than that. On Soft-RoCE under TCG a READ costs about as much as a
 * message through the holder's thread; on a NIC a READ costs microseconds
 * and no CPU on the holder, so the measured threshold is far higher.
 */
#include <stdlib.h>
#include <string.h>

#include "algorithms/embedding/emb.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "transport/services.h"

#define CAL_ROWS 16u
#define CAL_REPS 5

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median time of CAL_REPS lookups of ids, every holder's rows by `via`
 * (after one lookup to warm up). */
static shs_status_t time_path(shs_emb_worker_t *w, uint8_t via, const uint64_t *ids, uint32_t n,
                              float *out, uint64_t *ns_p)
{
    uint64_t t[CAL_REPS];
    shs_status_t st = SHS_OK;
    w->force_via = via;
    for (int k = -1; k < CAL_REPS && st == SHS_OK; k++) {
        uint64_t t0 = shs__now_ns();
        st = shs_emb_lookup(w, ids, n, out, (size_t)n * w->emb->dim);
        if (k >= 0)
            t[k] = shs__now_ns() - t0;
    }
    w->force_via = EMB_VIA_NONE;
    if (st != SHS_OK)
        return st;
    qsort(t, CAL_REPS, sizeof(t[0]), cmp_u64);
    *ns_p = t[CAL_REPS / 2];
    return SHS_OK;
}

/* This rank's threshold measured against holder o in *t_p; 0 when the
 * table is too small to measure. */
static shs_status_t measure(shs_emb_t *e, uint32_t o, uint32_t *t_p)
{
    uint64_t held = shs__emb_shard_rows(&e->layout, o);
    uint32_t n = CAL_ROWS < e->max_batch ? CAL_ROWS : e->max_batch;
    if (held / 2 < n)
        n = (uint32_t)(held / 2);
    if (n < 2)
        return SHS_OK;
    uint64_t ids[CAL_ROWS];
    for (uint32_t k = 0; k < n; k++)
        ids[k] = shs__emb_global_row(&e->layout, o, 2u * k); /* never adjacent */
    float *out = malloc((size_t)n * e->row_bytes);
    if (out == NULL)
        return SHS_ERR_NO_MEMORY;
    shs_emb_worker_t *w = &e->workers[0];
    emb_counters_t before;
    memcpy(&before, &w->c, sizeof(before)); /* no other thread has the worker yet */
    uint64_t read_ns = 0, owner_ns = 0;
    shs_status_t st = time_path(w, EMB_VIA_READ, ids, n, out, &read_ns);
    if (st == SHS_OK)
        st = time_path(w, EMB_VIA_OWNER, ids, n, out, &owner_ns);
    memcpy(&w->c, &before, sizeof(before)); /* the user's stats start at zero */
    free(out);
    if (st != SHS_OK)
        return st;
    *t_p = shs__emb_owner_reads_from(read_ns, n, owner_ns);
    SHS_DEBUG("embedding: %u rows of holder %u by READ in %.1f us, by its apply thread in "
              "%.1f us: %u READs cost one request", n, o, (double)read_ns / 1e3,
              (double)owner_ns / 1e3, *t_p);
    return SHS_OK;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

shs_status_t shs__emb_calibrate(shs_emb_t *e)
{
    uint32_t S = e->layout.shards, mine = 0;
    shs_status_t st = SHS_OK;
    bool want = e->owner_reads_auto && e->path == SHS_EMB_PATH_AUTO;
    if (want && e->me < 0)
        st = measure(e, 0, &mine);
    else if (want && S >= 2)
        st = measure(e, ((uint32_t)e->me + 1u) % S, &mine);
    /* The ranks measured at once, on shared CPUs and one device, and each
     * figure is noisy: all of them take the median of all. After the
     * gather every rank's requests were answered (a holder counts a request
     * before it answers); before the barrier nobody asks again: the
     * holders' counters start at zero for the user too. */
    uint32_t *all = calloc((size_t)e->size, sizeof(*all));
    if (all == NULL)
        return SHS_ERR_NO_MEMORY; /* the peers fail in the gather: bounded */
    shs_status_t st2 = shs__ctx_allgather(e->ctx, &mine, sizeof(mine), all);
    atomic_store(&e->served_lookups, 0);
    atomic_store(&e->served_rows, 0);
    atomic_store(&e->busy_ns, 0);
    if (st2 == SHS_OK)
        st2 = shs_ctx_barrier(e->ctx);
    qsort(all, (size_t)e->size, sizeof(*all), cmp_u32);
    int lo = 0;
    while (lo < e->size && all[lo] == 0)
        lo++;
    if (st2 == SHS_OK && e->owner_reads_auto && lo < e->size) {
        e->owner_reads = all[lo + (e->size - lo) / 2];
        SHS_INFO("embedding: lookups ask a holder to pack its rows past %u READs (the "
                 "median of %d ranks' measurements, %u..%u)",
                 e->owner_reads, e->size - lo, all[lo], all[e->size - 1]);
    }
    free(all);
    return st != SHS_OK ? st : st2;
}

/* Sharded embedding tables, the worker's side: lookups (READ path, owner
 * path, local rows), updates, flush (embedding.h; memory in emb.h). */
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/embedding/emb.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "transport/services.h"

static _Atomic uint64_t *ack_word(const shs_emb_worker_t *w, int o)
{
    return emb_ack_word(w->emb, w->index, o);
}

static _Atomic uint64_t *answer_word(const shs_emb_worker_t *w, int o)
{
    return (_Atomic uint64_t *)(emb_wbuf(w->emb, w->index) + w->emb->w_answer_off +
                                (size_t)o * sizeof(uint64_t));
}

static float *packed_rows(const shs_emb_worker_t *w)
{
    return (float *)(emb_wbuf(w->emb, w->index) + w->emb->w_rows_off);
}

/* Whether holder o is gone (never for this rank's own shard): seen failed
 * on this worker's endpoint (which counts the context's failures of the
 * same incarnation: its rdma_cm events may know first), given up on after
 * an answer timed out, or come back as a new process since this worker's
 * sequences were set (sync_holder takes it back). */
static bool holder_failed(const shs_emb_worker_t *w, int o)
{
    if (o == w->emb->me)
        return false;
    int r = w->emb->holder_rank[o];
    return w->gone[o] || shs_ctx_peer_status(w->ep, r, NULL) != SHS_OK ||
           shs__ctx_peer_incarnation(w->ep, r) != w->holder_gen[o];
}

/* Holder o came back (rejoined) and this worker's endpoint is connected to
 * the new process: what the worker kept of the old one goes (emb.h,
 * Rejoins). Updates the old process had not acknowledged are lost: the
 * next flush returns SHS_ERR_PEER_FAILED for them. */
static void sync_holder(shs_emb_worker_t *w, int o)
{
    const shs_emb_t *e = w->emb;
    if (o == e->me)
        return;
    int r = e->holder_rank[o];
    if (shs_ctx_peer_status(w->ep, r, NULL) != SHS_OK)
        (void)shs_progress(w->ep); /* takes in a rejoin staged for this endpoint */
    unsigned g = shs__ctx_peer_incarnation(w->ep, r);
    if (g == w->holder_gen[o] || shs_ctx_peer_status(w->ep, r, NULL) != SHS_OK)
        return;
    uint64_t acked = atomic_load_explicit(ack_word(w, o), memory_order_acquire);
    if (acked != EMB_ACK_UNREADY && w->sent[o] > acked)
        w->lost[o] = true;
    w->holder_gen[o] = g;
    w->sent[o] = 0;
    w->gone[o] = false;
    /* the new process starts from an empty inbox: nothing to wait for */
    atomic_store_explicit(ack_word(w, o), 0, memory_order_release);
    atomic_store_explicit(answer_word(w, o), 0, memory_order_release);
    SHS_INFO("embedding worker %d: holder %d (rank %d) came back (incarnation %u)", w->index,
             o, r, g);
}

enum { WAIT_GE, WAIT_EQ, WAIT_NE };

/* Wait until word reaches `want` (WAIT_GE for counters, WAIT_EQ for
 * stamps) or leaves it (WAIT_NE); the timeout (< 0: the op timeout)
 * counts time without the word moving. */
static shs_status_t wait_word(shs_emb_worker_t *w, int o, _Atomic uint64_t *word, uint64_t want,
                              int mode, const char *what, int timeout_ms)
{
    const shs_emb_t *e = w->emb;
    shs__waiter_t wt;
    if (timeout_ms < 0)
        timeout_ms = e->op_timeout_ms;
    shs__waiter_init(&wt, e->spin, timeout_ms);
    uint64_t last = atomic_load_explicit(word, memory_order_acquire);
    for (;;) {
        uint64_t v = atomic_load_explicit(word, memory_order_acquire);
        if (mode == WAIT_EQ ? v == want : mode == WAIT_NE ? v != want : v >= want)
            return SHS_OK;
        if (v != last) {
            last = v;
            shs__waiter_progress(&wt, true);
        }
        if (holder_failed(w, o)) {
            emb_count(&w->c.peer_failures, 1);
            return SHS_ERR_PEER_FAILED;
        }
        if (shs_progress(w->ep) == SHS_ERR_DEVICE)
            return SHS_ERR_DEVICE;
        if (shs__waiter_idle(&wt)) {
            SHS_ERROR("embedding worker %d: holder %d (rank %d) did not %s within %d ms",
                      w->index, o, e->holder_rank[o], what, timeout_ms);
            return SHS_ERR_TIMEOUT;
        }
    }
}

shs_status_t shs__emb_wait_credit(shs_emb_worker_t *w, int o, uint64_t seq)
{
    const uint64_t slots = w->emb->slots;
    if (seq <= slots || atomic_load_explicit(ack_word(w, o), memory_order_acquire) + slots >= seq)
        return SHS_OK;
    uint64_t t0 = shs__now_ns();
    shs_status_t st = wait_word(w, o, ack_word(w, o), seq - slots, WAIT_GE,
                                "free a slot (apply an update)", -1);
    emb_count(&w->c.slot_waits, 1);
    emb_count(&w->c.slot_wait_ns, shs__now_ns() - t0);
    return st;
}

/* Send one message of the planned rows [lo, lo + cnt) of holder o: the
 * row indices, and for an update the summed gradient rows. */
static shs_status_t send_msg(shs_emb_worker_t *w, const shs__emb_plan_t *p, int o,
                             uint32_t kind, uint32_t lo, uint32_t cnt)
{
    shs_emb_t *e = w->emb;
    sync_holder(w, o);
    uint64_t seq = w->sent[o] + 1;
    if (holder_failed(w, o)) {
        emb_count(&w->c.peer_failures, 1);
        return SHS_ERR_PEER_FAILED;
    }
    shs_status_t st = SHS_OK;
    /* this rank rejoined: the holder first clears what the old process left */
    if (atomic_load_explicit(ack_word(w, o), memory_order_acquire) == EMB_ACK_UNREADY)
        st = wait_word(w, o, ack_word(w, o), EMB_ACK_UNREADY, WAIT_NE,
                       "take this rejoined rank's worker back", -1);
    if (st == SHS_OK)
        st = shs__emb_wait_credit(w, o, seq);
    if (st != SHS_OK)
        return st;
    bool local = o == e->me;
    size_t stage = e->w_send_off + ((size_t)o * e->slots + (seq - 1) % e->slots) *
                                       e->slot_bytes;
    uint8_t *msg = local ? (uint8_t *)shs_region_addr(e->inbox) +
                               emb_slot_off(e, e->rank, w->index, seq)
                         : emb_wbuf(e, w->index) + stage;
    size_t len = emb_msg_bytes(e, kind, cnt);
    emb_hdr_t *h = (emb_hdr_t *)msg;
    h->kind = kind;
    h->count = cnt;
    h->answer_row = lo;
    h->reserved = 0;
    memcpy(msg + EMB_HDR_BYTES, p->local + lo, (size_t)cnt * sizeof(uint64_t));
    if (kind == EMB_MSG_UPDATE)
        memcpy(msg + EMB_HDR_BYTES + (size_t)cnt * 8u, w->grads + (size_t)lo * e->dim,
               (size_t)cnt * e->row_bytes);
    atomic_store_explicit((_Atomic uint64_t *)(msg + len - 8), seq ^ EMB_TAIL_MAGIC,
                          memory_order_relaxed);
    /* the header's stamp last: the apply thread reads it first */
    atomic_store_explicit(&h->stamp, emb_head_stamp(seq, kind, cnt), memory_order_release);
    if (!local) {
        st = shs_write(w->ep, e->holder_rank[o], e->wbuf, (size_t)w->index * e->w_bytes + stage,
                       e->inbox, emb_slot_off(e, e->rank, w->index, seq), len, 0);
        if (st != SHS_OK) {
            if (st == SHS_ERR_PEER_FAILED)
                emb_count(&w->c.peer_failures, 1);
            return st;
        }
    }
    w->sent[o] = seq;
    return SHS_OK;
}

static shs_status_t plan_batch(shs_emb_worker_t *w, shs__emb_plan_t *plan, const uint64_t *ids,
                               size_t n, const char *call)
{
    const shs_emb_t *e = w->emb;
    uint32_t bad = 0;
    if (n > e->max_batch) {
        SHS_ERROR("%s: %zu ids; the table's max_batch is %u", call, n, e->max_batch);
        return SHS_ERR_INVALID_ARG;
    }
    shs_status_t st = shs__emb_plan_build(plan, ids, (uint32_t)n, &bad);
    if (st != SHS_OK)
        SHS_ERROR("%s: id %llu at position %u is out of range (the table has %llu rows); "
                  "nothing was sent", call, (unsigned long long)ids[bad], bad,
                  (unsigned long long)e->rows);
    return st;
}

/* How holder o's rows of this batch come. */
static uint8_t choose_via(const shs_emb_worker_t *w, int o)
{
    const shs_emb_t *e = w->emb;
    const shs__emb_plan_t *p = &w->plan;
    if (o == e->me)
        return EMB_VIA_LOCAL;
    if (w->force_via != EMB_VIA_NONE)
        return w->force_via;
    if (e->path != SHS_EMB_PATH_AUTO)
        return e->path == SHS_EMB_PATH_OWNER ? EMB_VIA_OWNER : EMB_VIA_READ;
    uint32_t reads = 0;
    for (uint32_t i = p->owner_start[o]; i < p->fetch_end[o] && reads <= e->owner_reads;
         i += shs__emb_plan_run(p, (uint32_t)o, i, UINT32_MAX))
        reads++;
    return reads > e->owner_reads ? EMB_VIA_OWNER : EMB_VIA_READ;
}

/* Packed rows [i, i + run) of holder o (consecutive local rows) by one
 * READ, with their check words. */
static shs_status_t read_rows(shs_emb_worker_t *w, int o, uint32_t i, uint32_t run, bool signal)
{
    shs_emb_t *e = w->emb;
    shs_status_t st = shs_read(w->ep, e->holder_rank[o], e->wbuf,
                               (size_t)w->index * e->w_bytes + e->w_rows_off +
                                   (size_t)i * e->stride_bytes,
                               e->shard, w->plan.local[i] * e->stride_bytes,
                               (size_t)run * e->stride_bytes, signal ? SHS_OP_SIGNAL : 0);
    if (st == SHS_OK)
        emb_count(&w->c.reads, 1);
    return st;
}

/* Holder o's rows to fetch, one READ per run of adjacent rows, posted as
 * one list (a doorbell per chain of READs, not per READ). */
static shs_status_t post_reads(shs_emb_worker_t *w, int o)
{
    const shs_emb_t *e = w->emb;
    const shs__emb_plan_t *p = &w->plan;
    uint32_t hi = p->fetch_end[o];
    size_t n = 0, base = (size_t)w->index * e->w_bytes + e->w_rows_off;
    for (uint32_t i = p->owner_start[o]; i < hi;) {
        uint32_t run = shs__emb_plan_run(p, (uint32_t)o, i, UINT32_MAX);
        w->iov[n++] = (shs_rma_iov_t){.local_off = base + (size_t)i * e->stride_bytes,
                                      .remote_off = p->local[i] * e->stride_bytes,
                                      .len = (size_t)run * e->stride_bytes};
        i += run;
    }
    shs_status_t st = shs_read_list(w->ep, e->holder_rank[o], e->wbuf, e->shard, w->iov, n,
                                    SHS_OP_SIGNAL);
    if (st == SHS_OK)
        emb_count(&w->c.reads, n);
    else if (st == SHS_ERR_PEER_FAILED)
        emb_count(&w->c.peer_failures, 1);
    return st;
}

/* This rank's own rows, copied while its apply thread may be updating
 * them: a copy that fails its check is made again (emb.h, Row checks). The
 * apply thread holds a row for the time of one row's update, so a few
 * tries do; the bound is the op timeout, never a torn row handed out. */
static shs_status_t copy_local(shs_emb_worker_t *w, int o)
{
    const shs_emb_t *e = w->emb;
    const shs__emb_plan_t *p = &w->plan;
    float *packed = packed_rows(w);
    for (uint32_t i = p->owner_start[o]; i < p->owner_start[o + 1]; i++) {
        float *dst = packed + (size_t)i * e->stride;
        const float *src = emb_shard_row(e, p->local[i]);
        memcpy(dst, src, e->stride_bytes);
        if (emb_row_whole(e, dst, p->local[i]))
            continue;
        shs__waiter_t wt;
        shs__waiter_init(&wt, e->spin, e->op_timeout_ms);
        do {
            emb_count(&w->c.torn_retries, 1);
            if (shs__waiter_idle(&wt)) {
                SHS_ERROR("embedding worker %d: local row %llu kept changing for %d ms", w->index,
                          (unsigned long long)p->local[i], e->op_timeout_ms);
                return SHS_ERR_TIMEOUT;
            }
            memcpy(dst, src, e->stride_bytes);
        } while (!emb_row_whole(e, dst, p->local[i]));
    }
    return SHS_OK;
}

/* The READ rows of holder o that failed their checks are read again, up
 * to SHS_EMB_READ_TRIES reads in all; those still torn come by the owner
 * path, one at a time (emb.h, Row checks). */
static shs_status_t verify_reads(shs_emb_worker_t *w, int o)
{
    shs_emb_t *e = w->emb;
    const shs__emb_plan_t *p = &w->plan;
    float *packed = packed_rows(w);
    uint32_t ntorn = 0;
    for (uint32_t i = p->owner_start[o]; i < p->fetch_end[o]; i++)
        if (!emb_row_whole(e, packed + (size_t)i * e->stride, p->local[i]))
            w->torn[ntorn++] = i;
    for (unsigned t = 1; ntorn > 0 && t < e->read_tries; t++) {
        emb_count(&w->c.torn_retries, ntorn);
        shs_status_t st = SHS_OK;
        for (uint32_t k = 0; k < ntorn && st == SHS_OK; k++)
            st = read_rows(w, o, w->torn[k], 1, k + 1 == ntorn);
        if (st == SHS_OK)
            st = shs_flush(w->ep, e->holder_rank[o], SHS_TIMEOUT_DEFAULT);
        if (st != SHS_OK)
            return st;
        uint32_t still = 0;
        for (uint32_t k = 0; k < ntorn; k++) {
            uint32_t i = w->torn[k];
            if (!emb_row_whole(e, packed + (size_t)i * e->stride, p->local[i]))
                w->torn[still++] = i;
        }
        ntorn = still;
    }
    for (uint32_t k = 0; k < ntorn; k++) {
        shs_status_t st = send_msg(w, p, o, EMB_MSG_LOOKUP, w->torn[k], 1);
        if (st == SHS_OK)
            st = wait_word(w, o, answer_word(w, o), w->sent[o] ^ EMB_ANSWER_MAGIC, WAIT_EQ,
                           "answer a lookup of a row that kept changing", -1);
        if (st == SHS_ERR_TIMEOUT)
            w->gone[o] = true; /* its answer may still land: never ask it again */
        if (st != SHS_OK)
            return st;
        emb_count(&w->c.torn_fallbacks, 1);
    }
    return SHS_OK;
}

/* Whether the last update of epoch `at` (this rank's) may not be applied
 * yet: a row fetched now could be older than this rank's own update. */
static bool update_in_flight(const shs_emb_t *e, uint32_t at)
{
    uint64_t tag = atomic_load_explicit(&e->last_upd[at], memory_order_acquire);
    if (tag == 0)
        return false;
    int wk = (int)(tag >> 56) - 1, o = (int)((tag >> 40) & 0xffff);
    uint64_t seq = tag & ((1ull << 40) - 1);
    uint64_t acked = atomic_load_explicit(emb_ack_word(e, wk, o), memory_order_acquire);
    return acked == EMB_ACK_UNREADY || (acked & ((1ull << 40) - 1)) < seq;
}

/* The hot-row cache (embedding.h, Cache): holder o's rows of this batch
 * that the cache holds fresh are copied into their packed places and set
 * apart, so that only the others are fetched; each of those notes its
 * id's update epoch before its fetch is posted. */
static void cache_serve(shs_emb_worker_t *w, int o, uint32_t n)
{
    const shs_emb_t *e = w->emb;
    shs__emb_plan_t *p = &w->plan;
    uint32_t lo = p->owner_start[o], hi = p->owner_start[o + 1], hits = 0;
    bool epochs = e->epoch != NULL; /* else SHS_EMB_CACHE_OWN=keep */
    for (uint32_t i = lo; i < hi; i++) {
        uint32_t ep = epochs ? atomic_load_explicit(emb_epoch(e, p->row[i]),
                                                    memory_order_acquire)
                             : 0;
        w->hit_src[i] = shs__emb_cache_get(&w->cache, p->row[i], w->lookup_tick, ep);
        w->hit[i] = w->hit_src[i] != NULL;
        hits += w->hit[i];
    }
    if (hits > 0) {
        shs__emb_plan_split(p, (uint32_t)o, w->hit, n);
        float *packed = packed_rows(w);
        for (uint32_t i = lo; i < hi; i++)
            if (w->hit[i])
                memcpy(packed + (size_t)p->remap[i] * e->stride, w->hit_src[i],
                       e->stride_bytes);
    }
    for (uint32_t i = lo; i < p->fetch_end[o]; i++) {
        uint32_t at = epochs ? emb_epoch_at(e, p->row[i]) : 0;
        w->fetch_epoch[i] = epochs ? atomic_load_explicit(&e->epoch[at], memory_order_acquire) : 0;
        w->hit[i] = epochs && update_in_flight(e, at); /* its fetch may miss it: not kept */
    }
}

/* Holder o's fetched rows (whole: checked) are offered to the cache. */
static void cache_keep(shs_emb_worker_t *w, int o)
{
    const shs_emb_t *e = w->emb;
    const shs__emb_plan_t *p = &w->plan;
    const float *packed = packed_rows(w);
    for (uint32_t i = p->owner_start[o]; i < p->fetch_end[o]; i++)
        if (!w->hit[i] &&
            (e->epoch == NULL ||
             atomic_load_explicit(emb_epoch(e, p->row[i]), memory_order_acquire) ==
                 w->fetch_epoch[i]))
            shs__emb_cache_offer(&w->cache, p->row[i], packed + (size_t)i * e->stride,
                                 w->lookup_tick, w->fetch_epoch[i]);
}

/* The cache's counters, where shs_emb_stats reads them. */
static void cache_publish(shs_emb_worker_t *w)
{
    const shs__emb_cache_t *c = &w->cache;
    emb_counters_t *k = &w->c;
    atomic_store_explicit(&k->cache_hits, c->hits, memory_order_relaxed);
    atomic_store_explicit(&k->cache_misses, c->misses, memory_order_relaxed);
    atomic_store_explicit(&k->cache_expired, c->expired, memory_order_relaxed);
    atomic_store_explicit(&k->cache_admitted, c->admitted, memory_order_relaxed);
    atomic_store_explicit(&k->cache_rejected, c->rejected, memory_order_relaxed);
    atomic_store_explicit(&k->cache_hit_age_sum, c->hit_age_sum, memory_order_relaxed);
}

/* A load replaced the table's rows: what the cache holds is of before. */
static void cache_check_gen(shs_emb_worker_t *w)
{
    uint64_t g = atomic_load_explicit(&w->emb->cache_gen, memory_order_acquire);
    if (g == w->cache_gen)
        return;
    w->cache_gen = g;
    shs__emb_cache_clear(&w->cache);
}

shs_status_t shs_emb_lookup_start(shs_emb_worker_t *w, const uint64_t *ids, size_t n)
{
    if (w == NULL || (ids == NULL && n > 0))
        return SHS_ERR_INVALID_ARG;
    if (w->started) {
        SHS_ERROR("shs_emb_lookup_start: worker %d has a lookup not waited for", w->index);
        return SHS_ERR_BAD_STATE;
    }
    shs_status_t st = plan_batch(w, &w->plan, ids, n, "shs_emb_lookup");
    if (st != SHS_OK)
        return st;
    shs_emb_t *e = w->emb;
    const shs__emb_plan_t *p = &w->plan;
    shs_status_t first = SHS_OK;
    bool cached = w->cache.capacity > 0;
    if (cached) {
        cache_check_gen(w);
        w->lookup_tick++;
    }
    for (int o = 0; o < (int)e->layout.shards; o++) {
        if (cached && o != e->me && p->owner_start[o + 1] > p->owner_start[o])
            cache_serve(w, o, (uint32_t)n);
        uint32_t cnt = p->fetch_end[o] - p->owner_start[o];
        if (cnt > 0)
            sync_holder(w, o);
        w->via[o] = cnt == 0 ? EMB_VIA_NONE : choose_via(w, o);
        if (w->via[o] == EMB_VIA_LOCAL) {
            st = copy_local(w, o);
            emb_count(&w->c.rows_local, cnt);
        } else if (w->via[o] == EMB_VIA_READ) {
            st = post_reads(w, o);
            emb_count(&w->c.rows_read, cnt);
        } else if (w->via[o] == EMB_VIA_OWNER) {
            st = send_msg(w, p, o, EMB_MSG_LOOKUP, p->owner_start[o], cnt);
            w->answer_want[o] = w->sent[o] ^ EMB_ANSWER_MAGIC;
            emb_count(&w->c.rows_owner, cnt);
        }
        if (st != SHS_OK) {
            w->via[o] = EMB_VIA_NONE; /* nothing to wait for there */
            if (first == SHS_OK)
                first = st;
            st = SHS_OK;
        }
        if (w->via[o] == EMB_VIA_READ || w->via[o] == EMB_VIA_OWNER)
            emb_count(&w->c.bytes_fetched, (uint64_t)cnt * e->row_bytes);
    }
    emb_count(&w->c.lookups, 1);
    emb_count(&w->c.ids, n);
    emb_count(&w->c.dup_ids, n - p->nuniq);
    w->started = true;
    w->started_n = n;
    w->start_status = first;
    return SHS_OK;
}

/* Complete the started lookup's transfers; the first error wins. */
static shs_status_t finish_lookup(shs_emb_worker_t *w)
{
    shs_emb_t *e = w->emb;
    shs_status_t first = w->start_status;
    w->started = false;
    for (int o = 0; o < (int)e->layout.shards; o++) {
        shs_status_t st = SHS_OK;
        if (w->via[o] == EMB_VIA_READ) {
            st = shs_flush(w->ep, e->holder_rank[o], SHS_TIMEOUT_DEFAULT);
            if (st == SHS_OK)
                st = verify_reads(w, o);
            if (st == SHS_ERR_PEER_FAILED || st == SHS_ERR_REMOTE_ACCESS ||
                st == SHS_ERR_TRANSPORT)
                emb_count(&w->c.peer_failures, 1);
        } else if (w->via[o] == EMB_VIA_OWNER) {
            st = wait_word(w, o, answer_word(w, o), w->answer_want[o], WAIT_EQ,
                           "answer a lookup", -1);
            if (st == SHS_ERR_TIMEOUT)
                w->gone[o] = true; /* its answer may still land: never ask it again */
        }
        if (st == SHS_OK && w->cache.capacity > 0 &&
            (w->via[o] == EMB_VIA_READ || w->via[o] == EMB_VIA_OWNER))
            cache_keep(w, o);
        if (first == SHS_OK)
            first = st;
    }
    if (w->cache.capacity > 0)
        cache_publish(w);
    return first;
}

shs_status_t shs_emb_lookup_wait(shs_emb_worker_t *w, float *out, size_t out_len)
{
    if (w == NULL)
        return SHS_ERR_INVALID_ARG;
    if (!w->started) {
        SHS_ERROR("shs_emb_lookup_wait: worker %d has no lookup started", w->index);
        return SHS_ERR_BAD_STATE;
    }
    size_t n = w->started_n;
    shs_status_t st = finish_lookup(w);
    if (st == SHS_OK && ((out == NULL && n > 0) || out_len < n * w->emb->dim)) {
        SHS_ERROR("shs_emb_lookup_wait: out holds %zu floats, %zu ids of dim %u need %zu",
                  out_len, n, w->emb->dim, n * w->emb->dim);
        return SHS_ERR_INVALID_ARG;
    }
    if (st == SHS_OK)
        shs__emb_plan_scatter(&w->plan, packed_rows(w), w->emb->stride, w->emb->dim,
                              (uint32_t)n, out);
    return st;
}

shs_status_t shs_emb_lookup(shs_emb_worker_t *w, const uint64_t *ids, size_t n, float *out,
                            size_t out_len)
{
    if (w == NULL || (n > 0 && (ids == NULL || out == NULL)))
        return SHS_ERR_INVALID_ARG;
    if (out_len < n * w->emb->dim) {
        SHS_ERROR("shs_emb_lookup: out holds %zu floats, %zu ids of dim %u need %zu; nothing "
                  "was sent", out_len, n, w->emb->dim, n * w->emb->dim);
        return SHS_ERR_INVALID_ARG;
    }
    shs_status_t st = shs_emb_lookup_start(w, ids, n);
    return st != SHS_OK ? st : shs_emb_lookup_wait(w, out, out_len);
}

shs_status_t shs_emb_lookup_pooled(shs_emb_worker_t *w, const uint64_t *ids,
                                   const uint32_t *offsets, size_t nbags, int mean, float *out,
                                   size_t out_len)
{
    if (w == NULL || offsets == NULL || (nbags > 0 && out == NULL))
        return SHS_ERR_INVALID_ARG;
    size_t n = offsets[nbags];
    bool ok = offsets[0] == 0 && out_len >= nbags * w->emb->dim && (ids != NULL || n == 0);
    for (size_t b = 0; ok && b < nbags; b++)
        ok = offsets[b] <= offsets[b + 1];
    if (!ok) {
        SHS_ERROR("shs_emb_lookup_pooled: offsets must start at 0 and ascend, out hold nbags "
                  "x dim = %zu floats (it holds %zu); nothing was sent",
                  nbags * w->emb->dim, out_len);
        return SHS_ERR_INVALID_ARG;
    }
    shs_status_t st = shs_emb_lookup_start(w, ids, n);
    if (st == SHS_OK)
        st = finish_lookup(w);
    if (st == SHS_OK)
        shs__emb_plan_pool(&w->plan, packed_rows(w), w->emb->stride, w->emb->dim, offsets,
                           (uint32_t)nbags, mean, out);
    return st;
}

shs_status_t shs_emb_update(shs_emb_worker_t *w, const uint64_t *ids, size_t n,
                            const float *grads)
{
    if (w == NULL || (n > 0 && (ids == NULL || grads == NULL)))
        return SHS_ERR_INVALID_ARG;
    shs_status_t st = plan_batch(w, &w->uplan, ids, n, "shs_emb_update");
    if (st != SHS_OK)
        return st;
    shs_emb_t *e = w->emb;
    const shs__emb_plan_t *p = &w->uplan;
    shs__emb_plan_sum(p, grads, e->dim, (uint32_t)n, w->grads);
    if (e->epoch != NULL) /* every worker's cached copy of these rows is old now */
        for (uint32_t o = 0; o < e->layout.shards; o++)
            for (uint32_t u = p->owner_start[o]; u < p->owner_start[o + 1]; u++) {
                uint32_t at = emb_epoch_at(e, p->row[u]);
                atomic_store_explicit(&e->last_upd[at],
                                      emb_upd_tag(w->index, (int)o, w->sent[o] + 1),
                                      memory_order_release);
                atomic_fetch_add_explicit(&e->epoch[at], 1, memory_order_release);
            }
    shs_status_t first = SHS_OK;
    for (int o = 0; o < (int)e->layout.shards; o++) {
        uint32_t cnt = p->owner_start[o + 1] - p->owner_start[o];
        if (cnt == 0)
            continue;
        st = send_msg(w, p, o, EMB_MSG_UPDATE, p->owner_start[o], cnt);
        if (st != SHS_OK && first == SHS_OK)
            first = st;
    }
    emb_count(&w->c.updates, 1);
    emb_count(&w->c.update_rows, p->nuniq);
    return first;
}

shs_status_t shs_emb_flush(shs_emb_worker_t *w, int timeout_ms)
{
    if (w == NULL || timeout_ms == 0)
        return SHS_ERR_INVALID_ARG;
    shs_emb_t *e = w->emb;
    shs_status_t first = SHS_OK;
    for (int o = 0; o < (int)e->layout.shards; o++) {
        sync_holder(w, o);
        if (w->lost[o]) {
            SHS_ERROR("embedding worker %d: updates to holder %d (rank %d) were lost when its "
                      "process died; it has rejoined since", w->index, o, e->holder_rank[o]);
            emb_count(&w->c.peer_failures, 1);
            w->lost[o] = false;
            if (first == SHS_OK)
                first = SHS_ERR_PEER_FAILED;
        }
        if (w->sent[o] == 0)
            continue;
        shs_status_t st = wait_word(w, o, ack_word(w, o), w->sent[o], WAIT_GE,
                                    "apply this worker's updates", timeout_ms);
        if (st != SHS_OK && first == SHS_OK)
            first = st;
    }
    return first;
}

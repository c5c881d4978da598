/* Sharded embedding tables, the holder's side: the apply thread takes each
 * (sender, worker)'s messages in order from the inbox, applies updates
 * with the optimizer, answers owner-path lookups, and acknowledges
 * (embedding.h; memory and the message protocol in emb.h). */
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/embedding/emb.h"
#include "runtime/clock.h"
#include "runtime/log.h"
#include "transport/services.h"

static void apply_rows(shs_emb_t *e, const uint64_t *loc, const float *g, uint32_t cnt, int from)
{
    for (uint32_t i = 0; i < cnt; i++) {
        if (loc[i] >= e->shard_rows) {
            SHS_ERROR("embedding: rank %d sent row %llu, this shard holds %llu: dropped",
                      from, (unsigned long long)loc[i], (unsigned long long)e->shard_rows);
            continue;
        }
        float *w = emb_shard_row(e, loc[i]);
        if (e->opt == SHS_EMB_OPT_ADAGRAD)
            shs__emb_adagrad_row(w, g + (size_t)i * e->dim, e->dim, e->lr, e->eps,
                                 &e->state[loc[i]]);
        else
            shs__emb_sgd_row(w, g + (size_t)i * e->dim, e->dim, e->lr);
        emb_row_seal(e, w, loc[i]);
    }
}

/* The answer buffers are reused in turn; one whose WRITE may still be in
 * flight is waited for first. */
static size_t answer_buf(shs_emb_t *e)
{
    unsigned b = e->answer_next++ % EMB_ANSWER_BUFS;
    if (e->answer_pending[b]) {
        /* a dead asker's failure is its own: the flush still waits for the
         * others, which is all the buffer needs */
        (void)shs_flush(e->apply_ep, SHS_PEER_ALL, SHS_TIMEOUT_DEFAULT);
        memset(e->answer_pending, 0, EMB_ANSWER_BUFS * sizeof(bool));
    }
    e->answer_pending[b] = true;
    return e->s_answer_buf_off + (size_t)b * e->max_batch * e->stride_bytes;
}

static void answer(shs_emb_t *e, int r, int wk, uint64_t seq, const emb_hdr_t *h,
                   const uint64_t *loc)
{
    uint8_t *srv = shs_region_addr(e->srv);
    size_t off = answer_buf(e);
    float *out = (float *)(srv + off);
    /* each row with its check word: whole, as this thread is its only writer */
    for (uint32_t i = 0; i < h->count; i++) {
        if (loc[i] < e->shard_rows)
            memcpy(out + (size_t)i * e->stride, emb_shard_row(e, loc[i]), e->stride_bytes);
        else
            memset(out + (size_t)i * e->stride, 0, e->stride_bytes);
    }
    size_t idx = (size_t)r * (size_t)e->nworkers + (size_t)wk;
    size_t stamp_off = e->s_answer_stamp_off + idx * sizeof(uint64_t);
    atomic_store_explicit((_Atomic uint64_t *)(srv + stamp_off), seq ^ EMB_ANSWER_MAGIC,
                          memory_order_relaxed);
    size_t wbase = (size_t)wk * e->w_bytes;
    /* rows, then the stamp, on the one queue pair an endpoint has per peer:
     * placed in that order */
    shs_status_t st = shs_write(e->apply_ep, r, e->srv, off, e->wbuf,
                                wbase + e->w_rows_off + h->answer_row * e->stride_bytes,
                                (size_t)h->count * e->stride_bytes, 0);
    if (st == SHS_OK)
        st = shs_write(e->apply_ep, r, e->srv, stamp_off, e->wbuf,
                       wbase + e->w_answer_off + (size_t)e->me * sizeof(uint64_t),
                       sizeof(uint64_t), SHS_OP_SIGNAL);
    if (st != SHS_OK)
        SHS_DEBUG("embedding: answer to rank %d worker %d: %s", r, wk, shs_status_string(st));
}

static void acknowledge(shs_emb_t *e, int r, int wk, uint64_t seq)
{
    size_t dst = (size_t)wk * e->w_bytes + e->w_ack_off + (size_t)e->me * sizeof(uint64_t);
    if (r == e->rank) {
        atomic_store_explicit(emb_ack_word(e, wk, e->me), seq, memory_order_release);
        return;
    }
    size_t src = e->s_ack_off + ((size_t)r * (size_t)e->nworkers + (size_t)wk) * sizeof(uint64_t);
    /* the word only grows: a WRITE that reads a newer value is still right */
    atomic_store_explicit((_Atomic uint64_t *)((uint8_t *)shs_region_addr(e->srv) + src), seq,
                          memory_order_relaxed);
    shs_status_t st = shs_write(e->apply_ep, r, e->srv, src, e->wbuf, dst, sizeof(uint64_t), 0);
    if (st != SHS_OK)
        SHS_DEBUG("embedding: acknowledgement to rank %d: %s", r, shs_status_string(st));
}

/* Take (r, wk)'s next message if it is all there; true when one was taken. */
static bool take(shs_emb_t *e, int r, int wk)
{
    size_t idx = (size_t)r * (size_t)e->nworkers + (size_t)wk;
    uint64_t seq = e->expect[idx];
    uint8_t *slot = (uint8_t *)shs_region_addr(e->inbox) + emb_slot_off(e, r, wk, seq);
    emb_hdr_t *h = (emb_hdr_t *)slot;
    uint64_t stamp = atomic_load_explicit(&h->stamp, memory_order_acquire);
    uint32_t kind = h->kind, cnt = h->count;
    if (stamp != emb_head_stamp(seq, kind, cnt))
        return false; /* not here yet, or its fields not visible yet */
    if (cnt > e->max_batch || (kind != EMB_MSG_UPDATE && kind != EMB_MSG_LOOKUP) ||
        (kind == EMB_MSG_LOOKUP && h->answer_row > e->max_batch - cnt)) {
        SHS_ERROR("embedding: malformed message %llu from rank %d worker %d (kind %u, %u rows)",
                  (unsigned long long)seq, r, wk, kind, cnt);
        cnt = 0; /* consumed and acknowledged, so the sender does not hang */
        kind = 0;
    }
    _Atomic uint64_t *tail = (_Atomic uint64_t *)(slot + emb_msg_bytes(e, kind, cnt) - 8);
    if (kind != 0 && atomic_load_explicit(tail, memory_order_acquire) != (seq ^ EMB_TAIL_MAGIC))
        return false; /* still arriving */
    uint64_t t0 = shs__now_ns();
    const uint64_t *loc = (const uint64_t *)(slot + EMB_HDR_BYTES);
    if (kind == EMB_MSG_UPDATE) {
        apply_rows(e, loc, (const float *)(slot + EMB_HDR_BYTES + (size_t)cnt * 8u), cnt, r);
        emb_count(&e->applied_batches, 1);
        emb_count(&e->applied_rows, cnt);
    } else if (kind == EMB_MSG_LOOKUP) {
        /* counted before the asker can see its answer (calibrate.c) */
        emb_count(&e->served_lookups, 1);
        emb_count(&e->served_rows, cnt);
        answer(e, r, wk, seq, h, loc);
    }
    atomic_store_explicit(tail, 0, memory_order_relaxed);
    atomic_store_explicit(&h->stamp, 0, memory_order_release);
    e->expect[idx] = seq + 1;
    acknowledge(e, r, wk, seq);
    emb_count(&e->busy_ns, shs__now_ns() - t0);
    return true;
}

/* A sender that came back (its incarnation on the apply thread's endpoint
 * changed, and the endpoint is connected to the new process): its slots
 * are cleared (the old process may have left a message there), its
 * sequences start again at 1, and each of its workers is told, by the ack
 * word it waits on, that it may send (the protocol in emb.h). */
static void sync_senders(shs_emb_t *e)
{
    for (int r = 0; r < e->size; r++) {
        if (r == e->rank)
            continue;
        unsigned g = shs__ctx_peer_incarnation(e->apply_ep, r);
        if (g == e->sender_gen[r] || shs_ctx_peer_status(e->apply_ep, r, NULL) != SHS_OK)
            continue;
        e->sender_gen[r] = g;
        size_t nw = (size_t)e->nworkers;
        memset((uint8_t *)shs_region_addr(e->inbox) + emb_slot_off(e, r, 0, 1), 0,
               nw * e->slots * e->slot_bytes);
        uint8_t *srv = shs_region_addr(e->srv);
        for (size_t wk = 0; wk < nw; wk++) {
            size_t idx = (size_t)r * nw + wk;
            e->expect[idx] = 1;
            atomic_store_explicit((_Atomic uint64_t *)(srv + e->s_answer_stamp_off +
                                                       idx * sizeof(uint64_t)),
                                  0, memory_order_relaxed);
            acknowledge(e, r, (int)wk, 0);
        }
        SHS_INFO("embedding: rank %d came back (incarnation %u): its workers start again", r,
                 g);
    }
}

static void *apply_main(void *arg)
{
    shs_emb_t *e = arg;
    shs__waiter_t wt;
    shs__waiter_init(&wt, e->spin, -1);
    shs__waiter_nap_max(&wt, e->apply_nap_ns);
    while (!atomic_load_explicit(&e->apply_stop, memory_order_acquire)) {
        uint64_t taken = 0;
        for (int r = 0; r < e->size; r++)
            for (int wk = 0; wk < e->nworkers; wk++)
                for (uint32_t k = 0; k < e->slots && take(e, r, wk); k++)
                    taken++;
        if (taken > atomic_load_explicit(&e->lag_max, memory_order_relaxed))
            atomic_store_explicit(&e->lag_max, taken, memory_order_relaxed);
        (void)shs_progress(e->apply_ep);
        sync_senders(e);
        if (taken > 0)
            shs__waiter_progress(&wt, false);
        else
            (void)shs__waiter_idle(&wt);
    }
    return NULL;
}

shs_status_t shs__emb_apply_start(shs_emb_t *e)
{
    int rc = pthread_create(&e->apply_thread, NULL, apply_main, e);
    if (rc != 0) {
        SHS_ERROR("embedding: cannot start the apply thread: %s", strerror(rc));
        return SHS_ERR_NO_RESOURCE;
    }
    e->apply_running = true;
    return SHS_OK;
}

void shs__emb_apply_stop(shs_emb_t *e)
{
    if (!e->apply_running)
        return;
    atomic_store_explicit(&e->apply_stop, true, memory_order_release);
    pthread_join(e->apply_thread, NULL);
    e->apply_running = false;
}

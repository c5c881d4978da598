/* Posting and flush: the data path out. No allocation, no lock; the only
 * system calls are the provider's own post and poll (and a short nanosleep
 * once a wait has been idle for a while). Completions: completion.c. */
#include <arpa/inet.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/services.h"
#include "transport/transport.h"

/* The status a call naming a failed peer returns: the completion error once
 * (to the flush that finds it), then "peer failed". */
static shs_status_t peer_failed_status(shs__peer_t *peer, bool report)
{
    /* an endpoint's peer failed on the context (peer->up) has no status
     * of its own to report */
    if (report && !peer->fail_reported &&
        atomic_load_explicit(&peer->failed, memory_order_acquire)) {
        peer->fail_reported = true;
        return peer->fail_status;
    }
    return SHS_ERR_PEER_FAILED;
}

/* READ bytes posted on conn whose completion has not been seen. */
static inline uint64_t rd_outstanding(const shs_ctx_t *ctx, const shs__conn_t *conn)
{
    uint64_t done = conn->sq_done == 0 ? 0 : conn->rd_mark[(conn->sq_done - 1) & ctx->wr_mask];
    return conn->rd_posted - done;
}

static inline bool must_wait(const shs_ctx_t *ctx, const shs__conn_t *conn, unsigned n,
                             uint64_t rd_bytes)
{
    if (conn->sq_posted - conn->sq_done + n > (uint64_t)ctx->cfg.sq_depth)
        return true;
    if (rd_bytes == 0)
        return false;
    uint64_t out = rd_outstanding(ctx, conn);
    return out != 0 && out + rd_bytes > ctx->read_budget;
}

/* Wait until conn has room for n more work requests and, for a READ of
 * rd_bytes, until the READ bytes in flight leave room for it
 * (SHS_READ_INFLIGHT). Unsignaled requests carry less than half the budget
 * (ctx->signal_bytes), so the wait always ends with a signaled completion. */
static shs_status_t reserve(shs_ctx_t *ctx, shs__conn_t *conn, unsigned n, uint64_t rd_bytes)
{
    uint64_t last_done = conn->sq_done;
    shs__waiter_t w;

    shs__ctx_waiter_init(&w, ctx, -1);
    while (must_wait(ctx, conn, n, rd_bytes)) {
        if (shs__peer_is_failed(conn->peer))
            return SHS_ERR_PEER_FAILED;
        if (shs__poll(ctx) < 0)
            return SHS_ERR_DEVICE;
        if (conn->sq_done != last_done) {
            last_done = conn->sq_done;
            shs__waiter_progress(&w, true);
        } else if (shs__waiter_idle(&w)) {
            shs__peer_fail(conn->peer, SHS_ERR_TIMEOUT,
                           "no send completion for %d ms (SHS_OP_TIMEOUT_MS) with a full "
                           "send queue or READ budget", ctx->cfg.op_timeout_ms);
            return SHS_ERR_TIMEOUT;
        }
    }
    return SHS_OK;
}

/* Post ctx->wr[0..n) on conn (signaling already decided). */
static shs_status_t post_batch(shs_ctx_t *ctx, shs__conn_t *conn, unsigned n)
{
    struct ibv_send_wr *bad = NULL;

    for (unsigned k = 0; k + 1 < n; k++)
        ctx->wr[k].next = &ctx->wr[k + 1];
    ctx->wr[n - 1].next = NULL;
    int rc = ibv_post_send(conn->qp, ctx->wr, &bad);
    if (rc != 0) {
        unsigned posted = bad != NULL ? (unsigned)(bad - ctx->wr) : 0;
        conn->sq_posted += posted;
        shs__peer_fail(conn->peer, SHS_ERR_TRANSPORT, "ibv_post_send on qp 0x%x: %s",
                       conn->qp->qp_num, strerror(rc));
        return SHS_ERR_PEER_FAILED;
    }
    conn->sq_posted += n;
    return SHS_OK;
}

/* Fill ctx->wr[k] as work request number seq of conn, carrying len bytes. */
static void fill_wr(shs_ctx_t *ctx, shs__conn_t *conn, unsigned k, size_t len,
                    bool force_signal)
{
    struct ibv_send_wr *wr = &ctx->wr[k];
    uint64_t seq = conn->sq_posted + k;

    wr->wr_id = (uint64_t)conn->index | (seq << SHS__WRID_SEQ_SHIFT);
    wr->send_flags = 0;
    if (wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP)
        conn->rd_posted += len;
    conn->rd_mark[seq & ctx->wr_mask] = conn->rd_posted;
    conn->unsignaled_bytes += len;
    if (force_signal || ++conn->unsignaled_run >= (unsigned)ctx->signal_every ||
        conn->unsignaled_bytes >= ctx->signal_bytes) {
        wr->send_flags = IBV_SEND_SIGNALED;
        conn->unsignaled_run = 0;
        conn->unsignaled_bytes = 0;
        conn->sq_signaled = seq + 1;
    }
}

/* Whether rank `peer` of ctx was ever a rejoiner (transport/rejoin/). */
static bool rejoined_peer(const shs_ctx_t *ctx, int peer)
{
    const shs__peer_t *p = &ctx->peers[peer];
    const shs__peer_t *c = p->up != NULL ? p->up : p;
    return atomic_load_explicit(&c->gen, memory_order_relaxed) != 0;
}

static shs_status_t check_op(shs_ctx_t *ctx, int peer, const shs_region_t *local,
                             size_t loff, const shs_region_t *remote, size_t roff, size_t len,
                             bool is_read)
{
    if (ctx == NULL || local == NULL || remote == NULL || !shs__region_of(local, ctx) ||
        !shs__region_of(remote, ctx) || peer < 0 || peer >= ctx->size || peer == ctx->rank)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, is_read ? "shs_read" : "shs_write"))
        return SHS_ERR_BAD_STATE;
    const shs__remote_t *rm = &remote->remote[peer];
    /* the length first: a rejoiner's key is written length last (rejoin/serve.c) */
    uint64_t rlen = __atomic_load_n(&rm->len, __ATOMIC_ACQUIRE);
    if (rlen == 0 && remote->len != 0 && rejoined_peer(ctx, peer)) {
        /* a rank that rejoined has not made (or announced) this region yet */
        SHS_DEBUG("%s peer %d: it rejoined and has no copy of this region yet",
                  is_read ? "read from" : "write to", peer);
        return SHS_ERR_PEER_FAILED;
    }
    if (!shs__range_ok(loff, len, local->len) || !shs__range_ok(roff, len, rlen)) {
        SHS_ERROR("%s of %zu bytes %s peer %d: local [%zu, +%zu) of %zu or remote "
                  "[%zu, +%zu) of %llu is out of bounds", is_read ? "read" : "write", len,
                  is_read ? "from" : "to", peer, loff, len, local->len, roff, len, (unsigned long long)rm->len);
        return SHS_ERR_OUT_OF_BOUNDS;
    }
    if (is_read ? !(rm->flags & SHS_ACCESS_REMOTE_READ) ||
                      !(local->flags & (SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_WRITE))
                : !(rm->flags & SHS_ACCESS_REMOTE_WRITE)) {
        SHS_ERROR("%s %s peer %d: the %s region lacks the access right (%s)",
                  is_read ? "read" : "write", is_read ? "from" : "to", peer,
                  is_read && (rm->flags & SHS_ACCESS_REMOTE_READ) ? "local" : "remote",
                  is_read ? "SHS_ACCESS_REMOTE_READ remotely, LOCAL_WRITE locally"
                          : "SHS_ACCESS_REMOTE_WRITE");
        return SHS_ERR_INVALID_ARG;
    }
    if (shs__peer_is_failed(&ctx->peers[peer]))
        return SHS_ERR_PEER_FAILED;
    return SHS_OK;
}

static shs_status_t post_op(shs_ctx_t *ctx, int peer, shs_region_t *local, size_t loff,
                            shs_region_t *remote, size_t roff, size_t len,
                            enum ibv_wr_opcode opcode, bool with_imm, uint32_t imm,
                            unsigned flags)
{
    shs_status_t status = check_op(ctx, peer, local, loff, remote, roff, len,
                                   opcode == IBV_WR_RDMA_READ);
    if (status != SHS_OK)
        return status;
    if (len == 0 && !with_imm)
        return SHS_OK;

    shs__peer_t *p = &ctx->peers[peer];
    const shs__remote_t *rm = &remote->remote[peer];
    bool is_read = opcode == IBV_WR_RDMA_READ;
    size_t chunk = is_read ? ctx->read_chunk : ctx->chunk;
    size_t pieces = shs__split_count(len, chunk);
    int qpp = ctx->cfg.qps_per_peer;
    unsigned first_conn = p->rr++ % (unsigned)qpp;
    if (pieces == 0)
        pieces = 1; /* a zero-length write with immediate: one notification */

    /* Pieces go round robin over the peer's QPs, except with an immediate:
     * it must arrive after all its data, which only one QP's order ensures. */
    size_t i = 0;
    while (i < pieces) {
        unsigned slot = with_imm || qpp == 1 ? first_conn
                                             : (first_conn + (unsigned)i) % (unsigned)qpp;
        shs__conn_t *conn = &p->conns[slot];
        unsigned n = 0;
        size_t stop = pieces - i < (size_t)ctx->post_batch ? pieces : i + (size_t)ctx->post_batch;
        unsigned want = (unsigned)(stop - i);
        if (!(with_imm || qpp == 1))
            want = 1; /* the next piece goes to another QP */
        if (is_read && pieces > 1)
            want = 1; /* each piece waits for its share of the READ budget */

        size_t off0, len0;
        shs__split_piece(len, chunk, i, &off0, &len0);
        status = reserve(ctx, conn, want, is_read ? (uint64_t)len0 : 0);
        if (status != SHS_OK)
            return status;
        for (; n < want; n++, i++) {
            size_t off, plen;
            bool last = i + 1 == pieces;
            shs__split_piece(len, chunk, i, &off, &plen);
            struct ibv_sge *sge = &ctx->sge[n];
            struct ibv_send_wr *wr = &ctx->wr[n];
            sge->addr = (uintptr_t)local->addr + loff + off;
            sge->length = (uint32_t)plen;
            /* no MR: an uneven region this rank holds none of (len 0 only) */
            sge->lkey = local->mr != NULL ? local->mr->lkey : 0;
            wr->sg_list = sge;
            wr->num_sge = plen != 0;
            wr->opcode = last && with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : opcode;
            wr->imm_data = htonl(imm);
            wr->wr.rdma.remote_addr = rm->addr + roff + off;
            wr->wr.rdma.rkey = rm->rkey;
            fill_wr(ctx, conn, n, plen, last && (flags & SHS_OP_SIGNAL));
        }
        status = post_batch(ctx, conn, n);
        if (status != SHS_OK)
            return status;
    }
    return SHS_OK;
}

shs_status_t shs_write(shs_ctx_t *ctx, int peer, shs_region_t *local, size_t local_off,
                       shs_region_t *remote, size_t remote_off, size_t len, unsigned flags)
{
    return post_op(ctx, peer, local, local_off, remote, remote_off, len, IBV_WR_RDMA_WRITE,
                   false, 0, flags);
}

shs_status_t shs_read(shs_ctx_t *ctx, int peer, shs_region_t *local, size_t local_off,
                      shs_region_t *remote, size_t remote_off, size_t len, unsigned flags)
{
    return post_op(ctx, peer, local, local_off, remote, remote_off, len, IBV_WR_RDMA_READ,
                   false, 0, flags);
}

/* How many of iov[k..n) go into one chain: one piece each (len 1..the READ
 * chunk), at most post_batch of them. */
static unsigned read_chain(const shs_ctx_t *ctx, const shs_rma_iov_t *iov, size_t k, size_t n)
{
    unsigned m = 0;
    while (k + m < n && m < (unsigned)ctx->post_batch && iov[k + m].len > 0 &&
           iov[k + m].len <= ctx->read_chunk)
        m++;
    return m;
}

shs_status_t shs_read_list(shs_ctx_t *ctx, int peer, shs_region_t *local, shs_region_t *remote,
                           const shs_rma_iov_t *iov, size_t n, unsigned flags)
{
    if (iov == NULL && n > 0)
        return SHS_ERR_INVALID_ARG;
    for (size_t k = 0; k < n; k++) {
        shs_status_t st = check_op(ctx, peer, local, iov[k].local_off, remote,
                                   iov[k].remote_off, iov[k].len, true);
        if (st != SHS_OK)
            return st;
    }
    if (n == 0)
        return SHS_OK;
    shs__peer_t *p = &ctx->peers[peer];
    const shs__remote_t *rm = &remote->remote[peer];
    shs__conn_t *conn = &p->conns[p->rr++ % (unsigned)ctx->cfg.qps_per_peer];
    for (size_t k = 0; k < n;) {
        unsigned m = read_chain(ctx, iov, k, n);
        if (m == 0) { /* empty or longer than a piece: as shs_read splits it */
            shs_status_t st = post_op(ctx, peer, local, iov[k].local_off, remote,
                                      iov[k].remote_off, iov[k].len, IBV_WR_RDMA_READ, false,
                                      0, k + 1 == n ? flags : 0);
            if (st != SHS_OK)
                return st;
            k++;
            continue;
        }
        uint64_t bytes = 0;
        for (unsigned j = 0; j < m; j++)
            bytes += iov[k + j].len;
        shs_status_t st = reserve(ctx, conn, m, bytes);
        if (st != SHS_OK)
            return st;
        for (unsigned j = 0; j < m; j++) {
            const shs_rma_iov_t *v = &iov[k + j];
            struct ibv_sge *sge = &ctx->sge[j];
            struct ibv_send_wr *wr = &ctx->wr[j];
            sge->addr = (uintptr_t)local->addr + v->local_off;
            sge->length = (uint32_t)v->len;
            sge->lkey = local->mr != NULL ? local->mr->lkey : 0;
            wr->sg_list = sge;
            wr->num_sge = 1;
            wr->opcode = IBV_WR_RDMA_READ;
            wr->imm_data = 0;
            wr->wr.rdma.remote_addr = rm->addr + v->remote_off;
            wr->wr.rdma.rkey = rm->rkey;
            fill_wr(ctx, conn, j, v->len, k + j + 1 == n && (flags & SHS_OP_SIGNAL));
        }
        if ((st = post_batch(ctx, conn, m)) != SHS_OK)
            return st;
        k += m;
    }
    return SHS_OK;
}

shs_status_t shs_write_imm(shs_ctx_t *ctx, int peer, shs_region_t *local, size_t local_off,
                           shs_region_t *remote, size_t remote_off, size_t len, uint32_t imm,
                           unsigned flags)
{
    return post_op(ctx, peer, local, local_off, remote, remote_off, len, IBV_WR_RDMA_WRITE,
                   true, imm, flags);
}

shs_status_t shs_cas(shs_ctx_t *ctx, int peer, shs_region_t *local, size_t local_off,
                     shs_region_t *remote, size_t remote_off, uint64_t compare, uint64_t swap,
                     unsigned flags)
{
    if (ctx == NULL || local == NULL || remote == NULL || !shs__region_of(local, ctx) ||
        !shs__region_of(remote, ctx) || peer < 0 || peer >= ctx->size || peer == ctx->rank)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_cas"))
        return SHS_ERR_BAD_STATE;
    const shs__remote_t *rm = &remote->remote[peer];
    uint64_t rlen = __atomic_load_n(&rm->len, __ATOMIC_ACQUIRE); /* as check_op */
    if (rlen == 0 && remote->len != 0 && rejoined_peer(ctx, peer))
        return SHS_ERR_PEER_FAILED;
    if (local_off % 8 != 0 || remote_off % 8 != 0 || !shs__range_ok(local_off, 8, local->len) ||
        !shs__range_ok(remote_off, 8, rlen)) {
        SHS_ERROR("cas on peer %d: local offset %zu of %zu or remote offset %zu of %llu is "
                  "misaligned (8) or out of bounds", peer, local_off, local->len, remote_off,
                  (unsigned long long)rm->len);
        return SHS_ERR_INVALID_ARG;
    }
    if (!(rm->flags & SHS_ACCESS_REMOTE_ATOMIC) || !(local->flags & SHS_ACCESS_LOCAL_WRITE)) {
        SHS_ERROR("cas on peer %d: the %s region lacks the access right (%s)", peer,
                  !(rm->flags & SHS_ACCESS_REMOTE_ATOMIC) ? "remote" : "local",
                  !(rm->flags & SHS_ACCESS_REMOTE_ATOMIC) ? "SHS_ACCESS_REMOTE_ATOMIC"
                                                          : "SHS_ACCESS_LOCAL_WRITE");
        return SHS_ERR_INVALID_ARG;
    }
    shs__peer_t *p = &ctx->peers[peer];
    if (shs__peer_is_failed(p))
        return SHS_ERR_PEER_FAILED;
    shs__conn_t *conn = &p->conns[0]; /* one QP: a word's operations stay in order */
    /* an atomic holds one of the responder's READ resources: counted as a READ */
    shs_status_t status = reserve(ctx, conn, 1, 8);
    if (status != SHS_OK)
        return status;
    struct ibv_sge *sge = &ctx->sge[0];
    struct ibv_send_wr *wr = &ctx->wr[0];
    sge->addr = (uintptr_t)local->addr + local_off;
    sge->length = 8;
    sge->lkey = local->mr->lkey;
    wr->sg_list = sge;
    wr->num_sge = 1;
    wr->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr->wr.atomic.remote_addr = rm->addr + remote_off;
    wr->wr.atomic.rkey = rm->rkey;
    wr->wr.atomic.compare_add = compare;
    wr->wr.atomic.swap = swap;
    fill_wr(ctx, conn, 0, 8, (flags & SHS_OP_SIGNAL) != 0);
    return post_batch(ctx, conn, 1);
}

shs_status_t shs_send(shs_ctx_t *ctx, int peer, shs_region_t *local, size_t local_off,
                      size_t len, unsigned flags)
{
    if (ctx == NULL || local == NULL || !shs__region_of(local, ctx) || peer < 0 ||
        peer >= ctx->size || peer == ctx->rank)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_send"))
        return SHS_ERR_BAD_STATE;
    if (ctx->rx_mr == NULL) {
        SHS_ERROR("send to peer %d: two-sided messages are off (SHS_MSG_SIZE is 0)", peer);
        return SHS_ERR_UNSUPPORTED;
    }
    if (len > ctx->cfg.msg_size) {
        SHS_ERROR("send of %zu bytes to peer %d: larger than the receive buffers "
                  "(SHS_MSG_SIZE %zu)", len, peer, ctx->cfg.msg_size);
        return SHS_ERR_INVALID_ARG;
    }
    if (!shs__range_ok(local_off, len, local->len)) {
        SHS_ERROR("send of %zu bytes to peer %d: local [%zu, +%zu) of %zu is out of bounds",
                  len, peer, local_off, len, local->len);
        return SHS_ERR_OUT_OF_BOUNDS;
    }
    shs__peer_t *p = &ctx->peers[peer];
    if (shs__peer_is_failed(p))
        return SHS_ERR_PEER_FAILED;
    shs__conn_t *conn = &p->conns[p->rr++ % (unsigned)ctx->cfg.qps_per_peer];
    shs_status_t status = reserve(ctx, conn, 1, 0);
    if (status != SHS_OK)
        return status;
    struct ibv_sge *sge = &ctx->sge[0];
    struct ibv_send_wr *wr = &ctx->wr[0];
    sge->addr = (uintptr_t)local->addr + local_off;
    sge->length = (uint32_t)len;
    sge->lkey = local->mr != NULL ? local->mr->lkey : 0; /* none: len 0 of an uneven region */
    wr->sg_list = sge;
    wr->num_sge = len != 0;
    wr->opcode = IBV_WR_SEND;
    fill_wr(ctx, conn, 0, len, (flags & SHS_OP_SIGNAL) != 0);
    return post_batch(ctx, conn, 1);
}

/* A write of len bytes from this rank's scratch area (local_off) into
 * peer's (remote_off), signaled, on the peer's first queue pair: the mesh
 * barrier's arrival, an allgather's record (barrier.c). */
shs_status_t shs__post_scratch_write(shs_ctx_t *ctx, int peer, size_t local_off,
                                     size_t remote_off, size_t len)
{
    shs__peer_t *p = &ctx->peers[peer];
    if (shs__peer_is_failed(p))
        return SHS_ERR_PEER_FAILED;
    shs__conn_t *conn = &p->conns[0];
    const shs__remote_t *sc = &ctx->scratch_remote[peer];
    shs_status_t status = reserve(ctx, conn, 1, 0);
    if (status != SHS_OK)
        return status;
    struct ibv_sge *sge = &ctx->sge[0];
    struct ibv_send_wr *wr = &ctx->wr[0];
    sge->addr = (uintptr_t)ctx->scratch + local_off;
    sge->length = (uint32_t)len;
    sge->lkey = ctx->scratch_mr->lkey;
    wr->sg_list = sge;
    wr->num_sge = 1;
    wr->opcode = IBV_WR_RDMA_WRITE;
    wr->wr.rdma.remote_addr = sc->addr + remote_off;
    wr->wr.rdma.rkey = sc->rkey;
    fill_wr(ctx, conn, 0, len, true);
    return post_batch(ctx, conn, 1);
}

shs_status_t shs__post_scratch_word(shs_ctx_t *ctx, int peer, size_t local_off,
                                    size_t remote_off)
{
    return shs__post_scratch_write(ctx, peer, local_off, remote_off, 8);
}

/* Make the last work request posted on conn a signaled one, so that its
 * completion tells when everything before it is done: a zero-byte write into
 * the peer's scratch area. */
static shs_status_t post_fence(shs_ctx_t *ctx, shs__conn_t *conn)
{
    const shs__remote_t *sc = &ctx->scratch_remote[conn->peer->rank];
    shs_status_t status = reserve(ctx, conn, 1, 0);
    if (status != SHS_OK)
        return status;
    struct ibv_send_wr *wr = &ctx->wr[0];
    wr->sg_list = NULL;
    wr->num_sge = 0;
    wr->opcode = IBV_WR_RDMA_WRITE;
    wr->wr.rdma.remote_addr = sc->addr;
    wr->wr.rdma.rkey = sc->rkey;
    fill_wr(ctx, conn, 0, 0, true);
    return post_batch(ctx, conn, 1);
}

static shs_status_t flush_peer_post(shs_ctx_t *ctx, shs__peer_t *p)
{
    for (int q = 0; q < ctx->cfg.qps_per_peer; q++) {
        shs__conn_t *conn = &p->conns[q];
        if (conn->sq_done < conn->sq_posted && conn->sq_signaled < conn->sq_posted) {
            shs_status_t status = post_fence(ctx, conn);
            if (status != SHS_OK)
                return status;
        }
    }
    return SHS_OK;
}

static bool peer_drained(const shs_ctx_t *ctx, const shs__peer_t *p)
{
    for (int q = 0; q < ctx->cfg.qps_per_peer; q++)
        if (p->conns[q].sq_done < p->conns[q].sq_posted)
            return false;
    return true;
}

static uint64_t peer_done_sum(const shs_ctx_t *ctx, const shs__peer_t *p)
{
    uint64_t s = 0;
    for (int q = 0; q < ctx->cfg.qps_per_peer; q++)
        s += p->conns[q].sq_done;
    return s;
}

shs_status_t shs_flush(shs_ctx_t *ctx, int peer, int timeout_ms)
{
    if (ctx == NULL || timeout_ms == 0 || peer < SHS_PEER_ALL || peer >= ctx->size ||
        peer == ctx->rank)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_flush"))
        return SHS_ERR_BAD_STATE;
    if (timeout_ms < 0)
        timeout_ms = ctx->cfg.op_timeout_ms;
    int lo = peer == SHS_PEER_ALL ? 0 : peer;
    int hi = peer == SHS_PEER_ALL ? ctx->size - 1 : peer;

    for (int r = lo; r <= hi; r++)
        if (r != ctx->rank && !shs__peer_is_failed(&ctx->peers[r]))
            (void)flush_peer_post(ctx, &ctx->peers[r]); /* a failure shows below */

    /* the deadline bounds the time without progress, not the whole flush:
     * 64 MiB at emulated speed may take longer than the op timeout */
    uint64_t progress = 0;
    for (int r = lo; r <= hi; r++)
        if (r != ctx->rank)
            progress += peer_done_sum(ctx, &ctx->peers[r]);
    shs__waiter_t w;
    shs__ctx_waiter_init(&w, ctx, timeout_ms);
    for (;;) {
        bool busy = false;
        uint64_t now_progress = 0;
        for (int r = lo; r <= hi; r++) {
            if (r == ctx->rank)
                continue;
            shs__peer_t *p = &ctx->peers[r];
            now_progress += peer_done_sum(ctx, p);
            if (!shs__peer_is_failed(p) && !peer_drained(ctx, p))
                busy = true;
        }
        if (!busy)
            break;
        if (shs__poll(ctx) < 0)
            return SHS_ERR_DEVICE;
        if (now_progress != progress) {
            progress = now_progress;
            shs__waiter_progress(&w, true);
        } else if (shs__waiter_idle(&w)) {
            for (int r = lo; r <= hi; r++) {
                shs__peer_t *p = &ctx->peers[r];
                if (r != ctx->rank && !shs__peer_is_failed(p) && !peer_drained(ctx, p))
                    shs__peer_fail(p, SHS_ERR_TIMEOUT, "no completion for %d ms while "
                                   "flushing (SHS_OP_TIMEOUT_MS): peer dead or link down?",
                                   timeout_ms);
            }
            break;
        }
    }

    shs_status_t status = SHS_OK;
    for (int r = lo; r <= hi; r++) {
        shs__peer_t *p = &ctx->peers[r];
        if (r != ctx->rank && shs__peer_is_failed(p)) {
            shs_status_t st = peer_failed_status(p, true);
            if (status == SHS_OK)
                status = st;
        }
    }
    return status;
}

shs_status_t shs_flush_test(shs_ctx_t *ctx, int peer)
{
    if (ctx == NULL || peer < SHS_PEER_ALL || peer >= ctx->size || peer == ctx->rank)
        return SHS_ERR_INVALID_ARG;
    if (shs__ctx_refused(ctx, "shs_flush_test"))
        return SHS_ERR_BAD_STATE;
    int lo = peer == SHS_PEER_ALL ? 0 : peer;
    int hi = peer == SHS_PEER_ALL ? ctx->size - 1 : peer;
    /* the fence is posted once: afterwards the last request is signaled */
    for (int r = lo; r <= hi; r++)
        if (r != ctx->rank && !shs__peer_is_failed(&ctx->peers[r]))
            (void)flush_peer_post(ctx, &ctx->peers[r]); /* a failure shows below */
    if (shs__poll(ctx) < 0)
        return SHS_ERR_DEVICE;
    shs_status_t status = SHS_OK;
    for (int r = lo; r <= hi; r++) {
        shs__peer_t *p = &ctx->peers[r];
        if (r == ctx->rank)
            continue;
        if (shs__peer_is_failed(p)) {
            shs_status_t st = peer_failed_status(p, true);
            if (status == SHS_OK || status == SHS_ERR_TIMEOUT)
                status = st;
        } else if (!peer_drained(ctx, p) && status == SHS_OK) {
            status = SHS_ERR_TIMEOUT;
        }
    }
    return status;
}

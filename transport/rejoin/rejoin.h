/*
 * Private to transport/rejoin/: the requests a rejoiner makes of a living
 * rank's service and their wire encoding (big-endian), and what the parts
 * share.
 *
 *   serve.c    a living rank: its listeners' view, the requests answered
 *   join.c     the rejoiner: the connections, its regions, its first barrier
 *   install.c  a living rank's driving thread takes the rejoiner back
 */
#ifndef SHS_TRANSPORT_REJOIN_REJOIN_H
#define SHS_TRANSPORT_REJOIN_REJOIN_H

#include <arpa/inet.h>
#include <string.h>

#include "transport/transport.h"

#define OP_CONNECT 1u   /* the context's queue pairs */
#define OP_REGION 2u    /* one of the rejoiner's regions */
#define OP_ENDPOINT 3u  /* an endpoint's queue pairs (by creation order) */
#define OP_FIRST_BARRIER 4u /* the rejoiner's first barrier */
#define REMOTE_LEN 24u   /* u64 addr, u64 len, u32 rkey, u32 flags */
#define ENTRY_LEN 28u    /* u32 seq, remote */

typedef struct shs__reg_entry {
    uint32_t seq;
    shs__remote_t remote;
} shs__reg_entry_t;

/* ---- big-endian fields ---- */

static inline uint8_t *put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

static inline uint8_t *put64(uint8_t *p, uint64_t v)
{
    return put32(put32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

static inline uint32_t get32(const uint8_t **p)
{
    const uint8_t *q = *p;
    *p += 4;
    return ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3];
}

static inline uint64_t get64(const uint8_t **p)
{
    uint64_t hi = get32(p);
    return (hi << 32) | get32(p);
}

static inline uint8_t *put_remote(uint8_t *p, const shs__remote_t *r)
{
    return put32(put32(put64(put64(p, r->addr), r->len), r->rkey), r->flags);
}

static inline shs__remote_t get_remote(const uint8_t **p)
{
    shs__remote_t r;
    r.addr = get64(p);
    r.len = get64(p);
    r.rkey = get32(p);
    r.flags = get32(p);
    return r;
}

static inline shs__remote_t scratch_mine(const shs_ctx_t *ctx)
{
    shs__remote_t r = {.addr = (uintptr_t)ctx->scratch, .len = ctx->scratch_len,
                       .rkey = ctx->scratch_mr->rkey, .flags = SHS_ACCESS_REMOTE_WRITE};
    return r;
}

/* This rank's side of a connection: its record, each queue pair's number
 * and first PSN, its scratch key. */
static inline uint8_t *put_record(const shs_ctx_t *ctx, uint8_t *o, const shs__conn_t *conns)
{
    shs__oob_hdr_t mine;
    shs__oob_hdr_fill(ctx, &mine);
    memcpy(o, &mine, sizeof(mine));
    o += sizeof(mine);
    for (int q = 0; q < ctx->cfg.qps_per_peer; q++) {
        shs__oob_qp_t one = {htonl(conns[q].qp->qp_num), htonl(conns[q].psn)};
        memcpy(o, &one, sizeof(one));
        o += sizeof(one);
    }
    shs__remote_t sm = scratch_mine(ctx);
    return put_remote(o, &sm);
}

/* op, endpoint number, service address, message size, record */
static inline size_t connect_len(const shs_ctx_t *ctx)
{
    return 4 + 4 + SHS_BOOT_ADDR_LEN + 8 + sizeof(shs__oob_hdr_t) +
           (size_t)ctx->cfg.qps_per_peer * sizeof(shs__oob_qp_t) + REMOTE_LEN;
}

/* ---- the listeners' view of this context (any thread) ---- */


/* Destroy the queue pairs staged towards peer (install.c). */
void shs__rejoin_stage_destroy(shs__peer_t *peer, int qpp);

#endif

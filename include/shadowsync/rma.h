/*
 * shadowsync: one-sided operations (RDMA READ, WRITE, WRITE with immediate),
 * completion and notification.
 *
 * Model. Posting is non-blocking: shs_read/shs_write/shs_write_imm queue the
 * transfer on the connection to a peer and return. Any length is accepted;
 * the library splits it into work requests of at most the device's message
 * limit (and SHS_MAX_CHUNK; READs: SHS_READ_CHUNK). Many operations may be
 * outstanding; when the send queue is full, or a READ would put more than
 * SHS_READ_INFLIGHT bytes of READs in flight on one queue pair, posting
 * makes progress (polls completions) until there is room, bounded by the
 * context's op timeout. (READ responses have no flow control: the cap keeps
 * a slow link's queue, and what a retransmission must repeat, small.) Operations to one peer
 * complete in the order posted. shs_flush() waits until every operation
 * posted before it has completed: then a WRITE's data has been placed in the
 * peer's memory, a READ's data is in local memory, and the local buffers may
 * be reused.
 *
 * Notification. shs_write_imm() writes data and then delivers a 32-bit value
 * to the peer, which receives it with shs_poll_imm()/shs_wait_imm() after the
 * data is visible in its memory. Each peer connection has SHS_RQ_DEPTH
 * receive slots; a slot is given back when the application takes the value,
 * so an application that does not consume immediates slows its senders down
 * (receiver-not-ready retries) and, past SHS_QP_RNR_RETRY, fails the
 * connection. Keep fewer than SHS_RQ_DEPTH notifications unconsumed per peer
 * (credit-based protocols do that by construction).
 *
 * Errors. A failed completion marks the peer failed, with the reason logged
 * once (peer named, plus a hint); every later call naming that peer returns
 * SHS_ERR_PEER_FAILED at once. A wait that sees no progress for the op
 * timeout (SHS_OP_TIMEOUT_MS) marks the peer failed and returns
 * SHS_ERR_TIMEOUT: a dead peer never hangs the caller.
 *
 * Hot path: no allocation, no lock, no system call beyond what the verbs
 * provider does to post and poll.
 *
 * Threads: not thread-safe; the thread that drives the context calls these.
 */
#ifndef SHADOWSYNC_RMA_H
#define SHADOWSYNC_RMA_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/context.h>
#include <shadowsync/defs.h>
#include <shadowsync/region.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* peer argument of shs_flush and the immediate calls: every peer / any peer */
#define SHS_PEER_ALL (-1)
#define SHS_PEER_ANY (-1)

/* timeout_ms argument: use the context's op timeout (SHS_OP_TIMEOUT_MS) */
#define SHS_TIMEOUT_DEFAULT (-1)

/* Operation flags. */
enum {
    /* Ask for a completion for this operation's last work request, so that a
     * shs_flush() that follows needs no extra work request. Use it on the last
     * operation before a flush when latency matters; without it the library
     * signals one work request in SHS_SIGNAL_EVERY. */
    SHS_OP_SIGNAL = 1u << 0
};

/*
 * shs_write - copy len bytes from local at local_off to peer's copy of
 * remote at remote_off. remote must grant SHS_ACCESS_REMOTE_WRITE.
 * len 0 is a no-op. The local bytes must not change until a shs_flush()
 * covering this operation returns.
 *
 * Status: SHS_OK (posted); SHS_ERR_OUT_OF_BOUNDS (a range outside its
 * region, checked locally before posting); SHS_ERR_INVALID_ARG (NULL, peer
 * out of range or self, regions of another context, missing access flag);
 * SHS_ERR_PEER_FAILED (peer failed before or while waiting for room);
 * SHS_ERR_TIMEOUT (no room in the send queue within the op timeout).
 */
SHS_API shs_status_t shs_write(shs_ctx_t *ctx, int peer, shs_region_t *local,
                               size_t local_off, shs_region_t *remote,
                               size_t remote_off, size_t len, unsigned flags);

/*
 * shs_read - copy len bytes from peer's copy of remote at remote_off into
 * local at local_off. remote must grant SHS_ACCESS_REMOTE_READ, local
 * SHS_ACCESS_LOCAL_WRITE (or REMOTE_WRITE). The data is in local memory once
 * a shs_flush() covering this operation returns. Status: as shs_write.
 */
SHS_API shs_status_t shs_read(shs_ctx_t *ctx, int peer, shs_region_t *local,
                              size_t local_off, shs_region_t *remote,
                              size_t remote_off, size_t len, unsigned flags);

/* One READ of a list: len bytes from remote_off of the peer's copy to
 * local_off. */
typedef struct shs_rma_iov {
    size_t local_off;
    size_t remote_off;
    size_t len;
} shs_rma_iov_t;

/*
 * shs_read_list - the n READs of iov, as n shs_read calls would do them,
 * but posted as chains of work requests on one queue pair: one post (one
 * doorbell) per up to 16 READs, where n shs_read calls ring n. flags apply
 * to the last READ. Every range is checked before anything is posted.
 * Status: as shs_read (SHS_ERR_INVALID_ARG also for iov NULL with n > 0);
 * on an error while posting, the READs before it may have been posted.
 */
SHS_API shs_status_t shs_read_list(shs_ctx_t *ctx, int peer, shs_region_t *local,
                                   shs_region_t *remote, const shs_rma_iov_t *iov, size_t n,
                                   unsigned flags);

/*
 * shs_write_imm - as shs_write, then deliver imm to peer (shs_wait_imm on
 * the peer returns it once all len bytes are visible there). len may be 0
 * (a pure notification; the regions must still be valid handles).
 * Status: as shs_write.
 */
SHS_API shs_status_t shs_write_imm(shs_ctx_t *ctx, int peer, shs_region_t *local,
                                   size_t local_off, shs_region_t *remote,
                                   size_t remote_off, size_t len, uint32_t imm,
                                   unsigned flags);

/*
 * shs_cas - atomic compare-and-swap of the 8-byte word at remote_off of
 * peer's copy of remote: if it equals `compare` it becomes `swap`; either
 * way the word's value before the operation is written to local at
 * local_off (8 bytes, host byte order) once a shs_flush() covering this
 * operation returns. Both offsets must be multiples of 8; remote must grant
 * SHS_ACCESS_REMOTE_ATOMIC, local SHS_ACCESS_LOCAL_WRITE. Atomic with respect
 * to every other shs_cas on that word (from any peer), not with the owner's
 * own stores (it may load the word). Status: as shs_read;
 * SHS_ERR_INVALID_ARG also for a misaligned offset.
 */
SHS_API shs_status_t shs_cas(shs_ctx_t *ctx, int peer, shs_region_t *local, size_t local_off,
                             shs_region_t *remote, size_t remote_off, uint64_t compare,
                             uint64_t swap, unsigned flags);

/*
 * shs_flush - wait until every operation posted to peer (or SHS_PEER_ALL)
 * before this call has completed. timeout_ms bounds the time without
 * progress (SHS_TIMEOUT_DEFAULT: the op timeout; 0 is not allowed).
 *
 * Status: SHS_OK; SHS_ERR_PEER_FAILED (with SHS_PEER_ALL: some peer failed;
 * the others were still flushed); SHS_ERR_REMOTE_ACCESS / SHS_ERR_TRANSPORT
 * for the completion error that failed the peer, returned once, by the first
 * flush that sees it; SHS_ERR_TIMEOUT (the peer is then marked failed);
 * SHS_ERR_INVALID_ARG.
 */
SHS_API shs_status_t shs_flush(shs_ctx_t *ctx, int peer, int timeout_ms);

/*
 * shs_flush_test - shs_flush without waiting: SHS_OK when every operation
 * posted to peer (or SHS_PEER_ALL) so far has completed, SHS_ERR_TIMEOUT
 * while some are still outstanding (not a failure: nothing is marked, and
 * there is no deadline; the caller bounds its own wait). Polls the
 * completion queue once, and posts the signaled zero-byte fence a flush
 * would when the last request is unsignaled, so that repeated calls see
 * completion. Lets a caller wait for its writes with its own idle policy
 * (the collectives sleep between polls). Other status: as shs_flush.
 */
SHS_API shs_status_t shs_flush_test(shs_ctx_t *ctx, int peer);

/*
 * shs_progress - poll the completion queue once without blocking and
 * process what is there (marks failures, frees send-queue room, queues
 * received immediates). Optional: every waiting call progresses by itself.
 * Status: SHS_OK; SHS_ERR_DEVICE if the device failed; SHS_ERR_INVALID_ARG.
 */
SHS_API shs_status_t shs_progress(shs_ctx_t *ctx);

/*
 * shs_poll_imm - take one received immediate from peer (or SHS_PEER_ANY)
 * without blocking. On SHS_OK, *peer_p (may be NULL) receives the sender and
 * *imm_p the value. Immediates from one peer come in the order sent.
 *
 * Status: SHS_OK; SHS_ERR_TIMEOUT when none is pending (not an error: a
 * zero-length wait); SHS_ERR_PEER_FAILED when the named peer failed (for
 * SHS_PEER_ANY: every peer failed) and nothing is pending from it;
 * SHS_ERR_INVALID_ARG.
 */
SHS_API shs_status_t shs_poll_imm(shs_ctx_t *ctx, int peer, int *peer_p,
                                  uint32_t *imm_p);

/*
 * shs_wait_imm - as shs_poll_imm, waiting up to timeout_ms (SHS_TIMEOUT_DEFAULT:
 * the op timeout). Unlike shs_flush, a timeout here does not fail the peer
 * (a quiet peer is not a dead one). Status: as shs_poll_imm.
 */
SHS_API shs_status_t shs_wait_imm(shs_ctx_t *ctx, int peer, int *peer_p,
                                  uint32_t *imm_p, int timeout_ms);

/*
 * shs_poll_imm_match / shs_wait_imm_match - as shs_poll_imm / shs_wait_imm,
 * but take only an immediate whose value has (value & mask) == match: the
 * oldest such one from peer (or, with SHS_PEER_ANY, from any peer). The
 * immediates that do not match stay queued, in their order, for the calls
 * that want them. This lets independent users of one context share a peer's
 * notifications by reserving bits of the value as a channel: the top 8 bits,
 * a channel taken from shs_ctx_channel_alloc (context.h), as the
 * collectives and shadow engines take theirs; unconsumed immediates of every channel
 * count against the SHS_RQ_DEPTH receives of the peer. mask 0 (match 0)
 * takes any immediate, like shs_poll_imm / shs_wait_imm.
 *
 * Status: as shs_poll_imm / shs_wait_imm; SHS_ERR_INVALID_ARG also when
 * match has bits outside mask. Cost: a scan of the peer's pending immediates.
 */
SHS_API shs_status_t shs_poll_imm_match(shs_ctx_t *ctx, int peer, uint32_t mask,
                                        uint32_t match, int *peer_p, uint32_t *imm_p);
SHS_API shs_status_t shs_wait_imm_match(shs_ctx_t *ctx, int peer, uint32_t mask,
                                        uint32_t match, int *peer_p, uint32_t *imm_p,
                                        int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_RMA_H */

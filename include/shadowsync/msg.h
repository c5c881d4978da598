/*
 * shadowsync: two-sided messages (SEND / RECEIVE).
 *
 * Model. With SHS_MSG_SIZE (or shs_ctx_params_t.msg_size) > 0, every queue
 * pair of the context keeps SHS_RQ_DEPTH receive buffers of msg_size bytes
 * posted, in memory the library registers at shs_ctx_create(); every rank
 * must use the same msg_size. shs_send() copies up to msg_size bytes of a
 * region to a peer; the peer takes the message with shs_recv(), reads it in
 * place (no copy), and gives the buffer back with shs_recv_release(), which
 * posts it again. Messages from one peer over one queue pair arrive in the
 * order sent (with SHS_QPS_PER_PEER > 1 successive messages may take
 * different queue pairs and overtake each other).
 *
 * Flow control. Receive buffers are shared with write-with-immediate
 * notifications (rma.h): a peer has SHS_RQ_DEPTH receives per queue pair for
 * both together. Messages held by the application and immediates not yet
 * taken use them up; a sender that finds none posted is retried by the
 * device (receiver not ready, SHS_QP_RNR_RETRY) and finally fails the
 * connection. Release messages promptly; credit-based protocols keep fewer
 * than SHS_RQ_DEPTH messages in flight per peer by construction.
 *
 * Errors and threads: as rma.h (a failed completion fails the peer; every
 * wait is bounded; one thread drives the context).
 */
#ifndef SHADOWSYNC_MSG_H
#define SHADOWSYNC_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/context.h>
#include <shadowsync/defs.h>
#include <shadowsync/region.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A received message: valid from shs_recv() until shs_recv_release(). */
typedef struct shs_msg {
    int peer;           /* the sender */
    const void *data;   /* the message, in a library receive buffer */
    size_t len;         /* its length, <= msg_size */
    uint64_t handle;    /* private: which buffer to give back */
} shs_msg_t;

/*
 * shs_send - send len bytes of local at local_off to peer as one message.
 * Non-blocking like shs_write (rma.h): the bytes must not change until a
 * shs_flush() covering the send returns; SHS_OP_SIGNAL as for shs_write.
 * len may be 0.
 *
 * Status: SHS_OK (posted); SHS_ERR_UNSUPPORTED (msg_size is 0);
 * SHS_ERR_INVALID_ARG (NULL, a region of another context, peer out of range
 * or self, len > msg_size); SHS_ERR_OUT_OF_BOUNDS; SHS_ERR_PEER_FAILED;
 * SHS_ERR_TIMEOUT (no room in the send queue within the op timeout).
 */
SHS_API shs_status_t shs_send(shs_ctx_t *ctx, int peer, shs_region_t *local,
                              size_t local_off, size_t len, unsigned flags);

/*
 * shs_recv - take the oldest received message from peer (or SHS_PEER_ANY,
 * taking peers in turn), waiting up to timeout_ms (0: look once;
 * SHS_TIMEOUT_DEFAULT: the op timeout). On SHS_OK *msg_p describes it; the
 * caller must pass it to shs_recv_release() when done.
 *
 * Status: SHS_OK; SHS_ERR_TIMEOUT (nothing arrived; the peer is not failed
 * for it); SHS_ERR_PEER_FAILED (the peer, or with SHS_PEER_ANY every peer,
 * failed and nothing is pending from it); SHS_ERR_UNSUPPORTED (msg_size 0);
 * SHS_ERR_INVALID_ARG; SHS_ERR_DEVICE.
 */
SHS_API shs_status_t shs_recv(shs_ctx_t *ctx, int peer, shs_msg_t *msg_p, int timeout_ms);

/*
 * shs_recv_release - give a message's buffer back; msg->data is invalid
 * afterwards. Messages may be released in any order.
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (not a message of ctx, or released
 * twice); SHS_ERR_PEER_FAILED (the buffer could not be posted again: the
 * connection failed).
 */
SHS_API shs_status_t shs_recv_release(shs_ctx_t *ctx, const shs_msg_t *msg);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_MSG_H */

/*
 * Internal bootstrap: a small TCP rendezvous used to exchange connection data.
 * Rank 0 listens on the SHS_BOOTSTRAP address (host:port); the others connect
 * with retries until the bootstrap deadline. Collectives go through rank 0
 * (star). Every call is bounded by cfg->bootstrap_timeout_ms; a peer that
 * disappears gives SHS_ERR_PEER_FAILED naming the rank. Not thread-safe: one
 * thread uses a shs__boot_t at a time.
 *
 * Authentication (protocol version 2). The job token (SHS_JOB_TOKEN) is a
 * shared secret and never travels: a joining rank and rank 0 each prove that
 * they hold it with an HMAC-SHA256 (keyed by the token) over a transcript that
 * carries a fresh random nonce from each side, the joiner first:
 *
 *   joiner -> rank 0   HELLO      rank, size, nonce_j
 *   rank 0 -> joiner   CHALLENGE  nonce_r
 *   joiner -> rank 0   AUTH       HMAC(token, "join"    | T)
 *   rank 0 -> joiner   ACCEPT     HMAC(token, "root"    | T)
 *   T = "shadowsync-boot" | version | rank | size | nonce_j | nonce_r
 *
 * Rank 0 answers a stranger's hello with a challenge only; it proves itself
 * (ACCEPT) only to a joiner that has proved itself, and checks rank, size and
 * duplicates only then, so an unauthenticated connection learns nothing about
 * the job. A recorded handshake does not verify against a new nonce_r. After
 * ACCEPT both sides derive a session key HMAC(token, "session" | T), and every
 * later frame in either direction (welcome, collectives with addresses and
 * rkeys, errors) carries a 32-byte HMAC over direction, a sequence number,
 * header and payload: injected, altered, replayed or reordered frames are
 * refused. Frames are authenticated, not encrypted.
 *
 * Rank 0 runs every pending handshake at once (poll over the listening socket,
 * the pending connections and the admitted ranks), each with its own deadline
 * (cfg->bootstrap_handshake_ms): a stranger that sends garbage, a wrong proof,
 * or nothing at all is refused, logged and closed without delaying the others.
 * Every message is length-prefixed, versioned and validated before use.
 * Mismatches are refused on both sides with a clear error
 * (SHS_ERR_TOKEN_MISMATCH, SHS_ERR_VERSION_MISMATCH, SHS_ERR_SIZE_MISMATCH,
 * SHS_ERR_CONFIG for a rank out of range or taken twice).
 */
#ifndef SHS_RUNTIME_BOOTSTRAP_H
#define SHS_RUNTIME_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

#include "runtime/config.h"

#define SHS_BOOT_PROTOCOL_VERSION 2
#define SHS_BOOT_MAX_MSG (16u << 20) /* largest payload accepted */

typedef struct shs__boot shs__boot_t;

shs_status_t shs__boot_create(const shs__config_t *cfg, shs__boot_t **boot_p);
void shs__boot_destroy(shs__boot_t *boot);

int shs__boot_rank(const shs__boot_t *boot);
int shs__boot_size(const shs__boot_t *boot);

/* Every rank contributes len bytes; out (size * len bytes) receives them in
 * rank order. Ranks passing different len get SHS_ERR_SIZE_MISMATCH. */
shs_status_t shs__boot_allgather(shs__boot_t *boot, const void *in, size_t len,
                                 void *out);
/* root's len bytes are copied into buf on every rank. */
shs_status_t shs__boot_bcast(shs__boot_t *boot, void *buf, size_t len, int root);
shs_status_t shs__boot_barrier(shs__boot_t *boot);

/* ---- after start-up: rejoiners (serve.c, join.c) ----
 *
 * A rank whose process died and was started again (SHS_REJOIN=1) asks the
 * SHS_BOOTSTRAP addresses in order (shs__boot_create). The rank listed at
 * entry r listens at that address while it is the rendezvous: the lowest
 * living rank with an address, which every rank computes the same way from
 * its view of who failed, so when rank 0 dies rank 1 takes over (if it has
 * an address). The rendezvous refuses a rank it counts alive, else answers
 * with the directory: every rank's service address and whether it counts
 * it alive. The rejoiner then asks each living rank's service (a listener
 * on an ephemeral port that every rank of a job with several SHS_BOOTSTRAP
 * entries keeps) to connect it: requests that the transport answers
 * (ops.request). Every connection runs the start-up handshake (token
 * proof, then rank and size), carries one request and one reply, and
 * closes. The listeners run on a thread of their own, so a job busy
 * training answers at once. */
#define SHS_BOOT_ADDR_LEN 64u /* "host:port" of a service, NUL-padded */

typedef struct shs__boot_serve shs__boot_serve_t;

typedef struct shs__boot_serve_ops {
    /* whether this rank is the rendezvous now (any thread) */
    bool (*is_rendezvous)(void *arg);
    /* whether this rank counts `rank` alive (any thread) */
    bool (*is_alive)(void *arg, int rank);
    /* an authenticated rejoiner of `rank` asks req (len bytes): SHS_OK and
     * the reply in reply (capacity *reply_len, set to its length), or a
     * refusal's status and why (NUL-terminated) */
    shs_status_t (*request)(void *arg, int rank, const void *req, size_t len, void *reply,
                            size_t *reply_len, char *why, size_t why_len);
    void *arg;
} shs__boot_serve_ops_t;

/* SHS_OK without a thread (*serve_p NULL) when SHS_BOOTSTRAP has fewer than
 * two entries: the job did not ask for rejoins. */
shs_status_t shs__boot_serve_start(shs__boot_t *boot, const shs__boot_serve_ops_t *ops,
                                   shs__boot_serve_t **serve_p);
/* Stop the thread and close the listeners (NULL is ignored). */
void shs__boot_serve_stop(shs__boot_serve_t *serve);
/* This rank's service address, as the other ranks reach it. */
const char *shs__boot_serve_addr(const shs__boot_serve_t *serve);
/* The directory the rendezvous hands out: rank's service address (at
 * start-up for every rank, later for a rank that rejoined). */
void shs__boot_serve_set_addr(shs__boot_serve_t *serve, int rank, const char *addr);

/* A rejoined rank (shs__boot_create with cfg->rejoin): rank's service
 * address and whether the rendezvous counted it alive. */
const char *shs__boot_dir_addr(const shs__boot_t *boot, int rank);
bool shs__boot_dir_alive(const shs__boot_t *boot, int rank);
/* One request to the service at addr: connect, handshake, send req (len
 * bytes), receive the reply (*reply_p, malloc'ed, *reply_len_p bytes; the
 * caller frees it). Bounded by SHS_BOOTSTRAP_TIMEOUT_MS; the service's
 * refusal is returned (SHS_ERR_BAD_STATE: ask again later). */
shs_status_t shs__boot_request(shs__boot_t *boot, const char *addr, const void *req,
                               size_t len, void **reply_p, size_t *reply_len_p);

/* ---- wire encoding, exposed for unit tests ---- */
/* A frame: u32 magic, u16 version, u16 type, u32 length, payload. Big-endian. */
#define SHS_BOOT_MAGIC 0x53485342u /* "SHSB" */
#define SHS_BOOT_HDR_LEN 12u

typedef struct shs__boot_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t length;
} shs__boot_hdr_t;

void shs__boot_hdr_encode(const shs__boot_hdr_t *hdr, uint8_t out[SHS_BOOT_HDR_LEN]);
/* SHS_ERR_PROTOCOL for a bad magic or a length above max_len,
 * SHS_ERR_VERSION_MISMATCH for another version. */
shs_status_t shs__boot_hdr_decode(const uint8_t *in, size_t in_len, uint32_t max_len,
                                  shs__boot_hdr_t *hdr_p);


/* Frame types. */
enum shs__boot_frame_type {
    SHS_BOOT_FT_HELLO = 1,     /* joiner -> rank 0: rank, size, nonce */
    SHS_BOOT_FT_WELCOME = 2,   /* rank 0 -> joiner: every rank has joined */
    SHS_BOOT_FT_ERROR = 3,     /* rank 0 -> joiner: status, culprit rank, text */
    SHS_BOOT_FT_ALLGATHER = 4, /* contributions: u64 len, u32 root, data */
    SHS_BOOT_FT_BCAST = 5,
    SHS_BOOT_FT_BARRIER = 6,
    SHS_BOOT_FT_REPLY = 7,     /* rank 0 -> joiner: result of a collective */
    SHS_BOOT_FT_CHALLENGE = 8, /* rank 0 -> joiner: nonce */
    SHS_BOOT_FT_AUTH = 9,      /* joiner -> rank 0: proof */
    SHS_BOOT_FT_ACCEPT = 10,   /* rank 0 -> joiner: proof */
    SHS_BOOT_FT_REQUEST = 11   /* rejoiner -> a living rank: u32 kind, data */
};

/* Kinds of request (after the handshake, rejoiners only). */
enum shs__boot_request_kind {
    SHS_BOOT_REQ_DIRECTORY = 1, /* reply: size x SHS_BOOT_ADDR_LEN addresses, size alive bytes */
    SHS_BOOT_REQ_TRANSPORT = 2  /* opaque to the bootstrap: ops.request answers */
};

#define SHS_BOOT_NONCE_LEN 32u
#define SHS_BOOT_PROOF_LEN 32u                        /* HMAC-SHA256 */
#define SHS_BOOT_HELLO_LEN (8u + SHS_BOOT_NONCE_LEN)  /* u32 rank, u32 size, nonce */
#define SHS_BOOT_ERROR_FIXED 8u                       /* i32 status, i32 culprit */
#define SHS_BOOT_ERROR_TEXT_MAX 256u
#define SHS_BOOT_CONTRIB_FIXED 12u                    /* u64 len, u32 root */
#define SHS_BOOT_FRAME_MAC_LEN 32u                    /* trailer after ACCEPT */

typedef struct shs__boot_hello {
    uint32_t rank;
    uint32_t size;
    uint8_t nonce[SHS_BOOT_NONCE_LEN];
} shs__boot_hello_t;

void shs__boot_hello_encode(const shs__boot_hello_t *hello, uint8_t out[SHS_BOOT_HELLO_LEN]);
/* SHS_ERR_PROTOCOL unless len is exactly SHS_BOOT_HELLO_LEN. */
shs_status_t shs__boot_hello_decode(const uint8_t *in, size_t len, shs__boot_hello_t *hello_p);

typedef struct shs__boot_error {
    int32_t status;  /* always an error status (negative, >= -99) */
    int32_t culprit; /* rank at fault, -1 when none */
    char text[SHS_BOOT_ERROR_TEXT_MAX + 1]; /* printable, NUL-terminated */
} shs__boot_error_t;

/* SHS_ERR_PROTOCOL for a short or long payload or a status that is not an
 * error; unprintable bytes of the text become '?'. */
shs_status_t shs__boot_error_decode(const uint8_t *in, size_t len, shs__boot_error_t *err_p);

typedef struct shs__boot_contrib {
    uint64_t len;  /* per-rank length of the collective */
    uint32_t root; /* bcast root, else 0 */
} shs__boot_contrib_t;

/* SHS_ERR_PROTOCOL when fewer than SHS_BOOT_CONTRIB_FIXED bytes. */
shs_status_t shs__boot_contrib_decode(const uint8_t *in, size_t len, shs__boot_contrib_t *c_p);

typedef enum shs__boot_proof_kind {
    SHS_BOOT_PROOF_JOIN = 0,   /* the joiner's AUTH */
    SHS_BOOT_PROOF_ROOT = 1,   /* rank 0's ACCEPT */
    SHS_BOOT_PROOF_SESSION = 2 /* the key of the frame MACs */
} shs__boot_proof_kind_t;

/* HMAC(token, label(kind) | T) for the handshake of hello and nonce_root. */
shs_status_t shs__boot_proof(const char *token, shs__boot_proof_kind_t kind,
                             const shs__boot_hello_t *hello,
                             const uint8_t nonce_root[SHS_BOOT_NONCE_LEN],
                             uint8_t out[SHS_BOOT_PROOF_LEN]);

#endif

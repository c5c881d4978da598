/*
 * Private to runtime/boot/: the bootstrap object, one end of a framed
 * connection (link), and what the parts share. runtime/bootstrap.h is the
 * interface the transport uses.
 *
 *   codec.c  the wire encoding (fuzzed: tests/fuzz/fuzz_boot_frame.c)
 *   link.c   frames on a socket, every wait bounded, MAC'd once authenticated
 *   admit.c  rank 0: listen, run the handshakes, admit every rank
 *   join.c   the other ranks: connect, prove the token, check rank 0's proof
 *   coll.c   allgather, bcast and barrier: a star through rank 0
 *   boot.c   create and destroy
 */
#ifndef SHS_RUNTIME_BOOT_BOOT_H
#define SHS_RUNTIME_BOOT_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/bootstrap.h"
#include "runtime/clock.h"
#include "runtime/crypto.h"

#define FT_HELLO SHS_BOOT_FT_HELLO
#define FT_WELCOME SHS_BOOT_FT_WELCOME
#define FT_ERROR SHS_BOOT_FT_ERROR
#define FT_ALLGATHER SHS_BOOT_FT_ALLGATHER
#define FT_BCAST SHS_BOOT_FT_BCAST
#define FT_BARRIER SHS_BOOT_FT_BARRIER
#define FT_REPLY SHS_BOOT_FT_REPLY
#define FT_CHALLENGE SHS_BOOT_FT_CHALLENGE
#define FT_AUTH SHS_BOOT_FT_AUTH
#define FT_ACCEPT SHS_BOOT_FT_ACCEPT

#define CONTRIB_FIXED SHS_BOOT_CONTRIB_FIXED
#define ERROR_FIXED SHS_BOOT_ERROR_FIXED
#define ERROR_TEXT_MAX SHS_BOOT_ERROR_TEXT_MAX
#define MAC_LEN SHS_BOOT_FRAME_MAC_LEN

/* One end of a bootstrap connection. Before ACCEPT frames are plain; after
 * it (authed) each carries a MAC under the session key with a sequence
 * number per direction. */
typedef struct link {
    int fd;
    bool authed;
    uint8_t tx_dir, rx_dir;
    uint64_t tx_seq, rx_seq;
    uint8_t key[SHS_MAC_LEN];
    shs__mac_t rx;  /* MAC of the frame being received */
    char from[272]; /* the peer's address (host:port), for logs */
} link_t;

struct shs__boot {
    int rank;
    int size;
    int timeout_ms;
    int handshake_ms;
    link_t root;   /* non-root: the connection to rank 0 */
    link_t *peer;  /* rank 0: peer[r] for 1 <= r < size */
    shs_status_t poisoned;
    char token[sizeof(((shs__config_t *)0)->job_token)];
};

/* ---- big-endian fields (codec.c and the frames built in place) ---- */

static inline void shs__put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void shs__put_u32(uint8_t *p, uint32_t v)
{
    shs__put_u16(p, (uint16_t)(v >> 16));
    shs__put_u16(p + 2, (uint16_t)v);
}

static inline void shs__put_u64(uint8_t *p, uint64_t v)
{
    shs__put_u32(p, (uint32_t)(v >> 32));
    shs__put_u32(p + 4, (uint32_t)v);
}

static inline uint16_t shs__get_u16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t shs__get_u32(const uint8_t *p)
{
    return ((uint32_t)shs__get_u16(p) << 16) | shs__get_u16(p + 2);
}

static inline uint64_t shs__get_u64(const uint8_t *p)
{
    return ((uint64_t)shs__get_u32(p) << 32) | shs__get_u32(p + 4);
}

/* ---- link.c ---- */

/* root_side: this end is rank 0's (it picks the MAC direction bytes). */
void shs__boot_link_init(link_t *l, int fd, bool root_side);
/* Close the socket, forget the session key. */
void shs__boot_link_close(link_t *l);
/* Non-blocking, no Nagle. -1 with errno on failure. */
int shs__boot_socket_options(int fd);

/* One frame: header, the fixed part (at most a hello's worth), then data,
 * and the MAC when the link is authenticated. peer names the other end in
 * errors (-1: not yet authenticated), what the operation. */
shs_status_t shs__boot_send(link_t *l, uint16_t type, const void *fixed, size_t fixed_len,
                            const void *data, size_t data_len, shs__deadline_t dl, int peer,
                            const char *what);

/* Receiving a frame: recv_hdr, then recv_body/recv_discard for exactly the
 * payload, then recv_end, which checks the MAC on an authenticated link.
 * Nothing received may be trusted before recv_end returns SHS_OK. */
shs_status_t shs__boot_recv_hdr(link_t *l, shs__boot_hdr_t *hdr, shs__deadline_t dl, int peer,
                                const char *what);
shs_status_t shs__boot_recv_body(link_t *l, void *buf, size_t len, shs__deadline_t dl,
                                 int peer, const char *what);
shs_status_t shs__boot_recv_discard(link_t *l, size_t len, shs__deadline_t dl, int peer,
                                    const char *what);
shs_status_t shs__boot_recv_end(link_t *l, shs__deadline_t dl, int peer, const char *what);

/* The joiner's side of an error frame whose header is h: log what rank 0
 * said, return its status. */
shs_status_t shs__boot_recv_error(link_t *l, const shs__boot_hdr_t *h, shs__deadline_t dl,
                                  const char *what);
/* Best effort and never blocking (see link.c). */
void shs__boot_send_error_nowait(link_t *l, shs_status_t st, int culprit, const char *text);
/* Rank 0 tells every other rank but culprit why the job stops, then poisons
 * the object. Returns st. */
shs_status_t shs__boot_fail_all(shs__boot_t *b, shs_status_t st, int culprit,
                                const char *text);

/* ---- admit.c (rank 0) ---- */

/* Listen on the wildcard address of host's family. */
shs_status_t shs__boot_listen(const char *host, const char *port, int *fd_p);
/* Admit ranks 1..size-1 on lfd until all are in (then welcome them) or dl. */
shs_status_t shs__boot_rendezvous(shs__boot_t *b, int lfd, shs__deadline_t dl);

/* ---- join.c (the other ranks) ---- */

/* Load the crypto provider and seed the random generator before any
 * handshake deadline starts counting. */
shs_status_t shs__boot_warm_up(const char *token);
/* Connect to rank 0 at host:port (retrying until dl) and complete the
 * handshake up to the welcome. */
shs_status_t shs__boot_join(shs__boot_t *b, const char *host, const char *port,
                            shs__deadline_t dl);

#endif

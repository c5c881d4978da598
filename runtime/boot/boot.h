/*
 * Private to runtime/boot/: the bootstrap object, one end of a framed
 * connection (link), and what the parts share. runtime/bootstrap.h is the
 * interface the transport uses.
 *
 *   codec.c  the wire encoding (fuzzed: tests/fuzz/fuzz_boot_frame.c)
 *   link.c   frames on a socket, every wait bounded, MAC'd once authenticated
 *   handshake.c  the listening side of the handshake (rank 0, rendezvous)
 *   admit.c  rank 0: listen, run the handshakes, admit every rank
 *   serve.c  after start-up: the rendezvous for ranks that rejoin
 *   join.c   the other ranks: connect, prove the token, check rank 0's proof
 *   coll.c   allgather, bcast and barrier: a star through rank 0
 *   boot.c   create and destroy
 */
#ifndef SHS_RUNTIME_BOOT_BOOT_H
#define SHS_RUNTIME_BOOT_BOOT_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

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
#define FT_REQUEST SHS_BOOT_FT_REQUEST

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
    char addrs[sizeof(((shs__config_t *)0)->bootstrap)]; /* SHS_BOOTSTRAP, every entry */
    /* a rejoined rank: the directory the rendezvous gave (size x
     * SHS_BOOT_ADDR_LEN, then size alive bytes), and the address this
     * process reached it from */
    uint8_t *dir;
    struct sockaddr_storage local;
    bool has_local;
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
/* One TCP connect to host:port within dl (socket options set): the
 * descriptor, or -1 with *err_p the errno (ETIMEDOUT at the deadline). */
int shs__boot_connect_once(const char *host, const char *port, shs__deadline_t dl, int *err_p);

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

/* ---- handshake.c: the listening side (rank 0, the rendezvous) ---- */

typedef enum hs_state {
    HS_HELLO, /* waiting for the hello */
    HS_AUTH   /* challenge sent, waiting for the proof */
} hs_state_t;

/* A connection whose handshake is in progress. Everything it sends is
 * buffered here until a whole frame is in, so a slow or silent peer never
 * blocks the listener. */
typedef struct hs_pending {
    int fd;
    hs_state_t state;
    shs__deadline_t dl;
    uint64_t since_ns;
    size_t in_len;
    uint8_t in[SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN];
    shs__boot_hello_t hello;
    uint8_t nonce[SHS_BOOT_NONCE_LEN];
    char from[64];
} hs_pending_t;

typedef struct hs_refusal {
    shs_status_t st;
    char what[240];
} hs_refusal_t;

typedef struct hs_set hs_set_t;
/* A peer proved the token and its size and rank are in range: SHS_OK and
 * *link_p (where its connection goes) to admit it, or refuse it
 * (shs__hs_refuse) and return that status. */
typedef shs_status_t (*shs__hs_decide_fn)(hs_set_t *set, hs_pending_t *pc, link_t **link_p);
/* Called once the peer has rank 0's (the listener's) proof and l is
 * authenticated; NULL to keep the link as it is. */
typedef void (*shs__hs_admitted_fn)(hs_set_t *set, link_t *l, const hs_pending_t *pc);

struct hs_set {
    shs__boot_t *b;          /* the token, size and handshake deadline */
    const char *who;         /* "rank 0", "the rendezvous (rank 2)": for refusals */
    shs__hs_decide_fn decide;
    shs__hs_admitted_fn admitted;
    void *arg;               /* the decider's */
    size_t cap;              /* handshakes at once; the oldest goes beyond */
    hs_pending_t *pend;
    size_t npend;
    hs_refusal_t ref;        /* the first refusal, to explain a timeout */
};

shs_status_t shs__hs_init(hs_set_t *set, shs__boot_t *b, size_t cap, const char *who,
                          shs__hs_decide_fn decide, void *arg);
void shs__hs_fini(hs_set_t *set);
/* Log why, tell the peer (best effort), remember the first refusal. The
 * caller closes the connection. */
void shs__hs_refuse(hs_set_t *set, hs_pending_t *pc, shs_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void shs__hs_refuse_all(hs_set_t *set, shs_status_t st, const char *why);
/* Take every connection waiting on the listening socket lfd. */
void shs__hs_accept(hs_set_t *set, int lfd);
/* Refuse and close the handshakes past their own deadline. */
void shs__hs_expire(hs_set_t *set);
/* The pending connections into pfd (one entry each; returns how many), and
 * *left_ms lowered to wake just after the first handshake deadline. */
size_t shs__hs_pollset(hs_set_t *set, struct pollfd *pfd, int *left_ms);
/* Act on what poll reported for the first npolled pending connections (as
 * shs__hs_pollset put them); returns how many were admitted. */
int shs__hs_serve(hs_set_t *set, const struct pollfd *pfd, size_t npolled);

/* The address this rank reaches the bootstrap from (its link to rank 0, or
 * rank 0's to a peer, or a rejoiner's to the rendezvous). */
shs_status_t shs__boot_local_addr(const shs__boot_t *b, struct sockaddr_storage *ss);

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
/* A restarted rank: ask the SHS_BOOTSTRAP addresses in order, again and
 * again until dl, for the running job's rendezvous and return its verdict
 * (SHS_ERR_BAD_STATE when the job still counts this rank alive at dl,
 * SHS_ERR_TIMEOUT when no address answered). */
shs_status_t shs__boot_rejoin(shs__boot_t *b, shs__deadline_t dl);


#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/bootstrap.h"
#include "runtime/clock.h"
#include "runtime/crypto.h"
#include "runtime/log.h"

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

/* Connect retries start fast (rank 0 is usually up within milliseconds on a
 * single host) and back off to 1 s so hundreds of ranks waiting on a slow
 * rank 0 do not flood it with SYNs. */
#define CONNECT_BACKOFF_FIRST_MS 10
#define CONNECT_BACKOFF_MAX_MS 1000

/* Handshakes in progress at once on rank 0, beyond one per missing rank.
 * Each costs one descriptor and ~150 bytes; when they are all taken the oldest
 * unauthenticated connection is dropped, so a flood of strangers cannot lock
 * a rank out for longer than it keeps flooding. */
#define PENDING_SPARE 64

/* Direction byte of the frame MACs: a frame cannot be reflected back. */
#define DIR_FROM_ROOT 'R'
#define DIR_FROM_JOINER 'J'

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

/* ---- wire encoding ---- */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    put_u16(p, (uint16_t)(v >> 16));
    put_u16(p + 2, (uint16_t)v);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_u32(const uint8_t *p)
{
    return ((uint32_t)get_u16(p) << 16) | get_u16(p + 2);
}

static uint64_t get_u64(const uint8_t *p)
{
    return ((uint64_t)get_u32(p) << 32) | get_u32(p + 4);
}

void shs__boot_hdr_encode(const shs__boot_hdr_t *hdr, uint8_t out[SHS_BOOT_HDR_LEN])
{
    put_u32(out, hdr->magic);
    put_u16(out + 4, hdr->version);
    put_u16(out + 6, hdr->type);
    put_u32(out + 8, hdr->length);
}

shs_status_t shs__boot_hdr_decode(const uint8_t *in, size_t in_len, uint32_t max_len,
                                  shs__boot_hdr_t *hdr_p)
{
    shs__boot_hdr_t h;

    if (in == NULL || in_len < SHS_BOOT_HDR_LEN)
        return SHS_ERR_PROTOCOL;
    h.magic = get_u32(in);
    h.version = get_u16(in + 4);
    h.type = get_u16(in + 6);
    h.length = get_u32(in + 8);
    if (h.magic != SHS_BOOT_MAGIC)
        return SHS_ERR_PROTOCOL;
    if (h.version != SHS_BOOT_PROTOCOL_VERSION)
        return SHS_ERR_VERSION_MISMATCH;
    if (h.length > max_len)
        return SHS_ERR_PROTOCOL;
    *hdr_p = h;
    return SHS_OK;
}

void shs__boot_hello_encode(const shs__boot_hello_t *hello, uint8_t out[SHS_BOOT_HELLO_LEN])
{
    put_u32(out, hello->rank);
    put_u32(out + 4, hello->size);
    memcpy(out + 8, hello->nonce, SHS_BOOT_NONCE_LEN);
}

shs_status_t shs__boot_hello_decode(const uint8_t *in, size_t len, shs__boot_hello_t *hello_p)
{
    if (in == NULL || len != SHS_BOOT_HELLO_LEN)
        return SHS_ERR_PROTOCOL;
    hello_p->rank = get_u32(in);
    hello_p->size = get_u32(in + 4);
    memcpy(hello_p->nonce, in + 8, SHS_BOOT_NONCE_LEN);
    return SHS_OK;
}

shs_status_t shs__boot_error_decode(const uint8_t *in, size_t len, shs__boot_error_t *err_p)
{
    if (in == NULL || len < ERROR_FIXED || len > ERROR_FIXED + ERROR_TEXT_MAX)
        return SHS_ERR_PROTOCOL;
    int32_t code = (int32_t)get_u32(in);
    /* Only an error status may travel in an error frame; anything else would
     * let a confused peer turn a failure into success. */
    if (code >= 0 || code < -99)
        return SHS_ERR_PROTOCOL;
    err_p->status = code;
    err_p->culprit = (int32_t)get_u32(in + 4);
    size_t n = len - ERROR_FIXED;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = in[ERROR_FIXED + i];
        /* the text goes to a log line: no terminal escapes, no line breaks */
        err_p->text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    err_p->text[n] = '\0';
    return SHS_OK;
}

shs_status_t shs__boot_contrib_decode(const uint8_t *in, size_t len, shs__boot_contrib_t *c_p)
{
    if (in == NULL || len < CONTRIB_FIXED)
        return SHS_ERR_PROTOCOL;
    c_p->len = get_u64(in);
    c_p->root = get_u32(in + 8);
    return SHS_OK;
}

shs_status_t shs__boot_proof(const char *token, shs__boot_proof_kind_t kind,
                             const shs__boot_hello_t *hello,
                             const uint8_t nonce_root[SHS_BOOT_NONCE_LEN],
                             uint8_t out[SHS_BOOT_PROOF_LEN])
{
    /* Labels include their NUL so that no label is a prefix of another. */
    static const char *const labels[] = {"join", "root", "session"};
    static const char ctx[] = "shadowsync-boot";
    uint8_t fixed[2 + SHS_BOOT_HELLO_LEN];

    if (token == NULL || hello == NULL || nonce_root == NULL || (unsigned)kind > 2)
        return SHS_ERR_INVALID_ARG;
    put_u16(fixed, SHS_BOOT_PROTOCOL_VERSION);
    shs__boot_hello_encode(hello, fixed + 2);
    const void *parts[] = {labels[kind], ctx, fixed, nonce_root};
    const size_t lens[] = {strlen(labels[kind]) + 1, sizeof(ctx), sizeof(fixed),
                           SHS_BOOT_NONCE_LEN};
    return shs__hmac(token, strlen(token), parts, lens, 4, out);
}

/* ---- socket I/O, every wait bounded by a deadline ---- */

static const char *peer_name(int peer, char *buf, size_t len)
{
    if (peer >= 0)
        snprintf(buf, len, "rank %d", peer);
    else
        snprintf(buf, len, "a connection that has not authenticated");
    return buf;
}

static shs_status_t io_full(int fd, void *buf, size_t len, bool sending, shs__deadline_t dl,
                            int peer, const char *what)
{
    uint8_t *p = buf;
    char name[64];

    while (len > 0) {
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            SHS_ERROR("%s closed its connection during %s",
                      peer_name(peer, name, sizeof(name)), what);
            return SHS_ERR_PEER_FAILED;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int left = shs__deadline_remaining_ms(dl);
            if (left == 0) {
                SHS_ERROR("timed out waiting for %s during %s",
                          peer_name(peer, name, sizeof(name)), what);
                return SHS_ERR_TIMEOUT;
            }
            struct pollfd pfd = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
            if (poll(&pfd, 1, left) < 0 && errno != EINTR) {
                SHS_ERROR("poll on %s failed during %s: %s",
                          peer_name(peer, name, sizeof(name)), what, strerror(errno));
                return SHS_ERR_IO;
            }
            continue;
        }
        if (errno == ECONNRESET || errno == EPIPE || errno == ETIMEDOUT ||
            errno == EHOSTUNREACH || errno == ENETUNREACH) {
            SHS_ERROR("connection to %s broke during %s: %s",
                      peer_name(peer, name, sizeof(name)), what, strerror(errno));
            return SHS_ERR_PEER_FAILED;
        }
        SHS_ERROR("%s on the connection to %s failed during %s: %s",
                  sending ? "send" : "recv", peer_name(peer, name, sizeof(name)), what,
                  strerror(errno));
        return SHS_ERR_IO;
    }
    return SHS_OK;
}

static void link_init(link_t *l, int fd, bool root_side)
{
    memset(l, 0, sizeof(*l));
    l->fd = fd;
    l->tx_dir = root_side ? DIR_FROM_ROOT : DIR_FROM_JOINER;
    l->rx_dir = root_side ? DIR_FROM_JOINER : DIR_FROM_ROOT;
}

static void link_close(link_t *l)
{
    shs__mac_abort(&l->rx);
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    l->authed = false;
    /* the session key is of no use to anyone after the job */
    memset(l->key, 0, sizeof(l->key));
}

/* MAC of one frame: direction, sequence number, then header and payload. */
static shs_status_t frame_mac_begin(const link_t *l, uint8_t dir, uint64_t seq,
                                    const uint8_t hdr[SHS_BOOT_HDR_LEN], shs__mac_t *m)
{
    uint8_t pre[9];
    pre[0] = dir;
    put_u64(pre + 1, seq);
    shs_status_t st = shs__mac_begin(m, l->key, sizeof(l->key));
    if (st != SHS_OK)
        return st;
    shs__mac_update(m, pre, sizeof(pre));
    shs__mac_update(m, hdr, SHS_BOOT_HDR_LEN);
    return SHS_OK;
}

static shs_status_t send_frame(link_t *l, uint16_t type, const void *fixed, size_t fixed_len,
                               const void *data, size_t data_len, shs__deadline_t dl,
                               int peer, const char *what)
{
    uint8_t head[SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN];
    uint8_t mac[MAC_LEN];
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, type,
                         (uint32_t)(fixed_len + data_len)};

    shs__boot_hdr_encode(&h, head);
    if (fixed_len > 0)
        memcpy(head + SHS_BOOT_HDR_LEN, fixed, fixed_len);
    if (l->authed) {
        shs__mac_t m;
        shs_status_t st = frame_mac_begin(l, l->tx_dir, l->tx_seq, head, &m);
        if (st != SHS_OK)
            return st;
        shs__mac_update(&m, head + SHS_BOOT_HDR_LEN, fixed_len);
        shs__mac_update(&m, data, data_len);
        if ((st = shs__mac_end(&m, mac)) != SHS_OK)
            return st;
        l->tx_seq++;
    }
    shs_status_t st = io_full(l->fd, head, SHS_BOOT_HDR_LEN + fixed_len, true, dl, peer, what);
    if (st == SHS_OK && data_len > 0)
        st = io_full(l->fd, (void *)(uintptr_t)data, data_len, true, dl, peer, what);
    if (st == SHS_OK && l->authed)
        st = io_full(l->fd, mac, sizeof(mac), true, dl, peer, what);
    return st;
}

/* Receiving a frame: recv_hdr, then recv_body/recv_discard for exactly the
 * payload, then recv_end, which checks the MAC on an authenticated link.
 * Nothing received may be trusted before recv_end returns SHS_OK. */
static shs_status_t recv_hdr(link_t *l, shs__boot_hdr_t *hdr, shs__deadline_t dl, int peer,
                             const char *what)
{
    uint8_t raw[SHS_BOOT_HDR_LEN];
    char name[64];

    shs__mac_abort(&l->rx);
    shs_status_t st = io_full(l->fd, raw, sizeof(raw), false, dl, peer, what);
    if (st != SHS_OK)
        return st;
    st = shs__boot_hdr_decode(raw, sizeof(raw), SHS_BOOT_MAX_MSG, hdr);
    if (st == SHS_ERR_VERSION_MISMATCH)
        SHS_ERROR("%s speaks bootstrap protocol version %u, this rank %u (during %s); "
                  "mixed shadowsync versions in one job",
                  peer_name(peer, name, sizeof(name)), get_u16(raw + 4),
                  SHS_BOOT_PROTOCOL_VERSION, what);
    else if (st != SHS_OK)
        SHS_ERROR("malformed bootstrap frame from %s during %s (magic 0x%08x, length %u); "
                  "is another service listening on the bootstrap port?",
                  peer_name(peer, name, sizeof(name)), what, get_u32(raw), get_u32(raw + 8));
    if (st == SHS_OK && l->authed)
        st = frame_mac_begin(l, l->rx_dir, l->rx_seq, raw, &l->rx);
    return st;
}

static shs_status_t recv_body(link_t *l, void *buf, size_t len, shs__deadline_t dl, int peer,
                              const char *what)
{
    shs_status_t st = io_full(l->fd, buf, len, false, dl, peer, what);
    if (st == SHS_OK && l->authed)
        shs__mac_update(&l->rx, buf, len);
    return st;
}

static shs_status_t recv_discard(link_t *l, size_t len, shs__deadline_t dl, int peer,
                                 const char *what)
{
    uint8_t sink[4096];
    while (len > 0) {
        size_t n = len < sizeof(sink) ? len : sizeof(sink);
        shs_status_t st = recv_body(l, sink, n, dl, peer, what);
        if (st != SHS_OK)
            return st;
        len -= n;
    }
    return SHS_OK;
}

static shs_status_t recv_end(link_t *l, shs__deadline_t dl, int peer, const char *what)
{
    uint8_t got[MAC_LEN], want[MAC_LEN];
    char name[64];

    if (!l->authed)
        return SHS_OK;
    shs_status_t st = io_full(l->fd, got, sizeof(got), false, dl, peer, what);
    if (st != SHS_OK) {
        shs__mac_abort(&l->rx);
        return st;
    }
    if ((st = shs__mac_end(&l->rx, want)) != SHS_OK)
        return st;
    if (!shs__mac_equal(got, want)) {
        SHS_ERROR("a bootstrap frame from %s failed authentication during %s (frame %llu): "
                  "altered, injected or replayed on the way; dropping the job",
                  peer_name(peer, name, sizeof(name)), what, (unsigned long long)l->rx_seq);
        return SHS_ERR_PROTOCOL;
    }
    l->rx_seq++;
    return SHS_OK;
}

/* The joiner's side of an error frame: log what rank 0 said, return its status. */
static shs_status_t recv_error(link_t *l, const shs__boot_hdr_t *h, shs__deadline_t dl,
                               const char *what)
{
    uint8_t buf[ERROR_FIXED + ERROR_TEXT_MAX];
    shs__boot_error_t e;

    if (h->length < ERROR_FIXED || h->length > sizeof(buf)) {
        SHS_ERROR("malformed error frame from rank 0 during %s (length %u)", what, h->length);
        return SHS_ERR_PROTOCOL;
    }
    shs_status_t st = recv_body(l, buf, h->length, dl, 0, what);
    if (st == SHS_OK)
        st = recv_end(l, dl, 0, what);
    if (st != SHS_OK)
        return st;
    if (shs__boot_error_decode(buf, h->length, &e) != SHS_OK) {
        SHS_ERROR("error frame from rank 0 carries status %d during %s",
                  (int)(int32_t)get_u32(buf), what);
        return SHS_ERR_PROTOCOL;
    }
    SHS_ERROR("rank 0 reports during %s: %s", what, e.text);
    return (shs_status_t)e.status;
}

/* Best effort and never blocking: used when the job is already failing, and a
 * peer that does not drain its socket must not delay the others' news. */
static void send_error_nowait(link_t *l, shs_status_t st, int culprit, const char *text)
{
    uint8_t buf[SHS_BOOT_HDR_LEN + ERROR_FIXED + ERROR_TEXT_MAX + MAC_LEN];
    size_t tlen = strnlen(text, ERROR_TEXT_MAX);
    size_t len = SHS_BOOT_HDR_LEN + ERROR_FIXED + tlen;
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, FT_ERROR,
                         (uint32_t)(ERROR_FIXED + tlen)};

    shs__boot_hdr_encode(&h, buf);
    put_u32(buf + SHS_BOOT_HDR_LEN, (uint32_t)(int32_t)st);
    put_u32(buf + SHS_BOOT_HDR_LEN + 4, (uint32_t)(int32_t)culprit);
    memcpy(buf + SHS_BOOT_HDR_LEN + ERROR_FIXED, text, tlen);
    if (l->authed) {
        shs__mac_t m;
        if (frame_mac_begin(l, l->tx_dir, l->tx_seq, buf, &m) != SHS_OK)
            return;
        shs__mac_update(&m, buf + SHS_BOOT_HDR_LEN, len - SHS_BOOT_HDR_LEN);
        if (shs__mac_end(&m, buf + len) != SHS_OK)
            return;
        len += MAC_LEN;
        l->tx_seq++;
    }
    if (send(l->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        SHS_DEBUG("could not deliver an error frame: %s", strerror(errno));
}

/* Rank 0 tells every other rank why the job stops, then poisons the object. */
static shs_status_t root_fail_all(shs__boot_t *b, shs_status_t st, int culprit,
                                  const char *text)
{
    for (int r = 1; r < b->size; r++)
        if (r != culprit && b->peer[r].fd >= 0)
            send_error_nowait(&b->peer[r], st, culprit, text);
    b->poisoned = st;
    return st;
}

static int set_socket_options(int fd)
{
    int one = 1;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    /* Frames are a header then a payload; without NODELAY a barrier can stall
     * on the 40 ms delayed-ack timer. */
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}


static shs_status_t root_listen(const char *host, const char *port, int *fd_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *ai;
    struct sockaddr_storage ss;
    socklen_t sslen;
    int family = AF_INET;
    int one = 1;

    /* Bind the wildcard of the address family rank 0 is reached by: a host
     * name may resolve to a loopback alias on rank 0 itself (Debian maps the
     * hostname to 127.0.1.1) while the others reach it on the network. */
    if (getaddrinfo(host, NULL, &hints, &ai) == 0) {
        family = ai->ai_family;
        freeaddrinfo(ai);
    }
    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = in6addr_any;
        s6->sin6_port = htons((uint16_t)atoi(port));
        sslen = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
        s4->sin_port = htons((uint16_t)atoi(port));
        sslen = sizeof(*s4);
    }
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        SHS_ERROR("bootstrap socket: %s", strerror(errno));
        return SHS_ERR_IO;
    }
    /* A restarted job must be able to reuse the port while the last run's
     * connections sit in TIME_WAIT. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, sslen) < 0 || listen(fd, SOMAXCONN) < 0) {
        SHS_ERROR("rank 0 cannot listen on bootstrap port %s: %s%s", port, strerror(errno),
                  errno == EADDRINUSE ? " (another job or service holds it; set SHS_BOOTSTRAP)"
                                      : "");
        close(fd);
        return SHS_ERR_IO;
    }
    *fd_p = fd;
    return SHS_OK;
}


/* ---- rank 0: listen and admit ---- */

typedef enum hs_state {
    HS_HELLO, /* waiting for the hello */
    HS_AUTH   /* challenge sent, waiting for the proof */
} hs_state_t;

/* A connection whose handshake is in progress. Everything it sends is
 * buffered here until a whole frame is in, so a slow or silent peer never
 * blocks rank 0. */
typedef struct pending {
    int fd;
    hs_state_t state;
    shs__deadline_t dl;
    uint64_t since_ns;
    size_t in_len;
    uint8_t in[SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN];
    shs__boot_hello_t hello;
    uint8_t nonce[SHS_BOOT_NONCE_LEN];
    char from[64];
} pending_t;

typedef struct refusal {
    shs_status_t st;
    char what[240];
} refusal_t;

static void refuse(pending_t *pc, shs_status_t st, refusal_t *ref, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void refuse(pending_t *pc, shs_status_t st, refusal_t *ref, const char *fmt, ...)
{
    char why[160], text[ERROR_TEXT_MAX];
    va_list ap;
    link_t l;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    SHS_ERROR("refused the connection from %s: %s", pc->from, why);
    snprintf(text, sizeof(text), "rank 0 refused this rank: %s", why);
    link_init(&l, pc->fd, true);
    send_error_nowait(&l, st, -1, text);
    if (ref->st == SHS_OK) {
        ref->st = st;
        snprintf(ref->what, sizeof(ref->what), "%s from %s", why, pc->from);
    }
}

/* Frames are tiny and the connection is fresh: the socket buffer takes them
 * whole, and a peer that does not read is not one we wait for. */
static bool send_small_nowait(pending_t *pc, uint16_t type, const void *payload, size_t len)
{
    uint8_t buf[SHS_BOOT_HDR_LEN + SHS_BOOT_PROOF_LEN];
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, type, (uint32_t)len};
    shs__boot_hdr_encode(&h, buf);
    memcpy(buf + SHS_BOOT_HDR_LEN, payload, len);
    ssize_t n = send(pc->fd, buf, SHS_BOOT_HDR_LEN + len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != (ssize_t)(SHS_BOOT_HDR_LEN + len)) {
        SHS_WARN("dropped the connection from %s: could not send it %zu bytes (%s)", pc->from,
                 SHS_BOOT_HDR_LEN + len, n < 0 ? strerror(errno) : "short write");
        return false;
    }
    return true;
}

/* A whole frame is in pc->in. Returns 1 when the connection became rank
 * hello.rank (moved into b->peer), 0 to keep waiting, -1 to close it. */
static int hs_frame(shs__boot_t *b, pending_t *pc, const shs__boot_hdr_t *h, refusal_t *ref)
{
    const uint8_t *body = pc->in + SHS_BOOT_HDR_LEN;
    uint8_t proof[SHS_BOOT_PROOF_LEN];

    if (pc->state == HS_HELLO) {
        shs__boot_hello_decode(body, h->length, &pc->hello);
        if (shs__random(pc->nonce, sizeof(pc->nonce)) != SHS_OK ||
            !send_small_nowait(pc, FT_CHALLENGE, pc->nonce, sizeof(pc->nonce)))
            return -1;
        pc->state = HS_AUTH;
        return 0;
    }
    if (shs__boot_proof(b->token, SHS_BOOT_PROOF_JOIN, &pc->hello, pc->nonce, proof) != SHS_OK)
        return -1;
    if (!shs__mac_equal(proof, body)) {
        refuse(pc, SHS_ERR_TOKEN_MISMATCH, ref,
               "the peer claiming rank %u could not prove it holds this job's token "
               "(another SHS_JOB_TOKEN, or not a rank of this job)", pc->hello.rank);
        return -1;
    }
    /* Authenticated: only now does the peer learn anything about the job. */
    uint32_t rank = pc->hello.rank, size = pc->hello.size;
    if (size != (uint32_t)b->size) {
        refuse(pc, SHS_ERR_SIZE_MISMATCH, ref,
               "rank %u believes the job has %u ranks, rank 0 believes %d", rank, size,
               b->size);
        return -1;
    }
    if (rank == 0 || rank >= (uint32_t)b->size) {
        refuse(pc, SHS_ERR_CONFIG, ref, "rank %u is out of range 1..%d", rank, b->size - 1);
        return -1;
    }
    if (b->peer[rank].fd >= 0) {
        refuse(pc, SHS_ERR_CONFIG, ref,
               "rank %u has already joined (from %s); two processes were given the same rank",
               rank, b->peer[rank].from);
        return -1;
    }
    link_t *l = &b->peer[rank];
    link_init(l, pc->fd, true);
    snprintf(l->from, sizeof(l->from), "%s", pc->from);
    if (shs__boot_proof(b->token, SHS_BOOT_PROOF_ROOT, &pc->hello, pc->nonce, proof) != SHS_OK ||
        shs__boot_proof(b->token, SHS_BOOT_PROOF_SESSION, &pc->hello, pc->nonce, l->key) !=
            SHS_OK ||
        !send_small_nowait(pc, FT_ACCEPT, proof, sizeof(proof))) {
        l->fd = -1;
        return -1;
    }
    l->authed = true;
    SHS_DEBUG("rank %u joined from %s", rank, pc->from);
    return 1;
}

/* Read what a pending connection has sent. Returns as hs_frame. */
static int hs_read(shs__boot_t *b, pending_t *pc, refusal_t *ref)
{
    for (;;) {
        shs__boot_hdr_t h = {0};
        size_t want = SHS_BOOT_HDR_LEN;
        uint16_t type = pc->state == HS_HELLO ? FT_HELLO : FT_AUTH;
        uint32_t len = pc->state == HS_HELLO ? SHS_BOOT_HELLO_LEN : SHS_BOOT_PROOF_LEN;

        if (pc->in_len >= SHS_BOOT_HDR_LEN) {
            shs_status_t st = shs__boot_hdr_decode(pc->in, pc->in_len, len, &h);
            if (st == SHS_ERR_VERSION_MISMATCH) {
                refuse(pc, st, ref, "bootstrap protocol version %u, rank 0 speaks %u",
                       get_u16(pc->in + 4), SHS_BOOT_PROTOCOL_VERSION);
                return -1;
            }
            if (st != SHS_OK || h.type != type || h.length != len) {
                refuse(pc, SHS_ERR_PROTOCOL, ref,
                       "not a shadowsync %s (magic 0x%08x, type %u, length %u)",
                       pc->state == HS_HELLO ? "hello" : "proof", get_u32(pc->in),
                       get_u16(pc->in + 6), get_u32(pc->in + 8));
                return -1;
            }
            want = SHS_BOOT_HDR_LEN + len;
        }
        if (pc->in_len == want) {
            int rc = hs_frame(b, pc, &h, ref);
            pc->in_len = 0;
            if (rc != 0)
                return rc;
            continue;
        }
        ssize_t n = recv(pc->fd, pc->in + pc->in_len, want - pc->in_len, 0);
        if (n > 0) {
            pc->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        SHS_WARN("the connection from %s %s during the bootstrap handshake (%zu bytes of "
                 "its %s received)", pc->from, n == 0 ? "closed" : strerror(errno),
                 pc->in_len, pc->state == HS_HELLO ? "hello" : "proof");
        return -1;
    }
}

static void describe_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        port = ntohs(s4->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
    }
    snprintf(buf, len, "%s:%d", host, port);
}


static shs_status_t root_timeout(shs__boot_t *b, int joined, const refusal_t *ref)
{
    char missing[128] = "";
    char text[ERROR_TEXT_MAX];
    size_t used = 0;

    for (int r = 1; r < b->size && used < sizeof(missing) - 16; r++)
        if (b->peer[r].fd < 0)
            used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d",
                                     used ? "," : "", r);
    if (used >= sizeof(missing) - 16)
        snprintf(missing + used, sizeof(missing) - used, ",...");
    /* A refusal explains the missing rank better than the timeout does. */
    shs_status_t st = ref->st != SHS_OK ? ref->st : SHS_ERR_TIMEOUT;
    SHS_ERROR("bootstrap timed out after %d ms with %d of %d ranks joined; missing rank(s) "
              "%s%s%s", b->timeout_ms, joined + 1, b->size, missing,
              ref->st != SHS_OK ? "; refused earlier: " : "", ref->st != SHS_OK ? ref->what : "");
    snprintf(text, sizeof(text), "rank 0 timed out after %d ms waiting for rank(s) %s",
             b->timeout_ms, missing);
    return root_fail_all(b, st, -1, text);
}

static void accept_new(shs__boot_t *b, int lfd, pending_t *pend, size_t *npend_p, size_t cap)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (set_socket_options(fd) < 0) {
            close(fd);
            continue;
        }
        if (*npend_p == cap) {
            size_t old = 0;
            for (size_t i = 1; i < cap; i++)
                if (pend[i].since_ns < pend[old].since_ns)
                    old = i;
            SHS_WARN("%zu bootstrap handshakes in progress: dropped the oldest, from %s",
                     cap, pend[old].from);
            close(pend[old].fd);
            pend[old] = pend[--*npend_p];
        }
        pending_t *pc = &pend[(*npend_p)++];
        memset(pc, 0, sizeof(*pc));
        pc->fd = fd;
        pc->state = HS_HELLO;
        pc->since_ns = shs__now_ns();
        pc->dl = shs__deadline_in_ms(b->handshake_ms);
        describe_sockaddr(&ss, pc->from, sizeof(pc->from));
    }
}

/* An admitted rank says nothing until the welcome: readable means it left
 * (or broke the protocol), and its slot opens again for a restarted rank. */
static bool joined_left(shs__boot_t *b, int r)
{
    uint8_t byte;
    ssize_t n = recv(b->peer[r].fd, &byte, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return false;
    SHS_WARN("rank %d (from %s) %s before the job assembled; waiting for it to join again",
             r, b->peer[r].from, n == 0 ? "hung up" : n > 0 ? "spoke out of turn" : "broke");
    link_close(&b->peer[r]);
    return true;
}

static shs_status_t root_rendezvous(shs__boot_t *b, int lfd, shs__deadline_t dl)
{
    size_t cap = (size_t)b->size + PENDING_SPARE;
    struct pollfd *pfd = calloc(cap + (size_t)b->size + 1, sizeof(*pfd));
    int *pfd_rank = calloc(cap + (size_t)b->size + 1, sizeof(*pfd_rank));
    pending_t *pend = calloc(cap, sizeof(*pend));
    refusal_t ref = {SHS_OK, ""};
    size_t npend = 0;
    int joined = 0;
    shs_status_t st = SHS_OK;

    if (pfd == NULL || pend == NULL || pfd_rank == NULL) {
        SHS_ERROR("out of memory in the bootstrap rendezvous");
        st = SHS_ERR_NO_MEMORY;
        goto out;
    }
    while (joined < b->size - 1) {
        int left = shs__deadline_remaining_ms(dl);
        if (left == 0) {
            st = root_timeout(b, joined, &ref);
            for (size_t i = 0; i < npend; i++)
                refuse(&pend[i], SHS_ERR_TIMEOUT, &ref,
                       "rank 0 gave up: the job did not assemble within %d ms "
                       "(SHS_BOOTSTRAP_TIMEOUT_MS)", b->timeout_ms);
            goto out;
        }
        /* handshakes past their own deadline go first */
        for (size_t i = npend; i-- > 0;) {
            if (!shs__deadline_passed(pend[i].dl))
                continue;
            refuse(&pend[i], SHS_ERR_TIMEOUT, &ref,
                   "no complete %s within %d ms (SHS_BOOTSTRAP_HANDSHAKE_TIMEOUT_MS; %zu bytes "
                   "received)", pend[i].state == HS_HELLO ? "hello" : "proof",
                   b->handshake_ms, pend[i].in_len);
            close(pend[i].fd);
            pend[i] = pend[--npend];
        }
        size_t n = 0;
        pfd[n].fd = lfd;
        pfd[n++].events = POLLIN;
        for (size_t i = 0; i < npend; i++) {
            int t = shs__deadline_remaining_ms(pend[i].dl);
            if (t < left)
                left = t + 1; /* wake just after it expires */
            pfd[n].fd = pend[i].fd;
            pfd[n++].events = POLLIN;
        }
        for (int r = 1; r < b->size; r++) {
            if (b->peer[r].fd < 0)
                continue;
            pfd_rank[n] = r;
            pfd[n].fd = b->peer[r].fd;
            pfd[n++].events = POLLIN;
        }
        size_t npend_polled = npend;
        int rc = poll(pfd, n, left);
        if (rc < 0 && errno != EINTR) {
            SHS_ERROR("poll in the bootstrap rendezvous: %s", strerror(errno));
            st = root_fail_all(b, SHS_ERR_IO, -1, "rank 0 failed in the rendezvous");
            goto out;
        }
        if (rc <= 0)
            continue;
        for (size_t i = npend_polled + 1; i < n; i++)
            if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) && joined_left(b, pfd_rank[i]))
                joined--;
        /* Backwards: removing pend[i] moves the last one, already handled, into i. */
        for (size_t i = npend_polled; i-- > 0;) {
            if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int got = hs_read(b, &pend[i], &ref);
            if (got == 0)
                continue;
            if (got > 0)
                joined++;
            else
                close(pend[i].fd);
            pend[i] = pend[--npend];
        }
        if (pfd[0].revents & POLLIN)
            accept_new(b, lfd, pend, &npend, cap);
    }
    /* Whoever is still in a handshake cannot become a rank any more. */
    for (size_t i = 0; i < npend; i++)
        refuse(&pend[i], SHS_ERR_CONFIG, &ref,
               "every rank has joined; this process's rank is taken twice, or it belongs to "
               "another job");
    for (int r = 1; r < b->size; r++) {
        st = send_frame(&b->peer[r], FT_WELCOME, NULL, 0, NULL, 0, dl, r, "welcome");
        if (st != SHS_OK) {
            char text[96];
            snprintf(text, sizeof(text), "rank %d failed while the job assembled", r);
            st = root_fail_all(b, st, r, text);
            goto out;
        }
    }
out:
    for (size_t i = 0; i < npend; i++)
        close(pend[i].fd);
    free(pend);
    free(pfd);
    free(pfd_rank);
    return st;
}

/* ---- other ranks: connect, prove the token, check rank 0's proof ---- */

static int connect_once(const char *host, const char *port, shs__deadline_t dl, int *err_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai, *a;
    int rc = getaddrinfo(host, port, &hints, &ai);

    if (rc != 0) {
        *err_p = rc == EAI_SYSTEM ? errno : EHOSTUNREACH;
        return -1;
    }
    int fd = -1;
    for (a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            *err_p = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            int e = errno;
            if (e == EINPROGRESS) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                socklen_t el = sizeof(e);
                int n;
                do
                    n = poll(&pfd, 1, shs__deadline_remaining_ms(dl));
                while (n < 0 && errno == EINTR);
                if (n == 0)
                    e = ETIMEDOUT;
                else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
                    e = errno;
            }
            if (e != 0) {
                *err_p = e;
                close(fd);
                fd = -1;
            }
        }
    }
    freeaddrinfo(ai);
    if (fd >= 0 && set_socket_options(fd) < 0) {
        *err_p = errno;
        close(fd);
        fd = -1;
    }
    return fd;
}


/* Expect a handshake frame of `type` and exactly len payload bytes from rank 0
 * (or its error frame). */
static shs_status_t join_expect(shs__boot_t *b, uint16_t type, void *payload, uint32_t len,
                                shs__deadline_t dl, const char *what)
{
    shs__boot_hdr_t h;
    shs_status_t st = recv_hdr(&b->root, &h, dl, 0, what);
    if (st != SHS_OK)
        return st;
    if (h.type == FT_ERROR)
        return recv_error(&b->root, &h, dl, what);
    if (h.type != type || h.length != len) {
        SHS_ERROR("unexpected bootstrap frame type %u (length %u) from rank 0 during %s",
                  h.type, h.length, what);
        return SHS_ERR_PROTOCOL;
    }
    st = recv_body(&b->root, payload, len, dl, 0, what);
    if (st == SHS_OK)
        st = recv_end(&b->root, dl, 0, what);
    return st;
}

/* The first MAC of a process loads and initialises the crypto library's
 * provider, which took seconds in a loaded emulated guest with eight ranks
 * starting at once: do it before any handshake deadline starts counting. */
static shs_status_t warm_up_mac(const char *token)
{
    shs__boot_hello_t hello = {0};
    uint8_t nonce[SHS_BOOT_NONCE_LEN] = {0}, proof[SHS_BOOT_PROOF_LEN];

    /* the random generator too: rank 0 draws its first nonce for a
     * challenge, with the joiner's handshake deadline running */
    shs_status_t st = shs__random(nonce, sizeof(nonce));
    if (st != SHS_OK)
        return st;
    return shs__boot_proof(token, SHS_BOOT_PROOF_JOIN, &hello, nonce, proof);
}

static shs_status_t peer_join(shs__boot_t *b, const char *host, const char *port,
                              shs__deadline_t dl)
{
    int backoff = CONNECT_BACKOFF_FIRST_MS;
    int err = 0, tries = 0;
    int fd;
    shs__boot_hello_t hello = {.rank = (uint32_t)b->rank, .size = (uint32_t)b->size};
    uint8_t raw[SHS_BOOT_HELLO_LEN], nonce_root[SHS_BOOT_NONCE_LEN];
    uint8_t proof[SHS_BOOT_PROOF_LEN], theirs[SHS_BOOT_PROOF_LEN];

    /* Before connecting: the first use of the random generator seeds it,
     * which must not count against rank 0's handshake deadline. */
    shs_status_t st = shs__random(hello.nonce, sizeof(hello.nonce));
    if (st == SHS_OK)
        st = warm_up_mac(b->token);
    if (st != SHS_OK)
        return st;
    while ((fd = connect_once(host, port, dl, &err)) < 0) {
        tries++;
        int left = shs__deadline_remaining_ms(dl);
        if (left == 0) {
            SHS_ERROR("could not reach rank 0 at %s:%s within %d ms after %d attempts "
                      "(last error: %s); is rank 0 running and SHS_BOOTSTRAP right?",
                      host, port, b->timeout_ms, tries, strerror(err));
            return SHS_ERR_TIMEOUT;
        }
        SHS_DEBUG("rank 0 at %s:%s not reachable yet (%s), retrying in %d ms", host, port,
                  strerror(err), backoff);
        int ms = backoff < left ? backoff : left;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 < CONNECT_BACKOFF_MAX_MS ? backoff * 2 : CONNECT_BACKOFF_MAX_MS;
    }
    link_init(&b->root, fd, false);
    snprintf(b->root.from, sizeof(b->root.from), "%s:%s", host, port);

    shs__boot_hello_encode(&hello, raw);
    st = send_frame(&b->root, FT_HELLO, raw, sizeof(raw), NULL, 0, dl, 0, "hello");
    if (st == SHS_OK)
        st = join_expect(b, FT_CHALLENGE, nonce_root, sizeof(nonce_root), dl, "hello");
    if (st == SHS_OK)
        st = shs__boot_proof(b->token, SHS_BOOT_PROOF_JOIN, &hello, nonce_root, proof);
    if (st == SHS_OK)
        st = send_frame(&b->root, FT_AUTH, proof, sizeof(proof), NULL, 0, dl, 0, "handshake");
    if (st == SHS_OK)
        st = join_expect(b, FT_ACCEPT, theirs, sizeof(theirs), dl, "handshake");
    if (st == SHS_OK)
        st = shs__boot_proof(b->token, SHS_BOOT_PROOF_ROOT, &hello, nonce_root, proof);
    if (st != SHS_OK)
        return st;
    if (!shs__mac_equal(proof, theirs)) {
        SHS_ERROR("the rank 0 at %s:%s could not prove it holds this job's token: refusing to "
                  "join it (another job's rank 0 on this port, or an impostor)", host, port);
        return SHS_ERR_TOKEN_MISMATCH;
    }
    st = shs__boot_proof(b->token, SHS_BOOT_PROOF_SESSION, &hello, nonce_root, b->root.key);
    if (st != SHS_OK)
        return st;
    b->root.authed = true;
    return join_expect(b, FT_WELCOME, NULL, 0, dl, "welcome");
}

shs_status_t shs__boot_create(const shs__config_t *cfg, shs__boot_t **boot_p)
{
    char host[256], port[8];
    shs_status_t st;

    if (cfg == NULL || boot_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size) {
        SHS_ERROR("bootstrap needs a rank and a size (rank %d, size %d): set SHS_RANK and "
                  "SHS_SIZE or start under a launcher", cfg->rank, cfg->size);
        return SHS_ERR_CONFIG;
    }
    if (cfg->size > 1 &&
        shs__hostport_split(cfg->bootstrap, host, sizeof(host), port, sizeof(port)) != SHS_OK) {
        SHS_ERROR("bootstrap address \"%s\" is not host:port", cfg->bootstrap);
        return SHS_ERR_CONFIG;
    }
    if (cfg->size > 1 && cfg->job_token[0] == '\0') {
        SHS_ERROR("bootstrap needs a job token (SHS_JOB_TOKEN)");
        return SHS_ERR_CONFIG;
    }
    shs__boot_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return SHS_ERR_NO_MEMORY;
    b->rank = cfg->rank;
    b->size = cfg->size;
    b->timeout_ms = cfg->bootstrap_timeout_ms;
    /* unset (a zeroed config): a handshake may take the whole rendezvous */
    b->handshake_ms = cfg->bootstrap_handshake_ms > 0 ? cfg->bootstrap_handshake_ms
                                                      : cfg->bootstrap_timeout_ms;
    link_init(&b->root, -1, false);
    snprintf(b->token, sizeof(b->token), "%s", cfg->job_token);
    shs__deadline_t dl = shs__deadline_in_ms(b->timeout_ms);

    if (b->size == 1) {
        *boot_p = b;
        return SHS_OK;
    }
    if (b->rank != 0) {
        st = peer_join(b, host, port, dl);
        if (st != SHS_OK)
            goto err_destroy;
        *boot_p = b;
        return SHS_OK;
    }
    b->peer = malloc((size_t)b->size * sizeof(*b->peer));
    if (b->peer == NULL) {
        st = SHS_ERR_NO_MEMORY;
        goto err_destroy;
    }
    for (int r = 0; r < b->size; r++)
        link_init(&b->peer[r], -1, true);
    int lfd;
    st = warm_up_mac(b->token);
    if (st != SHS_OK)
        goto err_destroy;
    st = root_listen(host, port, &lfd);
    if (st != SHS_OK)
        goto err_destroy;
    st = root_rendezvous(b, lfd, dl);
    /* Every rank is in; the port is freed for the next job. */
    close(lfd);
    if (st != SHS_OK)
        goto err_destroy;
    *boot_p = b;
    return SHS_OK;

err_destroy:
    shs__boot_destroy(b);
    return st;
}

void shs__boot_destroy(shs__boot_t *b)
{
    if (b == NULL)
        return;
    link_close(&b->root);
    if (b->peer != NULL)
        for (int r = 1; r < b->size; r++)
            link_close(&b->peer[r]);
    free(b->peer);
    memset(b->token, 0, sizeof(b->token));
    free(b);
}

int shs__boot_rank(const shs__boot_t *b)
{
    return b->rank;
}

int shs__boot_size(const shs__boot_t *b)
{
    return b->size;
}

/* ---- collectives: a star through rank 0 ---- */

typedef struct coll {
    uint16_t op;
    const char *name;
    size_t len;  /* per-rank length */
    int root;    /* bcast root, else 0 */
    const void *in;
    void *out;   /* allgather: size*len; bcast: len */
} coll_t;

static size_t contrib_len(const shs__boot_t *b, const coll_t *c, int from)
{
    if (c->op == FT_ALLGATHER || (c->op == FT_BCAST && from == c->root))
        return c->len;
    return 0;
}

static size_t reply_len(const shs__boot_t *b, const coll_t *c, int to)
{
    if (c->op == FT_ALLGATHER)
        return (size_t)b->size * c->len;
    if (c->op == FT_BCAST && to != c->root)
        return c->len;
    return 0;
}

static const char *op_name(uint16_t op)
{
    switch (op) {
    case FT_ALLGATHER: return "allgather";
    case FT_BCAST: return "bcast";
    case FT_BARRIER: return "barrier";
    }
    return "a non-collective frame";
}

static shs_status_t root_collective(shs__boot_t *b, const coll_t *c, shs__deadline_t dl)
{
    shs_status_t bad = SHS_OK;
    int culprit = -1;
    char text[ERROR_TEXT_MAX] = "";
    uint8_t *dest = c->op == FT_ALLGATHER ? c->out : c->op == FT_BCAST ? c->out : NULL;

    /* Read every contribution even after a mismatch, so that the streams stay
     * in step and the job can report the mismatch and carry on. */
    for (int r = 1; r < b->size; r++) {
        link_t *l = &b->peer[r];
        shs__boot_hdr_t h;
        uint8_t fixed[CONTRIB_FIXED];
        shs__boot_contrib_t ct = {0};
        shs_status_t st = recv_hdr(l, &h, dl, r, c->name);
        if (st == SHS_OK && h.length < CONTRIB_FIXED) {
            SHS_ERROR("rank %d sent a %u-byte frame of type %u during %s", r, h.length, h.type,
                      c->name);
            st = SHS_ERR_PROTOCOL;
        }
        if (st == SHS_OK)
            st = recv_body(l, fixed, sizeof(fixed), dl, r, c->name);
        if (st != SHS_OK) {
            snprintf(text, sizeof(text), "rank %d failed during %s (%s)", r, c->name,
                     shs_status_string(st));
            return root_fail_all(b, st, r, text);
        }
        shs__boot_contrib_decode(fixed, sizeof(fixed), &ct);
        size_t data = h.length - CONTRIB_FIXED;
        size_t want = contrib_len(b, c, r);

        if (bad == SHS_OK && (h.type != c->op || ct.root != (uint32_t)c->root)) {
            bad = SHS_ERR_PROTOCOL;
            culprit = r;
            snprintf(text, sizeof(text),
                     "rank %d called %s (root %d) while rank 0 called %s (root %d)", r,
                     op_name(h.type), (int)ct.root, c->name, c->root);
        } else if (bad == SHS_OK && (ct.len != c->len || data != want)) {
            bad = SHS_ERR_SIZE_MISMATCH;
            culprit = r;
            snprintf(text, sizeof(text), "rank %d passed %llu bytes to %s, rank 0 passed %zu",
                     r, (unsigned long long)ct.len, c->name, c->len);
        }
        if (bad == SHS_OK && data > 0) {
            uint8_t *to = c->op == FT_ALLGATHER ? dest + (size_t)r * c->len : dest;
            st = recv_body(l, to, data, dl, r, c->name);
        } else {
            st = recv_discard(l, data, dl, r, c->name);
        }
        if (st == SHS_OK)
            st = recv_end(l, dl, r, c->name);
        if (st != SHS_OK) {
            snprintf(text, sizeof(text), "rank %d failed during %s (%s)", r, c->name,
                     shs_status_string(st));
            return root_fail_all(b, st, r, text);
        }
    }
    if (bad != SHS_OK) {
        SHS_ERROR("%s", text);
        for (int r = 1; r < b->size; r++)
            send_error_nowait(&b->peer[r], bad, culprit, text);
        /* The other ranks poison on anything but a size mismatch; so does rank 0. */
        if (bad != SHS_ERR_SIZE_MISMATCH)
            b->poisoned = bad;
        return bad;
    }
    for (int r = 1; r < b->size; r++) {
        shs_status_t st = send_frame(&b->peer[r], FT_REPLY, NULL, 0, c->out,
                                     reply_len(b, c, r), dl, r, c->name);
        if (st != SHS_OK) {
            snprintf(text, sizeof(text), "rank %d failed during %s (%s)", r, c->name,
                     shs_status_string(st));
            return root_fail_all(b, st, r, text);
        }
    }
    return SHS_OK;
}

static shs_status_t peer_collective(shs__boot_t *b, const coll_t *c, shs__deadline_t dl)
{
    uint8_t fixed[CONTRIB_FIXED];
    shs__boot_hdr_t h;
    link_t *l = &b->root;

    put_u64(fixed, c->len);
    put_u32(fixed + 8, (uint32_t)c->root);
    shs_status_t st = send_frame(l, c->op, fixed, sizeof(fixed), c->in,
                                 contrib_len(b, c, b->rank), dl, 0, c->name);
    if (st == SHS_OK)
        st = recv_hdr(l, &h, dl, 0, c->name);
    if (st != SHS_OK)
        goto err_poison;
    if (h.type == FT_ERROR) {
        st = recv_error(l, &h, dl, c->name);
        /* Rank 0 drained every contribution before a mismatch report; the
         * streams are still in step. */
        if (st == SHS_ERR_SIZE_MISMATCH)
            return st;
        goto err_poison;
    }
    if (h.type != FT_REPLY || h.length != reply_len(b, c, b->rank)) {
        SHS_ERROR("unexpected reply from rank 0 during %s (type %u, %u bytes, expected %zu)",
                  c->name, h.type, h.length, reply_len(b, c, b->rank));
        st = SHS_ERR_PROTOCOL;
        goto err_poison;
    }
    st = recv_body(l, c->out, h.length, dl, 0, c->name);
    if (st == SHS_OK)
        st = recv_end(l, dl, 0, c->name);
    if (st != SHS_OK)
        goto err_poison;
    return SHS_OK;

err_poison:
    b->poisoned = st;
    return st;
}

static shs_status_t run_collective(shs__boot_t *b, const coll_t *c)
{
    if (b->poisoned != SHS_OK) {
        SHS_DEBUG("%s on a failed bootstrap (%s)", c->name, shs_status_string(b->poisoned));
        return b->poisoned;
    }
    if (b->size == 1)
        return SHS_OK;
    if (reply_len(b, c, 1) > SHS_BOOT_MAX_MSG || c->len > SHS_BOOT_MAX_MSG) {
        SHS_ERROR("%s of %zu bytes per rank exceeds the bootstrap limit of %u bytes", c->name,
                  c->len, SHS_BOOT_MAX_MSG);
        return SHS_ERR_INVALID_ARG;
    }
    shs__deadline_t dl = shs__deadline_in_ms(b->timeout_ms);
    return b->rank == 0 ? root_collective(b, c, dl) : peer_collective(b, c, dl);
}

shs_status_t shs__boot_allgather(shs__boot_t *b, const void *in, size_t len, void *out)
{
    if (b == NULL || (len > 0 && (in == NULL || out == NULL)))
        return SHS_ERR_INVALID_ARG;
    /* memmove: an in-place allgather passes in == out + rank * len. */
    if (len > 0 && (b->rank == 0 || b->size == 1))
        memmove((uint8_t *)out + (size_t)b->rank * len, in, len);
    coll_t c = {FT_ALLGATHER, "allgather", len, 0, in, out};
    return run_collective(b, &c);
}

shs_status_t shs__boot_bcast(shs__boot_t *b, void *buf, size_t len, int root)
{
    if (b == NULL || (len > 0 && buf == NULL) || root < 0 || root >= b->size)
        return SHS_ERR_INVALID_ARG;
    coll_t c = {FT_BCAST, "bcast", len, root, buf, buf};
    return run_collective(b, &c);
}

shs_status_t shs__boot_barrier(shs__boot_t *b)
{
    if (b == NULL)
        return SHS_ERR_INVALID_ARG;
    coll_t c = {FT_BARRIER, "barrier", 0, 0, NULL, NULL};
    return run_collective(b, &c);
}

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
#include "runtime/log.h"

enum frame_type {
    FT_HELLO = 1,     /* non-root -> root: rank, size, token */
    FT_WELCOME = 2,   /* root -> non-root: every rank has joined */
    FT_ERROR = 3,     /* root -> non-root: status, culprit rank, text */
    FT_ALLGATHER = 4, /* contributions: u64 len, u32 root, data */
    FT_BCAST = 5,
    FT_BARRIER = 6,
    FT_REPLY = 7      /* root -> non-root: result of a collective */
};

#define HELLO_FIXED 10u   /* u32 rank, u32 size, u16 token length */
#define CONTRIB_FIXED 12u /* u64 len, u32 root */
#define ERROR_FIXED 8u    /* i32 status, i32 culprit */
#define ERROR_TEXT_MAX 256u

/* Connect retries start fast (rank 0 is usually up within milliseconds on a
 * single host) and back off to 1 s so hundreds of ranks waiting on a slow
 * rank 0 do not flood it with SYNs. */
#define CONNECT_BACKOFF_FIRST_MS 10
#define CONNECT_BACKOFF_MAX_MS 1000

struct shs__boot {
    int rank;
    int size;
    int timeout_ms;
    int fd;       /* non-root: the connection to rank 0 */
    int *peer_fd; /* rank 0: peer_fd[r] for 1 <= r < size */
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

/* ---- socket I/O, every wait bounded by a deadline ---- */

static const char *peer_name(int peer, char *buf, size_t len)
{
    if (peer >= 0)
        snprintf(buf, len, "rank %d", peer);
    else
        snprintf(buf, len, "a connection that has not said hello");
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

static shs_status_t send_frame(int fd, uint16_t type, const void *fixed, size_t fixed_len,
                               const void *data, size_t data_len, shs__deadline_t dl,
                               int peer, const char *what)
{
    uint8_t head[SHS_BOOT_HDR_LEN + CONTRIB_FIXED];
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, type,
                         (uint32_t)(fixed_len + data_len)};

    shs__boot_hdr_encode(&h, head);
    if (fixed_len > 0)
        memcpy(head + SHS_BOOT_HDR_LEN, fixed, fixed_len);
    shs_status_t st = io_full(fd, head, SHS_BOOT_HDR_LEN + fixed_len, true, dl, peer, what);
    if (st == SHS_OK && data_len > 0)
        st = io_full(fd, (void *)(uintptr_t)data, data_len, true, dl, peer, what);
    return st;
}

static shs_status_t recv_hdr(int fd, shs__boot_hdr_t *hdr, shs__deadline_t dl, int peer,
                             const char *what)
{
    uint8_t raw[SHS_BOOT_HDR_LEN];
    char name[64];

    shs_status_t st = io_full(fd, raw, sizeof(raw), false, dl, peer, what);
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
    return st;
}

static shs_status_t discard(int fd, size_t len, shs__deadline_t dl, int peer, const char *what)
{
    uint8_t sink[4096];
    while (len > 0) {
        size_t n = len < sizeof(sink) ? len : sizeof(sink);
        shs_status_t st = io_full(fd, sink, n, false, dl, peer, what);
        if (st != SHS_OK)
            return st;
        len -= n;
    }
    return SHS_OK;
}

/* The peer side of an error frame: log what rank 0 said, return its status. */
static shs_status_t recv_error(int fd, const shs__boot_hdr_t *h, shs__deadline_t dl,
                               const char *what)
{
    uint8_t buf[ERROR_FIXED + ERROR_TEXT_MAX + 1];

    if (h->length < ERROR_FIXED || h->length > ERROR_FIXED + ERROR_TEXT_MAX) {
        SHS_ERROR("malformed error frame from rank 0 during %s (length %u)", what, h->length);
        return SHS_ERR_PROTOCOL;
    }
    shs_status_t st = io_full(fd, buf, h->length, false, dl, 0, what);
    if (st != SHS_OK)
        return st;
    buf[h->length] = '\0';
    int32_t code = (int32_t)get_u32(buf);
    /* Only an error status may travel in an error frame; anything else would
     * let a confused peer turn a failure into success. */
    if (code >= 0 || code < -99) {
        SHS_ERROR("error frame from rank 0 carries status %d during %s", (int)code, what);
        return SHS_ERR_PROTOCOL;
    }
    SHS_ERROR("rank 0 reports during %s: %s", what, (const char *)buf + ERROR_FIXED);
    return (shs_status_t)code;
}

/* Best effort and never blocking: used when the job is already failing, and a
 * peer that does not drain its socket must not delay the others' news. */
static void send_error_nowait(int fd, shs_status_t st, int culprit, const char *text)
{
    uint8_t buf[SHS_BOOT_HDR_LEN + ERROR_FIXED + ERROR_TEXT_MAX];
    size_t tlen = strnlen(text, ERROR_TEXT_MAX);
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, FT_ERROR,
                         (uint32_t)(ERROR_FIXED + tlen)};

    shs__boot_hdr_encode(&h, buf);
    put_u32(buf + SHS_BOOT_HDR_LEN, (uint32_t)(int32_t)st);
    put_u32(buf + SHS_BOOT_HDR_LEN + 4, (uint32_t)(int32_t)culprit);
    memcpy(buf + SHS_BOOT_HDR_LEN + ERROR_FIXED, text, tlen);
    if (send(fd, buf, SHS_BOOT_HDR_LEN + ERROR_FIXED + tlen, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        SHS_DEBUG("could not deliver an error frame: %s", strerror(errno));
}

/* Rank 0 tells every other rank why the job stops, then poisons the object. */
static shs_status_t root_fail_all(shs__boot_t *b, shs_status_t st, int culprit,
                                  const char *text)
{
    for (int r = 1; r < b->size; r++)
        if (r != culprit && b->peer_fd[r] >= 0)
            send_error_nowait(b->peer_fd[r], st, culprit, text);
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

/* ---- rank 0: listen and admit ---- */

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

typedef struct pending {
    int fd;
    char from[64];
} pending_t;

typedef struct refusal {
    shs_status_t st;
    char what[200];
} refusal_t;

static void refuse(int fd, const char *from, shs_status_t st, refusal_t *ref,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void refuse(int fd, const char *from, shs_status_t st, refusal_t *ref,
                   const char *fmt, ...)
{
    char why[160], text[ERROR_TEXT_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    SHS_ERROR("refused the connection from %s: %s", from, why);
    snprintf(text, sizeof(text), "rank 0 refused this rank: %s", why);
    send_error_nowait(fd, st, -1, text);
    if (ref->st == SHS_OK) {
        ref->st = st;
        snprintf(ref->what, sizeof(ref->what), "%s from %s", why, from);
    }
}

/* Read one hello from a pending connection. Returns the admitted rank, or -1
 * when the connection was refused or broke (it is then closed). */
static int admit(shs__boot_t *b, pending_t *pc, shs__deadline_t dl, refusal_t *ref)
{
    uint8_t raw[SHS_BOOT_HDR_LEN];
    uint8_t body[HELLO_FIXED + sizeof(b->token)];
    shs__boot_hdr_t h;
    int fd = pc->fd;

    if (io_full(fd, raw, sizeof(raw), false, dl, -1, "hello") != SHS_OK)
        goto err_close;
    shs_status_t st = shs__boot_hdr_decode(raw, sizeof(raw), sizeof(body), &h);
    if (st == SHS_ERR_VERSION_MISMATCH) {
        refuse(fd, pc->from, st, ref, "bootstrap protocol version %u, rank 0 speaks %u",
               get_u16(raw + 4), SHS_BOOT_PROTOCOL_VERSION);
        goto err_close;
    }
    if (st != SHS_OK || h.type != FT_HELLO || h.length < HELLO_FIXED) {
        refuse(fd, pc->from, SHS_ERR_PROTOCOL, ref,
               "not a shadowsync hello (magic 0x%08x, type %u, length %u)", get_u32(raw),
               get_u16(raw + 6), get_u32(raw + 8));
        goto err_close;
    }
    if (io_full(fd, body, h.length, false, dl, -1, "hello") != SHS_OK)
        goto err_close;
    uint32_t rank = get_u32(body), size = get_u32(body + 4);
    uint16_t tlen = get_u16(body + 8);
    if (tlen != h.length - HELLO_FIXED || tlen >= sizeof(b->token)) {
        refuse(fd, pc->from, SHS_ERR_PROTOCOL, ref, "malformed hello (token length %u)", tlen);
        goto err_close;
    }
    char token[sizeof(b->token)];
    memcpy(token, body + HELLO_FIXED, tlen);
    token[tlen] = '\0';

    if (strcmp(token, b->token) != 0) {
        refuse(fd, pc->from, SHS_ERR_TOKEN_MISMATCH, ref,
               "rank %u presented job token \"%s\", this job's is \"%s\" (SHS_JOB_TOKEN)",
               rank, token, b->token);
        goto err_close;
    }
    if (size != (uint32_t)b->size) {
        refuse(fd, pc->from, SHS_ERR_SIZE_MISMATCH, ref,
               "rank %u believes the job has %u ranks, rank 0 believes %d", rank, size,
               b->size);
        goto err_close;
    }
    if (rank == 0 || rank >= (uint32_t)b->size) {
        refuse(fd, pc->from, SHS_ERR_CONFIG, ref, "rank %u is out of range 1..%d", rank,
               b->size - 1);
        goto err_close;
    }
    if (b->peer_fd[rank] >= 0) {
        refuse(fd, pc->from, SHS_ERR_CONFIG, ref,
               "rank %u has already joined; two processes were given the same rank", rank);
        goto err_close;
    }
    b->peer_fd[rank] = fd;
    SHS_DEBUG("rank %u joined from %s", rank, pc->from);
    return (int)rank;

err_close:
    close(fd);
    return -1;
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
        if (b->peer_fd[r] < 0)
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

static shs_status_t root_rendezvous(shs__boot_t *b, int lfd, shs__deadline_t dl)
{
    /* Room for every rank plus some strays (port scanners, refused ranks
     * that have not hung up yet). */
    size_t cap = (size_t)b->size + 8;
    struct pollfd *pfd = calloc(cap + 1, sizeof(*pfd));
    pending_t *pend = calloc(cap, sizeof(*pend));
    refusal_t ref = {SHS_OK, ""};
    size_t npend = 0;
    int joined = 0;
    shs_status_t st = SHS_OK;

    if (pfd == NULL || pend == NULL) {
        SHS_ERROR("out of memory in the bootstrap rendezvous");
        st = SHS_ERR_NO_MEMORY;
        goto out;
    }
    while (joined < b->size - 1) {
        int left = shs__deadline_remaining_ms(dl);
        if (left == 0) {
            st = root_timeout(b, joined, &ref);
            goto out;
        }
        pfd[0].fd = npend < cap ? lfd : -1;
        pfd[0].events = POLLIN;
        for (size_t i = 0; i < npend; i++) {
            pfd[i + 1].fd = pend[i].fd;
            pfd[i + 1].events = POLLIN;
        }
        int n = poll(pfd, npend + 1, left);
        if (n < 0 && errno != EINTR) {
            SHS_ERROR("poll in the bootstrap rendezvous: %s", strerror(errno));
            st = root_fail_all(b, SHS_ERR_IO, -1, "rank 0 failed in the rendezvous");
            goto out;
        }
        if (n <= 0)
            continue;
        /* Hellos first: admitting shrinks the pending list, accepting grows it. */
        for (size_t i = npend; i-- > 0;) {
            if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (admit(b, &pend[i], dl, &ref) >= 0)
                joined++;
            pend[i] = pend[--npend];
        }
        if (pfd[0].fd >= 0 && (pfd[0].revents & POLLIN)) {
            while (npend < cap) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof(ss);
                int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break;
                if (set_socket_options(fd) < 0) {
                    close(fd);
                    continue;
                }
                pend[npend].fd = fd;
                describe_sockaddr(&ss, pend[npend].from, sizeof(pend[npend].from));
                npend++;
            }
        }
    }
    for (int r = 1; r < b->size; r++) {
        st = send_frame(b->peer_fd[r], FT_WELCOME, NULL, 0, NULL, 0, dl, r, "welcome");
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
    return st;
}

/* ---- other ranks: connect and say hello ---- */

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

static shs_status_t peer_join(shs__boot_t *b, const char *host, const char *port,
                              shs__deadline_t dl)
{
    int backoff = CONNECT_BACKOFF_FIRST_MS;
    int err = 0, tries = 0;
    int fd;

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
    b->fd = fd;

    uint8_t hello[HELLO_FIXED];
    size_t tlen = strlen(b->token);
    put_u32(hello, (uint32_t)b->rank);
    put_u32(hello + 4, (uint32_t)b->size);
    put_u16(hello + 8, (uint16_t)tlen);
    shs_status_t st = send_frame(fd, FT_HELLO, hello, sizeof(hello), b->token, tlen, dl, 0,
                                 "hello");
    shs__boot_hdr_t h;
    if (st == SHS_OK)
        st = recv_hdr(fd, &h, dl, 0, "hello");
    if (st != SHS_OK)
        return st;
    if (h.type == FT_ERROR)
        return recv_error(fd, &h, dl, "hello");
    if (h.type != FT_WELCOME || h.length != 0) {
        SHS_ERROR("unexpected bootstrap frame type %u (length %u) from rank 0 after hello",
                  h.type, h.length);
        return SHS_ERR_PROTOCOL;
    }
    return SHS_OK;
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
    shs__boot_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return SHS_ERR_NO_MEMORY;
    b->rank = cfg->rank;
    b->size = cfg->size;
    b->timeout_ms = cfg->bootstrap_timeout_ms;
    b->fd = -1;
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
    b->peer_fd = malloc((size_t)b->size * sizeof(*b->peer_fd));
    if (b->peer_fd == NULL) {
        st = SHS_ERR_NO_MEMORY;
        goto err_destroy;
    }
    for (int r = 0; r < b->size; r++)
        b->peer_fd[r] = -1;
    int lfd;
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
    if (b->fd >= 0)
        close(b->fd);
    if (b->peer_fd != NULL)
        for (int r = 1; r < b->size; r++)
            if (b->peer_fd[r] >= 0)
                close(b->peer_fd[r]);
    free(b->peer_fd);
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
        int fd = b->peer_fd[r];
        shs__boot_hdr_t h;
        uint8_t fixed[CONTRIB_FIXED];
        shs_status_t st = recv_hdr(fd, &h, dl, r, c->name);
        if (st == SHS_OK && h.length < CONTRIB_FIXED) {
            SHS_ERROR("rank %d sent a %u-byte frame of type %u during %s", r, h.length, h.type,
                      c->name);
            st = SHS_ERR_PROTOCOL;
        }
        if (st == SHS_OK)
            st = io_full(fd, fixed, sizeof(fixed), false, dl, r, c->name);
        if (st != SHS_OK) {
            snprintf(text, sizeof(text), "rank %d failed during %s (%s)", r, c->name,
                     shs_status_string(st));
            return root_fail_all(b, st, r, text);
        }
        uint64_t dlen = get_u64(fixed);
        int droot = (int)get_u32(fixed + 8);
        size_t data = h.length - CONTRIB_FIXED;
        size_t want = contrib_len(b, c, r);

        if (bad == SHS_OK && (h.type != c->op || droot != c->root)) {
            bad = SHS_ERR_PROTOCOL;
            culprit = r;
            snprintf(text, sizeof(text),
                     "rank %d called %s (root %d) while rank 0 called %s (root %d)", r,
                     op_name(h.type), droot, c->name, c->root);
        } else if (bad == SHS_OK && (dlen != c->len || data != want)) {
            bad = SHS_ERR_SIZE_MISMATCH;
            culprit = r;
            snprintf(text, sizeof(text), "rank %d passed %llu bytes to %s, rank 0 passed %zu",
                     r, (unsigned long long)dlen, c->name, c->len);
        }
        if (bad == SHS_OK && data > 0) {
            uint8_t *to = c->op == FT_ALLGATHER ? dest + (size_t)r * c->len : dest;
            st = io_full(fd, to, data, false, dl, r, c->name);
        } else {
            st = discard(fd, data, dl, r, c->name);
        }
        if (st != SHS_OK) {
            snprintf(text, sizeof(text), "rank %d failed during %s (%s)", r, c->name,
                     shs_status_string(st));
            return root_fail_all(b, st, r, text);
        }
    }
    if (bad != SHS_OK) {
        SHS_ERROR("%s", text);
        for (int r = 1; r < b->size; r++)
            send_error_nowait(b->peer_fd[r], bad, culprit, text);
        /* The other ranks poison on anything but a size mismatch; so does rank 0. */
        if (bad != SHS_ERR_SIZE_MISMATCH)
            b->poisoned = bad;
        return bad;
    }
    for (int r = 1; r < b->size; r++) {
        shs_status_t st = send_frame(b->peer_fd[r], FT_REPLY, NULL, 0, c->out,
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

    put_u64(fixed, c->len);
    put_u32(fixed + 8, (uint32_t)c->root);
    shs_status_t st = send_frame(b->fd, c->op, fixed, sizeof(fixed), c->in,
                                 contrib_len(b, c, b->rank), dl, 0, c->name);
    if (st == SHS_OK)
        st = recv_hdr(b->fd, &h, dl, 0, c->name);
    if (st != SHS_OK)
        goto err_poison;
    if (h.type == FT_ERROR) {
        st = recv_error(b->fd, &h, dl, c->name);
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
    st = io_full(b->fd, c->out, h.length, false, dl, 0, c->name);
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

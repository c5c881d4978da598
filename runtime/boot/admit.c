/* Rank 0: listen, run each handshake without blocking on any peer, admit. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

/* Handshakes in progress at once on rank 0, beyond one per missing rank.
 * Each costs one descriptor and ~150 bytes; when they are all taken the oldest
 * unauthenticated connection is dropped, so a flood of strangers cannot lock
 * a rank out for longer than it keeps flooding. */
#define PENDING_SPARE 64

shs_status_t shs__boot_listen(const char *host, const char *port, int *fd_p)
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
    shs__boot_link_init(&l, pc->fd, true);
    shs__boot_send_error_nowait(&l, st, -1, text);
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
    shs__boot_link_init(l, pc->fd, true);
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
                       shs__get_u16(pc->in + 4), SHS_BOOT_PROTOCOL_VERSION);
                return -1;
            }
            if (st != SHS_OK || h.type != type || h.length != len) {
                refuse(pc, SHS_ERR_PROTOCOL, ref,
                       "not a shadowsync %s (magic 0x%08x, type %u, length %u)",
                       pc->state == HS_HELLO ? "hello" : "proof", shs__get_u32(pc->in),
                       shs__get_u16(pc->in + 6), shs__get_u32(pc->in + 8));
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
    return shs__boot_fail_all(b, st, -1, text);
}

static void accept_new(shs__boot_t *b, int lfd, pending_t *pend, size_t *npend_p, size_t cap)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (shs__boot_socket_options(fd) < 0) {
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
    shs__boot_link_close(&b->peer[r]);
    return true;
}

/* What rank 0 tracks while the job assembles: the handshakes in progress and
 * the poll set (listener, then handshakes, then admitted ranks). */
typedef struct admission {
    shs__boot_t *b;
    int lfd;
    size_t cap;         /* handshakes at once */
    pending_t *pend;
    size_t npend;
    struct pollfd *pfd;
    int *pfd_rank;      /* the admitted rank behind pfd[i] */
    refusal_t ref;      /* the first refusal, to explain a timeout */
    int joined;
} admission_t;

static shs_status_t admission_init(admission_t *a, shs__boot_t *b, int lfd)
{
    size_t npfd = (size_t)b->size + PENDING_SPARE + (size_t)b->size + 1;

    memset(a, 0, sizeof(*a));
    a->b = b;
    a->lfd = lfd;
    a->cap = (size_t)b->size + PENDING_SPARE;
    a->ref.st = SHS_OK;
    a->pfd = calloc(npfd, sizeof(*a->pfd));
    a->pfd_rank = calloc(npfd, sizeof(*a->pfd_rank));
    a->pend = calloc(a->cap, sizeof(*a->pend));
    if (a->pfd == NULL || a->pend == NULL || a->pfd_rank == NULL) {
        SHS_ERROR("out of memory in the bootstrap rendezvous");
        return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

static void admission_fini(admission_t *a)
{
    for (size_t i = 0; i < a->npend; i++)
        close(a->pend[i].fd);
    free(a->pend);
    free(a->pfd);
    free(a->pfd_rank);
}

static void drop_pending(admission_t *a, size_t i)
{
    a->pend[i] = a->pend[--a->npend];
}

/* Handshakes past their own deadline are refused. */
static void expire_handshakes(admission_t *a)
{
    for (size_t i = a->npend; i-- > 0;) {
        pending_t *pc = &a->pend[i];
        if (!shs__deadline_passed(pc->dl))
            continue;
        refuse(pc, SHS_ERR_TIMEOUT, &a->ref,
               "no complete %s within %d ms (SHS_BOOTSTRAP_HANDSHAKE_TIMEOUT_MS; %zu bytes "
               "received)", pc->state == HS_HELLO ? "hello" : "proof", a->b->handshake_ms,
               pc->in_len);
        close(pc->fd);
        drop_pending(a, i);
    }
}

/* Fill the poll set; returns its length and lowers *left_ms to wake just
 * after the first handshake deadline. */
static size_t build_pollset(admission_t *a, int *left_ms)
{
    size_t n = 0;
    a->pfd[n].fd = a->lfd;
    a->pfd[n++].events = POLLIN;
    for (size_t i = 0; i < a->npend; i++) {
        int t = shs__deadline_remaining_ms(a->pend[i].dl);
        if (t < *left_ms)
            *left_ms = t + 1;
        a->pfd[n].fd = a->pend[i].fd;
        a->pfd[n++].events = POLLIN;
    }
    for (int r = 1; r < a->b->size; r++) {
        if (a->b->peer[r].fd < 0)
            continue;
        a->pfd_rank[n] = r;
        a->pfd[n].fd = a->b->peer[r].fd;
        a->pfd[n++].events = POLLIN;
    }
    return n;
}

/* Act on what poll reported for a set of n entries built with npend_polled
 * handshakes. */
static void serve_pollset(admission_t *a, size_t n, size_t npend_polled)
{
    const short ready = POLLIN | POLLHUP | POLLERR;

    for (size_t i = npend_polled + 1; i < n; i++)
        if ((a->pfd[i].revents & ready) && joined_left(a->b, a->pfd_rank[i]))
            a->joined--;
    /* Backwards: removing pend[i] moves the last one, already handled, into i. */
    for (size_t i = npend_polled; i-- > 0;) {
        if (!(a->pfd[i + 1].revents & ready))
            continue;
        int got = hs_read(a->b, &a->pend[i], &a->ref);
        if (got == 0)
            continue;
        if (got > 0)
            a->joined++;
        else
            close(a->pend[i].fd);
        drop_pending(a, i);
    }
    if (a->pfd[0].revents & POLLIN)
        accept_new(a->b, a->lfd, a->pend, &a->npend, a->cap);
}

/* Every rank is in: whoever is still in a handshake cannot become a rank any
 * more, and the others are welcomed. */
static shs_status_t welcome_all(admission_t *a, shs__deadline_t dl)
{
    shs__boot_t *b = a->b;

    for (size_t i = 0; i < a->npend; i++)
        refuse(&a->pend[i], SHS_ERR_CONFIG, &a->ref,
               "every rank has joined; this process's rank is taken twice, or it belongs to "
               "another job");
    for (int r = 1; r < b->size; r++) {
        shs_status_t st = shs__boot_send(&b->peer[r], FT_WELCOME, NULL, 0, NULL, 0, dl, r,
                                         "welcome");
        if (st != SHS_OK) {
            char text[96];
            snprintf(text, sizeof(text), "rank %d failed while the job assembled", r);
            return shs__boot_fail_all(b, st, r, text);
        }
    }
    return SHS_OK;
}

shs_status_t shs__boot_rendezvous(shs__boot_t *b, int lfd, shs__deadline_t dl)
{
    admission_t a;
    shs_status_t st = admission_init(&a, b, lfd);

    while (st == SHS_OK && a.joined < b->size - 1) {
        int left = shs__deadline_remaining_ms(dl);
        if (left == 0) {
            st = root_timeout(b, a.joined, &a.ref);
            for (size_t i = 0; i < a.npend; i++)
                refuse(&a.pend[i], SHS_ERR_TIMEOUT, &a.ref,
                       "rank 0 gave up: the job did not assemble within %d ms "
                       "(SHS_BOOTSTRAP_TIMEOUT_MS)", b->timeout_ms);
            break;
        }
        expire_handshakes(&a);
        size_t npend_polled = a.npend;
        size_t n = build_pollset(&a, &left);
        int rc = poll(a.pfd, n, left);
        if (rc < 0 && errno != EINTR) {
            SHS_ERROR("poll in the bootstrap rendezvous: %s", strerror(errno));
            st = shs__boot_fail_all(b, SHS_ERR_IO, -1, "rank 0 failed in the rendezvous");
        } else if (rc > 0) {
            serve_pollset(&a, n, npend_polled);
        }
    }
    if (st == SHS_OK)
        st = welcome_all(&a, dl);
    admission_fini(&a);
    return st;
}

/* Rank 0: listen, run each handshake without blocking on any peer, admit. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
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

static shs_status_t root_timeout(shs__boot_t *b, int joined, const hs_refusal_t *ref)
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

/* At start-up: rank 0 is not a joiner, and each other rank joins once. */
static shs_status_t decide_startup(hs_set_t *set, hs_pending_t *pc, link_t **link_p)
{
    shs__boot_t *b = set->b;
    uint32_t rank = pc->hello.rank;
    if (rank == 0) {
        shs__hs_refuse(set, pc, SHS_ERR_CONFIG, "rank 0 is this rank; a joiner is 1..%d",
                       b->size - 1);
        return SHS_ERR_CONFIG;
    }
    if (b->peer[rank].fd >= 0) {
        shs__hs_refuse(set, pc, SHS_ERR_CONFIG,
                       "rank %u has already joined (from %s); two processes were given the "
                       "same rank", rank, b->peer[rank].from);
        return SHS_ERR_CONFIG;
    }
    *link_p = &b->peer[rank];
    return SHS_OK;
}

/* What rank 0 tracks while the job assembles: the handshakes in progress and
 * the poll set (listener, then handshakes, then admitted ranks). */
typedef struct admission {
    shs__boot_t *b;
    int lfd;
    hs_set_t hs;
    struct pollfd *pfd;
    int *pfd_rank;      /* the admitted rank behind pfd[i] */
    int joined;
} admission_t;

static shs_status_t admission_init(admission_t *a, shs__boot_t *b, int lfd)
{
    size_t npfd = (size_t)b->size + PENDING_SPARE + (size_t)b->size + 1;

    memset(a, 0, sizeof(*a));
    a->b = b;
    a->lfd = lfd;
    shs_status_t st = shs__hs_init(&a->hs, b, (size_t)b->size + PENDING_SPARE, "rank 0",
                                   decide_startup, NULL);
    if (st != SHS_OK)
        return st;
    a->pfd = calloc(npfd, sizeof(*a->pfd));
    a->pfd_rank = calloc(npfd, sizeof(*a->pfd_rank));
    if (a->pfd == NULL || a->pfd_rank == NULL) {
        SHS_ERROR("out of memory in the bootstrap rendezvous");
        return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

static void admission_fini(admission_t *a)
{
    shs__hs_fini(&a->hs);
    free(a->pfd);
    free(a->pfd_rank);
}

/* Fill the poll set: the listener, the handshakes (as shs__hs_pollset puts
 * them), then the admitted ranks; returns its length. */
static size_t build_pollset(admission_t *a, int *left_ms)
{
    size_t n = 0;
    a->pfd[n].fd = a->lfd;
    a->pfd[n++].events = POLLIN;
    n += shs__hs_pollset(&a->hs, a->pfd + 1, left_ms);
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
    a->joined += shs__hs_serve(&a->hs, a->pfd + 1, npend_polled);
    if (a->pfd[0].revents & POLLIN)
        shs__hs_accept(&a->hs, a->lfd);
}

/* Every rank is in: whoever is still in a handshake cannot become a rank any
 * more, and the others are welcomed. */
static shs_status_t welcome_all(admission_t *a, shs__deadline_t dl)
{
    shs__boot_t *b = a->b;

    shs__hs_refuse_all(&a->hs, SHS_ERR_CONFIG,
                       "every rank has joined; this process's rank is taken twice, or it "
                       "belongs to another job");
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
            char why[128];
            st = root_timeout(b, a.joined, &a.hs.ref);
            snprintf(why, sizeof(why), "rank 0 gave up: the job did not assemble within %d ms "
                     "(SHS_BOOTSTRAP_TIMEOUT_MS)", b->timeout_ms);
            shs__hs_refuse_all(&a.hs, SHS_ERR_TIMEOUT, why);
            break;
        }
        shs__hs_expire(&a.hs);
        size_t npend_polled = a.hs.npend;
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

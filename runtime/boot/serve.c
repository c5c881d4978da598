/* After start-up: the listeners for ranks that rejoin a running job. A
 * thread per context of a job with several SHS_BOOTSTRAP entries: the
 * service listener (an ephemeral port, always) and the rendezvous listener
 * (this rank's entry, while the transport says this rank is the
 * rendezvous). Each admitted connection carries one request and one reply. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

/* How often the thread asks whether this rank became (or stopped being) the
 * rendezvous: a rejoiner retries for SHS_BOOTSTRAP_TIMEOUT_MS, so a fifth of
 * a second of takeover costs it nothing. */
#define SERVE_TICK_MS 200
/* Handshakes at once per listener; the oldest goes beyond (admit.c says why). */
#define SERVE_PENDING 16
#define LISTEN_RETRY_MS 5000
/* The largest request and reply: a reply carries a rank's table of regions
 * (28 bytes each). */
#define REQUEST_MAX (64u << 10)
#define REPLY_MAX (1u << 20)

struct shs__boot_serve {
    shs__boot_t *b;
    shs__boot_serve_ops_t ops;
    char host[256], port[8]; /* this rank's SHS_BOOTSTRAP entry ("" if none) */
    char who[48];            /* "the rendezvous (rank 2)" */
    int lfd;                 /* the rendezvous listener, -1 while not the rendezvous */
    uint64_t retry_ns;       /* after a failed listen: when to try again */
    int sfd;                 /* the service listener */
    char addr[SHS_BOOT_ADDR_LEN];
    pthread_mutex_t lock;    /* dir */
    char *dir;               /* size x SHS_BOOT_ADDR_LEN */
    int wake[2];             /* stop: a byte on wake[1] */
    pthread_t thread;
    hs_set_t rdv, svc;       /* handshakes on each listener */
    link_t cur;              /* the admitted connection, for its one request */
    uint8_t *req, *reply;
    size_t reply_cap;        /* REPLY_MAX, or a directory if larger */
    struct pollfd pfd[3 + 2 * SERVE_PENDING];
};

/* How long a claim of a living rank waits to learn whether that rank's
 * service listener still takes connections. */
#define GONE_PROBE_MS 500

/* Whether rank's process is gone though the transport has not seen it
 * fail yet (no traffic met it): its service listener refuses connections
 * (on its host the port is closed). Anything else, a connection or no
 * answer in time, counts as alive. */
static bool service_gone(shs__boot_serve_t *s, int rank)
{
    char addr[SHS_BOOT_ADDR_LEN], host[256], port[8];
    pthread_mutex_lock(&s->lock);
    memcpy(addr, s->dir + (size_t)rank * SHS_BOOT_ADDR_LEN, sizeof(addr));
    pthread_mutex_unlock(&s->lock);
    addr[sizeof(addr) - 1] = '\0';
    if (addr[0] == '\0' || shs__hostport_split(addr, host, sizeof(host), port, sizeof(port)) != SHS_OK)
        return false;
    int err = 0;
    int fd = shs__boot_connect_once(host, port, shs__deadline_in_ms(GONE_PROBE_MS), &err);
    if (fd >= 0) {
        close(fd);
        return false;
    }
    if (err == ECONNREFUSED)
        SHS_INFO("rank %d's listener at %s refuses connections: its process is gone", rank,
                 addr);
    return err == ECONNREFUSED;
}

static shs_status_t refuse_rank(hs_set_t *set, hs_pending_t *pc, bool alive_too)
{
    shs__boot_serve_t *s = set->arg;
    int rank = (int)pc->hello.rank;
    if (rank == s->b->rank) {
        shs__hs_refuse(set, pc, SHS_ERR_BAD_STATE,
                       "rank %d is this rank itself, alive in the running job", rank);
        return SHS_ERR_BAD_STATE;
    }
    if (alive_too && s->ops.is_alive(s->ops.arg, rank) && !service_gone(s, rank)) {
        shs__hs_refuse(set, pc, SHS_ERR_BAD_STATE,
                       "rank %d is alive in the running job (two processes were given the "
                       "same rank, or its failure is not seen yet)", rank);
        return SHS_ERR_BAD_STATE;
    }
    return SHS_OK;
}

/* At the rendezvous: only a rank the job has seen fail comes back. */
static shs_status_t decide_rdv(hs_set_t *set, hs_pending_t *pc, link_t **link_p)
{
    shs__boot_serve_t *s = set->arg;
    *link_p = &s->cur;
    return refuse_rank(set, pc, true);
}

/* At the service: the transport judges each request. */
static shs_status_t decide_svc(hs_set_t *set, hs_pending_t *pc, link_t **link_p)
{
    shs__boot_serve_t *s = set->arg;
    *link_p = &s->cur;
    return refuse_rank(set, pc, false);
}

static void reply_error(link_t *l, shs_status_t st, const char *who, const char *why)
{
    char text[ERROR_TEXT_MAX];
    SHS_ERROR("%s refused a request: %s", who, why);
    snprintf(text, sizeof(text), "%s refused this rank: %s", who, why);
    shs__boot_send_error_nowait(l, st, -1, text);
}

/* The one request of an admitted rejoiner, answered on its link. */
static void serve_request(shs__boot_serve_t *s, link_t *l, int rank)
{
    shs__deadline_t dl = shs__deadline_in_ms(s->b->handshake_ms);
    shs__boot_hdr_t h;
    char why[160] = "";
    shs_status_t st = shs__boot_recv_hdr(l, &h, dl, rank, "a rejoin request");
    if (st != SHS_OK)
        return;
    if (h.type != FT_REQUEST || h.length < 4 || h.length > REQUEST_MAX) {
        snprintf(why, sizeof(why), "frame type %u of %u bytes is not a request", h.type,
                 h.length);
        reply_error(l, SHS_ERR_PROTOCOL, s->who, why);
        return;
    }
    if (shs__boot_recv_body(l, s->req, h.length, dl, rank, "a rejoin request") != SHS_OK ||
        shs__boot_recv_end(l, dl, rank, "a rejoin request") != SHS_OK)
        return;
    uint32_t kind = shs__get_u32(s->req);
    size_t rlen = 0;
    int n = s->b->size;
    if (kind == SHS_BOOT_REQ_DIRECTORY) {
        pthread_mutex_lock(&s->lock);
        memcpy(s->reply, s->dir, (size_t)n * SHS_BOOT_ADDR_LEN);
        pthread_mutex_unlock(&s->lock);
        for (int r = 0; r < n; r++)
            s->reply[(size_t)n * SHS_BOOT_ADDR_LEN + (size_t)r] =
                r == s->b->rank || s->ops.is_alive(s->ops.arg, r);
        rlen = (size_t)n * (SHS_BOOT_ADDR_LEN + 1);
    } else if (kind == SHS_BOOT_REQ_TRANSPORT) {
        rlen = s->reply_cap;
        st = s->ops.request(s->ops.arg, rank, s->req + 4, h.length - 4, s->reply, &rlen, why,
                            sizeof(why));
        if (st != SHS_OK) {
            reply_error(l, st, s->who, why);
            return;
        }
    } else {
        snprintf(why, sizeof(why), "unknown request kind %u", kind);
        reply_error(l, SHS_ERR_PROTOCOL, s->who, why);
        return;
    }
    (void)shs__boot_send(l, FT_REPLY, NULL, 0, s->reply, rlen, dl, rank, "a rejoin reply");
}

static void admitted(hs_set_t *set, link_t *l, const hs_pending_t *pc)
{
    serve_request(set->arg, l, (int)pc->hello.rank);
    shs__boot_link_close(l);
}

static void listen_or_close(shs__boot_serve_t *s)
{
    if (s->host[0] == '\0')
        return;
    bool want = s->ops.is_rendezvous(s->ops.arg);
    if (want && s->lfd < 0 && shs__now_ns() >= s->retry_ns) {
        /* a port still held (by a closing socket, or another program) is
         * tried again, and logged again, every LISTEN_RETRY_MS */
        if (shs__boot_listen(s->host, s->port, &s->lfd) == SHS_OK)
            SHS_INFO("rank %d is the rendezvous for rejoiners at %s:%s", s->b->rank, s->host,
                     s->port);
        else
            s->retry_ns = shs__now_ns() + LISTEN_RETRY_MS * 1000000ull;
    } else if (!want && s->lfd >= 0) {
        SHS_INFO("rank %d is no longer the rendezvous for rejoiners", s->b->rank);
        close(s->lfd);
        s->lfd = -1;
    }
}

static void *serve_main(void *arg)
{
    shs__boot_serve_t *s = arg;
    for (;;) {
        listen_or_close(s);
        shs__hs_expire(&s->rdv);
        shs__hs_expire(&s->svc);
        int left = SERVE_TICK_MS;
        size_t n = 0;
        s->pfd[n].fd = s->wake[0];
        s->pfd[n++].events = POLLIN;
        s->pfd[n].fd = s->sfd;
        s->pfd[n++].events = POLLIN;
        s->pfd[n].fd = s->lfd; /* -1: poll skips it */
        s->pfd[n++].events = POLLIN;
        size_t nrdv = shs__hs_pollset(&s->rdv, s->pfd + n, &left);
        size_t nsvc = shs__hs_pollset(&s->svc, s->pfd + n + nrdv, &left);
        for (size_t i = 0; i < 3; i++)
            s->pfd[i].revents = 0;
        int rc = poll(s->pfd, n + nrdv + nsvc, left);
        if (rc < 0 && errno != EINTR) {
            SHS_ERROR("rejoin listeners: poll: %s; they stop", strerror(errno));
            break;
        }
        if (rc <= 0)
            continue;
        if (s->pfd[0].revents != 0)
            break;
        shs__hs_serve(&s->rdv, s->pfd + n, nrdv);
        shs__hs_serve(&s->svc, s->pfd + n + nrdv, nsvc);
        if (s->pfd[1].revents & POLLIN)
            shs__hs_accept(&s->svc, s->sfd);
        if (s->lfd >= 0 && (s->pfd[2].revents & POLLIN))
            shs__hs_accept(&s->rdv, s->lfd);
    }
    return NULL;
}

/* The service listener: an ephemeral port on every address, named by the
 * address this rank reaches the bootstrap from (the others reach it there). */
static shs_status_t service_listen(shs__boot_serve_t *s)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[INET6_ADDRSTRLEN];
    if (shs__boot_local_addr(s->b, &ss) != SHS_OK)
        return SHS_ERR_IO;
    bool v6 = ss.ss_family == AF_INET6;
    if (inet_ntop(ss.ss_family,
                  v6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                     : (const void *)&((struct sockaddr_in *)&ss)->sin_addr,
                  host, sizeof(host)) == NULL)
        return SHS_ERR_IO;
    if (shs__boot_listen(v6 ? "::1" : "127.0.0.1", "0", &s->sfd) != SHS_OK)
        return SHS_ERR_IO;
    if (getsockname(s->sfd, (struct sockaddr *)&ss, &sl) != 0) {
        SHS_ERROR("rejoin service: getsockname: %s", strerror(errno));
        return SHS_ERR_IO;
    }
    int port = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
    snprintf(s->addr, sizeof(s->addr), v6 ? "[%s]:%d" : "%s:%d", host, port);
    return SHS_OK;
}

shs_status_t shs__boot_serve_start(shs__boot_t *b, const shs__boot_serve_ops_t *ops,
                                   shs__boot_serve_t **serve_p)
{
    *serve_p = NULL;
    if (b->size < 2 || shs__hostport_count(b->addrs) < 2)
        return SHS_OK; /* the job did not ask for rejoins */
    shs__boot_serve_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return SHS_ERR_NO_MEMORY;
    shs_status_t st = SHS_ERR_NO_MEMORY;
    s->b = b;
    s->ops = *ops;
    s->lfd = -1;
    s->sfd = -1;
    if (shs__hostport_entry(b->addrs, b->rank, s->host, sizeof(s->host), s->port,
                            sizeof(s->port)) != SHS_OK)
        s->host[0] = '\0'; /* no entry: never the rendezvous */
    snprintf(s->who, sizeof(s->who), "rank %d", b->rank);
    s->dir = calloc((size_t)b->size, SHS_BOOT_ADDR_LEN);
    s->req = malloc(REQUEST_MAX);
    size_t dir_len = (size_t)b->size * (SHS_BOOT_ADDR_LEN + 1);
    s->reply_cap = dir_len > REPLY_MAX ? dir_len : REPLY_MAX;
    s->reply = malloc(s->reply_cap);
    if (s->dir == NULL || s->req == NULL || s->reply == NULL)
        goto err_free;
    pthread_mutex_init(&s->lock, NULL);
    if ((st = shs__hs_init(&s->rdv, b, SERVE_PENDING, s->who, decide_rdv, s)) != SHS_OK)
        goto err_destroy_lock;
    if ((st = shs__hs_init(&s->svc, b, SERVE_PENDING, s->who, decide_svc, s)) != SHS_OK)
        goto err_fini_rdv;
    s->rdv.admitted = admitted;
    s->svc.admitted = admitted;
    if ((st = service_listen(s)) != SHS_OK)
        goto err_close_sfd;
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        SHS_ERROR("rejoin listeners: pipe: %s", strerror(errno));
        st = SHS_ERR_IO;
        goto err_close_sfd;
    }
    int rc = pthread_create(&s->thread, NULL, serve_main, s);
    if (rc != 0) {
        SHS_ERROR("rejoin listeners: pthread_create: %s", strerror(rc));
        st = SHS_ERR_NO_RESOURCE;
        goto err_close_pipe;
    }
    *serve_p = s;
    return SHS_OK;

err_close_pipe:
    close(s->wake[0]);
    close(s->wake[1]);
err_close_sfd:
    if (s->sfd >= 0)
        close(s->sfd);
    shs__hs_fini(&s->svc);
err_fini_rdv:
    shs__hs_fini(&s->rdv);
err_destroy_lock:
    pthread_mutex_destroy(&s->lock);
err_free:
    free(s->dir);
    free(s->req);
    free(s->reply);
    free(s);
    return st;
}

void shs__boot_serve_stop(shs__boot_serve_t *s)
{
    if (s == NULL)
        return;
    char byte = 1;
    if (write(s->wake[1], &byte, 1) != 1)
        SHS_WARN("rejoin listeners: cannot wake their thread: %s", strerror(errno));
    pthread_join(s->thread, NULL);
    if (s->lfd >= 0)
        close(s->lfd);
    close(s->sfd);
    close(s->wake[0]);
    close(s->wake[1]);
    shs__hs_fini(&s->rdv);
    shs__hs_fini(&s->svc);
    pthread_mutex_destroy(&s->lock);
    free(s->dir);
    free(s->req);
    free(s->reply);
    free(s);
}

const char *shs__boot_serve_addr(const shs__boot_serve_t *s)
{
    return s->addr;
}

void shs__boot_serve_set_addr(shs__boot_serve_t *s, int rank, const char *addr)
{
    if (rank < 0 || rank >= s->b->size)
        return;
    pthread_mutex_lock(&s->lock);
    snprintf(s->dir + (size_t)rank * SHS_BOOT_ADDR_LEN, SHS_BOOT_ADDR_LEN, "%s", addr);
    pthread_mutex_unlock(&s->lock);
}

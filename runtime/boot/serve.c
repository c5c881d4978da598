/* After start-up: the rendezvous for ranks that rejoin a running job. A
 * thread per context whose rank has an address in SHS_BOOTSTRAP; it listens
 * only while the transport says this rank is the rendezvous. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

/* How often the thread asks whether this rank became (or stopped being) the
 * rendezvous: a rejoiner retries for SHS_BOOTSTRAP_TIMEOUT_MS, so a fifth of
 * a second of takeover costs it nothing. */
#define SERVE_TICK_MS 200
/* Rejoin handshakes at once; the oldest goes beyond (admit.c says why). */
#define SERVE_PENDING 16
#define LISTEN_RETRY_MS 5000

struct shs__boot_serve {
    shs__boot_t *b;
    shs__boot_serve_ops_t ops;
    char host[256], port[8]; /* this rank's entry */
    char who[48];            /* "the rendezvous (rank 2)" */
    int lfd;
    uint64_t retry_ns;       /* after a failed listen: when to try again */
    int wake[2];             /* stop: a byte on wake[1] */
    pthread_t thread;
    hs_set_t hs;
    struct pollfd pfd[2 + SERVE_PENDING];
};

/* An authenticated rejoiner claims a rank: the transport judges it. A rank
 * the job has seen fail would be connected again here; this version cannot
 * do that yet, and says so. */
static shs_status_t decide_rejoin(hs_set_t *set, hs_pending_t *pc, link_t **link_p)
{
    shs__boot_serve_t *s = set->arg;
    char why[160] = "";
    (void)link_p;
    shs_status_t st = s->ops.verdict(s->ops.arg, (int)pc->hello.rank, why, sizeof(why));
    if (st == SHS_OK) {
        st = SHS_ERR_UNSUPPORTED;
        snprintf(why, sizeof(why),
                 "rank %u has failed and may rejoin, but this version cannot connect a "
                 "rejoined rank's queue pairs and regions yet", pc->hello.rank);
    }
    shs__hs_refuse(set, pc, st, "%s", why);
    return st;
}

static void listen_or_close(shs__boot_serve_t *s)
{
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
        shs__hs_expire(&s->hs);
        int left = SERVE_TICK_MS;
        size_t n = 0;
        s->pfd[n].fd = s->wake[0];
        s->pfd[n].events = POLLIN;
        s->pfd[n++].revents = 0;
        size_t lidx = n;
        if (s->lfd >= 0) {
            s->pfd[n].fd = s->lfd;
            s->pfd[n].events = POLLIN;
            s->pfd[n++].revents = 0;
        }
        size_t npend = shs__hs_pollset(&s->hs, s->pfd + n, &left);
        int rc = poll(s->pfd, n + npend, left);
        if (rc < 0 && errno != EINTR) {
            SHS_ERROR("rendezvous for rejoiners: poll: %s; it stops", strerror(errno));
            break;
        }
        if (rc <= 0)
            continue;
        if (s->pfd[0].revents != 0)
            break;
        shs__hs_serve(&s->hs, s->pfd + n, npend);
        if (s->lfd >= 0 && lidx < n && (s->pfd[lidx].revents & POLLIN))
            shs__hs_accept(&s->hs, s->lfd);
    }
    return NULL;
}

shs_status_t shs__boot_serve_start(shs__boot_t *b, const shs__boot_serve_ops_t *ops,
                                   shs__boot_serve_t **serve_p)
{
    char host[256], port[8];
    *serve_p = NULL;
    if (b->size < 2 ||
        shs__hostport_entry(b->addrs, b->rank, host, sizeof(host), port, sizeof(port)) !=
            SHS_OK)
        return SHS_OK; /* no address: never the rendezvous */
    shs__boot_serve_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return SHS_ERR_NO_MEMORY;
    s->b = b;
    s->ops = *ops;
    s->lfd = -1;
    snprintf(s->host, sizeof(s->host), "%s", host);
    snprintf(s->port, sizeof(s->port), "%s", port);
    snprintf(s->who, sizeof(s->who), "the rendezvous (rank %d)", b->rank);
    shs_status_t st = shs__hs_init(&s->hs, b, SERVE_PENDING, s->who, decide_rejoin, s);
    if (st != SHS_OK)
        goto err_free;
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        SHS_ERROR("rendezvous for rejoiners: pipe: %s", strerror(errno));
        st = SHS_ERR_IO;
        goto err_fini;
    }
    int rc = pthread_create(&s->thread, NULL, serve_main, s);
    if (rc != 0) {
        SHS_ERROR("rendezvous for rejoiners: pthread_create: %s", strerror(rc));
        st = SHS_ERR_NO_RESOURCE;
        goto err_close_pipe;
    }
    *serve_p = s;
    return SHS_OK;

err_close_pipe:
    close(s->wake[0]);
    close(s->wake[1]);
err_fini:
    shs__hs_fini(&s->hs);
err_free:
    free(s);
    return st;
}

void shs__boot_serve_stop(shs__boot_serve_t *s)
{
    if (s == NULL)
        return;
    char byte = 1;
    if (write(s->wake[1], &byte, 1) != 1)
        SHS_WARN("rendezvous for rejoiners: cannot wake its thread: %s", strerror(errno));
    pthread_join(s->thread, NULL);
    if (s->lfd >= 0)
        close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    shs__hs_fini(&s->hs);
    free(s);
}

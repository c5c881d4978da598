/* The listening side of the handshake, shared by rank 0 at start-up
 * (admit.c) and by the rendezvous for rejoiners (serve.c): every pending
 * handshake runs at once without blocking on any peer, each with its own
 * deadline; what to do with a peer that proved the token is the owner's
 * decision (hs_set_t.decide). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

void shs__hs_refuse(hs_set_t *set, hs_pending_t *pc, shs_status_t st, const char *fmt, ...)
{
    char why[160], text[ERROR_TEXT_MAX];
    va_list ap;
    link_t l;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    SHS_ERROR("refused the connection from %s: %s", pc->from, why);
    snprintf(text, sizeof(text), "%s refused this rank: %s", set->who, why);
    shs__boot_link_init(&l, pc->fd, true);
    shs__boot_send_error_nowait(&l, st, -1, text);
    if (set->ref.st == SHS_OK) {
        set->ref.st = st;
        snprintf(set->ref.what, sizeof(set->ref.what), "%s from %s", why, pc->from);
    }
}

/* Frames are tiny and the connection is fresh: the socket buffer takes them
 * whole, and a peer that does not read is not one we wait for. */
static bool send_small_nowait(hs_pending_t *pc, uint16_t type, const void *payload, size_t len)
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

/* A whole frame is in pc->in. Returns 1 when the connection was admitted
 * (its descriptor now belongs to the owner's link), 0 to keep waiting, -1
 * to close it. */
static int hs_frame(hs_set_t *set, hs_pending_t *pc, const shs__boot_hdr_t *h)
{
    const uint8_t *body = pc->in + SHS_BOOT_HDR_LEN;
    uint8_t proof[SHS_BOOT_PROOF_LEN];
    const char *token = set->b->token;

    if (pc->state == HS_HELLO) {
        shs__boot_hello_decode(body, h->length, &pc->hello);
        if (shs__random(pc->nonce, sizeof(pc->nonce)) != SHS_OK ||
            !send_small_nowait(pc, FT_CHALLENGE, pc->nonce, sizeof(pc->nonce)))
            return -1;
        pc->state = HS_AUTH;
        return 0;
    }
    if (shs__boot_proof(token, SHS_BOOT_PROOF_JOIN, &pc->hello, pc->nonce, proof) != SHS_OK)
        return -1;
    if (!shs__mac_equal(proof, body)) {
        shs__hs_refuse(set, pc, SHS_ERR_TOKEN_MISMATCH,
                       "the peer claiming rank %u could not prove it holds this job's token "
                       "(another SHS_JOB_TOKEN, or not a rank of this job)", pc->hello.rank);
        return -1;
    }
    /* Authenticated: only now does the peer learn anything about the job. */
    uint32_t rank = pc->hello.rank, size = pc->hello.size;
    if (size != (uint32_t)set->b->size) {
        shs__hs_refuse(set, pc, SHS_ERR_SIZE_MISMATCH,
                       "rank %u believes the job has %u ranks, this one believes %d", rank,
                       size, set->b->size);
        return -1;
    }
    if (rank >= (uint32_t)set->b->size) {
        shs__hs_refuse(set, pc, SHS_ERR_CONFIG, "rank %u is out of range 0..%d", rank,
                       set->b->size - 1);
        return -1;
    }
    link_t *l = NULL;
    if (set->decide(set, pc, &l) != SHS_OK)
        return -1; /* refused by decide */
    shs__boot_link_init(l, pc->fd, true);
    snprintf(l->from, sizeof(l->from), "%s", pc->from);
    if (shs__boot_proof(token, SHS_BOOT_PROOF_ROOT, &pc->hello, pc->nonce, proof) != SHS_OK ||
        shs__boot_proof(token, SHS_BOOT_PROOF_SESSION, &pc->hello, pc->nonce, l->key) !=
            SHS_OK ||
        !send_small_nowait(pc, FT_ACCEPT, proof, sizeof(proof))) {
        l->fd = -1;
        return -1;
    }
    l->authed = true;
    SHS_DEBUG("rank %u joined from %s", rank, pc->from);
    if (set->admitted != NULL)
        set->admitted(set, l, pc);
    return 1;
}

/* Read what a pending connection has sent. Returns as hs_frame. */
static int hs_read(hs_set_t *set, hs_pending_t *pc)
{
    for (;;) {
        shs__boot_hdr_t h = {0};
        size_t want = SHS_BOOT_HDR_LEN;
        uint16_t type = pc->state == HS_HELLO ? FT_HELLO : FT_AUTH;
        uint32_t len = pc->state == HS_HELLO ? SHS_BOOT_HELLO_LEN : SHS_BOOT_PROOF_LEN;

        if (pc->in_len >= SHS_BOOT_HDR_LEN) {
            shs_status_t st = shs__boot_hdr_decode(pc->in, pc->in_len, len, &h);
            if (st == SHS_ERR_VERSION_MISMATCH) {
                shs__hs_refuse(set, pc, st, "bootstrap protocol version %u, this rank speaks %u",
                               shs__get_u16(pc->in + 4), SHS_BOOT_PROTOCOL_VERSION);
                return -1;
            }
            if (st != SHS_OK || h.type != type || h.length != len) {
                shs__hs_refuse(set, pc, SHS_ERR_PROTOCOL,
                               "not a shadowsync %s (magic 0x%08x, type %u, length %u)",
                               pc->state == HS_HELLO ? "hello" : "proof", shs__get_u32(pc->in),
                               shs__get_u16(pc->in + 6), shs__get_u32(pc->in + 8));
                return -1;
            }
            want = SHS_BOOT_HDR_LEN + len;
        }
        if (pc->in_len == want) {
            int rc = hs_frame(set, pc, &h);
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

shs_status_t shs__hs_init(hs_set_t *set, shs__boot_t *b, size_t cap, const char *who,
                          shs__hs_decide_fn decide, void *arg)
{
    memset(set, 0, sizeof(*set));
    set->b = b;
    set->cap = cap;
    set->who = who;
    set->decide = decide;
    set->arg = arg;
    set->ref.st = SHS_OK;
    set->pend = calloc(cap, sizeof(*set->pend));
    if (set->pend == NULL) {
        SHS_ERROR("out of memory for %zu bootstrap handshakes", cap);
        return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

void shs__hs_fini(hs_set_t *set)
{
    for (size_t i = 0; i < set->npend; i++)
        close(set->pend[i].fd);
    free(set->pend);
    set->pend = NULL;
    set->npend = 0;
}

void shs__hs_accept(hs_set_t *set, int lfd)
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
        if (set->npend == set->cap) {
            size_t old = 0;
            for (size_t i = 1; i < set->cap; i++)
                if (set->pend[i].since_ns < set->pend[old].since_ns)
                    old = i;
            SHS_WARN("%zu bootstrap handshakes in progress: dropped the oldest, from %s",
                     set->cap, set->pend[old].from);
            close(set->pend[old].fd);
            set->pend[old] = set->pend[--set->npend];
        }
        hs_pending_t *pc = &set->pend[set->npend++];
        memset(pc, 0, sizeof(*pc));
        pc->fd = fd;
        pc->state = HS_HELLO;
        pc->since_ns = shs__now_ns();
        pc->dl = shs__deadline_in_ms(set->b->handshake_ms);
        describe_sockaddr(&ss, pc->from, sizeof(pc->from));
    }
}

void shs__hs_refuse_all(hs_set_t *set, shs_status_t st, const char *why)
{
    for (size_t i = 0; i < set->npend; i++)
        shs__hs_refuse(set, &set->pend[i], st, "%s", why);
}

void shs__hs_expire(hs_set_t *set)
{
    for (size_t i = set->npend; i-- > 0;) {
        hs_pending_t *pc = &set->pend[i];
        if (!shs__deadline_passed(pc->dl))
            continue;
        shs__hs_refuse(set, pc, SHS_ERR_TIMEOUT,
                       "no complete %s within %d ms (SHS_BOOTSTRAP_HANDSHAKE_TIMEOUT_MS; %zu "
                       "bytes received)", pc->state == HS_HELLO ? "hello" : "proof",
                       set->b->handshake_ms, pc->in_len);
        close(pc->fd);
        set->pend[i] = set->pend[--set->npend];
    }
}

size_t shs__hs_pollset(hs_set_t *set, struct pollfd *pfd, int *left_ms)
{
    for (size_t i = 0; i < set->npend; i++) {
        int t = shs__deadline_remaining_ms(set->pend[i].dl);
        if (t < *left_ms)
            *left_ms = t + 1;
        pfd[i].fd = set->pend[i].fd;
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
    }
    return set->npend;
}

int shs__hs_serve(hs_set_t *set, const struct pollfd *pfd, size_t npolled)
{
    const short ready = POLLIN | POLLHUP | POLLERR;
    int admitted = 0;

    /* Backwards: removing pend[i] moves the last one, already handled, into i. */
    for (size_t i = npolled; i-- > 0;) {
        if (!(pfd[i].revents & ready))
            continue;
        int got = hs_read(set, &set->pend[i]);
        if (got == 0)
            continue;
        if (got > 0)
            admitted++;
        else
            close(set->pend[i].fd);
        set->pend[i] = set->pend[--set->npend];
    }
    return admitted;
}

/* The ranks other than 0: connect, prove the token, check rank 0's proof. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

/* Connect retries start fast (rank 0 is usually up within milliseconds on a
 * single host) and back off to 1 s so hundreds of ranks waiting on a slow
 * rank 0 do not flood it with SYNs. */
#define CONNECT_BACKOFF_FIRST_MS 10
#define CONNECT_BACKOFF_MAX_MS 1000
/* A rejoiner gives each listed address this long to answer before the next. */
#define REJOIN_CONNECT_MS 1000

int shs__boot_connect_once(const char *host, const char *port, shs__deadline_t dl, int *err_p)
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
    if (fd >= 0 && shs__boot_socket_options(fd) < 0) {
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
    shs_status_t st = shs__boot_recv_hdr(&b->root, &h, dl, 0, what);
    if (st != SHS_OK)
        return st;
    if (h.type == FT_ERROR)
        return shs__boot_recv_error(&b->root, &h, dl, what);
    if (h.type != type || h.length != len) {
        SHS_ERROR("unexpected bootstrap frame type %u (length %u) from rank 0 during %s",
                  h.type, h.length, what);
        return SHS_ERR_PROTOCOL;
    }
    st = shs__boot_recv_body(&b->root, payload, len, dl, 0, what);
    if (st == SHS_OK)
        st = shs__boot_recv_end(&b->root, dl, 0, what);
    return st;
}

/* The first MAC of a process loads and initialises the crypto library's
 * provider, which took seconds in a loaded emulated guest with eight ranks
 * starting at once: do it before any handshake deadline starts counting. */
shs_status_t shs__boot_warm_up(const char *token)
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

/* The joiner's handshake on a connected socket fd, up to rank 0's (or the
 * rendezvous') proof and the session key. */
static shs_status_t join_handshake(shs__boot_t *b, int fd, const char *host, const char *port,
                                   shs__deadline_t dl)
{
    shs__boot_hello_t hello = {.rank = (uint32_t)b->rank, .size = (uint32_t)b->size};
    uint8_t raw[SHS_BOOT_HELLO_LEN], nonce_root[SHS_BOOT_NONCE_LEN];
    uint8_t proof[SHS_BOOT_PROOF_LEN], theirs[SHS_BOOT_PROOF_LEN];

    shs__boot_link_init(&b->root, fd, false);
    snprintf(b->root.from, sizeof(b->root.from), "%s:%s", host, port);
    shs_status_t st = shs__random(hello.nonce, sizeof(hello.nonce));
    if (st != SHS_OK)
        return st;
    shs__boot_hello_encode(&hello, raw);
    st = shs__boot_send(&b->root, FT_HELLO, raw, sizeof(raw), NULL, 0, dl, 0, "hello");
    if (st == SHS_OK)
        st = join_expect(b, FT_CHALLENGE, nonce_root, sizeof(nonce_root), dl, "hello");
    if (st == SHS_OK)
        st = shs__boot_proof(b->token, SHS_BOOT_PROOF_JOIN, &hello, nonce_root, proof);
    if (st == SHS_OK)
        st = shs__boot_send(&b->root, FT_AUTH, proof, sizeof(proof), NULL, 0, dl, 0, "handshake");
    if (st == SHS_OK)
        st = join_expect(b, FT_ACCEPT, theirs, sizeof(theirs), dl, "handshake");
    if (st == SHS_OK)
        st = shs__boot_proof(b->token, SHS_BOOT_PROOF_ROOT, &hello, nonce_root, proof);
    if (st != SHS_OK)
        return st;
    if (!shs__mac_equal(proof, theirs)) {
        SHS_ERROR("the rank at %s:%s could not prove it holds this job's token: refusing to "
                  "join it (another job's rank on this port, or an impostor)", host, port);
        return SHS_ERR_TOKEN_MISMATCH;
    }
    st = shs__boot_proof(b->token, SHS_BOOT_PROOF_SESSION, &hello, nonce_root, b->root.key);
    if (st != SHS_OK)
        return st;
    b->root.authed = true;
    return SHS_OK;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

shs_status_t shs__boot_join(shs__boot_t *b, const char *host, const char *port,
                            shs__deadline_t dl)
{
    int backoff = CONNECT_BACKOFF_FIRST_MS;
    int err = 0, tries = 0;
    int fd;

    /* Before connecting: the first use of the random generator seeds it,
     * which must not count against rank 0's handshake deadline. */
    shs_status_t st = shs__boot_warm_up(b->token);
    if (st != SHS_OK)
        return st;
    while ((fd = shs__boot_connect_once(host, port, dl, &err)) < 0) {
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
        nap_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 < CONNECT_BACKOFF_MAX_MS ? backoff * 2 : CONNECT_BACKOFF_MAX_MS;
    }
    st = join_handshake(b, fd, host, port, dl);
    if (st != SHS_OK)
        return st;
    return join_expect(b, FT_WELCOME, NULL, 0, dl, "welcome");
}

/* The reply of one request on an authenticated link: FT_REPLY, malloc'ed. */
static shs_status_t recv_reply(shs__boot_t *b, void **reply_p, size_t *len_p, shs__deadline_t dl)
{
    shs__boot_hdr_t h;
    const char *what = "a rejoin request";
    shs_status_t st = shs__boot_recv_hdr(&b->root, &h, dl, -1, what);
    if (st != SHS_OK)
        return st;
    if (h.type == FT_ERROR)
        return shs__boot_recv_error(&b->root, &h, dl, what);
    if (h.type != FT_REPLY) {
        SHS_ERROR("unexpected frame type %u from %s during %s", h.type, b->root.from, what);
        return SHS_ERR_PROTOCOL;
    }
    uint8_t *buf = malloc(h.length > 0 ? h.length : 1);
    if (buf == NULL)
        return SHS_ERR_NO_MEMORY;
    st = shs__boot_recv_body(&b->root, buf, h.length, dl, -1, what);
    if (st == SHS_OK)
        st = shs__boot_recv_end(&b->root, dl, -1, what);
    if (st != SHS_OK) {
        free(buf);
        return st;
    }
    *reply_p = buf;
    *len_p = h.length;
    return SHS_OK;
}

/* Connect to host:port (one try of at most REJOIN_CONNECT_MS), handshake,
 * one request of `kind`, its reply. SHS_ERR_IO when nothing answers. */
static shs_status_t request_at(shs__boot_t *b, const char *host, const char *port,
                               uint32_t kind, const void *req, size_t len, void **reply_p,
                               size_t *reply_len_p, shs__deadline_t dl)
{
    int err = 0;
    int left = shs__deadline_remaining_ms(dl);
    shs__deadline_t step =
        shs__deadline_in_ms(left < REJOIN_CONNECT_MS ? left : REJOIN_CONNECT_MS);
    int fd = shs__boot_connect_once(host, port, step, &err);
    if (fd < 0) {
        SHS_DEBUG("rejoin: nothing answers at %s:%s (%s)", host, port, strerror(err));
        return SHS_ERR_IO;
    }
    socklen_t sl = sizeof(b->local);
    b->has_local = getsockname(fd, (struct sockaddr *)&b->local, &sl) == 0;
    shs_status_t st = join_handshake(b, fd, host, port, dl);
    uint8_t k[4];
    shs__put_u32(k, kind);
    if (st == SHS_OK)
        st = shs__boot_send(&b->root, FT_REQUEST, k, sizeof(k), req, len, dl, -1,
                            "a rejoin request");
    if (st == SHS_OK)
        st = recv_reply(b, reply_p, reply_len_p, dl);
    shs__boot_link_close(&b->root);
    return st;
}

shs_status_t shs__boot_request(shs__boot_t *b, const char *addr, const void *req, size_t len,
                               void **reply_p, size_t *reply_len_p)
{
    char host[256], port[8];
    if (shs__hostport_split(addr, host, sizeof(host), port, sizeof(port)) != SHS_OK) {
        SHS_ERROR("rejoin: \"%s\" is not a service address", addr);
        return SHS_ERR_PROTOCOL;
    }
    shs__deadline_t dl = shs__deadline_in_ms(b->timeout_ms);
    int backoff = CONNECT_BACKOFF_FIRST_MS;
    for (;;) {
        shs_status_t st = request_at(b, host, port, SHS_BOOT_REQ_TRANSPORT, req, len, reply_p,
                                     reply_len_p, dl);
        /* busy, or not yet ready for this rank: ask again until the deadline */
        if (st != SHS_ERR_BAD_STATE && st != SHS_ERR_IO)
            return st;
        int left = shs__deadline_remaining_ms(dl);
        if (left == 0) {
            SHS_ERROR("rejoin: the service at %s did not take the request within %d ms "
                      "(SHS_BOOTSTRAP_TIMEOUT_MS)", addr, b->timeout_ms);
            return st == SHS_ERR_IO ? SHS_ERR_TIMEOUT : st;
        }
        nap_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 < CONNECT_BACKOFF_MAX_MS ? backoff * 2 : CONNECT_BACKOFF_MAX_MS;
    }
}

/* One try at the rendezvous at entry i of SHS_BOOTSTRAP: the directory, or
 * SHS_ERR_IO when nothing answers there. */
static shs_status_t rejoin_at(shs__boot_t *b, int i, shs__deadline_t dl)
{
    char host[256], port[8];
    if (shs__hostport_entry(b->addrs, i, host, sizeof(host), port, sizeof(port)) != SHS_OK)
        return SHS_ERR_CONFIG;
    void *dir = NULL;
    size_t len = 0;
    shs_status_t st = request_at(b, host, port, SHS_BOOT_REQ_DIRECTORY, NULL, 0, &dir, &len, dl);
    if (st != SHS_OK)
        return st;
    if (len != (size_t)b->size * (SHS_BOOT_ADDR_LEN + 1)) {
        SHS_ERROR("rejoin: the directory from %s:%s has %zu bytes, expected %zu", host, port,
                  len, (size_t)b->size * (SHS_BOOT_ADDR_LEN + 1));
        free(dir);
        return SHS_ERR_PROTOCOL;
    }
    uint8_t *d = dir;
    for (int r = 0; r < b->size; r++)
        d[(size_t)r * SHS_BOOT_ADDR_LEN + SHS_BOOT_ADDR_LEN - 1] = '\0';
    free(b->dir);
    b->dir = d;
    SHS_INFO("rejoin: rank %d admitted by the rendezvous at %s:%s", b->rank, host, port);
    return SHS_OK;
}

const char *shs__boot_dir_addr(const shs__boot_t *b, int rank)
{
    return b->dir != NULL ? (const char *)b->dir + (size_t)rank * SHS_BOOT_ADDR_LEN : "";
}

bool shs__boot_dir_alive(const shs__boot_t *b, int rank)
{
    return b->dir != NULL && b->dir[(size_t)b->size * SHS_BOOT_ADDR_LEN + (size_t)rank] != 0;
}

shs_status_t shs__boot_local_addr(const shs__boot_t *b, struct sockaddr_storage *ss)
{
    socklen_t sl = sizeof(*ss);
    int fd = b->root.fd;
    for (int r = 1; fd < 0 && b->peer != NULL && r < b->size; r++)
        fd = b->peer[r].fd;
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)ss, &sl) == 0)
        return SHS_OK;
    if (b->has_local) {
        *ss = b->local;
        return SHS_OK;
    }
    SHS_ERROR("rejoin service: no bootstrap connection to learn this rank's address from");
    return SHS_ERR_IO;
}

shs_status_t shs__boot_rejoin(shs__boot_t *b, shs__deadline_t dl)
{
    int n = shs__hostport_count(b->addrs);
    int backoff = CONNECT_BACKOFF_FIRST_MS;
    shs_status_t last = SHS_ERR_TIMEOUT;

    shs_status_t st = shs__boot_warm_up(b->token);
    if (st != SHS_OK)
        return st;
    for (;;) {
        for (int i = 0; i < n; i++) {
            st = rejoin_at(b, i, dl);
            /* nothing there, or it went away mid-handshake: the next address */
            if (st == SHS_ERR_IO || st == SHS_ERR_PEER_FAILED || st == SHS_ERR_TIMEOUT)
                continue;
            if (st != SHS_ERR_BAD_STATE)
                return st; /* admitted, or the rendezvous' refusal (logged) */
            last = st;     /* alive, or its failure not seen yet: ask again */
            break;
        }
        int left = shs__deadline_remaining_ms(dl);
        if (left == 0) {
            SHS_ERROR("rejoin: no rendezvous at %s admitted rank %d within %d ms "
                      "(SHS_BOOTSTRAP_TIMEOUT_MS)%s", b->addrs, b->rank, b->timeout_ms,
                      last == SHS_ERR_BAD_STATE ? ": the running job still counts it alive"
                                                : ": is the job running at these addresses?");
            return last;
        }
        nap_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 < CONNECT_BACKOFF_MAX_MS ? backoff * 2 : CONNECT_BACKOFF_MAX_MS;
    }
}

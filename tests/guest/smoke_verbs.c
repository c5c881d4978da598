/*
 * Guest smoke test: two processes connect two RC queue pairs with plain verbs
 * and move data with RDMA WRITE and RDMA READ, verified byte for byte.
 *
 *   shs_smoke_verbs                       fork a server and a client on this host
 *   shs_smoke_verbs --server [--port P]   wait for a client (two-guest case)
 *   shs_smoke_verbs --client HOST [--port P]
 *
 * Exit status: 0 all transfers verified, 1 a step failed, 77 no RDMA device
 * with an ACTIVE port (CTest "Not Run").
 *
 * Plain verbs on purpose: this test predates transport/ and will be replaced
 * by one built on it.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "harness.h"

#define DEFAULT_PORT 18515
#define CONNECT_WINDOW_S 30.0 /* the client may start before the server */
#define ACCEPT_WINDOW_S 60.0  /* guests of a two-guest run boot seconds apart */
#define STEP_WINDOW_S 30.0    /* any single exchange or completion wait */
#define CHILD_WINDOW_S 110.0  /* stays under the CTest TIMEOUT of 120 s */

#define MSG_LEN 192
#define GUARD 64           /* bytes past each transfer that must stay untouched */
#define SENTINEL 0x5a
#define SQ_DEPTH 16
#define RD_ATOM_CAP 16
/* QP timeout 14 (~67 ms x 2^... per retry, a few seconds in total) and the
 * maximum retry counts: generous enough for a TCG guest, still finite. */
#define QP_TIMEOUT 14
#define QP_RETRY 7
#define QP_RNR_RETRY 7

static const size_t sizes[] = { 1, 4096, 1u << 20, 9u << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAX_SIZE ((size_t)9 << 20)

static const char *role = "smoke";

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    char line[512];

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", role, line);
}

static void nap_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

    nanosleep(&ts, NULL);
}

/* ---- data pattern: a different stream per (seed, size) so stale data fails ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint8_t pattern_at(uint64_t seed, size_t i)
{
    return (uint8_t)(mix64(seed + i / 8) >> (8 * (i % 8)));
}

/* Fill [0,len) with the pattern (or its complement, so that a transfer that
 * never lands cannot pass) and [len,len+GUARD) with SENTINEL. */
static void fill(uint8_t *buf, size_t len, uint64_t seed, int complement)
{
    uint8_t flip = complement ? 0xff : 0;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t v = mix64(seed + i / 8);
        for (int b = 0; b < 8; b++)
            buf[i + b] = (uint8_t)(v >> (8 * b)) ^ flip;
    }
    for (; i < len; i++)
        buf[i] = pattern_at(seed, i) ^ flip;
    memset(buf + len, SENTINEL, GUARD);
}

/* Returns 0 when [0,len) holds the pattern and the guard is intact; else 1
 * with the first bad offset and the bytes seen and expected. */
static int check(const uint8_t *buf, size_t len, uint64_t seed, size_t *off_p,
                 unsigned *got_p, unsigned *want_p)
{
    for (size_t i = 0; i < len + GUARD; i++) {
        uint8_t want = i < len ? pattern_at(seed, i) : SENTINEL;
        if (i + 8 <= len && i % 8 == 0) {
            uint64_t v = mix64(seed + i / 8);
            int same = 1;
            for (int b = 0; b < 8; b++)
                same &= buf[i + b] == (uint8_t)(v >> (8 * b));
            if (same) {
                i += 7;
                continue;
            }
        }
        if (buf[i] != want) {
            *off_p = i;
            *got_p = buf[i];
            *want_p = want;
            return 1;
        }
    }
    return 0;
}

static const char *human(size_t n, char *out, size_t outlen)
{
    if (n >= (1u << 20) && n % (1u << 20) == 0)
        snprintf(out, outlen, "%zu MiB", n >> 20);
    else if (n >= 1024 && n % 1024 == 0)
        snprintf(out, outlen, "%zu KiB", n >> 10);
    else
        snprintf(out, outlen, "%zu B", n);
    return out;
}

/* ---- TCP side channel: non-blocking sockets, every wait bounded by poll ---- */

static int wait_fd(int fd, short events, double deadline, const char *step)
{
    for (;;) {
        double left = deadline - now_s();
        struct pollfd pfd = { .fd = fd, .events = events };
        int n;

        if (left <= 0) {
            say("%s: timed out", step);
            return -1;
        }
        n = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR) {
            say("%s: poll: %s", step, strerror(errno));
            return -1;
        }
    }
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int send_msg(int fd, const char *msg, const char *step)
{
    char rec[MSG_LEN] = { 0 };
    size_t done = 0;
    double deadline = now_s() + STEP_WINDOW_S;

    snprintf(rec, sizeof(rec), "%s", msg);
    while (done < sizeof(rec)) {
        ssize_t n = send(fd, rec + done, sizeof(rec) - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT, deadline, step))
                return -1;
        } else if (n < 0 && errno != EINTR) {
            say("%s: send to peer: %s", step, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int recv_msg(int fd, char *rec, double window, const char *step)
{
    size_t done = 0;
    double deadline = now_s() + window;

    while (done < MSG_LEN) {
        ssize_t n = recv(fd, rec + done, MSG_LEN - done, 0);
        if (n > 0) {
            done += (size_t)n;
        } else if (n == 0) {
            say("%s: peer closed the connection (it failed or exited; see its message)",
                step);
            return -1;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN, deadline, step))
                return -1;
        } else if (errno != EINTR) {
            say("%s: recv from peer: %s", step, strerror(errno));
            return -1;
        }
    }
    rec[MSG_LEN - 1] = '\0';
    return 0;
}

static int tcp_listen(const char *bind_addr, int port, int *port_p)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    socklen_t salen = sizeof(sa);
    int one = 1;
    int fd;

    sa.sin_addr.s_addr = bind_addr ? inet_addr(bind_addr) : htonl(INADDR_ANY);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        say("listen socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1) ||
        set_nonblock(fd) || getsockname(fd, (struct sockaddr *)&sa, &salen)) {
        say("listen on tcp port %d: %s", port, strerror(errno));
        close(fd);
        return -1;
    }
    *port_p = ntohs(sa.sin_port);
    return fd;
}

static int tcp_accept(int lfd)
{
    double deadline = now_s() + ACCEPT_WINDOW_S;
    int one = 1;

    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return fd;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            say("accept client: %s", strerror(errno));
            return -1;
        }
        if (wait_fd(lfd, POLLIN, deadline, "accept client (no client connected)"))
            return -1;
    }
}

/* Retries for CONNECT_WINDOW_S so that the client may start first. */
static int tcp_connect(const char *host, int port)
{
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
    struct addrinfo *ai = NULL;
    char portstr[16];
    double deadline = now_s() + CONNECT_WINDOW_S;
    int last_err = 0;
    int one = 1;
    int rc;

    snprintf(portstr, sizeof(portstr), "%d", port);
    rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc) {
        say("resolve server address %s: %s", host, gai_strerror(rc));
        return -1;
    }
    while (now_s() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int err = 0;
        socklen_t errlen = sizeof(err);

        if (fd < 0) {
            say("connect socket: %s", strerror(errno));
            break;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            err = 0;
        } else if (errno == EINPROGRESS) {
            double attempt = now_s() + 2.0;
            struct pollfd pfd = { .fd = fd, .events = POLLOUT };
            double until = attempt < deadline ? attempt : deadline;
            int n = poll(&pfd, 1, (int)((until - now_s()) * 1000) + 1);
            if (n > 0)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &errlen);
            else
                err = n == 0 ? ETIMEDOUT : errno;
        } else {
            err = errno;
        }
        if (err == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            freeaddrinfo(ai);
            return fd;
        }
        close(fd);
        last_err = err;
        nap_us(200000);
    }
    freeaddrinfo(ai);
    say("connect to server %s:%d: %s (gave up after %.0f s)", host, port,
        strerror(last_err ? last_err : ETIMEDOUT), CONNECT_WINDOW_S);
    return -1;
}

/* ---- verbs ---- */

struct peer_info {
    unsigned lid, qpn, psn, rkey, mtu, rd_atom;
    unsigned long long addr, len, max_msg;
    union ibv_gid gid;
};

struct smoke {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *buf;
    size_t buf_len;
    char dev_name[IBV_SYSFS_NAME_MAX];
    uint8_t port;
    int gid_index; /* -1: no GRH (InfiniBand LID routing) */
    union ibv_gid gid;
    struct ibv_port_attr port_attr;
    struct ibv_device_attr dev_attr;
    unsigned psn;
    int sock;
};

static const char *wc_hint(enum ibv_wc_status st)
{
    switch (st) {
    case IBV_WC_RETRY_EXC_ERR:
        return "peer unreachable or dead; check the GID index, the path MTU and that both "
               "sides use the same link";
    case IBV_WC_REM_ACCESS_ERR:
        return "peer rejected the rkey/address; check the exchanged rkey, addr and length";
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
        return "message too long for the device or peer (max_msg_sz)";
    case IBV_WC_WR_FLUSH_ERR:
        return "flushed after an earlier error on this QP";
    default:
        return "see the peer's output";
    }
}

static int first_active_port(struct ibv_context *ctx, uint8_t *port_p,
                             struct ibv_port_attr *pa_p)
{
    struct ibv_device_attr da;

    if (ibv_query_device(ctx, &da))
        return -1;
    for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
            *port_p = (uint8_t)p;
            *pa_p = pa;
            return 0;
        }
    }
    return -1;
}

static int read_sysfs_line(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "r");
    int ok;

    if (!f)
        return -1;
    ok = fgets(out, (int)outlen, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

/* The RoCE v2 GID that carries an IPv4 address (::ffff:a.b.c.d): routable
 * over the guest link, unlike the link-local index 0. */
static int pick_gid(struct smoke *s)
{
    const char *env = getenv("SHS_VM_GID_INDEX");
    static const uint8_t v4prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

    if (env && *env) {
        char *end;
        long idx = strtol(env, &end, 10);
        if (*end || idx < 0 || idx >= s->port_attr.gid_tbl_len) {
            say("query gid: SHS_VM_GID_INDEX=%s is not an index below %d", env,
                s->port_attr.gid_tbl_len);
            return -1;
        }
        s->gid_index = (int)idx;
    } else if (s->port_attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        s->gid_index = -1; /* InfiniBand: route by LID */
        return 0;
    } else {
        s->gid_index = -1;
        for (int i = 0; i < s->port_attr.gid_tbl_len && s->gid_index < 0; i++) {
            char path[256], type[64];
            union ibv_gid g;
            snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
                     s->dev_name, s->port, i);
            if (read_sysfs_line(path, type, sizeof(type)) || strcmp(type, "RoCE v2"))
                continue;
            if (ibv_query_gid(s->ctx, s->port, i, &g) == 0 &&
                memcmp(g.raw, v4prefix, sizeof(v4prefix)) == 0)
                s->gid_index = i;
        }
        if (s->gid_index < 0) {
            say("pick gid: %s port %u has no RoCE v2 GID with an IPv4 address "
                "(is an address set on its netdev?); set SHS_VM_GID_INDEX",
                s->dev_name, s->port);
            return -1;
        }
    }
    if (ibv_query_gid(s->ctx, s->port, s->gid_index, &s->gid)) {
        say("query gid %d on %s port %u: %s", s->gid_index, s->dev_name, s->port,
            strerror(errno));
        return -1;
    }
    return 0;
}

/* Opens SHS_VM_DEV, or the first device with an ACTIVE port.
 * Returns RC_OK, RC_SKIP (no such device) or RC_FAIL. */
static int open_device(struct smoke *s)
{
    const char *want = getenv("SHS_VM_DEV");
    struct ibv_device **list;
    int n = 0;
    int rc = RC_SKIP;

    list = ibv_get_device_list(&n);
    if (!list) {
        if (errno == ENOSYS || errno == ENOENT || errno == 0) {
            fprintf(stderr, "smoke: no active rdma device, skipping\n");
            return RC_SKIP;
        }
        say("open device: ibv_get_device_list: %s", strerror(errno));
        return RC_FAIL;
    }
    for (int i = 0; i < n && !s->ctx; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx;

        if (want && *want && strcmp(name, want))
            continue;
        ctx = ibv_open_device(list[i]);
        if (!ctx) {
            say("open device %s: %s", name, strerror(errno));
            if (want && *want) {
                rc = RC_FAIL;
                break;
            }
            continue;
        }
        if (first_active_port(ctx, &s->port, &s->port_attr) == 0) {
            s->ctx = ctx;
            snprintf(s->dev_name, sizeof(s->dev_name), "%s", name);
        } else {
            ibv_close_device(ctx);
        }
    }
    ibv_free_device_list(list);
    if (s->ctx)
        return RC_OK;
    if (rc == RC_SKIP && want && *want) {
        say("open device: SHS_VM_DEV=%s has no ACTIVE port or does not exist", want);
        return RC_FAIL;
    }
    if (rc == RC_SKIP)
        fprintf(stderr, "smoke: no active rdma device, skipping\n");
    return rc;
}

/* Everything up to a QP in INIT with a registered buffer. */
static int setup(struct smoke *s)
{
    struct ibv_qp_init_attr qia = {
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 1,
        .cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = 1,
                 .max_send_sge = 1, .max_recv_sge = 1 },
    };
    struct ibv_qp_attr qa = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ,
    };
    int rc;

    rc = open_device(s);
    if (rc != RC_OK)
        return rc;
    if (ibv_query_device(s->ctx, &s->dev_attr)) {
        say("query device %s: %s", s->dev_name, strerror(errno));
        goto err_close_device;
    }
    if (pick_gid(s))
        goto err_close_device;
    s->pd = ibv_alloc_pd(s->ctx);
    if (!s->pd) {
        say("alloc pd on %s: %s", s->dev_name, strerror(errno));
        goto err_close_device;
    }
    s->cq = ibv_create_cq(s->ctx, 2 * SQ_DEPTH, NULL, NULL, 0);
    if (!s->cq) {
        say("create cq on %s: %s", s->dev_name, strerror(errno));
        goto err_dealloc_pd;
    }
    s->buf_len = MAX_SIZE + GUARD;
    if (posix_memalign((void **)&s->buf, 4096, s->buf_len)) {
        say("allocate %zu-byte buffer: out of memory", s->buf_len);
        goto err_destroy_cq;
    }
    memset(s->buf, SENTINEL, s->buf_len);
    s->mr = ibv_reg_mr(s->pd, s->buf, s->buf_len,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!s->mr) {
        say("reg mr (%zu bytes) on %s: %s", s->buf_len, s->dev_name, strerror(errno));
        goto err_free_buf;
    }
    qia.send_cq = s->cq;
    qia.recv_cq = s->cq;
    s->qp = ibv_create_qp(s->pd, &qia);
    if (!s->qp) {
        say("create qp on %s: %s", s->dev_name, strerror(errno));
        goto err_dereg_mr;
    }
    qa.port_num = s->port;
    if (ibv_modify_qp(s->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS)) {
        say("modify qp 0x%x to INIT: %s", s->qp->qp_num, strerror(errno));
        goto err_destroy_qp;
    }
    s->psn = (unsigned)lrand48() & 0xffffff;
    return RC_OK;

err_destroy_qp:
    ibv_destroy_qp(s->qp);
    s->qp = NULL;
err_dereg_mr:
    ibv_dereg_mr(s->mr);
    s->mr = NULL;
err_free_buf:
    free(s->buf);
    s->buf = NULL;
err_destroy_cq:
    ibv_destroy_cq(s->cq);
    s->cq = NULL;
err_dealloc_pd:
    ibv_dealloc_pd(s->pd);
    s->pd = NULL;
err_close_device:
    ibv_close_device(s->ctx);
    s->ctx = NULL;
    return RC_FAIL;
}

static void teardown(struct smoke *s)
{
    if (s->qp && ibv_destroy_qp(s->qp))
        say("destroy qp: %s", strerror(errno));
    if (s->mr && ibv_dereg_mr(s->mr))
        say("dereg mr: %s", strerror(errno));
    free(s->buf);
    if (s->cq && ibv_destroy_cq(s->cq))
        say("destroy cq: %s", strerror(errno));
    if (s->pd && ibv_dealloc_pd(s->pd))
        say("dealloc pd: %s", strerror(errno));
    if (s->ctx && ibv_close_device(s->ctx))
        say("close device: %s", strerror(errno));
}

static unsigned resp_depth(const struct smoke *s)
{
    int d = s->dev_attr.max_qp_rd_atom;

    return (unsigned)(d < 1 ? 1 : d > RD_ATOM_CAP ? RD_ATOM_CAP : d);
}

static int exchange_info(struct smoke *s, struct peer_info *peer)
{
    char msg[MSG_LEN], gidhex[33];
    char rec[MSG_LEN];
    int n;

    for (int i = 0; i < 16; i++)
        snprintf(gidhex + 2 * i, 3, "%02x", s->gid_index >= 0 ? s->gid.raw[i] : 0);
    snprintf(msg, sizeof(msg),
             "SHS1 lid=%u qpn=%u psn=%u rkey=%u addr=%llu len=%llu mtu=%d rd=%u max=%llu gid=%s",
             s->port_attr.lid, s->qp->qp_num, s->psn, s->mr->rkey,
             (unsigned long long)(uintptr_t)s->buf, (unsigned long long)s->buf_len,
             (int)s->port_attr.active_mtu, resp_depth(s),
             (unsigned long long)s->port_attr.max_msg_sz, gidhex);
    if (send_msg(s->sock, msg, "exchange connection info") ||
        recv_msg(s->sock, rec, ACCEPT_WINDOW_S, "exchange connection info"))
        return -1;
    n = sscanf(rec, "SHS1 lid=%u qpn=%u psn=%u rkey=%u addr=%llu len=%llu mtu=%u rd=%u "
                    "max=%llu gid=%32s",
               &peer->lid, &peer->qpn, &peer->psn, &peer->rkey, &peer->addr, &peer->len,
               &peer->mtu, &peer->rd_atom, &peer->max_msg, gidhex);
    if (n != 10 || strlen(gidhex) != 32) {
        say("exchange connection info: malformed peer record \"%.60s\"", rec);
        return -1;
    }
    for (int i = 0; i < 16; i++) {
        unsigned byte;
        sscanf(gidhex + 2 * i, "%2x", &byte);
        peer->gid.raw[i] = (uint8_t)byte;
    }
    return 0;
}

static enum ibv_mtu path_mtu(const struct smoke *s, const struct peer_info *peer)
{
    unsigned m = (unsigned)s->port_attr.active_mtu;

    return (enum ibv_mtu)(peer->mtu < m ? peer->mtu : m);
}

/* INIT -> RTR -> RTS. Each side reaches RTR before it tells the other it is
 * ready, so no request reaches a QP that would drop it. */
static int connect_qp(struct smoke *s, const struct peer_info *peer)
{
    struct ibv_qp_attr qa;
    unsigned init_depth = (unsigned)(s->dev_attr.max_qp_init_rd_atom < 1 ? 1
                                     : s->dev_attr.max_qp_init_rd_atom);

    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTR;
    qa.path_mtu = path_mtu(s, peer);
    qa.dest_qp_num = peer->qpn;
    qa.rq_psn = peer->psn;
    qa.max_dest_rd_atomic = (uint8_t)resp_depth(s);
    qa.min_rnr_timer = 12;
    qa.ah_attr.dlid = (uint16_t)peer->lid;
    qa.ah_attr.sl = 0;
    qa.ah_attr.port_num = s->port;
    if (s->gid_index >= 0) {
        qa.ah_attr.is_global = 1;
        qa.ah_attr.grh.dgid = peer->gid;
        qa.ah_attr.grh.sgid_index = (uint8_t)s->gid_index;
        qa.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(s->qp, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        say("modify qp 0x%x to RTR (peer qp 0x%x, mtu %d, gid index %d): %s", s->qp->qp_num,
            peer->qpn, 128 << qa.path_mtu, s->gid_index, strerror(errno));
        return -1;
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTS;
    qa.timeout = QP_TIMEOUT;
    qa.retry_cnt = QP_RETRY;
    qa.rnr_retry = QP_RNR_RETRY;
    qa.sq_psn = s->psn;
    qa.max_rd_atomic = (uint8_t)(peer->rd_atom < init_depth ? peer->rd_atom : init_depth);
    if (qa.max_rd_atomic > RD_ATOM_CAP)
        qa.max_rd_atomic = RD_ATOM_CAP;
    if (ibv_modify_qp(s->qp, &qa, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                      IBV_QP_MAX_QP_RD_ATOMIC)) {
        say("modify qp 0x%x to RTS: %s", s->qp->qp_num, strerror(errno));
        return -1;
    }
    return 0;
}

/* Moves len bytes between our buffer and the peer's at offset 0, split into
 * messages no longer than either side's max_msg_sz, up to SQ_DEPTH in flight.
 * Every wait is bounded; the first failed completion ends the test. */
static int rdma_xfer(struct smoke *s, const struct peer_info *peer, enum ibv_wr_opcode op,
                     size_t len, unsigned *nwr_p)
{
    const char *opname = op == IBV_WR_RDMA_WRITE ? "RDMA WRITE" : "RDMA READ";
    uint64_t chunk = s->port_attr.max_msg_sz;
    size_t posted = 0, done = 0, nwr, off = 0;
    double deadline = now_s() + STEP_WINDOW_S;
    unsigned empty = 0;

    if (peer->max_msg < chunk)
        chunk = peer->max_msg;
    if (chunk == 0)
        chunk = len;
    nwr = (len + chunk - 1) / chunk;
    if (len > peer->len || len > s->buf_len) {
        say("%s %zu bytes: larger than the registered buffers", opname, len);
        return -1;
    }
    while (done < nwr) {
        struct ibv_wc wc[SQ_DEPTH];
        int n;

        while (posted < nwr && posted - done < SQ_DEPTH) {
            size_t this_len = len - off < chunk ? len - off : (size_t)chunk;
            struct ibv_sge sge = {
                .addr = (uintptr_t)(s->buf + off),
                .length = (uint32_t)this_len,
                .lkey = s->mr->lkey,
            };
            struct ibv_send_wr wr = {
                .wr_id = posted,
                .sg_list = &sge,
                .num_sge = 1,
                .opcode = op,
                .send_flags = IBV_SEND_SIGNALED,
                .wr.rdma = { .remote_addr = peer->addr + off, .rkey = peer->rkey },
            };
            struct ibv_send_wr *bad;
            int err = ibv_post_send(s->qp, &wr, &bad);
            if (err) {
                say("post %s (%zu bytes at offset %zu) on qp 0x%x: %s", opname, this_len,
                    off, s->qp->qp_num, strerror(err));
                return -1;
            }
            off += this_len;
            posted++;
        }
        n = ibv_poll_cq(s->cq, SQ_DEPTH, wc);
        if (n < 0) {
            say("poll cq for %s: ibv_poll_cq returned %d", opname, n);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                say("%s completion failed: %s (status %d, vendor err 0x%x, qp 0x%x, "
                    "wr %" PRIu64 " of %zu): %s",
                    opname, ibv_wc_status_str(wc[i].status), wc[i].status, wc[i].vendor_err,
                    wc[i].qp_num, wc[i].wr_id, nwr, wc_hint(wc[i].status));
                return -1;
            }
        }
        done += (size_t)n;
        if (n > 0) {
            empty = 0;
            continue;
        }
        if (now_s() > deadline) {
            say("%s of %zu bytes: %zu of %zu completions after %.0f s (peer stalled?)",
                opname, len, done, nwr, STEP_WINDOW_S);
            return -1;
        }
        /* Let rxe's kernel threads run on a small (emulated) CPU. */
        if (++empty % 64 == 0)
            nap_us(20);
    }
    *nwr_p = (unsigned)nwr;
    return 0;
}

static int expect_reply(struct smoke *s, const char *step, char *rec)
{
    if (recv_msg(s->sock, rec, STEP_WINDOW_S, step))
        return -1;
    if (strncmp(rec, "OK", 2)) {
        say("%s: peer reports: %s", step, rec);
        return -1;
    }
    return 0;
}

static int port_of(const char *arg)
{
    char *end;
    long p = strtol(arg, &end, 10);

    return (*end || p < 0 || p > 65535) ? -1 : (int)p;
}

/* ---- roles ---- */

/* The server is passive: it prepares and verifies its buffer on request. */
static int run_server(int lfd, int announce)
{
    struct smoke s = { .sock = -1 };
    struct peer_info peer;
    char rec[MSG_LEN], reply[MSG_LEN];
    int rc;
    unsigned checked = 0;

    rc = setup(&s);
    if (rc != RC_OK)
        return rc;
    rc = RC_FAIL;
    s.sock = tcp_accept(lfd);
    if (s.sock < 0)
        goto out;
    if (exchange_info(&s, &peer) || connect_qp(&s, &peer))
        goto out;
    if (send_msg(s.sock, "OK rts", "exchange ready") ||
        expect_reply(&s, "exchange ready", rec))
        goto out;
    for (;;) {
        unsigned long long len, seed;
        char cmd;

        if (recv_msg(s.sock, rec, ACCEPT_WINDOW_S, "wait for client request"))
            goto out;
        if (rec[0] == 'Q')
            break;
        if (sscanf(rec, "%c %llu %llu", &cmd, &len, &seed) != 3 || len > MAX_SIZE) {
            say("wait for client request: malformed \"%.40s\"", rec);
            goto out;
        }
        switch (cmd) {
        case 'W': /* a WRITE is coming: make the target region wrong first */
            fill(s.buf, len, seed, 1);
            snprintf(reply, sizeof(reply), "OK");
            break;
        case 'F': /* the client will READ this */
            fill(s.buf, len, seed, 0);
            snprintf(reply, sizeof(reply), "OK");
            break;
        case 'V': {
            size_t bad;
            unsigned got, want;
            if (check(s.buf, len, seed, &bad, &got, &want)) {
                char h[32];
                snprintf(reply, sizeof(reply),
                         "BAD RDMA WRITE of %s: byte %zu is 0x%02x, expected 0x%02x%s",
                         human(len, h, sizeof(h)), bad, got, want,
                         bad >= len ? " (written past the end)" : "");
                say("verify: %s", reply + 4);
            } else {
                snprintf(reply, sizeof(reply), "OK");
                checked++;
            }
            break;
        }
        default:
            say("wait for client request: unknown command '%c'", cmd);
            goto out;
        }
        if (send_msg(s.sock, reply, "reply to client"))
            goto out;
    }
    send_msg(s.sock, "OK bye", "say goodbye");
    if (announce)
        printf("smoke[server]: %s gid[%d] qp 0x%x: verified %u RDMA WRITEs from the client, "
               "served its READs\n", s.dev_name, s.gid_index, s.qp->qp_num, checked);
    rc = RC_OK;
out:
    if (s.sock >= 0)
        close(s.sock);
    teardown(&s);
    return rc;
}

/* The client drives: WRITE then server-side verify, READ then local verify. */
static int run_client(const char *host, int port)
{
    struct smoke s = { .sock = -1 };
    struct peer_info peer;
    char rec[MSG_LEN], msg[MSG_LEN], h0[32], h1[32];
    double wtime = 0, rtime = 0;
    unsigned wr_w = 0, wr_r = 0;
    int rc;

    rc = setup(&s);
    if (rc != RC_OK)
        return rc;
    rc = RC_FAIL;
    s.sock = tcp_connect(host, port);
    if (s.sock < 0)
        goto out;
    if (exchange_info(&s, &peer) || connect_qp(&s, &peer))
        goto out;
    if (send_msg(s.sock, "OK rts", "exchange ready") ||
        expect_reply(&s, "exchange ready", rec))
        goto out;

    for (size_t k = 0; k < NSIZES; k++) {
        size_t len = sizes[k];
        uint64_t wseed = mix64(((uint64_t)lrand48() << 20) ^ len);
        uint64_t rseed = mix64(wseed + 1);
        size_t bad;
        unsigned got, want, nwr;
        double t0;

        /* WRITE: our pattern into a server region that holds its complement. */
        fill(s.buf, len, wseed, 0);
        snprintf(msg, sizeof(msg), "W %zu %" PRIu64, len, wseed);
        if (send_msg(s.sock, msg, "prepare RDMA WRITE") ||
            expect_reply(&s, "prepare RDMA WRITE", rec))
            goto out;
        t0 = now_s();
        if (rdma_xfer(&s, &peer, IBV_WR_RDMA_WRITE, len, &nwr))
            goto out;
        if (k == NSIZES - 1) {
            wtime = now_s() - t0;
            wr_w = nwr;
        }
        snprintf(msg, sizeof(msg), "V %zu %" PRIu64, len, wseed);
        if (send_msg(s.sock, msg, "verify RDMA WRITE") ||
            expect_reply(&s, "verify RDMA WRITE on the server", rec))
            goto out;

        /* READ: the server's fresh pattern into a local region holding its complement. */
        snprintf(msg, sizeof(msg), "F %zu %" PRIu64, len, rseed);
        if (send_msg(s.sock, msg, "prepare RDMA READ") ||
            expect_reply(&s, "prepare RDMA READ", rec))
            goto out;
        fill(s.buf, len, rseed, 1);
        t0 = now_s();
        if (rdma_xfer(&s, &peer, IBV_WR_RDMA_READ, len, &nwr))
            goto out;
        if (k == NSIZES - 1) {
            rtime = now_s() - t0;
            wr_r = nwr;
        }
        if (check(s.buf, len, rseed, &bad, &got, &want)) {
            say("verify RDMA READ of %s: byte %zu is 0x%02x, expected 0x%02x%s",
                human(len, h0, sizeof(h0)), bad, got, want,
                bad >= len ? " (written past the end)" : "");
            goto out;
        }
    }
    if (send_msg(s.sock, "Q", "finish") || expect_reply(&s, "finish", rec))
        goto out;

    human(sizes[0], h0, sizeof(h0));
    human(sizes[NSIZES - 1], h1, sizeof(h1));
    printf("smoke: %s gid[%d] mtu %d: WRITE %s..%s ok (%s in %u WRs, %.1f MB/s), "
           "READ %s..%s ok (%s in %u WRs, %.1f MB/s)\n",
           s.dev_name, s.gid_index, 128 << path_mtu(&s, &peer), h0, h1, h1, wr_w,
           wtime > 0 ? sizes[NSIZES - 1] / wtime / 1e6 : 0.0, h0, h1, h1, wr_r,
           rtime > 0 ? sizes[NSIZES - 1] / rtime / 1e6 : 0.0);
    rc = RC_OK;
out:
    if (s.sock >= 0)
        close(s.sock);
    teardown(&s);
    return rc;
}

/* Any ACTIVE port in sysfs, checked without touching verbs so that the fork
 * below happens before any verbs state exists. SHS_VM_DEV is deliberately not
 * applied here: a wrong name must fail in open_device, not skip. */
static int sysfs_has_active_port(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    struct dirent *de;
    int found = 0;

    if (!d)
        return 0;
    while (!found && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        for (int p = 1; p <= 8 && !found; p++) {
            char path[512], state[64];
            snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/state",
                     de->d_name, p);
            if (read_sysfs_line(path, state, sizeof(state)) == 0 && strstr(state, "ACTIVE"))
                found = 1;
        }
    }
    closedir(d);
    return found;
}

static int run_pair(int port)
{
    int lfd, rc_srv, rc_cli = RC_FAIL, status;
    double deadline;
    pid_t pid;

    if (!sysfs_has_active_port()) {
        fprintf(stderr, "smoke: no active rdma device, skipping\n");
        return RC_SKIP;
    }
    /* Listening before the fork lets the client connect at once. */
    lfd = tcp_listen("127.0.0.1", port, &port);
    if (lfd < 0)
        return RC_FAIL;
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        say("fork client: %s", strerror(errno));
        close(lfd);
        return RC_FAIL;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(lfd);
        role = "smoke[client]";
        srand48((long)getpid() ^ (long)(now_s() * 1e6));
        exit(run_client("127.0.0.1", port));
    }
    role = "smoke[server]";
    rc_srv = run_server(lfd, 0);
    close(lfd);

    deadline = now_s() + CHILD_WINDOW_S;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            if (WIFEXITED(status))
                rc_cli = WEXITSTATUS(status);
            else
                say("client died from signal %d", WTERMSIG(status));
            break;
        }
        if (w < 0 && errno != EINTR) {
            say("wait for client: %s", strerror(errno));
            break;
        }
        if (now_s() > deadline) {
            say("wait for client: still running after %.0f s, killing it", CHILD_WINDOW_S);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        nap_us(20000);
    }
    if (rc_srv == RC_FAIL || rc_cli == RC_FAIL)
        return RC_FAIL;
    if (rc_srv == RC_SKIP || rc_cli == RC_SKIP)
        return RC_SKIP;
    return RC_OK;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shs_smoke_verbs                         server and client in this host\n"
            "       shs_smoke_verbs --server [--port P]     wait for a client\n"
            "       shs_smoke_verbs --client HOST [--port P]\n"
            "RC RDMA WRITE and READ of 1 B..9 MiB, verified byte for byte.\n"
            "env: SHS_VM_DEV (device), SHS_VM_GID_INDEX (else the RoCE v2 IPv4 GID)\n"
            "exit: 0 ok, 1 failure, 77 no active RDMA device. Default port %d.\n",
            DEFAULT_PORT);
}

int main(int argc, char **argv)
{
    const char *host = NULL;
    int server = 0, port = -1;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--server")) {
            server = 1;
        } else if (!strcmp(argv[i], "--client") && i + 1 < argc) {
            host = argv[++i];
        } else if (!strcmp(argv[i], "--port") && i + 1 < argc) {
            port = port_of(argv[++i]);
            if (port < 0) {
                fprintf(stderr, "smoke: bad port '%s'\n", argv[i]);
                return RC_FAIL;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return RC_OK;
        } else {
            usage(stderr);
            return RC_FAIL;
        }
    }
    if (server && host) {
        usage(stderr);
        return RC_FAIL;
    }
    srand48((long)getpid() ^ (long)(now_s() * 1e6));
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (server) {
        int lfd, rc;
        role = "smoke[server]";
        lfd = tcp_listen(NULL, port < 0 ? DEFAULT_PORT : port, &port);
        if (lfd < 0)
            return RC_FAIL;
        rc = run_server(lfd, 1);
        close(lfd);
        return rc;
    }
    if (host) {
        role = "smoke[client]";
        return run_client(host, port < 0 ? DEFAULT_PORT : port);
    }
    return run_pair(port < 0 ? 0 : port);
}

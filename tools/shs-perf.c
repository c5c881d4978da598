/*
 * shs-perf: latency and bandwidth of the shadowsync transport, perftest style.
 *
 *   shs-perf TEST [options]          server (rank 0), waits for a client
 *   shs-perf TEST [options] HOST     client (rank 1), bootstrap at HOST
 *   mpirun -np 2 shs-perf TEST ...   ranks from the launcher (or --env)
 *
 * TEST: read_lat write_lat write_imm_lat send_lat read_bw write_bw
 * write_imm_bw send_bw (perftest's names, ib_read_lat etc., work too).
 *
 * Built on the public API only: every figure is what a program of the
 * library gets (posting, splitting, selective signaling, flush, immediates,
 * messages), not what raw verbs could do. See usage() and docs/benchmarks.md.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shadowsync/shadowsync.h>

#define MB (1024.0 * 1024.0) /* perftest's MB: 2^20 bytes */
#define DEFAULT_PORT 18520   /* the library's bootstrap default (perftest's 18515 + 5) */
#define BUF_CAP ((size_t)64 << 20) /* slots of one size share at most this much */
#define RX_CAP ((size_t)128 << 20) /* receive buffers of the send tests, per QP */
#define MAX_SIZE ((size_t)8 << 20) /* -a: 2 B .. 8 MiB like perftest */
#define LAT_POLL_SPIN "1073741824"  /* latency tests: SHS_POLL_SPIN's maximum */

/* Immediate values: data (sequence), credits (receiver -> sender), results. */
#define IMM_KIND 0xc0000000u
#define IMM_DATA 0x00000000u
#define IMM_CREDIT 0x80000000u
#define IMM_RESULT 0x40000000u
#define IMM_SEQ 0x3fffffffu
/* credit = IMM_CREDIT | epoch << 23 | count: a credit still in flight from
 * the previous size (epoch) is taken and ignored */
#define CREDIT_EPOCH_SHIFT 23
#define CREDIT_COUNT 0x7fffffu

typedef enum { OP_READ, OP_WRITE, OP_WRITE_IMM, OP_SEND } op_t;

static const char *const op_title[] = {"RDMA_Read", "RDMA_Write", "RDMA_Write_imm", "Send"};

typedef struct opts {
    op_t op;
    bool lat;
    const char *test;
    const char *host;
    const char *dev;
    int ib_port, gid_index, port, qps, tx_depth, slots;
    long iters;
    double duration;
    size_t size;
    bool all, bidir, gbits, json, check, env, rdmacm, oob, tx_depth_set, iters_set;
} opts_t;

typedef struct bench {
    opts_t o;
    shs_ctx_t *ctx;
    int me, peer;
    bool client;
    shs_region_t *src, *dst, *res;
    size_t max_size, slots, window;
    unsigned rq_depth;
    unsigned epoch; /* bandwidth runs so far: tags credits */
    double *lat;   /* per-iteration latencies (us) */
    double *stamp; /* posting times for the peak bandwidth */
} bench_t;

/* What an active side measured, sent to its peer (bidirectional sums). */
typedef struct result {
    uint64_t ops;
    double secs;
    double peak_bps;
    uint32_t check_bad; /* bytes that differ (the checking side's count) */
    uint32_t pad;
} result_t;

static double clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The time stamps of the measured loops come from the CPU's time-stamp
 * counter, calibrated against the monotonic clock at start, as perftest
 * does: clock_gettime() is a system call where the clock source is not the
 * TSC (a TCG guest's hpet: 4.4 us a call, more than the latency measured). */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static double g_tick_s; /* seconds per tick */

static void clock_calibrate(void)
{
    double t0 = clock_s();
    uint64_t c0 = __rdtsc();
    struct timespec nap = {0, 50 * 1000 * 1000};
    nanosleep(&nap, NULL);
    double t1 = clock_s();
    uint64_t c1 = __rdtsc();
    g_tick_s = c1 > c0 ? (t1 - t0) / (double)(c1 - c0) : 0;
}

static inline double now_s(void)
{
    return g_tick_s > 0 ? (double)__rdtsc() * g_tick_s : clock_s();
}
#else
static void clock_calibrate(void)
{
}

static inline double now_s(void)
{
    return clock_s();
}
#endif

static void die(const char *what, shs_status_t st) __attribute__((noreturn));
static void die(const char *what, shs_status_t st)
{
    fprintf(stderr, "shs-perf: %s: %s\n", what, shs_status_string(st));
    exit(1);
}

#define CK(expr)                                                                     \
    do {                                                                             \
        shs_status_t st_ = (expr);                                                   \
        if (st_ != SHS_OK)                                                           \
            die(#expr, st_);                                                         \
    } while (0)

/* The byte at offset i of rank r's source: a misplaced or stale byte shows. */
static inline uint8_t pat(int r, size_t i)
{
    return (uint8_t)((i * 131u + (size_t)r * 71u + (i >> 12)) ^ 0x5a);
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: shs-perf TEST [options] [HOST]\n"
        "  TEST  read_lat write_lat write_imm_lat send_lat\n"
        "        read_bw write_bw write_imm_bw send_bw   (or ib_read_lat, ib_write_bw, ...)\n"
        "  without HOST: server (rank 0); with HOST: client (rank 1) of the server at HOST;\n"
        "  under a launcher (mpirun, srun: its rank/size variables) or --env: SHS_RANK,\n"
        "  SHS_SIZE, SHS_BOOTSTRAP as the library reads them (2 ranks; rank 1 reports)\n"
        "options (perftest's):\n"
        "  -d, --ib-dev DEV        device (default: first ACTIVE port)\n"
        "  -i, --ib-port N         port (default: first ACTIVE)\n"
        "  -x, --gid-index N       GID index (default: automatic, RoCE v2 IPv4)\n"
        "  -s, --size N            message size (default 2 for latency, 65536 for bandwidth)\n"
        "  -a, --all               sizes 2 B .. 8 MiB\n"
        "  -n, --iters N           iterations (default 1000 latency, 5000 bandwidth)\n"
        "  -t, --tx-depth N        operations in flight (bandwidth; default 128)\n"
        "  -q, --qp N              queue pairs (default 1)\n"
        "  -b, --bidirectional     both sides send (bandwidth)\n"
        "  -D, --duration S        run S seconds instead of -n iterations\n"
        "  -p, --port N            bootstrap port (default %d)\n"
        "  -R, --rdma_cm           connect with rdma_cm (the library's default on RoCE)\n"
        "      --oob               connect with GID/QPN exchange over the bootstrap\n"
        "      --report_gbits      bandwidth in Gb/s (default MB/s, MB = 2^20 bytes)\n"
        "      --json              one JSON object per size instead of the table\n"
        "      --check             verify every byte that arrives\n"
        "      --env               ranks from the environment (automatic under a launcher)\n"
        "      --slots N           bandwidth: cycle through N buffers (default 1, as perftest)\n"
        "environment: the library's SHS_* knobs; latency tests set SHS_POLL_SPIN to\n"
        "  " LAT_POLL_SPIN " (poll, never sleep, like perftest) unless it is set\n",
        DEFAULT_PORT);
}

static bool parse_test(const char *name, opts_t *o)
{
    static const struct {
        const char *name;
        op_t op;
        bool lat;
    } tests[] = {
        {"read_lat", OP_READ, true},       {"write_lat", OP_WRITE, true},
        {"write_imm_lat", OP_WRITE_IMM, true}, {"send_lat", OP_SEND, true},
        {"read_bw", OP_READ, false},       {"write_bw", OP_WRITE, false},
        {"write_imm_bw", OP_WRITE_IMM, false}, {"send_bw", OP_SEND, false},
    };
    if (strncmp(name, "ib_", 3) == 0)
        name += 3;
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        if (strcmp(name, tests[i].name) == 0) {
            o->test = tests[i].name;
            o->op = tests[i].op;
            o->lat = tests[i].lat;
            return true;
        }
    }
    return false;
}

static long parse_num(const char *s, const char *what)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0) {
        fprintf(stderr, "shs-perf: bad %s '%s'\n", what, s);
        exit(2);
    }
    return v;
}

static void parse_args(int argc, char **argv, opts_t *o)
{
    enum { O_GBITS = 256, O_JSON, O_CHECK, O_ENV, O_OOB, O_SLOTS };
    static const struct option lo[] = {
        {"ib-dev", required_argument, NULL, 'd'},   {"ib-port", required_argument, NULL, 'i'},
        {"gid-index", required_argument, NULL, 'x'}, {"size", required_argument, NULL, 's'},
        {"all", no_argument, NULL, 'a'},           {"iters", required_argument, NULL, 'n'},
        {"tx-depth", required_argument, NULL, 't'}, {"qp", required_argument, NULL, 'q'},
        {"bidirectional", no_argument, NULL, 'b'}, {"duration", required_argument, NULL, 'D'},
        {"port", required_argument, NULL, 'p'},    {"rdma_cm", no_argument, NULL, 'R'},
        {"report_gbits", no_argument, NULL, O_GBITS}, {"json", no_argument, NULL, O_JSON},
        {"check", no_argument, NULL, O_CHECK},     {"env", no_argument, NULL, O_ENV},
        {"oob", no_argument, NULL, O_OOB},         {"help", no_argument, NULL, 'h'},
        {"slots", required_argument, NULL, O_SLOTS},
        {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof(*o));
    o->gid_index = -1;
    o->port = DEFAULT_PORT;
    o->qps = 1;
    o->slots = 1;
    if (argc < 2 || !parse_test(argv[1], o)) {
        usage(stderr);
        exit(2);
    }
    optind = 2;
    for (int c; (c = getopt_long(argc, argv, "d:i:x:s:an:t:q:bD:p:Rh", lo, NULL)) != -1;) {
        switch (c) {
        case 'd': o->dev = optarg; break;
        case 'i': o->ib_port = (int)parse_num(optarg, "port"); break;
        case 'x': o->gid_index = (int)parse_num(optarg, "gid index"); break;
        case 's': o->size = (size_t)parse_num(optarg, "size"); break;
        case 'a': o->all = true; break;
        case 'n': o->iters = parse_num(optarg, "iterations"); o->iters_set = true; break;
        case 't': o->tx_depth = (int)parse_num(optarg, "tx depth"); o->tx_depth_set = true; break;
        case 'q': o->qps = (int)parse_num(optarg, "qp count"); break;
        case 'b': o->bidir = true; break;
        case 'D': o->duration = strtod(optarg, NULL); break;
        case 'p': o->port = (int)parse_num(optarg, "port"); break;
        case 'R': o->rdmacm = true; break;
        case O_GBITS: o->gbits = true; break;
        case O_JSON: o->json = true; break;
        case O_CHECK: o->check = true; break;
        case O_ENV: o->env = true; break;
        case O_OOB: o->oob = true; break;
        case O_SLOTS: o->slots = (int)parse_num(optarg, "slot count"); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc)
        o->host = argv[optind++];
    if (optind < argc || (o->bidir && o->lat) || o->qps < 1 || o->qps > 16 ||
        (o->iters_set && o->iters < 1) || o->duration < 0 || o->size > MAX_SIZE ||
        (o->tx_depth_set && o->tx_depth < 1) || o->slots < 1) {
        fprintf(stderr, "shs-perf: bad arguments (-b is for bandwidth tests; -q 1..16; "
                        "-s up to %zu)\n", MAX_SIZE);
        exit(2);
    }
    if (!o->iters_set)
        o->iters = o->lat ? 1000 : 5000;
    if (!o->tx_depth_set)
        o->tx_depth = o->lat ? 1 : 128;
    if (o->size == 0)
        o->size = o->lat ? 2 : 65536;
    if (!o->env && o->host == NULL) {
        /* a launcher's variables mean "ranks from the environment" */
        static const char *const vars[] = {"SHS_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                           "PMI_RANK", "SLURM_PROCID", NULL};
        for (const char *const *v = vars; *v != NULL; v++)
            if (getenv(*v) != NULL && strcmp(*v, "SLURM_PROCID") != 0)
                o->env = true;
        const char *nt = getenv("SLURM_NTASKS");
        if (getenv("SLURM_PROCID") != NULL && nt != NULL && atoi(nt) == 2)
            o->env = true;
    }
}

/* ------------------------------------------------------------ set-up */

static void setup(bench_t *b)
{
    opts_t *o = &b->o;
    shs_ctx_params_t p;
    char boot[300];

    memset(&p, 0, sizeof(p));
    b->max_size = o->all ? MAX_SIZE : o->size;
    if (!o->env) {
        p.field_mask |= SHS_CTX_PARAM_RANK | SHS_CTX_PARAM_SIZE | SHS_CTX_PARAM_BOOTSTRAP;
        p.rank = o->host != NULL ? 1 : 0;
        p.size = 2;
        if (o->host != NULL && strchr(o->host, ':') != NULL)
            snprintf(boot, sizeof(boot), "[%s]:%d", o->host, o->port);
        else
            snprintf(boot, sizeof(boot), "%s:%d", o->host != NULL ? o->host : "0.0.0.0",
                     o->port);
        p.bootstrap = boot;
    }
    if (o->dev != NULL) {
        p.field_mask |= SHS_CTX_PARAM_DEVICE;
        p.device = o->dev;
    }
    if (o->ib_port != 0) {
        p.field_mask |= SHS_CTX_PARAM_IB_PORT;
        p.ib_port = o->ib_port;
    }
    if (o->gid_index >= 0) {
        p.field_mask |= SHS_CTX_PARAM_GID_INDEX;
        p.gid_index = o->gid_index;
    }
    if (o->rdmacm || o->oob) {
        p.field_mask |= SHS_CTX_PARAM_CONNECT_MODE;
        p.connect_mode = o->oob ? SHS_CONNECT_MODE_OOB : SHS_CONNECT_MODE_RDMACM;
    }
    p.field_mask |= SHS_CTX_PARAM_QPS_PER_PEER | SHS_CTX_PARAM_SQ_DEPTH;
    p.qps_per_peer = o->qps;
    /* room for tx_depth operations, a few of them split into pieces, and a
     * flush's fence */
    p.sq_depth = o->tx_depth + 16;
    /* receives: a window of messages/immediates, credits and results */
    b->rq_depth = 256;
    if (o->op == OP_SEND) {
        size_t fit = RX_CAP / b->max_size;
        b->rq_depth = fit < 16 ? 16 : fit > 256 ? 256 : (unsigned)fit;
        p.field_mask |= SHS_CTX_PARAM_MSG_SIZE;
        p.msg_size = b->max_size;
    }
    p.field_mask |= SHS_CTX_PARAM_RQ_DEPTH;
    p.rq_depth = (int)b->rq_depth;
    /* a sender may have this many data messages/immediates unconsumed at the
     * receiver; the rest of the receives take credits and results */
    b->window = b->rq_depth - 8;

    shs_status_t st = shs_ctx_create(&p, &b->ctx);
    if (st != SHS_OK)
        die(o->host != NULL ? "connecting to the server (shs_ctx_create)"
                            : "waiting for a client (shs_ctx_create)", st);
    b->me = shs_ctx_rank(b->ctx);
    if (shs_ctx_size(b->ctx) != 2) {
        fprintf(stderr, "shs-perf: needs exactly 2 ranks, the job has %d\n",
                shs_ctx_size(b->ctx));
        exit(2);
    }
    b->peer = 1 - b->me;
    b->client = b->me == 1;

    /* one buffer that every operation reuses, as perftest does; --slots
     * spreads them over more memory (closer to a model, more TLB misses) */
    b->slots = o->lat ? 1 : (size_t)o->slots;
    if (b->slots * b->max_size > BUF_CAP)
        b->slots = BUF_CAP / b->max_size > 0 ? BUF_CAP / b->max_size : 1;
    size_t len = b->slots * b->max_size;
    CK(shs_region_alloc(b->ctx, len, SHS_ACCESS_REMOTE_READ, &b->src));
    CK(shs_region_alloc(b->ctx, len, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_WRITE,
                        &b->dst));
    CK(shs_region_alloc(b->ctx, 2 * sizeof(result_t),
                        SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_WRITE, &b->res));
    uint8_t *s = shs_region_addr(b->src);
    for (size_t i = 0; i < len; i++)
        s[i] = pat(b->me, i);
    size_t n = o->duration > 0 ? 1 : (size_t)o->iters;
    b->lat = calloc(o->lat ? n : 1, sizeof(double));
    b->stamp = calloc(o->lat ? 1 : n / 1 + 2, sizeof(double));
    if (b->lat == NULL || b->stamp == NULL) {
        fprintf(stderr, "shs-perf: out of memory\n");
        exit(1);
    }
}

static void teardown(bench_t *b)
{
    CK(shs_ctx_barrier(b->ctx));
    shs_region_destroy(b->res);
    shs_region_destroy(b->dst);
    shs_region_destroy(b->src);
    shs_ctx_destroy(b->ctx);
    free(b->lat);
    free(b->stamp);
}

/* ------------------------------------------------------- result exchange */

static void send_result(bench_t *b, const result_t *r)
{
    result_t *out = shs_region_addr(b->res);
    *out = *r;
    CK(shs_write_imm(b->ctx, b->peer, b->res, 0, b->res, sizeof(result_t), sizeof(result_t),
                     IMM_RESULT, SHS_OP_SIGNAL));
    CK(shs_flush(b->ctx, b->peer, SHS_TIMEOUT_DEFAULT));
}

static void recv_result(bench_t *b, result_t *r)
{
    uint32_t imm;
    CK(shs_wait_imm_match(b->ctx, b->peer, IMM_KIND, IMM_RESULT, NULL, &imm, 60000));
    *r = ((const result_t *)shs_region_addr(b->res))[1];
}

/* ----------------------------------------------------------- checking */

/* Bytes of buf (the first nslots slots of size bytes) that are not rank r's
 * source bytes at the same place. */
static uint32_t count_bad(const uint8_t *buf, size_t nslots, size_t size, int r,
                          size_t slot_stride)
{
    uint32_t bad = 0;
    for (size_t k = 0; k < nslots; k++)
        for (size_t i = 0; i < size; i++)
            if (buf[k * slot_stride + i] != pat(r, k * slot_stride + i))
                bad++;
    return bad;
}

/* ----------------------------------------------------------- latency */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void lat_report(const bench_t *b, size_t size, size_t n, uint32_t bad)
{
    double *v = b->lat, sum = 0, sq = 0;
    qsort(v, n, sizeof(double), cmp_double);
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    double avg = sum / (double)n;
    for (size_t i = 0; i < n; i++)
        sq += (v[i] - avg) * (v[i] - avg);
    double sd = sqrt(sq / (double)n);
    double p99 = v[(size_t)((double)(n - 1) * 0.99)];
    double p999 = v[(size_t)((double)(n - 1) * 0.999)];
    if (b->o.json) {
        printf("{\"test\":\"%s\",\"bytes\":%zu,\"iterations\":%zu,\"t_min_us\":%.3f,"
               "\"t_max_us\":%.3f,\"t_typical_us\":%.3f,\"t_avg_us\":%.3f,"
               "\"t_stdev_us\":%.3f,\"p99_us\":%.3f,\"p99_9_us\":%.3f%s}\n",
               b->o.test, size, n, v[0], v[n - 1], v[n / 2], avg, sd, p99, p999,
               b->o.check ? (bad ? ",\"check\":\"FAIL\"" : ",\"check\":\"ok\"") : "");
    } else {
        printf(" %-7zu %-10zu %-13.2f %-13.2f %-17.2f %-13.2f %-15.2f %-22.2f %-.2f%s\n",
               size, n, v[0], v[n - 1], v[n / 2], avg, sd, p99, p999,
               b->o.check ? (bad ? "   check FAILED" : "") : "");
    }
    fflush(stdout);
}

/* Wait until the last byte of dst's first message holds marker. */
static void wait_byte(bench_t *b, const volatile uint8_t *at, uint8_t marker)
{
    double deadline = 0;
    for (unsigned spins = 0; *at != marker; spins++) {
        if ((spins & 0xffff) == 0xffff) {
            /* keep the queues moving, and never wait for a dead peer forever */
            CK(shs_progress(b->ctx));
            if (deadline == 0)
                deadline = clock_s() + 30;
            else if (clock_s() > deadline)
                die("waiting for the peer's write", SHS_ERR_TIMEOUT);
            if (shs_ctx_peer_status(b->ctx, b->peer, NULL) != SHS_OK)
                die("waiting for the peer's write", SHS_ERR_PEER_FAILED);
        }
    }
}

static uint32_t run_lat(bench_t *b, size_t size, size_t n)
{
    shs_ctx_t *ctx = b->ctx;
    uint8_t *s = shs_region_addr(b->src);
    volatile uint8_t *d = shs_region_addr(b->dst);
    size_t last = size - 1;
    bool ping = b->client; /* the client starts every round trip */
    uint32_t bad = 0;
    shs_msg_t m;
    uint32_t imm;

    if (b->o.op == OP_WRITE)
        d[last] = 0;
    CK(shs_ctx_barrier(ctx));
    for (size_t k = 0; k < n; k++) {
        uint8_t marker = (uint8_t)(k % 255 + 1);
        double t0 = now_s();
        switch (b->o.op) {
        case OP_READ:
            if (b->client) {
                CK(shs_read(ctx, b->peer, b->dst, 0, b->src, 0, size, SHS_OP_SIGNAL));
                CK(shs_flush(ctx, b->peer, SHS_TIMEOUT_DEFAULT));
            }
            break;
        case OP_WRITE:
            /* perftest's ping-pong: the last byte carries the round, the
             * receiver spins on it in its own memory */
            if (!ping)
                wait_byte(b, &d[last], marker);
            s[last] = marker;
            CK(shs_write(ctx, b->peer, b->src, 0, b->dst, 0, size, 0));
            if (ping)
                wait_byte(b, &d[last], marker);
            break;
        case OP_WRITE_IMM:
            if (!ping)
                CK(shs_wait_imm(ctx, b->peer, NULL, &imm, SHS_TIMEOUT_DEFAULT));
            CK(shs_write_imm(ctx, b->peer, b->src, 0, b->dst, 0, size, (uint32_t)k, 0));
            if (ping)
                CK(shs_wait_imm(ctx, b->peer, NULL, &imm, SHS_TIMEOUT_DEFAULT));
            break;
        case OP_SEND:
            if (!ping) {
                CK(shs_recv(ctx, b->peer, &m, SHS_TIMEOUT_DEFAULT));
                if (b->o.check)
                    bad += count_bad(m.data, 1, m.len, b->peer, 0);
                CK(shs_recv_release(ctx, &m));
            }
            CK(shs_send(ctx, b->peer, b->src, 0, size, 0));
            if (ping) {
                CK(shs_recv(ctx, b->peer, &m, SHS_TIMEOUT_DEFAULT));
                if (b->o.check)
                    bad += count_bad(m.data, 1, m.len, b->peer, 0);
                CK(shs_recv_release(ctx, &m));
            }
            break;
        }
        double t = (now_s() - t0) * 1e6;
        /* a round trip is two one-way latencies; a READ is one operation */
        b->lat[k] = b->o.op == OP_READ ? t : t / 2;
    }
    CK(shs_flush(ctx, b->peer, SHS_TIMEOUT_DEFAULT));
    CK(shs_ctx_barrier(ctx));
    if (b->o.check) {
        const uint8_t *dd = (const uint8_t *)d;
        if (b->o.op == OP_READ && b->client)
            bad += count_bad(dd, 1, size, b->peer, 0);
        if (b->o.op == OP_WRITE || b->o.op == OP_WRITE_IMM) {
            /* the last byte carried the round marker */
            bad += count_bad(dd, 1, b->o.op == OP_WRITE ? last : size, b->peer, 0);
            s[last] = pat(b->me, last);
        }
    }
    return bad;
}

/* ----------------------------------------------------------- bandwidth */

typedef struct bw_state {
    uint64_t posted, recvd;   /* data operations sent; data messages/imms taken */
    uint64_t credited;        /* what the receiver said it has taken */
    uint64_t credit_sent;     /* what we last told the sender */
    uint32_t bad;
} bw_state_t;

static bool op_consumes(op_t op)
{
    return op == OP_SEND || op == OP_WRITE_IMM;
}

/* Take what has arrived (messages or data immediates) without waiting,
 * give credits back; returns how many were taken. */
static uint64_t bw_receive(bench_t *b, bw_state_t *s, size_t size, bool wait)
{
    uint64_t got = 0;
    int timeout = wait ? SHS_TIMEOUT_DEFAULT : 0;
    for (;;) {
        shs_status_t st;
        if (b->o.op == OP_SEND) {
            shs_msg_t m;
            st = shs_recv(b->ctx, b->peer, &m, timeout);
            if (st == SHS_OK) {
                if (b->o.check && (m.len != size || count_bad(m.data, 1, m.len, b->peer, 0)))
                    s->bad++;
                CK(shs_recv_release(b->ctx, &m));
            }
        } else {
            uint32_t imm;
            st = timeout == 0 ? shs_poll_imm_match(b->ctx, b->peer, IMM_KIND, IMM_DATA, NULL,
                                                   &imm)
                              : shs_wait_imm_match(b->ctx, b->peer, IMM_KIND, IMM_DATA, NULL,
                                                   &imm, timeout);
            /* in order on one QP; several QPs may overtake each other */
            if (st == SHS_OK && b->o.check && b->o.qps == 1 &&
                imm != (uint32_t)(s->recvd & IMM_SEQ))
                s->bad++;
        }
        if (st == SHS_ERR_TIMEOUT)
            break;
        if (st != SHS_OK)
            die("receiving", st);
        s->recvd++;
        got++;
        timeout = 0;
        /* credit the sender every half window */
        if (s->recvd - s->credit_sent >= b->window / 2) {
            s->credit_sent = s->recvd;
            uint32_t credit = IMM_CREDIT | (b->epoch & 0x7fu) << CREDIT_EPOCH_SHIFT |
                              (uint32_t)(s->recvd & CREDIT_COUNT);
            CK(shs_write_imm(b->ctx, b->peer, b->res, 0, b->res, 0, 0, credit, 0));
        }
    }
    return got;
}

/* Take credits that arrived; with wait, until at least one. */
static void bw_credits(bench_t *b, bw_state_t *s, size_t size, bool wait)
{
    uint32_t imm;
    shs_status_t st;
    while ((st = shs_poll_imm_match(b->ctx, b->peer, IMM_KIND, IMM_CREDIT, NULL, &imm)) ==
               SHS_OK || wait) {
        if (st == SHS_ERR_TIMEOUT) {
            /* a bidirectional peer may wait for our credits meanwhile */
            if (b->o.bidir)
                bw_receive(b, s, size, false);
            st = shs_wait_imm_match(b->ctx, b->peer, IMM_KIND, IMM_CREDIT, NULL, &imm, 1);
            if (st == SHS_ERR_TIMEOUT)
                continue;
        }
        if (st != SHS_OK)
            die("waiting for credits", st);
        if (((imm >> CREDIT_EPOCH_SHIFT) & 0x7fu) != (b->epoch & 0x7fu))
            continue; /* the previous size's */
        /* credits are cumulative modulo 2^23 */
        uint64_t delta = ((imm & CREDIT_COUNT) - (s->credited & CREDIT_COUNT)) & CREDIT_COUNT;
        s->credited += delta;
        wait = false;
    }
}

static void bw_post(bench_t *b, bw_state_t *s, size_t size)
{
    shs_ctx_t *ctx = b->ctx;
    size_t slot = (size_t)(s->posted % b->slots) * b->max_size;
    switch (b->o.op) {
    case OP_READ:
        CK(shs_read(ctx, b->peer, b->dst, slot, b->src, slot, size, 0));
        break;
    case OP_WRITE:
        CK(shs_write(ctx, b->peer, b->src, slot, b->dst, slot, size, 0));
        break;
    case OP_WRITE_IMM:
        CK(shs_write_imm(ctx, b->peer, b->src, slot, b->dst, slot, size,
                         (uint32_t)(s->posted & IMM_SEQ), 0));
        break;
    case OP_SEND:
        CK(shs_send(ctx, b->peer, b->src, 0, size, 0));
        break;
    }
    s->posted++;
}

/* v in fixed notation with at least min_dec decimals and at least sig
 * significant digits: perftest's columns for ordinary figures, and a rate too
 * small for them (8 MiB messages at a few MB/s: 0.0000005 Mpps) never reads 0. */
static const char *fmt_fixed(char *buf, size_t len, double v, int min_dec, int sig)
{
    int dec = min_dec;
    if (isfinite(v) && v > 0) {
        int need = sig - 1 - (int)floor(log10(v));
        if (need > dec)
            dec = need < 30 ? need : 30;
    }
    snprintf(buf, len, "%.*f", dec, v);
    return buf;
}

static void bw_report(const bench_t *b, size_t size, const result_t *mine, const result_t *other,
                      uint32_t bad)
{
    uint64_t ops = mine->ops + (other != NULL ? other->ops : 0);
    double secs = mine->secs;
    if (other != NULL && other->secs > secs)
        secs = other->secs;
    double avg = (double)ops * (double)size / secs;
    double peak = mine->peak_bps + (other != NULL ? other->peak_bps : 0);
    if (peak < avg)
        peak = avg;
    double scale = b->o.gbits ? 1e9 / 8 : MB;
    double rate = (double)ops / secs / 1e6;
    char fpeak[48], favg[48], frate[48];
    if (b->o.json) {
        printf("{\"test\":\"%s\",\"bytes\":%zu,\"iterations\":%" PRIu64 ",\"bw_peak\":%s,"
               "\"bw_avg\":%s,\"bw_unit\":\"%s\",\"msg_rate_mpps\":%s%s}\n",
               b->o.test, size, ops, fmt_fixed(fpeak, sizeof(fpeak), peak / scale, 6, 6),
               fmt_fixed(favg, sizeof(favg), avg / scale, 6, 6), b->o.gbits ? "Gb/s" : "MB/s",
               fmt_fixed(frate, sizeof(frate), rate, 6, 6),
               b->o.check ? (bad ? ",\"check\":\"FAIL\"" : ",\"check\":\"ok\"") : "");
    } else {
        printf(" %-10zu %-13" PRIu64 " %-18s %-20s %s%s\n", size, ops,
               fmt_fixed(fpeak, sizeof(fpeak), peak / scale, 2, 3),
               fmt_fixed(favg, sizeof(favg), avg / scale, 2, 3),
               fmt_fixed(frate, sizeof(frate), rate, 6, 3),
               b->o.check ? (bad ? "   check FAILED" : "") : "");
    }
    fflush(stdout);
}

/* The best rate over windows of w operations, leaving out the first send
 * queue's worth (posted instantly): posting waits for completions once the
 * queue is full, so posting times then follow completion times. */
static double peak_rate(const double *stamp, uint64_t n, uint64_t skip, size_t size)
{
    uint64_t w = n / 20 > 16 ? n / 20 : 16;
    double best = 0;
    for (uint64_t i = skip; i + w < n; i += w / 4 > 0 ? w / 4 : 1) {
        double dt = stamp[i + w] - stamp[i];
        if (dt > 0 && (double)w * (double)size / dt > best)
            best = (double)w * (double)size / dt;
    }
    return best;
}

static uint32_t run_bw(bench_t *b, size_t size, result_t *mine, result_t *other)
{
    shs_ctx_t *ctx = b->ctx;
    bool active = b->client || b->o.bidir;
    bool receiver = op_consumes(b->o.op) && (!b->client || b->o.bidir);
    bool timed = b->o.duration > 0;
    uint64_t n = timed ? UINT64_MAX : (uint64_t)b->o.iters;
    bw_state_t s = {0};
    uint32_t bad = 0;

    memset(mine, 0, sizeof(*mine));
    memset(other, 0, sizeof(*other));
    b->epoch++;
    if (b->o.check)
        memset(shs_region_addr(b->dst), 0, b->slots * b->max_size);
    CK(shs_ctx_barrier(ctx));
    double t0 = now_s(), end = t0 + b->o.duration;
    if (active) {
        while (s.posted < n) {
            if (timed && (s.posted & 63) == 0 && now_s() >= end)
                break;
            if (op_consumes(b->o.op) && s.posted - s.credited >= b->window)
                bw_credits(b, &s, size, true);
            bw_post(b, &s, size);
            if (!timed)
                b->stamp[s.posted - 1] = now_s();
            if (receiver && (s.posted & 15) == 0)
                bw_receive(b, &s, size, false);
            if (op_consumes(b->o.op) && (s.posted & 15) == 0)
                bw_credits(b, &s, size, false);
        }
        CK(shs_flush(ctx, b->peer, SHS_TIMEOUT_DEFAULT));
        mine->secs = now_s() - t0;
        mine->ops = s.posted;
        if (!timed)
            mine->peak_bps = peak_rate(b->stamp, s.posted,
                                       (uint64_t)b->o.tx_depth + 16 < s.posted
                                           ? (uint64_t)b->o.tx_depth + 16 : 0, size);
        send_result(b, mine);
    }
    /* one-sided traffic in one direction needs nothing of the passive side's
     * CPU: it sleeps in a bootstrap barrier, as perftest's server sleeps in a
     * socket read (spinning would take a CPU from a software device) */
    bool passive_sleeps = !b->o.bidir && !op_consumes(b->o.op);
    if (passive_sleeps)
        CK(shs_ctx_barrier(ctx));
    /* the peer's result says how many operations it sent */
    result_t peer_res;
    bool have_peer = false;
    if (receiver || b->o.bidir || !b->client) {
        if (receiver) {
            /* take data until the peer announces its count, then the rest */
            uint32_t imm;
            while (shs_poll_imm_match(ctx, b->peer, IMM_KIND, IMM_RESULT, NULL, &imm) ==
                   SHS_ERR_TIMEOUT) {
                if (bw_receive(b, &s, size, false) == 0)
                    (void)shs_progress(ctx);
            }
            peer_res = ((const result_t *)shs_region_addr(b->res))[1];
            while (s.recvd < peer_res.ops)
                bw_receive(b, &s, size, true);
        } else {
            recv_result(b, &peer_res);
        }
        have_peer = true;
    }
    if (op_consumes(b->o.op)) {
        /* the last credits are in flight: take them before the next size */
        CK(shs_ctx_barrier(ctx));
        if (active)
            bw_credits(b, &s, size, false);
    }
    bad += s.bad;
    /* data placed by one-sided writes: the receiving side checks its memory,
     * the reader its own */
    CK(shs_ctx_barrier(ctx));
    if (b->o.check) {
        const uint8_t *d = shs_region_addr(b->dst);
        uint64_t ops_in = have_peer ? peer_res.ops : 0;
        if ((b->o.op == OP_WRITE || b->o.op == OP_WRITE_IMM) && ops_in > 0)
            bad += count_bad(d, ops_in < b->slots ? ops_in : b->slots, size, b->peer,
                             b->max_size);
        if (b->o.op == OP_READ && active)
            bad += count_bad(d, s.posted < b->slots ? s.posted : b->slots, size, b->peer,
                             b->max_size);
    }
    /* the client reports: it learns the server's check and, with -b, its figures */
    result_t mine_chk = *mine;
    mine_chk.check_bad = bad;
    if (!b->client) {
        send_result(b, &mine_chk);
    } else {
        result_t srv;
        recv_result(b, &srv);
        bad += srv.check_bad;
        if (b->o.bidir)
            *other = srv;
    }
    CK(shs_ctx_barrier(ctx));
    return bad;
}

/* ---------------------------------------------------------------- main */

static void header(const bench_t *b)
{
    if (b->o.json || !b->client)
        return;
    printf("---------------------------------------------------------------------------------------\n");
    printf("                    %s %s Test (shadowsync transport)\n", op_title[b->o.op],
           b->o.lat ? "Latency" : "BW");
    printf(" Number of qps   : %-10d Connection type : RC\n", b->o.qps);
    printf(" TX depth        : %-10d Iterations      : %ld%s\n", b->o.tx_depth, b->o.iters,
           b->o.duration > 0 ? " (duration mode)" : "");
    printf(" Direction       : %-10s Data check      : %s\n",
           b->o.bidir ? "both" : "one", b->o.check ? "on" : "off");
    printf(" Poll spin       : %s (SHS_POLL_SPIN: empty polls before a wait sleeps)\n",
           getenv("SHS_POLL_SPIN") != NULL ? getenv("SHS_POLL_SPIN") : "library default");
    printf("---------------------------------------------------------------------------------------\n");
    if (b->o.lat)
        printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
               "t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
    else
        printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n",
               b->o.gbits ? "Gb/sec" : "MB/sec", b->o.gbits ? "Gb/sec" : "MB/sec");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof(b));
    parse_args(argc, argv, &b.o);
    /* A latency test polls for its completion without sleeping, as perftest
     * does: the library's waits sleep after SHS_POLL_SPIN empty polls, and a
     * sleeping client in an emulated guest wakes late (two guests: t_typical
     * 1.7x perftest's with the library's default, same t_min). An explicit
     * SHS_POLL_SPIN still wins. */
    if (b.o.lat && getenv("SHS_POLL_SPIN") == NULL)
        setenv("SHS_POLL_SPIN", LAT_POLL_SPIN, 0);
    clock_calibrate();
    setup(&b);
    header(&b);
    size_t first = b.o.all ? 2 : b.o.size, lastsz = b.o.all ? MAX_SIZE : b.o.size;
    uint32_t bad_total = 0;
    for (size_t size = first; size <= lastsz; size *= 2) {
        uint32_t bad;
        if (b.o.lat) {
            size_t n = (size_t)b.o.iters;
            if (b.o.duration > 0) {
                fprintf(stderr, "shs-perf: -D is for bandwidth tests\n");
                return 2;
            }
            bad = run_lat(&b, size, n);
            if (b.client) /* both sides timed round trips; the client reports */
                lat_report(&b, size, n, bad);
        } else {
            result_t mine, other;
            bad = run_bw(&b, size, &mine, &other);
            if (b.client)
                bw_report(&b, size, &mine, b.o.bidir ? &other : NULL, bad);
        }
        bad_total += bad;
        if (!b.o.all)
            break;
    }
    if (!b.o.json && b.client)
        printf("---------------------------------------------------------------------------------------\n");
    teardown(&b);
    if (bad_total != 0) {
        fprintf(stderr, "shs-perf: --check: %u bytes or messages differ from what was sent\n",
                bad_total);
        return 1;
    }
    return 0;
}

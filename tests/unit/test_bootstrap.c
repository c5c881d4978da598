/*
 * Bootstrap: wire encoding, and real jobs of forked processes on 127.0.0.1.
 * Each rank runs in its own child and reports through its exit code: 0 for
 * success, -status for a bootstrap status, BAD_VALUE for wrong data.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/bootstrap.h"
#include "runtime/clock.h"
#include "runtime/crypto.h"
#include "runtime/log.h"
#include "unit.h"

#define BAD_VALUE 200
#define TOO_SLOW 201
#define MAX_PROCS 8
#define SECRET "s3cret-J0b-T0ken-91b2"

/* ---- wire encoding ---- */

START_TEST(test_hdr_round_trip)
{
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, 7, 0x01020304u}, d;
    uint8_t raw[SHS_BOOT_HDR_LEN];
    const uint8_t want[SHS_BOOT_HDR_LEN] = {'S', 'H', 'S', 'B', 0, SHS_BOOT_PROTOCOL_VERSION,
                                           0, 7, 1, 2, 3, 4};
    shs__boot_hdr_encode(&h, raw);
    ck_assert_mem_eq(raw, want, sizeof(raw));
    ck_assert_int_eq(shs__boot_hdr_decode(raw, sizeof(raw), 0x01020304u, &d), SHS_OK);
    ck_assert_uint_eq(d.magic, SHS_BOOT_MAGIC);
    ck_assert_uint_eq(d.version, SHS_BOOT_PROTOCOL_VERSION);
    ck_assert_uint_eq(d.type, 7);
    ck_assert_uint_eq(d.length, 0x01020304u);
}
END_TEST

START_TEST(test_hdr_malformed)
{
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, 4, 100}, d;
    shs__boot_hdr_t sentinel = {1, 2, 3, 4};
    uint8_t raw[SHS_BOOT_HDR_LEN];

    shs__boot_hdr_encode(&h, raw);
    d = sentinel;
    /* at the limit is fine, one above is not */
    ck_assert_int_eq(shs__boot_hdr_decode(raw, sizeof(raw), 100, &d), SHS_OK);
    d = sentinel;
    ck_assert_int_eq(shs__boot_hdr_decode(raw, sizeof(raw), 99, &d), SHS_ERR_PROTOCOL);
    ck_assert_uint_eq(d.magic, 1); /* untouched on failure */
    /* truncated */
    ck_assert_int_eq(shs__boot_hdr_decode(raw, SHS_BOOT_HDR_LEN - 1, 100, &d), SHS_ERR_PROTOCOL);
    ck_assert_int_eq(shs__boot_hdr_decode(raw, 0, 100, &d), SHS_ERR_PROTOCOL);
    ck_assert_int_eq(shs__boot_hdr_decode(NULL, SHS_BOOT_HDR_LEN, 100, &d), SHS_ERR_PROTOCOL);
    /* bad magic: a flipped bit anywhere in it */
    for (int bit = 0; bit < 32; bit++) {
        uint8_t bad[SHS_BOOT_HDR_LEN];
        memcpy(bad, raw, sizeof(bad));
        bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        ck_assert_int_eq(shs__boot_hdr_decode(bad, sizeof(bad), 100, &d), SHS_ERR_PROTOCOL);
    }
    /* other versions, and a version check that comes before the length's */
    h.version = SHS_BOOT_PROTOCOL_VERSION + 1;
    shs__boot_hdr_encode(&h, raw);
    ck_assert_int_eq(shs__boot_hdr_decode(raw, sizeof(raw), 100, &d), SHS_ERR_VERSION_MISMATCH);
    h.version = 0;
    h.length = 0xffffffffu;
    shs__boot_hdr_encode(&h, raw);
    ck_assert_int_eq(shs__boot_hdr_decode(raw, sizeof(raw), 100, &d), SHS_ERR_VERSION_MISMATCH);
    ck_assert_uint_eq(d.magic, 1);
    /* the largest length the runtime accepts */
    h.version = SHS_BOOT_PROTOCOL_VERSION;
    h.length = SHS_BOOT_MAX_MSG + 1;
    shs__boot_hdr_encode(&h, raw);
    ck_assert_int_eq(shs__boot_hdr_decode(raw, sizeof(raw), SHS_BOOT_MAX_MSG, &d),
                     SHS_ERR_PROTOCOL);
}
END_TEST

/* ---- multi-process jobs ---- */

typedef struct job {
    char addr[64];
    int size;
    int timeout_ms;
} job_t;

typedef int (*rank_fn)(const job_t *job, int rank, int proc);

/* Every time in these tests is multiplied by SHS_TEST_SLOW (default 1) for
 * runs under valgrind, where each rank runs tens of times slower. */
static int slow(int ms)
{
    static int factor;
    if (factor == 0) {
        const char *e = getenv("SHS_TEST_SLOW");
        factor = e != NULL && atoi(e) > 1 ? atoi(e) : 1;
    }
    return ms * factor;
}

/* A port nobody listens on right now; the kernel hands out distinct ones, so
 * concurrent test runs do not collide. */
static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static void job_init(job_t *job, int size, int timeout_ms)
{
    snprintf(job->addr, sizeof(job->addr), "127.0.0.1:%d", free_port());
    job->size = size;
    job->timeout_ms = slow(timeout_ms);
}

static void make_cfg(const job_t *job, int rank, int size, const char *token, shs__config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->rank = rank;
    c->size = size;
    c->bootstrap_timeout_ms = job->timeout_ms;
    snprintf(c->bootstrap, sizeof(c->bootstrap), "%s", job->addr);
    snprintf(c->job_token, sizeof(c->job_token), "%s", token);
}

static int code(shs_status_t st)
{
    return st == SHS_OK ? 0 : -(int)st;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Fork nproc children running fn(job, rank_of[i], i); collect exit codes. */
static void run_procs(const job_t *job, int nproc, const int *rank_of, rank_fn fn, int *codes)
{
    pid_t pids[MAX_PROCS];
    ck_assert_int_le(nproc, MAX_PROCS);
    for (int i = 0; i < nproc; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0)
            _exit(fn(job, rank_of[i], i));
    }
    shs__deadline_t dl = shs__deadline_in_ms(slow(30000));
    int left = nproc;
    for (int i = 0; i < nproc; i++)
        codes[i] = -1;
    while (left > 0 && !shs__deadline_passed(dl)) {
        for (int i = 0; i < nproc; i++) {
            int ws;
            if (codes[i] == -1 && waitpid(pids[i], &ws, WNOHANG) == pids[i]) {
                codes[i] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 300 + WTERMSIG(ws);
                left--;
            }
        }
        sleep_ms(5);
    }
    for (int i = 0; i < nproc; i++) {
        if (codes[i] == -1) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            codes[i] = 999;
        }
    }
}

static void run_job(const job_t *job, rank_fn fn, int *codes)
{
    int ranks[MAX_PROCS];
    for (int i = 0; i < job->size; i++)
        ranks[i] = i;
    run_procs(job, job->size, ranks, fn, codes);
}

static int collectives_rank(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(job, rank, job->size, "t-collectives", &c);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st != SHS_OK)
        return code(st);
    int n = job->size;
    if (shs__boot_rank(b) != rank || shs__boot_size(b) != n)
        return BAD_VALUE;

    uint64_t mine = (uint64_t)rank * 1000 + 7, all[MAX_PROCS];
    memset(all, 0xff, sizeof(all));
    if ((st = shs__boot_allgather(b, &mine, sizeof(mine), all)) != SHS_OK)
        return code(st);
    for (int r = 0; r < n; r++)
        if (all[r] != (uint64_t)r * 1000 + 7)
            return BAD_VALUE;

    /* in place: this rank's slot is the input */
    uint32_t inplace[MAX_PROCS] = {0};
    inplace[rank] = 0xabc00000u + (uint32_t)rank;
    if ((st = shs__boot_allgather(b, &inplace[rank], sizeof(uint32_t), inplace)) != SHS_OK)
        return code(st);
    for (int r = 0; r < n; r++)
        if (inplace[r] != 0xabc00000u + (uint32_t)r)
            return BAD_VALUE;

    /* bcast from the last rank and from rank 0 */
    for (int root = n - 1; root >= 0; root -= (n - 1 > 0 ? n - 1 : 1)) {
        uint8_t buf[300];
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = rank == root ? (uint8_t)(i * 7 + (size_t)root) : 0;
        if ((st = shs__boot_bcast(b, buf, sizeof(buf), root)) != SHS_OK)
            return code(st);
        for (size_t i = 0; i < sizeof(buf); i++)
            if (buf[i] != (uint8_t)(i * 7 + (size_t)root))
                return BAD_VALUE;
        if (root == 0)
            break;
    }

    for (int i = 0; i < 3; i++)
        if ((st = shs__boot_barrier(b)) != SHS_OK)
            return code(st);

    /* zero bytes, then a large one that cannot go in one socket write */
    if ((st = shs__boot_allgather(b, NULL, 0, NULL)) != SHS_OK)
        return code(st);
    size_t big = (size_t)1 << 20;
    uint8_t *in = malloc(big), *out = malloc(big * (size_t)n);
    if (in == NULL || out == NULL)
        return BAD_VALUE;
    for (size_t i = 0; i < big; i++)
        in[i] = (uint8_t)(i ^ (size_t)rank * 31);
    if ((st = shs__boot_allgather(b, in, big, out)) != SHS_OK)
        return code(st);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < big; i += 4099)
            if (out[(size_t)r * big + i] != (uint8_t)(i ^ (size_t)r * 31))
                return BAD_VALUE;
    free(in);
    free(out);
    /* a bad root is refused locally */
    if (shs__boot_bcast(b, &mine, sizeof(mine), n) != SHS_ERR_INVALID_ARG)
        return BAD_VALUE;
    shs__boot_destroy(b);
    return 0;
}

static void check_collectives(int size)
{
    job_t job;
    int codes[MAX_PROCS];
    job_init(&job, size, 10000);
    run_job(&job, collectives_rank, codes);
    for (int r = 0; r < size; r++)
        ck_assert_msg(codes[r] == 0, "rank %d of %d exited with %d", r, size, codes[r]);
}

START_TEST(test_size1_needs_no_socket)
{
    job_t job = {"not-an-address", 1, 100};
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(&job, 0, 1, "t", &c);
    ck_assert_int_eq(shs__boot_create(&c, &b), SHS_OK);
    uint32_t in = 0xfeedu, out = 0;
    ck_assert_int_eq(shs__boot_allgather(b, &in, sizeof(in), &out), SHS_OK);
    ck_assert_uint_eq(out, 0xfeedu);
    ck_assert_int_eq(shs__boot_bcast(b, &in, sizeof(in), 0), SHS_OK);
    ck_assert_int_eq(shs__boot_barrier(b), SHS_OK);
    ck_assert_int_eq(shs__boot_rank(b), 0);
    ck_assert_int_eq(shs__boot_size(b), 1);
    shs__boot_destroy(b);
}
END_TEST

START_TEST(test_size1_collectives) { check_collectives(1); }
END_TEST
START_TEST(test_size2_collectives) { check_collectives(2); }
END_TEST
START_TEST(test_size4_collectives) { check_collectives(4); }
END_TEST

START_TEST(test_create_rejects_bad_config)
{
    job_t job = {"127.0.0.1:1", 2, 100};
    shs__config_t c;
    shs__boot_t *b = NULL;
    make_cfg(&job, -1, 2, "t", &c);
    ck_assert_int_eq(shs__boot_create(&c, &b), SHS_ERR_CONFIG);
    make_cfg(&job, 2, 2, "t", &c);
    ck_assert_int_eq(shs__boot_create(&c, &b), SHS_ERR_CONFIG);
    snprintf(job.addr, sizeof(job.addr), "no-port");
    make_cfg(&job, 1, 2, "t", &c);
    ck_assert_int_eq(shs__boot_create(&c, &b), SHS_ERR_CONFIG);
    ck_assert_ptr_null(b);
}
END_TEST

static int size_mismatch_rank(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(job, rank, job->size, "t", &c);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st != SHS_OK)
        return code(st);
    uint64_t in[2] = {1, 2}, out[2 * MAX_PROCS];
    size_t len = rank == 1 ? 16 : 8;
    st = shs__boot_allgather(b, in, len, out);
    if (st != SHS_ERR_SIZE_MISMATCH)
        return st == SHS_OK ? BAD_VALUE : code(st);
    /* The mismatch is reported, and the job can go on. */
    st = shs__boot_barrier(b);
    shs__boot_destroy(b);
    return code(st);
}

START_TEST(test_allgather_size_mismatch)
{
    job_t job;
    int codes[MAX_PROCS];
    job_init(&job, 3, 5000);
    run_job(&job, size_mismatch_rank, codes);
    for (int r = 0; r < 3; r++)
        ck_assert_msg(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
}
END_TEST

static int op_mismatch_rank(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(job, rank, job->size, "t", &c);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st != SHS_OK)
        return code(st);
    uint32_t v = 5, out[MAX_PROCS];
    st = rank == 1 ? shs__boot_barrier(b) : shs__boot_allgather(b, &v, sizeof(v), out);
    shs__boot_destroy(b);
    return code(st);
}

START_TEST(test_collective_mismatch)
{
    job_t job;
    int codes[MAX_PROCS];
    job_init(&job, 2, 5000);
    run_job(&job, op_mismatch_rank, codes);
    ck_assert_int_eq(codes[0], -SHS_ERR_PROTOCOL);
    ck_assert_int_eq(codes[1], -SHS_ERR_PROTOCOL);
}
END_TEST

/* Who joins a rendezvous, and what each process must get. A process may
 * claim a rank someone else holds, carry another token or job size, or come
 * late; ranks left out of the list never start. */
typedef struct admission {
    const char *name;
    int size, timeout_ms, nproc;
    int rank[MAX_PROCS];
    const char *token[MAX_PROCS]; /* NULL: the job's */
    int claimed_size[MAX_PROCS];  /* 0: the job's */
    int delay_ms[MAX_PROCS];
    int want[MAX_PROCS];          /* exit code: 0 or -status */
    /* Delays order the arrivals on a quiet host only: under valgrind on a
     * loaded one a process may start seconds late. A process in alt_mask
     * may get want_alt instead, the code of the other order; race_a and
     * race_b (when they differ) claim the same rank, and exactly one of
     * them must get in. */
    unsigned alt_mask;
    int want_alt[MAX_PROCS];
    int race_a, race_b;
} admission_t;

static const admission_t admissions[] = {
    {"wrong token: refused, and rank 0 says why it is short of a rank", 2, 1500, 2,
     {0, 1}, {NULL, "another-job"}, {0}, {0},
     {-SHS_ERR_TOKEN_MISMATCH, -SHS_ERR_TOKEN_MISMATCH}, 0, {0}, 0, 0},
    /* the impostor is refused either way: for its token, or, when the job
     * assembled while its handshake was still under way, as one too many */
    {"an impostor with another token comes first; the job still assembles", 3, 5000, 4,
     {0, 1, 2, 1}, {NULL, NULL, NULL, "another-job"}, {0}, {0, 300, 300, 0},
     {0, 0, 0, -SHS_ERR_TOKEN_MISMATCH}, 1u << 3, {0, 0, 0, -SHS_ERR_CONFIG}, 0, 0},
    {"a second rank 1 while rank 0 still waits for rank 2", 3, 5000, 4,
     {0, 1, 2, 1}, {NULL}, {0}, {0, 0, 1000, 300},
     {0, 0, 0, -SHS_ERR_CONFIG}, 1u << 1 | 1u << 3, {0, -SHS_ERR_CONFIG, 0, 0}, 1, 3},
    {"rank 1 believes in another job size", 2, 1500, 2,
     {0, 1}, {NULL}, {0, 3}, {0},
     {-SHS_ERR_SIZE_MISMATCH, -SHS_ERR_SIZE_MISMATCH}, 0, {0}, 0, 0},
    {"rank 2 of 3 never starts", 3, 700, 2,
     {0, 1}, {NULL}, {0}, {0},
     {-SHS_ERR_TIMEOUT, -SHS_ERR_TIMEOUT}, 0, {0}, 0, 0},
    {"rank 0 never starts", 2, 500, 1,
     {1}, {NULL}, {0}, {0},
     {-SHS_ERR_TIMEOUT}, 0, {0}, 0, 0},
};

static const admission_t *current;

static int admission_rank(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    sleep_ms(slow(current->delay_ms[proc]));
    make_cfg(job, rank, current->claimed_size[proc] ? current->claimed_size[proc] : job->size,
             current->token[proc] ? current->token[proc] : "right", &c);
    uint64_t t0 = shs__now_ns();
    shs_status_t st = shs__boot_create(&c, &b);
    /* a refusal or a timeout arrives within the deadline plus slack */
    if ((shs__now_ns() - t0) / 1000000 > (uint64_t)job->timeout_ms + (uint64_t)slow(2000))
        return TOO_SLOW;
    if (st != SHS_OK)
        return code(st);
    st = shs__boot_barrier(b);
    shs__boot_destroy(b);
    return code(st);
}

START_TEST(test_admission)
{
    job_t job;
    int codes[MAX_PROCS];
    current = &admissions[_i];
    job_init(&job, current->size, current->timeout_ms);
    run_procs(&job, current->nproc, current->rank, admission_rank, codes);
    for (int i = 0; i < current->nproc; i++) {
        bool alt = (current->alt_mask >> i & 1u) && codes[i] == current->want_alt[i];
        ck_assert_msg(codes[i] == current->want[i] || alt,
                      "%s: process %d (rank %d) exited with %d, expected %d", current->name, i,
                      current->rank[i], codes[i], current->want[i]);
    }
    if (current->race_a != current->race_b)
        ck_assert_msg((codes[current->race_a] == 0) != (codes[current->race_b] == 0),
                      "%s: processes %d and %d both claimed rank %d: %d and %d (exactly one "
                      "must get in)", current->name, current->race_a, current->race_b,
                      current->rank[current->race_a], codes[current->race_a],
                      codes[current->race_b]);
}
END_TEST

/* Rank `quitter` leaves after the first barrier; the others start a collective. */
static int quitter;

static int peer_exit_rank(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(job, rank, job->size, "t", &c);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st == SHS_OK)
        st = shs__boot_barrier(b);
    if (st != SHS_OK)
        return code(st);
    if (rank == quitter)
        _exit(0);
    uint64_t t0 = shs__now_ns();
    uint32_t v = 1, out[MAX_PROCS];
    st = shs__boot_allgather(b, &v, sizeof(v), out);
    if ((shs__now_ns() - t0) / 1000000 > (uint64_t)slow(1000))
        return TOO_SLOW; /* a dead peer is noticed at once, not at the deadline */
    if (st != SHS_ERR_PEER_FAILED)
        return st == SHS_OK ? BAD_VALUE : code(st);
    /* poisoned: the same answer again, without waiting */
    st = shs__boot_barrier(b);
    shs__boot_destroy(b);
    return code(st);
}

/* _i = 0: the last rank leaves; _i = 1: rank 0, the hub of every collective. */
START_TEST(test_peer_exit_mid_collective)
{
    job_t job;
    int codes[3];
    quitter = _i == 0 ? 2 : 0;
    job_init(&job, 3, 8000);
    run_job(&job, peer_exit_rank, codes);
    for (int r = 0; r < 3; r++)
        ck_assert_msg(codes[r] == (r == quitter ? 0 : -SHS_ERR_PEER_FAILED),
                      "rank %d exited with %d after rank %d left", r, codes[r], quitter);
}
END_TEST

static int lone_root(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(job, 0, job->size, "t", &c);
    return code(shs__boot_create(&c, &b));
}

static int token_root(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(job, 0, job->size, SECRET, &c);
    return code(shs__boot_create(&c, &b));
}

static int connect_retry(const char *addr_port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    sa.sin_port = htons((uint16_t)atoi(strchr(addr_port, ':') + 1));
    for (int i = 0; i < 200; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        close(fd);
        sleep_ms(10);
    }
    return -1;
}

/* A raw client speaks to a live rank 0 and reads its error frame back. */
static void raw_hello(const uint8_t *msg, size_t len, shs_status_t want)
{
    job_t job;
    int codes[1];
    const int ranks[] = {0};
    job_init(&job, 2, 1500);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = connect_retry(job.addr);
        if (fd < 0)
            _exit(1);
        if (write(fd, msg, len) != (ssize_t)len)
            _exit(2);
        uint8_t reply[SHS_BOOT_HDR_LEN + 8];
        size_t got = 0;
        while (got < sizeof(reply)) {
            ssize_t n = read(fd, reply + got, sizeof(reply) - got);
            if (n <= 0)
                _exit(3);
            got += (size_t)n;
        }
        shs__boot_hdr_t h;
        if (shs__boot_hdr_decode(reply, sizeof(reply), 512, &h) != SHS_OK || h.type != 3)
            _exit(4);
        int32_t st = (int32_t)ntohl(*(uint32_t *)(reply + SHS_BOOT_HDR_LEN));
        _exit(st == want ? 0 : 5);
    }
    run_procs(&job, 1, ranks, lone_root, codes);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "raw client failed (%d)",
                  WEXITSTATUS(ws));
    ck_assert_int_eq(codes[0], -want);
}

START_TEST(test_other_version_refused_on_the_wire)
{
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION + 1, 1, 0};
    uint8_t raw[SHS_BOOT_HDR_LEN];
    shs__boot_hdr_encode(&h, raw);
    raw_hello(raw, sizeof(raw), SHS_ERR_VERSION_MISMATCH);
}
END_TEST

START_TEST(test_garbage_refused_on_the_wire)
{
    const char http[] = "GET / HTTP/1.0\r\n\r\n";
    raw_hello((const uint8_t *)http, sizeof(http) - 1, SHS_ERR_PROTOCOL);
}
END_TEST

START_TEST(test_oversized_hello_refused)
{
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, 1, 1u << 20};
    uint8_t raw[SHS_BOOT_HDR_LEN];
    shs__boot_hdr_encode(&h, raw);
    raw_hello(raw, sizeof(raw), SHS_ERR_PROTOCOL);
}
END_TEST

/* ---- authentication: what crosses the wire, strangers, replay, tampering ---- */


static bool contains(const uint8_t *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return true;
    return false;
}

/* Read exactly len bytes within ms; false on EOF, error or timeout. */
static bool read_full_ms(int fd, uint8_t *buf, size_t len, int ms)
{
    shs__deadline_t dl = shs__deadline_in_ms(ms);
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = shs__deadline_remaining_ms(dl);
        if (left == 0 || poll(&p, 1, left) <= 0)
            return false;
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

static void write_frame(int fd, uint16_t type, const void *payload, uint32_t len)
{
    uint8_t buf[SHS_BOOT_HDR_LEN + 64];
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, type, len};
    ck_assert_uint_le(len, 64);
    shs__boot_hdr_encode(&h, buf);
    memcpy(buf + SHS_BOOT_HDR_LEN, payload, len);
    ck_assert_int_eq(write(fd, buf, SHS_BOOT_HDR_LEN + len), (ssize_t)(SHS_BOOT_HDR_LEN + len));
}

static int listen_on(const job_t *job)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_port = htons((uint16_t)atoi(strchr(job->addr, ':') + 1));
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    return fd;
}

static int accept_ms(int lfd, int ms)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, ms), 1);
    int fd = accept(lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    return fd;
}

static const char *joiner_token;

static int joiner_rank(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    make_cfg(job, 1, 2, joiner_token, &c);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st == SHS_OK)
        shs__boot_destroy(b);
    return code(st);
}

/* What a joining rank sends, as seen by a rank 0 that does not hold the
 * token: a hello and a proof, never the token. The joiner then refuses this
 * rank 0, which cannot prove itself. hello_p/auth_p keep the bytes. */
static void fake_root_capture(const char *token, uint8_t *hello_p, uint8_t *auth_p,
                              int *code_p)
{
    job_t job;
    int codes[1];
    const int ranks[] = {1};
    job_init(&job, 2, 5000);
    int lfd = listen_on(&job);
    joiner_token = token;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(lfd);
        run_procs(&job, 1, ranks, joiner_rank, codes);
        _exit(codes[0]);
    }
    int fd = accept_ms(lfd, slow(5000));
    uint8_t seen[4096];
    size_t n = SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN;
    ck_assert(read_full_ms(fd, seen, n, slow(5000)));
    shs__boot_hdr_t h;
    ck_assert_int_eq(shs__boot_hdr_decode(seen, n, 64, &h), SHS_OK);
    ck_assert_uint_eq(h.type, SHS_BOOT_FT_HELLO);
    uint8_t nonce[SHS_BOOT_NONCE_LEN];
    for (size_t i = 0; i < sizeof(nonce); i++)
        nonce[i] = (uint8_t)(i * 13 + 1);
    write_frame(fd, SHS_BOOT_FT_CHALLENGE, nonce, sizeof(nonce));
    ck_assert(read_full_ms(fd, seen + n, SHS_BOOT_HDR_LEN + SHS_BOOT_PROOF_LEN, slow(5000)));
    ck_assert_uint_eq(seen[n + 7], SHS_BOOT_FT_AUTH);
    if (hello_p != NULL)
        memcpy(hello_p, seen, n);
    if (auth_p != NULL)
        memcpy(auth_p, seen + n, SHS_BOOT_HDR_LEN + SHS_BOOT_PROOF_LEN);
    n += SHS_BOOT_HDR_LEN + SHS_BOOT_PROOF_LEN;
    uint8_t bogus[SHS_BOOT_PROOF_LEN];
    memset(bogus, 0x42, sizeof(bogus));
    write_frame(fd, SHS_BOOT_FT_ACCEPT, bogus, sizeof(bogus));
    /* anything else it sends before hanging up */
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, slow(3000)) <= 0 || n == sizeof(seen))
            break;
        ssize_t k = read(fd, seen + n, sizeof(seen) - n);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    *code_p = WIFEXITED(ws) ? WEXITSTATUS(ws) : 999;
    close(fd);
    close(lfd);
    ck_assert_msg(!contains(seen, n, token), "the job token crossed the wire");
}

START_TEST(test_token_never_on_the_wire)
{
    int rc;
    fake_root_capture(SECRET, NULL, NULL, &rc);
    /* mutual: rank 0 without the token is refused by the joiner */
    ck_assert_int_eq(rc, -SHS_ERR_TOKEN_MISMATCH);
}
END_TEST

/* A recorded hello and proof, replayed to a real rank 0 of the same job,
 * meet a fresh challenge and are refused. */
START_TEST(test_replayed_handshake_refused)
{
    uint8_t hello[SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN];
    uint8_t auth[SHS_BOOT_HDR_LEN + SHS_BOOT_PROOF_LEN];
    int rc;
    fake_root_capture(SECRET, hello, auth, &rc);

    job_t job;
    int codes[1];
    const int ranks[] = {0};
    job_init(&job, 2, 1500);
    joiner_token = SECRET;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = connect_retry(job.addr);
        uint8_t reply[SHS_BOOT_HDR_LEN + 64];
        if (fd < 0 || write(fd, hello, sizeof(hello)) != (ssize_t)sizeof(hello))
            _exit(1);
        if (!read_full_ms(fd, reply, SHS_BOOT_HDR_LEN + SHS_BOOT_NONCE_LEN, slow(3000)) ||
            reply[7] != SHS_BOOT_FT_CHALLENGE)
            _exit(2);
        if (write(fd, auth, sizeof(auth)) != (ssize_t)sizeof(auth))
            _exit(3);
        if (!read_full_ms(fd, reply, SHS_BOOT_HDR_LEN + SHS_BOOT_ERROR_FIXED, slow(3000)))
            _exit(4);
        shs__boot_hdr_t h;
        if (shs__boot_hdr_decode(reply, sizeof(reply), 512, &h) != SHS_OK ||
            h.type != SHS_BOOT_FT_ERROR)
            _exit(5); /* an ACCEPT would mean the replay worked */
        int32_t st = (int32_t)ntohl(*(uint32_t *)(reply + SHS_BOOT_HDR_LEN));
        _exit(st == SHS_ERR_TOKEN_MISMATCH ? 0 : 6);
    }
    run_procs(&job, 1, ranks, token_root, codes);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "replayer: %d", WEXITSTATUS(ws));
    ck_assert_int_eq(codes[0], -SHS_ERR_TOKEN_MISMATCH);
}
END_TEST

/* A real rank 0 and a joiner with another token: both refuse, and neither
 * token reaches either log. */
static int logged_rank(const job_t *job, int rank, int proc)
{
    char path[64];
    shs__config_t c;
    shs__boot_t *b;
    snprintf(path, sizeof(path), "/tmp/shs-unit-boot-%d-%d.log", (int)getppid(), proc);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return BAD_VALUE;
    shs__log_set_stream(f);
    shs__log_set_level(SHS_LOG_LVL_DEBUG);
    make_cfg(job, rank, 2, rank == 0 ? SECRET : "other-" SECRET, &c);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st == SHS_OK)
        shs__boot_destroy(b);
    fclose(f);
    return code(st);
}

START_TEST(test_wrong_token_refused_token_not_logged)
{
    job_t job;
    int codes[2];
    job_init(&job, 2, 1500);
    run_job(&job, logged_rank, codes);
    ck_assert_int_eq(codes[0], -SHS_ERR_TOKEN_MISMATCH);
    ck_assert_int_eq(codes[1], -SHS_ERR_TOKEN_MISMATCH);
    for (int p = 0; p < 2; p++) {
        char path[64], text[8192];
        snprintf(path, sizeof(path), "/tmp/shs-unit-boot-%d-%d.log", (int)getpid(), p);
        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        unlink(path);
        text[n] = '\0';
        ck_assert_msg(strstr(text, SECRET) == NULL, "process %d logged a token: %s", p, text);
        ck_assert_msg(strstr(text, p == 0 ? "could not prove it holds this job's token"
                                          : "rank 0 refused this rank") != NULL,
                      "process %d: %s", p, text);
    }
}
END_TEST

/* Strangers hold connections to rank 0 while the job assembles: one silent,
 * one with half a hello (slowloris), one with garbage, one with a wrong proof.
 * The job must assemble as fast as without them, and rank 0 must drop the
 * silent ones at their handshake deadline. */
/* A join bound below the handshake deadline: a rank 0 that read hellos one at
 * a time would hold everyone behind the half hello for the whole deadline. */
#define STRANGER_HANDSHAKE_MS 3000
#define JOIN_BOUND_MS 2000

static int stranger_or_rank(const job_t *job, int rank, int proc)
{
    if (rank >= 0) {
        shs__config_t c;
        shs__boot_t *b;
        if (rank > 0)
            sleep_ms(slow(300)); /* the strangers are in first */
        make_cfg(job, rank, job->size, SECRET, &c);
        c.bootstrap_handshake_ms = slow(STRANGER_HANDSHAKE_MS);
        uint64_t t0 = shs__now_ns();
        shs_status_t st = shs__boot_create(&c, &b);
        uint64_t ms = (shs__now_ns() - t0) / 1000000;
        if (st != SHS_OK)
            return code(st);
        st = shs__boot_barrier(b);
        shs__boot_destroy(b);
        /* rank 0 started 300 ms before the others */
        if (ms > (uint64_t)slow(JOIN_BOUND_MS + (rank == 0 ? 300 : 0)))
            return TOO_SLOW;
        return code(st);
    }
    int fd = connect_retry(job->addr);
    if (fd < 0)
        return 1;
    uint64_t t0 = shs__now_ns();
    uint8_t hdr[SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN];
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, SHS_BOOT_FT_HELLO,
                         SHS_BOOT_HELLO_LEN};
    shs__boot_hdr_encode(&h, hdr);
    memset(hdr + SHS_BOOT_HDR_LEN, 0, SHS_BOOT_HELLO_LEN);
    hdr[SHS_BOOT_HDR_LEN + 3] = 1;                 /* claims rank 1 */
    hdr[SHS_BOOT_HDR_LEN + 7] = (uint8_t)job->size;
    switch (rank) {
    case -1: /* silent */
        break;
    case -2: /* half a hello, then a byte now and then */
        if (write(fd, hdr, 5) != 5)
            return 2;
        break;
    case -3: /* garbage */
        if (write(fd, "\x16\x03\x01\x02\x00garbage", 12) != 12)
            return 2;
        break;
    case -4: { /* a hello, then a wrong proof */
        uint8_t reply[SHS_BOOT_HDR_LEN + SHS_BOOT_NONCE_LEN], proof[SHS_BOOT_PROOF_LEN];
        if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr) ||
            !read_full_ms(fd, reply, sizeof(reply), slow(3000)))
            return 3;
        memset(proof, 7, sizeof(proof));
        write_frame(fd, SHS_BOOT_FT_AUTH, proof, sizeof(proof));
        break;
    }
    }
    /* rank 0 must close every stranger within its handshake deadline plus slack */
    for (;;) {
        uint8_t junk[256];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (rank == -2 && write(fd, hdr + 5, 1) != 1)
            break; /* closed under us: good */
        if (poll(&p, 1, 100) == 1) {
            ssize_t n = read(fd, junk, sizeof(junk));
            if (n <= 0)
                break;
            continue; /* an error frame, then EOF */
        }
        if ((shs__now_ns() - t0) / 1000000 > (uint64_t)slow(STRANGER_HANDSHAKE_MS + 3000))
            return TOO_SLOW;
    }
    close(fd);
    return 0;
}

START_TEST(test_strangers_do_not_stall_the_job)
{
    job_t job;
    int codes[7];
    const int who[] = {0, -1, -2, -3, -4, 1, 2};
    job_init(&job, 3, 20000);
    run_procs(&job, 7, who, stranger_or_rank, codes);
    for (int i = 0; i < 7; i++)
        ck_assert_msg(codes[i] == 0, "process %d (%d) exited with %d", i, who[i], codes[i]);
}
END_TEST

/* A proxy between rank 1 and rank 0 flips one bit of rank 1's allgather
 * payload after the handshake: rank 0 must refuse the frame, not use it. The
 * proxy's socket is bound before the fork, so no port can be taken meanwhile. */
static int proxy_lfd = -1;

static int tamper_proc(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    job_t via = *job;
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    if (getsockname(proxy_lfd, (struct sockaddr *)&sa, &sl) != 0)
        return 1;
    if (rank == 1) /* rank 1 talks to the proxy */
        snprintf(via.addr, sizeof(via.addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    if (rank >= 0) {
        close(proxy_lfd);
        make_cfg(&via, rank, 2, SECRET, &c);
        shs_status_t st = shs__boot_create(&c, &b);
        if (st != SHS_OK)
            return 100 + code(st);
        uint8_t mine[64], all[128];
        memset(mine, rank, sizeof(mine));
        st = shs__boot_allgather(b, mine, sizeof(mine), all);
        shs__boot_destroy(b);
        return code(st);
    }
    int a = accept_ms(proxy_lfd, slow(5000)), z = connect_retry(job->addr);
    if (z < 0)
        return 1;
    size_t from_joiner = 0;
    /* hello + proof, then the allgather frame's header and fixed part */
    const size_t flip_at = (SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN) +
                           (SHS_BOOT_HDR_LEN + SHS_BOOT_PROOF_LEN) + SHS_BOOT_HDR_LEN +
                           SHS_BOOT_CONTRIB_FIXED + 5;
    shs__deadline_t dl = shs__deadline_in_ms(slow(8000));
    while (!shs__deadline_passed(dl)) {
        struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = z, .events = POLLIN}};
        if (poll(p, 2, 100) <= 0)
            continue;
        uint8_t buf[4096];
        if (p[0].revents) {
            ssize_t n = read(a, buf, sizeof(buf));
            if (n <= 0)
                break;
            if (flip_at >= from_joiner && flip_at < from_joiner + (size_t)n)
                buf[flip_at - from_joiner] ^= 0x10;
            from_joiner += (size_t)n;
            if (write(z, buf, (size_t)n) != n)
                break;
        }
        if (p[1].revents) {
            ssize_t n = read(z, buf, sizeof(buf));
            if (n <= 0 || write(a, buf, (size_t)n) != n)
                break;
        }
    }
    return from_joiner > flip_at ? 0 : 2;
}

START_TEST(test_tampered_frame_refused)
{
    job_t job, any;
    int codes[3];
    const int who[] = {-1, 0, 1};
    job_init(&job, 2, 5000);
    snprintf(any.addr, sizeof(any.addr), "127.0.0.1:0");
    proxy_lfd = listen_on(&any);
    run_procs(&job, 3, who, tamper_proc, codes);
    close(proxy_lfd);
    ck_assert_int_eq(codes[0], 0);
    ck_assert_int_eq(codes[1], -SHS_ERR_PROTOCOL);
    ck_assert_msg(codes[2] != 0 && codes[2] < 100, "rank 1 exited with %d", codes[2]);
}
END_TEST

/* ---- the rejoin listeners (serve.c) and the rejoiner (join.c) ---- */

static int rejoin_pipe[2]; /* rank 1 tells rank 0 that the claims are done */

static bool fake_is_rendezvous(void *arg)
{
    (void)arg;
    return true;
}

/* The job has seen rank 2 fail; ranks 0 and 1 are alive. */
static bool fake_is_alive(void *arg, int rank)
{
    (void)arg;
    return rank != 2;
}

/* The transport's part, faked: the request reversed, or refused when it
 * starts with 'x'. */
static shs_status_t fake_request(void *arg, int rank, const void *req, size_t len, void *reply,
                                 size_t *reply_len, char *why, size_t why_len)
{
    const uint8_t *in = req;
    (void)arg;
    if (len > 0 && in[0] == 'x') {
        snprintf(why, why_len, "rank %d asked for x", rank);
        return SHS_ERR_CONFIG;
    }
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)reply)[i] = in[len - 1 - i];
    *reply_len = len;
    return SHS_OK;
}

/* A claimant of `rank` (job size `size`) with `token`: its create's status;
 * with b_p, the bootstrap it got (else destroyed). */
static shs_status_t claim(const job_t *job, int rank, int size, const char *token, int ms,
                          shs__boot_t **b_p)
{
    shs__config_t c;
    shs__boot_t *b = NULL;
    make_cfg(job, rank, size, token, &c);
    c.rejoin = 1;
    c.bootstrap_timeout_ms = slow(ms);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st == SHS_OK && b_p != NULL)
        *b_p = b;
    else if (st == SHS_OK)
        shs__boot_destroy(b);
    return st;
}

/* Rank 2 (failed, as the job sees it) is admitted: the directory names
 * rank 0's service and counts ranks 0 and 1 alive; a request to the
 * service is answered, or refused with the transport's status. */
static int claim_admitted(const job_t *job)
{
    shs__boot_t *b = NULL;
    if (claim(job, 2, 3, "t-rejoin", 5000, &b) != SHS_OK)
        return 106;
    int rc = 0;
    void *reply = NULL;
    size_t len = 0;
    if (!shs__boot_dir_alive(b, 0) || !shs__boot_dir_alive(b, 1) || shs__boot_dir_alive(b, 2))
        rc = 107;
    else if (shs__boot_request(b, shs__boot_dir_addr(b, 0), "abc", 3, &reply, &len) != SHS_OK ||
             len != 3 || memcmp(reply, "cba", 3) != 0)
        rc = 108;
    free(reply);
    reply = NULL;
    if (rc == 0 && shs__boot_request(b, shs__boot_dir_addr(b, 0), "xyz", 3, &reply, &len) !=
                       SHS_ERR_CONFIG)
        rc = 109;
    free(reply);
    shs__boot_destroy(b);
    return rc;
}

static int rejoin_rank(const job_t *job, int rank, int proc)
{
    shs__config_t c;
    shs__boot_t *b;
    (void)proc;
    make_cfg(job, rank, job->size, "t-rejoin", &c);
    shs_status_t st = shs__boot_create(&c, &b);
    if (st != SHS_OK)
        return code(st);
    if (rank == 0) {
        /* rank 0 serves rejoiners until rank 1 is done with its claims */
        shs__boot_serve_ops_t ops = {fake_is_rendezvous, fake_is_alive, fake_request, NULL};
        shs__boot_serve_t *serve;
        if ((st = shs__boot_serve_start(b, &ops, &serve)) != SHS_OK || serve == NULL)
            return st != SHS_OK ? code(st) : BAD_VALUE;
        shs__boot_serve_set_addr(serve, 0, shs__boot_serve_addr(serve));
        struct pollfd pfd = {.fd = rejoin_pipe[0], .events = POLLIN};
        int ready = poll(&pfd, 1, slow(20000));
        shs__boot_serve_stop(serve);
        shs__boot_destroy(b);
        return ready == 1 ? 0 : BAD_VALUE;
    }
    int rc = 0;
    if (rank == 1) {
        /* a rejoiner is refused for a wrong token, another job size, a
         * living rank (asked again until its deadline) */
        if (claim(job, 2, 3, "t-other", 5000, NULL) != SHS_ERR_TOKEN_MISMATCH)
            rc = 101;
        else if (claim(job, 2, 4, "t-rejoin", 5000, NULL) != SHS_ERR_SIZE_MISMATCH)
            rc = 102;
        else if (claim(job, 1, 3, "t-rejoin", 600, NULL) != SHS_ERR_BAD_STATE)
            rc = 103;
        else
            rc = claim_admitted(job);
        if (write(rejoin_pipe[1], "x", 1) != 1)
            rc = 105;
    }
    shs__boot_destroy(b);
    return rc;
}

START_TEST(test_rejoin)
{
    job_t job;
    int codes[MAX_PROCS];
    ck_assert_int_eq(pipe(rejoin_pipe), 0);
    job_init(&job, 3, 10000);
    /* two entries: the job asks for rejoins */
    size_t used = strlen(job.addr);
    snprintf(job.addr + used, sizeof(job.addr) - used, ",127.0.0.1:%d", free_port());
    run_job(&job, rejoin_rank, codes);
    close(rejoin_pipe[0]);
    close(rejoin_pipe[1]);
    for (int r = 0; r < 3; r++)
        ck_assert_msg(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
}
END_TEST

/* Nothing answers at any address: SHS_ERR_TIMEOUT at the deadline. */
START_TEST(test_rejoin_nobody_there)
{
    job_t job;
    job_init(&job, 3, 10000);
    snprintf(job.addr, sizeof(job.addr), "127.0.0.1:%d,127.0.0.1:%d", free_port(),
             free_port());
    ck_assert_int_eq(claim(&job, 1, 3, "t", 300, NULL), SHS_ERR_TIMEOUT);
}
END_TEST

static void quiet(void)
{
    /* Refusals and timeouts are the point of these tests; keep their logs
     * from drowning the summary, but let real failures show. */
    shs__log_set_level(getenv("SHS_TEST_VERBOSE") != NULL ? SHS_LOG_LVL_DEBUG : SHS_LOG_LVL_ERROR);
    /* Seed libcrypto's generator once here, so that the forked ranks inherit
     * it: seeding takes ~1 s under valgrind and would eat their deadlines. */
    uint8_t warm[1];
    ck_assert_int_eq(shs__random(warm, sizeof(warm)), SHS_OK);
}

Suite *bootstrap_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *wire = tcase_create("wire");
    tcase_add_test(wire, test_hdr_round_trip);
    tcase_add_test(wire, test_hdr_malformed);
    suite_add_tcase(s, wire);

    TCase *jobs = tcase_create("jobs");
    tcase_add_checked_fixture(jobs, quiet, NULL);
    tcase_set_timeout(jobs, 40);
    tcase_add_test(jobs, test_size1_needs_no_socket);
    tcase_add_test(jobs, test_size1_collectives);
    tcase_add_test(jobs, test_size2_collectives);
    tcase_add_test(jobs, test_size4_collectives);
    tcase_add_test(jobs, test_create_rejects_bad_config);
    tcase_add_test(jobs, test_allgather_size_mismatch);
    tcase_add_test(jobs, test_collective_mismatch);
    tcase_add_loop_test(jobs, test_admission, 0,
                        (int)(sizeof(admissions) / sizeof(admissions[0])));
    tcase_add_loop_test(jobs, test_peer_exit_mid_collective, 0, 2);
    tcase_add_test(jobs, test_other_version_refused_on_the_wire);
    tcase_add_test(jobs, test_garbage_refused_on_the_wire);
    tcase_add_test(jobs, test_oversized_hello_refused);
    suite_add_tcase(s, jobs);

    TCase *auth = tcase_create("auth");
    tcase_add_checked_fixture(auth, quiet, NULL);
    tcase_set_timeout(auth, 40);
    tcase_add_test(auth, test_token_never_on_the_wire);
    tcase_add_test(auth, test_replayed_handshake_refused);
    tcase_add_test(auth, test_wrong_token_refused_token_not_logged);
    tcase_add_test(auth, test_strangers_do_not_stall_the_job);
    tcase_add_test(auth, test_tampered_frame_refused);
    tcase_add_test(auth, test_rejoin);
    tcase_add_test(auth, test_rejoin_nobody_there);
    suite_add_tcase(s, auth);
    return s;
}

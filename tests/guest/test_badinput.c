/*
 * Guest test: bad input gives a clear, actionable error at the earliest point
 * and leaves the caller's memory alone. Through the public API only.
 *
 *   shs_test_badinput CASE
 *
 *   device   SHS_DEVICE names no device: SHS_ERR_NO_DEVICE, the log lists
 *            the devices there are
 *   gid      SHS_GID_INDEX names an empty entry: SHS_ERR_NO_DEVICE, named
 *   port     SHS_IB_PORT names no port: SHS_ERR_NO_DEVICE, named
 *   region   zero-length, unaligned, NULL and unknown-flag regions are refused
 *            with the reason, the memory is untouched, the context still works
 *   memlock  RLIMIT_MEMLOCK 64 KiB without CAP_IPC_LOCK: a warning at context
 *            creation and, for a 4 MiB region, SHS_ERR_NO_RESOURCE with the
 *            limit, the size and how to raise it
 *   fork     fork() after registration: the child is warned, its calls on the
 *            parent's context are refused (SHS_ERR_BAD_STATE) without touching
 *            the parent's RDMA objects, the one-sided and completion calls
 *            (shs_read, shs_write, shs_flush, shs_progress, shs_poll_imm)
 *            included; the parent carries on
 *   freed    caller memory unmapped while registered: shs_region_check and
 *            shs_region_destroy name it (the device would otherwise serve
 *            the old pinned pages without any error)
 *   shadow, shadow-running  a shadow engine of a one-rank job: bad
 *            parameters named (NULL model, unknown schedule kind, pin_cpus
 *            "banana"); its model cannot be destroyed; while its thread runs
 *            on its endpoint, barriers, regions, channels and collectives work
 *            on the context, and ctx destroy is refused (its endpoint is
 *            alive) and changes nothing; the thread idles (no rounds counted); no
 *            foreground round after a background run; NULL handles are safe;
 *            channels are allocated and a taken one is refused (two cases:
 *            the same run, each checks four of the log's sentences)
 *   pin      SHS_SHADOW_PIN=banana: the context is refused, the knob named
 *   rq-depth a context's rq_depth parameter reaches the collectives' check
 *   knobs    collectives and shadow engines created twice read no knob again:
 *            a misspelt knob is warned about once, a changed one shown once
 *   args     (under shs-launch, N ranks) every collective create (embedding
 *            table, collective, shadow engine, endpoint) given the same bad
 *            argument on every rank: the same status and cause on every rank,
 *            no peer blamed; one rank's other arguments: SHS_ERR_SIZE_MISMATCH
 *            on every rank (an invalid one: its own reason there)
 *
 * Each case but args runs in a child process (one rank, oob) whose log the launcher
 * checks for the expected sentences. Exit status: 0 pass, 1 fail, 77 no RDMA
 * device.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shadowsync/shadowsync.h>

#include "harness.h"

#define CHILD_WINDOW_S 100 /* under the CTest TIMEOUT */
#define MEMLOCK_LIMIT (64u << 10)
#define NOBODY 65534

static shs_ctx_t *ctx_or_fail(void)
{
    shs_ctx_t *ctx = NULL;
    CHECK_EQ(shs_ctx_create(NULL, &ctx), SHS_OK);
    return ctx;
}

static void case_refused_ctx(void)
{
    shs_ctx_t *ctx = NULL;
    CHECK_EQ(shs_ctx_create(NULL, &ctx), SHS_ERR_NO_DEVICE);
    if (ctx != NULL)
        fail("context handle written on failure");
}

static void case_region(void)
{
    shs_ctx_t *ctx = ctx_or_fail();
    shs_region_t *r = NULL;
    static uint64_t buf[1024];
    for (size_t i = 0; i < 1024; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;

    CHECK_EQ(shs_region_alloc(ctx, 0, SHS_ACCESS_REMOTE_READ, &r), SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_region_register(ctx, buf, 0, SHS_ACCESS_REMOTE_READ, &r), SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_region_register(ctx, (char *)buf + 1, 4096, SHS_ACCESS_REMOTE_READ, &r),
             SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_region_register(ctx, NULL, 4096, SHS_ACCESS_REMOTE_READ, &r),
             SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_region_register(ctx, buf, 4096, 0x80, &r), SHS_ERR_INVALID_ARG);
    if (r != NULL)
        fail("region handle written on failure");
    for (size_t i = 0; i < 1024; i++)
        if (buf[i] != i * 0x9e3779b97f4a7c15ull)
            fail("a refused registration changed the caller's memory at word %zu", i);
    /* the context is still usable */
    CHECK_EQ(shs_region_register(ctx, buf, sizeof(buf), SHS_ACCESS_REMOTE_READ, &r), SHS_OK);
    shs_region_destroy(r);
    shs_ctx_destroy(ctx);
}

static void case_memlock(void)
{
    struct rlimit rl = {MEMLOCK_LIMIT, MEMLOCK_LIMIT};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        fail("setrlimit(RLIMIT_MEMLOCK): %s", strerror(errno));
    /* root's CAP_IPC_LOCK lifts the limit: become nobody, as a job would be */
    if (geteuid() == 0 && (setgid(NOBODY) != 0 || setuid(NOBODY) != 0))
        fail("setuid(nobody): %s", strerror(errno));
    shs_ctx_t *ctx = ctx_or_fail();
    shs_region_t *r = NULL;
    CHECK_EQ(shs_region_alloc(ctx, 4u << 20, SHS_ACCESS_REMOTE_READ, &r), SHS_ERR_NO_RESOURCE);
    /* what fits under the limit still registers */
    CHECK_EQ(shs_region_alloc(ctx, 4096, SHS_ACCESS_REMOTE_READ, &r), SHS_OK);
    shs_region_destroy(r);
    shs_ctx_destroy(ctx);
}

static void case_fork(void)
{
    shs_ctx_t *ctx = ctx_or_fail();
    shs_region_t *r = NULL, *r2 = NULL;
    CHECK_EQ(shs_region_alloc(ctx, 1u << 20, SHS_ACCESS_REMOTE_READ | SHS_ACCESS_LOCAL_WRITE,
                              &r), SHS_OK);
    uint8_t *p = shs_region_addr(r);
    for (size_t i = 0; i < (1u << 20); i++)
        p[i] = (uint8_t)(i * 7);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        shs_region_t *x = NULL;
        CHECK_EQ(shs_region_alloc(ctx, 4096, SHS_ACCESS_REMOTE_READ, &x), SHS_ERR_BAD_STATE);
        CHECK_EQ(shs_ctx_barrier(ctx), SHS_ERR_BAD_STATE);
        /* completion polling and flushes: refused before any verb (the
         * one-sided posts share check_op's fork check; a one-rank job has
         * no peer to post to) */
        CHECK_EQ(shs_progress(ctx), SHS_ERR_BAD_STATE);
        CHECK_EQ(shs_flush(ctx, SHS_PEER_ALL, 100), SHS_ERR_BAD_STATE);
        CHECK_EQ(shs_flush_test(ctx, SHS_PEER_ALL), SHS_ERR_BAD_STATE);
        uint32_t imm;
        CHECK_EQ(shs_poll_imm(ctx, SHS_PEER_ANY, NULL, &imm), SHS_ERR_BAD_STATE);
        shs_region_destroy(r); /* refused quietly: the parent's */
        shs_ctx_destroy(ctx);  /* likewise */
        fprintf(stderr, "child: refused as expected\n");
        _exit(RC_OK);
    }
    int ws;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail("the forked child failed");
    /* the parent's region and context are intact */
    for (size_t i = 0; i < (1u << 20); i++)
        if (p[i] != (uint8_t)(i * 7))
            fail("the parent's region changed at byte %zu", i);
    CHECK_EQ(shs_region_alloc(ctx, 4096, SHS_ACCESS_REMOTE_READ, &r2), SHS_OK);
    CHECK_EQ(shs_ctx_barrier(ctx), SHS_OK);
    shs_region_destroy(r2);
    shs_region_destroy(r);
    shs_ctx_destroy(ctx);
}

static void case_freed(void)
{
    shs_ctx_t *ctx = ctx_or_fail();
    shs_region_t *r = NULL;
    size_t len = 1u << 20;
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        fail("mmap: %s", strerror(errno));
    CHECK_EQ(shs_region_register(ctx, mem, len, SHS_ACCESS_REMOTE_READ, &r), SHS_OK);
    CHECK_EQ(shs_region_check(r), SHS_OK);
    if (munmap(mem, len) != 0)
        fail("munmap: %s", strerror(errno));
    CHECK_EQ(shs_region_check(r), SHS_ERR_BAD_STATE);
    shs_region_destroy(r); /* logs it again, and deregisters */
    fprintf(stderr, "freed: refused as expected\n");
    shs_ctx_destroy(ctx);
}

/* A shadow engine of a one-rank job: the thread idles (no busy rounds), and
 * every call the headers forbid while it runs is refused with a status (or,
 * for void calls, a log line) and changes nothing; NULL handles are safe. */
static void case_shadow(void)
{
    if (shs_ctx_rank(NULL) != -1 || shs_ctx_size(NULL) != -1 || shs_region_addr(NULL) != NULL ||
        shs_region_len(NULL) != 0)
        fail("NULL handles: rank %d, size %d, addr %p, len %zu", shs_ctx_rank(NULL),
             shs_ctx_size(NULL), shs_region_addr(NULL), shs_region_len(NULL));
    shs_ctx_t *ctx = ctx_or_fail();
    shs_region_t *model, *other;
    CHECK_EQ(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &model),
             SHS_OK);
    float *w = shs_region_addr(model);
    for (int i = 0; i < 1024; i++)
        w[i] = (float)i;
    shs_shadow_t *sh = NULL;
    shs_shadow_params_t p;
    memset(&p, 0, sizeof(p));
    /* bad parameters name themselves */
    CHECK_EQ(shs_shadow_create(ctx, NULL, 0, 16, NULL, &sh), SHS_ERR_INVALID_ARG);
    CHECK_EQ(shs_shadow_create(ctx, model, 0, 16, NULL, NULL), SHS_ERR_INVALID_ARG);
    p.field_mask = SHS_SHADOW_PARAM_SCHEDULE;
    p.schedule.kind = (shs_schedule_kind_t)42;
    CHECK_EQ(shs_shadow_create(ctx, model, 0, 1024, &p, &sh), SHS_ERR_INVALID_ARG);
    p.field_mask = SHS_SHADOW_PARAM_PIN_CPUS;
    p.pin_cpus = "banana";
    CHECK_EQ(shs_shadow_create(ctx, model, 0, 1024, &p, &sh), SHS_ERR_CONFIG);
    if (sh != NULL)
        fail("engine handle written on failure");
    p.pin_cpus = "none";
    p.field_mask |= SHS_SHADOW_PARAM_PATH; /* a READ of a model being written can tear */
    p.path = SHS_SHADOW_PATH_LIVE;
    CHECK_EQ(shs_shadow_create(ctx, model, 0, 1024, &p, &sh), SHS_ERR_UNSUPPORTED);
    p.path = SHS_SHADOW_PATH_PULL;
    CHECK_EQ(shs_shadow_create(ctx, model, 0, 1024, &p, &sh), SHS_OK);

    /* the model is held by the engine even while it is stopped */
    shs_region_destroy(model);
    if (shs_region_check(model) != SHS_OK || w[5] != 5.0f)
        fail("the engine's model was destroyed under it");

    CHECK_EQ(shs_shadow_start(sh), SHS_OK);
    usleep(300 * 1000);
    /* while the thread runs on the engine's endpoint the context stays the
     * caller's: barriers, regions, channels and collectives work; the
     * engine's model and the context itself cannot go away */
    CHECK_EQ(shs_ctx_barrier(ctx), SHS_OK);
    CHECK_EQ(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE, &other), SHS_OK);
    shs_region_destroy(other);
    unsigned chan;
    CHECK_EQ(shs_ctx_channel_alloc(ctx, &chan), SHS_OK);
    shs_ctx_channel_free(ctx, chan);
    shs_coll_t *coll = NULL;
    CHECK_EQ(shs_coll_create(ctx, NULL, &coll), SHS_OK);
    shs_coll_destroy(coll);
    CHECK_EQ(shs_shadow_sync(sh), SHS_ERR_BAD_STATE);
    shs_ctx_destroy(ctx); /* refused: the context stays whole */
    shs_region_destroy(model);
    shs_shadow_stats_t s;
    CHECK_EQ(shs_shadow_stats(sh, &s), SHS_OK);
    if (!s.running || s.rounds != 0 || s.idle_rounds > 2)
        fail("one rank: running %d, %llu rounds, %llu idle rounds in 0.3 s: the thread must "
             "idle, and a round with no peer is not a sync",
             s.running, (unsigned long long)s.rounds, (unsigned long long)s.idle_rounds);
    CHECK_EQ(shs_shadow_stop(sh), SHS_OK);
    /* a foreground round after a background run is refused */
    CHECK_EQ(shs_ctx_barrier(ctx), SHS_OK);
    CHECK_EQ(shs_shadow_sync(sh), SHS_ERR_BAD_STATE);
    CHECK_EQ(shs_shadow_finish(sh), SHS_OK);
    CHECK_EQ(shs_shadow_start(sh), SHS_ERR_BAD_STATE);
    for (int i = 0; i < 1024; i++)
        if (w[i] != (float)i)
            fail("one rank: element %d changed to %g", i, (double)w[i]);

    /* channels: allocated ones differ; an explicit one that is taken is refused */
    unsigned a, b;
    CHECK_EQ(shs_ctx_channel_alloc(ctx, &a), SHS_OK);
    CHECK_EQ(shs_coll_create(ctx, NULL, &coll), SHS_OK);
    CHECK_EQ(shs_ctx_channel_alloc(ctx, &b), SHS_OK);
    if (a == b || a == 0 || b == 0)
        fail("channels %u and %u", a, b);
    shs_coll_params_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = SHS_COLL_PARAM_CHANNEL;
    cp.channel = (int)a;
    shs_coll_t *clash = NULL;
    CHECK_EQ(shs_coll_create(ctx, &cp, &clash), SHS_ERR_BAD_STATE);
    shs_ctx_channel_free(ctx, a);
    CHECK_EQ(shs_coll_create(ctx, &cp, &clash), SHS_OK);
    shs_coll_destroy(clash);
    shs_coll_destroy(coll);
    shs_ctx_channel_free(ctx, b);

    shs_shadow_destroy(sh);
    shs_region_destroy(model);
    shs_ctx_destroy(ctx);
    fprintf(stderr, "shadow: refused as expected\n");
}

/* The configuration is resolved once, by the context: creating collectives
 * and shadow engines on it reads no knob again (the launcher checks that a
 * misspelt knob is warned about, and a changed knob shown, exactly once). */
static void case_knobs_once(void)
{
    shs_ctx_t *ctx = ctx_or_fail();
    shs_region_t *model;
    CHECK_EQ(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ, &model),
             SHS_OK);
    shs_coll_t *coll;
    shs_shadow_t *sh;
    shs_shadow_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_SHADOW_PARAM_PIN_CPUS | SHS_SHADOW_PARAM_PATH;
    p.pin_cpus = "none";
    p.path = SHS_SHADOW_PATH_RING; /* it creates a collective of its own */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(shs_coll_create(ctx, NULL, &coll), SHS_OK);
        CHECK_EQ(shs_shadow_create(ctx, model, 0, 1024, &p, &sh), SHS_OK);
        shs_shadow_destroy(sh);
        shs_coll_destroy(coll);
    }
    shs_region_destroy(model);
    shs_ctx_destroy(ctx);
    fprintf(stderr, "knobs: created twice\n");
}

/* A context parameter reaches the collectives: with a receive queue of 8,
 * 4 slots need 2 * 4 + 6 = 14 receives, so shs_coll_create refuses them
 * (it checked against the environment's 256 before, then failed in use with
 * receiver-not-ready); 1 slot (8 receives) fits. */
static void case_rq_depth(void)
{
    shs_ctx_params_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = SHS_CTX_PARAM_RQ_DEPTH;
    cp.rq_depth = 8;
    shs_ctx_t *ctx = NULL;
    CHECK_EQ(shs_ctx_create(&cp, &ctx), SHS_OK);
    shs_coll_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_COLL_PARAM_SLOTS;
    p.slots = 4;
    shs_coll_t *coll = NULL;
    CHECK_EQ(shs_coll_create(ctx, &p, &coll), SHS_ERR_CONFIG);
    p.slots = 1;
    CHECK_EQ(shs_coll_create(ctx, &p, &coll), SHS_OK);
    shs_coll_destroy(coll);
    shs_ctx_destroy(ctx);
    fprintf(stderr, "rq-depth: the context's depth was used\n");
}

/* A bad SHS_SHADOW_PIN fails the context's creation with the knob named. */
static void case_pin_knob(void)
{
    shs_ctx_t *ctx = NULL;
    CHECK_EQ(shs_ctx_create(NULL, &ctx), SHS_ERR_CONFIG);
}

/* ------------------------------------------ collective creates, N ranks */

/* This rank's stderr goes to a file, read back after each create to check
 * the cause it names, and copied to the launcher's stderr as it is read. */
static int log_file = -1, log_out = -1;
static off_t log_seen;

static const char *log_since(void)
{
    static char buf[32768];
    fflush(stderr);
    ssize_t n = pread(log_file, buf, sizeof(buf) - 1, log_seen);
    n = n > 0 ? n : 0;
    buf[n] = '\0';
    log_seen += n;
    ssize_t w = n > 0 ? write(log_out, buf, (size_t)n) : 0;
    (void)w; /* the copy is for a reader; the checks read buf */
    return buf;
}

static void log_flush(void)
{
    (void)log_since();
}

static void log_capture(void)
{
    char path[] = "/tmp/shs-badinput-args-XXXXXX";
    log_file = mkstemp(path);
    if (log_file < 0)
        fail("mkstemp: %s", strerror(errno));
    unlink(path);
    fflush(stderr);
    log_out = dup(STDERR_FILENO);
    dup2(log_file, STDERR_FILENO);
    atexit(log_flush);
}

/* Every rank made the same call: got must be want here, as on every rank,
 * with the cause (why) in this rank's log and no peer blamed. */
static void expect_alike(const char *what, shs_status_t got, const void *handle,
                         shs_status_t want, const char *why)
{
    const char *log = log_since();
    if (got != want)
        fail("%s on every rank: %s, expected %s", what, shs_status_string(got),
             shs_status_string(want));
    if (handle != NULL)
        fail("%s: the handle was written on failure", what);
    if (why != NULL && strstr(log, why) == NULL)
        fail("%s: this rank's log lacks \"%s\"", what, why);
    if (strstr(log, "could not take part") != NULL || strstr(log, "other arguments") != NULL ||
        strstr(log, "refused its parameters") != NULL)
        fail("%s: a peer was blamed for arguments every rank shares", what);
}

/* One rank (the last) was given other arguments: every rank fails with
 * want_here (the odd rank: odd_st), naming why (odd: odd_why). */
static void expect_differ(const char *what, shs_status_t got, bool odd, shs_status_t odd_st,
                          const char *odd_why, const char *why)
{
    const char *log = log_since();
    shs_status_t want = odd ? odd_st : SHS_ERR_SIZE_MISMATCH;
    const char *w = odd ? odd_why : why;
    if (got != want)
        fail("%s: %s, expected %s", what, shs_status_string(got), shs_status_string(want));
    if (strstr(log, w) == NULL)
        fail("%s: this rank's log lacks \"%s\"", what, w);
}

#define EMB_ROWS 1000

static shs_emb_params_t emb_ok(void)
{
    shs_emb_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_EMB_PARAM_MAX_BATCH;
    p.rows = EMB_ROWS;
    p.dim = 8;
    p.max_batch = 64;
    return p;
}

static void args_emb(shs_ctx_t *ctx)
{
    static const int dup[] = {0, 0}, desc[] = {1, 0};
    int n = shs_ctx_size(ctx), last = n - 1;
    bool odd = g_rank == last;
    int out_of_range[] = {0, n};
    static const char *const why[] = {
        "rows >= 1 and dim 1..4096", "rows >= 1 and dim 1..4096", "dim 4097",
        "holders[1] = ", "holders[1] = 0", "holders[1] = 0", "-1 holders; at least one",
        "lr nan", "unknown map 7", "optimizer 9", "path 9", "slots -1: expected 1..64",
        "slots 65", "workers -1 (1..64)", "max_batch 0", "(a negative count?)", "eps -1",
    };
    for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++) {
        shs_emb_params_t p = emb_ok();
        switch (i) {
        case 0: p.rows = 0; break;
        case 1: p.dim = 0; break;
        case 2: p.dim = 4097; break;
        case 3: p.holders = out_of_range; p.nholders = 2; break;
        case 4: p.holders = desc; p.nholders = 2; break;
        case 5: p.holders = dup; p.nholders = 2; break;
        case 6: p.holders = dup; p.nholders = -1; break;
        case 7: p.field_mask |= SHS_EMB_PARAM_LR; p.lr = NAN; break;
        case 8: p.field_mask |= SHS_EMB_PARAM_MAP; p.map = (shs_emb_map_t)7; break;
        case 9: p.field_mask |= SHS_EMB_PARAM_OPTIMIZER; p.optimizer = (shs_emb_optimizer_t)9; break;
        case 10: p.field_mask |= SHS_EMB_PARAM_PATH; p.path = (shs_emb_path_t)9; break;
        case 11: p.field_mask |= SHS_EMB_PARAM_SLOTS; p.slots = -1; break;
        case 12: p.field_mask |= SHS_EMB_PARAM_SLOTS; p.slots = 65; break;
        case 13: p.field_mask |= SHS_EMB_PARAM_WORKERS; p.workers = -1; break;
        case 14: p.max_batch = 0; break;
        case 15: p.rows = (uint64_t)-1; break;
        case 16: p.field_mask |= SHS_EMB_PARAM_EPS; p.eps = -1.0f; break;
        }
        if (i >= 3 && i <= 6)
            p.field_mask |= SHS_EMB_PARAM_HOLDERS;
        shs_emb_t *emb = NULL;
        char what[64];
        snprintf(what, sizeof(what), "shs_emb_create, bad argument %zu", i);
        expect_alike(what, shs_emb_create(ctx, &p, &emb), emb, SHS_ERR_INVALID_ARG, why[i]);
    }
    /* valid, but not the others': every rank fails alike */
    const char *differ = "was given other arguments than this rank";
    shs_emb_params_t p = emb_ok();
    shs_emb_t *emb = NULL;
    p.dim = odd ? 16 : 8;
    expect_differ("shs_emb_create, a dim of its own", shs_emb_create(ctx, &p, &emb), false,
                  SHS_OK, NULL, differ);
    p = emb_ok();
    p.rows = odd ? EMB_ROWS + 1 : EMB_ROWS;
    expect_differ("shs_emb_create, rows of its own", shs_emb_create(ctx, &p, &emb), false,
                  SHS_OK, NULL, differ);
    /* invalid on one rank: its reason there, a mismatch elsewhere */
    p.rows = odd ? 0 : EMB_ROWS;
    expect_differ("shs_emb_create, rows 0 on one rank", shs_emb_create(ctx, &p, &emb), odd,
                  SHS_ERR_INVALID_ARG, "rows >= 1", differ);
    p = emb_ok();
    CHECK_OK(shs_emb_create(ctx, &p, &emb));
    shs_emb_destroy(emb);
    (void)log_since();
}

static void args_coll(shs_ctx_t *ctx)
{
    bool odd = g_rank == shs_ctx_size(ctx) - 1;
    static const char *const why[] = {
        "0 slots: expected 1..63", "100 slots", "chunk of 63 bytes", "(a negative value?)",
        "(a negative value?)", "smallest chunk of 4 bytes", "channel 300", "wire 7",
        "timeout -1 ms",
    };
    for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++) {
        shs_coll_params_t p;
        memset(&p, 0, sizeof(p));
        switch (i) {
        case 0: p.field_mask = SHS_COLL_PARAM_SLOTS; p.slots = 0; break;
        case 1: p.field_mask = SHS_COLL_PARAM_SLOTS; p.slots = 100; break;
        case 2: p.field_mask = SHS_COLL_PARAM_SLOT_BYTES; p.slot_bytes = 63; break;
        case 3: p.field_mask = SHS_COLL_PARAM_EAGER_BYTES; p.eager_bytes = (size_t)-1; break;
        case 4: p.field_mask = SHS_COLL_PARAM_STAGE_BYTES; p.stage_bytes = (size_t)-1; break;
        case 5: p.field_mask = SHS_COLL_PARAM_MIN_CHUNK; p.min_chunk = 4; break;
        case 6: p.field_mask = SHS_COLL_PARAM_CHANNEL; p.channel = 300; break;
        case 7: p.field_mask = SHS_COLL_PARAM_WIRE; p.wire = (shs_wire_t)7; break;
        case 8: p.field_mask = SHS_COLL_PARAM_TIMEOUT; p.timeout_ms = -1; break;
        }
        shs_coll_t *coll = NULL;
        char what[64];
        snprintf(what, sizeof(what), "shs_coll_create, bad argument %zu", i);
        expect_alike(what, shs_coll_create(ctx, &p, &coll), coll, SHS_ERR_CONFIG, why[i]);
    }
    shs_coll_params_t p = {.field_mask = SHS_COLL_PARAM_SLOTS, .slots = odd ? 5 : 3};
    shs_coll_t *coll = NULL;
    expect_differ("shs_coll_create, slots of its own", shs_coll_create(ctx, &p, &coll), false,
                  SHS_OK, NULL, "every rank must use the same SHS_COLL_* values");
    CHECK_OK(shs_coll_create(ctx, NULL, &coll));
    shs_coll_destroy(coll);
    (void)log_since();
}

static void args_shadow(shs_ctx_t *ctx)
{
    bool odd = g_rank == shs_ctx_size(ctx) - 1;
    shs_region_t *model;
    CHECK_OK(shs_region_alloc(ctx, 4096, SHS_ACCESS_LOCAL_WRITE | SHS_ACCESS_REMOTE_READ,
                              &model));
    static const char *const why[] = {
        "the model region is NULL", "bad model range", "unknown schedule kind 42",
        "algorithm 9", "4..1 GiB", "min interval 4294967295 us", "wait -1 ms",
        "pin_cpus \"banana\"", "bf16 snapshots",
    };
    static const shs_status_t want[] = {
        SHS_ERR_INVALID_ARG, SHS_ERR_INVALID_ARG, SHS_ERR_INVALID_ARG, SHS_ERR_INVALID_ARG,
        SHS_ERR_INVALID_ARG, SHS_ERR_INVALID_ARG, SHS_ERR_INVALID_ARG, SHS_ERR_CONFIG,
        SHS_ERR_UNSUPPORTED,
    };
    for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++) {
        shs_shadow_params_t p;
        memset(&p, 0, sizeof(p));
        p.field_mask = SHS_SHADOW_PARAM_PIN_CPUS;
        p.pin_cpus = "none";
        shs_region_t *m = i == 0 ? NULL : model;
        size_t count = i == 1 ? 0 : 1024;
        switch (i) {
        case 2: p.field_mask |= SHS_SHADOW_PARAM_SCHEDULE; p.schedule.kind = (shs_schedule_kind_t)42; break;
        case 3: p.field_mask |= SHS_SHADOW_PARAM_ALGORITHM; p.algorithm = (shs_shadow_algorithm_t)9; break;
        case 4: p.field_mask |= SHS_SHADOW_PARAM_CHUNK; p.chunk_bytes = (size_t)-1; break;
        case 5: p.field_mask |= SHS_SHADOW_PARAM_MIN_INTERVAL; p.min_interval_us = (uint32_t)-1; break;
        case 6: p.field_mask |= SHS_SHADOW_PARAM_WAIT_TIMEOUT; p.wait_timeout_ms = -1; break;
        case 7: p.pin_cpus = "banana"; break;
        case 8:
            p.field_mask |= SHS_SHADOW_PARAM_WIRE | SHS_SHADOW_PARAM_PATH;
            p.wire = SHS_WIRE_BF16;
            p.path = SHS_SHADOW_PATH_RING;
            break;
        }
        shs_shadow_t *sh = NULL;
        char what[64];
        snprintf(what, sizeof(what), "shs_shadow_create, bad argument %zu", i);
        expect_alike(what, shs_shadow_create(ctx, m, 0, count, &p, &sh), sh, want[i], why[i]);
    }
    const char *differ = "was given other arguments than this rank";
    shs_shadow_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = SHS_SHADOW_PARAM_PIN_CPUS;
    p.pin_cpus = "none";
    shs_shadow_t *sh = NULL;
    expect_differ("shs_shadow_create, a model of its own length",
                  shs_shadow_create(ctx, model, 0, odd ? 512 : 1024, &p, &sh), false, SHS_OK,
                  NULL, differ);
    p.field_mask |= SHS_SHADOW_PARAM_ALGORITHM;
    p.algorithm = odd ? SHS_SHADOW_BMUF : SHS_SHADOW_MA;
    expect_differ("shs_shadow_create, an algorithm of its own",
                  shs_shadow_create(ctx, model, 0, 1024, &p, &sh), false, SHS_OK, NULL, differ);
    /* the pin is each rank's own, but one rank's bad pin fails every rank */
    p.algorithm = SHS_SHADOW_MA;
    p.pin_cpus = odd ? "banana" : "none";
    expect_differ("shs_shadow_create, a bad pin on one rank",
                  shs_shadow_create(ctx, model, 0, 1024, &p, &sh), odd, SHS_ERR_CONFIG,
                  "pin_cpus \"banana\"", "could not take part (");
    p.pin_cpus = "none";
    CHECK_OK(shs_shadow_create(ctx, model, 0, 1024, &p, &sh));
    shs_shadow_destroy(sh);
    shs_region_destroy(model);
    (void)log_since();
}

static void args_endpoint(shs_ctx_t *ctx)
{
    shs_ctx_t *ep = NULL, *ep2 = NULL;
    expect_alike("shs_ctx_endpoint_create, no output", shs_ctx_endpoint_create(ctx, NULL), NULL,
                 SHS_ERR_INVALID_ARG, "ep_p (the output) is NULL");
    CHECK_OK(shs_ctx_endpoint_create(ctx, &ep));
    expect_alike("shs_ctx_endpoint_create, on an endpoint", shs_ctx_endpoint_create(ep, &ep2),
                 ep2, SHS_ERR_BAD_STATE, "refused on an endpoint");
    shs_ctx_destroy(ep);
    CHECK_OK(shs_ctx_endpoint_create(ctx, &ep));
    shs_ctx_destroy(ep);
    (void)log_since();
}

/* Under shs-launch: every collective create given the same bad argument on
 * every rank fails alike, with the same cause, blaming no peer; one rank's
 * other arguments fail every rank with SHS_ERR_SIZE_MISMATCH. After each
 * kind a valid create works: no rank was left behind in an exchange. */
static int run_args(void)
{
    if (!have_rdma_device()) {
        fprintf(stderr, "no RDMA device (/sys/class/infiniband is empty): skipped\n");
        return RC_SKIP;
    }
    double start = now_s();
    log_capture();
    shs_ctx_t *ctx = ctx_or_fail();
    g_rank = shs_ctx_rank(ctx);
    if (shs_ctx_size(ctx) < 2)
        fail("args needs 2 ranks or more");
    args_emb(ctx);
    args_coll(ctx);
    args_shadow(ctx);
    args_endpoint(ctx);
    CHECK_OK(shs_ctx_barrier(ctx));
    shs_ctx_destroy(ctx);
    fprintf(stderr, "PASS badinput args, rank %d, in %.1f s\n", g_rank, now_s() - start);
    return RC_OK;
}

/* ------------------------------------------------------------- launcher */

typedef struct bad_case {
    const char *name;
    const char *env[3][2];   /* knobs this case sets */
    void (*run)(void);
    const char *expect[4];   /* sentences the child's log must hold */
} bad_case_t;

static const bad_case_t cases[] = {
    {"device", {{"SHS_DEVICE", "nosuchdev0"}}, case_refused_ctx,
     {"no device named 'nosuchdev0'", "(SHS_DEVICE); devices here: ", "@DEV"}},
    {"gid", {{"SHS_GID_INDEX", "999"}}, case_refused_ctx, {"gid index 999 is empty or missing"}},
    {"port", {{"SHS_IB_PORT", "9"}}, case_refused_ctx,
     {"at the configured port (SHS_IB_PORT)"}},
    {"region", {{NULL}}, case_region,
     {"length 0", "is not aligned to 8 bytes", "NULL address", "unknown access flags 0x80"}},
    {"memlock", {{NULL}}, case_memlock,
     {"RLIMIT_MEMLOCK is 64 KiB: registering more than that fails",
      "RLIMIT_MEMLOCK is 64 KiB; registering 4 MiB needs more",
      "ulimit -l unlimited"}},
    {"fork", {{NULL}}, case_fork,
     {"fork() with 1 RDMA region(s) registered", "RDMAV_FORK_SAFE=1",
      "this context was created before a fork()", "child: refused as expected"}},
    {"freed", {{NULL}}, case_freed,
     {"its memory was unmapped while registered", "destroy the region first",
      "freed: refused as expected"}},
    {"shadow", {{NULL}}, case_shadow,
     {"the model region is NULL", "unknown schedule kind 42", "pin_cpus \"banana\"",
      "shadow: refused as expected"}},
    {"shadow-running", {{NULL}}, case_shadow,
     {"shs_ctx_destroy: refused: 1 endpoint(s) of this context are alive",
      "is in use by a shadow engine", "foreground rounds cannot follow a background run"}},
    {"pin", {{"SHS_SHADOW_PIN", "banana"}}, case_pin_knob, {"SHS_SHADOW_PIN", "banana"}},
    {"rq-depth", {{NULL}}, case_rq_depth,
     {"SHS_RQ_DEPTH (8)", "rq-depth: the context's depth was used"}},
    {"knobs", {{"SHS_SHADOW_WAITMS", "5"}, {"SHS_COLL_SLOTS", "5"}, {"SHS_LOG", "info"}}, case_knobs_once,
     {"1x:SHS_SHADOW_WAITMS is not a knob", "1x:SHS_COLL_SLOTS=5", "knobs: created twice"}},
};

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "args") == 0)
        return run_args();
    const bad_case_t *c = NULL;
    for (size_t i = 0; argc >= 2 && i < sizeof(cases) / sizeof(cases[0]); i++)
        if (strcmp(argv[argc - 1], cases[i].name) == 0)
            c = &cases[i];
    if (c == NULL) {
        fprintf(stderr, "usage: %s device|gid|port|region|memlock|fork|freed|shadow|"
                "shadow-running|pin|knobs|rq-depth|args\n", argv[0]);
        return RC_FAIL;
    }
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        c->run();
        return RC_OK;
    }
    if (!have_rdma_device()) {
        fprintf(stderr, "no RDMA device (/sys/class/infiniband is empty): skipped\n");
        return RC_SKIP;
    }
    const char *dev = getenv("SHS_VM_DEV");
    char logpath[] = "/tmp/shs-badinput-XXXXXX";
    int logfd = mkstemp(logpath);
    if (logfd < 0)
        fail("mkstemp: %s", strerror(errno));
    setenv("SHS_RANK", "0", 1);
    setenv("SHS_SIZE", "1", 1);
    setenv("SHS_CONNECT", "oob", 1);
    setenv("SHS_JOB_TOKEN", "badinput-test", 1);
    setenv("SHS_LOG", "warn", 1);
    if (dev != NULL && getenv("SHS_DEVICE") == NULL)
        setenv("SHS_DEVICE", dev, 1);
    for (int i = 0; i < 3 && c->env[i][0] != NULL; i++)
        setenv(c->env[i][0], c->env[i][1], 1);

    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(logfd, STDERR_FILENO);
        execl("/proc/self/exe", argv[0], "--child", c->name, (char *)NULL);
        _exit(RC_FAIL);
    }
    int ws = 0;
    double start = now_s();
    while (waitpid(pid, &ws, WNOHANG) == 0) {
        if (now_s() - start > CHILD_WINDOW_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            fprintf(stderr, "FAIL %s: still running after %d s\n", c->name, CHILD_WINDOW_S);
            return RC_FAIL;
        }
        usleep(20 * 1000);
    }
    char log[16384];
    ssize_t n = pread(logfd, log, sizeof(log) - 1, 0);
    close(logfd);
    unlink(logpath);
    log[n > 0 ? n : 0] = '\0';
    fprintf(stderr, "---- %s: the child's log\n%s----\n", c->name, log);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        fprintf(stderr, "FAIL %s: the child exited with %d\n", c->name,
                WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws));
        return RC_FAIL;
    }
    for (int i = 0; i < 4 && c->expect[i] != NULL; i++) {
        /* "1x:" before a sentence: it must appear exactly once */
        bool once = strncmp(c->expect[i], "1x:", 3) == 0;
        const char *want = strcmp(c->expect[i], "@DEV") == 0 ? dev : c->expect[i] + (once ? 3 : 0);
        if (want != NULL && strstr(log, want) == NULL) {
            fprintf(stderr, "FAIL %s: the log lacks \"%s\"\n", c->name, want);
            return RC_FAIL;
        }
        if (want != NULL && once && strstr(strstr(log, want) + 1, want) != NULL) {
            fprintf(stderr, "FAIL %s: \"%s\" appears more than once\n", c->name, want);
            return RC_FAIL;
        }
    }
    printf("PASS badinput %s in %.1f s\n", c->name, now_s() - start);
    return RC_OK;
}

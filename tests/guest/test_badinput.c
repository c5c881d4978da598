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
 *
 * Each case runs in a child process (one rank, oob) whose log the launcher
 * checks for the expected sentences. Exit status: 0 pass, 1 fail, 77 no RDMA
 * device.
 */
#include <dirent.h>
#include <errno.h>
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
    const bad_case_t *c = NULL;
    for (size_t i = 0; argc >= 2 && i < sizeof(cases) / sizeof(cases[0]); i++)
        if (strcmp(argv[argc - 1], cases[i].name) == 0)
            c = &cases[i];
    if (c == NULL) {
        fprintf(stderr, "usage: %s device|gid|port|region|memlock|fork|freed|shadow|"
                "shadow-running|pin|knobs|rq-depth\n", argv[0]);
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

/*
 * Process-level hazards of verbs, turned into actionable messages:
 * RLIMIT_MEMLOCK (registration pins pages and counts against it), and fork()
 * after registration (the child shares the parent's device file; its copies
 * of queue pairs and memory regions are the parent's objects).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/memory.h"
#include "transport/transport.h"

static atomic_uint fork_gen;
static atomic_int regions_live;
static atomic_int memlock_warned;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void put_str(const char *s)
{
    /* only async-signal-safe calls in a fork child handler */
    ssize_t ignored = write(STDERR_FILENO, s, strlen(s));
    (void)ignored;
}

static void after_fork_child(void)
{
    atomic_fetch_add(&fork_gen, 1);
    int n = atomic_load(&regions_live);
    if (n <= 0)
        return;
    char num[16];
    int i = (int)sizeof(num) - 1;
    num[i] = '\0';
    do {
        num[--i] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0 && i > 0);
    put_str("shadowsync warn: fork() with ");
    put_str(num + i);
    put_str(" RDMA region(s) registered: the child must not use the parent's shadowsync "
            "context or regions (they are refused there) and should exec or create its own; "
            "on kernels before 5.13 set RDMAV_FORK_SAFE=1 (or call ibv_fork_init() before "
            "any registration) so that the parent's registered pages stay its own\n");
}

static void install(void)
{
    if (pthread_atfork(NULL, NULL, after_fork_child) != 0)
        SHS_WARN("pthread_atfork failed: fork after registration will not be detected");
}

unsigned shs__fork_guard(void)
{
    pthread_once(&fork_once, install);
    return atomic_load(&fork_gen);
}

bool shs__ctx_forked(shs_ctx_t *ctx, const char *call)
{
    unsigned now = atomic_load_explicit(&fork_gen, memory_order_relaxed);
    if (ctx->fork_gen == now)
        return false;
    if (!ctx->fork_reported) {
        ctx->fork_reported = true;
        SHS_ERROR("%s in pid %d: this context was created before a fork(), in the parent; its "
                  "RDMA objects belong to the parent and are refused here (create a new "
                  "context in the child, or exec)", call, (int)getpid());
    }
    return true;
}

void shs__fork_regions_add(int delta)
{
    atomic_fetch_add(&regions_live, delta);
}

void shs__memlock_check(const char *dev_name)
{
    uint64_t limit = shs__memlock_limit();
    char advice[400];
    if (limit == SHS_MEMLOCK_UNLIMITED || atomic_exchange(&memlock_warned, 1))
        return;
    shs__memlock_advice(limit, 0, advice, sizeof(advice));
    SHS_WARN("%s: %s", dev_name, advice);
}

void shs__reg_mr_explain(const char *dev_name, size_t len, int err)
{
    char advice[400];
    uint64_t limit = shs__memlock_limit();

    if ((err == ENOMEM || err == EPERM || err == EAGAIN) && limit != SHS_MEMLOCK_UNLIMITED) {
        shs__memlock_advice(limit, len, advice, sizeof(advice));
        SHS_ERROR("%s: ibv_reg_mr(%zu bytes): %s; %s", dev_name, len, strerror(err), advice);
    } else if (err == EFAULT) {
        SHS_ERROR("%s: ibv_reg_mr(%zu bytes): %s: the memory is not mapped (freed, or a "
                  "length past its end?)", dev_name, len, strerror(err));
    } else {
        SHS_ERROR("%s: ibv_reg_mr(%zu bytes): %s (the device's memory region limit, or the "
                  "system is out of memory)", dev_name, len, strerror(err));
    }
}

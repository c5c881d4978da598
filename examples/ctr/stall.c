/*
 * --stall-rank R --stall-for S [--stall-after A]: a straggler on demand.
 * A process cannot continue itself once stopped, so a watcher child does it:
 * forked before the context exists (fork and registered memory do not mix),
 * it waits on a socket for the byte that says the pass started, sleeps A s,
 * stops its parent (SIGSTOP), sleeps S s and continues it (SIGCONT). Every
 * rank forks, since the rank is known only once the context is up; the
 * ranks other than R dismiss theirs at once. The end of the socket tells the
 * watcher that its parent ended or the pass is over: it then exits without
 * a signal. Also the rounds series that shows the stall: each rank's rounds
 * once a second (also kept with --sync-only, to compare with a run without
 * a stall).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainer.h"

#define SERIES_MAX 4096 /* one sample a second: 68 minutes */

typedef struct ctr_sample {
    double t;
    uint64_t rounds;
} ctr_sample_t;

static ctr_sample_t series[SERIES_MAX];
static int nseries;
static double next_sample;

/* one write, so that the ranks' lines do not interleave */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n > 0 && write(STDERR_FILENO, msg, strlen(msg)) < 0)
        return; /* nowhere to report it */
}

/* Waits s seconds; false as soon as the parent closes its end (the pass is
 * over, or the parent ended). */
static bool wait_on(int fd, double s)
{
    const double end = ctr_now() + s;
    for (;;) {
        double left = end - ctr_now();
        if (left <= 0)
            return true;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, left > 3600 ? 3600000 : (int)(left * 1e3) + 1);
        if (n > 0 || (n < 0 && errno != EINTR))
            return false;
    }
}

static void watch(int fd, pid_t parent, const ctr_opts_t *o)
{
    char c;
    ssize_t n;
    do
        n = read(fd, &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        _exit(0);
    const double t0 = ctr_now();
    /* a parent that ended has a new parent pid: never signal a reused pid */
    if (!wait_on(fd, o->stall_after) || getppid() != parent) {
        say("shs-ctr: rank %d not stalled: its pass (or process) ended before %.1f s\n",
            o->stall_rank, o->stall_after);
        _exit(0);
    }
    if (kill(parent, SIGSTOP) != 0) {
        say("shs-ctr: rank %d not stalled: SIGSTOP: %s\n", o->stall_rank, strerror(errno));
        _exit(1);
    }
    say("shs-ctr: rank %d stalled (SIGSTOP) at %.1f s for %.1f s\n", o->stall_rank,
        ctr_now() - t0, o->stall_for);
    /* early only if the parent ended, or something else continued it and
     * its pass ended: while it is still ours, never leave it stopped */
    wait_on(fd, o->stall_for);
    if (getppid() == parent && kill(parent, SIGCONT) == 0)
        say("shs-ctr: rank %d continued (SIGCONT) at %.1f s\n", o->stall_rank, ctr_now() - t0);
    _exit(0);
}

void ctr_stall_fork(ctr_run_t *r)
{
    if (r->o.stall_rank < 0)
        return;
    int sv[2];
    /* a socket rather than a pipe: send's MSG_NOSIGNAL spares the parent a
     * SIGPIPE if the watcher is gone */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        ctr_die("--stall-rank: socketpair: %s", strerror(errno));
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        ctr_die("--stall-rank: fork: %s", strerror(errno));
    if (pid == 0) {
        close(sv[1]);
        watch(sv[0], parent, &r->o);
    }
    close(sv[0]);
    r->stall_pid = pid;
    r->stall_fd = sv[1];
}

void ctr_stall_rank(ctr_run_t *r)
{
    if (r->o.stall_rank < 0)
        return;
    if (r->o.stall_rank >= r->size)
        ctr_die("--stall-rank %d: the job has %d rank(s), 0..%d", r->o.stall_rank, r->size,
                r->size - 1);
    if (r->rank != r->o.stall_rank)
        ctr_stall_end(r);
}

void ctr_stall_start(ctr_run_t *r)
{
    if (r->stall_pid == 0)
        return;
    if (send(r->stall_fd, "s", 1, MSG_NOSIGNAL) != 1)
        fprintf(stderr, "shs-ctr rank %d: the stall watcher is gone: %s\n", r->rank,
                strerror(errno));
}

void ctr_stall_end(ctr_run_t *r)
{
    if (r->stall_pid == 0)
        return;
    close(r->stall_fd);
    while (waitpid(r->stall_pid, NULL, 0) < 0 && errno == EINTR)
        ;
    r->stall_pid = 0;
}

void ctr_series_sample(ctr_run_t *r, bool last)
{
    /* with a stall, or when the engine runs alone (the figures compare the
     * two series) */
    if ((r->o.stall_rank < 0 && r->o.sync_only_s <= 0) || r->sh == NULL)
        return;
    double t = ctr_now() - r->t0;
    if (!last && (t < next_sample || nseries == SERIES_MAX))
        return;
    shs_shadow_stats_t s;
    if (shs_shadow_stats(r->sh, &s) != SHS_OK)
        return;
    /* full: the last point is still the end */
    int i = nseries < SERIES_MAX ? nseries++ : SERIES_MAX - 1;
    series[i] = (ctr_sample_t){t, s.rounds};
    next_sample = floor(t) + 1;
}

void ctr_series_print(const ctr_run_t *r)
{
    if (nseries == 0)
        return;
    printf("%-10s rank %d: sync-series", r->o.label, r->rank);
    for (int i = 0; i < nseries; i++)
        printf(" %.2f %llu", series[i].t, (unsigned long long)series[i].rounds);
    printf("\n");
}

void ctr_series_json(FILE *f)
{
    if (nseries == 0)
        return;
    fprintf(f, ", \"sync_series\": [");
    for (int i = 0; i < nseries; i++)
        fprintf(f, "%s[%.2f, %llu]", i > 0 ? ", " : "", series[i].t,
                (unsigned long long)series[i].rounds);
    fprintf(f, "]");
}

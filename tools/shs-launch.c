/*
 * shs-launch: run N ranks of a shadowsync program on this machine (or in
 * this guest), the way the demo trainer and the multi-rank guest tests
 * start them.
 *
 *   shs-launch -n N [--timeout S] [--need-rdma] [--env NAME=VALUE]...
 *              [--expect-kill R] [--restart R|any]... -- CMD [ARGS...]
 *
 * Each rank is CMD run with SHS_RANK (0..N-1), SHS_SIZE = N, SHS_BOOTSTRAP =
 * 127.0.0.1:<a free port> and SHS_JOB_TOKEN = a token unique to this launch;
 * SHS_DEVICE is set from SHS_VM_DEV (the guest harness) when it is unset.
 * The ranks share stdout and stderr. The launcher waits for all of them,
 * at most S seconds (default 600): then, or as soon as one rank fails, the
 * others get SIGTERM and, 2 s later, SIGKILL. With --expect-kill R (fault
 * tests), rank R ending by SIGKILL is what the test wants: the others keep
 * running, and rank R must end that way (any other end of it is a failure).
 * With --restart R (or any: every rank), rank R ending by SIGKILL is
 * started again, as often as it happens, with SHS_REJOIN=1: it rejoins the
 * running job (docs/failures.md). For that SHS_BOOTSTRAP lists one
 * 127.0.0.1:<port> per rank (the rendezvous moves to the lowest living
 * rank when rank 0 is gone) and SHS_CONNECT is oob unless set.
 *
 * Exit status: 0 when every rank exits 0; 77 when every rank exits 77 (no
 * RDMA device: CTest's "Not Run"), or with --need-rdma when
 * /sys/class/infiniband is empty; 124 on the timeout; otherwise the status
 * of the first rank that failed (128 + signal for a signal).
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdma_device.h"

#define RC_SKIP 77
#define RC_TIMEOUT 124
#define RC_USAGE 2
#define MAX_RANKS 256
#define KILL_GRACE_S 2.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A port nobody listens on now; rank 0 binds it a moment later. */
static int free_tcp_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("shs-launch: bootstrap port");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: shs-launch -n N [--timeout S] [--need-rdma] [--env NAME=VALUE]... "
               "[--expect-kill R] [--restart R|any]... -- CMD [ARGS...]\n");
}

/* Start rank r of CMD (argv); rejoin: with SHS_REJOIN=1 (a restart). */
static pid_t start_rank(int r, char **argv, bool rejoin)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    char num[16];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    snprintf(num, sizeof(num), "%d", r);
    setenv("SHS_RANK", num, 1);
    if (rejoin)
        setenv("SHS_REJOIN", "1", 1);
    execvp(argv[0], argv);
    fprintf(stderr, "shs-launch: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* SHS_BOOTSTRAP for a job with restarts: an address per rank. */
static int bootstrap_list(int n, char *buf, size_t len)
{
    size_t o = 0;
    for (int r = 0; r < n; r++) {
        int port = free_tcp_port();
        if (port < 0)
            return -1;
        int k = snprintf(buf + o, len - o, "%s127.0.0.1:%d", r > 0 ? "," : "", port);
        if (k < 0 || (size_t)k >= len - o)
            return -1;
        o += (size_t)k;
    }
    return 0;
}

static void signal_all(pid_t *pids, int n, int sig)
{
    for (int r = 0; r < n; r++)
        if (pids[r] > 0)
            kill(pids[r], sig);
}

int main(int argc, char **argv)
{
    int n = 0;
    double timeout = 600;
    bool need_rdma = false;
    int expect_kill = -1;
    static bool restart[MAX_RANKS];
    bool any_restart = false;
    static const struct option opts[] = {{"timeout", required_argument, NULL, 't'},
                                         {"restart", required_argument, NULL, 'R'},
                                         {"need-rdma", no_argument, NULL, 'r'},
                                         {"env", required_argument, NULL, 'e'},
                                         {"expect-kill", required_argument, NULL, 'k'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "+n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': n = atoi(optarg); break;
        case 't': timeout = atof(optarg); break;
        case 'r': need_rdma = true; break;
        case 'k': expect_kill = atoi(optarg); break;
        case 'R':
            if (strcmp(optarg, "any") == 0) {
                for (int r = 0; r < MAX_RANKS; r++)
                    restart[r] = true;
            } else if (atoi(optarg) < 0 || atoi(optarg) >= MAX_RANKS) {
                fprintf(stderr, "shs-launch: bad --restart %s\n", optarg);
                return RC_USAGE;
            } else {
                restart[atoi(optarg)] = true;
            }
            any_restart = true;
            break;
        case 'e':
            if (strchr(optarg, '=') == NULL || putenv(optarg) != 0) {
                fprintf(stderr, "shs-launch: bad --env %s\n", optarg);
                return RC_USAGE;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return RC_USAGE;
        }
    }
    if (n < 1 || n > MAX_RANKS || optind >= argc || timeout <= 0 || expect_kill >= n) {
        usage(stderr);
        return RC_USAGE;
    }
    if (need_rdma && !have_rdma_device()) {
        fprintf(stderr, "shs-launch: no RDMA device (/sys/class/infiniband is empty): skipped\n");
        return RC_SKIP;
    }

    static char boot[MAX_RANKS * 24];
    char token[64], num[16];
    int port = free_tcp_port();
    if (port < 0)
        return 1;
    snprintf(boot, sizeof(boot), "127.0.0.1:%d", port);
    snprintf(token, sizeof(token), "shs-launch-%d-%d", (int)getpid(), port);
    if (any_restart) {
        if (bootstrap_list(n, boot, sizeof(boot)) != 0)
            return 1;
        if (getenv("SHS_CONNECT") == NULL) {
            setenv("SHS_CONNECT", "oob", 1);
            fprintf(stderr, "shs-launch: --restart: SHS_CONNECT=oob (rejoining needs it)\n");
        }
    }
    setenv("SHS_BOOTSTRAP", boot, 1);
    setenv("SHS_JOB_TOKEN", token, 1);
    snprintf(num, sizeof(num), "%d", n);
    setenv("SHS_SIZE", num, 1);
    if (getenv("SHS_DEVICE") == NULL && getenv("SHS_VM_DEV") != NULL)
        setenv("SHS_DEVICE", getenv("SHS_VM_DEV"), 1);

    pid_t pids[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        pids[r] = start_rank(r, argv + optind, false);
        if (pids[r] < 0) {
            perror("shs-launch: fork");
            signal_all(pids, r, SIGKILL);
            return 1;
        }
    }

    int rc = -1, left = n, skipped = 0, restarts = 0;
    double start = now_s(), kill_at = 0;
    bool termed = false;
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid == 0) {
            double t = now_s();
            if (!termed && t - start > timeout) {
                fprintf(stderr, "shs-launch: ranks still running after %.0f s: stopping them\n",
                        timeout);
                if (rc <= 0)
                    rc = RC_TIMEOUT;
                signal_all(pids, n, SIGTERM);
                termed = true;
                kill_at = t + KILL_GRACE_S;
            }
            if (termed && t > kill_at) {
                signal_all(pids, n, SIGKILL);
                kill_at = t + 3600;
            }
            usleep(20 * 1000);
            continue;
        }
        if (pid < 0)
            break;
        int r = 0;
        while (r < n && pids[r] != pid)
            r++;
        if (r == n)
            continue;
        pids[r] = -1;
        if (restart[r] && !termed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
            pids[r] = start_rank(r, argv + optind, true);
            restarts++;
            fprintf(stderr, "shs-launch: rank %d was killed (SIGKILL); started again to rejoin "
                            "(restart %d)\n", r, restarts);
            if (pids[r] > 0)
                continue;
            perror("shs-launch: fork");
        }
        left--;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r == expect_kill && !termed) {
            bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
            fprintf(stderr, "shs-launch: rank %d %s%s\n", r,
                    killed ? "was killed by SIGKILL, as expected" : "ended otherwise: ",
                    killed ? "" : code == RC_SKIP ? "skipped" : "failure");
            if (killed)
                continue;
            if (code == RC_SKIP) {
                skipped++;
                continue;
            }
            code = code != 0 ? code : 1;
        }
        if (code == RC_SKIP) {
            skipped++;
            continue;
        }
        if (code != 0 && rc <= 0) {
            fprintf(stderr, "shs-launch: rank %d %s %d: stopping the others\n", r,
                    WIFEXITED(status) ? "exited with" : "was killed by signal",
                    WIFEXITED(status) ? code : WTERMSIG(status));
            rc = code;
            if (!termed) {
                signal_all(pids, n, SIGTERM);
                termed = true;
                kill_at = now_s() + KILL_GRACE_S;
            }
        }
    }
    if (rc > 0)
        return rc;
    if (skipped == n)
        return RC_SKIP;
    if (skipped > 0) {
        fprintf(stderr, "shs-launch: %d of %d ranks skipped, the others ran: failure\n",
                skipped, n);
        return 1;
    }
    return 0;
}

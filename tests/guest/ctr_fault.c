/*
 * shs-ctr-fault: the CTR trainer (examples/ctr) with fault injection, for
 * the fault tests only (tests/guest/fault_kill.py, tests/vm/fault-*.sh,
 * tools/fault-figures). It takes every shs-ctr option and these:
 *
 *   --kill-rank R --kill-at F  rank R SIGKILLs itself when the fraction F
 *                              (default 0.5) of its pass is done (raise:
 *                              the same as kill -9 from outside)
 *   --fault-cmd CMD            with --kill-rank: run the shell command CMD
 *                              instead (power the guest off, take its link
 *                              down) and train on
 *   --hold S                   S modes: after the pass keep syncing until a
 *                              failed peer is seen or S seconds pass (the
 *                              fault is timed by another rank's progress)
 *
 * The lines the tests match: "<label> rank R: SIGKILL to itself at T s" and
 * "<label> rank R: fault command at T s" (CLOCK_MONOTONIC).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

static struct {
    int kill_rank;
    double kill_at;
    const char *cmd;
    double hold_s;
} fault = {-1, 0.5, NULL, 0};

static void on_progress(ctr_run_t *r, uint64_t done)
{
    if (r->rank != fault.kill_rank || (double)done < fault.kill_at * (double)r->ntrain)
        return;
    double t = ctr_now();
    if (fault.cmd == NULL) {
        printf("%-10s rank %d: SIGKILL to itself at %.3f s (CLOCK_MONOTONIC), %llu "
               "examples done\n", r->o.label, r->rank, t, (unsigned long long)done);
        fflush(stdout);
        raise(SIGKILL);
    }
    printf("%-10s rank %d: fault command at %.3f s (CLOCK_MONOTONIC), %llu examples done: %s\n",
           r->o.label, r->rank, t, (unsigned long long)done, fault.cmd);
    fflush(stdout);
    fault.kill_rank = -1; /* once */
    if (system(fault.cmd) != 0)
        fprintf(stderr, "shs-ctr-fault rank %d: the fault command failed\n", r->rank);
}

static void on_pass_done(ctr_run_t *r)
{
    for (double until = ctr_now() + fault.hold_s; ctr_now() < until;) {
        shs_shadow_stats_t s;
        if (shs_shadow_stats(r->sh, &s) == SHS_OK && s.failed_peers > 0)
            return;
        usleep(20000);
    }
}

/* Takes argv[*i] if it is one of the fault options ("--name value" or
 * "--name=value"); returns 0 if it is not. */
static int fault_option(int argc, char **argv, int *i)
{
    static const char *const names[] = {"--kill-rank", "--kill-at", "--fault-cmd", "--hold"};
    for (int k = 0; k < 4; k++) {
        size_t n = strlen(names[k]);
        const char *a = argv[*i], *v;
        if (strncmp(a, names[k], n) != 0 || (a[n] != '\0' && a[n] != '='))
            continue;
        if (a[n] == '=') {
            v = a + n + 1;
        } else if (*i + 1 < argc) {
            v = argv[++*i];
        } else {
            fprintf(stderr, "shs-ctr-fault: %s needs a value\n", names[k]);
            exit(2);
        }
        if (k == 0)
            fault.kill_rank = atoi(v);
        else if (k == 1)
            fault.kill_at = atof(v);
        else if (k == 2)
            fault.cmd = v;
        else
            fault.hold_s = atof(v);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const ctr_hooks_t hooks = {.progress = on_progress, .pass_done = on_pass_done};
    char **rest = calloc((size_t)argc + 1, sizeof(char *));
    if (rest == NULL)
        return 1;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            printf("shs-ctr-fault: shs-ctr with fault injection (tests only)\n"
                   "  --kill-rank R --kill-at F   rank R SIGKILLs itself at fraction F of its pass\n"
                   "  --fault-cmd CMD   with --kill-rank: run CMD instead and train on\n"
                   "  --hold S          S modes: after the pass sync on until a peer failure\n"
                   "                    is seen or S seconds pass\n");
        if (i == 0 || !fault_option(argc, argv, &i))
            rest[n++] = argv[i];
    }
    int rc = ctr_main(n, rest, &hooks);
    free(rest);
    return rc;
}

/*
 * The one bounded waiter every layer uses (transport completions, the
 * collectives' slots, the shadow engine's headers and credits): spin, then
 * sleep with a doubling nap, and give up at a deadline.
 */
#ifndef SHS_RUNTIME_WAIT_H
#define SHS_RUNTIME_WAIT_H

#include <stdbool.h>
#include <time.h>

#include "runtime/clock.h"

/* A wait reads the clock once every this many empty polls, never on the
 * way to a completion that is already there: on some machines the clock is
 * a system call (a TCG guest's hpet: 4.4 us, more than a poll of the CQ). */
#define SHS__CLOCK_EVERY 64

/* Past the spin budget a wait sleeps between polls, doubling from 1 us up
 * to this. sched_yield() kept the CPU busy: two emulated guests whose ranks
 * spun in flushes on a loaded 2-core host went 10 s without a completion
 * (rxe's kernel work, which moves the data, starved; a 5 s sleep in the same
 * guest took 50 s) while rxe retried and dropped nothing. 50 us is nothing
 * next to the transfer a wait this long is waiting for. */
#define SHS__IDLE_SLEEP_MAX_NS 50000L

/* A bounded wait: counts empty polls, sleeps past `spin` of them and
 * measures the timeout from the first clock reading, at most
 * SHS__CLOCK_EVERY polls after the wait (or its last progress) began.
 * timeout_ms < 0 waits without a deadline (only for waits that another
 * bound ends, e.g. a stop request the caller checks). */
typedef struct shs__waiter {
    unsigned empty;
    unsigned spin; /* empty polls before sleeping */
    bool armed;
    int timeout_ms;
    long nap_ns;
    long nap_max_ns;
    shs__deadline_t dl;
} shs__waiter_t;

static inline void shs__waiter_init(shs__waiter_t *w, unsigned spin, int timeout_ms)
{
    w->empty = 0;
    w->spin = spin;
    w->nap_ns = 1000;
    w->nap_max_ns = SHS__IDLE_SLEEP_MAX_NS;
    w->armed = false;
    w->timeout_ms = timeout_ms;
    w->dl.end_ns = UINT64_MAX;
}

/* Cap the nap at max_ns instead of SHS__IDLE_SLEEP_MAX_NS (a background
 * thread that polls peers' memory may sleep longer between looks). */
static inline void shs__waiter_nap_max(shs__waiter_t *w, long max_ns)
{
    w->nap_max_ns = max_ns > 1000 ? max_ns : 1000;
}

/* Progress: spin again; with restart, the timeout starts over too. */
static inline void shs__waiter_progress(shs__waiter_t *w, bool restart)
{
    w->empty = 0;
    w->nap_ns = 1000;
    if (restart)
        w->armed = false;
}

/* An empty poll: true once the timeout has passed. */
static inline bool shs__waiter_idle(shs__waiter_t *w)
{
    if (++w->empty % SHS__CLOCK_EVERY == 0 && w->timeout_ms >= 0) {
        if (!w->armed) {
            w->dl = shs__deadline_in_ms(w->timeout_ms);
            w->armed = true;
        } else if (shs__deadline_passed(w->dl)) {
            return true;
        }
    }
    if (w->empty > w->spin) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = w->nap_ns};
        nanosleep(&ts, NULL);
        if (w->nap_ns < w->nap_max_ns)
            w->nap_ns = w->nap_ns * 2 < w->nap_max_ns ? w->nap_ns * 2 : w->nap_max_ns;
    }
    return false;
}

#endif

/* Internal monotonic clock and deadlines: every blocking wait takes one. */
#ifndef SHS_RUNTIME_CLOCK_H
#define SHS_RUNTIME_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t shs__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct shs__deadline {
    uint64_t end_ns; /* UINT64_MAX: never (only for explicitly unbounded waits) */
} shs__deadline_t;

static inline shs__deadline_t shs__deadline_in_ms(int64_t ms)
{
    shs__deadline_t d;
    d.end_ns = ms < 0 ? UINT64_MAX : shs__now_ns() + (uint64_t)ms * 1000000ull;
    return d;
}

static inline bool shs__deadline_passed(shs__deadline_t d)
{
    return d.end_ns != UINT64_MAX && shs__now_ns() >= d.end_ns;
}

/* Milliseconds left, clamped to [0, INT32_MAX]; suitable for poll(). */
static inline int shs__deadline_remaining_ms(shs__deadline_t d)
{
    if (d.end_ns == UINT64_MAX)
        return INT32_MAX;
    uint64_t now = shs__now_ns();
    if (now >= d.end_ns)
        return 0;
    uint64_t ms = (d.end_ns - now + 999999ull) / 1000000ull;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

#endif

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "runtime/log.h"

static atomic_int log_level = SHS_LOG_LVL_WARN;
static atomic_int log_rank = -1;
static _Atomic(FILE *) log_stream = NULL;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
#define LEVEL_COUNT ((int)(sizeof(level_names) / sizeof(level_names[0])))

int shs__log_level(void)
{
    return atomic_load_explicit(&log_level, memory_order_relaxed);
}

void shs__log_set_level(int level)
{
    if (level < SHS_LOG_LVL_ERROR)
        level = SHS_LOG_LVL_ERROR;
    if (level > SHS_LOG_LVL_TRACE)
        level = SHS_LOG_LVL_TRACE;
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

void shs__log_set_rank(int rank)
{
    atomic_store_explicit(&log_rank, rank < 0 ? -1 : rank, memory_order_relaxed);
}

void shs__log_set_stream(FILE *f)
{
    atomic_store(&log_stream, f);
}

const char *shs__log_level_name(int level)
{
    if (level < 0 || level >= LEVEL_COUNT)
        return "?";
    return level_names[level];
}

int shs__log_level_parse(const char *s)
{
    if (s == NULL || *s == '\0')
        return -1;
    if (s[0] >= '0' && s[0] <= '9' && s[1] == '\0')
        return s[0] - '0' < LEVEL_COUNT ? s[0] - '0' : -1;
    for (int i = 0; i < LEVEL_COUNT; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return SHS_LOG_LVL_WARN;
    return -1;
}

void shs__log(int level, const char *file, int line, const char *fmt, ...)
{
    /* A log call sits between a failing syscall and the code that reports its
     * errno; it must not disturb it. */
    int saved_errno = errno;
    /* One buffer and one write per message, so that lines from several
     * threads (or ranks sharing a terminal) do not interleave mid-line. */
    char buf[1024];
    int rank = atomic_load_explicit(&log_rank, memory_order_relaxed);
    int n;

    if (rank >= 0)
        n = snprintf(buf, sizeof(buf), "shadowsync[rank %d] %s: ", rank,
                     shs__log_level_name(level));
    else
        n = snprintf(buf, sizeof(buf), "shadowsync[rank ?] %s: ",
                     shs__log_level_name(level));
    size_t used = n > 0 ? (size_t)n : 0;

    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(buf + used, sizeof(buf) - used, fmt, ap);
    va_end(ap);
    if (n > 0)
        used += (size_t)n;
    if (used > sizeof(buf) - 5) {
        used = sizeof(buf) - 5;
        memcpy(buf + used, "...", 3);
        used += 3;
    }
    while (used > 0 && buf[used - 1] == '\n')
        used--;
    /* file:line helps whoever reads a debug log, and is noise for a user. */
    if (shs__log_level() >= SHS_LOG_LVL_DEBUG && file != NULL && used < sizeof(buf) - 2) {
        const char *base = strrchr(file, '/');
        n = snprintf(buf + used, sizeof(buf) - used - 1, " (%s:%d)",
                     base != NULL ? base + 1 : file, line);
        if (n > 0)
            used = used + (size_t)n < sizeof(buf) - 2 ? used + (size_t)n : sizeof(buf) - 2;
    }
    buf[used++] = '\n';

    FILE *f = atomic_load(&log_stream);
    if (f == NULL)
        f = stderr;
    fwrite(buf, 1, used, f);
    fflush(f);
    errno = saved_errno;
}

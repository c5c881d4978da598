/*
 * Internal logging. Levels: error, warn, info, debug, trace (SHS_LOG knob,
 * default "warn"). Messages are lowercase, one line, with context such as
 * "peer 3" or "qp 0x1a2b". errno is preserved across a log call. Trace is
 * compiled out unless the build defines SHS_ENABLE_TRACE (data path).
 * Output goes to stderr prefixed "shadowsync[rank R] level: ".
 */
#ifndef SHS_RUNTIME_LOG_H
#define SHS_RUNTIME_LOG_H

#include <stdio.h>

typedef enum shs__log_level {
    SHS_LOG_LVL_ERROR = 0,
    SHS_LOG_LVL_WARN = 1,
    SHS_LOG_LVL_INFO = 2,
    SHS_LOG_LVL_DEBUG = 3,
    SHS_LOG_LVL_TRACE = 4
} shs__log_level_t;

/* Current threshold (messages above it are dropped). Thread-safe (atomic). */
int shs__log_level(void);
void shs__log_set_level(int level);
/* Rank shown in the prefix (-1: not known yet). Thread-safe (atomic). */
void shs__log_set_rank(int rank);
/* Parse "error|warn|info|debug|trace" or a digit; -1 on bad input. */
int shs__log_level_parse(const char *s);
/* "error" .. "trace"; "?" for a value out of range. */
const char *shs__log_level_name(int level);
/* Where lines go (NULL: stderr, the default). Tests capture output with it.
 * Thread-safe (atomic); the caller keeps f open while it is installed. */
void shs__log_set_stream(FILE *f);

void shs__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define SHS__LOG_AT(lvl, ...)                                        \
    do {                                                             \
        if ((lvl) <= shs__log_level())                               \
            shs__log((lvl), __FILE__, __LINE__, __VA_ARGS__);        \
    } while (0)

#define SHS_ERROR(...) SHS__LOG_AT(SHS_LOG_LVL_ERROR, __VA_ARGS__)
#define SHS_WARN(...) SHS__LOG_AT(SHS_LOG_LVL_WARN, __VA_ARGS__)
#define SHS_INFO(...) SHS__LOG_AT(SHS_LOG_LVL_INFO, __VA_ARGS__)
#define SHS_DEBUG(...) SHS__LOG_AT(SHS_LOG_LVL_DEBUG, __VA_ARGS__)
#ifdef SHS_ENABLE_TRACE
#define SHS_TRACE(...) SHS__LOG_AT(SHS_LOG_LVL_TRACE, __VA_ARGS__)
#else
#define SHS_TRACE(...) do { } while (0)
#endif

#endif

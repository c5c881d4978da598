/* Captures what the runtime logs during one test, for suites that assert on
 * log lines. Each test runs in Check's forked child, so the statics are per
 * test. */
#ifndef SHS_TESTS_LOG_CAPTURE_H
#define SHS_TESTS_LOG_CAPTURE_H

#include <stdio.h>

#include <check.h>

#include "runtime/log.h"

static FILE *capture;

static void capture_start(void)
{
    capture = tmpfile();
    ck_assert_ptr_nonnull(capture);
    shs__log_set_stream(capture);
    shs__log_set_level(SHS_LOG_LVL_WARN);
    shs__log_set_rank(-1);
}

static void capture_stop(void)
{
    shs__log_set_stream(NULL);
    fclose(capture);
}

/* Everything logged since capture_start, NUL-terminated. */
static const char *captured(void)
{
    static char buf[16384];
    fflush(capture);
    rewind(capture);
    size_t n = fread(buf, 1, sizeof(buf) - 1, capture);
    buf[n] = '\0';
    return buf;
}

#endif

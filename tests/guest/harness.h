/*
 * What every guest test program shares: exit codes for CTest, failing with
 * the rank named, status checks, a clock, and (tools/rdma_device.h) the look
 * for an RDMA device.
 * Each test is one translation unit that includes this once.
 */
#ifndef SHS_TESTS_GUEST_HARNESS_H
#define SHS_TESTS_GUEST_HARNESS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <shadowsync/shadowsync.h>

#include "../../tools/rdma_device.h" /* have_rdma_device() */

#define RC_OK 0
#define RC_FAIL 1
#define RC_SKIP 77 /* CTest's SKIP_RETURN_CODE: "Not Run", never a pass */

/* This process's rank once known, for the FAIL line; -1 before. */
static int g_rank __attribute__((unused)) = -1;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn, unused));
static void fail(const char *fmt, ...)
{
    va_list ap;
    if (g_rank >= 0)
        fprintf(stderr, "FAIL rank %d: ", g_rank);
    else
        fputs("FAIL: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(RC_FAIL);
}

#define CHECK_EQ(expr, want)                                                          \
    do {                                                                              \
        shs_status_t st_ = (expr);                                                    \
        if (st_ != (want))                                                            \
            fail("%s:%d: %s -> %s, expected %s", __FILE__, __LINE__, #expr,           \
                 shs_status_string(st_), shs_status_string(want));                    \
    } while (0)

#define CHECK_OK(expr)                                                                \
    do {                                                                              \
        shs_status_t st_ = (expr);                                                    \
        if (st_ != SHS_OK)                                                            \
            fail("%s:%d: %s -> %s", __FILE__, __LINE__, #expr, shs_status_string(st_)); \
    } while (0)

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif

/*
 * libFuzzer target: the knob parsers. The input is an environment, one
 * NAME=VALUE per line, read through the same table and launcher detection as
 * the real environment; each value also goes through the host:port and log
 * level parsers directly. A successful load must satisfy the table's own
 * invariants.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/config.h"
#include "runtime/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_VARS 64

static char buf[8192];
static const char *names[MAX_VARS], *values[MAX_VARS];
static size_t nvars;

static const char *fake_getenv(const char *name)
{
    for (size_t i = 0; i < nvars; i++)
        if (strcmp(names[i], name) == 0)
            return values[i];
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shs__log_set_level(-1);
    if (size >= sizeof(buf))
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    nvars = 0;
    for (char *line = buf, *next; line != NULL && nvars < MAX_VARS; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        names[nvars] = line;
        values[nvars++] = eq + 1;
    }
    for (size_t i = 0; i < nvars; i++) {
        char host[256], port[8];
        if (shs__hostport_split(values[i], host, sizeof(host), port, sizeof(port)) == SHS_OK &&
            (atoi(port) < 1 || atoi(port) > 65535))
            __builtin_trap();
        int lvl = shs__log_level_parse(values[i]);
        if (lvl < -1 || lvl > SHS_LOG_LVL_TRACE)
            __builtin_trap();
    }
    shs__config_t c;
    if (shs__config_load_from(&c, fake_getenv) == SHS_OK) {
        if ((c.rank >= 0 && c.size >= 0 && c.rank >= c.size) || c.signal_every > c.sq_depth ||
            c.bootstrap_timeout_ms < 1 || c.qp_rnr_retry > 6 || c.job_token[0] == '\0' ||
            memchr(c.job_token, '\0', sizeof(c.job_token)) == NULL ||
            memchr(c.bootstrap, '\0', sizeof(c.bootstrap)) == NULL)
            __builtin_trap();
    }
    return 0;
}

/*
 * The runtime's knobs: logging, the job (rank, size, rendezvous, token) and
 * memory. Rank, size, rendezvous and token left at auto come from the
 * launcher (runtime/launcher.c) once every table has parsed.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "runtime/knob.h"
#include "runtime/launcher.h"
#include "runtime/log.h"

static shs_status_t parse_log(const shs__knob_t *k, const char *val, void *field)
{
    int level = shs__log_level_parse(val);
    if (level < 0)
        return shs__knob_bad_value(k, val, "expected error, warn, info, debug, trace or 0-4");
    *(int *)field = level;
    return SHS_OK;
}

static shs_status_t parse_addr(const shs__knob_t *k, const char *val, void *field)
{
    if (strcasecmp(val, "auto") != 0 && shs__hostport_count(val) < 1)
        return shs__knob_bad_value(k, val,
                                   "expected host:port (or [ipv6]:port) with a port in 1..65535, "
                                   "or several, comma-separated");
    return shs__knob_parse_str(k, val, field);
}

static shs_status_t parse_token(const shs__knob_t *k, const char *val, void *field)
{
    /* The token keys the bootstrap's HMAC and is never sent; printable and
     * non-empty keeps it easy to pass through launchers and shells. */
    if (*val == '\0')
        return shs__knob_bad_value(k, val, "empty");
    for (const char *p = val; *p != '\0'; p++)
        if (!isgraph((unsigned char)*p))
            return shs__knob_bad_value(k, val,
                                       "only printable characters without spaces are allowed");
    return shs__knob_parse_str(k, val, field);
}

static const char *const tri_words[] = {"auto", "off", "on", "0", "1", NULL};
static const int tri_values[] = {SHS_TRI_AUTO, SHS_TRI_OFF, SHS_TRI_ON, SHS_TRI_OFF, SHS_TRI_ON};

static const shs__knob_t runtime_knobs[] = {
    /* warn: errors and suspicious conditions only; a healthy job is silent. */
    {"SHS_LOG", "warn", "log level: error, warn, info, debug, trace (or 0-4)",
     parse_log, SHS_KNOB_FIELD(log_level), 0, 0, NULL, NULL, false},
    /* auto: launchers already know the rank; asking twice invites mismatch. */
    SHS_KNOB_INT_AUTO("SHS_RANK", rank, "auto", 0, SHS_KNOB_RANKS_MAX - 1,
                      "rank of this process; auto = from the launcher (Open MPI, PMIx, PMI, "
                      "Slurm, torchrun)"),
    SHS_KNOB_INT_AUTO("SHS_SIZE", size, "auto", 1, SHS_KNOB_RANKS_MAX,
                      "number of ranks; auto = from the launcher"),
    /* auto: follow torchrun's MASTER_ADDR when present, else a single host. */
    SHS_KNOB_STR("SHS_BOOTSTRAP", bootstrap, "auto", parse_addr,
                 "host:port where rank 0 listens for the TCP rendezvous; auto = "
                 "MASTER_ADDR:(MASTER_PORT+1), else 127.0.0.1:18520. A comma-separated "
                 "list gives rank r (entry r) an address too: after start-up the lowest "
                 "living listed rank is the rendezvous for rejoiners"),
    /* off: a process cannot tell a new job from a running one it should
     * rejoin without asking, and asking the wrong job costs a timeout. */
    SHS_KNOB_INT("SHS_REJOIN", rejoin, "0", 0, 1,
                 "1: this process is a restarted rank that rejoins the running job at the "
                 "SHS_BOOTSTRAP addresses (tried in order) instead of starting a job"),
    /* auto: the launcher's job id is the same on every rank of a job and
     * differs between jobs, which is exactly what the token must separate.
     * Secret: it keys the bootstrap's HMAC, so it never reaches a log. */
    {"SHS_JOB_TOKEN", "auto",
     "token every rank must present at the rendezvous; auto = the launcher's job id, "
     "else \"default\"",
     parse_token, SHS_KNOB_FIELD(job_token), 0, 0, NULL, NULL, true},
    /* 60 s: ranks of a large job start tens of seconds apart (image pulls,
     * module loads, srun fan-out); a minute absorbs that without hanging. */
    SHS_KNOB_INT("SHS_BOOTSTRAP_TIMEOUT_MS", bootstrap_timeout_ms, "60000", 1, SHS_KNOB_MS_MAX,
                 "deadline of the rendezvous and of each bootstrap collective (ms)"),
    /* 10 s: a rank sends its hello as soon as it connects and the handshake is
     * two round trips, milliseconds even on a loaded host; a connection that
     * has not finished in 10 s is a stranger (or a port scanner) and is
     * dropped. Handshakes run concurrently, so this bounds what a stranger
     * costs, not how long a real rank waits. */
    SHS_KNOB_INT("SHS_BOOTSTRAP_HANDSHAKE_TIMEOUT_MS", bootstrap_handshake_ms, "10000", 1,
             SHS_KNOB_MS_MAX,
                 "deadline for one connection's hello and token proof at rank 0 (ms)"),
    /* auto: hugepages cut MR translation misses, but a missing pool must not
     * stop a job; "on" turns the fallback into an error. */
    SHS_KNOB_ENUM("SHS_HUGEPAGES", hugepages, "auto", tri_words, tri_values,
                  "hugepages for runtime-allocated regions: auto, on (fail without), off"),
};

static shs_status_t runtime_finish(shs__config_t *cfg, shs__getenv_fn getenv_fn, bool verbose)
{
    if ((cfg->rank < 0 || cfg->size < 0) &&
        shs__launcher_detect(cfg, getenv_fn, verbose) != SHS_OK)
        return SHS_ERR_CONFIG;
    /* One of rank/size may stay unknown here: a parameter struct can still
     * supply it, and the context checks the final pair. */
    if (cfg->rank >= 0 && cfg->size >= 0 && cfg->rank >= cfg->size) {
        SHS_ERROR("rank %d is not below size %d (SHS_RANK/SHS_SIZE or the launcher)",
                  cfg->rank, cfg->size);
        return SHS_ERR_CONFIG;
    }
    shs_status_t st = shs__launcher_bootstrap(cfg, getenv_fn, verbose);
    if (st != SHS_OK)
        return st;
    shs__launcher_token(cfg, getenv_fn);
    return SHS_OK;
}

const shs__knob_table_t shs__runtime_knob_table =
    SHS_KNOB_TABLE("runtime", runtime_knobs, runtime_finish);

/* Launcher detection: what Open MPI, PMIx, PMI, Slurm and torchrun tell a
 * process about its rank, size, rendezvous and job, for the knobs left at
 * "auto"; and the host:port splitter the bootstrap address is checked with. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "runtime/knob.h"
#include "runtime/launcher.h"
#include "runtime/log.h"

shs_status_t shs__hostport_split(const char *s, char *host, size_t host_len, char *port,
                                 size_t port_len)
{
    const char *h = s, *colon;
    size_t hlen;

    if (s == NULL)
        return SHS_ERR_INVALID_ARG;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return SHS_ERR_INVALID_ARG;
        h = s + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL || memchr(s, ':', (size_t)(colon - s)) != NULL)
            return SHS_ERR_INVALID_ARG; /* bare IPv6 needs brackets */
        hlen = (size_t)(colon - s);
    }
    const char *p = colon + 1;
    size_t plen = strlen(p);
    if (hlen == 0 || hlen >= host_len || plen == 0 || plen > 5 || plen >= port_len)
        return SHS_ERR_INVALID_ARG;
    long v = 0;
    for (size_t i = 0; i < plen; i++) {
        if (!isdigit((unsigned char)p[i]))
            return SHS_ERR_INVALID_ARG;
        v = v * 10 + (p[i] - '0');
    }
    if (v < 1 || v > 65535)
        return SHS_ERR_INVALID_ARG;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(port, p, plen + 1);
    return SHS_OK;
}

shs_status_t shs__hostport_entry(const char *list, int i, char *host, size_t host_len,
                                 char *port, size_t port_len)
{
    char one[320];
    if (list == NULL || i < 0)
        return SHS_ERR_INVALID_ARG;
    const char *p = list;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        if (p == NULL)
            return SHS_ERR_OUT_OF_BOUNDS;
        p++;
    }
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof(one))
        return SHS_ERR_INVALID_ARG;
    memcpy(one, p, len);
    one[len] = '\0';
    return shs__hostport_split(one, host, host_len, port, port_len);
}

int shs__hostport_count(const char *list)
{
    char host[256], port[8];
    int n = 0;
    shs_status_t st;
    while ((st = shs__hostport_entry(list, n, host, sizeof(host), port, sizeof(port))) == SHS_OK)
        n++;
    return st == SHS_ERR_OUT_OF_BOUNDS ? n : -1;
}

typedef struct launcher {
    const char *name;
    const char *rank_var;
    const char *size_var;
    const char *present_var; /* must be set too for the launcher to count */
} launcher_t;

/*
 * Innermost launcher first. torchrun's workers carry TORCHELASTIC_RUN_ID and
 * may inherit SLURM_PROCID/OMPI_* from the srun or mpirun that started
 * torchrun itself, which then number nodes, not workers. Under mpirun inside a
 * Slurm allocation, SLURM_PROCID numbers the orted daemons, so Open MPI and
 * PMIx come before Slurm. Plain RANK/WORLD_SIZE (torch.distributed.launch) is
 * the weakest hint and comes last.
 */
static const launcher_t launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"},
    {"open mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL},
    {"pmix", "PMIX_RANK", "PMIX_SIZE", NULL},
    {"pmi", "PMI_RANK", "PMI_SIZE", NULL},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", NULL},
    {"torch launcher", "RANK", "WORLD_SIZE", NULL},
};

static const char *env_get(shs__getenv_fn getenv_fn, const char *name)
{
    const char *v = getenv_fn(name);
    return v != NULL && *v != '\0' ? v : NULL;
}

/* A launcher's variable is checked like a knob and named in the error. */
static shs_status_t launcher_int(const char *var, const char *val, long long lo,
                                 long long hi, int *out)
{
    shs__knob_t k = {.name = var, .min = lo, .max = hi};
    return shs__knob_parse_int(&k, val, out);
}

shs_status_t shs__launcher_detect(shs__config_t *cfg, shs__getenv_fn getenv_fn, bool verbose)
{
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
        const launcher_t *l = &launchers[i];
        const char *rank_s = env_get(getenv_fn, l->rank_var);
        const char *size_s = env_get(getenv_fn, l->size_var);
        const char *size_var = l->size_var;
        int rank = -1, size = -1;

        if (rank_s == NULL ||
            (l->present_var != NULL && env_get(getenv_fn, l->present_var) == NULL))
            continue;
        /* PMIx has no standard size variable; under srun --mpi=pmix Slurm's
         * agrees with PMIx on the rank and knows the size. */
        if (size_s == NULL && strcmp(l->rank_var, "PMIX_RANK") == 0) {
            const char *procid = env_get(getenv_fn, "SLURM_PROCID");
            if (procid != NULL && strcmp(procid, rank_s) == 0) {
                size_var = "SLURM_NTASKS";
                size_s = env_get(getenv_fn, size_var);
            }
        }
        if (launcher_int(l->rank_var, rank_s, 0, SHS_KNOB_RANKS_MAX - 1, &rank) != SHS_OK)
            return SHS_ERR_CONFIG;
        if (size_s != NULL &&
            launcher_int(size_var, size_s, 1, SHS_KNOB_RANKS_MAX, &size) != SHS_OK)
            return SHS_ERR_CONFIG;
        if (cfg->rank < 0)
            cfg->rank = rank;
        if (cfg->size < 0)
            cfg->size = size;
        if (verbose)
            shs__log(SHS_LOG_LVL_INFO, __FILE__, __LINE__,
                     "launcher %s: %s=%s, %s=%s", l->name, l->rank_var, rank_s, size_var,
                     size_s != NULL ? size_s : "(unset)");
        return SHS_OK;
    }
    return SHS_OK;
}

shs_status_t shs__launcher_bootstrap(shs__config_t *cfg, shs__getenv_fn getenv_fn, bool verbose)
{
    if (strcasecmp(cfg->bootstrap, "auto") != 0)
        return SHS_OK;
    const char *addr = env_get(getenv_fn, "MASTER_ADDR");
    const char *mport = env_get(getenv_fn, "MASTER_PORT");
    long port = SHS_BOOT_DEFAULT_PORT;
    char host[256], ps[8];

    if (addr == NULL) {
        snprintf(cfg->bootstrap, sizeof(cfg->bootstrap), "127.0.0.1:%ld", port);
        return SHS_OK;
    }
    if (mport != NULL) {
        int mp;
        /* +1: torch.distributed's TCPStore already listens on MASTER_PORT. */
        if (launcher_int("MASTER_PORT", mport, 1, 65534, &mp) != SHS_OK)
            return SHS_ERR_CONFIG;
        port = mp + 1;
    }
    int n = strchr(addr, ':') != NULL
                ? snprintf(cfg->bootstrap, sizeof(cfg->bootstrap), "[%s]:%ld", addr, port)
                : snprintf(cfg->bootstrap, sizeof(cfg->bootstrap), "%s:%ld", addr, port);
    if (n < 0 || (size_t)n >= sizeof(cfg->bootstrap) ||
        shs__hostport_split(cfg->bootstrap, host, sizeof(host), ps, sizeof(ps)) != SHS_OK) {
        SHS_ERROR("invalid MASTER_ADDR=\"%s\" for the bootstrap address; set SHS_BOOTSTRAP",
                  addr);
        return SHS_ERR_CONFIG;
    }
    if (verbose)
        shs__log(SHS_LOG_LVL_INFO, __FILE__, __LINE__, "bootstrap %s from MASTER_ADDR%s",
                 cfg->bootstrap, mport != NULL ? "/MASTER_PORT+1" : "");
    return SHS_OK;
}

void shs__launcher_token(shs__config_t *cfg, shs__getenv_fn getenv_fn)
{
    if (strcmp(cfg->job_token, "auto") != 0)
        return;
    const char *job = env_get(getenv_fn, "SLURM_JOB_ID");
    const char *v;
    size_t cap = sizeof(cfg->job_token);
    const char *from;

    if (job != NULL) {
        const char *step = env_get(getenv_fn, "SLURM_STEP_ID");
        snprintf(cfg->job_token, cap, "slurm-%s.%s", job, step != NULL ? step : "0");
        from = "SLURM_JOB_ID.SLURM_STEP_ID";
    } else if ((v = env_get(getenv_fn, "OMPI_MCA_ess_base_jobid")) != NULL ||
               (v = env_get(getenv_fn, "OMPI_MCA_orte_ess_jobid")) != NULL) {
        snprintf(cfg->job_token, cap, "ompi-%s", v);
        from = "the Open MPI job id";
    } else if ((v = env_get(getenv_fn, "PMIX_NAMESPACE")) != NULL) {
        snprintf(cfg->job_token, cap, "pmix-%s", v);
        from = "PMIX_NAMESPACE";
    } else if ((v = env_get(getenv_fn, "TORCHELASTIC_RUN_ID")) != NULL &&
               strcmp(v, "none") != 0) {
        snprintf(cfg->job_token, cap, "torchrun-%s", v);
        from = "TORCHELASTIC_RUN_ID";
    } else {
        snprintf(cfg->job_token, cap, "default");
        if (cfg->log_level >= SHS_LOG_LVL_DEBUG)
            shs__log(SHS_LOG_LVL_DEBUG, __FILE__, __LINE__,
                     "no SHS_JOB_TOKEN and no launcher job id: using token \"default\", "
                     "which does not tell two jobs on one bootstrap address apart");
        return;
    }
    /* Job ids may contain characters the token parser refuses (spaces from a
     * badly set variable); replace rather than fail the job over it. */
    for (char *p = cfg->job_token; *p != '\0'; p++)
        if (!isgraph((unsigned char)*p))
            *p = '_';
    if (cfg->log_level >= SHS_LOG_LVL_INFO)
        shs__log(SHS_LOG_LVL_INFO, __FILE__, __LINE__,
                 "job token from %s: it tells jobs apart but is no secret; set "
                 "SHS_JOB_TOKEN to a random value to keep strangers out", from);
}

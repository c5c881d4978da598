/*
 * Internal configuration: the SHS_* knobs, declared by each layer in a table
 * of its own (runtime/knob.h: name, default, help, parser, and the reason for
 * each default beside it), read once from the environment into a
 * shs__config_t. Parameter structs of the public API override individual
 * fields after loading. At SHS_LOG=info every knob that the environment
 * changed is printed once.
 *
 * Rank and size also come from launchers when SHS_RANK/SHS_SIZE are unset:
 * Open MPI (OMPI_COMM_WORLD_RANK/SIZE), PMI (PMI_RANK/PMI_SIZE), PMIx
 * (PMIX_RANK), Slurm (SLURM_PROCID/SLURM_NTASKS), torchrun (RANK/WORLD_SIZE).
 */
#ifndef SHS_RUNTIME_CONFIG_H
#define SHS_RUNTIME_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <shadowsync/status.h>

typedef enum shs__connect_mode {
    SHS_CONNECT_RDMACM = 0, /* librdmacm address/route resolution */
    SHS_CONNECT_OOB = 1,    /* GID/QPN/PSN exchanged over the bootstrap */
    SHS_CONNECT_AUTO = 2    /* rdmacm on RoCE, oob on InfiniBand (resolved when the
                               device is open) */
} shs__connect_mode_t;

typedef enum shs__tristate {
    SHS_TRI_AUTO = -1,
    SHS_TRI_OFF = 0,
    SHS_TRI_ON = 1
} shs__tristate_t;

/* The fields every table resolves into. Each group is declared (knob, default,
 * reason) by the table named beside it; the algorithms' groups still live
 * here because shadow.c and collective.c read them as shs__config_t fields. */
typedef struct shs__config {
    /* job (runtime/knobs.c) */
    int rank;                  /* SHS_RANK (or launcher); -1 unknown */
    int size;                  /* SHS_SIZE (or launcher); -1 unknown */
    char bootstrap[1024];      /* SHS_BOOTSTRAP "host:port[,host:port...]": entry 0 is
                                * rank 0's rendezvous, entry r rank r's for rejoiners */
    int rejoin;                /* SHS_REJOIN: join a running job (a restarted rank) */
    char job_token[128];       /* SHS_JOB_TOKEN */
    int bootstrap_timeout_ms;  /* SHS_BOOTSTRAP_TIMEOUT_MS */
    int bootstrap_handshake_ms; /* SHS_BOOTSTRAP_HANDSHAKE_TIMEOUT_MS (0: the rendezvous') */
    /* device (transport/knobs.c, down to poll_spin) */
    char device[64];           /* SHS_DEVICE ("" = first ACTIVE port) */
    int ib_port;               /* SHS_IB_PORT (0 = first ACTIVE) */
    int gid_index;             /* SHS_GID_INDEX (-1 = automatic) */
    /* connections */
    shs__connect_mode_t connect_mode; /* SHS_CONNECT rdmacm|oob */
    int qps_per_peer;          /* SHS_QPS_PER_PEER */
    int connect_timeout_ms;    /* SHS_CONNECT_TIMEOUT_MS */
    int qp_timeout;            /* SHS_QP_TIMEOUT (IB local ack timeout exponent; -1 = auto) */
    int qp_retry_cnt;          /* SHS_QP_RETRY */
    int qp_rnr_retry;          /* SHS_QP_RNR_RETRY (7 = infinite: refused) */
    int sq_depth;              /* SHS_SQ_DEPTH work requests per QP */
    int rq_depth;              /* SHS_RQ_DEPTH receives per QP */
    int signal_every;          /* SHS_SIGNAL_EVERY (selective signaling) */
    size_t max_chunk;          /* SHS_MAX_CHUNK bytes per work request (0 = device max_msg_sz) */
    size_t read_chunk;         /* SHS_READ_CHUNK bytes per READ work request (0 = as max_chunk) */
    size_t read_inflight;      /* SHS_READ_INFLIGHT READ bytes outstanding per QP (0 = no cap) */
    size_t msg_size;           /* SHS_MSG_SIZE bytes per receive buffer (0 = no two-sided messages) */
    int op_timeout_ms;         /* SHS_OP_TIMEOUT_MS bound on any wait for completions */
    int poll_spin;             /* SHS_POLL_SPIN empty polls before a wait sleeps (-1 auto,
                                  resolved by the context once its mesh is up) */
    /* memory (runtime/knobs.c) */
    shs__tristate_t hugepages; /* SHS_HUGEPAGES auto|on|off */
    /* logging (runtime/knobs.c) */
    int log_level;             /* SHS_LOG */
    /* shadow sync (algorithms/shadow_knobs.c, read by algorithms/shadow/) */
    char shadow_pin[64];       /* SHS_SHADOW_PIN auto|none|CPU list */
    int shadow_wait_ms;        /* SHS_SHADOW_WAIT_MS bound on waiting for a peer's snapshot */
    size_t shadow_chunk;       /* SHS_SHADOW_CHUNK pull granularity (bytes) */
    int shadow_channel;        /* SHS_SHADOW_CHANNEL top 8 bits of the engine's immediates (-1 auto) */
    int shadow_straggler_ms;   /* SHS_SHADOW_STRAGGLER_MS straggler bound (-1 auto) */
    int shadow_nap;            /* SHS_SHADOW_NAP % of a pull's expected time slept, not polled */
    int shadow_wire;           /* SHS_SHADOW_WIRE shs_wire_t of the published snapshots */
    int shadow_rejoin_seed;    /* SHS_SHADOW_REJOIN_SEED SHS__SEED_* (a rejoined rank's model) */
    /* collectives (algorithms/coll_knobs.c, read by algorithms/coll/) */
    size_t coll_chunk;         /* SHS_COLL_CHUNK bytes per inbox slot (pipelined chunk) */
    int coll_slots;            /* SHS_COLL_SLOTS inbox slots (credits) per receiver */
    size_t coll_stage;         /* SHS_COLL_STAGE staging bytes for unregistered buffers */
    int coll_channel;          /* SHS_COLL_CHANNEL top 8 bits of the immediates (-1 auto) */
    size_t coll_eager;         /* SHS_COLL_EAGER bytes of a per-sender first-chunk slot */
    size_t coll_min_chunk;     /* SHS_COLL_MIN_CHUNK smallest chunk of a short call */
    int coll_wire;             /* SHS_COLL_WIRE shs_wire_t of float32 data on the wire */
    /* embedding tables (algorithms/emb_knobs.c, read by algorithms/embedding/) */
    int emb_owner_reads;       /* SHS_EMB_OWNER_READS auto path: owner path past this many READs */
    int emb_apply_nap_us;      /* SHS_EMB_APPLY_NAP_US longest nap of an idle apply thread */
    int emb_slots;             /* SHS_EMB_SLOTS updates in flight per worker and holder (-1 auto) */
    int emb_read_tries;        /* SHS_EMB_READ_TRIES reads of a row before the owner path */
    int emb_cache_rows;        /* SHS_EMB_CACHE_ROWS per worker (0: no cache) */
    int emb_cache_age;         /* SHS_EMB_CACHE_AGE lookups */
    int emb_cache_own;         /* SHS_EMB_CACHE_OWN: 0 refetch, 1 keep */
} shs__config_t;

/* How the environment is read: getenv, or a fake one in tests. */
typedef const char *(*shs__getenv_fn)(const char *name);

/* Fill *cfg with defaults, then the environment (and launcher variables).
 * SHS_ERR_CONFIG, with the knob named in an error log line, for a bad value. */
shs_status_t shs__config_load(shs__config_t *cfg);

/* Same, reading variables through getenv_fn (tests inject a fake env). */
shs_status_t shs__config_load_from(shs__config_t *cfg, shs__getenv_fn getenv_fn);

/* A CPU list such as "3", "2-3" or "0,2-3" (no spaces). */
bool shs__cpulist_valid(const char *s);
/* SHS_POLL_SPIN=auto when this host's ranks have a CPU each. */
#define SHS__POLL_SPIN_OWN 2000

/* What a shadow thread may be pinned to: "auto", "none" or a CPU list. */
bool shs__pin_spec_valid(const char *s);

/* Print every registered table's knobs (name, default, help) as one
 * markdown table to f. */
void shs__config_print_table(FILE *f);

/* The bootstrap port when neither SHS_BOOTSTRAP nor MASTER_ADDR is set:
 * perftest's 18515 + 5, away from the port ib_write_bw and rdma-core's
 * pingpong examples listen on by default. Under torchrun the bootstrap uses
 * MASTER_PORT + 1, because torch's own TCPStore listens on MASTER_PORT. */
#define SHS_BOOT_DEFAULT_PORT 18520

/* Split "host:port" or "[v6addr]:port" into NUL-terminated parts. The port
 * must be a number in 1..65535. SHS_ERR_INVALID_ARG otherwise or when a part
 * does not fit its buffer. Logs nothing. */
shs_status_t shs__hostport_split(const char *s, char *host, size_t host_len, char *port,
                                 size_t port_len);
/* Entry i of a comma-separated list of host:port (SHS_BOOTSTRAP), split as
 * above: SHS_ERR_OUT_OF_BOUNDS past the last entry, SHS_ERR_INVALID_ARG for
 * a malformed one. Logs nothing. */
shs_status_t shs__hostport_entry(const char *list, int i, char *host, size_t host_len,
                                 char *port, size_t port_len);
/* How many entries the list has; -1 when one of them is malformed. */
int shs__hostport_count(const char *list);

/* The registered tables taken one after the other, for tests and
 * documentation: count, name and default string of entry i (NULL past the
 * end), index of a name of len bytes (-1 when it is not a knob). */
size_t shs__config_knob_count(void);
const char *shs__config_knob_name(size_t i);
const char *shs__config_knob_default(size_t i);
int shs__config_knob_index_n(const char *name, size_t len);

#endif

/*
 * shadowsync: the context.
 *
 * A context is one rank's membership in a job: it finds the other ranks over
 * the bootstrap (TCP rendezvous), opens the RDMA device, and connects a
 * reliable-connected queue pair to every peer (a full mesh) before
 * shs_ctx_create() returns. Regions (region.h) and one-sided operations
 * (rma.h) all belong to a context.
 *
 * Threads: a context is driven by one thread at a time (the caller serializes
 * posting, progress and waits). shs_ctx_rank(), shs_ctx_size() and
 * shs_ctx_peer_status() may be called from any thread at any time. The
 * library runs one internal thread per context that watches device and
 * connection events; it only marks peers failed.
 *
 * Endpoints. For several threads that move data at once (Hogwild workers
 * looking up embedding rows, the shadow thread, an owner's apply thread),
 * shs_ctx_endpoint_create gives each its own endpoint: a handle of the same
 * type with its own completion queue and its own queue pair to every peer,
 * sharing the context's device and protection domain. An endpoint takes the
 * context's regions in every one-sided and message call (shs_read,
 * shs_write, shs_write_imm, shs_send, ...), and no lock is shared between
 * two endpoints or an endpoint and its context on the data path. Each
 * endpoint, like the context, is driven by one thread at a time. Calls that
 * are collective (shs_ctx_barrier, and over the bootstrap region creation,
 * collectives and engines that create regions, endpoint creation) are made
 * on the context, by the thread that drives it; on an endpoint they return
 * SHS_ERR_BAD_STATE. Immediate channels are per endpoint.
 *
 * Which thread owns what. The thread that created the context drives it
 * (and every collective call on it). A shadow engine creates an endpoint of
 * its own at shs_shadow_create, which its thread drives between
 * shs_shadow_start and shs_shadow_stop and the caller's thread otherwise; an
 * embedding table creates one per worker (embedding.h) and one for its
 * apply thread. So the shadow thread, the workers' lookups and updates, the
 * apply thread and the caller's collectives run at the same time, each on
 * its own queue pairs and completion queue. A peer that fails on any of
 * them fails on the context and on every endpoint of it.
 */
#ifndef SHADOWSYNC_CONTEXT_H
#define SHADOWSYNC_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/defs.h>
#include <shadowsync/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque: the layout is private to the library. */
typedef struct shs_ctx shs_ctx_t;

/* How connections are made (shs_ctx_params_t.connect_mode, SHS_CONNECT).
 * Unset (no field bit, SHS_CONNECT unset or "auto"): rdma_cm on RoCE, OOB on
 * InfiniBand, whose GIDs carry no IP address for rdma_cm. */
typedef enum shs_connect_mode {
    SHS_CONNECT_MODE_RDMACM = 0, /* librdmacm: address/route resolution, CM handshake */
    SHS_CONNECT_MODE_OOB = 1     /* GID/QPN/PSN exchanged over the bootstrap */
} shs_connect_mode_t;

/* Bits of shs_ctx_params_t.field_mask: a field is used only when its bit is
 * set; every other knob comes from its SHS_* environment variable (or the
 * launcher, for rank and size) or its default. New fields get new bits, so a
 * program built against an older header keeps working. */
enum {
    SHS_CTX_PARAM_RANK = 1u << 0,
    SHS_CTX_PARAM_SIZE = 1u << 1,
    SHS_CTX_PARAM_BOOTSTRAP = 1u << 2,
    SHS_CTX_PARAM_JOB_TOKEN = 1u << 3,
    SHS_CTX_PARAM_DEVICE = 1u << 4,
    SHS_CTX_PARAM_IB_PORT = 1u << 5,
    SHS_CTX_PARAM_GID_INDEX = 1u << 6,
    SHS_CTX_PARAM_CONNECT_MODE = 1u << 7,
    SHS_CTX_PARAM_CONNECT_TIMEOUT = 1u << 8,
    SHS_CTX_PARAM_OP_TIMEOUT = 1u << 9,
    SHS_CTX_PARAM_SYSFS_ROOT = 1u << 10,
    SHS_CTX_PARAM_QPS_PER_PEER = 1u << 11,
    SHS_CTX_PARAM_SQ_DEPTH = 1u << 12,
    SHS_CTX_PARAM_RQ_DEPTH = 1u << 13,
    SHS_CTX_PARAM_MSG_SIZE = 1u << 14,
    SHS_CTX_PARAM_REJOIN = 1u << 15
};

/*
 * Parameters of shs_ctx_create(). Zero the struct, set the fields you want
 * and their bits in field_mask. Strings are copied; the caller keeps
 * ownership of them.
 */
typedef struct shs_ctx_params {
    uint64_t field_mask;      /* SHS_CTX_PARAM_* bits of the fields below that are set */
    int rank;                 /* this process's rank, 0 <= rank < size */
    int size;                 /* number of ranks in the job */
    const char *bootstrap;    /* "host:port" where rank 0 listens, or a comma-separated
                                 list: entry r is rank r's address as the rendezvous
                                 for rejoiners (SHS_BOOTSTRAP) */
    const char *job_token;    /* every rank must present the same token */
    const char *device;       /* RDMA device name ("" or NULL: first ACTIVE port) */
    int ib_port;              /* port number (0: first ACTIVE port) */
    int gid_index;            /* GID table index (-1: automatic, RoCE v2 IPv4 preferred) */
    shs_connect_mode_t connect_mode;
    int connect_timeout_ms;   /* bound on connecting the whole mesh */
    int op_timeout_ms;        /* bound on any wait for completions */
    const char *sysfs_root;   /* where device directories live
                                 (default "/sys/class/infiniband"; tests use a fake tree) */
    int qps_per_peer;         /* RC queue pairs to each peer (SHS_QPS_PER_PEER) */
    int sq_depth;             /* send queue depth per QP (SHS_SQ_DEPTH) */
    int rq_depth;             /* receives per QP: immediates and messages (SHS_RQ_DEPTH) */
    size_t msg_size;          /* largest shs_send message, 0 = none (SHS_MSG_SIZE) */
    int rejoin;               /* 1: a restarted rank rejoining the running job (SHS_REJOIN) */
} shs_ctx_params_t;

/*
 * shs_ctx_create - join the job and connect to every peer.
 *
 * Collective: every rank of the job calls it; it returns once this rank has
 * an established connection to every other rank (or fails). params may be
 * NULL (everything from the environment). On success *ctx_p receives a
 * context owned by the caller, released with shs_ctx_destroy().
 *
 * Status: SHS_OK; SHS_ERR_CONFIG (bad knob or parameter, rank/size unknown),
 * SHS_ERR_INVALID_ARG (ctx_p NULL), SHS_ERR_NO_DEVICE (no matching ACTIVE
 * device/port or no usable GID), SHS_ERR_NO_MEMORY, SHS_ERR_NO_RESOURCE
 * (device limits), SHS_ERR_TOKEN_MISMATCH / SHS_ERR_VERSION_MISMATCH /
 * SHS_ERR_SIZE_MISMATCH (ranks disagree, e.g. on msg_size), SHS_ERR_CONNECT (a connection could
 * not be established), SHS_ERR_PEER_FAILED (a rank left during setup),
 * SHS_ERR_TIMEOUT.
 *
 * Rejoining (rejoin = 1, SHS_REJOIN=1): this process is rank `rank` of a
 * running job, started again after its process died. It tries the
 * SHS_BOOTSTRAP addresses in order; the living rank that answers (the
 * rendezvous: the lowest living rank with an address in the list) checks
 * the token as at start-up and refuses: SHS_ERR_TOKEN_MISMATCH (another
 * token), SHS_ERR_SIZE_MISMATCH, SHS_ERR_CONFIG (rank out of range),
 * SHS_ERR_BAD_STATE (the rank is alive in the running job, or its failure
 * is not seen yet: asked again until SHS_BOOTSTRAP_TIMEOUT_MS),
 * SHS_ERR_TIMEOUT when no address answered. Admitted, it connects new
 * queue pairs to every rank the rendezvous counts alive (SHS_CONNECT=oob on
 * every rank; SHS_ERR_UNSUPPORTED with rdma_cm), each of which takes it
 * back at its next poll (shs_ctx_peer_status turns SHS_OK there). Then the
 * program repeats its set-up: it makes, in order, the regions the job holds
 * now (its k-th region is the job's k-th; the ones the job made and
 * destroyed, such as a start-up check's, are not made again; a size that
 * differs is SHS_ERR_SIZE_MISMATCH), which are not collective for it; a
 * living rank's operation on the rejoiner's copy of a region returns
 * SHS_ERR_PEER_FAILED until the rejoiner has made it. Regions made after
 * that are collective with the living ranks again (over the mesh, as every
 * registration after start-up: region.h). Its first shs_ctx_barrier pairs
 * with the first barrier the others enter after taking it back. Endpoints
 * are matched by creation order (a living rank's endpoint takes the
 * rejoiner back at that endpoint's next poll). A shadow engine rejoins
 * (shadow.h, "Rejoin"), and so do embedding tables (embedding.h: a holder
 * reloads its shard from rejoin_dir); a collective the job made at
 * start-up is refused (SHS_ERR_UNSUPPORTED) while the rejoiner replays the
 * job's regions; collectives made afterwards together with the living
 * ranks work (docs/failures.md). If the rank dies and comes back again
 * before a living rank took the earlier process in, that one's queue
 * pairs are replaced there. Rejoin one rank at a time: a rank that
 * connects while another still replays the job's regions fails its
 * set-up (SHS_ERR_CONFIG, naming that rank).
 */
SHS_API shs_status_t shs_ctx_create(const shs_ctx_params_t *params, shs_ctx_t **ctx_p);

/*
 * shs_ctx_destroy - close every connection and release the context.
 * Every region of the context must be destroyed first (a region still alive
 * is reported in the log and leaked, never freed under a user). Not
 * collective, but peers see this rank's connections close: destroy after a
 * final shs_ctx_barrier() when the job ends normally. NULL is ignored.
 * Refused (logged, nothing released) while endpoints of the context are
 * alive, a shadow engine's or an embedding table's included: destroy those
 * first.
 */
SHS_API void shs_ctx_destroy(shs_ctx_t *ctx);

/*
 * shs_ctx_endpoint_create - a new endpoint of ctx (see "Endpoints" above):
 * a completion queue and one connected queue pair to every peer (whatever
 * SHS_QPS_PER_PEER says: operations of an endpoint to a peer are placed in
 * the order they were posted), on ctx's device and protection domain. Collective: every
 * rank creates its endpoints in the same order (they pair by order), on the
 * thread that drives ctx. Endpoints connect out of band over the bootstrap
 * whatever SHS_CONNECT says. Release with shs_ctx_destroy(ep) on the thread
 * that drives it, before ctx is destroyed (shs_ctx_destroy(ctx) is refused,
 * logged, while endpoints are alive). Not collective to destroy; peers see
 * its queue pairs close, as with a context.
 *
 * Status: SHS_OK; SHS_ERR_INVALID_ARG (NULL, logged); SHS_ERR_BAD_STATE
 * (ctx is an endpoint) - both found before anything is sent, so a call made
 * alike on every rank fails alike; SHS_ERR_NO_MEMORY;
 * SHS_ERR_NO_RESOURCE (device limits: queue pairs, CQ entries);
 * SHS_ERR_CONNECT, SHS_ERR_PEER_FAILED, SHS_ERR_TIMEOUT as shs_ctx_create.
 */
SHS_API shs_status_t shs_ctx_endpoint_create(shs_ctx_t *ctx, shs_ctx_t **ep_p);

/* shs_ctx_rank / shs_ctx_size - this rank and the job size; -1 for a NULL
 * context. Thread-safe. */
SHS_API int shs_ctx_rank(const shs_ctx_t *ctx);
SHS_API int shs_ctx_size(const shs_ctx_t *ctx);

/* shs_ctx_rejoined - 1 when this process joined a running job as a rank
 * started again (the rejoin parameter or SHS_REJOIN=1, a job of more than
 * one rank), 0 otherwise and for a NULL context; an endpoint answers as its
 * context. A program branches on it where its set-up differs from the
 * start's: it skips what only the start did (a collective made at
 * start-up: refused while it replays the job's regions), resumes its data
 * where its checkpoint says, and gives its tables rejoin_dir
 * (docs/failures.md, "What the program does again"). Thread-safe. */
SHS_API int shs_ctx_rejoined(const shs_ctx_t *ctx);

/*
 * shs_ctx_channel_alloc - take an immediate channel: a value 1..255 for the
 * top 8 bits of the immediates a program sends with shs_write_imm and
 * matches with shs_poll_imm_match (mask 0xff000000). The library's own users
 * (collectives, shadow engines) take theirs the same way, so no two users of
 * one context share a channel. Ranks that allocate in the same order (after
 * the same collective creates) get the same channel. Release it with
 * shs_ctx_channel_free. Channel 0 is never allocated. Not thread-safe (the
 * context's driving thread).
 * Status: SHS_OK; SHS_ERR_NO_RESOURCE (all 255 taken); SHS_ERR_INVALID_ARG;
 * SHS_ERR_BAD_STATE (a forked child's copy).
 */
SHS_API shs_status_t shs_ctx_channel_alloc(shs_ctx_t *ctx, unsigned *channel_p);
SHS_API void shs_ctx_channel_free(shs_ctx_t *ctx, unsigned channel);

/*
 * shs_ctx_barrier - return once every living rank has entered the barrier.
 * Collective among the ranks the transport has not failed, over the queue
 * pairs (each rank writes its arrival into every peer's memory): no rank is
 * special, so it works after any rank died, rank 0 included. A rank that
 * fails before or during the barrier is not waited for once its failure is
 * seen (the barrier's own write to it fails within SHS_OP_TIMEOUT_MS at
 * most); a living rank is waited for up to SHS_BOOTSTRAP_TIMEOUT_MS. Use
 * shs_ctx_peer_status to learn who is left. It does not wait for
 * outstanding RDMA operations: call shs_flush() first for that.
 * Every living rank must call it the same number of times: a rank already
 * a barrier further (a skipped call, or one that counted this rank failed)
 * is reported, never paired with the wrong barrier.
 * Status: SHS_OK, SHS_ERR_TIMEOUT (a living rank did not arrive in time),
 * SHS_ERR_PROTOCOL (the ranks' barrier counts differ), SHS_ERR_DEVICE,
 * SHS_ERR_INVALID_ARG, SHS_ERR_BAD_STATE (an endpoint, or a forked child's
 * copy). It does not wait for shadow engines: to wait until every rank's
 * engine is done, call shs_shadow_stop on every rank, then this barrier.
 */
SHS_API shs_status_t shs_ctx_barrier(shs_ctx_t *ctx);

/*
 * shs_ctx_peer_status - whether the connection to peer is usable.
 * SHS_OK: up. SHS_ERR_PEER_FAILED: it failed; if reason_p is not NULL it
 * receives a constant description of the first failure (owned by the
 * context, valid until shs_ctx_destroy). SHS_ERR_INVALID_ARG: peer out of
 * range or peer == own rank. Thread-safe.
 */
SHS_API shs_status_t shs_ctx_peer_status(const shs_ctx_t *ctx, int peer,
                                         const char **reason_p);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_CONTEXT_H */

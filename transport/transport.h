/*
 * Private layout of the transport: context, peers, connections, regions.
 * Only transport/ and its unit tests include this file.
 */
#ifndef SHS_TRANSPORT_TRANSPORT_H
#define SHS_TRANSPORT_TRANSPORT_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>
#include <time.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <shadowsync/context.h>
#include <shadowsync/msg.h>
#include <shadowsync/region.h>
#include <shadowsync/rma.h>
#include <shadowsync/status.h>

#include "runtime/bootstrap.h"
#include "runtime/clock.h"
#include "runtime/config.h"
#include "runtime/memory.h"
#include "runtime/wait.h"

#define SHS__SYSFS_ROOT_DEFAULT "/sys/class/infiniband"
#define SHS__REASON_LEN 192
#define SHS__POST_BATCH 16 /* work requests chained into one post (one doorbell) */
#define SHS__WC_BATCH 32
/* the scratch area's layout (context.c, barrier.c): the fence target at 0,
 * the barrier's source word, then from SHS__SCRATCH_ARRIVE one arrival word
 * per rank, then (from shs__scratch_gather_off) two sets of one mesh
 * allgather slot per rank: an 8-byte tag and up to SHS__GATHER_MAX bytes */
#define SHS__SCRATCH_ALIGN 64
#define SHS__SCRATCH_SOURCE 8
#define SHS__SCRATCH_ARRIVE 64
#define SHS__GATHER_SLOT 64
#define SHS__GATHER_MAX (SHS__GATHER_SLOT - 8)

static inline size_t shs__scratch_gather_off(int size)
{
    size_t end = SHS__SCRATCH_ARRIVE + (size_t)size * 8;
    return (end + SHS__SCRATCH_ALIGN - 1) / SHS__SCRATCH_ALIGN * SHS__SCRATCH_ALIGN;
}
/* A wait's deadline counts time without a completion, so completions must
 * come at least every this many bytes: otherwise one flush of 64 MiB over a
 * slow link (a few MB/s between emulated guests) looks like a dead peer. A
 * completion per MiB costs nothing next to the transfer itself. */
#define SHS__SIGNAL_BYTES (1u << 20)

/* The vendor id of Soft-RoCE (rdma_rxe's RXE_VENDOR_ID). */
#define SHS__RXE_VENDOR_ID 0xffffffu

/* SHS_QP_TIMEOUT=auto (-1) for a device: 18 (1.07 s) on rxe, whose acks are
 * made and handled by kernel tasks of a possibly busy host, else 14 (67 ms);
 * the reasons are beside the knob in transport/knobs.c. */
static inline int shs__qp_timeout_for(int knob, uint32_t vendor_id)
{
    if (knob >= 0)
        return knob;
    return vendor_id == SHS__RXE_VENDOR_ID ? 18 : 14;
}

/* ---- GID selection from sysfs (pure: no verbs; unit-tested) ---- */
typedef struct shs__gid_choice {
    int index;
    uint8_t gid[16];
    bool roce_v2;
    bool ipv4_mapped;
} shs__gid_choice_t;

/* Pick a GID of port `port` of device `dev` under sysfs_root. want_index >= 0
 * forces that entry (it must exist and be non-zero). Otherwise the best entry
 * wins: RoCE v2 with an IPv4-mapped address, then RoCE v2 (non link-local),
 * then any non-zero GID (InfiniBand: index 0). SHS_ERR_NO_DEVICE if none. */
shs_status_t shs__gid_select(const char *sysfs_root, const char *dev, int port,
                             int want_index, shs__gid_choice_t *choice_p);
/* Parse "xxxx:xxxx:...:xxxx" (sysfs form) into 16 bytes; false if malformed. */
bool shs__gid_parse(const char *text, uint8_t gid[16]);

/* ---- transfer splitting (pure; unit-tested) ---- */
/* Effective bytes per work request: max_chunk (0 = no knob) capped by the
 * device's max_msg_sz (0 = unknown). Never 0. */
size_t shs__chunk_size(size_t max_chunk, size_t max_msg_sz);
/* Bytes per READ work request: read_chunk (0 = chunk) capped by chunk and by
 * half the READ budget (0 = none), so a READ can always be posted once the
 * signaled ones before it complete. Never 0. */
size_t shs__read_chunk_size(size_t read_chunk, size_t chunk, uint64_t read_budget);
/* Number of work requests for len bytes (0 for len 0). */
size_t shs__split_count(size_t len, size_t chunk);
/* Offset and length of piece i of len bytes. */
void shs__split_piece(size_t len, size_t chunk, size_t i, size_t *off_p, size_t *len_p);
/* [off, off+len) inside [0, region_len)? (overflow-safe) */
bool shs__range_ok(size_t off, size_t len, size_t region_len);

/* ---- parameters (pure; unit-tested) ---- */
/* Override cfg with the fields of params selected by its field_mask.
 * sysfs_root (sysfs_root_len bytes) receives the sysfs root to use.
 * SHS_ERR_CONFIG for a value out of range or a string too long. */
shs_status_t shs__ctx_params_apply(const shs_ctx_params_t *params, shs__config_t *cfg,
                                   char *sysfs_root, size_t sysfs_root_len);

/* ---- completion status -> shadowsync status, with a hint (pure) ---- */
shs_status_t shs__wc_status_to_status(enum ibv_wc_status st);
const char *shs__wc_status_hint(enum ibv_wc_status st);

/* ---- the objects ---- */

/* wr_id layout: bits 0..15 connection index, bit 16 receive, 17.. sequence
 * (send) or receive buffer slot (receive). */
#define SHS__WRID_CONN_BITS 16
#define SHS__WRID_RECV (1ull << 16)
#define SHS__WRID_SEQ_SHIFT 17

typedef struct shs__remote {
    uint64_t addr;
    uint64_t len;
    uint32_t rkey;
    uint32_t flags;
} shs__remote_t;

typedef struct shs__conn {
    struct ibv_qp *qp;
    struct rdma_cm_id *cm_id; /* rdmacm mode only */
    struct shs__peer *peer;
    int index;                /* in ctx->conns */
    int qp_slot;              /* 0 .. qps_per_peer-1 */
    uint32_t psn;
    bool established;
    uint64_t sq_posted;       /* work requests posted so far */
    uint64_t sq_done;         /* work requests known complete (signaled ack) */
    uint64_t sq_signaled;     /* 1 + seq of the last signaled work request */
    unsigned unsignaled_run;  /* work requests since the last signaled one */
    size_t unsignaled_bytes;  /* bytes they carry */
    /* READ bytes in flight: rd_posted counts every READ byte posted;
     * rd_mark[seq & wr_mask] is rd_posted after work request seq, so that
     * rd_posted - rd_mark[(sq_done - 1) & wr_mask] is what is outstanding */
    uint64_t rd_posted;
    uint64_t *rd_mark;
    /* receive buffer slots (0 .. rq_depth-1) not posted and not held by the
     * application: a receive is posted from here */
    uint32_t *rx_free;
    unsigned rx_nfree;
    uint8_t *rx_held;         /* 1 while the application holds the slot's message */
} shs__conn_t;

typedef struct shs__peer {
    int rank;
    atomic_int failed;        /* 0 up; 1 failed (reason and fail_status valid) */
    atomic_flag claimed;      /* first failure wins the right to write reason */
    shs_status_t fail_status; /* what the first flush after the failure returns */
    bool fail_reported;
    char reason[SHS__REASON_LEN];
    char addr[64];            /* the peer's IP (or GID) for messages */
    /* an endpoint's peer: the same rank in the parent context, whose
     * failure is this one's too, and which learns of this one's (NULL on a
     * context) */
    struct shs__peer *up;
    /* incarnations: a context's peer counts the times it rejoined; an
     * endpoint's peer remembers the count its queue pairs were made for (a
     * rejoined rank counts failed on an endpoint until that endpoint is
     * connected to it again) */
    atomic_uint gen;
    unsigned up_gen;
    /* a context's: its gen when it was failed. An endpoint made for a newer
     * incarnation (up_gen) does not inherit the old one's failure: it can
     * run with the rejoiner before the context's own thread takes it back */
    atomic_uint fail_gen;
    /* a rejoiner's queue pairs, made by the rejoin thread (transport/rejoin/), that
     * the thread driving the context installs; REVIVE_* */
    atomic_int revive;
    struct shs__conn *stage;  /* qps_per_peer */
    shs__remote_t stage_scratch;
    unsigned stage_gen;       /* an endpoint's: the context peer's incarnation */
    uint64_t first_bar;       /* a rejoiner: barriers before this one do not count it */
    char stage_addr[64];      /* the rejoiner's device address, for messages */
    shs__conn_t *conns;       /* qps_per_peer */
    unsigned rr;              /* next connection for round robin */
    /* received immediates not yet taken; the receive is reposted on take */
    uint32_t *imm_val;
    uint16_t *imm_conn;       /* connection slot whose receive it used */
    unsigned imm_head, imm_tail, imm_mask;
    /* received messages not yet taken (same capacity and mask) */
    uint16_t *msg_conn;
    uint32_t *msg_slot;       /* receive buffer slot holding the message */
    uint32_t *msg_len;
    unsigned msg_head, msg_tail;
} shs__peer_t;

struct shs_region {
    shs_ctx_t *ctx;
    uint32_t seq;             /* creation order on the context (rejoiners match by it) */
    struct shs_region *next;  /* the context's list of regions (ctx->reg_lock) */
    void *addr;
    size_t len;
    unsigned flags;
    bool owned;               /* memory from shs_region_alloc, in mem */
    shs__mem_t mem;
    struct ibv_mr *mr;
    shs__remote_t *remote;    /* ctx->size entries, one per rank */
    int holds;                /* shs__region_hold: destroy refused while > 0 */
    bool uneven;              /* ranks' lengths may differ, 0 included */
    const char *held_by;
};

struct shs_ctx {
    shs__config_t cfg;
    /* An endpoint (shs_ctx_endpoint_create) shares its parent's bootstrap,
     * device and protection domain, and owns its own completion queue and
     * mesh of queue pairs; NULL for a context. */
    shs_ctx_t *parent;
    atomic_int endpoints;     /* a context's endpoints still alive */
    char sysfs_root[256];
    int rank;
    int size;
    shs__boot_t *boot;

    /* device */
    struct ibv_context *verbs;
    bool verbs_owned;         /* opened by us (oob) rather than librdmacm's */
    struct ibv_device_attr dev_attr;
    struct ibv_port_attr port_attr;
    int port;
    shs__gid_choice_t gid;
    char dev_name[64];
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    int cq_depth;
    size_t chunk;             /* bytes per WRITE work request */
    size_t read_chunk;        /* bytes per READ work request */
    uint64_t read_budget;     /* READ bytes outstanding per QP (UINT64_MAX: no cap) */
    size_t signal_bytes;      /* at most this many bytes ride on unsignaled requests */
    uint64_t wr_mask;         /* rd_mark ring: a power of two >= sq_depth, minus 1 */
    int signal_every;
    int rd_atom;              /* outstanding READs we issue per QP */
    int rd_resp;              /* READs we accept per QP */

    /* rdmacm mode */
    struct rdma_event_channel *cm_channel;
    struct rdma_cm_id *listen_id;

    /* a small region on every rank: flushes write zero bytes at its start,
     * the mesh barrier writes from SHS__SCRATCH_SOURCE into the peers'
     * arrival words (barrier.c) */
    struct ibv_mr *scratch_mr;
    void *scratch;
    size_t scratch_len;
    shs__remote_t *scratch_remote;
    uint64_t bar_epoch;       /* barriers this context has entered */
    /* a rejoiner is staged (its first barrier read from bar_epoch) and
     * installed at barrier entry under this lock, never inside a barrier's
     * wait: so it takes part in whole barriers only */
    pthread_mutex_t bar_lock;
    bool in_barrier;

    shs__peer_t *peers;       /* size entries; peers[rank] unused */
    shs__conn_t **conns;      /* nconns, indexed by shs__conn_t.index */
    int nconns;
    int live_regions;
    unsigned fork_gen;        /* shs__fork_guard() when created: a forked child differs */
    bool fork_reported;

    /* the rendezvous for rejoiners (a context whose rank has an address in
     * SHS_BOOTSTRAP; NULL otherwise and on endpoints) */
    shs__boot_serve_t *serve;
    int naddrs;               /* entries of SHS_BOOTSTRAP */
    /* rejoins (transport/rejoin/) */
    bool rejoined;            /* this process rejoined a running job */
    bool mesh_ready;          /* created: collectives go over the mesh, not the bootstrap */
    atomic_int revive_pending; /* a rejoiner's queue pairs or regions wait to be installed */
    pthread_mutex_t reg_lock; /* regions (and rejoiners' keys in them), endpoints */
    shs_ctx_t *eps;           /* a context's endpoints, newest first */
    shs_ctx_t *ep_next;       /* an endpoint: the next one of its context */
    uint32_t ep_seq;          /* an endpoint: creation order on its context */
    uint32_t ep_count;        /* a context: endpoints created so far */
    shs_region_t *regions;    /* every region of the context, newest first */
    uint32_t region_seq;      /* regions created so far */
    struct shs__reg_entry **rj_table; /* a rejoiner: each rank's regions (size entries) */
    size_t *rj_count;
    size_t rj_regions;        /* a rejoiner: regions it made so far (its k-th is the
                                 job's k-th, rejoin/join.c) */

    pthread_t async_thread;
    bool async_running;
    int wake_pipe[2];
    atomic_int device_failed;
    /* services to the layers above (services.c) */
    atomic_int lent;          /* lent to a background thread (shs__ctx_lend) */
    const char *lent_to;
    const char *chan_user[256]; /* immediate channels taken (NULL: free) */

    /* receive buffers for two-sided messages: rq_depth slots of msg_size
     * bytes per connection (none when msg_size is 0) */
    shs__mem_t rx_mem;
    struct ibv_mr *rx_mr;
    unsigned msg_rr;          /* fairness of shs_recv(SHS_PEER_ANY) */

    int post_batch;           /* work requests per post: <= sq_depth / 2 */
    unsigned imm_rr;          /* fairness of SHS_PEER_ANY */
    struct ibv_wc wc[SHS__WC_BATCH];
    struct ibv_send_wr wr[SHS__POST_BATCH];
    struct ibv_sge sge[SHS__POST_BATCH];
};

/* region usable on ctx: the context's own, or its parent's (an endpoint) */
static inline bool shs__region_of(const shs_region_t *region, const shs_ctx_t *ctx)
{
    return region->ctx == ctx || (ctx->parent != NULL && region->ctx == ctx->parent);
}

/* the device failed: seen on ctx or, for an endpoint, on its parent */
static inline bool shs__device_failed(const shs_ctx_t *ctx)
{
    return atomic_load_explicit(&ctx->device_failed, memory_order_relaxed) ||
           (ctx->parent != NULL &&
            atomic_load_explicit(&ctx->parent->device_failed, memory_order_relaxed));
}

/* Calls that are collective over the bootstrap (barrier, region creation,
 * endpoint creation) are refused on an endpoint: true (logged) when ctx is
 * one. */
bool shs__ctx_endpoint_refused(const shs_ctx_t *ctx, const char *call);

/* connection helpers (conn.c) */
shs_status_t shs__conn_create_qp(shs_ctx_t *ctx, shs__conn_t *conn);
shs_status_t shs__conn_post_recvs(shs_ctx_t *ctx, shs__conn_t *conn);
/* Post one receive from conn's free buffer slots; 0 or an errno value. */
int shs__conn_post_recv(shs_ctx_t *ctx, shs__conn_t *conn);
shs_status_t shs__mesh_alloc(shs_ctx_t *ctx);
void shs__mesh_free(shs_ctx_t *ctx);
/* The IP address a GID carries (IPv4-mapped or IPv6), for rdma_cm and logs. */
void shs__gid_to_sockaddr(const uint8_t gid[16], uint16_t port, struct sockaddr_storage *ss);
void shs__gid_to_string(const uint8_t gid[16], char *buf, size_t len);
/* Mark peer failed (first caller wins; thread-safe). The reason is logged. */
void shs__peer_fail(shs__peer_t *peer, shs_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, logged at log_level: a peer that closes its connection at the end of
 * a job is news, not an error, until someone uses the connection. */
void shs__peer_fail_at(int log_level, shs__peer_t *peer, shs_status_t status,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static inline bool shs__peer_is_failed(const shs__peer_t *peer)
{
    return atomic_load_explicit(&peer->failed, memory_order_acquire) != 0 ||
           (peer->up != NULL &&
            ((atomic_load_explicit(&peer->up->failed, memory_order_acquire) != 0 &&
              atomic_load_explicit(&peer->up->fail_gen, memory_order_relaxed) ==
                  peer->up_gen) ||
             atomic_load_explicit(&peer->up->gen, memory_order_acquire) != peer->up_gen));
}

/* connection establishment (conn_oob.c, conn_rdmacm.c) */
shs_status_t shs__connect_oob(shs_ctx_t *ctx);
shs_status_t shs__connect_rdmacm(shs_ctx_t *ctx);
void shs__rdmacm_teardown(shs_ctx_t *ctx);
/* ack an rdma_cm event; frees the id of a connect request that was refused */
void shs__rdmacm_ack_event(struct rdma_cm_event *ev);
/* handle one rdma_cm event after setup (async thread) */
void shs__rdmacm_handle_late_event(shs_ctx_t *ctx, struct rdma_cm_event *ev);

/* device (device.c) */
shs_status_t shs__device_open(shs_ctx_t *ctx);
void shs__device_close(shs_ctx_t *ctx);
shs_status_t shs__cq_create(shs_ctx_t *ctx);
void shs__cq_destroy(shs_ctx_t *ctx);

/* process-level hazards of verbs (process.c): locked memory and fork */
/* Install the fork handler once per process; the current fork generation
 * (a child's differs from its parent's). */
unsigned shs__fork_guard(void);
/* true (logged once per context) when ctx was created before a fork and this
 * is the child: its RDMA objects belong to the parent, call names the caller */
bool shs__ctx_forked(shs_ctx_t *ctx, const char *call);
/* Whether `call` must be refused on ctx: in a forked child (above), or while
 * the context is lent to a background thread other than the caller's
 * (services.c). Logs why. */
bool shs__ctx_refused(shs_ctx_t *ctx, const char *call);
/* registered regions of the process, for the fork warning */
void shs__fork_regions_add(int delta);
/* warn once per process when RLIMIT_MEMLOCK will stop registrations */
void shs__memlock_check(const char *dev_name);
/* log why ibv_reg_mr of len bytes failed with err, with what to do */
void shs__reg_mr_explain(const char *dev_name, size_t len, int err);

/* out-of-band connection pieces (conn_oob.c), also used by rejoins */
typedef struct shs__oob_hdr {   /* values in network byte order */
    uint8_t gid[16];
    uint32_t lid;
    uint32_t mtu;      /* enum ibv_mtu of the active port */
    uint32_t rd_atom;  /* READs it issues per QP */
    uint32_t rd_resp;  /* READs it accepts per QP */
} shs__oob_hdr_t;
typedef struct shs__oob_qp {
    uint32_t qpn;
    uint32_t psn;
} shs__oob_qp_t;
void shs__oob_hdr_fill(const shs_ctx_t *ctx, shs__oob_hdr_t *h);
shs_status_t shs__oob_qp_to_init(shs_ctx_t *ctx, shs__conn_t *conn);
shs_status_t shs__oob_qp_to_rtr_rts(shs_ctx_t *ctx, shs__conn_t *conn, const shs__oob_hdr_t *rh,
                                    const shs__oob_qp_t *rq);

/* rejoins (transport/rejoin/) */
#define SHS__REVIVE_IDLE 0
#define SHS__REVIVE_STAGED 1  /* queue pairs made, waiting for the driving thread */
#define SHS__REVIVE_INSTALLING 2 /* the driving thread puts them to use */
#define SHS__REVIVE_RESTAGING 3  /* the rank rejoined again before the driving thread
                                    took the staged ones: those are replaced */
/* Start the rejoin listeners and learn every rank's service address
 * (collective at start-up; a rejoiner takes the rendezvous' directory). */
shs_status_t shs__rejoin_serve_start(shs_ctx_t *ctx);
/* A rejoiner: connect to every rank alive in the directory (instead of
 * the start-up connect and scratch exchange); an endpoint of a rejoiner:
 * to every rank its context counts alive, whose endpoint of the same
 * creation order takes it. */
shs_status_t shs__rejoin_connect(shs_ctx_t *ctx);
/* On the thread that drives ctx: put staged queue pairs and regions of
 * rejoined ranks to use (shs__poll calls it when revive_pending). */
void shs__rejoin_install(shs_ctx_t *ctx);
/* A rejoiner's region: its peers' copies from their tables, its own sent
 * to them. */
shs_status_t shs__rejoin_region(shs_ctx_t *ctx, shs_region_t *region);
/* A rejoiner whose next region is one the job held when it rejoined (its
 * set-up replayed), not one made together with the living ranks now. */
bool shs__rejoin_replaying(const shs_ctx_t *ctx);
void shs__rejoin_free(shs_ctx_t *ctx);
/* Raw completion polling (shs__poll without installing rejoins). */
int shs__poll_cq(shs_ctx_t *ctx);

/* async events (async.c) */
shs_status_t shs__async_start(shs_ctx_t *ctx);
void shs__async_stop(shs_ctx_t *ctx);

/* two-sided messages (msg.c): receive buffers, set up before connecting */
shs_status_t shs__msg_setup(shs_ctx_t *ctx);
void shs__msg_teardown(shs_ctx_t *ctx);
/* every rank must use the same msg_size (collective, after connecting) */
shs_status_t shs__msg_check(shs_ctx_t *ctx);

/* completions (completion.c) */
int shs__poll(shs_ctx_t *ctx);
/* the mesh barrier's arrival write, an allgather record's (rma.c) and the
 * barrier (barrier.c) */
shs_status_t shs__post_scratch_word(shs_ctx_t *ctx, int peer, size_t local_off,
                                    size_t remote_off);
shs_status_t shs__post_scratch_write(shs_ctx_t *ctx, int peer, size_t local_off,
                                     size_t remote_off, size_t len);
shs_status_t shs__mesh_barrier(shs_ctx_t *ctx);
/* Every living rank's len bytes (len <= SHS__GATHER_MAX) into all, in rank
 * order; present[p]: rank p's came (this rank's always). Over the mesh,
 * among the living ranks, as a barrier (barrier.c): collective on a
 * context once its mesh is up. A rank failed (or not yet back) is absent,
 * its bytes zero. */
shs_status_t shs__mesh_allgather(shs_ctx_t *ctx, const void *mine, size_t len, void *all,
                                 bool *present);

#endif

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/config.h"
#include "runtime/log.h"

typedef struct knob knob_t;
typedef shs_status_t (*knob_parse_fn)(const knob_t *k, const char *val, void *field);

struct knob {
    const char *name;
    const char *def;
    const char *help;
    knob_parse_fn parse;
    size_t offset;
    size_t field_size;
    long long min, max;
    const char *const *words; /* enum words, NULL-terminated, mapped to values[] */
    const int *values;
};

static shs_status_t parse_int(const knob_t *k, const char *val, void *field);
static shs_status_t parse_int_auto(const knob_t *k, const char *val, void *field);
static shs_status_t parse_size(const knob_t *k, const char *val, void *field);
static shs_status_t parse_str(const knob_t *k, const char *val, void *field);
static shs_status_t parse_pin(const knob_t *k, const char *val, void *field);
static shs_status_t parse_addr(const knob_t *k, const char *val, void *field);
static shs_status_t parse_token(const knob_t *k, const char *val, void *field);
static shs_status_t parse_enum(const knob_t *k, const char *val, void *field);
static shs_status_t parse_log(const knob_t *k, const char *val, void *field);

static const char *const connect_words[] = {"auto", "rdmacm", "oob", NULL};
static const int connect_values[] = {SHS_CONNECT_AUTO, SHS_CONNECT_RDMACM, SHS_CONNECT_OOB};
static const char *const tri_words[] = {"auto", "off", "on", "0", "1", NULL};
static const int tri_values[] = {SHS_TRI_AUTO, SHS_TRI_OFF, SHS_TRI_ON, SHS_TRI_OFF, SHS_TRI_ON};

#define FIELD(f) offsetof(shs__config_t, f), sizeof(((shs__config_t *)0)->f)
#define KNOB_INT(n, f, d, lo, hi, h) {n, d, h, parse_int, FIELD(f), lo, hi, NULL, NULL}
#define KNOB_INT_AUTO(n, f, d, lo, hi, h) {n, d, h, parse_int_auto, FIELD(f), lo, hi, NULL, NULL}
#define KNOB_SIZE(n, f, d, lo, hi, h) {n, d, h, parse_size, FIELD(f), lo, hi, NULL, NULL}
#define KNOB_STR(n, f, d, p, h) {n, d, h, p, FIELD(f), 0, 0, NULL, NULL}
#define KNOB_ENUM(n, f, d, w, v, h) {n, d, h, parse_enum, FIELD(f), 0, 0, w, v}

#define MAX_RANKS (1 << 20)

/*
 * The one table of knobs. Each default is parsed by the same parser as a user
 * value, so a bad default fails every test run rather than hiding.
 */
static const knob_t knobs[] = {
    /* warn: errors and suspicious conditions only; a healthy job is silent. */
    {"SHS_LOG", "warn", "log level: error, warn, info, debug, trace (or 0-4)",
     parse_log, FIELD(log_level), 0, 0, NULL, NULL},
    /* auto: launchers already know the rank; asking twice invites mismatch. */
    KNOB_INT_AUTO("SHS_RANK", rank, "auto", 0, MAX_RANKS - 1,
                  "rank of this process; auto = from the launcher (Open MPI, PMIx, PMI, Slurm, torchrun)"),
    KNOB_INT_AUTO("SHS_SIZE", size, "auto", 1, MAX_RANKS,
                  "number of ranks; auto = from the launcher"),
    /* auto: follow torchrun's MASTER_ADDR when present, else a single host. */
    KNOB_STR("SHS_BOOTSTRAP", bootstrap, "auto", parse_addr,
             "host:port where rank 0 listens for the TCP rendezvous; auto = "
             "MASTER_ADDR:(MASTER_PORT+1), else 127.0.0.1:18520"),
    /* auto: the launcher's job id is the same on every rank of a job and
     * differs between jobs, which is exactly what the token must separate. */
    KNOB_STR("SHS_JOB_TOKEN", job_token, "auto", parse_token,
             "token every rank must present at the rendezvous; auto = the launcher's job id, else \"default\""),
    /* 60 s: ranks of a large job start tens of seconds apart (image pulls,
     * module loads, srun fan-out); a minute absorbs that without hanging. */
    KNOB_INT("SHS_BOOTSTRAP_TIMEOUT_MS", bootstrap_timeout_ms, "60000", 1, 24 * 3600 * 1000,
             "deadline of the rendezvous and of each bootstrap collective (ms)"),
    /* 10 s: a rank sends its hello as soon as it connects and the handshake is
     * two round trips, milliseconds even on a loaded host; a connection that
     * has not finished in 10 s is a stranger (or a port scanner) and is
     * dropped. Handshakes run concurrently, so this bounds what a stranger
     * costs, not how long a real rank waits. */
    KNOB_INT("SHS_BOOTSTRAP_HANDSHAKE_TIMEOUT_MS", bootstrap_handshake_ms, "10000", 1,
             24 * 3600 * 1000,
             "deadline for one connection's hello and token proof at rank 0 (ms)"),
    /* empty: most nodes have one RDMA device worth using. */
    KNOB_STR("SHS_DEVICE", device, "", parse_str,
             "rdma device name (e.g. mlx5_0, rxe0); empty = first device with an ACTIVE port"),
    KNOB_INT("SHS_IB_PORT", ib_port, "0", 0, 255, "device port; 0 = first ACTIVE port"),
    /* auto: the right GID (RoCEv2, IPv4-mapped) moves with the address
     * configuration; a fixed index is right on one host and wrong on the next. */
    KNOB_INT_AUTO("SHS_GID_INDEX", gid_index, "auto", 0, 65535,
                  "GID table index; auto = RoCEv2 with an IPv4-mapped address preferred"),
    /* auto: rdmacm where it works from the GID alone, RoCE (what RoCE users
     * expect; it resolves GID and route itself); oob on InfiniBand, whose
     * GIDs carry no IP address for rdma_cm to bind (IPoIB addresses would). */
    KNOB_ENUM("SHS_CONNECT", connect_mode, "auto", connect_words, connect_values,
              "how QPs are connected: rdmacm, oob (GID/QPN/PSN over the bootstrap), or "
              "auto = rdmacm on RoCE, oob on InfiniBand"),
    /* 1: one RC QP per peer saturates a link for large one-sided transfers. */
    KNOB_INT("SHS_QPS_PER_PEER", qps_per_peer, "1", 1, 16, "RC queue pairs per peer"),
    /* 15 s: address and route resolution take milliseconds, but ARP or an SM
     * path query on a busy fabric can take seconds. */
    KNOB_INT("SHS_CONNECT_TIMEOUT_MS", connect_timeout_ms, "15000", 1, 24 * 3600 * 1000,
             "deadline to connect every QP (ms)"),
    /* auto: 14 on hardware: 4.096 us * 2^14 = 67 ms per ack timeout, long
     * enough for a congested RoCE fabric, short enough that a dead peer is
     * noticed in ~0.5 s (x8). 18 (1.07 s) on Soft-RoCE (rxe): its acks are
     * made and handled by kernel tasks of a busy host, and a timeout goes back
     * to the oldest unacknowledged packet; between two emulated guests on a
     * loaded host 67 ms gave 430 spurious retries and 37,000 duplicate packets
     * in one 1 B..64 MiB test (62% more packets, 64 MiB took twice as long;
     * the link lost nothing), 18 gave 0-6 retries even at load 14. rxe takes
     * retry count 7 as "forever", so there a dead peer is found by
     * SHS_OP_TIMEOUT_MS anyway. 0 (infinite) is refused: a dead peer must
     * never hang the caller. */
    KNOB_INT_AUTO("SHS_QP_TIMEOUT", qp_timeout, "auto", 1, 31,
                  "local ack timeout exponent: 4.096 us * 2^n; auto = 14 (67 ms), "
                  "18 (1.07 s) on Soft-RoCE (rxe)"),
    /* 7: the largest value of the 3-bit field; transient loss is retried
     * fully before the peer is declared dead. */
    KNOB_INT("SHS_QP_RETRY", qp_retry_cnt, "7", 0, 7, "transport retry count (0-7)"),
    /* 6: 7 means "retry forever" in IB, which would hang on a peer that stops
     * posting receives; it is refused. */
    KNOB_INT("SHS_QP_RNR_RETRY", qp_rnr_retry, "6", 0, 6,
             "receiver-not-ready retry count (0-6; 7 = infinite is refused)"),
    /* 256: enough work requests in flight to cover a 64 MiB transfer split at
     * the usual 8 MiB limit many times over, within every device's max_qp_wr. */
    KNOB_INT("SHS_SQ_DEPTH", sq_depth, "256", 1, 1 << 16, "send queue depth per QP"),
    /* 256: write-with-immediate notifications outstanding per peer. */
    KNOB_INT("SHS_RQ_DEPTH", rq_depth, "256", 1, 1 << 16, "receive queue depth per QP"),
    /* 16: the send queue is reclaimed 16 times per lap of a 256-deep queue,
     * and 15 of 16 completions are never generated. */
    KNOB_INT("SHS_SIGNAL_EVERY", signal_every, "16", 1, 1 << 16,
             "signal one send work request in n (at most SHS_SQ_DEPTH)"),
    /* 1 MiB: a wait's deadline counts time without a completion, and a work
     * request completes only whole: one of 8 MiB (rxe's max_msg_sz) takes
     * longer than SHS_OP_TIMEOUT_MS on a slow link (two loaded emulated
     * guests: under 1 MB/s), so such a transfer looked like a dead peer.
     * 1 MiB per request costs nothing next to the transfer on real links. */
    KNOB_SIZE("SHS_MAX_CHUNK", max_chunk, "1m", 0, 1ll << 31,
              "bytes per work request (k/m/g suffixes), capped by the device's "
              "max_msg_sz; 0 = max_msg_sz"),
    /* 1 MiB: a READ whose response loses a packet is retried from that packet
     * to its end (go-back-N), and its completion is the first sign of progress
     * a flush sees; 1 MiB keeps both small on a slow or lossy link while the
     * per-request cost stays negligible next to the transfer on real links. */
    KNOB_SIZE("SHS_READ_CHUNK", read_chunk, "1m", 0, 1ll << 31,
              "bytes per READ work request (k/m/g); 0 = as SHS_MAX_CHUNK"),
    /* 4 MiB: READ responses are sent by the peer as fast as it can, without
     * flow control; capping what is requested at once bounds the queue that
     * builds on a slow link (and what one loss costs) while covering the
     * bandwidth-delay product of any RDMA link (100 Gb/s x 10 us = 125 KB). */
    KNOB_SIZE("SHS_READ_INFLIGHT", read_inflight, "4m", 0, 1ll << 40,
              "READ bytes outstanding per QP (k/m/g); 0 = no cap beyond the device's "
              "max_qp_rd_atom"),
    /* 0: two-sided messages (shs_send/shs_recv) cost SHS_RQ_DEPTH receive
     * buffers of this size per queue pair, registered at start-up; the
     * runtime's own algorithms are one-sided and need none. */
    KNOB_SIZE("SHS_MSG_SIZE", msg_size, "0", 0, 1ll << 30,
              "largest shs_send message = bytes of each receive buffer (k/m/g); "
              "0 = no two-sided messages"),
    /* 10 s: a 64 MiB transfer takes well under a second on any RDMA link, and
     * QP retries report a dead peer in ~0.5 s; 10 s tells slow from dead. */
    KNOB_INT("SHS_OP_TIMEOUT_MS", op_timeout_ms, "10000", 1, 24 * 3600 * 1000,
             "bound on any wait for completions (ms)"),
    /* 2000: a completion microseconds away is caught by polling, and a few
     * waiting ranks on few cores (the emulated guest) still let the one that
     * must make progress run. A latency-bound job that owns its cores (or a
     * peer in another machine, where nothing local needs the CPU) wants more:
     * polls cost ~0.1 us on hardware, so 2000 polls is ~0.2 ms. */
    KNOB_INT("SHS_POLL_SPIN", poll_spin, "2000", 0, 1 << 30,
             "empty polls of a wait for completions before it starts sleeping (1 us doubling "
             "to 50 us)"),
    /* auto: hugepages cut MR translation misses, but a missing pool must not
     * stop a job; "on" turns the fallback into an error. */
    KNOB_ENUM("SHS_HUGEPAGES", hugepages, "auto", tri_words, tri_values,
              "hugepages for runtime-allocated regions: auto, on (fail without), off"),
    /* auto: the last CPU the process may use, since trainers conventionally
     * place their workers from CPU 0 upwards. */
    KNOB_STR("SHS_SHADOW_PIN", shadow_pin, "auto", parse_pin,
             "CPUs of the shadow sync thread: auto (last allowed CPU), none, or a list like 3 or 2-3"),
    /* 30 s: in the foreground (FR) modes a peer reaches its sync point up to a
     * whole sync interval of training later than a fast rank; a dead peer is
     * still reported by the transport within SHS_OP_TIMEOUT_MS. */
    KNOB_INT("SHS_SHADOW_WAIT_MS", shadow_wait_ms, "30000", 1, 24 * 3600 * 1000,
             "bound on waiting for a peer's round snapshot or inbox credit (ms)"),
    /* 1 MiB: ~100 us of transfer at 10 GB/s amortizes the per-read cost, and
     * (g - 1) receive buffers of this size stay small. */
    KNOB_SIZE("SHS_SHADOW_CHUNK", shadow_chunk, "1m", 64, 1ll << 30,
              "bytes per pulled piece of a peer's snapshot (k/m/g suffixes)"),
    /* 200 us: a waiting shadow thread sleeps instead of spinning, leaving the
     * CPU to the workers, and still notices a snapshot within a fraction of
     * a round (rounds take milliseconds). */
    KNOB_INT("SHS_SHADOW_BACKOFF_US", shadow_backoff_us, "200", 0, 1000000,
             "longest sleep between two polls of a peer's snapshot stamp (us)"),
    /* auto: the engine takes a free channel from its context
     * (shs_ctx_channel_alloc), so it never shares one with a collective or
     * the program; a number reserves exactly that channel (create fails when
     * another user holds it). It tags the EASGD deltas and acknowledgements. */
    KNOB_INT_AUTO("SHS_SHADOW_CHANNEL", shadow_channel, "auto", 0, 255,
                  "shadow engine: channel in the top 8 bits of its immediates (EASGD inbox): "
                  "auto (allocated by the context) or 0..255"),
    /* 80: the shadow thread sleeps through most of a transfer it has timed
     * before instead of polling for it, leaving the CPU to the workers (and
     * to Soft-RoCE's kernel threads, which move the data); the last 20%
     * absorbs the variation and keeps the latency. */
    KNOB_INT("SHS_SHADOW_NAP", shadow_nap, "80", 0, 100,
             "shadow engine: percent of a pull's expected time slept before polling (0 = spin)"),
    /* 1 MiB: every chunk costs a work request, an immediate, a credit and a
     * wake-up of a waiting rank; on rxe (2026-12-03, one guest, 4 ranks,
     * 16 MiB float sum) 1 MiB chunks gave 20.5/20.0 MB/s busbw against
     * 18.1/17.1 at 256 KiB, and 2 MiB no more than 1 MiB. A ring of 8
     * still cuts a 16 MiB buffer into 2 chunks per segment, and shorter
     * calls are cut finer (SHS_COLL_MIN_CHUNK). Inbox: slots * 1 MiB. */
    KNOB_SIZE("SHS_COLL_CHUNK", coll_chunk, "1m", 64, 1ll << 30,
              "collectives: bytes per pipelined chunk = per inbox slot (k/m/g; a multiple of 8)"),
    /* 4: two chunks in flight while two are reduced keeps the link and the
     * reduction busy; 2 * slots notifications per peer stay far below
     * SHS_RQ_DEPTH. */
    KNOB_INT("SHS_COLL_SLOTS", coll_slots, "4", 1, 63,
             "collectives: inbox slots (credits) a receiver grants its left neighbour"),
    /* 16 MiB: one pass for the buffers the benchmarks use; larger buffers
     * take several passes of the ring, smaller ones cost nothing extra. */
    KNOB_SIZE("SHS_COLL_STAGE", coll_stage, "16m", 0, 1ll << 40,
              "collectives: registered staging bytes for shs_allreduce on unregistered memory "
              "(0 = none)"),
    /* auto: every collective takes a free channel from its context, so two
     * collectives (or a collective and a shadow engine's internal one) never
     * take each other's immediates; a number reserves exactly that channel
     * (create fails when another user of the context holds it). */
    KNOB_INT_AUTO("SHS_COLL_CHANNEL", coll_channel, "auto", 0, 255,
                  "collectives: channel in the top 8 bits of their immediates: auto "
                  "(allocated by the context) or 0..255"),
    /* 64: a few microseconds of polling catch a chunk that is about to land;
     * beyond that a waiting rank sleeps (SHS_COLL_SLEEP_US). */
    KNOB_INT("SHS_COLL_SPIN", coll_spin, "64", 0, 1 << 30,
             "collectives: empty polls before a waiting rank starts sleeping"),
    /* 50 us: when ranks outnumber cores, or the RDMA device is software
     * (rxe computes its CRC on the CPU), spinning or sched_yield() starves
     * the kernel threads that move the data; sleeps doubling from 1 us up to
     * 50 us give them the CPU and add at most that to a wait. 0: yield. */
    KNOB_INT("SHS_COLL_SLEEP_US", coll_sleep_us, "50", 0, 1000000,
             "collectives: longest sleep between polls of a waiting rank (us); 0 = sched_yield"),
    /* 32 KiB: the first chunk of a small reduction skips the wait for the
     * grant (one message latency, the most a latency-bound call among few
     * ranks can save); covers the chunks of a 64 KiB pair exchange, and
     * costs 32 KiB per rank of the job in each inbox. */
    KNOB_SIZE("SHS_COLL_EAGER", coll_eager, "32k", 0, 1ll << 30,
              "collectives: per-sender inbox slot for a call's first chunk up to this size (k/m/g; 0 = none)"),
    /* 16 KiB: a segment shorter than the slots together (a 1 MiB call on 4
     * ranks: 256 KiB) is cut into `slots` chunks so that the link, the
     * reduction and the next hop still overlap. The floor keeps the
     * per-chunk costs (a work request, an immediate, a credit, a wake-up)
     * small next to each chunk; 16 KiB is a judgement, not a measured
     * optimum (measured: 1 MiB on 4 ranks, 64 KiB chunks, 1.15x Gloo). */
    KNOB_SIZE("SHS_COLL_MIN_CHUNK", coll_min_chunk, "16k", 8, 1ll << 30,
              "collectives: smallest chunk when a short call is cut to pipeline (k/m/g; a "
              "multiple of 8; >= SHS_COLL_CHUNK: never cut below SHS_COLL_CHUNK)"),
};

#define KNOB_COUNT (sizeof(knobs) / sizeof(knobs[0]))

/* The job token is the bootstrap's shared secret: it never reaches a log. */
static const char *shown(const knob_t *k, const char *val)
{
    return k->parse == parse_token ? "(hidden)" : val;
}

static shs_status_t bad_value(const knob_t *k, const char *val, const char *why)
{
    SHS_ERROR("invalid %s=\"%s\": %s", k->name, shown(k, val), why);
    return SHS_ERR_CONFIG;
}

static shs_status_t parse_ll(const knob_t *k, const char *val, long long *out)
{
    char *end;
    char why[96];

    snprintf(why, sizeof(why), "expected an integer in %lld..%lld", k->min, k->max);
    /* strtoll would accept leading blanks and a '+'; a knob is a plain number. */
    if (!(isdigit((unsigned char)val[0]) || (val[0] == '-' && isdigit((unsigned char)val[1]))))
        return bad_value(k, val, why);
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno != 0 || *end != '\0' || v < k->min || v > k->max)
        return bad_value(k, val, why);
    *out = v;
    return SHS_OK;
}

static shs_status_t parse_int(const knob_t *k, const char *val, void *field)
{
    long long v;
    shs_status_t st = parse_ll(k, val, &v);
    if (st == SHS_OK)
        *(int *)field = (int)v;
    return st;
}

static shs_status_t parse_int_auto(const knob_t *k, const char *val, void *field)
{
    if (strcasecmp(val, "auto") == 0) {
        *(int *)field = -1;
        return SHS_OK;
    }
    return parse_int(k, val, field);
}

static shs_status_t parse_size(const knob_t *k, const char *val, void *field)
{
    char *end;
    char why[112];
    unsigned long long mult = 1;

    snprintf(why, sizeof(why), "expected a byte count in %lld..%lld (k/m/g suffix allowed)",
             k->min, k->max);
    if (!isdigit((unsigned char)val[0]))
        return bad_value(k, val, why);
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno != 0)
        return bad_value(k, val, why);
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mult = 1ull << 10; end++; break;
    case 'm': case 'M': mult = 1ull << 20; end++; break;
    case 'g': case 'G': mult = 1ull << 30; end++; break;
    default: return bad_value(k, val, why);
    }
    if (*end != '\0' || v > (unsigned long long)k->max / mult ||
        v * mult < (unsigned long long)k->min)
        return bad_value(k, val, why);
    *(size_t *)field = (size_t)(v * mult);
    return SHS_OK;
}

static shs_status_t parse_str(const knob_t *k, const char *val, void *field)
{
    size_t len = strlen(val);
    if (len >= k->field_size) {
        char why[64];
        snprintf(why, sizeof(why), "longer than %zu characters", k->field_size - 1);
        return bad_value(k, val, why);
    }
    memcpy(field, val, len + 1);
    return SHS_OK;
}

bool shs__cpulist_valid(const char *s)
{
    /* item[,item]...: item = N or N-M with N <= M */
    if (s == NULL || *s == '\0')
        return false;
    while (*s != '\0') {
        if (!isdigit((unsigned char)*s))
            return false;
        char *end;
        errno = 0;
        unsigned long lo = strtoul(s, &end, 10), hi = lo;
        if (errno != 0 || lo > 1u << 20)
            return false;
        if (*end == '-') {
            if (!isdigit((unsigned char)end[1]))
                return false;
            hi = strtoul(end + 1, &end, 10);
            if (errno != 0 || hi < lo || hi > 1u << 20)
                return false;
        }
        if (*end == ',' && end[1] != '\0')
            end++;
        else if (*end != '\0')
            return false;
        s = end;
    }
    return true;
}

bool shs__pin_spec_valid(const char *s)
{
    return s != NULL && (strcmp(s, "auto") == 0 || strcmp(s, "none") == 0 ||
                         shs__cpulist_valid(s));
}

static shs_status_t parse_pin(const knob_t *k, const char *val, void *field)
{
    if (!shs__pin_spec_valid(val))
        return bad_value(k, val, "expected auto, none or a CPU list such as 3, 2-3 or 0,2-3");
    return parse_str(k, val, field);
}

static shs_status_t parse_addr(const knob_t *k, const char *val, void *field)
{
    char host[256], port[8];
    if (strcasecmp(val, "auto") != 0 &&
        shs__hostport_split(val, host, sizeof(host), port, sizeof(port)) != SHS_OK)
        return bad_value(k, val, "expected host:port (or [ipv6]:port) with a port in 1..65535");
    return parse_str(k, val, field);
}

static shs_status_t parse_token(const knob_t *k, const char *val, void *field)
{
    /* The token keys the bootstrap's HMAC and is never sent; printable and
     * non-empty keeps it easy to pass through launchers and shells. */
    if (*val == '\0')
        return bad_value(k, val, "empty");
    for (const char *p = val; *p != '\0'; p++)
        if (!isgraph((unsigned char)*p))
            return bad_value(k, val, "only printable characters without spaces are allowed");
    return parse_str(k, val, field);
}

static shs_status_t parse_enum(const knob_t *k, const char *val, void *field)
{
    for (size_t i = 0; k->words[i] != NULL; i++) {
        if (strcasecmp(val, k->words[i]) == 0) {
            *(int *)field = k->values[i];
            return SHS_OK;
        }
    }
    char why[128];
    size_t used = (size_t)snprintf(why, sizeof(why), "expected one of");
    for (size_t i = 0; k->words[i] != NULL && used < sizeof(why); i++)
        used += (size_t)snprintf(why + used, sizeof(why) - used, "%s%s", i ? ", " : " ",
                                 k->words[i]);
    return bad_value(k, val, why);
}

static shs_status_t parse_log(const knob_t *k, const char *val, void *field)
{
    int level = shs__log_level_parse(val);
    if (level < 0)
        return bad_value(k, val, "expected error, warn, info, debug, trace or 0-4");
    *(int *)field = level;
    return SHS_OK;
}

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

/* ---- launchers ---- */

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

static const char *env_get(const char *(*getenv_fn)(const char *), const char *name)
{
    const char *v = getenv_fn(name);
    return v != NULL && *v != '\0' ? v : NULL;
}

static shs_status_t launcher_int(const char *var, const char *val, long long lo,
                                 long long hi, int *out)
{
    knob_t k = {.name = var, .min = lo, .max = hi};
    return parse_int(&k, val, out);
}

static shs_status_t detect_launcher(shs__config_t *cfg,
                                    const char *(*getenv_fn)(const char *), bool verbose)
{
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
        const launcher_t *l = &launchers[i];
        const char *rank_s = env_get(getenv_fn, l->rank_var);
        const char *size_s = env_get(getenv_fn, l->size_var);
        const char *size_var = l->size_var;
        int rank = -1, size = -1;

        if (rank_s == NULL || (l->present_var != NULL && env_get(getenv_fn, l->present_var) == NULL))
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
        if (launcher_int(l->rank_var, rank_s, 0, MAX_RANKS - 1, &rank) != SHS_OK)
            return SHS_ERR_CONFIG;
        if (size_s != NULL && launcher_int(size_var, size_s, 1, MAX_RANKS, &size) != SHS_OK)
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

static shs_status_t resolve_bootstrap(shs__config_t *cfg,
                                      const char *(*getenv_fn)(const char *), bool verbose)
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

static void resolve_token(shs__config_t *cfg, const char *(*getenv_fn)(const char *))
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

shs_status_t shs__config_load_from(shs__config_t *cfg,
                                   const char *(*getenv_fn)(const char *name))
{
    shs__config_t c;
    const char *set_by_env[KNOB_COUNT];
    shs_status_t st, first_err = SHS_OK;

    if (cfg == NULL || getenv_fn == NULL)
        return SHS_ERR_INVALID_ARG;
    memset(&c, 0, sizeof(c));
    for (size_t i = 0; i < KNOB_COUNT; i++) {
        const knob_t *k = &knobs[i];
        const char *v = getenv_fn(k->name);
        set_by_env[i] = v;
        st = k->parse(k, k->def, (char *)&c + k->offset);
        if (st == SHS_OK && v != NULL)
            st = k->parse(k, v, (char *)&c + k->offset);
        /* Keep going: one run should name every bad knob, not the first. */
        if (st != SHS_OK && first_err == SHS_OK)
            first_err = st;
    }
    if (first_err != SHS_OK)
        return first_err;

    bool verbose = c.log_level >= SHS_LOG_LVL_INFO;
    for (size_t i = 0; verbose && i < KNOB_COUNT; i++)
        if (set_by_env[i] != NULL && strcmp(set_by_env[i], knobs[i].def) != 0)
            shs__log(SHS_LOG_LVL_INFO, __FILE__, __LINE__, "%s=%s (default %s)",
                     knobs[i].name, shown(&knobs[i], set_by_env[i]),
                     *knobs[i].def ? knobs[i].def : "\"\"");

    if ((c.rank < 0 || c.size < 0) && detect_launcher(&c, getenv_fn, verbose) != SHS_OK)
        return SHS_ERR_CONFIG;
    /* One of rank/size may stay unknown here: a parameter struct can still
     * supply it, and the context checks the final pair. */
    if (c.rank >= 0 && c.size >= 0 && c.rank >= c.size) {
        SHS_ERROR("rank %d is not below size %d (SHS_RANK/SHS_SIZE or the launcher)", c.rank,
                  c.size);
        return SHS_ERR_CONFIG;
    }
    if (c.signal_every > c.sq_depth) {
        SHS_ERROR("SHS_SIGNAL_EVERY=%d exceeds SHS_SQ_DEPTH=%d: the send queue would fill "
                  "before a completion reclaims it", c.signal_every, c.sq_depth);
        return SHS_ERR_CONFIG;
    }
    st = resolve_bootstrap(&c, getenv_fn, verbose);
    if (st != SHS_OK)
        return st;
    resolve_token(&c, getenv_fn);
    *cfg = c;
    return SHS_OK;
}

static const char *real_getenv(const char *name)
{
    return getenv(name);
}

extern char **environ;

/* Edit distance of two short names, capped at 64 characters each. */
static size_t edit_distance(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b), row[65];
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* A misspelt knob is silently ignored otherwise. Only near-misses warn, and
 * never the prefixes that tools and the guest harness keep for themselves
 * (SHS_VM_*, SHS_TEST_*), however close a future knob's name comes to them. */
static void warn_misspelt_knobs(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "SHS_", 4) != 0 || strncmp(*e, "SHS_VM_", 7) == 0 ||
            strncmp(*e, "SHS_TEST_", 9) == 0)
            continue;
        size_t len = strcspn(*e, "=");
        if (shs__config_knob_index_n(*e, len) >= 0)
            continue;
        for (size_t i = 0; i < KNOB_COUNT; i++) {
            if (edit_distance(*e, len, knobs[i].name) <= 2) {
                SHS_WARN("%.*s is not a knob (ignored); did you mean %s?", (int)len, *e,
                         knobs[i].name);
                break;
            }
        }
    }
}

shs_status_t shs__config_load(shs__config_t *cfg)
{
    shs_status_t st = shs__config_load_from(cfg, real_getenv);
    if (st != SHS_OK)
        return st;
    shs__log_set_level(cfg->log_level);
    if (cfg->rank >= 0)
        shs__log_set_rank(cfg->rank);
    warn_misspelt_knobs();
    return SHS_OK;
}

size_t shs__config_knob_count(void)
{
    return KNOB_COUNT;
}

const char *shs__config_knob_name(size_t i)
{
    return i < KNOB_COUNT ? knobs[i].name : NULL;
}

const char *shs__config_knob_default(size_t i)
{
    return i < KNOB_COUNT ? knobs[i].def : NULL;
}

int shs__config_knob_index_n(const char *name, size_t len)
{
    for (size_t i = 0; i < KNOB_COUNT; i++)
        if (strlen(knobs[i].name) == len && strncmp(knobs[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

void shs__config_print_table(FILE *f)
{
    fprintf(f, "| knob | default | meaning |\n| --- | --- | --- |\n");
    for (size_t i = 0; i < KNOB_COUNT; i++)
        fprintf(f, "| `%s` | `%s` | %s |\n", knobs[i].name,
                *knobs[i].def ? knobs[i].def : "\"\"", knobs[i].help);
}

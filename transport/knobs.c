/*
 * The transport's knobs: device and port, how QPs connect and retry, queue
 * depths, work request sizes, and the bounds of every wait for completions.
 * Registered with the others in algorithms/knobs.c; the context resolves
 * them once (shs_ctx_create) and its parameter struct overrides some
 * (transport/params.c).
 */
#include "runtime/knob.h"
#include "runtime/log.h"
#include "transport/services.h"

static const char *const connect_words[] = {"auto", "rdmacm", "oob", NULL};
static const int connect_values[] = {SHS_CONNECT_AUTO, SHS_CONNECT_RDMACM, SHS_CONNECT_OOB};

static const shs__knob_t transport_knobs[] = {
    /* empty: most nodes have one RDMA device worth using. */
    SHS_KNOB_STR("SHS_DEVICE", device, "", shs__knob_parse_str,
                 "rdma device name (e.g. mlx5_0, rxe0); empty = first device with an ACTIVE port"),
    SHS_KNOB_INT("SHS_IB_PORT", ib_port, "0", 0, 255, "device port; 0 = first ACTIVE port"),
    /* auto: the right GID (RoCEv2, IPv4-mapped) moves with the address
     * configuration; a fixed index is right on one host and wrong on the next. */
    SHS_KNOB_INT_AUTO("SHS_GID_INDEX", gid_index, "auto", 0, 65535,
                      "GID table index; auto = RoCEv2 with an IPv4-mapped address preferred"),
    /* auto: rdmacm where it works from the GID alone, RoCE (what RoCE users
     * expect; it resolves GID and route itself); oob on InfiniBand, whose
     * GIDs carry no IP address for rdma_cm to bind (IPoIB addresses would). */
    SHS_KNOB_ENUM("SHS_CONNECT", connect_mode, "auto", connect_words, connect_values,
                  "how QPs are connected: rdmacm, oob (GID/QPN/PSN over the bootstrap), or "
                  "auto = rdmacm on RoCE, oob on InfiniBand"),
    /* 1: one RC QP per peer saturates a link for large one-sided transfers. */
    SHS_KNOB_INT("SHS_QPS_PER_PEER", qps_per_peer, "1", 1, 16, "RC queue pairs per peer"),
    /* 15 s: address and route resolution take milliseconds, but ARP or an SM
     * path query on a busy fabric can take seconds. */
    SHS_KNOB_INT("SHS_CONNECT_TIMEOUT_MS", connect_timeout_ms, "15000", 1, SHS_KNOB_MS_MAX,
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
    SHS_KNOB_INT_AUTO("SHS_QP_TIMEOUT", qp_timeout, "auto", 1, 31,
                      "local ack timeout exponent: 4.096 us * 2^n; auto = 14 (67 ms), "
                      "18 (1.07 s) on Soft-RoCE (rxe)"),
    /* 7: the largest value of the 3-bit field; transient loss is retried
     * fully before the peer is declared dead. */
    SHS_KNOB_INT("SHS_QP_RETRY", qp_retry_cnt, "7", 0, 7, "transport retry count (0-7)"),
    /* 6: 7 means "retry forever" in IB, which would hang on a peer that stops
     * posting receives; it is refused. */
    SHS_KNOB_INT("SHS_QP_RNR_RETRY", qp_rnr_retry, "6", 0, 6,
                 "receiver-not-ready retry count (0-6; 7 = infinite is refused)"),
    /* 256: enough work requests in flight to cover a 64 MiB transfer split at
     * the usual 8 MiB limit many times over, within every device's max_qp_wr. */
    SHS_KNOB_INT("SHS_SQ_DEPTH", sq_depth, "256", 1, 1 << 16, "send queue depth per QP"),
    /* 256: write-with-immediate notifications outstanding per peer. */
    SHS_KNOB_INT("SHS_RQ_DEPTH", rq_depth, "256", 1, 1 << 16, "receive queue depth per QP"),
    /* 16: the send queue is reclaimed 16 times per lap of a 256-deep queue,
     * and 15 of 16 completions are never generated. */
    SHS_KNOB_INT("SHS_SIGNAL_EVERY", signal_every, "16", 1, 1 << 16,
                 "signal one send work request in n (at most SHS_SQ_DEPTH)"),
    /* 1 MiB: a wait's deadline counts time without a completion, and a work
     * request completes only whole: one of 8 MiB (rxe's max_msg_sz) takes
     * longer than SHS_OP_TIMEOUT_MS on a slow link (two loaded emulated
     * guests: under 1 MB/s), so such a transfer looked like a dead peer.
     * 1 MiB per request costs nothing next to the transfer on real links. */
    SHS_KNOB_SIZE("SHS_MAX_CHUNK", max_chunk, "1m", 0, 1ll << 31,
                  "bytes per work request (k/m/g suffixes), capped by the device's "
                  "max_msg_sz; 0 = max_msg_sz"),
    /* 1 MiB: a READ whose response loses a packet is retried from that packet
     * to its end (go-back-N), and its completion is the first sign of progress
     * a flush sees; 1 MiB keeps both small on a slow or lossy link while the
     * per-request cost stays negligible next to the transfer on real links. */
    SHS_KNOB_SIZE("SHS_READ_CHUNK", read_chunk, "1m", 0, 1ll << 31,
                  "bytes per READ work request (k/m/g); 0 = as SHS_MAX_CHUNK"),
    /* 4 MiB: READ responses are sent by the peer as fast as it can, without
     * flow control; capping what is requested at once bounds the queue that
     * builds on a slow link (and what one loss costs) while covering the
     * bandwidth-delay product of any RDMA link (100 Gb/s x 10 us = 125 KB). */
    SHS_KNOB_SIZE("SHS_READ_INFLIGHT", read_inflight, "4m", 0, 1ll << 40,
                  "READ bytes outstanding per QP (k/m/g); 0 = no cap beyond the device's "
                  "max_qp_rd_atom"),
    /* 0: two-sided messages (shs_send/shs_recv) cost SHS_RQ_DEPTH receive
     * buffers of this size per queue pair, registered at start-up; the
     * runtime's own algorithms are one-sided and need none. */
    SHS_KNOB_SIZE("SHS_MSG_SIZE", msg_size, "0", 0, 1ll << 30,
                  "largest shs_send message = bytes of each receive buffer (k/m/g); "
                  "0 = no two-sided messages"),
    /* 10 s: a 64 MiB transfer takes well under a second on any RDMA link, and
     * QP retries report a dead peer in ~0.5 s; 10 s tells slow from dead. */
    SHS_KNOB_INT("SHS_OP_TIMEOUT_MS", op_timeout_ms, "10000", 1, SHS_KNOB_MS_MAX,
                 "bound on any wait for completions (ms)"),
    /* auto: 2000 (SHS__POLL_SPIN_OWN) when this host's ranks on the device
     * have a CPU each, else 0 (context.c, resolve_spin). 2000 polls are
     * ~0.2 ms on hardware: a completion microseconds away is caught by
     * polling. With more ranks than CPUs a spinning rank holds the CPU that
     * another rank (or the kernel work of a software device, which runs in
     * the posting rank's system call) needs: 4 ranks in a 2-CPU Soft-RoCE
     * guest, 1 MiB allreduce, p50 82/79 ms spinning 2000 against 75/76 ms
     * napping at once; 16 MiB 1080 against 1052 ms (2026-12-06). A
     * latency-bound job that owns its cores wants more; ranks pinned to one
     * core each see one CPU and nap, so such a job sets a count. */
    SHS_KNOB_INT_AUTO("SHS_POLL_SPIN", poll_spin, "auto", 0, 1 << 30,
                      "empty polls of a wait for completions before it starts sleeping (1 us "
                      "doubling to 50 us): auto (2000 when this host's ranks on the device have "
                      "a CPU each, else 0) or a count"),
};

static shs_status_t transport_finish(shs__config_t *cfg, shs__getenv_fn getenv_fn, bool verbose)
{
    if (cfg->signal_every > cfg->sq_depth) {
        SHS_ERROR("SHS_SIGNAL_EVERY=%d exceeds SHS_SQ_DEPTH=%d: the send queue would fill "
                  "before a completion reclaims it", cfg->signal_every, cfg->sq_depth);
        return SHS_ERR_CONFIG;
    }
    return SHS_OK;
}

const shs__knob_table_t shs__transport_knob_table =
    SHS_KNOB_TABLE("transport", transport_knobs, transport_finish);

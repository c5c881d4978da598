/*
 * The pull data path: each member reads the others' round-r snapshots with
 * RDMA READ, piece by piece, and takes their mean (shs__ma_mean); BMUF
 * turns the mean into its block update.
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include <shadowsync/rma.h>

#include "algorithms/reduce.h"
#include "algorithms/shadow/engine.h"
#include "runtime/clock.h"

/*
 * Waiting for a pulled piece without burning the CPU. The device (a software
 * one under emulation, or a NIC) moves the bytes; a shadow thread that spins
 * in the flush meanwhile takes CPU time from the Hogwild workers (and, on
 * Soft-RoCE, from the kernel threads that move the data). So the engine
 * sleeps for SHS_SHADOW_NAP percent of the time the transfer is expected to
 * take (a moving average of the observed time per byte), then flushes, which
 * polls only for the rest.
 */
static void nap(const shs_shadow_t *sh, size_t bytes)
{
    if (sh->cfg.nap_pct <= 0 || sh->ns_per_byte <= 0 || bytes == 0)
        return;
    double ns = sh->ns_per_byte * (double)bytes * sh->cfg.nap_pct / 100.0;
    if (ns < 20e3) /* below the sleep granularity: not worth a system call */
        return;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1e9), .tv_nsec = (long)fmod(ns, 1e9)};
    nanosleep(&ts, NULL);
}

/* A piece counts at most this many times the estimate: a piece that took
 * seconds (the process was stopped, or preempted, between posting and
 * flushing) would otherwise raise it so far that the naps, which the next
 * pieces' times include, hold it up for dozens of rounds: a straggler that
 * continued took a second a round for ten seconds. */
#define RATE_OUTLIER_X 2.0

static void learn_rate(shs_shadow_t *sh, size_t bytes, uint64_t ns)
{
    if (bytes == 0)
        return;
    double x = (double)ns / (double)bytes;
    if (sh->ns_per_byte > 0 && x > RATE_OUTLIER_X * sh->ns_per_byte)
        x = RATE_OUTLIER_X * sh->ns_per_byte;
    sh->ns_per_byte = sh->ns_per_byte <= 0 ? x : 0.75 * sh->ns_per_byte + 0.25 * x;
}

/* Offset in scratch of member k's receive chunk (the own rank has none). */
static size_t recv_loc(const shs_shadow_t *sh, const shs_group_t *grp, int k)
{
    size_t j = (size_t)(k < grp->index ? k : k - 1);
    return sh->recv_off + j * sh->cfg.chunk * sizeof(float);
}

/* acc[c0, c0 + len) = the mean of the m members in state PEER_OK: their
 * reads are posted together, then flushed and summed in ascending rank
 * order (bf16 snapshots decoded first: the mean is taken in float32). A
 * peer whose read fails is marked PEER_SKIP. */
static shs_status_t pull_piece(shs_shadow_t *sh, const shs_group_t *grp, shs_region_t *src_reg,
                               size_t src_off, const float *own, size_t c0, size_t len, int m)
{
    const float *xs[SHS_GROUP_MAX];
    size_t wb = shs__wire_bytes(sh);
    int j = 0;
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (p == sh->rank || sh->state[p] != SHS__PEER_OK)
            continue;
        shs_status_t st = shs_read(sh->io, p, sh->scratch, recv_loc(sh, grp, k), src_reg,
                                   src_off + c0 * wb, len * wb, SHS_OP_SIGNAL);
        if (st != SHS_OK) {
            sh->state[p] = SHS__PEER_SKIP;
            return st;
        }
    }
    uint64_t t_post = shs__now_ns();
    size_t bytes = (size_t)(m - 1) * len * wb;
    nap(sh, bytes);
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (p == sh->rank) {
            xs[j++] = own + c0;
        } else if (sh->state[p] == SHS__PEER_OK) {
            shs_status_t st = shs__flush_peer(sh, p);
            if (st != SHS_OK)
                return st;
            shs__stat_add(&sh->st.bytes_read, len * wb);
            const void *got = sh->scratch_mem + recv_loc(sh, grp, k);
            if (shs__bf16_wire(sh)) {
                float *d = sh->dec + (size_t)(j - (k > grp->index)) * sh->cfg.chunk;
                shs__bf16_decode(d, got, len);
                got = d;
            }
            xs[j++] = got;
        }
    }
    shs__ma_mean(sh->acc + c0, xs, j, len);
    learn_rate(sh, bytes, shs__now_ns() - t_post);
    return SHS_OK;
}

/*
 * acc = mean of the snapshots of the group's members whose state is PEER_OK,
 * piece by piece. `src_reg`/`src_off` name what is read on the peers (the
 * round's slot); `own` is this rank's snapshot. A peer
 * whose read fails is marked PEER_SKIP and the caller starts over without
 * it (earlier pieces already include it).
 */
static shs_status_t pull_mean(shs_shadow_t *sh, const shs_group_t *grp, shs_region_t *src_reg,
                              size_t src_off, const float *own)
{
    int m = 0;
    for (int k = 0; k < grp->size; k++)
        m += sh->state[grp->ranks[k]] == SHS__PEER_OK;
    for (size_t c0 = 0; c0 < sh->n; c0 += sh->cfg.chunk) {
        size_t len = sh->n - c0 < sh->cfg.chunk ? sh->n - c0 : sh->cfg.chunk;
        shs_status_t st = pull_piece(sh, grp, src_reg, src_off, own, c0, len, m);
        if (st != SHS_OK)
            return st;
    }
    return SHS_OK;
}

void shs__apply_result(shs_shadow_t *sh, const float *snap)
{
    if (sh->cfg.algo == SHS_SHADOW_BMUF)
        shs__bmuf_step(sh->wg, sh->D, sh->acc, sh->acc, sh->n, &sh->bmuf);
    shs__delta_apply(sh->w, sh->acc, snap, sh->n);
}

/* Members still PEER_OK (but this rank) are read again. */
static void reread_ok(shs_shadow_t *sh, const shs_group_t *grp)
{
    for (int k = 0; k < grp->size; k++)
        if (grp->ranks[k] != sh->rank && sh->state[grp->ranks[k]] == SHS__PEER_OK)
            sh->state[grp->ranks[k]] = SHS__PEER_PENDING;
}

shs_status_t shs__round_pull(shs_shadow_t *sh, uint64_t r, const shs_group_t *grp)
{
    int s = (int)(r & 1);
    bool sit, in;
    shs_status_t err = shs__guard_slot(sh, r, &sit);
    if (err == SHS_ERR_CANCELED)
        return err;
    if (sit) {
        /* a reader of the slot's round has not finished it (a straggler
         * stopped while reading): publish nothing this round */
        shs__sit_out(sh, r);
        return err;
    }
    shs__publish(sh, r);
    sh->round_t0 = shs__now_ns();
    shs__reset_states(sh, grp);
    if (grp->size == 1) {
        shs__round_done(sh, grp, r, false);
        return err;
    }

    /* who is in: agreed through the verdict words (admit.c). A stop
     * request does not cancel a published round: the members may read
     * this rank's round-r snapshot and move towards it, so this rank must
     * move too (a rank that stopped here without applying broke the sum;
     * its peers are alive or marked stopped, so the round ends within a
     * round's time or the wait bound) */
    err = shs__first_error(err, shs__decide_members(sh, grp, r, &in));
    if (!in) {
        shs__round_done(sh, grp, r, false);
        return err;
    }
    /* each pass waits for the stamps, reads, and checks the stamps again; a
     * pass that saw a torn or failed read starts over with the members that
     * are still good, within one wait bound for the whole round */
    shs__deadline_t dl = shs__deadline_in_ms(sh->cfg.wait_ms);
    for (;;) {
        reread_ok(sh, grp);
        err = shs__first_error(err, shs__wait_slot(sh, grp, r));
        shs_status_t st =
            pull_mean(sh, grp, sh->pub, shs__slot_off(sh, s), shs__own_snapshot(sh, s));
        if (st == SHS_OK && shs__verify_stamps(sh, grp, r, &err))
            break;
        err = shs__first_error(err, st);
        if (shs__deadline_passed(dl)) {
            shs__round_done(sh, grp, r, true); /* its members may still read the slot */
            return shs__first_error(err, SHS_ERR_TIMEOUT); /* the round changes nothing */
        }
    }
    shs__shadow_note_read(sh, grp);
    /* against the snapshot the peers averaged (bf16: its decoding), so
     * that the ranks' moves sum to zero; a bf16 rank keeps its own rounding
     * residual (w - snapshot) in its model */
    shs__apply_result(sh, shs__own_snapshot(sh, s));
    shs__round_done(sh, grp, r, true);
    return err;
}

const shs__path_ops_t shs__path_pull = {
    .name = "pull",
    .round = shs__round_pull,
    .finish = shs__finish_mean,
};

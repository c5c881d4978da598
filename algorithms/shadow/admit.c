/*
 * Stragglers on the pull path: who is in a round, agreed by every member
 * (shadow.h, "Stragglers").
 *
 * Each rank owns SHS__ADMIT_WORDS verdict words (admit_reg). Its round-r
 * verdict lives in word r mod SHS__ADMIT_WORDS as ((r + 1) << 1) | in, and
 * is decided once, by the first member of the round's group whose
 * compare-and-swap on it lands: "in" by a member that saw its round-r
 * snapshot published, "out" by a member whose straggler bound for it ran
 * out first. Every other member reads the word and follows. The owner only
 * loads its words. So the round's members agree on one set F_r; each member
 * of F_r (with another) averages over exactly F_r and applies mean - own
 * snapshot, which sum to zero over F_r; a member out of F_r applies nothing.
 *
 * Views: members form round r's group from their membership views (view.h),
 * which differ for a few rounds after a failure or a rejoin, and then so do
 * their groups. Each member publishes, with its round-r snapshot, the
 * digest of the view its group came from; a verdict word carries the
 * digest of the member that decided it; a member votes a peer in only when
 * the peer's published digest is its own, and takes a word as "in" only
 * when the word's digest is its own. So every member of F_r as one member
 * sees it has that member's digest, hence the same living ranks and the
 * same group, and sees the same F_r: the rule above holds within each
 * digest, and members of different views never average together. (The
 * digest is 27 bits of a hash: two different views that coexist collide
 * with odds of 2^-27.) A member alone in its view sits the round out as if
 * left out, until the gossip has made the views agree.
 *
 * Withdrawal: a member whose own word no one decided within the straggler
 * bound (the members that took it in stopped, or died, before deciding
 * it) withdraws: it stores out = r + 1 in its header (one mark per slot:
 * it lasts as long as the slot holds round r, so a withdrawal from r + 1
 * cannot hide it from a member still late for r), then loads its word,
 * and concludes "in" if the word was decided in by then, else "out"; it
 * writes the conclusion (out_v). A member that decides its word afterwards
 * reads its header after doing so (the slot wait after the verdicts), before
 * it reads the slot: the store came before the load, which came before the
 * late compare-and-swap, so that read sees out = r + 1 and follows the
 * conclusion. So no one reads the slot of a rank that concluded out.
 * Not covered: a member stopped between its mark and its conclusion (three
 * instructions) for longer than SHS_SHADOW_WAIT_MS: a peer waiting for the
 * conclusion gives up and leaves it out, and it may then conclude in. The
 * cure is to let the owner decide its own word with a compare-and-swap
 * through a loopback queue pair (NIC atomics are atomic among themselves;
 * a CPU store against a NIC atomic is not), which the transport lacks.
 *
 * Slots: a member overwrites slot r mod 2 only after every other member of
 * the F of the round it holds has finished that round (its header's done);
 * when one has not within the straggler bound (a straggler stopped while
 * reading), the member sits round r out: it publishes nothing, says so in
 * its header (out), and its peers leave it out at once. A member left out
 * catches up: it jumps to the highest round any living peer has published
 * (the round the group is in, where it can meet its partners; jumping one
 * past it, ranks staggered over three rounds in DS-Sync pairs each found
 * their partner ahead, jumped past it, and leapfrogged for good). Only a
 * member so far behind that a peer may have left it out of that round
 * without a word (the far-behind rule below) jumps one past it, where no
 * peer can have decided anything yet.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/shadow/engine.h"
#include "runtime/clock.h"
#include "runtime/log.h"

#define VERDICT_IN 1u
/* A verdict word: (r + 1) << VERDICT_ROUND_SHIFT | digest << 1 | in, where
 * digest is the view digest (view.h) of the member that decided it: only
 * members whose round-r group came from the same view take it as "in" (the
 * rule at the top, "Views"). 2^36 rounds. */
#define VERDICT_ROUND_SHIFT (SHS__VIEW_DIGEST_BITS + 1)
#define VERDICT_DIG_MASK ((1ull << SHS__VIEW_DIGEST_BITS) - 1u)
/* The auto bound: this many times the median full round, at least the floor. */
#define STRAGGLER_X 4
#define STRAGGLER_FLOOR_MS 200

static uint64_t verdict_word(uint64_t r, uint32_t dig, bool in)
{
    return ((r + 1) << VERDICT_ROUND_SHIFT) | ((uint64_t)(dig & VERDICT_DIG_MASK) << 1) |
           (in ? VERDICT_IN : 0u);
}

/* The round a verdict word decides (UINT64_MAX: none yet). */
static uint64_t verdict_round(uint64_t w)
{
    return w == 0 ? UINT64_MAX : (w >> VERDICT_ROUND_SHIFT) - 1;
}

/* Whether verdict word w takes its owner in for members of view digest dig. */
static bool verdict_in(uint64_t w, uint32_t dig)
{
    return (w & VERDICT_IN) != 0 && ((w >> 1) & VERDICT_DIG_MASK) == (dig & VERDICT_DIG_MASK);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* How long a round waits for a member that was in the last round (ms). The
 * foreground rounds keep SHS_SHADOW_WAIT_MS: their ranks reach a sync point
 * up to a training interval apart. */
static int straggler_ms(const shs_shadow_t *sh)
{
    if (!sh->ran_background)
        return sh->cfg.wait_ms;
    if (sh->cfg.straggler_ms > 0)
        return sh->cfg.straggler_ms;
    if (sh->full_med_ns == 0)
        return sh->cfg.wait_ms;
    uint64_t ms = sh->full_med_ns * STRAGGLER_X / 1000000u;
    if (ms < STRAGGLER_FLOOR_MS)
        ms = STRAGGLER_FLOOR_MS;
    return ms > (uint64_t)sh->cfg.wait_ms ? sh->cfg.wait_ms : (int)ms;
}

/* Round r took dt_ns and left no one out: the history, and its median
 * (0 until SHS__ROUND_HIST / 4 rounds are in it). */
static void note_full_round(shs_shadow_t *sh, uint64_t dt_ns)
{
    sh->full_ns[sh->full_n++ % SHS__ROUND_HIST] = dt_ns;
    unsigned n = sh->full_n < SHS__ROUND_HIST ? sh->full_n : SHS__ROUND_HIST;
    if (n < SHS__ROUND_HIST / 4)
        return;
    uint64_t v[SHS__ROUND_HIST];
    memcpy(v, sh->full_ns, n * sizeof(uint64_t));
    qsort(v, n, sizeof(uint64_t), cmp_u64);
    sh->full_med_ns = v[n / 2];
}

static void set_done(shs_shadow_t *sh, uint64_t plus1)
{
    __atomic_store_n(&sh->hdr->done, plus1, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------- the guard */

/* The reader has finished the round the slot holds (hw->r). */
static uint8_t classify_finished(shs_shadow_t *sh, shs__hdr_wait_t *hw, int p,
                                 const shs__pub_hdr_t *h)
{
    shs__note_published(sh, p, h);
    if (sh->done_seen[p] < hw->r + 1)
        return SHS__PEER_PENDING;
    sh->late[p] = false;
    return SHS__PEER_OK;
}

shs_status_t shs__guard_slot(shs_shadow_t *sh, uint64_t r, bool *sit)
{
    int s = (int)(r & 1);
    *sit = false;
    if (!sh->slot_held[s])
        return SHS_OK; /* no one reads what the slot holds */
    uint64_t q = sh->slot_round[s];
    const shs_group_t *old = &sh->slot_grp[s];
    bool any = false, late = false;
    for (int k = 0; k < old->size; k++) {
        int p = old->ranks[k];
        bool reads = p != sh->rank && sh->slot_in[s][k] && !shs__view_is_dead(&sh->view, p) &&
                     sh->done_seen[p] < q + 1;
        sh->state[p] = reads ? SHS__PEER_PENDING : SHS__PEER_OK;
        any |= reads;
        late |= reads && sh->late[p];
    }
    if (!any) {
        sh->slot_held[s] = false;
        return SHS_OK;
    }
    uint64_t tg = shs__now_ns();
    /* a reader known to be late gets one look; the others the bound */
    shs__hdr_wait_t hw = {.grp = old, .r = q, .which = 0, .what = "finish its round",
                          .classify = classify_finished,
                          .bound_ms = late ? 1 : straggler_ms(sh)};
    shs_status_t st = shs__wait_headers(sh, &hw, true);
    SHS_DEBUG("shadow round %llu: slot %d holds round %llu, read by a member that had not "
              "finished it: waited %.1f ms (bound %d ms)", (unsigned long long)r, s,
              (unsigned long long)q, (double)(shs__now_ns() - tg) / 1e6, hw.bound_ms);
    if (st == SHS_ERR_CANCELED)
        return st;
    for (int k = 0; k < old->size; k++) {
        int p = old->ranks[k];
        if (p != sh->rank && sh->state[p] == SHS__PEER_PENDING) {
            sh->late[p] = true;
            *sit = true;
        }
    }
    if (!*sit)
        sh->slot_held[s] = false;
    return hw.err;
}

void shs__note_finished(shs_shadow_t *sh, uint64_t r)
{
    if (__atomic_load_n(&sh->hdr->done, __ATOMIC_RELAXED) < r + 1)
        set_done(sh, r + 1);
}

void shs__sit_out(shs_shadow_t *sh, uint64_t r)
{
    SHS_DEBUG("shadow: sitting round %llu out (at %.3f s)", (unsigned long long)r,
              (double)shs__now_ns() / 1e9);
    /* the conclusion first: nothing was published, no one can take it in */
    __atomic_store_n(&sh->hdr->out_v[r & 1], verdict_word(r, sh->grp_dig, false),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&sh->hdr->out[r & 1], r + 1, __ATOMIC_RELEASE);
    shs__stat_add(&sh->st.left_out, 1);
    set_done(sh, r + 1);
}

/* Withdraw from round r (the rule at the top); returns whether this rank
 * is in all the same. */
static bool withdraw(shs_shadow_t *sh, uint64_t r)
{
    __atomic_store_n(&sh->hdr->out[r & 1], r + 1, __ATOMIC_SEQ_CST);
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t w = __atomic_load_n(&sh->admit[r % SHS__ADMIT_WORDS], __ATOMIC_SEQ_CST);
    if (verdict_round(w) != r || !verdict_in(w, sh->grp_dig))
        w = verdict_word(r, sh->grp_dig, false);
    __atomic_store_n(&sh->hdr->out_v[r & 1], w, __ATOMIC_RELEASE);
    return verdict_in(w, sh->grp_dig);
}

int shs__withdrew(const shs__pub_hdr_t *h, uint64_t r)
{
    if (h->out[r & 1] != r + 1)
        return 0;
    if (verdict_round(h->out_v[r & 1]) != r)
        return -1;
    return (h->out_v[r & 1] & VERDICT_IN) ? 0 : 1;
}

/* ----------------------------------------------------------- the verdicts */

/* What this rank wants member p's verdict to be, from p's header (0: not
 * yet; 1 + in). */
static int want_of(shs_shadow_t *sh, uint64_t r, int p, const shs__pub_hdr_t *h)
{
    int s = (int)(r & 1);
    int wd = shs__withdrew(h, r);
    if (wd != 0)
        return wd > 0 ? 1 : 0; /* it withdrew (out), or is about to say whether */
    if (shs__slot_written(h, s) && h->round[s] == r)
        return h->memb[s] == sh->grp_dig ? 2 : 1; /* another view: not in this one's round */
    if (h->stopped != 0 || h->out[r & 1] == r + 1 || shs__published_plus1(h) > r + 1)
        return 1; /* stopped, sitting out, or caught up past r: it never publishes r */
    /* a member at most a round behind (it has finished round r - 2) gets the
     * bound; one stuck further back (stopped inside an older round) none:
     * paying the bound every round would slow the living to its pace */
    bool stuck = h->done + 1 < r;
    uint64_t bound_ns = stuck ? 0 : (uint64_t)straggler_ms(sh) * 1000000u;
    return shs__now_ns() >= sh->round_t0 + bound_ns ? 1 : 0;
}

/* p's verdict is known. Out of a round it did not sit out or stop before,
 * it is a straggler, and counted. */
static uint8_t decided(shs_shadow_t *sh, int p, bool in, uint64_t r, const shs__pub_hdr_t *h)
{
    int s = (int)(r & 1);
    bool other_view = shs__slot_written(h, s) && h->round[s] == r && h->memb[s] != sh->grp_dig;
    bool straggler = !in && h->stopped == 0 && h->out[r & 1] != r + 1 && !other_view;
    if (straggler) {
        shs__stat_add(&sh->st.straggler_skips, 1);
        shs__stat_add(&sh->st.peer_skips[p], 1);
    } else if (!in) {
        shs__stat_add(&sh->st.skipped, 1);
    }
    if (in)
        sh->late[p] = false;
    return in ? SHS__PEER_OK : SHS__PEER_SKIP;
}

static uint8_t classify_verdict(shs_shadow_t *sh, shs__hdr_wait_t *hw, int p,
                                const shs__pub_hdr_t *h)
{
    uint64_t r = hw->r;
    size_t loc = sh->word_off + (size_t)hw->k * 8;
    uint64_t w;
    shs__note_published(sh, p, h);
    memcpy(&w, sh->scratch_mem + loc, 8);
    if (h->wire != sh->hdr->wire && h->wire != 0) {
        /* its slots hold another format: reading them would average
         * garbage; it is out (want_of), and this rank says why */
        if (!sh->warned[p])
            SHS_ERROR("shadow round %llu: peer %d publishes %s snapshots, this rank %s: "
                      "every rank must use the same SHS_SHADOW_WIRE; going on without it",
                      (unsigned long long)r, p,
                      h->wire == 1u + SHS_WIRE_BF16 ? "bf16" : "float32",
                      shs__bf16_wire(sh) ? "bf16" : "float32");
        sh->warned[p] = true;
        hw->err = shs__first_error(hw->err, SHS_ERR_SIZE_MISMATCH);
        /* no vote on its verdict: the ranks of its format decide among
         * themselves, and each of them leaves this rank out as it is left */
        shs__stat_add(&sh->st.skipped, 1);
        return SHS__PEER_SKIP;
    }
    for (int tries = 0; tries < 2; tries++) {
        uint64_t vr = verdict_round(w);
        if (vr == r)
            return decided(sh, p, verdict_in(w, sh->grp_dig), r, h);
        if (vr != UINT64_MAX && vr > r) {
            /* this rank fell SHS__ADMIT_WORDS rounds behind inside round r */
            SHS_ERROR("shadow round %llu: peer %d's verdict was overwritten by round %llu: "
                      "this rank fell too far behind; leaving it out",
                      (unsigned long long)r, p, (unsigned long long)vr);
            hw->err = shs__first_error(hw->err, SHS_ERR_PROTOCOL);
            return SHS__PEER_SKIP;
        }
        int want = want_of(sh, r, p, h);
        if (want == 0)
            return SHS__PEER_PENDING;
        /* p more than the words' span behind (it has not finished round
         * r - SHS__ADMIT_WORDS): its word may still hold a verdict it has
         * to read, so it is not swapped; p is out, and when it catches up
         * it jumps past every round a peer has published, r among them */
        if (want == 1 && h->done + SHS__ADMIT_WORDS <= r)
            return decided(sh, p, false, r, h);
        shs_status_t st = shs_cas(sh->io, p, sh->scratch, loc, sh->admit_reg,
                                  (size_t)(r % SHS__ADMIT_WORDS) * 8, w,
                                  verdict_word(r, sh->grp_dig, want == 2), SHS_OP_SIGNAL);
        if (st == SHS_OK)
            st = shs__flush_peer(sh, p);
        if (st != SHS_OK) {
            hw->err = shs__first_error(hw->err, st);
            return SHS__PEER_SKIP;
        }
        uint64_t was;
        memcpy(&was, sh->scratch_mem + loc, 8);
        if (was == w)
            return decided(sh, p, want == 2, r, h);
        w = was; /* another member decided first (or an older round's word): look again */
    }
    return SHS__PEER_PENDING;
}

/* What the wait for this rank's own verdict looks at. */
typedef struct {
    uint64_t r;
    const shs_group_t *grp;
    bool orphaned; /* every member that could decide it has failed */
} own_wait_t;

/* This rank's own verdict for ow->r is in its word, or no one is left to
 * decide it: the members this rank took in decide it (the others are out
 * and decide nothing), and when every one of them has failed (killed after
 * it published) the word stays empty. */
static bool own_decided(shs_shadow_t *sh, void *arg)
{
    own_wait_t *ow = arg;
    uint64_t w = __atomic_load_n(&sh->admit[ow->r % SHS__ADMIT_WORDS], __ATOMIC_ACQUIRE);
    if (verdict_round(w) == ow->r)
        return true;
    for (int k = 0; k < ow->grp->size; k++) {
        int p = ow->grp->ranks[k];
        if (p != sh->rank && sh->state[p] == SHS__PEER_OK &&
            shs_ctx_peer_status(sh->io, p, NULL) == SHS_OK)
            return false;
    }
    ow->orphaned = true;
    return true;
}

shs_status_t shs__decide_members(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r, bool *in)
{
    shs__hdr_wait_t hw = {.grp = grp, .r = r, .which = 0, .admit = true,
                          .what = "publish its snapshot", .classify = classify_verdict};
    shs_status_t err = shs__wait_headers(sh, &hw, false);
    *in = false;
    bool other = false;
    for (int k = 0; k < grp->size; k++)
        other |= grp->ranks[k] != sh->rank && sh->state[grp->ranks[k]] == SHS__PEER_OK;
    if (!other)
        return err; /* every other member is out: the round changes nothing */
    /* another member is in: whether this rank is, its word says (the
     * members decide it as they decide each other), within the straggler
     * bound of the round; past it, or when the members that would decide
     * it failed, this rank withdraws */
    uint64_t spent_ms = (shs__now_ns() - sh->round_t0) / 1000000u;
    int bound = straggler_ms(sh);
    int left = spent_ms >= (uint64_t)bound ? 1 : bound - (int)spent_ms;
    own_wait_t ow = {.r = r, .grp = grp, .orphaned = false};
    shs_status_t st = shs__shadow_wait_ms(sh, own_decided, &ow, false, left);
    if (st == SHS_OK && !ow.orphaned) {
        uint64_t w = __atomic_load_n(&sh->admit[r % SHS__ADMIT_WORDS], __ATOMIC_ACQUIRE);
        *in = verdict_in(w, sh->grp_dig);
    } else {
        *in = withdraw(sh, r);
        SHS_DEBUG("shadow round %llu: no member decided whether this rank is in within "
                  "%d ms%s; withdrew: %s", (unsigned long long)r, bound,
                  ow.orphaned ? " (they failed)" : "", *in ? "in all the same" : "out");
    }
    if (!*in)
        shs__stat_add(&sh->st.left_out, 1);
    return err;
}

/* --------------------------------------------------------- end of a round */

/* The highest round any living peer has published (this rank read their
 * headers just now), or the one after it when this rank is so far behind
 * that the far-behind rule may have left it out of that one; at least
 * r + 1. */
static uint64_t catch_up_round(shs_shadow_t *sh, uint64_t r)
{
    uint64_t top = 0; /* highest published round, plus one */
    for (int p = 0; p < sh->size; p++) {
        if (p == sh->rank || shs__view_is_dead(&sh->view, p))
            continue;
        if (shs__read_header(sh, p, 0) != SHS_OK)
            continue;
        const shs__pub_hdr_t *h = (const shs__pub_hdr_t *)sh->scratch_mem;
        shs__note_published(sh, p, h);
        if (shs__published_plus1(h) > top)
            top = shs__published_plus1(h);
    }
    if (top == 0)
        return r + 1;
    /* every living peer is behind: running on alone would only take this
     * rank further ahead (an idle round is fast), where no one meets it;
     * it waits for them first (shs__hold_ahead) */
    sh->ahead = top <= r;
    /* the far-behind rule needs done + SHS__ADMIT_WORDS <= that round; half
     * the span leaves a margin for an older done a peer may have read */
    uint64_t done = __atomic_load_n(&sh->hdr->done, __ATOMIC_RELAXED);
    uint64_t next = done + SHS__ADMIT_WORDS / 2 > top - 1 ? top - 1 : top;
    return next > r + 1 ? next : r + 1;
}

/* Some living peer has published round hw->r (published_seen: plus one). */
static bool caught_up(shs_shadow_t *sh, void *arg)
{
    const uint64_t *want = arg;
    for (int p = 0; p < sh->size; p++) {
        if (p == sh->rank || shs__view_is_dead(&sh->view, p) ||
            shs__read_header(sh, p, 0) != SHS_OK)
            continue;
        shs__note_published(sh, p, (const shs__pub_hdr_t *)sh->scratch_mem);
        if (sh->published_seen[p] >= *want)
            return true;
    }
    return false;
}

void shs__hold_ahead(shs_shadow_t *sh)
{
    if (!sh->ahead)
        return;
    sh->ahead = false;
    /* until a peer has published the round before this rank's next one,
     * within the straggler bound (peers that are stuck are not waited for
     * longer: this rank goes on, and they catch up when they continue) */
    uint64_t r = atomic_load_explicit(&sh->round, SHS__RELAXED);
    uint64_t want = r; /* published_seen counts rounds plus one: round r - 1 */
    (void)shs__shadow_wait_ms(sh, caught_up, &want, true, straggler_ms(sh));
}

void shs__round_done(shs_shadow_t *sh, const shs_group_t *grp, uint64_t r, bool applied)
{
    /* applied: this rank was in with others, who read its slot */
    int s = (int)(r & 1);
    bool any_out = false;
    sh->slot_round[s] = r;
    sh->slot_held[s] = applied;
    sh->slot_grp[s] = *grp;
    for (int k = 0; k < grp->size; k++) {
        bool in = sh->state[grp->ranks[k]] == SHS__PEER_OK;
        sh->slot_in[s][k] = in;
        any_out |= !in;
    }
    if (applied && !any_out)
        note_full_round(sh, shs__now_ns() - sh->round_t0);
    uint64_t next = applied ? r + 1 : catch_up_round(sh, r);
    if (SHS_LOG_LVL_DEBUG <= shs__log_level()) {
        char who[8 * SHS_GROUP_MAX] = "";
        size_t o = 0;
        for (int k = 0; k < grp->size && o + 12 < sizeof(who); k++)
            o += (size_t)snprintf(who + o, sizeof(who) - o, " %d%s", grp->ranks[k],
                                  sh->state[grp->ranks[k]] == SHS__PEER_OK ? "" : "-");
        SHS_DEBUG("shadow round %llu: %s, members%s (%.1f ms after publishing; at %.3f s)",
                  (unsigned long long)r, applied ? "applied" : "not in", who,
                  (double)(shs__now_ns() - sh->round_t0) / 1e6, (double)shs__now_ns() / 1e9);
    }
    if (next > r + 1)
        SHS_DEBUG("shadow: left out of round %llu; catching up at round %llu",
                  (unsigned long long)r, (unsigned long long)next);
    sh->next_round = next;
    set_done(sh, next); /* finished every round before next */
}

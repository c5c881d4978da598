/* Inbox slots and the notifications that move them: data that landed in a
 * slot, credits that give a shared slot back, the completion of a call's
 * writes; and how a call that cannot go on fails. */
#include <shadowsync/rma.h>

#include "algorithms/coll/coll.h"
#include "runtime/log.h"

/* Byte offset in an inbox of the slot of stream item t written by `sender`
 * in a call whose first item went eager (eager_first = 1) or not: the
 * sender's eager slot for that first item, else shared slot
 * (t - eager_first) mod slots. Sender and receiver compute the same. */
size_t shs__coll_slot_of(const shs_coll_t *coll, int sender, uint64_t t, unsigned eager_first)
{
    const shs__coll_conf_t *c = &coll->conf;
    if (t < eager_first)
        return (size_t)c->slots * c->slot_bytes + (size_t)sender * c->eager_bytes;
    return (size_t)((t - eager_first) % (uint64_t)c->slots) * c->slot_bytes;
}

/* The transport has logged a failure it detected; a timeout is detected
 * here. Either way the collective is poisoned: an abandoned call may still
 * have writes in flight towards an inbox. */
shs_status_t shs__coll_fail(shs__coll_ring_t *r, shs_status_t st, int peer, const char *what)
{
    r->coll->poisoned = true;
    if (st == SHS_ERR_TIMEOUT)
        SHS_ERROR("allreduce over %d ranks: %s peer %d for %d ms (SHS_OP_TIMEOUT_MS): peer "
                  "dead, or not in the same call? (collective disabled)", r->n, what, peer,
                  r->coll->conf.timeout_ms);
    else
        SHS_WARN("allreduce over %d ranks: %s peer %d: %s (collective disabled)", r->n, what,
                 peer, shs_status_string(st));
    return st;
}

shs_status_t shs__coll_protocol_error(shs__coll_ring_t *r, int peer, const char *what,
                                      uint32_t got, uint64_t want)
{
    r->coll->poisoned = true;
    SHS_ERROR("allreduce over %d ranks: %s from peer %d carries %u, expected %llu (or one "
              "of the next %d): the ranks disagree on the group, count, type or order of "
              "calls (collective disabled)", r->n, what, peer, got & IMM_SEQ_MASK,
              (unsigned long long)(want & IMM_SEQ_MASK), r->coll->conf.slots - 1);
    return SHS_ERR_PROTOCOL;
}

/* Zero-length write with immediate: shared slot `seq` is free again. */
shs_status_t shs__coll_credit_left(shs__coll_ring_t *r, uint64_t seq)
{
    shs_coll_t *coll = r->coll;
    shs_status_t st = shs_write_imm(coll->io, r->left, coll->inbox, 0, coll->inbox, 0, 0,
                                    shs__coll_imm(r, KIND_CREDIT, seq), 0);
    return st == SHS_OK ? st : shs__coll_fail(r, st, r->left, "notifying");
}

/* A notification from peer, if one is there: *got says whether it came;
 * a failure of the peer fails the call ("`what` peer N"). */
shs_status_t shs__coll_poll(shs__coll_ring_t *r, int peer, uint32_t mask, uint32_t match,
                            uint32_t *imm_p, bool *got, const char *what)
{
    shs_status_t st = shs_poll_imm_match(r->coll->io, peer, mask, match, NULL, imm_p);
    *got = st == SHS_OK;
    if (st == SHS_OK || st == SHS_ERR_TIMEOUT)
        return SHS_OK;
    return shs__coll_fail(r, st, peer, what);
}

static shs_status_t take_credits(shs__coll_ring_t *r, bool *moved)
{
    shs_coll_t *coll = r->coll;
    uint64_t slots = (uint64_t)coll->conf.slots;
    while (r->granted && r->credits_in + slots + r->send_eager < r->send_total) {
        uint32_t imm;
        bool got;
        shs_status_t st = shs__coll_poll(r, r->right, IMM_MATCH_MASK,
                                         shs__coll_imm(r, KIND_CREDIT, 0), &imm, &got,
                                         "waiting for credit from");
        if (st != SHS_OK || !got)
            return st;
        /* with several QPs per peer (SHS_QPS_PER_PEER) notifications may
         * overtake each other: a credit only has to be one we can expect */
        if (((imm - (uint32_t)r->credits_in) & IMM_SEQ_MASK) >= (uint32_t)slots)
            return shs__coll_protocol_error(r, r->right, "a credit", imm, r->credits_in);
        r->credits_in++;
        r->credits++;
        *moved = true;
    }
    return SHS_OK;
}

/* The caller gets its buffer back once our writes have completed. */
static shs_status_t take_flush(shs__coll_ring_t *r, bool *moved)
{
    if (r->sent != r->send_total || r->send_total == 0 || r->flushed)
        return SHS_OK;
    shs_status_t st = shs_flush_test(r->coll->io, r->right);
    if (st == SHS_ERR_TIMEOUT)
        return SHS_OK;
    if (st != SHS_OK)
        return shs__coll_fail(r, st, r->right, "completing the writes to");
    r->flushed = true;
    *moved = true;
    return SHS_OK;
}

static shs_status_t take_data(shs__coll_ring_t *r, bool *moved)
{
    shs_coll_t *coll = r->coll;
    while (r->arrived < r->recv_total) {
        uint32_t imm;
        bool got;
        shs_status_t st = shs__coll_poll(r, r->left, IMM_MATCH_MASK,
                                         shs__coll_imm(r, KIND_DATA, 0), &imm, &got,
                                         "waiting for data from");
        if (st != SHS_OK || !got)
            return st;
        /* item done + k, k <= slots; out of order only across QPs */
        uint32_t k = (imm - (uint32_t)r->done) & IMM_SEQ_MASK;
        if (k >= (uint32_t)coll->conf.slots + r->recv_eager || r->done + k >= r->recv_total ||
            (r->ready >> k) & 1u)
            return shs__coll_protocol_error(r, r->left, "a chunk", imm, r->done);
        r->ready |= (uint64_t)1 << k;
        r->arrived++;
        *moved = true;
    }
    return SHS_OK;
}

/* Take the notifications that are there; *moved says whether any came. */
shs_status_t shs__coll_take_notifications(shs__coll_ring_t *r, bool *moved)
{
    shs_status_t st = SHS_OK;
    if (!r->granted)
        st = shs__coll_take_grant(r, moved);
    if (st == SHS_OK)
        st = take_credits(r, moved);
    if (st == SHS_OK)
        st = take_flush(r, moved);
    if (st == SHS_OK)
        st = take_data(r, moved);
    return st;
}

/* Grants and the agreement of one call's members: each call's grant carries
 * the rank's call signature to its left neighbour, who compares it with its
 * own before it sends anything but the eager first chunk. The signature
 * travels in the grant area at the end of the sender's eager slot, or, when
 * the eager slot has no room for it, as a hash in a notification: the two
 * forms are the two shs__coll_agree_ops_t. A member that finds a
 * disagreement aborts the call on every member. */
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/coll/coll.h"
#include "runtime/log.h"

static shs__call_sig_t sig_of(const shs__coll_ring_t *r, uint32_t seq)
{
    return (shs__call_sig_t){.count = r->call_count, .elems = r->count,
                             .group = r->group_hash, .seq = seq, .n = (uint16_t)r->n,
                             .dtype = (uint8_t)r->dtype, .op = (uint8_t)r->op};
}

/* End this call on every member: poison the collective and tell both
 * neighbours (but not the one that told us), who tell theirs. Best effort: a
 * neighbour that misses it still gives up at its timeout. */
static shs_status_t abort_call(shs__coll_ring_t *r, unsigned why, int origin, int from)
{
    shs_coll_t *coll = r->coll;
    coll->poisoned = true;
    uint32_t imm = shs__coll_imm(r, KIND_CTRL, shs__coll_abort_payload(why, origin));
    int to[2] = {r->left, r->right};
    for (int k = 0; k < 2; k++)
        if (to[k] != from && (k == 0 || to[1] != to[0]))
            (void)shs_write_imm(coll->io, to[k], coll->inbox, 0, coll->inbox, 0, 0, imm, 0);
    return SHS_ERR_SIZE_MISMATCH;
}

/* Another member that found a disagreement has aborted the call. */
shs_status_t shs__coll_take_abort(shs__coll_ring_t *r)
{
    int from[2] = {r->left, r->right};
    for (int k = 0; k < 2 && (k == 0 || from[1] != from[0]); k++) {
        uint32_t imm;
        if (shs_poll_imm_match(r->coll->io, from[k], CTRL_MATCH_MASK,
                               shs__coll_imm(r, KIND_CTRL, 0), NULL, &imm) != SHS_OK)
            continue; /* nothing there; a failed peer is found elsewhere */
        unsigned why;
        int origin;
        shs__coll_abort_decode(imm, &why, &origin);
        SHS_ERROR("allreduce over %d ranks: peer %d reports that rank %d found the members "
                  "disagree on the %s (call aborted on every member, collective disabled)",
                  r->n, from[k], origin, shs__coll_why_name(why));
        return abort_call(r, why, origin, from[k]);
    }
    return SHS_OK;
}

static shs_status_t poll_right(shs__coll_ring_t *r, uint32_t mask, uint32_t match,
                               uint32_t *imm_p, bool *got)
{
    return shs__coll_poll(r, r->right, mask, match, imm_p, got, "waiting for the grant of");
}

/* ---- the signature in the grant area */

/* Offset in an inbox of signature `parity` at the end of sender's eager slot. */
static inline size_t sig_off(const shs_coll_t *coll, int sender, uint32_t parity)
{
    const shs__coll_conf_t *c = &coll->conf;
    return (size_t)c->slots * c->slot_bytes + (size_t)(sender + 1) * c->eager_bytes -
           SIG_AREA + (size_t)(parity & 1u) * sizeof(shs__call_sig_t);
}

/* The copy the grant is sent from is not written again before the device
 * has sent it: a call ends only once the left neighbour took the grant (with
 * three ranks or more, some data it sends us comes after the grant) or, with
 * two, once every write to the one peer has completed. The receiver's copy
 * alternates with the pair's calls, since the next call's grant may come
 * before the receiver has read this one. */
static shs_status_t area_grant(shs__coll_ring_t *r, const shs__call_sig_t *sig, uint32_t grant)
{
    shs_coll_t *coll = r->coll;
    size_t src = sig_off(coll, coll->rank, coll->grants++);
    memcpy((char *)shs_region_addr(coll->inbox) + src, sig, sizeof(*sig));
    return shs_write_imm(coll->io, r->left, coll->inbox, src, coll->inbox,
                         sig_off(coll, coll->rank, r->seq_from), sizeof(*sig), grant, 0);
}

static shs_status_t sig_mismatch(shs__coll_ring_t *r, const shs__call_sig_t *theirs,
                                 const shs__call_sig_t *mine)
{
    char a[160], b[160];
    unsigned why = shs__coll_sig_why(theirs, mine);
    shs__coll_sig_describe(a, sizeof(a), theirs);
    shs__coll_sig_describe(b, sizeof(b), mine);
    SHS_ERROR("allreduce over %d ranks: the members disagree on the %s: peer %d calls with %s; "
              "this rank with %s: every member must pass the same group, count, dtype and op "
              "(call aborted on every member, collective disabled)",
              r->n, shs__coll_why_name(why), r->right, a, b);
    return abort_call(r, why, r->coll->rank, -1);
}

static shs_status_t area_take(shs__coll_ring_t *r, const shs__call_sig_t *mine, uint32_t *imm_p,
                              bool *got, bool *moved)
{
    shs_coll_t *coll = r->coll;
    shs_status_t st = poll_right(r, IMM_MATCH_MASK, shs__coll_imm(r, KIND_GRANT, 0), imm_p, got);
    if (st != SHS_OK || !*got)
        return st;
    shs__call_sig_t theirs;
    memcpy(&theirs, (const char *)shs_region_addr(coll->inbox) + sig_off(coll, r->right, *imm_p),
           sizeof(theirs));
    if (theirs.n == 0) /* never written: a grant sent to another collective */
        return shs__coll_protocol_error(r, r->right, "a grant without a signature", *imm_p,
                                        r->seq_to);
    if (shs__coll_sig_why(&theirs, mine) != WHY_OTHER)
        return sig_mismatch(r, &theirs, mine);
    if (((theirs.seq ^ *imm_p) & IMM_SEQ_MASK) != 0)
        return shs__coll_protocol_error(r, r->right, "the signature of a grant", theirs.seq,
                                        *imm_p);
    return SHS_OK;
}

const shs__coll_agree_ops_t shs__coll_agree_area = {
    .area = SIG_AREA,
    .grant = area_grant,
    .take = area_take,
};

/* ---- the signature's hash in a notification before the grant */

static shs_status_t hash_grant(shs__coll_ring_t *r, const shs__call_sig_t *sig, uint32_t grant)
{
    shs_coll_t *coll = r->coll;
    shs_status_t st = shs_write_imm(coll->io, r->left, coll->inbox, 0, coll->inbox, 0, 0,
                                    shs__coll_imm(r, KIND_CTRL, CTRL_HASH | shs__coll_sig_hash(sig)),
                                    0);
    if (st == SHS_OK)
        st = shs_write_imm(coll->io, r->left, coll->inbox, 0, coll->inbox, 0, 0, grant, 0);
    return st;
}

static shs_status_t hash_mismatch(shs__coll_ring_t *r, uint32_t theirs,
                                  const shs__call_sig_t *mine)
{
    char b[160];
    shs__coll_sig_describe(b, sizeof(b), mine);
    SHS_ERROR("allreduce over %d ranks: the members disagree on the group, count, dtype or op: "
              "peer %d calls with signature %06x, this rank with %06x (%s); every member must "
              "pass the same ones (SHS_COLL_EAGER below %zu bytes leaves no room for the peer's "
              "values; call aborted on every member, collective disabled)",
              r->n, r->right, theirs, shs__coll_sig_hash(mine), b, SIG_AREA);
    return abort_call(r, WHY_OTHER, r->coll->rank, -1);
}

static shs_status_t hash_take(shs__coll_ring_t *r, const shs__call_sig_t *mine, uint32_t *imm_p,
                              bool *got, bool *moved)
{
    if (!r->hash_in) {
        uint32_t imm;
        shs_status_t st = poll_right(r, CTRL_MATCH_MASK, shs__coll_imm(r, KIND_CTRL, CTRL_HASH),
                                     &imm, got);
        if (st != SHS_OK || !*got)
            return st;
        if ((imm & (CTRL_HASH - 1)) != shs__coll_sig_hash(mine))
            return hash_mismatch(r, imm & (CTRL_HASH - 1), mine);
        r->hash_in = true;
        *moved = true;
    }
    return poll_right(r, IMM_MATCH_MASK, shs__coll_imm(r, KIND_GRANT, 0), imm_p, got);
}

const shs__coll_agree_ops_t shs__coll_agree_hash = {
    .area = 0,
    .grant = hash_grant,
    .take = hash_take,
};

/* ---- both forms */

/* Grant the shared slots to the left neighbour, with this call's signature. */
shs_status_t shs__coll_send_grant(shs__coll_ring_t *r)
{
    shs__call_sig_t sig = sig_of(r, r->seq_from);
    shs_status_t st = r->coll->agree->grant(r, &sig, shs__coll_imm(r, KIND_GRANT, r->seq_from));
    return st == SHS_OK ? st : shs__coll_fail(r, st, r->left, "granting to");
}

/* The grant of the right neighbour, once its signature matches ours. */
shs_status_t shs__coll_take_grant(shs__coll_ring_t *r, bool *moved)
{
    shs__call_sig_t mine = sig_of(r, r->seq_to);
    uint32_t imm;
    bool got;
    shs_status_t st = r->coll->agree->take(r, &mine, &imm, &got, moved);
    if (st != SHS_OK || !got)
        return st;
    if ((imm & IMM_SEQ_MASK) != (r->seq_to & IMM_SEQ_MASK))
        return shs__coll_protocol_error(r, r->right, "a grant", imm, r->seq_to);
    r->granted = true;
    r->credits = (uint64_t)r->coll->conf.slots;
    *moved = true;
    return SHS_OK;
}

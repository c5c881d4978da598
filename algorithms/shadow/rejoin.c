/*
 * A rank that rejoined a running job (SHS_REJOIN, docs/failures.md): at
 * create its engine takes the job's membership from a living peer's told
 * table, its model from that peer's newest published snapshot (unless
 * SHS_SHADOW_REJOIN_SEED=own), and starts its rounds at the newest round
 * the living peers have published, where it meets them. The peers take it
 * back when they read its header (snapshot.c, probe): from the first round
 * their views and its own agree (admit.c, "Views").
 */
#include <string.h>

#include <shadowsync/rma.h>

#include "algorithms/knobs.h"
#include "algorithms/reduce.h"
#include "algorithms/shadow/engine.h"
#include "runtime/log.h"
#include "transport/services.h"

/* Torn reads of a peer's snapshot (it rewrote the slot meanwhile) before
 * giving up; a slot is rewritten every second round, a read of it takes
 * about a round's share of one peer. */
#define SEED_TRIES 20

/* Peer q's header into *h (a copy: scratch is read into again). */
static shs_status_t read_hdr_copy(shs_shadow_t *sh, int q, shs__pub_hdr_t *h)
{
    shs_status_t st = shs__read_header(sh, q, 0);
    if (st == SHS_OK)
        memcpy(h, sh->scratch_mem, sizeof(*h));
    return st;
}

/* The slot of h holding its newest completely written round (-1: none). */
static int newest_slot(const shs__pub_hdr_t *h)
{
    int best = -1;
    for (int s = 0; s < 2; s++)
        if (shs__slot_written(h, s) && (best < 0 || h->round[s] > h->round[best]))
            best = s;
    return best;
}

/* The model from q's newest snapshot (seqlock reader: header, slot, header
 * again). *seeded false: q has published none yet. */
static shs_status_t seed_model(shs_shadow_t *sh, int q, bool *seeded)
{
    size_t wb = shs__wire_bytes(sh), piece = sh->cfg.chunk * sizeof(float);
    size_t bytes = sh->n * wb;
    *seeded = false;
    for (int tries = 0; tries < SEED_TRIES; tries++) {
        shs__pub_hdr_t h, h2;
        shs_status_t st = read_hdr_copy(sh, q, &h);
        if (st != SHS_OK)
            return st;
        int s = newest_slot(&h);
        if (s < 0)
            return SHS_OK;
        if (h.wire != sh->hdr->wire) {
            SHS_ERROR("shadow: peer %d publishes %s snapshots, this rank %s: every rank must "
                      "use the same SHS_SHADOW_WIRE", q,
                      h.wire == 1u + SHS_WIRE_BF16 ? "bf16" : "float32",
                      shs__bf16_wire(sh) ? "bf16" : "float32");
            return SHS_ERR_SIZE_MISMATCH;
        }
        for (size_t off = 0; off < bytes && st == SHS_OK; off += piece)
            st = shs_read(sh->io, q, sh->acc_reg, off, sh->pub, shs__slot_off(sh, s) + off,
                          bytes - off < piece ? bytes - off : piece, SHS_OP_SIGNAL);
        if (st == SHS_OK)
            st = shs_flush(sh->io, q, SHS_TIMEOUT_DEFAULT);
        if (st == SHS_OK)
            st = read_hdr_copy(sh, q, &h2);
        if (st != SHS_OK)
            return st;
        shs__stat_add(&sh->st.bytes_read, bytes);
        if (h2.seq[s] != h.seq[s])
            continue; /* rewritten while read */
        if (shs__bf16_wire(sh))
            shs__bf16_decode(sh->w, (const uint16_t *)(const void *)sh->acc, sh->n);
        else
            memcpy(sh->w, sh->acc, sh->n * sizeof(float));
        *seeded = true;
        SHS_INFO("shadow: model seeded from peer %d's snapshot of round %llu",
                 q, (unsigned long long)h.round[s]);
        return SHS_OK;
    }
    SHS_ERROR("shadow: peer %d rewrote its snapshot during each of %d reads", q, SEED_TRIES);
    return SHS_ERR_TIMEOUT;
}

shs_status_t shs__rejoin_seed(shs_shadow_t *sh)
{
    int q = -1;
    for (int p = 0; p < sh->size && q < 0; p++)
        if (p != sh->rank && shs_ctx_peer_status(sh->io, p, NULL) == SHS_OK)
            q = p;
    if (q < 0) {
        SHS_ERROR("shadow: this rank rejoined, but no peer is left to take the job's state "
                  "from");
        return SHS_ERR_PEER_FAILED;
    }
    /* the membership: q's told table, and this rank's next incarnation */
    shs_status_t st = shs_read(sh->io, q, sh->scratch, sh->told_off, sh->pub, SHS__PUB_TOLD_OFF,
                               SHS__VIEW_TOLD_RANKS * sizeof(shs__life_t), SHS_OP_SIGNAL);
    if (st == SHS_OK)
        st = shs_flush(sh->io, q, SHS_TIMEOUT_DEFAULT);
    if (st != SHS_OK)
        return st;
    shs__view_rejoin(&sh->view,
                     (const shs__life_t *)(const void *)(sh->scratch_mem + sh->told_off));
    __atomic_store_n(&sh->hdr->life, shs__view_life(&sh->view, sh->rank), __ATOMIC_RELEASE);

    bool seeded = false;
    if (shs__ctx_config(sh->ctx)->shadow_rejoin_seed == SHS__SEED_PEER) {
        st = seed_model(sh, q, &seeded);
        if (st != SHS_OK)
            return st;
    }
    if (sh->wg != NULL) /* BMUF: the global model starts where the model does */
        memcpy(sh->wg, sh->w, sh->n * sizeof(float));

    /* the first round: the newest any living peer has published */
    uint64_t top = 0;
    for (int p = 0; p < sh->size; p++) {
        shs__pub_hdr_t h;
        if (p == sh->rank || shs__view_is_dead(&sh->view, p) ||
            shs_ctx_peer_status(sh->io, p, NULL) != SHS_OK || read_hdr_copy(sh, p, &h) != SHS_OK)
            continue;
        if (shs__published_plus1(&h) > top)
            top = shs__published_plus1(&h);
    }
    uint64_t first = top > 0 ? top - 1 : 0;
    atomic_store_explicit(&sh->round, first, SHS__RELAXED);
    __atomic_store_n(&sh->hdr->done, first, __ATOMIC_RELEASE);
    SHS_INFO("shadow: rejoined as incarnation %u of rank %d; model %s; rounds from %llu",
             (unsigned)(shs__view_life(&sh->view, sh->rank) / 2u), sh->rank,
             seeded ? "seeded from a peer" : "as the program left it",
             (unsigned long long)first);
    return SHS_OK;
}

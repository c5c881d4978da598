/* Bootstrap collectives: a star through rank 0. */
#include <stdio.h>
#include <string.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

typedef struct coll {
    uint16_t op;
    const char *name;
    size_t len;  /* per-rank length */
    int root;    /* bcast root, else 0 */
    const void *in;
    void *out;   /* allgather: size*len; bcast: len */
} coll_t;

static size_t contrib_len(const shs__boot_t *b, const coll_t *c, int from)
{
    if (c->op == FT_ALLGATHER || (c->op == FT_BCAST && from == c->root))
        return c->len;
    return 0;
}

static size_t reply_len(const shs__boot_t *b, const coll_t *c, int to)
{
    if (c->op == FT_ALLGATHER)
        return (size_t)b->size * c->len;
    if (c->op == FT_BCAST && to != c->root)
        return c->len;
    return 0;
}

static const char *op_name(uint16_t op)
{
    switch (op) {
    case FT_ALLGATHER: return "allgather";
    case FT_BCAST: return "bcast";
    case FT_BARRIER: return "barrier";
    }
    return "a non-collective frame";
}

/* The first disagreement among the members of a collective, reported to all. */
typedef struct mismatch {
    shs_status_t st;
    int culprit;
    char text[ERROR_TEXT_MAX];
} mismatch_t;

static shs_status_t root_link_failed(shs__boot_t *b, const coll_t *c, int r, shs_status_t st)
{
    char text[ERROR_TEXT_MAX];
    snprintf(text, sizeof(text), "rank %d failed during %s (%s)", r, c->name,
             shs_status_string(st));
    return shs__boot_fail_all(b, st, r, text);
}

/* Rank 0 reads rank r's contribution into place, or past it once a
 * mismatch is known. A non-OK return is a broken link. */
static shs_status_t root_gather_from(shs__boot_t *b, const coll_t *c, int r,
                                     shs__deadline_t dl, mismatch_t *bad)
{
    link_t *l = &b->peer[r];
    shs__boot_hdr_t h;
    uint8_t fixed[CONTRIB_FIXED];
    shs__boot_contrib_t ct = {0};
    shs_status_t st = shs__boot_recv_hdr(l, &h, dl, r, c->name);
    if (st == SHS_OK && h.length < CONTRIB_FIXED) {
        SHS_ERROR("rank %d sent a %u-byte frame of type %u during %s", r, h.length, h.type,
                  c->name);
        st = SHS_ERR_PROTOCOL;
    }
    if (st == SHS_OK)
        st = shs__boot_recv_body(l, fixed, sizeof(fixed), dl, r, c->name);
    if (st != SHS_OK)
        return st;
    shs__boot_contrib_decode(fixed, sizeof(fixed), &ct);
    size_t data = h.length - CONTRIB_FIXED;

    if (bad->st == SHS_OK && (h.type != c->op || ct.root != (uint32_t)c->root)) {
        bad->st = SHS_ERR_PROTOCOL;
        bad->culprit = r;
        snprintf(bad->text, sizeof(bad->text),
                 "rank %d called %s (root %d) while rank 0 called %s (root %d)", r,
                 op_name(h.type), (int)ct.root, c->name, c->root);
    } else if (bad->st == SHS_OK && (ct.len != c->len || data != contrib_len(b, c, r))) {
        bad->st = SHS_ERR_SIZE_MISMATCH;
        bad->culprit = r;
        snprintf(bad->text, sizeof(bad->text), "rank %d passed %llu bytes to %s, rank 0 passed %zu",
                 r, (unsigned long long)ct.len, c->name, c->len);
    }
    if (bad->st == SHS_OK && data > 0) {
        uint8_t *to = c->op == FT_ALLGATHER ? (uint8_t *)c->out + (size_t)r * c->len : c->out;
        st = shs__boot_recv_body(l, to, data, dl, r, c->name);
    } else {
        st = shs__boot_recv_discard(l, data, dl, r, c->name);
    }
    if (st == SHS_OK)
        st = shs__boot_recv_end(l, dl, r, c->name);
    return st;
}

static shs_status_t root_collective(shs__boot_t *b, const coll_t *c, shs__deadline_t dl)
{
    mismatch_t bad = {SHS_OK, -1, ""};

    /* Read every contribution even after a mismatch, so that the streams stay
     * in step and the job can report the mismatch and carry on. */
    for (int r = 1; r < b->size; r++) {
        shs_status_t st = root_gather_from(b, c, r, dl, &bad);
        if (st != SHS_OK)
            return root_link_failed(b, c, r, st);
    }
    if (bad.st != SHS_OK) {
        SHS_ERROR("%s", bad.text);
        for (int r = 1; r < b->size; r++)
            shs__boot_send_error_nowait(&b->peer[r], bad.st, bad.culprit, bad.text);
        /* The other ranks poison on anything but a size mismatch; so does rank 0. */
        if (bad.st != SHS_ERR_SIZE_MISMATCH)
            b->poisoned = bad.st;
        return bad.st;
    }
    for (int r = 1; r < b->size; r++) {
        shs_status_t st = shs__boot_send(&b->peer[r], FT_REPLY, NULL, 0, c->out,
                                         reply_len(b, c, r), dl, r, c->name);
        if (st != SHS_OK)
            return root_link_failed(b, c, r, st);
    }
    return SHS_OK;
}

static shs_status_t peer_collective(shs__boot_t *b, const coll_t *c, shs__deadline_t dl)
{
    uint8_t fixed[CONTRIB_FIXED];
    shs__boot_hdr_t h;
    link_t *l = &b->root;

    shs__put_u64(fixed, c->len);
    shs__put_u32(fixed + 8, (uint32_t)c->root);
    shs_status_t st = shs__boot_send(l, c->op, fixed, sizeof(fixed), c->in,
                                 contrib_len(b, c, b->rank), dl, 0, c->name);
    if (st == SHS_OK)
        st = shs__boot_recv_hdr(l, &h, dl, 0, c->name);
    if (st != SHS_OK)
        goto err_poison;
    if (h.type == FT_ERROR) {
        st = shs__boot_recv_error(l, &h, dl, c->name);
        /* Rank 0 drained every contribution before a mismatch report; the
         * streams are still in step. */
        if (st == SHS_ERR_SIZE_MISMATCH)
            return st;
        goto err_poison;
    }
    if (h.type != FT_REPLY || h.length != reply_len(b, c, b->rank)) {
        SHS_ERROR("unexpected reply from rank 0 during %s (type %u, %u bytes, expected %zu)",
                  c->name, h.type, h.length, reply_len(b, c, b->rank));
        st = SHS_ERR_PROTOCOL;
        goto err_poison;
    }
    st = shs__boot_recv_body(l, c->out, h.length, dl, 0, c->name);
    if (st == SHS_OK)
        st = shs__boot_recv_end(l, dl, 0, c->name);
    if (st != SHS_OK)
        goto err_poison;
    return SHS_OK;

err_poison:
    b->poisoned = st;
    return st;
}

static shs_status_t run_collective(shs__boot_t *b, const coll_t *c)
{
    if (b->poisoned != SHS_OK) {
        SHS_DEBUG("%s on a failed bootstrap (%s)", c->name, shs_status_string(b->poisoned));
        return b->poisoned;
    }
    if (b->size == 1)
        return SHS_OK;
    if (reply_len(b, c, 1) > SHS_BOOT_MAX_MSG || c->len > SHS_BOOT_MAX_MSG) {
        SHS_ERROR("%s of %zu bytes per rank exceeds the bootstrap limit of %u bytes", c->name,
                  c->len, SHS_BOOT_MAX_MSG);
        return SHS_ERR_INVALID_ARG;
    }
    shs__deadline_t dl = shs__deadline_in_ms(b->timeout_ms);
    return b->rank == 0 ? root_collective(b, c, dl) : peer_collective(b, c, dl);
}

shs_status_t shs__boot_allgather(shs__boot_t *b, const void *in, size_t len, void *out)
{
    if (b == NULL || (len > 0 && (in == NULL || out == NULL)))
        return SHS_ERR_INVALID_ARG;
    /* memmove: an in-place allgather passes in == out + rank * len. */
    if (len > 0 && (b->rank == 0 || b->size == 1))
        memmove((uint8_t *)out + (size_t)b->rank * len, in, len);
    coll_t c = {FT_ALLGATHER, "allgather", len, 0, in, out};
    return run_collective(b, &c);
}

shs_status_t shs__boot_bcast(shs__boot_t *b, void *buf, size_t len, int root)
{
    if (b == NULL || (len > 0 && buf == NULL) || root < 0 || root >= b->size)
        return SHS_ERR_INVALID_ARG;
    coll_t c = {FT_BCAST, "bcast", len, root, buf, buf};
    return run_collective(b, &c);
}

shs_status_t shs__boot_barrier(shs__boot_t *b)
{
    if (b == NULL)
        return SHS_ERR_INVALID_ARG;
    coll_t c = {FT_BARRIER, "barrier", 0, 0, NULL, NULL};
    return run_collective(b, &c);
}

/*
 * The membership view of the shadow engine (view.h): who is left out, what
 * is told to peers, who is taken back, and the groups re-formed over the
 * living ranks.
 */
#include <stdlib.h>
#include <string.h>

#include "algorithms/shadow/view.h"
#include "runtime/log.h"

shs_status_t shs__view_init(shs__view_t *v, int rank, int size, shs__life_t *told,
                            uint64_t *told_ver)
{
    memset(v, 0, sizeof(*v));
    v->rank = rank;
    v->size = size;
    v->told = told;
    v->told_ver = told_ver;
    memset(told, 0, SHS__VIEW_TOLD_RANKS * sizeof(shs__life_t));
    *told_ver = 0;
    v->dead = calloc((size_t)size, sizeof(bool));
    v->ended = calloc((size_t)size, sizeof(bool));
    v->stopped = calloc((size_t)size, sizeof(bool));
    v->probe = calloc((size_t)size, sizeof(bool));
    v->life = calloc((size_t)size, sizeof(shs__life_t));
    v->alive = calloc((size_t)size, sizeof(int));
    if (v->dead == NULL || v->ended == NULL || v->stopped == NULL || v->probe == NULL ||
        v->life == NULL || v->alive == NULL) {
        shs__view_fini(v);
        return SHS_ERR_NO_MEMORY;
    }
    shs__view_admit(v, rank, 0, 0); /* the digest */
    return SHS_OK;
}

void shs__view_fini(shs__view_t *v)
{
    free(v->dead);
    free(v->ended);
    free(v->stopped);
    free(v->probe);
    free(v->life);
    free(v->alive);
    v->dead = v->ended = v->stopped = v->probe = NULL;
    v->life = NULL;
    v->alive = NULL;
}

/* FNV-1a over the living ranks and their counters. */
static void redigest(shs__view_t *v)
{
    uint32_t h = 2166136261u;
    for (int p = 0; p < v->size; p++) {
        if (v->dead[p])
            continue;
        uint32_t x[2] = {(uint32_t)p, v->life[p]};
        for (int i = 0; i < 2; i++)
            for (int b = 0; b < 4; b++) {
                h ^= (x[i] >> (8 * b)) & 0xffu;
                h *= 16777619u;
            }
    }
    v->digest = h & ((1u << SHS__VIEW_DIGEST_BITS) - 1u);
}

/* Publish p's counter (ranks past the table are not told). */
static void tell(shs__view_t *v, int p)
{
    if (p >= SHS__VIEW_TOLD_RANKS)
        return;
    __atomic_store_n(&v->told[p], v->life[p], __ATOMIC_RELAXED);
    __atomic_store_n(v->told_ver, *v->told_ver + 1, __ATOMIC_RELEASE);
}

/* Leave p out with counter `life` (odd). */
static shs__view_change_t leave_out(shs__view_t *v, int p, shs__life_t life, int via,
                                    const char *reason, uint64_t round)
{
    bool was_dead = v->dead[p];
    v->life[p] = life;
    v->probe[p] = false;
    if (was_dead) {
        /* already out (it ended, or an older report): now counted failed */
        if (v->ended[p]) {
            v->ended[p] = false;
            v->nfailed++;
        }
        tell(v, p);
        redigest(v);
        return SHS__VIEW_SAME;
    }
    __atomic_store_n(&v->dead[p], true, __ATOMIC_RELAXED);
    v->ndead++;
    if (via < 0 && v->stopped[p]) {
        /* it stopped its engine, then went away (its job ended): left out
         * like a failed peer, but not counted or told as one */
        v->ended[p] = true;
        redigest(v);
        SHS_INFO("shadow: peer %d stopped and then went away (%s); left out from now on", p,
                 reason != NULL ? reason : "no answer");
        return SHS__VIEW_ENDED;
    }
    v->nfailed++;
    tell(v, p);
    redigest(v);
    if (via >= 0)
        SHS_WARN("shadow: peer %d failed (reported by peer %d); syncing on without it from "
                 "round %llu, groups re-formed over the %d living ranks",
                 p, via, (unsigned long long)round, v->size - v->ndead);
    else
        SHS_WARN("shadow: peer %d failed (%s); syncing on without it from round %llu, groups "
                 "re-formed over the %d living ranks",
                 p, reason != NULL ? reason : "no answer", (unsigned long long)round,
                 v->size - v->ndead);
    return SHS__VIEW_FAILED;
}

shs__view_change_t shs__view_drop(shs__view_t *v, int p, int via, const char *reason,
                                  uint64_t round)
{
    if (p == v->rank || p < 0 || p >= v->size || v->dead[p])
        return SHS__VIEW_SAME;
    return leave_out(v, p, (shs__life_t)(v->life[p] | 1u), via, reason, round);
}

int shs__view_learn(shs__view_t *v, int from, const shs__life_t *their, uint64_t round)
{
    int learned = 0;
    if (from < 0 || from >= v->size || v->dead[from])
        return 0;
    int n = v->size < SHS__VIEW_TOLD_RANKS ? v->size : SHS__VIEW_TOLD_RANKS;
    for (int p = 0; p < n; p++) {
        shs__life_t t = their[p];
        if (!shs__life_newer(t, v->life[p]))
            continue;
        if (p == v->rank) {
            if ((t & 1u) && !v->self_told)
                SHS_WARN("shadow: peer %d counts this rank as failed (the link between them "
                         "broke?); it will not read this rank again", from);
            v->self_told |= (t & 1u) != 0;
        } else if (t & 1u) {
            if (leave_out(v, p, t, from, NULL, round) != SHS__VIEW_SAME)
                learned++;
        } else {
            v->probe[p] = true; /* a newer incarnation: its own header decides */
        }
    }
    return learned;
}

bool shs__view_admit(shs__view_t *v, int p, shs__life_t life, uint64_t round)
{
    if (p < 0 || p >= v->size || (life & 1u))
        return false;
    v->probe[p] = false;
    if (p == v->rank) {
        v->life[p] = life;
        tell(v, p);
        redigest(v);
        return true;
    }
    if (!shs__life_newer(life, v->life[p]))
        return false;
    bool was_dead = v->dead[p];
    v->life[p] = life;
    if (was_dead) {
        if (!v->ended[p])
            v->nfailed--;
        v->ended[p] = false;
        v->ndead--;
        __atomic_store_n(&v->dead[p], false, __ATOMIC_RELAXED);
    }
    v->stopped[p] = false;
    tell(v, p);
    redigest(v);
    SHS_INFO("shadow: peer %d rejoined the job (incarnation %u); taken back from round %llu, "
             "groups re-formed over the %d living ranks",
             p, (unsigned)(life / 2u), (unsigned long long)round, v->size - v->ndead);
    return true;
}

void shs__view_rejoin(shs__view_t *v, const shs__life_t *base)
{
    int n = v->size < SHS__VIEW_TOLD_RANKS ? v->size : SHS__VIEW_TOLD_RANKS;
    for (int p = 0; p < n; p++) {
        if (p == v->rank || !shs__life_newer(base[p], v->life[p]))
            continue;
        if (base[p] & 1u)
            (void)leave_out(v, p, base[p], -1, "failed before this rank rejoined", 0);
        else
            v->life[p] = base[p];
    }
    shs__life_t mine = v->rank < SHS__VIEW_TOLD_RANKS ? base[v->rank] : 0;
    if (shs__life_newer(v->life[v->rank], mine))
        mine = v->life[v->rank];
    /* odd (its death was seen): the next even; even (it was not): past it */
    shs__view_admit(v, v->rank, (shs__life_t)((mine | 1u) + 1u), 0);
}

bool shs__view_changed(const shs__view_t *v)
{
    if (v->ndead > 0)
        return true;
    for (int p = 0; p < v->size; p++)
        if (v->life[p] != 0)
            return true;
    return false;
}

shs_status_t shs__view_group(shs__view_t *v, const shs_schedule_t *sched, uint64_t r,
                             shs_group_t *grp)
{
    if (v->ndead == 0)
        return shs_schedule_group(sched, v->size, v->rank, r, grp);
    int m = 0, me = 0;
    for (int p = 0; p < v->size; p++) {
        if (v->dead[p])
            continue;
        if (p == v->rank)
            me = m;
        v->alive[m++] = p;
    }
    shs_schedule_t s = *sched;
    if (s.kind == SHS_SCHED_HYPERCUBE) {
        int q = 1;
        while (q < m && s.group_size > 1)
            q *= s.group_size;
        if (q != m)
            s.kind = SHS_SCHED_GENERAL;
    }
    shs_group_t g;
    shs_status_t st = shs_schedule_group(&s, m, me, r, &g);
    if (st != SHS_OK)
        return st;
    for (int k = 0; k < g.size; k++)
        g.ranks[k] = v->alive[g.ranks[k]];
    *grp = g;
    return SHS_OK;
}

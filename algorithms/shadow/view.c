/*
 * The failure view of the shadow engine (view.h): who is left out, what is
 * told to peers, and the groups re-formed over the living ranks.
 */
#include <stdlib.h>
#include <string.h>

#include "algorithms/shadow/view.h"
#include "runtime/log.h"

shs_status_t shs__view_init(shs__view_t *v, int rank, int size, uint64_t *told)
{
    memset(v, 0, sizeof(*v));
    v->rank = rank;
    v->size = size;
    v->told = told;
    memset(told, 0, SHS__VIEW_WORDS * sizeof(uint64_t));
    v->dead = calloc((size_t)size, sizeof(bool));
    v->stopped = calloc((size_t)size, sizeof(bool));
    v->alive = calloc((size_t)size, sizeof(int));
    if (v->dead == NULL || v->stopped == NULL || v->alive == NULL) {
        shs__view_fini(v);
        return SHS_ERR_NO_MEMORY;
    }
    return SHS_OK;
}

void shs__view_fini(shs__view_t *v)
{
    free(v->dead);
    free(v->stopped);
    free(v->alive);
    v->dead = v->stopped = NULL;
    v->alive = NULL;
}

shs__view_change_t shs__view_drop(shs__view_t *v, int p, int via, const char *reason,
                                  uint64_t round)
{
    if (p == v->rank || p < 0 || p >= v->size || v->dead[p])
        return SHS__VIEW_SAME;
    __atomic_store_n(&v->dead[p], true, __ATOMIC_RELAXED);
    v->ndead++;
    if (via < 0 && v->stopped[p]) {
        /* it stopped its engine, then went away (its job ended): left out
         * like a failed peer, but not counted or told as one */
        SHS_INFO("shadow: peer %d stopped and then went away (%s); left out from now on", p,
                 reason != NULL ? reason : "no answer");
        return SHS__VIEW_ENDED;
    }
    v->nfailed++;
    if (p < SHS__VIEW_TOLD_RANKS)
        __atomic_fetch_or(&v->told[p / 64], 1ull << (p % 64), __ATOMIC_RELEASE);
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

int shs__view_learn(shs__view_t *v, int from, const uint64_t *words, uint64_t round)
{
    int learned = 0;
    if (from < 0 || from >= v->size || v->dead[from])
        return 0;
    for (int w = 0; w < SHS__VIEW_WORDS && w * 64 < v->size; w++) {
        uint64_t bits = words[w];
        while (bits != 0) {
            int p = w * 64 + __builtin_ctzll(bits);
            bits &= bits - 1;
            if (p == v->rank) {
                if (!v->self_told)
                    SHS_WARN("shadow: peer %d counts this rank as failed (the link between "
                             "them broke?); it will not read this rank again", from);
                v->self_told = true;
            } else if (p < v->size && shs__view_drop(v, p, from, NULL, round) != SHS__VIEW_SAME) {
                learned++;
            }
        }
    }
    return learned;
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

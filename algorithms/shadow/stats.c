/*
 * The engine's statistics (shs_shadow_stats): counters kept with relaxed
 * atomics by the thread that runs the rounds, read by any thread.
 */
#include <string.h>

#include "algorithms/shadow/engine.h"
#include "runtime/clock.h"

void shs__shadow_note_error(shs_shadow_t *sh, shs_status_t st)
{
    shs__stat_add(&sh->st.errors, 1);
    atomic_store_explicit(&sh->st.last_error, (int)st, SHS__RELAXED);
}

/* The peers this round synced with: their staleness restarts. */
void shs__shadow_note_read(shs_shadow_t *sh, const shs_group_t *grp)
{
    uint64_t now = shs__now_ns();
    for (int k = 0; k < grp->size; k++) {
        int p = grp->ranks[k];
        if (p != sh->rank && sh->state[p] == SHS__PEER_OK) {
            atomic_store_explicit(&sh->st.last_read_ns[p], now, SHS__RELAXED);
            sh->round_peers++;
        }
    }
}

/* A round ended after dt_ns with st. A round that synced with no peer is
 * idle: not a sync (every peer of the group was stopped or skipped, or the
 * group was this rank alone). */
void shs__shadow_note_round(shs_shadow_t *sh, uint64_t dt_ns, shs_status_t st)
{
    shs__shadow_stats_t *s = &sh->st;
    if (st != SHS_OK)
        shs__shadow_note_error(sh, st);
    if (sh->round_peers == 0) {
        shs__stat_add(&s->idle, 1);
        return;
    }
    shs__stat_add(&s->rounds, 1);
    uint64_t none = 0;
    atomic_compare_exchange_strong(&s->first_sync_ns, &none, shs__now_ns());
    if (sh->view.nfailed > 0)
        shs__stat_add(&s->rounds_after_fail, 1);
    shs__stat_add(&s->round_ns_sum, dt_ns);
    atomic_store_explicit(&s->round_ns_last, dt_ns, SHS__RELAXED);
    if (dt_ns > atomic_load_explicit(&s->round_ns_max, SHS__RELAXED))
        atomic_store_explicit(&s->round_ns_max, dt_ns, SHS__RELAXED);
}

static double age_ms(uint64_t now, uint64_t t)
{
    return now > t ? (double)(now - t) / 1e6 : 0.0;
}

/* The largest staleness among the living peers ever read (-1: none). */
static double staleness_max(const shs_shadow_t *sh, uint64_t now)
{
    double max = -1.0;
    for (int p = 0; p < sh->size; p++) {
        if (p == sh->rank || shs__view_is_dead(&sh->view, p))
            continue; /* a failed peer's age grows without bound: not staleness */
        uint64_t t = atomic_load_explicit(&sh->st.last_read_ns[p], SHS__RELAXED);
        if (t != 0 && age_ms(now, t) > max)
            max = age_ms(now, t);
    }
    return max;
}

static uint64_t load(const _Atomic uint64_t *c)
{
    return atomic_load_explicit((_Atomic uint64_t *)c, SHS__RELAXED);
}

shs_status_t shs_shadow_stats(const shs_shadow_t *sh, shs_shadow_stats_t *out)
{
    if (sh == NULL || out == NULL)
        return SHS_ERR_INVALID_ARG;
    const shs__shadow_stats_t *c = &sh->st;
    shs_shadow_stats_t s;
    memset(&s, 0, sizeof(s));
    uint64_t now = shs__now_ns();
    s.rounds = load(&c->rounds);
    s.idle_rounds = load(&c->idle);
    s.running = atomic_load((atomic_int *)&sh->running);
    uint64_t active = load(&c->run_ns_total);
    if (s.running)
        active += now - load(&c->run_start_ns);
    uint64_t first = load(&c->first_round_ns);
    if (active == 0 && first != 0)
        active = now - first;
    s.syncs_per_min = active > 0 ? (double)s.rounds * 60e9 / (double)active : 0.0;
    s.bytes_read = load(&c->bytes_read);
    s.bytes_written = load(&c->bytes_written);
    if (s.rounds > 0) {
        s.round_us_mean = (double)load(&c->round_ns_sum) / 1e3 / (double)s.rounds;
        s.wait_us_mean = (double)load(&c->wait_ns_sum) / 1e3 / (double)s.rounds;
    }
    s.round_us_last = (double)load(&c->round_ns_last) / 1e3;
    s.round_us_max = (double)load(&c->round_ns_max) / 1e3;
    s.torn_retries = load(&c->torn);
    s.peers_skipped = load(&c->skipped);
    s.errors = load(&c->errors);
    s.last_error = (shs_status_t)atomic_load_explicit((atomic_int *)&c->last_error, SHS__RELAXED);
    s.failed_peers = atomic_load_explicit((atomic_int *)&c->failed, SHS__RELAXED);
    s.rounds_after_failure = load(&c->rounds_after_fail);
    s.first_failure_ns = load(&c->first_fail_ns);
    s.first_sync_ns = load(&c->first_sync_ns);
    s.straggler_skips = load(&c->straggler_skips);
    s.rounds_left_out = load(&c->left_out);
    s.staleness_ms_max = staleness_max(sh, now);
    *out = s;
    return SHS_OK;
}

shs_status_t shs_shadow_peer_staleness(const shs_shadow_t *sh, int peer, double *ms_p)
{
    if (sh == NULL || ms_p == NULL || peer < 0 || peer >= sh->size || peer == sh->rank)
        return SHS_ERR_INVALID_ARG;
    uint64_t t = atomic_load_explicit(&sh->st.last_read_ns[peer], SHS__RELAXED);
    *ms_p = t == 0 ? -1.0 : age_ms(shs__now_ns(), t);
    return SHS_OK;
}

shs_status_t shs_shadow_peer_skips(const shs_shadow_t *sh, int peer, uint64_t *skips_p)
{
    if (sh == NULL || skips_p == NULL || peer < 0 || peer >= sh->size || peer == sh->rank)
        return SHS_ERR_INVALID_ARG;
    *skips_p = load(&sh->st.peer_skips[peer]);
    return SHS_OK;
}

uint64_t shs_shadow_round(const shs_shadow_t *sh)
{
    return sh == NULL ? 0 : load(&sh->round);
}

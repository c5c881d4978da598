/*
 * shs-ctr's command line: the options, their defaults and checks, and the
 * mode they name.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"

void ctr_usage(FILE *f)
{
    fprintf(f,
            "usage: shs-ctr --mode none|s-ma|fr-ma|s-bmuf|fr-bmuf|s-easgd|fr-easgd|single [options]\n"
            "  --ds G            DS-Sync groups of G ranks (default: all ranks)\n"
            "  --workers W       Hogwild worker threads per rank (default 2)\n"
            "  --examples T      training examples over all ranks (default 400000)\n"
            "  --eval E          held-out examples (default 20000)\n"
            "  --seed S          dataset and initial model (default 3)\n"
            "  --ctr C           base click-through rate of the teacher (default 0.03)\n"
            "  --buckets B --dim K --hidden H   model shape (default 4096, 4, 16)\n"
            "  --params P        choose buckets for about P parameters\n"
            "  --lr X            SGD learning rate (default 0.05)\n"
            "  --lr-end F        the rate decays linearly to F * X over the pass (default 0.1)\n"
            "  --fr-every K      FR modes: examples per worker between syncs (default 2000)\n"
            "  --interval-us U   S modes: least time between two rounds (default 0)\n"
            "  --path pull|ring       S/FR data path (default pull; live is refused)\n"
            "  --pin CPUS        shadow thread CPUs: auto|none|list (default none)\n"
            "  --checkpoints C   model copies evaluated for the curve (default 6)\n"
            "  --out DIR --label NAME   write DIR/NAME.rank<r>.json\n"
            "  --sync-only S     no training: run the shadow engine alone for S seconds\n"
            "  --worker-nice N   nice value of the worker threads (default 0)\n"
            "  --bmuf-eta E --bmuf-zeta Z --bmuf-nesterov 0|1 --easgd-alpha A\n"
            "                    the rules' parameters (default: the engine's, shadow.h)\n"
            "  --dump            also write the final model (raw float32) and a trace of\n"
            "                    the output biases over time beside the JSON\n"
            "  --no-finish       sync modes: evaluate each rank's model as the last round\n"
            "                    left it (no shs_shadow_finish)\n"
            "  --stall-rank R --stall-for S [--stall-after A]\n"
            "                    a straggler: rank R is stopped (SIGSTOP) A s after its\n"
            "                    pass starts (default 10) and continued (SIGCONT) S s\n"
            "                    later; each rank also prints its rounds once a second\n"
            "                    (\"sync-series\": seconds since the pass started, rounds)\n"
            "  --restart-rank R|any --restart-after S [--restarts K] [--restart-every E]\n"
            "                    rank R (any: a rank drawn from --seed, each time) is\n"
            "                    killed (SIGKILL) S s into the pass, and K - 1 more times\n"
            "                    E s apart (defaults 10, 1, 10); S%% and E%%: when the\n"
            "                    victim has trained that share of its examples (both\n"
            "                    in %% or both in s); a kill waits until the previous\n"
            "                    victim is set up again, none past 80 %%; run it under shs-launch\n"
            "                    --restart R|any, which starts it again: it rejoins the\n"
            "                    running job and trains the rest of its share (s-ma or\n"
            "                    s-bmuf, --model wide)\n"
            "  --model wide|dlrm the student (default wide). dlrm: the hybrid trainer, a\n"
            "                    Criteo-shaped log (13 dense, 26 categorical features),\n"
            "                    sharded embedding tables (row-wise Adagrad on the\n"
            "                    holders) and a DLRM dense part synced by the mode:\n"
            "  --rows R          dlrm: table rows over the 26 fields (default 200000)\n"
            "  --dim K --bottom B --top T   dlrm: row dim, MLP hidden units (16, 32, 32)\n"
            "  --batch N         dlrm: examples per lookup and update (default 32)\n"
            "  --emb-lr X        dlrm: the tables' Adagrad rate (default 0.05)\n"
            "  --emb-cache N     dlrm: each worker caches up to N hot rows of other holders\n"
            "                    (default 0: SHS_EMB_CACHE_ROWS, off unless set)\n"
            "  --emb-cache-age K dlrm: a cached row serves at most K lookups (default 0:\n"
            "                    SHS_EMB_CACHE_AGE)\n"
            "  --emb-cache-own refetch|keep  dlrm: a rank's own updates make its cached\n"
            "                    rows be fetched again, or leave them until they are K\n"
            "                    lookups old (default: SHS_EMB_CACHE_OWN)\n"
            "  --tables sharded|replicated  dlrm: tables on the holders, or all of them\n"
            "                    in every rank's model array, synced with it (default\n"
            "                    sharded; --mode single: in the process)\n"
            "  --save DIR        dlrm: write the final model (the ranks' averaged dense\n"
            "                    part, the tables) to DIR\n"
            "  --eval-only DIR   dlrm: load DIR's model into this job's ranks (any\n"
            "                    number, --mode none or single) and evaluate it on the\n"
            "                    held-out set of the run that saved it\n");
}

static void defaults(ctr_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->mode = "none";
    o->workers = 2;
    o->examples = 400000;
    o->eval_n = 20000;
    o->seed = 3;
    o->ctr = 0.03;
    o->shape = (ctr_shape_t){.buckets = 4096, .dim = 4, .hidden = 16};
    o->lr = 0.05f;
    o->lr_end = 0.1f;
    o->fr_every = 2000;
    o->path = "pull";
    /* the ranks of the demo share one machine's CPUs: pinning every rank's
     * shadow thread to the same "last" CPU would only crowd it */
    o->pin = "none";
    o->checkpoints = 6;
    o->bmuf_eta = o->bmuf_zeta = o->easgd_alpha = -1.0f;
    o->bmuf_nesterov = -1;
    o->model = "wide";
    o->rows = 200000;
    o->bottom = 32;
    o->top = 32;
    o->batch = 32;
    o->emb_lr = 0.05f;
    o->tables = "sharded";
    o->stall_rank = -1;
    o->stall_after = 10;
    o->restart_rank = CTR_RESTART_NONE;
    o->restart_after = 10;
    o->restart_every = 10;
    o->restarts = 1;
}

/* --params P: the number of buckets that gives about P parameters */
static void buckets_for(ctr_opts_t *o)
{
    ctr_layout_t l;
    o->shape.buckets = 1;
    ctr_layout_init(&l, &o->shape);
    size_t per_bucket = (size_t)CTR_FIELDS * (size_t)(1 + o->shape.dim);
    size_t fixed = l.count - per_bucket;
    o->shape.buckets = o->target_params > fixed + per_bucket
                           ? (uint32_t)((o->target_params - fixed) / per_bucket)
                           : 1;
}

enum { STALL_RANK = 1, STALL_FOR = 2, STALL_AFTER = 4 };
enum { OPT_EMB_CACHE = 1000, OPT_EMB_CACHE_AGE, OPT_EMB_CACHE_OWN };

/* the whole argument, a count 0..2^28 (the library checks its own range) */
static uint32_t count_arg(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || s[0] == '-' || v > (1ull << 28))
        ctr_die("%s: not a count from 0 to %u: %s", opt, 1u << 28, s);
    return (uint32_t)v;
}

/* the whole argument, a number (an integer if asked): a typo must not stop
 * rank 0 for 0 s */
static double stall_arg(const char *opt, const char *s, bool integer)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v) ||
        (integer && (v != floor(v) || fabs(v) > INT_MAX)))
        ctr_die("%s: not %s: %s", opt, integer ? "a rank number" : "a number of seconds", s);
    return v;
}

/* the rank's bound (R < ranks) is checked once the context is up (stall.c) */
static void check_stall(const ctr_opts_t *o, int given)
{
    if (!(given & STALL_RANK))
        ctr_die("--stall-for/--stall-after: need --stall-rank R (the rank to stop)");
    if (!(given & STALL_FOR))
        ctr_die("--stall-rank: needs --stall-for S (the seconds it stays stopped)");
    if (o->stall_rank < 0)
        ctr_die("--stall-rank %d: not a rank (0 or more, below the number of ranks)",
                o->stall_rank);
    if (!(o->stall_for > 0))
        ctr_die("--stall-for %g: must be more than 0 seconds", o->stall_for);
    if (!(o->stall_after >= 0))
        ctr_die("--stall-after %g: must be 0 seconds or more", o->stall_after);
    if (o->eval_only != NULL)
        ctr_die("--stall-rank: not with --eval-only (it has no pass to stall)");
}

/* --restart-after / --restart-every: seconds, or N% of the victim's share */
static double restart_arg(const char *opt, const char *s, int *pct)
{
    char buf[64];
    size_t n = strlen(s);
    *pct = n > 1 && n < sizeof(buf) && s[n - 1] == '%';
    if (*pct) {
        memcpy(buf, s, n - 1);
        buf[n - 1] = '\0';
        s = buf;
    }
    double v = stall_arg(opt, s, false);
    if (*pct && !(v >= 0 && v < 100))
        ctr_die("%s %s%%: a share of the pass, 0 to 100 %%", opt, s);
    return v;
}

/* What a rejoined rank can take part in (docs/failures.md, "Rejoining"). */
static void check_restart(const ctr_opts_t *o)
{
    if (o->restart_rank < 0 && o->restart_rank != CTR_RESTART_ANY)
        ctr_die("--restart-rank %d: not a rank (0 or more) nor any", o->restart_rank);
    if (strcmp(o->mode, "s-ma") != 0 && strcmp(o->mode, "s-bmuf") != 0)
        ctr_die("--restart-rank: needs --mode s-ma or s-bmuf (a rejoined rank's engine takes "
                "MA or BMUF in the background), not %s", o->mode);
    if (strcmp(o->model, "wide") != 0 || o->sync_only_s > 0 || o->eval_only != NULL)
        ctr_die("--restart-rank: only with --model wide, training (no --sync-only or "
                "--eval-only)");
    if (o->restarts < 1 || !(o->restart_every > 0))
        ctr_die("--restarts %d --restart-every %g: need at least one restart, a positive "
                "interval", o->restarts, o->restart_every);
}

void ctr_parse(int argc, char **argv, ctr_opts_t *o)
{
    defaults(o);
    static const struct option lo[] = {
        {"mode", 1, NULL, 'm'},     {"ds", 1, NULL, 'g'},        {"workers", 1, NULL, 'w'},
        {"examples", 1, NULL, 'T'}, {"eval", 1, NULL, 'E'},      {"seed", 1, NULL, 's'},
        {"ctr", 1, NULL, 'c'},      {"buckets", 1, NULL, 'B'},   {"dim", 1, NULL, 'K'},
        {"hidden", 1, NULL, 'H'},   {"params", 1, NULL, 'P'},    {"lr", 1, NULL, 'l'},
        {"fr-every", 1, NULL, 'k'}, {"interval-us", 1, NULL, 'i'}, {"path", 1, NULL, 'p'},
        {"pin", 1, NULL, 'x'},      {"checkpoints", 1, NULL, 'C'}, {"out", 1, NULL, 'o'},
        {"label", 1, NULL, 'L'},    {"sync-only", 1, NULL, 'S'}, {"help", 0, NULL, 'h'},
        {"worker-nice", 1, NULL, 'n'},  {"lr-end", 1, NULL, 'e'},
        {"bmuf-eta", 1, NULL, 'a'},     {"bmuf-zeta", 1, NULL, 'z'},
        {"bmuf-nesterov", 1, NULL, 'N'}, {"easgd-alpha", 1, NULL, 'A'},
        {"dump", 0, NULL, 'D'},         {"no-finish", 0, NULL, 'Q'},
        {"model", 1, NULL, 'M'},        {"rows", 1, NULL, 'R'},
        {"bottom", 1, NULL, 'b'},       {"top", 1, NULL, 't'},
        {"batch", 1, NULL, 'j'},        {"emb-lr", 1, NULL, 'u'},
        {"tables", 1, NULL, 'y'},       {"save", 1, NULL, 'O'},
        {"eval-only", 1, NULL, 'V'},
        {"emb-cache", 1, NULL, OPT_EMB_CACHE}, {"emb-cache-age", 1, NULL, OPT_EMB_CACHE_AGE},
        {"emb-cache-own", 1, NULL, OPT_EMB_CACHE_OWN},
        {"stall-rank", 1, NULL, 'r'},    {"stall-for", 1, NULL, 'f'},
        {"stall-after", 1, NULL, 'd'},
        {"restart-rank", 1, NULL, 'X'},  {"restart-after", 1, NULL, 'Y'},
        {"restarts", 1, NULL, 'Z'},      {"restart-every", 1, NULL, 'W'},
        {NULL, 0, NULL, 0}};
    int dim_set = 0;
    int stall = 0; /* STALL_* bits of the --stall-* options given */
    int pct_after = -1, pct_every = -1; /* --restart-after/-every in %: 1, in s: 0 */
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->mode = optarg; break;
        case 'g': o->ds = atoi(optarg); break;
        case 'w': o->workers = atoi(optarg); break;
        case 'T': o->examples = strtoull(optarg, NULL, 0); break;
        case 'E': o->eval_n = strtoull(optarg, NULL, 0); break;
        case 's': o->seed = strtoull(optarg, NULL, 0); break;
        case 'c': o->ctr = atof(optarg); break;
        case 'B': o->shape.buckets = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'K': o->shape.dim = atoi(optarg); dim_set = 1; break;
        case 'H': o->shape.hidden = atoi(optarg); break;
        case 'P': o->target_params = (size_t)strtod(optarg, NULL); break;
        case 'l': o->lr = (float)atof(optarg); break;
        case 'k': o->fr_every = strtoull(optarg, NULL, 0); break;
        case 'i': o->interval_us = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'p': o->path = optarg; break;
        case 'x': o->pin = optarg; break;
        case 'C': o->checkpoints = atoi(optarg); break;
        case 'o': o->out = optarg; break;
        case 'L': o->label = optarg; break;
        case 'S': o->sync_only_s = atof(optarg); break;
        case 'n': o->worker_nice = atoi(optarg); break;
        case 'e': o->lr_end = (float)atof(optarg); break;
        case 'a': o->bmuf_eta = (float)atof(optarg); break;
        case 'z': o->bmuf_zeta = (float)atof(optarg); break;
        case 'N': o->bmuf_nesterov = atoi(optarg); break;
        case 'A': o->easgd_alpha = (float)atof(optarg); break;
        case 'D': o->dump = 1; break;
        case 'Q': o->no_finish = 1; break;
        case 'M': o->model = optarg; break;
        case 'R': o->rows = strtoull(optarg, NULL, 0); break;
        case 'b': o->bottom = atoi(optarg); break;
        case 't': o->top = atoi(optarg); break;
        case 'j': o->batch = atoi(optarg); break;
        case 'u': o->emb_lr = (float)atof(optarg); break;
        case OPT_EMB_CACHE: o->emb_cache = count_arg("--emb-cache", optarg); break;
        case OPT_EMB_CACHE_AGE: o->emb_cache_age = count_arg("--emb-cache-age", optarg); break;
        case OPT_EMB_CACHE_OWN:
            if (strcmp(optarg, "refetch") != 0 && strcmp(optarg, "keep") != 0)
                ctr_die("--emb-cache-own %s: refetch or keep", optarg);
            o->emb_cache_own = strcmp(optarg, "keep") == 0 ? 2 : 1;
            break;
        case 'y': o->tables = optarg; break;
        case 'O': o->save = optarg; break;
        case 'V': o->eval_only = optarg; break;
        case 'r':
            o->stall_rank = (int)stall_arg("--stall-rank", optarg, true);
            stall |= STALL_RANK;
            break;
        case 'f':
            o->stall_for = stall_arg("--stall-for", optarg, false);
            stall |= STALL_FOR;
            break;
        case 'd':
            o->stall_after = stall_arg("--stall-after", optarg, false);
            stall |= STALL_AFTER;
            break;
        case 'X':
            o->restart_rank = strcmp(optarg, "any") == 0
                                  ? CTR_RESTART_ANY
                                  : (int)stall_arg("--restart-rank", optarg, true);
            break;
        case 'Y': o->restart_after = restart_arg("--restart-after", optarg, &pct_after); break;
        case 'Z': o->restarts = (int)stall_arg("--restarts", optarg, true); break;
        case 'W': o->restart_every = restart_arg("--restart-every", optarg, &pct_every); break;
        case 'h': ctr_usage(stdout); exit(0);
        default: ctr_usage(stderr); exit(2);
        }
    }
    if (o->workers < 1 || o->workers > CTR_MAX_WORKERS || o->examples == 0 || o->eval_n == 0 ||
        o->fr_every == 0 || o->checkpoints < 1 || o->checkpoints > CTR_MAX_CKPT ||
        o->shape.buckets == 0 || o->shape.dim < 1 || o->shape.hidden < 1 || !(o->lr > 0) ||
        !(o->ctr > 0 && o->ctr < 0.5)) {
        ctr_usage(stderr);
        exit(2);
    }
    bool dlrm = strcmp(o->model, "dlrm") == 0;
    if ((!dlrm && strcmp(o->model, "wide") != 0) || o->batch < 1 || o->batch > 4096 ||
        (strcmp(o->tables, "sharded") != 0 && strcmp(o->tables, "replicated") != 0) ||
        !(o->emb_lr > 0)) {
        ctr_usage(stderr);
        exit(2);
    }
    if (dlrm && !dim_set)
        o->shape.dim = 16;
    /* the sharded table has one more worker, the evaluator's (at most 64) */
    if (dlrm && o->workers > CTR_MAX_WORKERS - 1)
        ctr_die("--model dlrm: at most %d workers", CTR_MAX_WORKERS - 1);
    if (o->save != NULL && !dlrm)
        ctr_die("--save: only with --model dlrm");
    /* FR-EASGD's owners serve their inboxes only in rounds and the finish:
     * a barrier instead of the finish leaves slower ranks waiting (shadow.h) */
    if (o->no_finish && strcmp(o->mode, "fr-easgd") == 0)
        ctr_die("--no-finish: not with fr-easgd (its finish serves the ranks' last deltas)");
    if (stall != 0)
        check_stall(o, stall);
    if (pct_after >= 0 && pct_every >= 0 && pct_after != pct_every)
        ctr_die("--restart-after and --restart-every: both in seconds or both in %%");
    o->restart_pct = pct_after > 0 || pct_every > 0;
    if (o->restart_rank != CTR_RESTART_NONE)
        check_restart(o);
    if (o->eval_only != NULL)
        ctr_hybrid_read_header(o);
    if (o->target_params > 0)
        buckets_for(o);
    if (o->label == NULL)
        o->label = o->mode;
}

void ctr_mode_of(ctr_run_t *r)
{
    const char *m = r->o.mode;
    r->sync = strcmp(m, "none") != 0 && strcmp(m, "single") != 0;
    r->foreground = strncmp(m, "fr-", 3) == 0;
    if (!r->sync)
        return;
    const char *a = m + (r->foreground ? 3 : 2);
    if (strncmp(m, "s-", 2) != 0 && !r->foreground)
        ctr_die("unknown mode %s", m);
    if (strcmp(a, "ma") == 0)
        r->algo = SHS_SHADOW_MA;
    else if (strcmp(a, "bmuf") == 0)
        r->algo = SHS_SHADOW_BMUF;
    else if (strcmp(a, "easgd") == 0)
        r->algo = SHS_SHADOW_EASGD;
    else
        ctr_die("unknown mode %s", m);
}


/*
 * The embedding tables' knobs (algorithms/embedding/): when a lookup asks a
 * holder to pack its rows rather than reading them, and how long an idle
 * apply thread naps. They resolve into the context's shs__config_t like
 * every other table, where the tables read them at create.
 */
#include "algorithms/knobs.h"

static const char *const cache_own_words[] = {"refetch", "keep", NULL};
static const int cache_own_values[] = {0, 1};

static const shs__knob_t emb_knobs[] = {
    /* 3: the owner path costs a request through the holder's apply thread,
     * the READ path one READ per run of adjacent rows. On Soft-RoCE under
     * TCG (docs/results/embedding.md) the owner path won from 16 rows per
     * holder up. auto measures the crossover at create (algorithms/
     * embedding/calibrate.c), but there it timed isolated requests to a
     * napping apply thread and gave 28 to 393 between two tables of one
     * run, where the benchmark's crossover is below 16: not the default
     * until it measures the loaded regime. On a NIC, where READs cost
     * microseconds and no holder CPU, try auto or a large value. */
    SHS_KNOB_INT_AUTO("SHS_EMB_OWNER_READS", emb_owner_reads, "3", 0, 1 << 30,
                      "embedding lookups (path auto): a holder packs its rows itself once "
                      "reading them would take more READs than this; auto: measured at "
                      "create (every rank, the median)"),
    /* 200 us: at most that is added to an update's latency by an idle
     * holder, whose CPU stays free for the workers that share it. */
    SHS_KNOB_INT("SHS_EMB_APPLY_NAP_US", emb_apply_nap_us, "200", 1, 1000000,
                 "embedding holders: longest nap of an idle apply thread between sweeps of "
                 "its inbox (us)"),
    /* auto: about 512 KiB of slots per worker and holder, 4 to 32 (on
     * Soft-RoCE, 4 ranks, dim 64, batches of 64 ids: 4 slots left the
     * workers waiting for a free slot 57 % of the time, 16 slots 2 %). */
    SHS_KNOB_INT_AUTO("SHS_EMB_SLOTS", emb_slots, "auto", 1, 64,
                      "embedding tables: updates in flight per worker and holder: auto "
                      "(512 KiB of slots, 4..32) or 1..64; a holder's inbox is ranks x workers "
                      "x this many slots of max_batch rows"),
    /* 4: a row fails its check only when a READ overlaps the holder's
     * update of that row, which takes about as long as copying the row;
     * the next read comes a round trip later and finds it whole unless the
     * row is updated back to back (a hot row). Past 4 such reads the owner
     * path, which one more round trip always serves, is the cheaper way. */
    SHS_KNOB_INT("SHS_EMB_READ_TRIES", emb_read_tries, "64", 1, 1000,
                 "embedding lookups (READ path): reads of a row whose check word shows it "
                 "was being updated, before its holder is asked to copy it instead"),
    SHS_KNOB_INT("SHS_EMB_CACHE_ROWS", emb_cache_rows, "0", 0, 1 << 28,
                 "embedding lookups: rows of other holders each worker keeps in its hot-row "
                 "cache (0: no cache); a table's cache_rows param overrides it"),
    SHS_KNOB_INT("SHS_EMB_CACHE_AGE", emb_cache_age, "16", 1, 1000000,
                 "embedding lookups: a cached row is served for at most this many of the "
                 "worker's lookups, then fetched again (the staleness bound)"),
    /* refetch: a rank sees its own updates at once after its flush; but a
     * trainer updates the very rows it reads, so its cached rows go stale
     * as fast as they come (the CTR trainer: 5.5 % hits). keep: Hogwild's
     * staleness for its own updates too, bounded by SHS_EMB_CACHE_AGE. */
    SHS_KNOB_ENUM("SHS_EMB_CACHE_OWN", emb_cache_own, "refetch", cache_own_words,
                  cache_own_values,
                  "embedding lookups with a cache: this rank's own updates make its workers "
                  "fetch a row again (refetch) or leave the cached copy until it is "
                  "SHS_EMB_CACHE_AGE lookups old (keep)"),
};

const shs__knob_table_t shs__emb_knob_table = SHS_KNOB_TABLE("algorithms", emb_knobs, NULL);

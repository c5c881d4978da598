/*
 * Knob tables: how a layer declares its SHS_* knobs (name, default, help,
 * parser, the field it sets), and the one list of every layer's table that
 * runtime/config.c resolves, prints and checks misspellings against.
 *
 * A layer writes one table in a file of its own (runtime/knobs.c,
 * transport/knobs.c, algorithms/coll_knobs.c, ...) with the reason for each
 * default beside it, and the top of the link lists it in shs__knob_tables
 * (algorithms/knobs.c). Each default goes through the same parser as a user
 * value, so a bad default fails every test run rather than hiding.
 */
#ifndef SHS_RUNTIME_KNOB_H
#define SHS_RUNTIME_KNOB_H

#include <stdbool.h>
#include <stddef.h>

#include <shadowsync/status.h>

#include "runtime/config.h"

typedef struct shs__knob shs__knob_t;

/* Parse val for knob k into field (k's field inside the config). On a bad
 * value: log it, naming the knob (shs__knob_bad_value), SHS_ERR_CONFIG. */
typedef shs_status_t (*shs__knob_parse_fn)(const shs__knob_t *k, const char *val, void *field);

struct shs__knob {
    const char *name;
    const char *def;
    const char *help;
    shs__knob_parse_fn parse;
    size_t offset;            /* of the field in shs__config_t */
    size_t field_size;
    long long min, max;
    const char *const *words; /* enum words, NULL-terminated, mapped to values[] */
    const int *values;
    bool secret;              /* the value never reaches a log */
};

typedef struct shs__knob_table {
    const char *layer; /* who declares it, for errors */
    const shs__knob_t *knobs;
    size_t count;
    /* Checks across knobs and values derived from elsewhere (launchers),
     * run in list order once every table has parsed; NULL for none.
     * verbose: log at info what was derived. */
    shs_status_t (*finish)(shs__config_t *cfg, shs__getenv_fn getenv_fn, bool verbose);
} shs__knob_table_t;

#define SHS_KNOB_TABLE(layer, knobs, finish) \
    {layer, knobs, sizeof(knobs) / sizeof((knobs)[0]), finish}

/*
 * Every layer's table, NULL-terminated, defined by the top of the link
 * (algorithms/knobs.c), the one place that may name every layer.
 *
 * Why a list rather than constructors that register each table (UCX's
 * UCS_CONFIG_REGISTER_TABLE): UCX's components are shared objects whose
 * constructors always run, but libshadowsync.a is a static archive, and the
 * linker pulls a member only for a symbol someone references. A table file
 * that nothing references would be dropped without a word, and its knobs
 * would vanish from the resolution, the misspelling check and the README. A
 * runtime reference to this list pulls every table in (and a link without
 * the top layer fails loudly). A weak default here would not help: a weak
 * definition does not make the linker look for the strong one in an archive.
 * The reference is data the runtime is handed, not a call up a layer: the
 * runtime includes no header above it.
 */
extern const shs__knob_table_t *const shs__knob_tables[];

/* The runtime's own table (runtime/knobs.c). */
extern const shs__knob_table_t shs__runtime_knob_table;

/* ---- parsers for the tables ---- */

/* Integer in min..max. */
shs_status_t shs__knob_parse_int(const shs__knob_t *k, const char *val, void *field);
/* "auto" (-1) or an integer in min..max. */
shs_status_t shs__knob_parse_int_auto(const shs__knob_t *k, const char *val, void *field);
/* A byte count in min..max with an optional k/m/g suffix, into a size_t. */
shs_status_t shs__knob_parse_size(const shs__knob_t *k, const char *val, void *field);
/* A string that fits the field. */
shs_status_t shs__knob_parse_str(const shs__knob_t *k, const char *val, void *field);
/* One of k->words (case-insensitive), as the matching k->values entry. */
shs_status_t shs__knob_parse_enum(const shs__knob_t *k, const char *val, void *field);
/* What a thread may be pinned to (shs__pin_spec_valid), as a string. */
shs_status_t shs__knob_parse_pin(const shs__knob_t *k, const char *val, void *field);

/* Log "invalid NAME=VALUE: why" (the value hidden for a secret knob). */
shs_status_t shs__knob_bad_value(const shs__knob_t *k, const char *val, const char *why);

#define SHS_KNOB_FIELD(f) offsetof(shs__config_t, f), sizeof(((shs__config_t *)0)->f)
#define SHS_KNOB_INT(n, f, d, lo, hi, h) \
    {n, d, h, shs__knob_parse_int, SHS_KNOB_FIELD(f), lo, hi, NULL, NULL, false}
#define SHS_KNOB_INT_AUTO(n, f, d, lo, hi, h) \
    {n, d, h, shs__knob_parse_int_auto, SHS_KNOB_FIELD(f), lo, hi, NULL, NULL, false}
#define SHS_KNOB_SIZE(n, f, d, lo, hi, h) \
    {n, d, h, shs__knob_parse_size, SHS_KNOB_FIELD(f), lo, hi, NULL, NULL, false}
#define SHS_KNOB_STR(n, f, d, p, h) {n, d, h, p, SHS_KNOB_FIELD(f), 0, 0, NULL, NULL, false}
#define SHS_KNOB_ENUM(n, f, d, w, v, h) \
    {n, d, h, shs__knob_parse_enum, SHS_KNOB_FIELD(f), 0, 0, w, v, false}

/* The most ranks a job may have (SHS_RANK, SHS_SIZE and the launchers'). */
#define SHS_KNOB_RANKS_MAX (1 << 20)
/* A day: the longest any timeout knob may be set to. */
#define SHS_KNOB_MS_MAX (24 * 3600 * 1000)

#endif

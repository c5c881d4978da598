/*
 * Resolving the knobs: every registered table (runtime/knob.h) from the
 * defaults, then the environment, then each table's finishing checks; the
 * knobs the environment changed are logged at info, and near-misses of knob
 * names warned about. Also the table printer behind the README.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/config.h"
#include "runtime/knob.h"
#include "runtime/log.h"

/* Entry i of the tables taken one after the other, NULL past the end. */
static const shs__knob_t *knob_at(size_t i)
{
    for (const shs__knob_table_t *const *t = shs__knob_tables; *t != NULL; t++) {
        if (i < (*t)->count)
            return &(*t)->knobs[i];
        i -= (*t)->count;
    }
    return NULL;
}

/* Parse one table's defaults, then what the environment sets. Keeps going
 * after a bad value: one run should name every bad knob, not the first. */
static shs_status_t parse_table(const shs__knob_table_t *t, shs__config_t *c,
                                shs__getenv_fn getenv_fn)
{
    shs_status_t first_err = SHS_OK;

    for (size_t i = 0; i < t->count; i++) {
        const shs__knob_t *k = &t->knobs[i];
        const char *v = getenv_fn(k->name);
        shs_status_t st = k->parse(k, k->def, (char *)c + k->offset);
        if (st == SHS_OK && v != NULL)
            st = k->parse(k, v, (char *)c + k->offset);
        if (st != SHS_OK && first_err == SHS_OK)
            first_err = st;
    }
    return first_err;
}

static void log_changed(const shs__knob_table_t *t, shs__getenv_fn getenv_fn)
{
    for (size_t i = 0; i < t->count; i++) {
        const shs__knob_t *k = &t->knobs[i];
        const char *v = getenv_fn(k->name);
        if (v != NULL && strcmp(v, k->def) != 0)
            shs__log(SHS_LOG_LVL_INFO, __FILE__, __LINE__, "%s=%s (default %s)", k->name,
                     k->secret ? "(hidden)" : v, *k->def ? k->def : "\"\"");
    }
}

shs_status_t shs__config_load_from(shs__config_t *cfg, shs__getenv_fn getenv_fn)
{
    const shs__knob_table_t *const *t;
    shs__config_t c;
    shs_status_t st, first_err = SHS_OK;

    if (cfg == NULL || getenv_fn == NULL)
        return SHS_ERR_INVALID_ARG;
    memset(&c, 0, sizeof(c));
    for (t = shs__knob_tables; *t != NULL; t++)
        if ((st = parse_table(*t, &c, getenv_fn)) != SHS_OK && first_err == SHS_OK)
            first_err = st;
    if (first_err != SHS_OK)
        return first_err;

    bool verbose = c.log_level >= SHS_LOG_LVL_INFO;
    for (t = shs__knob_tables; verbose && *t != NULL; t++)
        log_changed(*t, getenv_fn);
    for (t = shs__knob_tables; *t != NULL; t++)
        if ((*t)->finish != NULL && (st = (*t)->finish(&c, getenv_fn, verbose)) != SHS_OK)
            return st;
    *cfg = c;
    return SHS_OK;
}

static const char *real_getenv(const char *name)
{
    return getenv(name);
}

extern char **environ;

/* Edit distance of two short names, capped at 64 characters each. */
static size_t edit_distance(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b), row[65];
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The first knob within two edits of name (len bytes), NULL for none. */
static const shs__knob_t *nearest_knob(const char *name, size_t len)
{
    const shs__knob_t *k;
    for (size_t i = 0; (k = knob_at(i)) != NULL; i++)
        if (edit_distance(name, len, k->name) <= 2)
            return k;
    return NULL;
}

/* A misspelt knob is silently ignored otherwise. Only near-misses warn, and
 * never the prefixes that tools and the guest harness keep for themselves
 * (SHS_VM_*, SHS_TEST_*), however close a future knob's name comes to them. */
static void warn_misspelt_knobs(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "SHS_", 4) != 0 || strncmp(*e, "SHS_VM_", 7) == 0 ||
            strncmp(*e, "SHS_TEST_", 9) == 0)
            continue;
        size_t len = strcspn(*e, "=");
        if (shs__config_knob_index_n(*e, len) >= 0)
            continue;
        const shs__knob_t *near = nearest_knob(*e, len);
        if (near != NULL)
            SHS_WARN("%.*s is not a knob (ignored); did you mean %s?", (int)len, *e, near->name);
    }
}

shs_status_t shs__config_load(shs__config_t *cfg)
{
    shs_status_t st = shs__config_load_from(cfg, real_getenv);
    if (st != SHS_OK)
        return st;
    shs__log_set_level(cfg->log_level);
    if (cfg->rank >= 0)
        shs__log_set_rank(cfg->rank);
    warn_misspelt_knobs();
    return SHS_OK;
}

size_t shs__config_knob_count(void)
{
    size_t n = 0;
    for (const shs__knob_table_t *const *t = shs__knob_tables; *t != NULL; t++)
        n += (*t)->count;
    return n;
}

const char *shs__config_knob_name(size_t i)
{
    const shs__knob_t *k = knob_at(i);
    return k != NULL ? k->name : NULL;
}

const char *shs__config_knob_default(size_t i)
{
    const shs__knob_t *k = knob_at(i);
    return k != NULL ? k->def : NULL;
}

int shs__config_knob_index_n(const char *name, size_t len)
{
    const shs__knob_t *k;
    for (size_t i = 0; (k = knob_at(i)) != NULL; i++)
        if (strlen(k->name) == len && strncmp(k->name, name, len) == 0)
            return (int)i;
    return -1;
}

void shs__config_print_table(FILE *f)
{
    const shs__knob_t *k;
    fprintf(f, "| knob | default | meaning |\n| --- | --- | --- |\n");
    for (size_t i = 0; (k = knob_at(i)) != NULL; i++)
        fprintf(f, "| `%s` | `%s` | %s |\n", k->name, *k->def ? k->def : "\"\"", k->help);
}

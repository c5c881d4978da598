/*
 * shs_knobs: the SHS_* knob table as markdown, from the table itself
 * (every layer's table, runtime/knob.h), so that docs/knobs.md never
 * drifts from the code.
 *
 *   shs_knobs                  print the table
 *   shs_knobs --check FILE     exit 1 when FILE's table (between the markers
 *                              below) differs from the code's
 *   shs_knobs --update FILE    rewrite FILE's table in place
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/config.h"

#define BEGIN_MARK "<!-- knobs:begin (tests/unit/knobs.c generates this table) -->\n"
#define END_MARK "<!-- knobs:end -->\n"

static char *slurp(FILE *f, size_t *len_p)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t n; buf != NULL && (n = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (cap - len < 2) {
            char *bigger = realloc(buf, cap *= 2);
            if (bigger == NULL)
                free(buf);
            buf = bigger;
        }
    }
    if (buf != NULL)
        buf[len] = '\0';
    *len_p = len;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc == 1) {
        shs__config_print_table(stdout);
        return 0;
    }
    if (argc != 3 || (strcmp(argv[1], "--check") != 0 && strcmp(argv[1], "--update") != 0)) {
        fprintf(stderr, "usage: shs_knobs [--check|--update docs/knobs.md]\n");
        return 2;
    }
    size_t tlen, flen;
    FILE *t = tmpfile(), *f = fopen(argv[2], "r");
    if (t == NULL || f == NULL) {
        perror(argv[2]);
        return 2;
    }
    shs__config_print_table(t);
    rewind(t);
    char *table = slurp(t, &tlen), *doc = slurp(f, &flen);
    fclose(t);
    fclose(f);
    char *b = doc != NULL ? strstr(doc, BEGIN_MARK) : NULL;
    char *e = b != NULL ? strstr(b, END_MARK) : NULL;
    int rc = 0;
    if (table == NULL || b == NULL || e == NULL) {
        fprintf(stderr, "shs_knobs: %s has no knob table markers\n", argv[2]);
        rc = 2;
        goto out;
    }
    b += strlen(BEGIN_MARK);
    bool same = (size_t)(e - b) == tlen && memcmp(b, table, tlen) == 0;
    if (strcmp(argv[1], "--check") == 0) {
        if (!same)
            fprintf(stderr, "shs_knobs: the knob table in %s is out of date; run "
                            "`shs_knobs --update %s`\n", argv[2], argv[2]);
        rc = same ? 0 : 1;
        goto out;
    }
    if (same)
        goto out;
    f = fopen(argv[2], "w");
    if (f == NULL || fwrite(doc, 1, (size_t)(b - doc), f) != (size_t)(b - doc) ||
        fwrite(table, 1, tlen, f) != tlen || fputs(e, f) == EOF || fclose(f) != 0) {
        perror(argv[2]);
        rc = 2;
    }
out:
    free(table);
    free(doc);
    return rc;
}

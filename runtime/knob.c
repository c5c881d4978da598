/* The parsers knob tables use: each value is checked whole (no leading
 * blanks, no trailing junk, within the knob's range) and a bad one is
 * logged with the knob's name and what was expected. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/knob.h"
#include "runtime/log.h"

shs_status_t shs__knob_bad_value(const shs__knob_t *k, const char *val, const char *why)
{
    SHS_ERROR("invalid %s=\"%s\": %s", k->name, k->secret ? "(hidden)" : val, why);
    return SHS_ERR_CONFIG;
}

static shs_status_t parse_ll(const shs__knob_t *k, const char *val, long long *out)
{
    char *end;
    char why[96];

    snprintf(why, sizeof(why), "expected an integer in %lld..%lld", k->min, k->max);
    /* strtoll would accept leading blanks and a '+'; a knob is a plain number. */
    if (!(isdigit((unsigned char)val[0]) || (val[0] == '-' && isdigit((unsigned char)val[1]))))
        return shs__knob_bad_value(k, val, why);
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno != 0 || *end != '\0' || v < k->min || v > k->max)
        return shs__knob_bad_value(k, val, why);
    *out = v;
    return SHS_OK;
}

shs_status_t shs__knob_parse_int(const shs__knob_t *k, const char *val, void *field)
{
    long long v;
    shs_status_t st = parse_ll(k, val, &v);
    if (st == SHS_OK)
        *(int *)field = (int)v;
    return st;
}

shs_status_t shs__knob_parse_int_auto(const shs__knob_t *k, const char *val, void *field)
{
    if (strcasecmp(val, "auto") == 0) {
        *(int *)field = -1;
        return SHS_OK;
    }
    return shs__knob_parse_int(k, val, field);
}

shs_status_t shs__knob_parse_size(const shs__knob_t *k, const char *val, void *field)
{
    char *end;
    char why[112];
    unsigned long long mult = 1;

    snprintf(why, sizeof(why), "expected a byte count in %lld..%lld (k/m/g suffix allowed)",
             k->min, k->max);
    if (!isdigit((unsigned char)val[0]))
        return shs__knob_bad_value(k, val, why);
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno != 0)
        return shs__knob_bad_value(k, val, why);
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mult = 1ull << 10; end++; break;
    case 'm': case 'M': mult = 1ull << 20; end++; break;
    case 'g': case 'G': mult = 1ull << 30; end++; break;
    default: return shs__knob_bad_value(k, val, why);
    }
    if (*end != '\0' || v > (unsigned long long)k->max / mult ||
        v * mult < (unsigned long long)k->min)
        return shs__knob_bad_value(k, val, why);
    *(size_t *)field = (size_t)(v * mult);
    return SHS_OK;
}

shs_status_t shs__knob_parse_str(const shs__knob_t *k, const char *val, void *field)
{
    size_t len = strlen(val);
    if (len >= k->field_size) {
        char why[64];
        snprintf(why, sizeof(why), "longer than %zu characters", k->field_size - 1);
        return shs__knob_bad_value(k, val, why);
    }
    memcpy(field, val, len + 1);
    return SHS_OK;
}

shs_status_t shs__knob_parse_enum(const shs__knob_t *k, const char *val, void *field)
{
    for (size_t i = 0; k->words[i] != NULL; i++) {
        if (strcasecmp(val, k->words[i]) == 0) {
            *(int *)field = k->values[i];
            return SHS_OK;
        }
    }
    char why[128];
    size_t used = (size_t)snprintf(why, sizeof(why), "expected one of");
    for (size_t i = 0; k->words[i] != NULL && used < sizeof(why); i++)
        used += (size_t)snprintf(why + used, sizeof(why) - used, "%s%s", i ? ", " : " ",
                                 k->words[i]);
    return shs__knob_bad_value(k, val, why);
}

bool shs__cpulist_valid(const char *s)
{
    /* item[,item]...: item = N or N-M with N <= M */
    if (s == NULL || *s == '\0')
        return false;
    while (*s != '\0') {
        if (!isdigit((unsigned char)*s))
            return false;
        char *end;
        errno = 0;
        unsigned long lo = strtoul(s, &end, 10), hi = lo;
        if (errno != 0 || lo > 1u << 20)
            return false;
        if (*end == '-') {
            if (!isdigit((unsigned char)end[1]))
                return false;
            hi = strtoul(end + 1, &end, 10);
            if (errno != 0 || hi < lo || hi > 1u << 20)
                return false;
        }
        if (*end == ',' && end[1] != '\0')
            end++;
        else if (*end != '\0')
            return false;
        s = end;
    }
    return true;
}

bool shs__pin_spec_valid(const char *s)
{
    return s != NULL && (strcmp(s, "auto") == 0 || strcmp(s, "none") == 0 ||
                         shs__cpulist_valid(s));
}

shs_status_t shs__knob_parse_pin(const shs__knob_t *k, const char *val, void *field)
{
    if (!shs__pin_spec_valid(val))
        return shs__knob_bad_value(k, val,
                                   "expected auto, none or a CPU list such as 3, 2-3 or 0,2-3");
    return shs__knob_parse_str(k, val, field);
}

/* GID selection from sysfs gid_attrs: no verbs here, so tests can feed a fake tree. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/transport.h"

/* Largest GID table we scan; rxe has 1024 entries, most of them empty. */
#define SHS__GID_SCAN_MAX 1024

bool shs__gid_parse(const char *text, uint8_t gid[16])
{
    int n = 0;
    const char *p = text;

    while (n < 8) {
        unsigned v = 0;
        int digits = 0;
        while (isxdigit((unsigned char)*p) && digits < 4) {
            int c = tolower((unsigned char)*p);
            v = (v << 4) | (unsigned)(isdigit(c) ? c - '0' : c - 'a' + 10);
            p++;
            digits++;
        }
        if (digits != 4)
            return false;
        gid[2 * n] = (uint8_t)(v >> 8);
        gid[2 * n + 1] = (uint8_t)v;
        n++;
        if (n < 8) {
            if (*p != ':')
                return false;
            p++;
        }
    }
    while (*p == '\n' || *p == ' ')
        p++;
    return *p == '\0';
}

/* Read a small sysfs file into buf; false when missing or unreadable (sysfs
 * answers EINVAL for the type of an empty GID entry). */
static bool read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    bool ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

static bool gid_is_zero(const uint8_t gid[16])
{
    for (int i = 0; i < 16; i++)
        if (gid[i] != 0)
            return false;
    return true;
}

static bool gid_is_ipv4_mapped(const uint8_t gid[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(gid, prefix, sizeof(prefix)) == 0;
}

static bool gid_is_link_local(const uint8_t gid[16])
{
    return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80;
}

/* Higher is better; -1: unusable. */
static int gid_score(const uint8_t gid[16], bool roce_v2)
{
    if (gid_is_zero(gid))
        return -1;
    if (roce_v2 && gid_is_ipv4_mapped(gid))
        return 4;
    if (roce_v2 && !gid_is_link_local(gid))
        return 3;
    if (roce_v2)
        return 2;
    /* RoCE v1 or InfiniBand: usable, but only when nothing better exists */
    return 1;
}

shs_status_t shs__gid_select(const char *sysfs_root, const char *dev, int port,
                             int want_index, shs__gid_choice_t *choice_p)
{
    char path[PATH_MAX];
    char line[128];
    shs__gid_choice_t best = {.index = -1};
    int best_score = -1;
    int first = want_index >= 0 ? want_index : 0;
    int last = want_index >= 0 ? want_index : SHS__GID_SCAN_MAX - 1;

    if (sysfs_root == NULL || dev == NULL || port <= 0 || choice_p == NULL)
        return SHS_ERR_INVALID_ARG;

    for (int i = first; i <= last; i++) {
        uint8_t gid[16];
        bool have_type, roce_v2 = false;

        snprintf(path, sizeof(path), "%s/%s/ports/%d/gids/%d", sysfs_root, dev, port, i);
        if (!read_line(path, line, sizeof(line))) {
            if (errno == ENOENT)
                break; /* end of the table */
            continue;
        }
        if (!shs__gid_parse(line, gid)) {
            SHS_WARN("%s port %d gid %d: malformed '%s'", dev, port, i, line);
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s/ports/%d/gid_attrs/types/%d", sysfs_root,
                 dev, port, i);
        have_type = read_line(path, line, sizeof(line));
        if (have_type)
            roce_v2 = strstr(line, "v2") != NULL;
        int score = gid_score(gid, roce_v2);
        if (score > best_score) {
            best_score = score;
            best.index = i;
            memcpy(best.gid, gid, 16);
            best.roce_v2 = roce_v2;
            best.ipv4_mapped = gid_is_ipv4_mapped(gid);
        }
    }
    if (best_score < 0) {
        if (want_index >= 0)
            SHS_ERROR("%s port %d: gid index %d is empty or missing under %s", dev,
                      port, want_index, sysfs_root);
        else
            SHS_ERROR("%s port %d: no usable gid under %s (is the netdev up with an "
                      "address?)", dev, port, sysfs_root);
        return SHS_ERR_NO_DEVICE;
    }
    *choice_p = best;
    return SHS_OK;
}

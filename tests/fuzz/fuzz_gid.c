/*
 * libFuzzer target: the GID text parser of the transport (sysfs
 * ports/N/gids/I). A parsed GID printed back in the same form must parse to
 * the same 16 bytes.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[256], again[64];
    uint8_t gid[16], gid2[16];
    shs__log_set_level(-1);
    if (size >= sizeof(text))
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (!shs__gid_parse(text, gid))
        return 0;
    snprintf(again, sizeof(again), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:"
             "%02x%02x:%02x%02x", gid[0], gid[1], gid[2], gid[3], gid[4], gid[5], gid[6],
             gid[7], gid[8], gid[9], gid[10], gid[11], gid[12], gid[13], gid[14], gid[15]);
    if (!shs__gid_parse(again, gid2) || memcmp(gid, gid2, 16) != 0)
        __builtin_trap();
    return 0;
}

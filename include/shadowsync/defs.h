/* shadowsync: common definitions shared by the public headers. */
#ifndef SHADOWSYNC_DEFS_H
#define SHADOWSYNC_DEFS_H

/* Marks a function exported from libshadowsync (everything else is hidden). */
#if defined(__GNUC__)
#define SHS_API __attribute__((visibility("default")))
#else
#define SHS_API
#endif

/* What float32 data looks like on the wire: a collective's chunks
 * (collective.h, Wire), a shadow engine's snapshots (shadow.h, Wire). */
typedef enum shs_wire {
    SHS_WIRE_NATIVE = 0,    /* the element type itself: exact */
    SHS_WIRE_BF16 = 1       /* bfloat16: half the bytes, summed in float32 */
} shs_wire_t;

#endif /* SHADOWSYNC_DEFS_H */

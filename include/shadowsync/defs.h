/* shadowsync: common definitions shared by the public headers. */
#ifndef SHADOWSYNC_DEFS_H
#define SHADOWSYNC_DEFS_H

/* Marks a function exported from libshadowsync (everything else is hidden). */
#if defined(__GNUC__)
#define SHS_API __attribute__((visibility("default")))
#else
#define SHS_API
#endif

#endif /* SHADOWSYNC_DEFS_H */

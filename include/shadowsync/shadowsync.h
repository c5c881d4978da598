/*
 * shadowsync: background model synchronization over RDMA.
 *
 * The umbrella header: include this one. It pulls in every public header of
 * the library. Link with `shadowsync::shadowsync` (CMake) or
 * `pkg-config --libs shadowsync`.
 */
#ifndef SHADOWSYNC_SHADOWSYNC_H
#define SHADOWSYNC_SHADOWSYNC_H

#include <shadowsync/defs.h>
#include <shadowsync/status.h>
#include <shadowsync/version.h>
#include <shadowsync/context.h>
#include <shadowsync/embedding.h>
#include <shadowsync/region.h>
#include <shadowsync/rma.h>
#include <shadowsync/msg.h>
#include <shadowsync/schedule.h>
#include <shadowsync/shadow.h>
#include <shadowsync/collective.h>

#endif /* SHADOWSYNC_SHADOWSYNC_H */

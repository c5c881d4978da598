/*
 * shadowsync: status codes.
 *
 * Every shadowsync function that can fail returns a shs_status_t. SHS_OK is 0;
 * errors are negative and grouped by scope so that callers can test a range
 * (for example, SHS_STATUS_IS_PEER(st) tells "the other side went wrong").
 *
 *   -1  .. -19   local resource (memory, device, system call)
 *   -20 .. -39   peer or link (a remote rank, the fabric)
 *   -40 .. -59   configuration (knobs, mismatched ranks, versions)
 *   -60 .. -79   invalid argument or state (caller error)
 *   -80 .. -99   timeout and cancellation
 *
 * Values are part of the ABI: new codes are added, existing ones never change.
 */
#ifndef SHADOWSYNC_STATUS_H
#define SHADOWSYNC_STATUS_H

#include <shadowsync/defs.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum shs_status {
    SHS_OK = 0,

    /* local resource */
    SHS_ERR_NO_MEMORY = -1,     /* allocation failed */
    SHS_ERR_NO_RESOURCE = -2,   /* a device or system limit was reached */
    SHS_ERR_NO_DEVICE = -3,     /* no (matching, ACTIVE) RDMA device */
    SHS_ERR_IO = -4,            /* a system call failed */
    SHS_ERR_DEVICE = -5,        /* the local device reported a fatal error */

    /* peer or link */
    SHS_ERR_PEER_FAILED = -20,   /* a peer died or its connection broke */
    SHS_ERR_CONNECT = -21,       /* a connection could not be established */
    SHS_ERR_REMOTE_ACCESS = -22, /* the peer refused an access (rkey, bounds) */
    SHS_ERR_TRANSPORT = -23,     /* any other completion error */
    SHS_ERR_PROTOCOL = -24,      /* a malformed or unexpected message */

    /* configuration */
    SHS_ERR_CONFIG = -40,           /* a knob has a bad value */
    SHS_ERR_TOKEN_MISMATCH = -41,   /* a rank presented another job token */
    SHS_ERR_VERSION_MISMATCH = -42, /* a rank speaks another protocol version */
    SHS_ERR_SIZE_MISMATCH = -43,    /* ranks disagree on a collective's shape */
    SHS_ERR_UNSUPPORTED = -44,      /* not supported by this device or build */

    /* invalid argument or state */
    SHS_ERR_INVALID_ARG = -60,  /* a NULL or out-of-range argument */
    SHS_ERR_OUT_OF_BOUNDS = -61, /* an access outside a region */
    SHS_ERR_BAD_STATE = -62,     /* the object cannot do this now (poisoned, closed) */

    /* timeout and cancellation */
    SHS_ERR_TIMEOUT = -80,  /* a bounded wait expired */
    SHS_ERR_CANCELED = -81  /* the operation was canceled by the caller */
} shs_status_t;

#define SHS_STATUS_IS_LOCAL(st) ((st) <= -1 && (st) >= -19)
#define SHS_STATUS_IS_PEER(st) ((st) <= -20 && (st) >= -39)
#define SHS_STATUS_IS_CONFIG(st) ((st) <= -40 && (st) >= -59)
#define SHS_STATUS_IS_ARG(st) ((st) <= -60 && (st) >= -79)
#define SHS_STATUS_IS_TIMEOUT(st) ((st) <= -80 && (st) >= -99)

/*
 * shs_status_string - a short, lowercase, constant description of a status.
 * Never returns NULL (unknown values give "unknown status"). Thread-safe.
 */
SHS_API const char *shs_status_string(shs_status_t status);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_STATUS_H */

/* Completion status -> shadowsync status and a hint for the person on call. */
#include "transport/transport.h"

shs_status_t shs__wc_status_to_status(enum ibv_wc_status st)
{
    switch (st) {
    case IBV_WC_SUCCESS:
        return SHS_OK;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
        return SHS_ERR_REMOTE_ACCESS;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_REM_ABORT_ERR:
        return SHS_ERR_PEER_FAILED;
    default:
        return SHS_ERR_TRANSPORT;
    }
}

const char *shs__wc_status_hint(enum ibv_wc_status st)
{
    switch (st) {
    case IBV_WC_SUCCESS:
        return "no error";
    case IBV_WC_RETRY_EXC_ERR:
        return "unreachable or dead; check the GID index and MTU";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "receiver not ready: it is not taking immediates (shs_wait_imm) fast enough";
    case IBV_WC_REM_ACCESS_ERR:
        return "refused the access: bad rkey or out of the region's bounds (or the peer "
               "is exiting and its regions are gone)";
    case IBV_WC_REM_INV_REQ_ERR:
        return "rejected the request as invalid: length above its limit or a missing "
               "access right";
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
        return "local protection error: the local region is not registered for this access";
    case IBV_WC_LOC_LEN_ERR:
        return "local length error: message longer than the device limit";
    case IBV_WC_WR_FLUSH_ERR:
        return "qp already in error (an earlier operation failed)";
    case IBV_WC_REM_OP_ERR:
        return "remote operation error on the peer's side";
    case IBV_WC_REM_ABORT_ERR:
        return "the peer aborted the operation";
    case IBV_WC_FATAL_ERR:
        return "fatal device error";
    default:
        return "unexpected completion error";
    }
}

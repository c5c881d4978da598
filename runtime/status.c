#include <shadowsync/status.h>
#include <shadowsync/version.h>

const char *shs_status_string(shs_status_t status)
{
    switch (status) {
    case SHS_OK: return "success";
    case SHS_ERR_NO_MEMORY: return "out of memory";
    case SHS_ERR_NO_RESOURCE: return "out of device or system resources";
    case SHS_ERR_NO_DEVICE: return "no usable rdma device";
    case SHS_ERR_IO: return "system call failed";
    case SHS_ERR_DEVICE: return "local device fatal error";
    case SHS_ERR_PEER_FAILED: return "peer failed";
    case SHS_ERR_CONNECT: return "connection failed";
    case SHS_ERR_REMOTE_ACCESS: return "remote access error";
    case SHS_ERR_TRANSPORT: return "transport error";
    case SHS_ERR_PROTOCOL: return "protocol error";
    case SHS_ERR_CONFIG: return "invalid configuration";
    case SHS_ERR_TOKEN_MISMATCH: return "job token mismatch";
    case SHS_ERR_VERSION_MISMATCH: return "protocol version mismatch";
    case SHS_ERR_SIZE_MISMATCH: return "size mismatch across ranks";
    case SHS_ERR_UNSUPPORTED: return "unsupported";
    case SHS_ERR_INVALID_ARG: return "invalid argument";
    case SHS_ERR_OUT_OF_BOUNDS: return "out of bounds";
    case SHS_ERR_BAD_STATE: return "bad state";
    case SHS_ERR_TIMEOUT: return "timed out";
    case SHS_ERR_CANCELED: return "canceled";
    }
    return "unknown status";
}

const char *shs_version(void)
{
    return SHS_VERSION_STRING;
}

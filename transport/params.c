/* Public parameter struct -> internal config: params win over SHS_* env. */
#include <stdio.h>
#include <string.h>

#include "runtime/log.h"
#include "transport/transport.h"

static shs_status_t copy_str(char *dst, size_t dst_len, const char *src, const char *what)
{
    if (src == NULL)
        src = "";
    size_t n = strlen(src);
    if (n >= dst_len) {
        SHS_ERROR("parameter %s is %zu bytes long, the limit is %zu", what, n, dst_len - 1);
        return SHS_ERR_CONFIG;
    }
    memcpy(dst, src, n + 1);
    return SHS_OK;
}

shs_status_t shs__ctx_params_apply(const shs_ctx_params_t *p, shs__config_t *cfg,
                                   char *sysfs_root, size_t sysfs_root_len)
{
    shs_status_t status;

    if (cfg == NULL || sysfs_root == NULL)
        return SHS_ERR_INVALID_ARG;
    status = copy_str(sysfs_root, sysfs_root_len, SHS__SYSFS_ROOT_DEFAULT, "sysfs_root");
    if (status != SHS_OK)
        return status;
    uint64_t m = p != NULL ? p->field_mask : 0;
    if (m & SHS_CTX_PARAM_RANK)
        cfg->rank = p->rank;
    if (m & SHS_CTX_PARAM_SIZE)
        cfg->size = p->size;
    if ((m & SHS_CTX_PARAM_BOOTSTRAP) &&
        (status = copy_str(cfg->bootstrap, sizeof(cfg->bootstrap), p->bootstrap,
                           "bootstrap")) != SHS_OK)
        return status;
    if ((m & SHS_CTX_PARAM_JOB_TOKEN) &&
        (status = copy_str(cfg->job_token, sizeof(cfg->job_token), p->job_token,
                           "job_token")) != SHS_OK)
        return status;
    if ((m & SHS_CTX_PARAM_DEVICE) &&
        (status = copy_str(cfg->device, sizeof(cfg->device), p->device, "device")) != SHS_OK)
        return status;
    if (m & SHS_CTX_PARAM_REJOIN) {
        if (p->rejoin != 0 && p->rejoin != 1) {
            SHS_ERROR("parameter rejoin %d is neither 0 nor 1", p->rejoin);
            return SHS_ERR_CONFIG;
        }
        cfg->rejoin = p->rejoin;
    }
    if (m & SHS_CTX_PARAM_IB_PORT)
        cfg->ib_port = p->ib_port;
    if (m & SHS_CTX_PARAM_GID_INDEX)
        cfg->gid_index = p->gid_index;
    if (m & SHS_CTX_PARAM_CONNECT_MODE) {
        if (p->connect_mode != SHS_CONNECT_MODE_RDMACM &&
            p->connect_mode != SHS_CONNECT_MODE_OOB) {
            SHS_ERROR("parameter connect_mode %d is neither rdmacm nor oob",
                      (int)p->connect_mode);
            return SHS_ERR_CONFIG;
        }
        cfg->connect_mode = p->connect_mode == SHS_CONNECT_MODE_OOB ? SHS_CONNECT_OOB
                                                                    : SHS_CONNECT_RDMACM;
    }
    if (m & SHS_CTX_PARAM_CONNECT_TIMEOUT)
        cfg->connect_timeout_ms = p->connect_timeout_ms;
    if (m & SHS_CTX_PARAM_OP_TIMEOUT)
        cfg->op_timeout_ms = p->op_timeout_ms;
    if (m & SHS_CTX_PARAM_QPS_PER_PEER)
        cfg->qps_per_peer = p->qps_per_peer;
    if (m & SHS_CTX_PARAM_SQ_DEPTH)
        cfg->sq_depth = p->sq_depth;
    if (m & SHS_CTX_PARAM_RQ_DEPTH)
        cfg->rq_depth = p->rq_depth;
    if (m & SHS_CTX_PARAM_MSG_SIZE)
        cfg->msg_size = p->msg_size;
    if ((m & SHS_CTX_PARAM_SYSFS_ROOT) &&
        (status = copy_str(sysfs_root, sysfs_root_len, p->sysfs_root, "sysfs_root")) != SHS_OK)
        return status;

    /* what only the merge can check: the env may have been fine alone */
    if (cfg->size <= 0 || cfg->rank < 0 || cfg->rank >= cfg->size) {
        SHS_ERROR("rank %d / size %d: rank and size are unknown or out of range "
                  "(set SHS_RANK/SHS_SIZE, a launcher, or the params)", cfg->rank, cfg->size);
        return SHS_ERR_CONFIG;
    }
    if (cfg->ib_port < 0 || cfg->ib_port > 255) {
        SHS_ERROR("ib port %d is out of range", cfg->ib_port);
        return SHS_ERR_CONFIG;
    }
    if (cfg->gid_index < -1) {
        SHS_ERROR("gid index %d is out of range (-1 is automatic)", cfg->gid_index);
        return SHS_ERR_CONFIG;
    }
    /* a send queue shallower than SHS_SIGNAL_EVERY is fine: the device
     * set-up signals at least every sq_depth / 2 requests */
    if (cfg->qps_per_peer < 1 || cfg->qps_per_peer > 16 || cfg->sq_depth < 1 ||
        cfg->sq_depth > (1 << 16) || cfg->rq_depth < 1 || cfg->rq_depth > (1 << 16) ||
        cfg->msg_size > ((size_t)1 << 30)) {
        SHS_ERROR("qps per peer %d (1-16), sq depth %d, rq depth %d (1-65536) or msg "
                  "size %zu (<= 1 GiB) out of range", cfg->qps_per_peer, cfg->sq_depth,
                  cfg->rq_depth, cfg->msg_size);
        return SHS_ERR_CONFIG;
    }
    if (cfg->connect_timeout_ms <= 0 || cfg->op_timeout_ms <= 0) {
        SHS_ERROR("timeouts must be positive (connect %d ms, op %d ms)",
                  cfg->connect_timeout_ms, cfg->op_timeout_ms);
        return SHS_ERR_CONFIG;
    }
    return SHS_OK;
}

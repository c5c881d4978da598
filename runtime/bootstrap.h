/*
 * Internal bootstrap: a small TCP rendezvous used to exchange connection data.
 * Rank 0 listens on the SHS_BOOTSTRAP address (host:port); the others connect
 * with retries until the bootstrap deadline. Every message is length-prefixed
 * and bounds-checked; the hello carries protocol version, job token, rank and
 * size, and a mismatch is refused on both sides with a clear error
 * (SHS_ERR_TOKEN_MISMATCH, SHS_ERR_VERSION_MISMATCH, SHS_ERR_SIZE_MISMATCH).
 * Collectives go through rank 0 (star). Every call is bounded by
 * cfg->bootstrap_timeout_ms; a peer that disappears gives SHS_ERR_PEER_FAILED
 * naming the rank. Not thread-safe: one thread uses a shs__boot_t at a time.
 */
#ifndef SHS_RUNTIME_BOOTSTRAP_H
#define SHS_RUNTIME_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

#include "runtime/config.h"

#define SHS_BOOT_PROTOCOL_VERSION 1
#define SHS_BOOT_MAX_MSG (16u << 20) /* largest payload accepted */

typedef struct shs__boot shs__boot_t;

shs_status_t shs__boot_create(const shs__config_t *cfg, shs__boot_t **boot_p);
void shs__boot_destroy(shs__boot_t *boot);

int shs__boot_rank(const shs__boot_t *boot);
int shs__boot_size(const shs__boot_t *boot);

/* Every rank contributes len bytes; out (size * len bytes) receives them in
 * rank order. Ranks passing different len get SHS_ERR_SIZE_MISMATCH. */
shs_status_t shs__boot_allgather(shs__boot_t *boot, const void *in, size_t len,
                                 void *out);
/* root's len bytes are copied into buf on every rank. */
shs_status_t shs__boot_bcast(shs__boot_t *boot, void *buf, size_t len, int root);
shs_status_t shs__boot_barrier(shs__boot_t *boot);

/* ---- wire encoding, exposed for unit tests ---- */
/* A frame: u32 magic, u16 version, u16 type, u32 length, payload. Big-endian. */
#define SHS_BOOT_MAGIC 0x53485342u /* "SHSB" */
#define SHS_BOOT_HDR_LEN 12u

typedef struct shs__boot_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t length;
} shs__boot_hdr_t;

void shs__boot_hdr_encode(const shs__boot_hdr_t *hdr, uint8_t out[SHS_BOOT_HDR_LEN]);
/* SHS_ERR_PROTOCOL for a bad magic or a length above max_len,
 * SHS_ERR_VERSION_MISMATCH for another version. */
shs_status_t shs__boot_hdr_decode(const uint8_t *in, size_t in_len, uint32_t max_len,
                                  shs__boot_hdr_t *hdr_p);

#endif

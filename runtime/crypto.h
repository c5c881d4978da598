/*
 * Internal cryptographic primitives for the bootstrap: HMAC-SHA256, a
 * constant-time comparison and random bytes, all from OpenSSL's libcrypto
 * (EVP_MAC, CRYPTO_memcmp, RAND_bytes). Nothing here is home-made: this file
 * only adapts the library's calls to shadowsync's status codes.
 *
 * Thread-safety: every function may be called from any thread; a shs__mac_t
 * belongs to its caller.
 */
#ifndef SHS_RUNTIME_CRYPTO_H
#define SHS_RUNTIME_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

#define SHS_MAC_LEN 32u /* HMAC-SHA256 */

/* An HMAC computation in progress: begin, update any number of times, then
 * end (or abort). Opaque to callers. */
typedef struct shs__mac {
    void *ctx; /* EVP_MAC_CTX */
} shs__mac_t;

/* SHS_ERR_NO_MEMORY / SHS_ERR_UNSUPPORTED (no HMAC in this libcrypto) on
 * failure, logged once; *m is then empty and end/abort are no-ops. */
shs_status_t shs__mac_begin(shs__mac_t *m, const void *key, size_t key_len);
void shs__mac_update(shs__mac_t *m, const void *data, size_t len);
/* Writes the 32-byte tag and releases the computation. */
shs_status_t shs__mac_end(shs__mac_t *m, uint8_t out[SHS_MAC_LEN]);
void shs__mac_abort(shs__mac_t *m);

/* One-shot HMAC-SHA256 of the concatenation of nparts buffers. */
shs_status_t shs__hmac(const void *key, size_t key_len, const void *const *parts,
                       const size_t *lens, size_t nparts, uint8_t out[SHS_MAC_LEN]);

/* Equal in time independent of where a and b differ. */
bool shs__mac_equal(const uint8_t a[SHS_MAC_LEN], const uint8_t b[SHS_MAC_LEN]);

/* len bytes from the library's CSPRNG; SHS_ERR_IO (logged) when it fails. */
shs_status_t shs__random(void *buf, size_t len);

#endif

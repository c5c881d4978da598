/*
 * Internal: non-cryptographic checksums for data that must prove itself
 * whole: embedding rows read one-sided while their holder updates them, and
 * saved shard files. Both are xxHash's XXH3 (Debian's libxxhash): 64 bits,
 * tens of GB/s, so a row's check costs less than moving the row. Nothing here
 * is home-made: this file only names the library's calls. (Tokens and the
 * bootstrap use HMAC-SHA256, runtime/crypto.h: a checksum is no proof
 * against someone who wants to forge data.)
 *
 * Thread-safety: every function may be called from any thread; a
 * shs__hash_t belongs to its caller.
 */
#ifndef SHS_RUNTIME_HASH_H
#define SHS_RUNTIME_HASH_H

#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

/* XXH3-64 of len bytes with a seed (a row's stamp seeds it with the row's
 * index, so a row read from the wrong place fails its check too). */
uint64_t shs__hash64(const void *p, size_t len, uint64_t seed);

/* A streaming XXH3-64, for files read or written in pieces. Opaque. */
typedef struct shs__hash {
    void *state; /* XXH3_state_t */
} shs__hash_t;

/* SHS_ERR_NO_MEMORY (logged) when the state cannot be allocated; end and
 * abort are then no-ops. */
shs_status_t shs__hash_begin(shs__hash_t *h, uint64_t seed);
void shs__hash_update(shs__hash_t *h, const void *p, size_t len);
/* The digest, and the state released. */
uint64_t shs__hash_end(shs__hash_t *h);
void shs__hash_abort(shs__hash_t *h);

#endif

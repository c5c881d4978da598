/* Checksums from Debian's libxxhash (hash.h). */
#include <xxhash.h>

#include "runtime/hash.h"
#include "runtime/log.h"

uint64_t shs__hash64(const void *p, size_t len, uint64_t seed)
{
    return (uint64_t)XXH3_64bits_withSeed(p, len, (XXH64_hash_t)seed);
}

shs_status_t shs__hash_begin(shs__hash_t *h, uint64_t seed)
{
    XXH3_state_t *s = XXH3_createState();
    h->state = s;
    if (s == NULL) {
        SHS_ERROR("checksum: cannot allocate its state");
        return SHS_ERR_NO_MEMORY;
    }
    (void)XXH3_64bits_reset_withSeed(s, (XXH64_hash_t)seed);
    return SHS_OK;
}

void shs__hash_update(shs__hash_t *h, const void *p, size_t len)
{
    if (h->state != NULL && len > 0)
        (void)XXH3_64bits_update(h->state, p, len);
}

uint64_t shs__hash_end(shs__hash_t *h)
{
    if (h->state == NULL)
        return 0;
    uint64_t d = (uint64_t)XXH3_64bits_digest(h->state);
    XXH3_freeState(h->state);
    h->state = NULL;
    return d;
}

void shs__hash_abort(shs__hash_t *h)
{
    if (h->state != NULL)
        XXH3_freeState(h->state);
    h->state = NULL;
}

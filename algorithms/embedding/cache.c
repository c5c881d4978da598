/* A worker's cache of hot remote rows (cache.h). */
#include <stdlib.h>
#include <string.h>

#include "algorithms/embedding/cache.h"

#define EMPTY UINT64_MAX

static uint64_t mix(uint64_t z)
{
    z ^= z >> 31;
    z *= 0x7fb5d329728ea185ull;
    z ^= z >> 27;
    z *= 0x81dadef4bc2dd44dull;
    z ^= z >> 33;
    return z;
}

static uint32_t pow2_at_least(uint32_t x)
{
    uint32_t p = 1;
    while (p < x)
        p <<= 1;
    return p;
}

static uint32_t sets_for(uint32_t capacity)
{
    return pow2_at_least((capacity + SHS__EMB_CACHE_WAYS - 1) / SHS__EMB_CACHE_WAYS);
}

/* counters per sketch row: twice the capacity, at least 64 */
static uint32_t sketch_width(uint32_t capacity)
{
    uint32_t w = pow2_at_least(2 * capacity);
    return w < 64 ? 64 : w;
}

size_t shs__emb_cache_bytes(uint32_t capacity, size_t stride)
{
    if (capacity == 0)
        return 0;
    size_t ways = (size_t)sets_for(capacity) * SHS__EMB_CACHE_WAYS;
    return ways * (2 * sizeof(uint64_t) + sizeof(uint32_t) + stride * sizeof(float)) +
           (size_t)SHS__EMB_CACHE_SKETCH_ROWS * sketch_width(capacity);
}

shs_status_t shs__emb_cache_init(shs__emb_cache_t *c, uint32_t capacity, size_t stride,
                                 uint32_t max_age)
{
    memset(c, 0, sizeof(*c));
    if (capacity == 0)
        return SHS_OK;
    if (stride == 0 || max_age == 0 || capacity > (1u << 28))
        return SHS_ERR_INVALID_ARG;
    uint32_t sets = sets_for(capacity), width = sketch_width(capacity);
    size_t ways = (size_t)sets * SHS__EMB_CACHE_WAYS;
    c->id = malloc(ways * sizeof(*c->id));
    c->born = calloc(ways, sizeof(*c->born));
    c->epoch = calloc(ways, sizeof(*c->epoch));
    c->rows = malloc(ways * stride * sizeof(float));
    c->sketch = calloc((size_t)SHS__EMB_CACHE_SKETCH_ROWS * width, 1);
    if (c->id == NULL || c->born == NULL || c->epoch == NULL || c->rows == NULL ||
        c->sketch == NULL) {
        shs__emb_cache_fini(c);
        return SHS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < ways; i++)
        c->id[i] = EMPTY;
    c->capacity = (uint32_t)ways;
    c->set_mask = sets - 1;
    c->stride = stride;
    c->max_age = max_age;
    c->sketch_mask = width - 1;
    return SHS_OK;
}

void shs__emb_cache_fini(shs__emb_cache_t *c)
{
    free(c->id);
    free(c->born);
    free(c->epoch);
    free(c->rows);
    free(c->sketch);
    memset(c, 0, sizeof(*c));
}

void shs__emb_cache_clear(shs__emb_cache_t *c)
{
    for (uint32_t k = 0; k < c->capacity; k++)
        c->id[k] = EMPTY;
}

static uint8_t *counter(const shs__emb_cache_t *c, uint64_t h, int r)
{
    uint32_t at = (uint32_t)(h >> (16 * r)) & c->sketch_mask;
    return c->sketch + (size_t)r * (c->sketch_mask + 1) + at;
}

uint32_t shs__emb_cache_freq(const shs__emb_cache_t *c, uint64_t id)
{
    if (c->capacity == 0)
        return 0;
    uint64_t h = mix(id ^ 0x5bd1e9955bd1e995ull);
    uint32_t f = UINT8_MAX;
    for (int r = 0; r < SHS__EMB_CACHE_SKETCH_ROWS; r++) {
        uint8_t v = *counter(c, h, r);
        f = v < f ? v : f;
    }
    return f;
}

/* Count one probe of id; every 8 x capacity probes every counter halves. */
static void count_probe(shs__emb_cache_t *c, uint64_t id)
{
    uint64_t h = mix(id ^ 0x5bd1e9955bd1e995ull);
    for (int r = 0; r < SHS__EMB_CACHE_SKETCH_ROWS; r++) {
        uint8_t *v = counter(c, h, r);
        if (*v < UINT8_MAX)
            (*v)++;
    }
    if (++c->probes_since_halving >= 8ull * c->capacity) {
        size_t n = (size_t)SHS__EMB_CACHE_SKETCH_ROWS * (c->sketch_mask + 1);
        for (size_t i = 0; i < n; i++)
            c->sketch[i] >>= 1;
        c->probes_since_halving = 0;
    }
}

static size_t set_of(const shs__emb_cache_t *c, uint64_t id)
{
    return (size_t)(mix(id) & c->set_mask) * SHS__EMB_CACHE_WAYS;
}

const float *shs__emb_cache_get(shs__emb_cache_t *c, uint64_t id, uint64_t now,
                                uint32_t epoch)
{
    if (c->capacity == 0)
        return NULL;
    count_probe(c, id);
    size_t s = set_of(c, id);
    for (size_t k = s; k < s + SHS__EMB_CACHE_WAYS; k++) {
        if (c->id[k] != id)
            continue;
        if (now - c->born[k] < c->max_age && c->epoch[k] == epoch) {
            c->hits++;
            c->hit_age_sum += now - c->born[k];
            return c->rows + k * c->stride;
        }
        c->expired++;
        c->id[k] = EMPTY; /* its fetch will offer it again */
        return NULL;
    }
    c->misses++;
    return NULL;
}

void shs__emb_cache_offer(shs__emb_cache_t *c, uint64_t id, const float *row, uint64_t born,
                          uint32_t epoch)
{
    if (c->capacity == 0)
        return;
    size_t s = set_of(c, id), at = SIZE_MAX, victim = s;
    uint32_t victim_f = UINT32_MAX;
    for (size_t k = s; k < s + SHS__EMB_CACHE_WAYS; k++) {
        if (c->id[k] == id || c->id[k] == EMPTY) {
            at = k;
            break;
        }
        uint32_t f = shs__emb_cache_freq(c, c->id[k]);
        if (f < victim_f || (f == victim_f && c->born[k] < c->born[victim])) {
            victim_f = f;
            victim = k;
        }
    }
    if (at == SIZE_MAX) {
        if (shs__emb_cache_freq(c, id) <= victim_f) {
            c->rejected++;
            return;
        }
        at = victim;
        c->evicted++;
    }
    c->id[at] = id;
    c->born[at] = born;
    c->epoch[at] = epoch;
    memcpy(c->rows + at * c->stride, row, c->stride * sizeof(float));
    c->admitted++;
}

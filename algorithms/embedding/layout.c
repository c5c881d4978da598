/* Embedding tables: row layout over shards, initialization by row id, and
 * the owners' per-row optimizers (plan.h). */
#include <math.h>

#include <shadowsync/embedding.h>

#include "algorithms/embedding/plan.h"

shs_status_t shs__emb_layout_init(shs__emb_layout_t *l, uint64_t rows, uint32_t shards,
                                  shs__emb_map_t map)
{
    if (l == NULL || rows == 0 || shards == 0 ||
        (map != SHS__EMB_MAP_MODULO && map != SHS__EMB_MAP_RANGE))
        return SHS_ERR_INVALID_ARG;
    l->rows = rows;
    l->shards = shards;
    l->map = map;
    l->base = rows / shards;
    l->extra = rows % shards;
    return SHS_OK;
}

void shs__emb_locate(const shs__emb_layout_t *l, uint64_t row, uint32_t *shard_p,
                     uint64_t *local_p)
{
    if (l->map == SHS__EMB_MAP_MODULO) {
        *shard_p = (uint32_t)(row % l->shards);
        *local_p = row / l->shards;
        return;
    }
    /* The first `extra` shards hold base + 1 rows each, the rest base. */
    uint64_t big = l->extra * (l->base + 1);
    if (row < big) {
        *shard_p = (uint32_t)(row / (l->base + 1));
        *local_p = row % (l->base + 1);
    } else {
        *shard_p = (uint32_t)(l->extra + (row - big) / l->base);
        *local_p = (row - big) % l->base;
    }
}

uint64_t shs__emb_shard_rows(const shs__emb_layout_t *l, uint32_t shard)
{
    if (shard >= l->shards)
        return 0;
    if (l->map == SHS__EMB_MAP_MODULO)
        return l->rows / l->shards + (shard < l->rows % l->shards ? 1 : 0);
    return l->base + (shard < l->extra ? 1 : 0);
}

uint64_t shs__emb_global_row(const shs__emb_layout_t *l, uint32_t shard, uint64_t local)
{
    if (l->map == SHS__EMB_MAP_MODULO)
        return local * l->shards + shard;
    if (shard < l->extra)
        return (uint64_t)shard * (l->base + 1) + local;
    return l->extra * (l->base + 1) + (uint64_t)(shard - l->extra) * l->base + local;
}

/* splitmix64's finalizer: a bijection of 64-bit words that scatters nearby
 * inputs (Steele, Lea and Flood, 2014). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void shs_emb_init_row(uint64_t seed, uint64_t row, float scale, float *out, uint32_t dim)
{
    if (out == NULL)
        return;
    uint64_t key = mix64(seed ^ mix64(row + 0x9e3779b97f4a7c15ull));
    for (uint32_t j = 0; j < dim; j++) {
        uint64_t z = mix64(key + (uint64_t)j * 0x9e3779b97f4a7c15ull);
        /* 24 bits make x exact in float, in [-1, 1 - 2^-23]: x * scale then
         * rounds below scale for any normal scale; the clamp covers a
         * subnormal one. (A double u rounded to float, as before, could
         * round up to scale itself.) */
        float x = (float)((int32_t)(z >> 40) - (1 << 23)) * 0x1p-23f;
        float v = x * scale;
        out[j] = v < scale || !(scale > 0.0f) ? v : nextafterf(scale, 0.0f);
    }
}

void shs__emb_sgd_row(float *restrict w, const float *restrict g, uint32_t dim, float lr)
{
    for (uint32_t j = 0; j < dim; j++)
        w[j] -= lr * g[j];
}

void shs__emb_adagrad_row(float *restrict w, const float *restrict g, uint32_t dim, float lr,
                          float eps, float *state)
{
    float sq = 0.0f;
    for (uint32_t j = 0; j < dim; j++)
        sq += g[j] * g[j];
    *state += sq / (float)dim;
    float step = lr / (sqrtf(*state) + eps);
    for (uint32_t j = 0; j < dim; j++)
        w[j] -= step * g[j];
}

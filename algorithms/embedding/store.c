/* Embedding tables: save and load of shards, with re-sharding (store.h). */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>

#include "algorithms/embedding/store.h"
#include "runtime/log.h"

#define STORE_MAGIC "SHSEMB\0\0"
#define STORE_VERSION 1u
#define STORE_DTYPE_F32 1u

/* On-disk header, little-endian fields of fixed width (64 bytes). */
typedef struct store_hdr {
    char magic[8];
    uint32_t version;
    uint32_t dtype;
    uint64_t rows;
    uint32_t dim;
    uint32_t map;
    uint32_t shards;
    uint32_t shard;
    uint64_t shard_rows;
    uint32_t has_state;
    uint32_t reserved[3];
} store_hdr_t;

_Static_assert(sizeof(store_hdr_t) == 64, "the shard file header is 64 bytes");

static shs_status_t shard_path(char *buf, const char *dir, uint32_t shard, uint32_t shards,
                               const char *suffix)
{
    int n = snprintf(buf, SHS__EMB_PATH_MAX, "%s/shard-%u-of-%u.emb%s", dir, shard, shards,
                     suffix);
    if (n < 0 || n >= SHS__EMB_PATH_MAX) {
        SHS_ERROR("embedding save path too long under \"%s\"", dir);
        return SHS_ERR_INVALID_ARG;
    }
    return SHS_OK;
}

static shs_status_t write_all(FILE *f, const void *p, size_t bytes, const char *path)
{
    if (bytes != 0 && fwrite(p, 1, bytes, f) != bytes) {
        SHS_ERROR("cannot write %s: %s", path, strerror(errno));
        return SHS_ERR_IO;
    }
    return SHS_OK;
}

shs_status_t shs__emb_shard_save(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, size_t stride, const float *rows,
                                 const float *state)
{
    char path[SHS__EMB_PATH_MAX], tmp[SHS__EMB_PATH_MAX];
    shs_status_t st;

    if (dir == NULL || l == NULL || shard >= l->shards || dim == 0 || stride < dim ||
        (rows == NULL && shs__emb_shard_rows(l, shard) > 0))
        return SHS_ERR_INVALID_ARG;
    if ((st = shard_path(path, dir, shard, l->shards, "")) != SHS_OK ||
        (st = shard_path(tmp, dir, shard, l->shards, ".tmp")) != SHS_OK)
        return st;
    store_hdr_t h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, STORE_MAGIC, sizeof(h.magic));
    h.version = STORE_VERSION;
    h.dtype = STORE_DTYPE_F32;
    h.rows = l->rows;
    h.dim = dim;
    h.map = (uint32_t)l->map;
    h.shards = l->shards;
    h.shard = shard;
    h.shard_rows = shs__emb_shard_rows(l, shard);
    h.has_state = state != NULL;

    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        SHS_ERROR("cannot create %s: %s", tmp, strerror(errno));
        return SHS_ERR_IO;
    }
    st = write_all(f, &h, sizeof(h), tmp);
    for (uint64_t k = 0; st == SHS_OK && k < h.shard_rows; k++)
        st = write_all(f, rows + k * stride, dim * sizeof(float), tmp);
    if (st == SHS_OK && state != NULL)
        st = write_all(f, state, h.shard_rows * sizeof(float), tmp);
    if (fclose(f) != 0 && st == SHS_OK) {
        SHS_ERROR("cannot write %s: %s", tmp, strerror(errno));
        st = SHS_ERR_IO;
    }
    if (st == SHS_OK && rename(tmp, path) != 0) {
        SHS_ERROR("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        st = SHS_ERR_IO;
    }
    if (st != SHS_OK)
        remove(tmp);
    return st;
}

static shs_status_t find_shard0(const char *dir, char *path)
{
    char pattern[SHS__EMB_PATH_MAX];
    glob_t g;
    shs_status_t st = SHS_OK;

    int n = snprintf(pattern, sizeof(pattern), "%s/shard-0-of-*.emb", dir);
    if (n < 0 || (size_t)n >= sizeof(pattern)) {
        SHS_ERROR("embedding save path too long under \"%s\"", dir);
        return SHS_ERR_INVALID_ARG;
    }
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        SHS_ERROR("no embedding save in %s (no shard-0-of-N.emb)", dir);
        st = SHS_ERR_IO;
    } else if (rc != 0) {
        SHS_ERROR("cannot list %s", dir);
        st = SHS_ERR_IO;
    } else if (g.gl_pathc != 1) {
        SHS_ERROR("%s holds %zu saves (shard-0-of-N.emb for several N); keep one",
                  dir, (size_t)g.gl_pathc);
        st = SHS_ERR_PROTOCOL;
    } else {
        snprintf(path, SHS__EMB_PATH_MAX, "%s", g.gl_pathv[0]);
    }
    if (rc == 0)
        globfree(&g);
    return st;
}

/* The header of saved shard s of `shards`, checked against what the loader
 * expects. shards == 0: learn the count (the first file opened). */
static shs_status_t open_shard(const char *dir, uint32_t s, uint32_t shards, FILE **f_p,
                               store_hdr_t *h, char *path)
{
    shs_status_t st = SHS_OK;
    FILE *f = NULL;

    if (shards == 0) { /* the save's shard count: its one shard-0-of-N file */
        if ((st = find_shard0(dir, path)) != SHS_OK)
            return st;
    } else if ((st = shard_path(path, dir, s, shards, "")) != SHS_OK) {
        return st;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        SHS_ERROR("cannot open embedding shard %s: %s", path, strerror(errno));
        return SHS_ERR_IO;
    }
    if (fread(h, sizeof(*h), 1, f) != 1) {
        SHS_ERROR("%s: short header", path);
        st = SHS_ERR_IO;
    } else if (memcmp(h->magic, STORE_MAGIC, sizeof(h->magic)) != 0 ||
               h->version != STORE_VERSION || h->dtype != STORE_DTYPE_F32 ||
               h->shard != s || h->shards == 0 || (shards != 0 && h->shards != shards)) {
        SHS_ERROR("%s is not shard %u of this save (magic, version %u, dtype %u, shard %u of %u)",
                  path, s, h->version, h->dtype, h->shard, h->shards);
        st = SHS_ERR_PROTOCOL;
    }
    if (st != SHS_OK) {
        fclose(f);
        return st;
    }
    *f_p = f;
    return SHS_OK;
}

static shs_status_t read_rows(FILE *f, float *buf, size_t count, size_t width, const char *path)
{
    if (count != 0 && fread(buf, width * sizeof(float), count, f) != count) {
        SHS_ERROR("%s: short file (%s)", path, ferror(f) ? strerror(errno) : "truncated");
        return SHS_ERR_IO;
    }
    return SHS_OK;
}

/* Where a saved shard's rows go: from (old layout, shard s) to layout l's
 * shard `shard`. */
typedef struct reshard {
    const shs__emb_layout_t *from, *to;
    uint32_t from_shard, to_shard;
} reshard_t;

/* Read `count` items of `width` floats (rows, or per-row state with width
 * 1) and keep those whose row lands on the destination shard. */
static shs_status_t take_part(FILE *f, const char *path, const reshard_t *r, uint64_t count,
                              uint32_t width, float *dest, float *scratch, size_t scratch_floats)
{
    size_t per_read = scratch_floats / width;
    for (uint64_t k = 0; k < count; k += per_read) {
        size_t n = count - k < per_read ? (size_t)(count - k) : per_read;
        shs_status_t st = read_rows(f, scratch, n, width, path);
        if (st != SHS_OK)
            return st;
        for (size_t i = 0; i < n; i++) {
            uint32_t to;
            uint64_t loc;
            shs__emb_locate(r->to, shs__emb_global_row(r->from, r->from_shard, k + i), &to, &loc);
            if (to == r->to_shard)
                memcpy(dest + loc * width, scratch + i * width, width * sizeof(float));
        }
    }
    return SHS_OK;
}

static shs_status_t check_save(const store_hdr_t *h, const shs__emb_layout_t *l, uint32_t dim,
                               const float *state, const char *path, shs__emb_layout_t *ol)
{
    if (h->rows != l->rows || h->dim != dim) {
        SHS_ERROR("%s holds a table of %llu rows x %u, this one is %llu x %u", path,
                  (unsigned long long)h->rows, h->dim, (unsigned long long)l->rows, dim);
        return SHS_ERR_SIZE_MISMATCH;
    }
    if (state != NULL && !h->has_state) {
        SHS_ERROR("%s has no optimizer state (saved without Adagrad)", path);
        return SHS_ERR_UNSUPPORTED;
    }
    if (shs__emb_layout_init(ol, h->rows, h->shards, (shs__emb_map_t)h->map) != SHS_OK) {
        SHS_ERROR("%s: unknown row mapping %u", path, h->map);
        return SHS_ERR_PROTOCOL;
    }
    return SHS_OK;
}

shs_status_t shs__emb_shard_load(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, float *rows, float *state, float *scratch,
                                 size_t scratch_rows)
{
    char path[SHS__EMB_PATH_MAX];
    store_hdr_t h;
    shs__emb_layout_t ol;
    FILE *f;
    shs_status_t st;

    if (dir == NULL || l == NULL || shard >= l->shards || dim == 0 || rows == NULL ||
        scratch == NULL || scratch_rows == 0)
        return SHS_ERR_INVALID_ARG;
    if ((st = open_shard(dir, 0, 0, &f, &h, path)) != SHS_OK)
        return st;
    uint32_t shards = h.shards;
    st = check_save(&h, l, dim, state, path, &ol);
    for (uint32_t s = 0; st == SHS_OK && s < shards; s++) {
        if (s > 0 && (st = open_shard(dir, s, shards, &f, &h, path)) != SHS_OK)
            break;
        if (h.rows != ol.rows || h.dim != dim || h.map != (uint32_t)ol.map ||
            h.shard_rows != shs__emb_shard_rows(&ol, s) || (state != NULL && !h.has_state)) {
            SHS_ERROR("%s disagrees with shard 0 of the save (rows, dim, map, row count or "
                      "state)", path);
            st = SHS_ERR_PROTOCOL;
        } else {
            reshard_t r = {.from = &ol, .to = l, .from_shard = s, .to_shard = shard};
            st = take_part(f, path, &r, h.shard_rows, dim, rows, scratch, scratch_rows * dim);
            if (st == SHS_OK && state != NULL)
                st = take_part(f, path, &r, h.shard_rows, 1, state, scratch, scratch_rows * dim);
            if (st == SHS_OK && !h.has_state == !state && fgetc(f) != EOF) {
                SHS_ERROR("%s is longer than its header says", path);
                st = SHS_ERR_PROTOCOL;
            }
        }
        fclose(f);
        f = NULL;
    }
    if (f != NULL)
        fclose(f);
    return st;
}

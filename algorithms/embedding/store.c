/* Embedding tables: save and load of shards, with re-sharding and checks
 * (store.h). */
#include <errno.h>
#include <glob.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "algorithms/embedding/store.h"
#include "runtime/hash.h"
#include "runtime/log.h"

#define STORE_MAGIC "SHSEMB\0\0"
#define STORE_VERSION 2u /* 1: 64-byte header, no save id, no checksums */
#define STORE_DTYPE_F32 1u

/* On-disk header, little-endian fields of fixed width. */
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
    uint32_t optimizer;
    uint64_t save_id[2];
    uint64_t holders_hash;
    uint64_t rows_sum;  /* XXH3-64 of the rows as stored (dim floats each) */
    uint64_t state_sum; /* XXH3-64 of the state block, 0 without one */
    uint64_t reserved[3];
    uint64_t header_sum; /* XXH3-64 of every byte above */
} store_hdr_t;

_Static_assert(sizeof(store_hdr_t) == SHS__EMB_HDR_BYTES, "the shard file header size");
_Static_assert(offsetof(store_hdr_t, header_sum) == SHS__EMB_HDR_BYTES - 8,
               "the header's checksum is its last word");

static uint64_t header_sum(const store_hdr_t *h)
{
    return shs__hash64(h, offsetof(store_hdr_t, header_sum), 0);
}

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

shs_status_t shs__emb_fault_status(const shs__emb_fault_t *f)
{
    switch ((shs__emb_cause_t)f->cause) {
    case SHS__EMB_FAULT_NONE:
        return SHS_OK;
    case SHS__EMB_FAULT_NO_SAVE:
    case SHS__EMB_FAULT_OPEN:
    case SHS__EMB_FAULT_SHORT:
        return SHS_ERR_IO;
    case SHS__EMB_FAULT_SHAPE:
        return SHS_ERR_SIZE_MISMATCH;
    case SHS__EMB_FAULT_NO_STATE:
        return SHS_ERR_UNSUPPORTED;
    case SHS__EMB_FAULT_MEMORY:
        return SHS_ERR_NO_MEMORY;
    default:
        return SHS_ERR_PROTOCOL;
    }
}

void shs__emb_fault_format(const shs__emb_fault_t *f, const char *dir, char *buf, size_t len)
{
    char file[SHS__EMB_PATH_MAX];
    unsigned long long a = f->a, b = f->b, last = f->b > 0 ? f->b - 1 : 0;
    if (f->shards == 0 || shard_path(file, dir, f->file, f->shards, "") != SHS_OK)
        snprintf(file, sizeof(file), "%s", dir);
    switch ((shs__emb_cause_t)f->cause) {
    case SHS__EMB_FAULT_NONE:
        snprintf(buf, len, "%s: no fault", file);
        break;
    case SHS__EMB_FAULT_NO_SAVE:
        snprintf(buf, len, "no embedding save in %s (no shard-0-of-N.emb)", dir);
        break;
    case SHS__EMB_FAULT_SEVERAL:
        snprintf(buf, len, "%s holds %llu saves (shard-0-of-N.emb for several N); keep one",
                 dir, a);
        break;
    case SHS__EMB_FAULT_OPEN:
        snprintf(buf, len, "cannot open embedding shard %s: %s", file, strerror(f->err));
        break;
    case SHS__EMB_FAULT_SHORT:
        snprintf(buf, len, "%s is short: bytes %llu..%llu cannot be read (%s)", file, a, last,
                 f->err != 0 ? strerror(f->err) : "truncated");
        break;
    case SHS__EMB_FAULT_LONG:
        snprintf(buf, len, "%s is longer than its header says (%llu bytes)", file, a);
        break;
    case SHS__EMB_FAULT_FORMAT:
        if (a == 0)
            snprintf(buf, len, "%s is not an embedding shard file", file);
        else
            snprintf(buf, len, "%s has format version %llu; this library reads version %u",
                     file, a, STORE_VERSION);
        break;
    case SHS__EMB_FAULT_HEADER:
    case SHS__EMB_FAULT_ROWS:
    case SHS__EMB_FAULT_STATE:
        snprintf(buf, len, "%s: the %s block (bytes %llu..%llu) fails its checksum", file,
                 f->cause == SHS__EMB_FAULT_HEADER ? "header"
                 : f->cause == SHS__EMB_FAULT_ROWS ? "rows"
                                                   : "optimizer state",
                 a, last);
        break;
    case SHS__EMB_FAULT_PLACE:
        snprintf(buf, len, "%s holds shard %llu of %llu: shard files renamed or swapped", file,
                 a >> 32, a & 0xffffffffull);
        break;
    case SHS__EMB_FAULT_MIXED:
        snprintf(buf, len, "%s is of save %016llx%016llx, not of shard 0's: shards of two "
                 "saves are mixed", file, a, b);
        break;
    case SHS__EMB_FAULT_DISAGREE:
        snprintf(buf, len, "%s disagrees with shard 0 of its save (rows, dim, map, holders, "
                 "optimizer, row count or state)", file);
        break;
    case SHS__EMB_FAULT_SHAPE:
        snprintf(buf, len, "%s holds a table of %llu rows x %llu, not this table's shape",
                 file, a, b);
        break;
    case SHS__EMB_FAULT_NO_STATE:
        snprintf(buf, len, "%s has no optimizer state (saved without Adagrad)", file);
        break;
    case SHS__EMB_FAULT_MAP:
        snprintf(buf, len, "%s: unknown row mapping %llu", file, a);
        break;
    case SHS__EMB_FAULT_MEMORY:
        snprintf(buf, len, "cannot allocate the staging copy to load %s", dir);
        break;
    default:
        snprintf(buf, len, "%s: load refused (cause %u)", file, f->cause);
        break;
    }
}

static shs_status_t write_all(FILE *f, const void *p, size_t bytes, const char *path)
{
    if (bytes != 0 && fwrite(p, 1, bytes, f) != bytes) {
        SHS_ERROR("cannot write %s: %s", path, strerror(errno));
        return SHS_ERR_IO;
    }
    return SHS_OK;
}

/* The header of shard `shard` of l, with the checksums of its blocks. */
static shs_status_t make_header(store_hdr_t *h, const shs__emb_layout_t *l, uint32_t shard,
                                uint32_t dim, size_t stride, const float *rows,
                                const float *state, const shs__emb_save_info_t *info)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, STORE_MAGIC, sizeof(h->magic));
    h->version = STORE_VERSION;
    h->dtype = STORE_DTYPE_F32;
    h->rows = l->rows;
    h->dim = dim;
    h->map = (uint32_t)l->map;
    h->shards = l->shards;
    h->shard = shard;
    h->shard_rows = shs__emb_shard_rows(l, shard);
    h->has_state = state != NULL;
    h->optimizer = info->optimizer;
    memcpy(h->save_id, info->id, sizeof(h->save_id));
    h->holders_hash = info->holders_hash;
    shs__hash_t sum;
    shs_status_t st = shs__hash_begin(&sum, 0);
    if (st != SHS_OK)
        return st;
    for (uint64_t k = 0; k < h->shard_rows; k++)
        shs__hash_update(&sum, rows + k * stride, dim * sizeof(float));
    h->rows_sum = shs__hash_end(&sum);
    if (state != NULL)
        h->state_sum = shs__hash64(state, h->shard_rows * sizeof(float), 0);
    h->header_sum = header_sum(h);
    return SHS_OK;
}

shs_status_t shs__emb_shard_save(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, size_t stride, const float *rows,
                                 const float *state, const shs__emb_save_info_t *info)
{
    char path[SHS__EMB_PATH_MAX], tmp[SHS__EMB_PATH_MAX];
    store_hdr_t h;
    shs_status_t st;

    if (dir == NULL || l == NULL || info == NULL || shard >= l->shards || dim == 0 ||
        stride < dim || (rows == NULL && shs__emb_shard_rows(l, shard) > 0))
        return SHS_ERR_INVALID_ARG;
    if ((st = shard_path(path, dir, shard, l->shards, "")) != SHS_OK ||
        (st = shard_path(tmp, dir, shard, l->shards, ".tmp")) != SHS_OK ||
        (st = make_header(&h, l, shard, dim, stride, rows, state, info)) != SHS_OK)
        return st;

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

/* One load: where it is, and how it refuses. */
typedef struct loader {
    const char *dir;
    uint32_t file, shards; /* the file being read: shard-<file>-of-<shards>.emb */
    shs__emb_fault_t *fault;
} loader_t;

static shs_status_t refuse(loader_t *ld, shs__emb_cause_t cause, int err, uint64_t a,
                           uint64_t b)
{
    char msg[SHS__EMB_PATH_MAX + 256];
    *ld->fault = (shs__emb_fault_t){.cause = (uint32_t)cause, .file = ld->file,
                                    .shards = ld->shards, .err = err, .a = a, .b = b};
    shs__emb_fault_format(ld->fault, ld->dir, msg, sizeof(msg));
    SHS_ERROR("%s", msg);
    return shs__emb_fault_status(ld->fault);
}

/* The save's shard count, from its one shard-0-of-N.emb. */
static shs_status_t find_shards(loader_t *ld)
{
    char pattern[SHS__EMB_PATH_MAX];
    glob_t g;
    shs_status_t st = SHS_OK;

    int n = snprintf(pattern, sizeof(pattern), "%s/shard-0-of-*.emb", ld->dir);
    if (n < 0 || (size_t)n >= sizeof(pattern)) {
        SHS_ERROR("embedding save path too long under \"%s\"", ld->dir);
        return SHS_ERR_INVALID_ARG;
    }
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        st = refuse(ld, SHS__EMB_FAULT_NO_SAVE, 0, 0, 0);
    } else if (rc != 0) {
        st = refuse(ld, SHS__EMB_FAULT_OPEN, EIO, 0, 0);
    } else if (g.gl_pathc != 1) {
        st = refuse(ld, SHS__EMB_FAULT_SEVERAL, 0, g.gl_pathc, 0);
    } else {
        const char *name = strrchr(g.gl_pathv[0], '/');
        unsigned shards = 0;
        char end = 0;
        if (sscanf(name != NULL ? name + 1 : g.gl_pathv[0], "shard-0-of-%u.em%c", &shards,
                   &end) != 2 || shards == 0)
            st = refuse(ld, SHS__EMB_FAULT_NO_SAVE, 0, 0, 0);
        ld->shards = shards;
    }
    if (rc == 0)
        globfree(&g);
    return st;
}

/* Read count items of width floats at byte `at` of the current file. */
static shs_status_t read_rows(loader_t *ld, FILE *f, float *buf, size_t count, size_t width,
                              uint64_t at, uint64_t block_end)
{
    if (count != 0 && fread(buf, width * sizeof(float), count, f) != count)
        return refuse(ld, SHS__EMB_FAULT_SHORT, ferror(f) ? errno : 0, at, block_end);
    return SHS_OK;
}

/* The header of saved shard ld->file, whole and in its place. */
static shs_status_t open_shard(loader_t *ld, FILE **f_p, store_hdr_t *h)
{
    char path[SHS__EMB_PATH_MAX];
    shs_status_t st = shard_path(path, ld->dir, ld->file, ld->shards, "");
    if (st != SHS_OK)
        return st;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return refuse(ld, SHS__EMB_FAULT_OPEN, errno, 0, 0);
    size_t got = fread(h, 1, sizeof(*h), f);
    if (memcmp(h->magic, STORE_MAGIC, got < sizeof(h->magic) ? got : sizeof(h->magic)) != 0)
        st = refuse(ld, SHS__EMB_FAULT_FORMAT, 0, 0, 0);
    else if (got >= offsetof(store_hdr_t, dtype) && h->version != STORE_VERSION)
        st = refuse(ld, SHS__EMB_FAULT_FORMAT, 0, h->version, 0);
    else if (got != sizeof(*h))
        st = refuse(ld, SHS__EMB_FAULT_SHORT, ferror(f) ? errno : 0, got, sizeof(*h));
    else if (h->header_sum != header_sum(h))
        st = refuse(ld, SHS__EMB_FAULT_HEADER, 0, 0, sizeof(*h));
    else if (h->dtype != STORE_DTYPE_F32)
        st = refuse(ld, SHS__EMB_FAULT_FORMAT, 0, 0, 0);
    else if (h->shard != ld->file || h->shards != ld->shards)
        st = refuse(ld, SHS__EMB_FAULT_PLACE, 0, (uint64_t)h->shard << 32 | h->shards, 0);
    if (st != SHS_OK) {
        fclose(f);
        return st;
    }
    *f_p = f;
    return SHS_OK;
}

/* Where a saved shard's rows go: from (old layout, shard s) to layout l's
 * shard `shard`. */
typedef struct reshard {
    const shs__emb_layout_t *from, *to;
    uint32_t from_shard, to_shard;
} reshard_t;

/* Read the block at byte `at`: `count` items of `width` floats (rows, or
 * per-row state with width 1), into the checksum, keeping those whose row
 * lands on the destination shard (dest NULL: none). */
static shs_status_t take_part(loader_t *ld, FILE *f, const reshard_t *r, uint64_t count,
                              uint32_t width, uint64_t at, float *dest, float *scratch,
                              size_t scratch_floats, shs__hash_t *sum)
{
    size_t per_read = scratch_floats / width, item = width * sizeof(float);
    for (uint64_t k = 0; k < count; k += per_read) {
        size_t n = count - k < per_read ? (size_t)(count - k) : per_read;
        shs_status_t st = read_rows(ld, f, scratch, n, width, at + k * item, at + count * item);
        if (st != SHS_OK)
            return st;
        shs__hash_update(sum, scratch, n * item);
        for (size_t i = 0; dest != NULL && i < n; i++) {
            uint32_t to;
            uint64_t loc;
            shs__emb_locate(r->to, shs__emb_global_row(r->from, r->from_shard, k + i), &to, &loc);
            if (to == r->to_shard)
                memcpy(dest + loc * width, scratch + i * width, item);
        }
    }
    return SHS_OK;
}

/* A block read whole and checked against its sum in the header. */
static shs_status_t take_block(loader_t *ld, FILE *f, const reshard_t *r, uint64_t count,
                               uint32_t width, uint64_t at, uint64_t want, float *dest,
                               float *scratch, size_t scratch_floats, shs__emb_cause_t cause)
{
    shs__hash_t sum;
    shs_status_t st = shs__hash_begin(&sum, 0);
    if (st != SHS_OK)
        return refuse(ld, SHS__EMB_FAULT_MEMORY, 0, 0, 0);
    st = take_part(ld, f, r, count, width, at, dest, scratch, scratch_floats, &sum);
    if (st != SHS_OK) {
        shs__hash_abort(&sum);
        return st;
    }
    if (shs__hash_end(&sum) != want)
        return refuse(ld, cause, 0, at, at + count * width * sizeof(float));
    return SHS_OK;
}

/* Shard 0's header against the table loading it; ol: the save's layout. */
static shs_status_t check_save(loader_t *ld, const store_hdr_t *h, const shs__emb_layout_t *l,
                               uint32_t dim, const float *state, shs__emb_layout_t *ol)
{
    if (h->rows != l->rows || h->dim != dim)
        return refuse(ld, SHS__EMB_FAULT_SHAPE, 0, h->rows, h->dim);
    if (state != NULL && !h->has_state)
        return refuse(ld, SHS__EMB_FAULT_NO_STATE, 0, 0, 0);
    if (shs__emb_layout_init(ol, h->rows, h->shards, (shs__emb_map_t)h->map) != SHS_OK)
        return refuse(ld, SHS__EMB_FAULT_MAP, 0, h->map, 0);
    return SHS_OK;
}

/* Shard s's header against shard 0's (h0) and the save's layout ol. */
static shs_status_t check_shard(loader_t *ld, const store_hdr_t *h, const store_hdr_t *h0,
                                const shs__emb_layout_t *ol)
{
    if (memcmp(h->save_id, h0->save_id, sizeof(h->save_id)) != 0)
        return refuse(ld, SHS__EMB_FAULT_MIXED, 0, h->save_id[0], h->save_id[1]);
    if (h->rows != h0->rows || h->dim != h0->dim || h->map != h0->map ||
        h->holders_hash != h0->holders_hash || h->optimizer != h0->optimizer ||
        h->has_state != h0->has_state || h->shard_rows != shs__emb_shard_rows(ol, ld->file))
        return refuse(ld, SHS__EMB_FAULT_DISAGREE, 0, 0, 0);
    return SHS_OK;
}

/* Shard ld->file of the save, checked whole, its rows for shard `shard`
 * of l kept. */
static shs_status_t load_file(loader_t *ld, FILE *f, const store_hdr_t *h,
                              const reshard_t *r, uint32_t dim, float *rows, float *state,
                              float *scratch, size_t scratch_floats)
{
    uint64_t at = SHS__EMB_HDR_BYTES;
    shs_status_t st = take_block(ld, f, r, h->shard_rows, dim, at, h->rows_sum, rows, scratch,
                                 scratch_floats, SHS__EMB_FAULT_ROWS);
    at += h->shard_rows * dim * sizeof(float);
    if (st == SHS_OK && h->has_state) {
        st = take_block(ld, f, r, h->shard_rows, 1, at, h->state_sum, state, scratch,
                        scratch_floats, SHS__EMB_FAULT_STATE);
        at += h->shard_rows * sizeof(float);
    }
    if (st == SHS_OK && fgetc(f) != EOF)
        st = refuse(ld, SHS__EMB_FAULT_LONG, 0, at, 0);
    return st;
}

shs_status_t shs__emb_shard_load(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, float *rows, float *state, float *scratch,
                                 size_t scratch_rows, shs__emb_fault_t *fault_p)
{
    shs__emb_fault_t fault = {0};
    loader_t ld = {.dir = dir, .fault = &fault};
    store_hdr_t h0, h;
    shs__emb_layout_t ol;
    FILE *f = NULL;
    shs_status_t st;

    if (fault_p != NULL)
        *fault_p = fault;
    if (dir == NULL || l == NULL || shard >= l->shards || dim == 0 || rows == NULL ||
        scratch == NULL || scratch_rows == 0)
        return SHS_ERR_INVALID_ARG;
    if ((st = find_shards(&ld)) != SHS_OK || (st = open_shard(&ld, &f, &h0)) != SHS_OK)
        goto out;
    st = check_save(&ld, &h0, l, dim, state, &ol);
    h = h0;
    for (uint32_t s = 0; st == SHS_OK && s < ld.shards; s++) {
        ld.file = s;
        if (s > 0 && (st = open_shard(&ld, &f, &h)) != SHS_OK)
            break;
        reshard_t r = {.from = &ol, .to = l, .from_shard = s, .to_shard = shard};
        if ((st = check_shard(&ld, &h, &h0, &ol)) == SHS_OK)
            st = load_file(&ld, f, &h, &r, dim, rows, state, scratch, scratch_rows * dim);
        fclose(f);
        f = NULL;
    }
    if (f != NULL)
        fclose(f);
out:
    if (fault_p != NULL)
        *fault_p = fault;
    return st;
}

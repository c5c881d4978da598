/*
 * Internal: saving and loading a table's shards (issue 16, item 5; checks,
 * issue 36). One file per shard, `<dir>/shard-<s>-of-<S>.emb`: a fixed
 * header of SHS__EMB_HDR_BYTES (magic, format version, dtype, rows, dim,
 * mapping, shard count, this shard, its row count, whether Adagrad's
 * per-row state follows, the optimizer, the save id, a hash of the holder
 * set, the XXH3-64 of the rows and of the state, and last the XXH3-64 of
 * the header's bytes before it), then the shard's rows in local order (dim
 * floats each: the in-memory check word is not saved), then the state. A
 * file is written to `<name>.tmp` and renamed, so a crash leaves the
 * previous save whole.
 *
 * Loading re-shards: a job with another number of shard holders (or
 * another mapping) reads every saved shard and keeps the rows that its new
 * layout puts on its own shard, so each holder reads the whole save once,
 * and checks all of it: every header, every rows and state block against
 * its checksum, and that every file belongs to the save of shard 0.
 */
#ifndef SHS_ALGORITHMS_EMBEDDING_STORE_H
#define SHS_ALGORITHMS_EMBEDDING_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

#include "algorithms/embedding/plan.h"

#define SHS__EMB_PATH_MAX 4096
#define SHS__EMB_HDR_BYTES 128u /* a shard file's header; its rows follow */

/* What one save is, the same in every shard file it wrote. */
typedef struct shs__emb_save_info {
    uint64_t id[2];        /* 128 random bits, drawn once per save, agreed by the ranks */
    uint64_t holders_hash; /* the saving table's holder ranks */
    uint32_t optimizer;    /* shs_emb_optimizer_t of the saving table */
} shs__emb_save_info_t;

/* Why a load refused a save, as plain data, so that ranks which only hear
 * of another rank's refusal can state it in the same words
 * (shs__emb_fault_format). Sizes fit a living allgather (transport). */
typedef enum shs__emb_cause {
    SHS__EMB_FAULT_NONE = 0,
    SHS__EMB_FAULT_NO_SAVE,   /* no shard-0-of-N.emb */
    SHS__EMB_FAULT_SEVERAL,   /* several shard-0-of-N.emb; a = how many */
    SHS__EMB_FAULT_OPEN,      /* err: errno */
    SHS__EMB_FAULT_SHORT,     /* bytes [a, b) missing; err: errno, 0 at end of file */
    SHS__EMB_FAULT_LONG,      /* bytes from a on are more than the header says */
    SHS__EMB_FAULT_FORMAT,    /* not a shard file, or a = its format version */
    SHS__EMB_FAULT_HEADER,    /* bytes [a, b): the header fails its checksum */
    SHS__EMB_FAULT_PLACE,     /* holds shard a >> 32 of a & 0xffffffff, not its name's */
    SHS__EMB_FAULT_MIXED,     /* of save a:b, not shard 0's */
    SHS__EMB_FAULT_DISAGREE,  /* same save id, other shape than shard 0's */
    SHS__EMB_FAULT_ROWS,      /* bytes [a, b): the rows fail their checksum */
    SHS__EMB_FAULT_STATE,     /* bytes [a, b): the optimizer state fails its checksum */
    SHS__EMB_FAULT_SHAPE,     /* a save of a rows x b */
    SHS__EMB_FAULT_NO_STATE,  /* saved without optimizer state */
    SHS__EMB_FAULT_MAP,       /* unknown row mapping a */
    SHS__EMB_FAULT_MEMORY,    /* the load's staging could not be allocated */
} shs__emb_cause_t;

typedef struct shs__emb_fault {
    uint32_t cause;  /* shs__emb_cause_t */
    uint32_t file;   /* the file shard-<file>-of-<shards>.emb; shards 0: none */
    uint32_t shards;
    int32_t err;
    uint64_t a, b;
} shs__emb_fault_t;

/* The status a load returns for a fault (SHS_OK for none). */
shs_status_t shs__emb_fault_status(const shs__emb_fault_t *f);

/* One line naming the file (under dir), the cause and, for a checksum or
 * a truncation, the byte range; always NUL-terminated. */
void shs__emb_fault_format(const shs__emb_fault_t *f, const char *dir, char *buf, size_t len);

/* Write shard `shard` of layout l, of save `info`: shs__emb_shard_rows(l,
 * shard) rows of dim floats, row k at rows + k * stride (stride >= dim: the
 * shard's rows carry their check word in memory, not in the file), and as
 * many Adagrad accumulators when state != NULL, with their checksums.
 * SHS_ERR_IO (logged with the path and errno's text) when the file cannot be
 * written; SHS_ERR_INVALID_ARG for a bad argument or a path too long;
 * SHS_ERR_NO_MEMORY (logged). */
shs_status_t shs__emb_shard_save(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, size_t stride, const float *rows,
                                 const float *state, const shs__emb_save_info_t *info);

/* Fill shard `shard` of layout l (rows of dim floats; state, when not NULL,
 * one accumulator per row) from the save in dir, whatever its shard count
 * and mapping. Scratch of `scratch_rows` rows (>= 1) bounds the memory the
 * load uses beyond the destination. Every file of the save is read whole
 * and checked, whatever rows the destination keeps of it.
 * SHS_ERR_IO: a shard file is missing, short or unreadable;
 * SHS_ERR_SIZE_MISMATCH: the save has other rows or dim than l and dim;
 * SHS_ERR_PROTOCOL: a file is not a shard file of this format version, sits
 * in another shard's place, belongs to another save than shard 0 (or
 * disagrees with it), is longer than its header says, or a checksum (of
 * its header, rows or state) does not match; SHS_ERR_UNSUPPORTED: state
 * wanted but the save has none; SHS_ERR_NO_MEMORY. Each refusal is logged
 * (shs__emb_fault_format) and, when fault_p is not NULL, described there
 * (cause NONE on success). The load writes rows as it reads them: on an
 * error the destination holds a partial load, so a caller that must keep
 * its rows loads into a staging copy. */
shs_status_t shs__emb_shard_load(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, float *rows, float *state, float *scratch,
                                 size_t scratch_rows, shs__emb_fault_t *fault_p);

#endif

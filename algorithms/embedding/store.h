/*
 * Internal: saving and loading a table's shards (issue 16, item 5). One file
 * per shard, `<dir>/shard-<s>-of-<S>.emb`: a fixed header (magic, version,
 * rows, dim, dtype, mapping, shard count, this shard, its row count, whether
 * Adagrad's per-row state follows), then the shard's rows in local order,
 * then the state. A file is written to `<name>.tmp` and renamed, so a crash
 * leaves the previous save whole.
 *
 * Loading re-shards: a job with another number of shard holders (or
 * another mapping) reads every saved shard and keeps the rows that its new
 * layout puts on its own shard, so each holder reads the whole save once.
 */
#ifndef SHS_ALGORITHMS_EMBEDDING_STORE_H
#define SHS_ALGORITHMS_EMBEDDING_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowsync/status.h>

#include "algorithms/embedding/plan.h"

#define SHS__EMB_PATH_MAX 4096

/* Write shard `shard` of layout l: shs__emb_shard_rows(l, shard) rows of dim
 * floats, row k at rows + k * stride (stride >= dim: the shard's rows carry
 * their check word in memory, not in the file), and as many Adagrad
 * accumulators when state != NULL.
 * SHS_ERR_IO (logged with the path and errno's text) when the file cannot be
 * written; SHS_ERR_INVALID_ARG for a bad argument or a path too long. */
shs_status_t shs__emb_shard_save(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, size_t stride, const float *rows,
                                 const float *state);

/* Fill shard `shard` of layout l (rows of dim floats; state, when not NULL,
 * one accumulator per row) from the save in dir, whatever its shard count
 * and mapping. Scratch of `scratch_rows` rows (>= 1) bounds the memory the
 * load uses beyond the destination.
 * SHS_ERR_IO: a shard file is missing, short or unreadable (the path named);
 * SHS_ERR_SIZE_MISMATCH: the save has other rows or dim than l and dim;
 * SHS_ERR_PROTOCOL: a file is not a shard of this save (magic, version,
 * shard count, dtype disagree); SHS_ERR_UNSUPPORTED: state wanted but the
 * save has none. The load writes rows as it reads them: on an error the
 * destination holds a partial load, so a caller that must keep its rows
 * loads into a staging copy. */
shs_status_t shs__emb_shard_load(const char *dir, const shs__emb_layout_t *l, uint32_t shard,
                                 uint32_t dim, float *rows, float *state, float *scratch,
                                 size_t scratch_rows);

#endif

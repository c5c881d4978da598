/*
 * The hybrid trainer's workload: a click log shaped like Criteo's (13 dense
 * features, 26 categorical ones with long-tailed ids) drawn from a hidden
 * teacher, and a DLRM-style student whose embedding tables live apart from
 * its dense part:
 *
 *   bottom MLP  x (13) -> relu(bh) -> relu(dim)              = v_0
 *   embeddings  v_f = row of field f's value, f = 1..26      (the sharded table)
 *   interaction z = [v_0, <v_i, v_j> for 0 <= i < j <= 26]  (dim + 351)
 *   top MLP     z -> relu(th) -> 1 logit
 *
 * The dense part (both MLPs) is one flat float32 array, the region the
 * shadow engine syncs; the rows come from outside (a sharded table, or a
 * replicated array) and the step hands back their gradients. No library
 * calls here.
 */
#ifndef SHS_EXAMPLES_CTR_DLRM_H
#define SHS_EXAMPLES_CTR_DLRM_H

#include <stddef.h>
#include <stdint.h>

#define DLRM_DENSE 13  /* dense features */
#define DLRM_FIELDS 26 /* categorical features, one embedding table each */
#define DLRM_VECS (DLRM_FIELDS + 1)
#define DLRM_PAIRS (DLRM_VECS * (DLRM_VECS - 1) / 2)
#define DLRM_MAX_DIM 64
#define DLRM_MAX_HIDDEN 256

typedef struct dlrm_example {
    float dense[DLRM_DENSE];
    uint32_t cat[DLRM_FIELDS]; /* raw value ids, < the field's vocabulary */
    float label;               /* 0 or 1 */
} dlrm_example_t;

/* The teacher: deterministic from the seed. */
typedef struct dlrm_teacher {
    uint64_t seed;
    float bias; /* calibrated so that the mean CTR is the target */
} dlrm_teacher_t;

/* Vocabulary of field f (values 0 .. vocab - 1): Criteo's cardinalities
 * over ten, so from 3 to about 1M; ids follow a Zipf-like law (value k
 * about as likely as 1 / (k + 1)). */
uint32_t dlrm_vocab(int f);

void dlrm_teacher_init(dlrm_teacher_t *t, uint64_t seed, double target_ctr);

/* Example idx of the stream: a pure function of (teacher, idx). */
void dlrm_example(const dlrm_teacher_t *t, uint64_t idx, dlrm_example_t *ex);

/* Where field f's rows sit in one table of `rows` rows: each field gets
 * min(vocab, cap) rows, cap chosen so that the fields fill the table; a
 * field with more values than rows hashes them onto its rows. */
typedef struct dlrm_tables {
    uint64_t rows; /* total, <= the requested rows */
    uint64_t off[DLRM_FIELDS], size[DLRM_FIELDS];
} dlrm_tables_t;

/* 0, or -1 when rows < DLRM_FIELDS (every field needs a row). */
int dlrm_tables_init(dlrm_tables_t *tb, uint64_t rows);

/* The table row of field f's value v. */
uint64_t dlrm_row(const dlrm_tables_t *tb, int f, uint32_t v);

/* The dense part's shape and its offsets (in floats) in the flat array. */
typedef struct dlrm_layout {
    int dim, bh, th; /* embedding dim, bottom and top hidden units */
    int tin;         /* top MLP input: dim + DLRM_PAIRS */
    size_t bw1, bb1, bw2, bb2, tw1, tb1, tw2, tb2, count;
} dlrm_layout_t;

/* 0, or -1 when dim or a hidden width is out of 1..DLRM_MAX_*. */
int dlrm_layout_init(dlrm_layout_t *l, int dim, int bh, int th);

/* Deterministic initial dense part (the same on every rank for one seed);
 * the top bias starts at the prior's logit. */
void dlrm_dense_init(const dlrm_layout_t *l, float *p, uint64_t seed, double prior_ctr);

/* Predicted click probability of ex, with rows[f * dim ..] the row of its
 * field f. */
float dlrm_predict(const dlrm_layout_t *l, const float *p, const dlrm_example_t *ex,
                   const float *rows);

/* One SGD step on one example: the dense part p is updated in place with no
 * lock (Hogwild), and grows[f * dim ..] receives the gradient of the log
 * loss with respect to field f's row (the caller sends it to the rows'
 * owner). Every gradient is taken at the values before the step. Returns
 * the predicted probability before the update. */
float dlrm_step(const dlrm_layout_t *l, float *p, const dlrm_example_t *ex, const float *rows,
                float lr, float *grows);

#endif

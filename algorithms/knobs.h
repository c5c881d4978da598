/* The algorithms' knob tables, listed with every other layer's in
 * algorithms/knobs.c. */
#ifndef SHS_ALGORITHMS_KNOBS_H
#define SHS_ALGORITHMS_KNOBS_H

#include "runtime/knob.h"

extern const shs__knob_table_t shs__shadow_knob_table; /* algorithms/shadow_knobs.c */
extern const shs__knob_table_t shs__coll_knob_table;   /* algorithms/coll_knobs.c */
extern const shs__knob_table_t shs__emb_knob_table;    /* algorithms/emb_knobs.c */

/* The words of an shs_wire_t knob (SHS_COLL_WIRE, SHS_SHADOW_WIRE). */
extern const char *const shs__wire_words[];
extern const int shs__wire_values[];

/* SHS_SHADOW_REJOIN_SEED: where a rejoined rank's engine takes its model. */
enum { SHS__SEED_PEER = 0, SHS__SEED_OWN = 1 };
extern const char *const shs__seed_words[];
extern const int shs__seed_values[];

#endif

/*
 * Every layer's knob table, in the order the README lists them and the
 * tables resolve (runtime/knob.h says why this is a list the top of the link
 * provides and not constructors). A layer's new table is added here.
 */
#include <stddef.h>

#include <shadowsync/defs.h>

#include "algorithms/knobs.h"
#include "transport/services.h"

const shs__knob_table_t *const shs__knob_tables[] = {
    &shs__runtime_knob_table,
    &shs__transport_knob_table,
    &shs__shadow_knob_table,
    &shs__coll_knob_table,
    &shs__emb_knob_table,
    NULL,
};

const char *const shs__wire_words[] = {"native", "bf16", NULL};
const int shs__wire_values[] = {SHS_WIRE_NATIVE, SHS_WIRE_BF16};
const char *const shs__seed_words[] = {"peer", "own", NULL};
const int shs__seed_values[] = {SHS__SEED_PEER, SHS__SEED_OWN};

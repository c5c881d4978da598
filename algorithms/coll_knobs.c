/*
 * The collectives' knobs (algorithms/coll/): chunking and inbox slots,
 * staging for unregistered buffers, their channel, the eager slot. For now
 * they resolve into the context's shs__config_t like every other table,
 * where collective.c reads them (shs__ctx_config(ctx)->coll_*).
 */
#include "algorithms/knobs.h"

static const shs__knob_t coll_knobs[] = {
    /* 1 MiB: every chunk costs a work request, an immediate, a credit and a
     * wake-up of a waiting rank; on rxe (2026-12-03, one guest, 4 ranks,
     * 16 MiB float sum) 1 MiB chunks gave 20.5/20.0 MB/s busbw against
     * 18.1/17.1 at 256 KiB, and 2 MiB no more than 1 MiB. A ring of 8
     * still cuts a 16 MiB buffer into 2 chunks per segment, and shorter
     * calls are cut finer (SHS_COLL_MIN_CHUNK). Inbox: slots * 1 MiB. */
    SHS_KNOB_SIZE("SHS_COLL_CHUNK", coll_chunk, "1m", 64, 1ll << 30,
                  "collectives: bytes per pipelined chunk = per inbox slot (k/m/g; a multiple of 8)"),
    /* 4: two chunks in flight while two are reduced keeps the link and the
     * reduction busy; 2 * slots notifications per peer stay far below
     * SHS_RQ_DEPTH. */
    SHS_KNOB_INT("SHS_COLL_SLOTS", coll_slots, "4", 1, 63,
                 "collectives: inbox slots (credits) a receiver grants its left neighbour"),
    /* 16 MiB: one pass for the buffers the benchmarks use; larger buffers
     * take several passes of the ring, smaller ones cost nothing extra. */
    SHS_KNOB_SIZE("SHS_COLL_STAGE", coll_stage, "16m", 0, 1ll << 40,
                  "collectives: registered staging bytes for shs_allreduce on unregistered memory "
                  "(0 = none)"),
    /* auto: every collective takes a free channel from its context, so two
     * collectives (or a collective and a shadow engine's internal one) never
     * take each other's immediates; a number reserves exactly that channel
     * (create fails when another user of the context holds it). */
    SHS_KNOB_INT_AUTO("SHS_COLL_CHANNEL", coll_channel, "auto", 0, 255,
                      "collectives: channel in the top 8 bits of their immediates: auto "
                      "(allocated by the context) or 0..255"),
    /* 32 KiB: the first chunk of a small reduction skips the wait for the
     * grant (one message latency, the most a latency-bound call among few
     * ranks can save); covers the chunks of a 64 KiB pair exchange, and
     * costs 32 KiB per rank of the job in each inbox. */
    SHS_KNOB_SIZE("SHS_COLL_EAGER", coll_eager, "32k", 0, 1ll << 30,
                  "collectives: per-sender inbox slot for a call's first chunk up to this size (k/m/g; 0 = none)"),
    /* 16 KiB: a segment shorter than the slots together (a 1 MiB call on 4
     * ranks: 256 KiB) is cut into `slots` chunks so that the link, the
     * reduction and the next hop still overlap. The floor keeps the
     * per-chunk costs (a work request, an immediate, a credit, a wake-up)
     * small next to each chunk; 16 KiB is a judgement, not a measured
     * optimum (measured: 1 MiB on 4 ranks, 64 KiB chunks, 1.15x Gloo). */
    SHS_KNOB_SIZE("SHS_COLL_MIN_CHUNK", coll_min_chunk, "16k", 8, 1ll << 30,
                  "collectives: smallest chunk when a short call is cut to pipeline (k/m/g; a "
                  "multiple of 8; >= SHS_COLL_CHUNK: never cut below SHS_COLL_CHUNK)"),
    /* native: exact. bf16 halves the bytes of float32 calls at one
     * rounding per hop (the bound is in collective.h, Wire); a trade a job
     * makes on purpose, never a default. */
    SHS_KNOB_ENUM("SHS_COLL_WIRE", coll_wire, "native", shs__wire_words, shs__wire_values,
                  "collectives: float32 on the wire: native (exact) or bf16 (half the bytes, "
                  "rounded per hop; collective.h, Wire)"),
};

const shs__knob_table_t shs__coll_knob_table = SHS_KNOB_TABLE("algorithms", coll_knobs, NULL);

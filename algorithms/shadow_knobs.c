/*
 * The shadow engine's knobs (algorithms/shadow/): where its thread runs, how
 * long it waits for a peer, how it pulls snapshots, its channel. For now they
 * resolve into the context's shs__config_t like every other table, where
 * shadow.c reads them (shs__ctx_config(ctx)->shadow_*).
 */
#include "algorithms/knobs.h"

static const shs__knob_t shadow_knobs[] = {
    /* auto: the last CPU the process may use, since trainers conventionally
     * place their workers from CPU 0 upwards. */
    SHS_KNOB_STR("SHS_SHADOW_PIN", shadow_pin, "auto", shs__knob_parse_pin,
                 "CPUs of the shadow sync thread: auto (last allowed CPU), none, or a list like 3 or 2-3"),
    /* 30 s: in the foreground (FR) modes a peer reaches its sync point up to a
     * whole sync interval of training later than a fast rank; a dead peer is
     * still reported by the transport within SHS_OP_TIMEOUT_MS. */
    SHS_KNOB_INT("SHS_SHADOW_WAIT_MS", shadow_wait_ms, "30000", 1, SHS_KNOB_MS_MAX,
                 "bound on waiting for a peer's round snapshot or inbox credit (ms)"),
    /* auto: a member that has not published a round within 4 times the
     * median of the group's recent full rounds (at least 200 ms; before 4
     * full rounds, SHS_SHADOW_WAIT_MS) is left out of that round by every
     * member (shadow.h, Stragglers); 200 ms absorbs a scheduler's or a
     * collector's pause without leaving anyone out. */
    SHS_KNOB_INT_AUTO("SHS_SHADOW_STRAGGLER_MS", shadow_straggler_ms, "auto", 1, SHS_KNOB_MS_MAX,
                      "shadow engine, pull path: how long a round waits for a member's snapshot "
                      "before leaving it out of that round: auto (4x the median round, at least "
                      "200 ms) or ms"),
    /* 1 MiB: ~100 us of transfer at 10 GB/s amortizes the per-read cost, and
     * (g - 1) receive buffers of this size stay small. */
    SHS_KNOB_SIZE("SHS_SHADOW_CHUNK", shadow_chunk, "1m", 64, 1ll << 30,
                  "bytes per pulled piece of a peer's snapshot (k/m/g suffixes)"),
    /* auto: the engine takes a free channel from its context
     * (shs_ctx_channel_alloc), so it never shares one with a collective or
     * the program; a number reserves exactly that channel (create fails when
     * another user holds it). It tags the EASGD deltas and acknowledgements. */
    SHS_KNOB_INT_AUTO("SHS_SHADOW_CHANNEL", shadow_channel, "auto", 0, 255,
                      "shadow engine: channel in the top 8 bits of its immediates (EASGD inbox): "
                      "auto (allocated by the context) or 0..255"),
    /* 80: the shadow thread sleeps through most of a transfer it has timed
     * before instead of polling for it, leaving the CPU to the workers (and
     * to Soft-RoCE's kernel threads, which move the data); the last 20%
     * absorbs the variation and keeps the latency. */
    /* below 100: a piece's measured time includes the nap, so at 100 the
     * expected time could never come down again (path_pull.c) */
    SHS_KNOB_INT("SHS_SHADOW_NAP", shadow_nap, "80", 0, 95,
                 "shadow engine: percent of a pull's expected time slept before polling (0 = spin)"),
    /* native: exact snapshots. bf16 halves the bytes every round reads;
     * the sum over ranks stays conserved (shadow.h, Wire). */
    SHS_KNOB_ENUM("SHS_SHADOW_WIRE", shadow_wire, "native", shs__wire_words, shs__wire_values,
                  "shadow engine: published snapshots as native float32 or bf16 (half the bytes; "
                  "MA and BMUF on the pull path)"),
    /* peer: a rank that rejoined a running job (SHS_REJOIN) starts from the
     * model its group averages, one read of a living peer's newest
     * snapshot; own: from the model the program put in the region (its
     * checkpoint), which the rounds then pull towards the others'. */
    SHS_KNOB_ENUM("SHS_SHADOW_REJOIN_SEED", shadow_rejoin_seed, "peer", shs__seed_words,
                  shs__seed_values,
                  "shadow engine on a rank that rejoined a running job: start from a living "
                  "peer's published snapshot (peer) or from the program's own model (own)"),
};

const shs__knob_table_t shs__shadow_knob_table = SHS_KNOB_TABLE("algorithms", shadow_knobs, NULL);

/* The schedule-kind vocabulary (DESIGN.md "Schedules").
 *
 * Every fact about a schedule kind lives in one table entry: its name in plan
 * files, a one-line summary, whether it is synchronous, which plan options it
 * reads, how many micro-batches a stage keeps in flight, how many weight
 * versions it holds, and the planner/ function that writes its program. Plan
 * parsing and writing (protocol/plan.c), the cost model, the schedule builder,
 * the plan view and the CLIs all read the table; a schedule name as a string
 * exists only here (and at the edges: files, screen, docs).
 *
 * A new built-in kind is one generator file in planner/ and one line in
 * PT_SCHED_KIND_LIST. A program can also add a kind at run time with
 * pt_sched_register (planner/schedule.h), which enters the facts here through
 * pt_sched_kind_register and keeps the generator in planner/.
 *
 * protocol/ may not include planner/, yet plan files must be parsed and
 * checked without it (protocol tests, fuzzers, tools), so the built-in kinds
 * are known here statically. The generator column is a bare function name
 * that only planner/schedule.c expands; protocol never refers to it. */
#ifndef PT_PROTOCOL_SCHED_KIND_H
#define PT_PROTOCOL_SCHED_KIND_H

#include <stdbool.h>
#include <stddef.h>

#include "protocol/error.h"

/* What a kind's in-flight and weight-version formulas see of one stage. */
typedef struct pt_sched_shape {
    int stages;        /* S */
    int stage;         /* i, in [0, S) */
    int microbatches;  /* M per iteration (window) */
    char policy;       /* 'A' or 'B': read by kinds with PT_SCHED_OPT_POLICY */
    int vertical_sync; /* read by kinds with PT_SCHED_OPT_VSYNC */
    int recompute;     /* 1: the stage recomputes its activations before the backward */
    int chunks;        /* kinds with PT_SCHED_OPT_CHUNKS: model chunks per device, v (stages
                          counts the S·v chunk stages, stage is a chunk stage); 0 or 1: one */
} pt_sched_shape;

/* Formulas the table's built-in kinds share (DESIGN.md "Reference facts");
 * a kind registered at run time may use them too. Each is O(1) and pure. */
/* In flight at stage i: every micro-batch of the iteration, M (gpipe). */
int pt_sched_kind_inflight_all(const pt_sched_shape *q);
/* 1F1B warm-up: min(S-i, M) (dapple policy A, 1f1b-flush, 2bw, pipesgd). */
int pt_sched_kind_inflight_1f1b(const pt_sched_shape *q);
/* DAPPLE's policies: A min(S-i, M), B min(2(S-i)-1, M). */
int pt_sched_kind_inflight_policy(const pt_sched_shape *q);
/* Asynchronous 1F1B over an unbounded run: S-i (pipedream). */
int pt_sched_kind_inflight_async(const pt_sched_shape *q);
/* ZB-H1: min(S, M) at every stage (stage i delays its W by i micro-batches
 * past 1F1B's S-i warm-up), the peak 1F1B reaches on stage 0; a recomputing
 * stage runs W right after B (W reads the recomputed activations, which
 * recomputation keeps for one micro-batch at a time): min(S-i, M). */
int pt_sched_kind_inflight_zb_h1(const pt_sched_shape *q);
/* ZB-H2: min(2S-1-i, M) at stage i (policy B's 2(S-i)-1 warm-up forwards,
 * W delayed by i; planner/sched_zb_h2.c); a recomputing stage runs W right
 * after B: policy B's min(2(S-i)-1, M). */
int pt_sched_kind_inflight_zb_h2(const pt_sched_shape *q);
/* Interleaved 1F1B (Megatron-LM): micro-batches chunk stage i = r + c·P keeps
 * at once, P = stages / chunks pipeline ranks, r the rank, c the chunk: the
 * count of chunk c's units in flight at the peak of rank r's order (warm-up
 * of min(2(P-r-1) + (v-1)P, v·M) forwards, or all v·M when M == P, then
 * 1F1B over the chunk units; planner/sched_interleaved.c). O(v·M). */
int pt_sched_kind_inflight_interleaved(const pt_sched_shape *q);
/* The interleaved 1F1B order (Megatron-LM's
 * forward_backward_pipelining_with_interleaving), shared by the formula above
 * and planner/sched_interleaved.c. Pipeline rank r of P runs v·M "units"
 * forward and v·M backward, unit k being micro-batch (k / (P·v))·P + k % P of
 * chunk (k % (P·v)) / P forward, of chunk v-1 - (k % (P·v)) / P backward:
 * micro-batches go through the chunks in groups of P. The rank runs
 * pt_sched_interleaved_warmup forward units, then forward W+k, backward k for
 * k = 0.., then the backward units left. M must be a multiple of P. */
int pt_sched_interleaved_warmup(int P, int v, int M, int r);
void pt_sched_interleaved_unit(int P, int v, int k, int backward, int *chunk, int *mb);
/* Micro-batches stage i holds between their BWD_INPUT and BWD_WEIGHT at its
 * peak (the "hold" column): the zero-bubble kinds delay stage i's W by i
 * micro-batches (none when it recomputes), so right after the B that starts
 * the steady state min(i + 1, M) are pending (planner/sched_zb.c), the moment
 * the stage also holds the most in flight. */
int pt_sched_kind_hold_zb(const pt_sched_shape *q);
/* 1f1b-gw, every W gathered after the stage's last B: each micro-batch keeps
 * its activations and its B->W tensors until then, so at the peak (the last
 * B) all M are in flight and all M held (which is why its warm-up can be
 * policy B's deeper one for free); a recomputing stage runs W right after B
 * after the same warm-up: policy B's min(2(S-i)-1, M) in flight, one held. */
int pt_sched_kind_inflight_gw(const pt_sched_shape *q);
int pt_sched_kind_hold_gw(const pt_sched_shape *q);
/* One weight version (every flushing kind). */
int pt_sched_kind_versions_one(const pt_sched_shape *q);
/* Two versions, double buffering (2bw). */
int pt_sched_kind_versions_two(const pt_sched_shape *q);
/* PipeDream's weight stashing: S-i arrays (one per micro-batch in flight,
 * the newest of them the live weights: a stash holds the array its forward
 * read, nothing is copied); with vertical sync S on every stage (stage i > 0
 * also keeps the versions its coming micro-batches entered the pipeline
 * with). Assumes at least S micro-batches. */
int pt_sched_kind_versions_stash(const pt_sched_shape *q);

/* X(ID, name, flags, inflight, versions, hold, chunks_min, chunks_max,
 * generator, summary): one line per built-in kind. ID gives PT_SCHED_<ID>;
 * flags are PT_SCHED_* below; inflight, versions and hold are formulas of the
 * form above (hold NULL: the kind does not split the backward); chunks_min and
 * chunks_max bound the model chunks per device v the kind runs (1 and 1 for
 * one chunk; a kind with PT_SCHED_OPT_CHUNKS has 2 and up); generator is
 * `int generator(pt_program *, pt_error *)` in planner/sched_<kind>.c. */
#define PT_SCHED_KIND_LIST(X)                                                                      \
    X(GPIPE, "gpipe", PT_SCHED_SYNCHRONOUS, pt_sched_kind_inflight_all,                            \
      pt_sched_kind_versions_one, NULL, 1, 1, pt_sched_gen_gpipe,                                  \
      "all forwards, then all backwards; flush; optional recomputation")                           \
    X(DAPPLE, "dapple", PT_SCHED_SYNCHRONOUS | PT_SCHED_OPT_POLICY, pt_sched_kind_inflight_policy, \
      pt_sched_kind_versions_one, NULL, 1, 1, pt_sched_gen_dapple,                                 \
      "early backward: K_i warm-up forwards then 1F1B (policy A: min(S-i,M), B: "                  \
      "min(2(S-i)-1,M)); flush")                                                                   \
    X(1F1B_FLUSH, "1f1b-flush", PT_SCHED_SYNCHRONOUS, pt_sched_kind_inflight_1f1b,                 \
      pt_sched_kind_versions_one, NULL, 1, 1, pt_sched_gen_1f1b_flush,                             \
      "PipeDream-Flush: S-i warm-up forwards, 1F1B, flush per mini-batch")                         \
    X(PIPEDREAM, "pipedream", PT_SCHED_OPT_VSYNC | PT_SCHED_OPT_ROUND_ROBIN,                       \
      pt_sched_kind_inflight_async, pt_sched_kind_versions_stash, NULL, 1, 1,                      \
      pt_sched_gen_pipedream,                                                                      \
      "asynchronous 1F1B, weight stashing; a replicated stage takes whole micro-batches "          \
      "round-robin and synchronises once per round (or split-concat: step after every backward)")  \
    X(2BW, "2bw", 0, pt_sched_kind_inflight_1f1b, pt_sched_kind_versions_two, NULL, 1, 1,          \
      pt_sched_gen_2bw,                                                                            \
      "1F1B without flush, gradients coalesced over M micro-batches, two weight versions")         \
    X(PIPESGD, "pipesgd", PT_SCHED_OVERLAP_ALLREDUCE, pt_sched_kind_inflight_1f1b,                 \
      pt_sched_kind_versions_one, NULL, 1, 1, pt_sched_gen_pipesgd,                                \
      "all-reduce of iteration t overlapped with the compute of t+1 (one step stale)")             \
    X(ZB_H1, "zb-h1", PT_SCHED_SYNCHRONOUS, pt_sched_kind_inflight_zb_h1,                          \
      pt_sched_kind_versions_one, pt_sched_kind_hold_zb, 1, 1, pt_sched_gen_zb_h1,                 \
      "zero bubble H1: backward split into B and W, W delayed to fill the cool-down; 1F1B's "      \
      "peak memory, about a third of its bubble")                                                  \
    X(ZB_H2, "zb-h2", PT_SCHED_SYNCHRONOUS, pt_sched_kind_inflight_zb_h2,                          \
      pt_sched_kind_versions_one, pt_sched_kind_hold_zb, 1, 1, pt_sched_gen_zb_h2,                 \
      "zero bubble H2: ZB-H1's order after 2(S-i)-1 warm-up forwards; about twice 1F1B's "         \
      "peak memory for a smaller bubble when B > F")                                               \
    X(1F1B_GW, "1f1b-gw", PT_SCHED_SYNCHRONOUS, pt_sched_kind_inflight_gw,                         \
      pt_sched_kind_versions_one, pt_sched_kind_hold_gw, 1, 1, pt_sched_gen_1f1b_gw,               \
      "1F1B-flush with the backward split and every weight gradient gathered after the last B: "   \
      "one pass per layer over all M micro-batches; policy B's warm-up; keeps all M "              \
      "micro-batches' activations")                                                                \
    X(INTERLEAVED, "interleaved", PT_SCHED_SYNCHRONOUS | PT_SCHED_OPT_CHUNKS,                      \
      pt_sched_kind_inflight_interleaved, pt_sched_kind_versions_one, NULL, 2,                     \
      PT_SCHED_CHUNKS_MAX, pt_sched_gen_interleaved,                                               \
      "Megatron-LM interleaved 1F1B: v model chunks per device (device d holds chunks d, d+S, "    \
      "...); bubble / v for v x more point-to-point messages")

/* Facts of a kind (bits of pt_sched_kind_info.flags). */
enum {
    /* One iteration ending in a flush: a program covers one window, one weight
     * version, the same weights as single-device training. */
    PT_SCHED_SYNCHRONOUS = 1,
    /* Reads the plan's "policy" (DAPPLE's warm-up policy A or B). */
    PT_SCHED_OPT_POLICY = 2,
    /* Reads the plan's "vertical_sync" (PipeDream). */
    PT_SCHED_OPT_VSYNC = 4,
    /* A window's all-reduce runs while the next window computes, so a stage
     * holds two gradient buffers (Pipe-SGD). */
    PT_SCHED_OVERLAP_ALLREDUCE = 8,
    /* Reads the plan's "chunks" (interleaved): v model chunks per device, the
     * plan's stages being the S·v chunks in model order (docs/architecture.md). */
    PT_SCHED_OPT_CHUNKS = 16,
    /* Reads the plan's "replication" (pipedream): a replicated stage takes
     * whole micro-batches round-robin (PipeDream's runtime) or splits each
     * micro-batch over its replicas (DAPPLE's split-concat, every other kind). */
    PT_SCHED_OPT_ROUND_ROBIN = 32,
};
#define PT_SCHED_FLAGS_ALL 63u

typedef enum pt_sched_kind {
#define PT_SCHED_ENUM_(ID, name, flags, inflight, versions, hold, cmin, cmax, generator, summary)  \
    PT_SCHED_##ID,
    PT_SCHED_KIND_LIST(PT_SCHED_ENUM_)
#undef PT_SCHED_ENUM_
        PT_SCHED_BUILTIN_COUNT,
    /* Kinds registered at run time get ids in [PT_SCHED_BUILTIN_COUNT, PT_SCHED_KIND_MAX). */
    PT_SCHED_KIND_MAX = 32
} pt_sched_kind;

/* Most model chunks per device a kind may take (plan "chunks"). */
#define PT_SCHED_CHUNKS_MAX 64

/* Longest name, terminator included: a plan's "kind" must fit. */
#define PT_SCHED_NAME_MAX 32

typedef struct pt_sched_kind_info {
    const char *name; /* as in plan files: "gpipe", "1f1b-flush", ...; [a-z0-9-], unique */
    unsigned flags;   /* PT_SCHED_* */
    int (*inflight)(const pt_sched_shape *q);        /* micro-batches stage i keeps at once */
    int (*weight_versions)(const pt_sched_shape *q); /* versions stage i holds (live+stashed) */
    const char *summary;                             /* one line for help texts */
    /* From here on, zero means "none" / the default, so a registered kind may
     * leave them out. */
    int (*split_hold)(const pt_sched_shape *q); /* micro-batches stage i keeps between B and W
                                                   at its peak; NULL: the backward is not split */
    int chunks_min, chunks_max; /* model chunks per device the kind runs: 0 means 1 without
                                   PT_SCHED_OPT_CHUNKS, 2 and PT_SCHED_CHUNKS_MAX with it */
} pt_sched_kind_info;

/* The table entry of a kind (built-in or registered), or NULL for an invalid one. */
const pt_sched_kind_info *pt_sched_kind_info_of(int kind);
/* Name used in plan files, or NULL for an invalid kind. */
const char *pt_sched_kind_name(int kind);
/* Kind for an exact name; returns 0 or PT_ENOTFOUND (*out untouched). */
int pt_sched_kind_parse(const char *name, pt_sched_kind *out);
/* The kind's chunk range (the table's columns, defaults filled in): v in
 * [*lo, *hi]; 1 and 1 for a kind of one chunk per device or an invalid kind. */
void pt_sched_kind_chunks(int kind, int *lo, int *hi);
/* The kind's B->W hold for one stage (0 for a kind that does not split the
 * backward, or an invalid kind). */
int pt_sched_kind_split_hold(int kind, const pt_sched_shape *q);
/* Kinds known now: ids are [0, pt_sched_kind_count()). */
int pt_sched_kind_count(void);
/* True when the kind is valid and has every bit of `flags`. */
bool pt_sched_kind_has(int kind, unsigned flags);
/* Writes the names of the kinds that have every bit of `flags` (0: all) into
 * buf as "a, b, c" (always NUL-terminated, cut short when cap is too small);
 * returns how many kinds matched. */
int pt_sched_kind_list(unsigned flags, char *buf, size_t cap);

/* Adds a kind after the built-in ones. `info` (and the strings it points to)
 * must outlive every use of the registry: use static storage. Returns 0 and
 * the new id in *out, or PT_EINVAL (missing formula or summary, unknown
 * flag bits, a name that is empty, too long, not [a-z0-9-] or already
 * taken) or PT_ERANGE (registry full), with err naming the reason; nothing
 * is registered on error. Not thread-safe: register before other threads use
 * the registry. Programs that also need a generator register through
 * pt_sched_register (planner/schedule.h), which calls this. */
int pt_sched_kind_register(const pt_sched_kind_info *info, pt_sched_kind *out, pt_error *err);

#endif

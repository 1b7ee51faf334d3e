/* The op vocabulary (DESIGN.md "one schedule, three consumers").
 *
 * Every fact about an op kind lives in one table in op.c: its name on the wire
 * and in files, the lane it occupies on a timeline, whether it computes, which
 * ids it carries, how it is painted. The schedule generators, the simulator,
 * the executor, telemetry, the run record, the timeline, the report and the
 * exports all read this table; an op name as a string exists only here (and
 * at the edges, through pt_op_name / pt_op_parse). */
#ifndef PT_PROTOCOL_OP_H
#define PT_PROTOCOL_OP_H

#include <stdbool.h>
#include <stdint.h>

/* X(kind, lane, paint, glyph, flags) — one line per op kind; the name on the
 * wire and in files is the kind's identifier as written (op.c stringifies it,
 * so no op name is spelled twice). A
 * backward may run whole (BWD) or split in two (zero-bubble schedules, Qi et
 * al. ICLR'24): BWD_INPUT, the input gradient the previous stage waits for,
 * then BWD_WEIGHT, the weight gradient, which any later slot may take; the
 * micro-batch's activations are held until its BWD_WEIGHT. The glyph
 * of a transfer shows the way its data flows: '>' activations (downstream),
 * '<' gradients (upstream). */
#define PT_OP_LIST(X)                                                                              \
    X(FWD, COMPUTE, FWD, 'F', PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)                         \
    X(BWD, COMPUTE, BWD, 'B', PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)                         \
    X(RECOMPUTE, COMPUTE, RECOMPUTE, 'R', PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)             \
    X(SEND_ACT, COMM, COMM, '>', PT_OPK_MB | PT_OPK_P2P | PT_OPK_SEND | PT_OPK_NEXT)               \
    X(RECV_ACT, WAIT, WAIT, '>', PT_OPK_MB | PT_OPK_P2P | PT_OPK_RECV)                             \
    X(SEND_GRAD, COMM, COMM, '<', PT_OPK_MB | PT_OPK_P2P | PT_OPK_SEND)                            \
    X(RECV_GRAD, WAIT, WAIT, '<', PT_OPK_MB | PT_OPK_P2P | PT_OPK_RECV | PT_OPK_NEXT)              \
    X(ALLREDUCE, COMM, ALLREDUCE, 'A', PT_OPK_MB_RANGE | PT_OPK_VERSION | PT_OPK_COLLECTIVE)       \
    X(AR_WAIT, WAIT, WAIT, 'w', PT_OPK_MB_RANGE | PT_OPK_VERSION | PT_OPK_COLLECTIVE)              \
    X(OPT_STEP, COMPUTE, OPTSTEP, 'O', PT_OPK_COMPUTE | PT_OPK_MB_RANGE | PT_OPK_VERSION)          \
    X(BWD_INPUT, COMPUTE, BWD_INPUT, 'I', PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)             \
    X(BWD_WEIGHT, COMPUTE, BWD_WEIGHT, 'W', PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)

/* Room for any op name and its NUL (names are [A-Z_]+, at most 10 letters). */
#define PT_OP_NAME_MAX 16

typedef enum pt_op_kind {
#define PT_OP_ENUM_(kind, lane, paint, glyph, flags) PT_OP_##kind,
    PT_OP_LIST(PT_OP_ENUM_)
#undef PT_OP_ENUM_
        PT_OP_KIND_COUNT
} pt_op_kind;

/* Where an op sits on a worker's timeline. */
typedef enum pt_lane {
    PT_LANE_COMPUTE, /* FWD, BWD, BWD_INPUT, BWD_WEIGHT, RECOMPUTE, OPT_STEP: the worker's
                        compute resource */
    PT_LANE_COMM,    /* SEND_ACT, SEND_GRAD, ALLREDUCE: the worker's communication resource */
    PT_LANE_WAIT     /* RECV_*, AR_WAIT: time the worker waited, no resource used */
} pt_lane;

/* How an op is painted (theme slot, SVG pattern); PT_PAINT_BUBBLE is idle time. */
typedef enum pt_op_paint {
    PT_PAINT_FWD,
    PT_PAINT_BWD,
    PT_PAINT_BWD_INPUT,  /* B of a split backward: the input gradient */
    PT_PAINT_BWD_WEIGHT, /* W of a split backward: the weight gradient */
    PT_PAINT_RECOMPUTE,
    PT_PAINT_COMM,
    PT_PAINT_ALLREDUCE,
    PT_PAINT_OPTSTEP,
    PT_PAINT_WAIT,
    PT_PAINT_BUBBLE,
    PT_PAINT_COUNT
} pt_op_paint;

/* Facts of an op kind (bits of pt_op_info.facts). */
enum {
    PT_OPK_COMPUTE = 1,      /* occupies the compute lane and counts as busy */
    PT_OPK_MB = 2,           /* names one micro-batch (mb, rows) */
    PT_OPK_MB_RANGE = 4,     /* covers micro-batches [mb, mb_end) */
    PT_OPK_VERSION = 8,      /* carries a weight version */
    PT_OPK_P2P = 16,         /* point-to-point with a peer worker (a SEND or a RECV) */
    PT_OPK_SEND = 32,        /* queues rows for the peer and goes on */
    PT_OPK_RECV = 64,        /* blocks until the peer's rows arrived */
    PT_OPK_NEXT = 128,       /* the peer is on the next stage (else, for p2p, the previous one) */
    PT_OPK_COLLECTIVE = 256, /* part of the all-reduce of the stage's replicas (group = stage) */
};

typedef struct pt_op_info {
    const char *name; /* "FWD", "SEND_ACT", ... */
    pt_lane lane;
    pt_op_paint paint;
    char glyph;     /* one-cell mark for monochrome screens and text timelines */
    unsigned facts; /* PT_OPK_* */
} pt_op_info;

/* The table entry of a kind, or NULL for an invalid kind. */
const pt_op_info *pt_op_info_of(int kind);
/* Name of a kind ("FWD"...), "?" for an invalid kind. Never NULL. */
const char *pt_op_name(int kind);
/* Kind for an exact name; returns 0 or PT_ENOTFOUND (*out untouched). */
int pt_op_parse(const char *name, pt_op_kind *out);
/* Lane of a kind; PT_LANE_WAIT for an invalid kind. */
pt_lane pt_op_lane(int kind);
/* True when the kind computes (busy time; FWD, BWD, RECOMPUTE, OPT_STEP). */
bool pt_op_is_compute(int kind);
/* Facts of a kind (PT_OPK_* bits); 0 for an invalid kind. */
unsigned pt_op_facts(int kind);
/* True when the kind names a micro-batch (one, or a range). */
bool pt_op_has_mb(int kind);
/* True when the kind names exactly one micro-batch (FWD, BWD, RECOMPUTE,
 * SEND_*, RECV_*): the events of the others carry mb -1. */
bool pt_op_has_one_mb(int kind);
/* True for the compute ops of one micro-batch (FWD, BWD, RECOMPUTE), which
 * cover all the worker's rows. */
bool pt_op_is_mb_compute(int kind);
/* True when the kind carries a weight version. */
bool pt_op_has_version(int kind);
/* The names of every kind joined by sep ("FWD, BWD, ..."), for error
 * messages; truncated to fit cap (cap > 0). Returns out. */
char *pt_op_names_list(char *out, int cap, const char *sep);
/* Paint class; PT_PAINT_BUBBLE for an invalid kind (PT_OP_KIND_COUNT marks idle time). */
pt_op_paint pt_op_paint_of(int kind);
/* Name of a paint class ("fwd", "bwd", "bwd-input", "bwd-weight", "recompute", "comm", "allreduce",
 * "optstep", "wait", "bubble"), "?" for an invalid one. */
const char *pt_paint_name(int paint);

/* Busy and bubble, defined once for every consumer (`pipetop run`'s summary
 * in tui/run_report, the console's stats view through pt_tline_busy_fracs,
 * the simulator, the fidelity bench):
 *
 *   A worker's busy fraction over a set of iterations is the time it spent
 *   on compute-lane ops (pt_op_is_compute) of those iterations divided by
 *   the time the iterations occupy: the length of the union of their spans,
 *   the span of one iteration running from the earliest start to the latest
 *   end of any op of any worker in it. Bubble = 1 - busy.
 *
 * So the wall time of the iterations counts, not the iteration time a worker
 * reports (which leaves out its wait for the first input), time between
 * iterations with no op in flight (agent overhead) counts in neither, and
 * overlapping iterations (asynchronous schedules) count once. A simulated
 * synchronous program is one iteration spanning [0, makespan); the simulator
 * measures an asynchronous one over its steady windows instead (see
 * pt_sim_result.measure_lo), with the same pt_op_busy_frac. */

/* The span of one iteration: [lo, hi) in seconds. */
typedef struct pt_op_iter {
    int64_t step;
    double lo, hi;
} pt_op_iter;

/* The time n iterations occupy: the length of the union of their spans.
 * Sorts it[] by lo (callers pass a copy when the order matters). */
double pt_op_iters_time_s(pt_op_iter *it, int64_t n);

/* compute_s / span_s clamped to [0,1]; span_s <= 0 or compute_s <= 0 gives 0. */
double pt_op_busy_frac(double compute_s, double span_s);

#endif

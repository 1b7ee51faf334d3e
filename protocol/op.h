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

/* X(kind, name, lane, paint, glyph, flags) — one line per op kind. */
#define PT_OP_LIST(X)                                                                              \
    X(FWD, "FWD", COMPUTE, FWD, 'F', PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)                  \
    X(BWD, "BWD", COMPUTE, BWD, 'B', PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)                  \
    X(RECOMPUTE, "RECOMPUTE", COMPUTE, RECOMPUTE, 'R',                                             \
      PT_OPK_COMPUTE | PT_OPK_MB | PT_OPK_VERSION)                                                 \
    X(SEND_ACT, "SEND_ACT", COMM, COMM, '>', PT_OPK_MB | PT_OPK_P2P)                               \
    X(RECV_ACT, "RECV_ACT", WAIT, WAIT, '<', PT_OPK_MB | PT_OPK_P2P)                               \
    X(SEND_GRAD, "SEND_GRAD", COMM, COMM, '>', PT_OPK_MB | PT_OPK_P2P)                             \
    X(RECV_GRAD, "RECV_GRAD", WAIT, WAIT, '<', PT_OPK_MB | PT_OPK_P2P)                             \
    X(ALLREDUCE, "ALLREDUCE", COMM, ALLREDUCE, 'A', PT_OPK_MB_RANGE | PT_OPK_VERSION)              \
    X(AR_WAIT, "AR_WAIT", WAIT, WAIT, 'w', PT_OPK_MB_RANGE | PT_OPK_VERSION)                       \
    X(OPT_STEP, "OPT_STEP", COMPUTE, OPTSTEP, 'O',                                                 \
      PT_OPK_COMPUTE | PT_OPK_MB_RANGE | PT_OPK_VERSION)

typedef enum pt_op_kind {
#define PT_OP_ENUM_(kind, name, lane, paint, glyph, flags) PT_OP_##kind,
    PT_OP_LIST(PT_OP_ENUM_)
#undef PT_OP_ENUM_
        PT_OP_KIND_COUNT
} pt_op_kind;

/* Where an op sits on a worker's timeline. */
typedef enum pt_lane {
    PT_LANE_COMPUTE, /* FWD, BWD, RECOMPUTE, OPT_STEP: the worker's compute resource */
    PT_LANE_COMM,    /* SEND_ACT, SEND_GRAD, ALLREDUCE: the worker's communication resource */
    PT_LANE_WAIT     /* RECV_*, AR_WAIT: time the worker waited, no resource used */
} pt_lane;

/* How an op is painted (theme slot, SVG pattern); PT_PAINT_BUBBLE is idle time. */
typedef enum pt_op_paint {
    PT_PAINT_FWD,
    PT_PAINT_BWD,
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
    PT_OPK_COMPUTE = 1,  /* occupies the compute lane and counts as busy */
    PT_OPK_MB = 2,       /* names one micro-batch (mb, rows) */
    PT_OPK_MB_RANGE = 4, /* covers micro-batches [mb, mb_end) */
    PT_OPK_VERSION = 8,  /* carries a weight version */
    PT_OPK_P2P = 16,     /* point-to-point with a peer worker */
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
/* True when the kind names a micro-batch (one, or a range). */
bool pt_op_has_mb(int kind);
/* True when the kind carries a weight version. */
bool pt_op_has_version(int kind);
/* Paint class; PT_PAINT_BUBBLE for an invalid kind (PT_OP_KIND_COUNT marks idle time). */
pt_op_paint pt_op_paint_of(int kind);
/* Name of a paint class ("fwd", "bwd", "recompute", "comm", "allreduce", "optstep",
 * "wait", "bubble"), "?" for an invalid one. */
const char *pt_paint_name(int paint);

/* Busy and bubble, defined once for every consumer (run summary, stats view,
 * simulator, fidelity bench): over a window of `span_s` seconds a worker
 * that spent `compute_s` on compute-lane ops is busy compute_s / span_s
 * (clamped to [0,1]) and the rest is bubble. span_s <= 0 gives busy 0. */
double pt_op_busy_frac(double compute_s, double span_s);

#endif

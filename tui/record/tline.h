/* A timeline: op spans per stage replica, from the simulator (predicted) or
 * from agents' telemetry (measured), in one form so the console's Gantt,
 * the Chrome-trace export and the SVG picture draw both the same way.
 *
 * Rows are stage replicas, kept sorted by (stage, replica). Times are
 * seconds from an origin the builder chooses (0 = start of the program, or
 * the first event of a run). Bubbles are not stored: they are the gaps of a
 * row's compute lane inside the interval an iteration occupies, computed by
 * pt_tline_bubbles. */
#ifndef PT_TUI_TLINE_H
#define PT_TUI_TLINE_H

#include <stdint.h>

#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/error.h"

typedef struct pt_tl_span {
    double start, end; /* seconds, end >= start */
    int32_t row;       /* index into the timeline's rows */
    int32_t mb;        /* micro-batch, -1: none (kinds without pt_op_has_one_mb) */
    int64_t step;      /* iteration (measured) or window (predicted) */
    int64_t bytes;     /* moved by SEND/RECV/ALLREDUCE */
    uint8_t op;        /* pt_op_kind */
    uint8_t lane;      /* pt_lane: pt_op_lane(op); bubbles: compute */
} pt_tl_span;

typedef struct pt_tl_row {
    int stage, replica;
} pt_tl_row;

typedef struct pt_tline {
    int row_count, row_cap;
    pt_tl_row *rows; /* owned, sorted by (stage, replica) */
    int64_t count, cap;
    pt_tl_span *spans; /* owned, in insertion order */
    double t0, t1;     /* earliest start and latest end (0, 0 when empty) */
} pt_tline;

/* Empties tl, keeping its buffers. */
void pt_tline_clear(pt_tline *tl);
/* Frees what tl owns and zeroes it (NULL-safe). */
void pt_tline_release(pt_tline *tl);

/* Index of the row of (stage, replica), added (rows stay sorted, span row
 * indices are renumbered) when absent. Negative PT_E* on no memory. */
int pt_tline_row(pt_tline *tl, int stage, int replica);
/* Index of an existing row or -1. */
int pt_tline_find_row(const pt_tline *tl, int stage, int replica);

/* Appends a span whose row is already an index of tl. 0 or PT_ENOMEM. */
int pt_tline_add(pt_tline *tl, const pt_tl_span *span);

/* Fills tl (cleared first) with every op of a simulated program: one row per
 * worker, step = the op's window (mb / mb_per_window). 0 or PT_ENOMEM. */
int pt_tline_from_sim(pt_tline *tl, const pt_program *prog, const pt_sim_result *res);

/* The bubbles of `row`: gaps of its compute lane inside [lo, hi), written
 * as spans (op PT_OP_KIND_COUNT, lane compute) into out[0..cap) in time
 * order. Returns how many there are (may exceed cap: only cap written).
 * Spans of the row must not overlap on the compute lane. */
int64_t pt_tline_bubbles(const pt_tline *tl, int row, double lo, double hi, pt_tl_span *out,
                         int64_t cap);

/* Sum of compute-lane time of `row` inside [lo, hi). */
double pt_tline_busy(const pt_tline *tl, int row, double lo, double hi);

/* The span of every step present ([earliest start, latest end) over all
 * rows), sorted by step: *out (caller frees) holds *n entries. 0 or
 * PT_ENOMEM (*out NULL). */
int pt_tline_iters(const pt_tline *tl, pt_op_iter **out, int64_t *n);

/* Busy fraction of every row over the steps of the timeline, as
 * protocol/op.h defines it (compute-lane time / the time the steps occupy):
 * busy[0..row_count). 0 or PT_ENOMEM. */
int pt_tline_busy_fracs(const pt_tline *tl, double *busy);

#endif

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

/* A row's replica when the row stands for every replica of its stage: a
 * step a run record kept folded over the stage's replicas (pt_tl_fold). */
#define PT_TL_ALL_REPLICAS (-1)

typedef struct pt_tl_row {
    int stage, replica; /* replica PT_TL_ALL_REPLICAS: the stage's replicas, folded */
} pt_tl_row;

/* A step of a row whose op events a run record folded (protocol/record.h
 * "fold" and "sfold" lines): only when it ran and how long its compute took
 * are known, not its ops. A replica's row: busy_min = busy_median = busy_max
 * = its compute; a PT_TL_ALL_REPLICAS row: the band over `replicas`
 * replicas, the slowest being `straggler`. Seconds, times as spans'. */
typedef struct pt_tl_fold {
    double start, end;
    double busy_min, busy_median, busy_max;
    int64_t step;
    int32_t row;
    int replicas;
    int straggler; /* the replica of busy_max; -1: not known */
} pt_tl_fold;

typedef struct pt_tline {
    int row_count, row_cap;
    pt_tl_row *rows; /* owned, sorted by (stage, replica) */
    int64_t count, cap;
    pt_tl_span *spans; /* owned, in insertion order */
    int64_t fold_count, fold_cap;
    pt_tl_fold *folds; /* owned: folded steps, which have no spans */
    double t0, t1;     /* earliest start and latest end of spans and folds (0, 0 when empty) */
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

/* 1 when tl holds neither spans nor folded steps. */
int pt_tline_is_empty(const pt_tline *tl);

/* Appends a span whose row is already an index of tl. 0 or PT_ENOMEM. */
int pt_tline_add(pt_tline *tl, const pt_tl_span *span);
/* Appends a folded step whose row is already an index of tl. 0 or PT_ENOMEM. */
int pt_tline_add_fold(pt_tline *tl, const pt_tl_fold *fold);

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

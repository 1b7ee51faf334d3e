/* ASCII Gantt chart of a simulated (or measured) timeline: one row per
 * worker, one character per time cell. A pure function into a caller's
 * buffer, so `pipetop sim`, tests and the console's views share it.
 *
 * Glyphs (state is never shown by colour alone):
 *   F forward   B backward   R recompute   O optimizer step
 *   > activation being sent  < gradient being sent  A all-reduce
 *   . idle (a bubble)
 * A compute block starts with its upper-case letter and its micro-batch
 * number when the block is wide enough ("F12fff"), then continues in the
 * lower-case letter. Compute hides communication in the same cell. */
#ifndef PT_TUI_TIMELINE_ASCII_H
#define PT_TUI_TIMELINE_ASCII_H

#include <stddef.h>

#include "planner/schedule.h"
#include "planner/simulate.h"

#define PT_TIMELINE_MIN_WIDTH     8
#define PT_TIMELINE_DEFAULT_WIDTH 100
#define PT_TIMELINE_MAX_WIDTH     4000

typedef struct pt_timeline_opts {
    int width;     /* cells per row; 0: PT_TIMELINE_DEFAULT_WIDTH; clamped to [MIN, MAX] */
    double t0, t1; /* seconds shown; t1 <= t0: the whole run [0, makespan) */
    int axis;      /* 1: a first line with the start and end times */
    int legend;    /* 1: a last line explaining the glyphs */
} pt_timeline_opts;

/* The glyph of an op kind (protocol/op.h: 'F', 'B', '>', ...; '.' for waits). */
char pt_timeline_glyph(int op_kind);

/* Writes the chart for prog's events in res (res->events[i] describes
 * prog->ops[i]) into buf, always NUL-terminated when cap > 0, truncated to
 * cap - 1 bytes. Each worker row is "s<stage>r<replica> |<width cells>|\n".
 * Returns the length the whole chart needs (like snprintf), so a call with
 * buf NULL and cap 0 sizes it. opts may be NULL for the defaults. */
size_t pt_timeline_ascii(const pt_program *prog, const pt_sim_result *res,
                         const pt_timeline_opts *opts, char *buf, size_t cap);

/* The cells of one worker's row alone (no label), width chars plus a NUL in
 * row (which must hold width + 1). For layout code and tests. */
void pt_timeline_row(const pt_program *prog, const pt_sim_result *res, int worker, double t0,
                     double t1, int width, char *row);

#endif

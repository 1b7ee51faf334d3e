/* The one text Gantt drawer, with the one glyph set: a timeline (tui/record/
 * tline.h: the simulator's, or a run's measured one) as character cells, for
 * the console's timeline view and `pipetop sim` alike. Pure: tests and
 * layouts use it without a terminal.
 *
 * Glyphs (state is never told by colour alone): a compute block starts with
 * its micro-batch number and is filled with its kind's fill ("3===" forward,
 * "3###" backward, "3+++" recompute, "3%%%" a split backward's input
 * gradient, "3~~~" its weight gradient, "^^" an optimizer step); a send
 * shows which way its data flows ('>' activations, '<' gradients), an
 * all-reduce is '*', and idle cells between the first and last activity
 * shown are bubbles ('.'). A step whose ops a run record folded (tline.h
 * pt_tl_fold) is ':' over the time it ran: its ops are not known. Cells
 * outside any data stay blank. A number is
 * drawn only where all of it lies on its own block and no other number
 * touches it, so numbers never run together: at a zoom where blocks are
 * narrower than their numbers, some are left out (zooming in shows them).
 * The legend (pt_timeline_legend) names every glyph. */
#ifndef PT_TUI_TIMELINE_ASCII_H
#define PT_TUI_TIMELINE_ASCII_H

#include <stddef.h>
#include <stdint.h>

#include "tui/record/tline.h"

#define PT_TIMELINE_MIN_WIDTH     8
#define PT_TIMELINE_DEFAULT_WIDTH 100
#define PT_TIMELINE_MAX_WIDTH     4000
#define PT_TIMELINE_BLANK         255 /* paint of a cell outside any data */
#define PT_TIMELINE_FOLDED        254 /* paint of a step a run record folded (':') */
#define PT_TIMELINE_FOLDED_FILL   ':'

typedef struct pt_timeline_cell {
    char ch;
    uint8_t paint; /* pt_op_paint, or PT_TIMELINE_BLANK */
} pt_timeline_cell;

/* The fill of a paint class ('=' forward ...); '?' out of range. */
char pt_timeline_fill(int paint);
/* The legend of every glyph a chart can hold, in one line of at most width
 * columns when a form fits ("3=== fwd  3### bwd  ...", else "3= fwd 3#
 * bwd ...", else the shortest "= fwd # bwd ..."). Static text. */
const char *pt_timeline_legend(int width);

/* Rasterises `row` of tl, lane PT_LANE_COMPUTE or PT_LANE_COMM, over the
 * time window [t0, t1) into out[0..width). Bubbles are drawn inside
 * [busy_lo, busy_hi) only (pass tl->t0, tl->t1 for the whole data). */
void pt_timeline_cells(const pt_tline *tl, int row, int lane, double t0, double t1, int width,
                       double busy_lo, double busy_hi, pt_timeline_cell *out);

/* One text row of `row`: its compute lane, and its communication where the
 * compute lane is idle, width chars and a NUL into out (width + 1 bytes). */
void pt_timeline_row(const pt_tline *tl, int row, double t0, double t1, int width, char *out);

/* An axis line of width cells for [t0, t1): tick marks '|' with times in ms
 * about every 12 cells and the unit at the end, into out (width + 1 bytes). */
void pt_timeline_axis(double t0, double t1, int width, char *out);

typedef struct pt_timeline_opts {
    int width;     /* cells per row; 0: PT_TIMELINE_DEFAULT_WIDTH; clamped to [MIN, MAX] */
    double t0, t1; /* seconds shown; t1 <= t0: from 0 to the timeline's end */
    int axis;      /* 1: a first line with the time axis */
    int legend;    /* 1: a last line explaining the glyphs */
} pt_timeline_opts;

/* The chart: one line "s<stage>r<replica> |<width cells>|" per row of tl
 * (pt_timeline_row), into buf, always NUL-terminated when cap > 0, truncated
 * to cap - 1 bytes. Returns the length the whole chart needs (like
 * snprintf), so a call with buf NULL and cap 0 sizes it. opts may be NULL. */
size_t pt_timeline_ascii(const pt_tline *tl, const pt_timeline_opts *opts, char *buf, size_t cap);

#endif

/* Pure rasteriser of a timeline row into character cells, shared by the
 * console's timeline view (and testable without a terminal).
 *
 * Compute lane: each FWD/BWD/RECOMPUTE block starts with its micro-batch
 * number when the block is wide enough and is filled with its paint's fill
 * ("3===" forward, "3###" backward, "3+++" recompute), an optimizer step is
 * "^^", and the idle cells between the first and last activity of the
 * shown iterations are bubbles ('.'). Comm lane: sends of activations '>',
 * of gradients '<', all-reduce '*'. Cells outside any data stay blank. */
#ifndef PT_TUI_GANTT_H
#define PT_TUI_GANTT_H

#include <stdint.h>

#include "tui/export/theme.h"
#include "tui/record/tline.h"

#define PT_GANTT_NONE 255 /* paint of a blank cell */

typedef struct pt_gantt_cell {
    char ch;
    uint8_t paint; /* pt_op_paint, or PT_GANTT_NONE */
} pt_gantt_cell;

/* Rasterises `row` of tl, lane PT_LANE_COMPUTE or PT_LANE_COMM, over the
 * time window [t0, t1) into out[0..width). Bubbles are drawn inside
 * [busy_lo, busy_hi) only (pass tl->t0, tl->t1 for the whole data). */
void pt_gantt_row(const pt_tline *tl, int row, int lane, double t0, double t1, int width,
                  double busy_lo, double busy_hi, pt_gantt_cell *out);

/* Writes an axis line of width cells for [t0, t1): tick marks '|' with times
 * in ms at about every 12 cells, into out (width + 1 bytes). */
void pt_gantt_axis(double t0, double t1, int width, char *out);

#endif

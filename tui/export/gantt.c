/* Character-cell Gantt rows (see gantt.h). */
#include "tui/export/gantt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define AXIS_TICK_CELLS 12
#define AXIS_UNIT_CELLS 3 /* " ms" */

/* Cell range [*c0, *c1) a span covers; 0 when outside the window. */
static int cells(double s, double e, double t0, double t1, int width, int *c0, int *c1)
{
    if (e <= t0 || s >= t1 || t1 <= t0)
        return 0;
    double per = (t1 - t0) / width;
    int a = (int)floor((s - t0) / per), b = (int)ceil((e - t0) / per);
    if (a < 0)
        a = 0;
    if (b > width)
        b = width;
    if (b <= a)
        b = a + 1;
    if (a >= width)
        return 0;
    *c0 = a;
    *c1 = b;
    return 1;
}

void pt_gantt_row(const pt_tline *tl, int row, int lane, double t0, double t1, int width,
                  double busy_lo, double busy_hi, pt_gantt_cell *out)
{
    for (int c = 0; c < width; c++) {
        out[c].ch = ' ';
        out[c].paint = PT_GANTT_NONE;
    }
    if (width <= 0 || t1 <= t0)
        return;
    if (lane == PT_LANE_COMPUTE) {
        int b0, b1;
        if (cells(busy_lo, busy_hi, t0, t1, width, &b0, &b1))
            for (int c = b0; c < b1; c++) {
                out[c].ch = pt_paint_fill(PT_PAINT_BUBBLE);
                out[c].paint = PT_PAINT_BUBBLE;
            }
    }
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        if (s->row != row || s->lane != lane)
            continue;
        int c0, c1;
        if (!cells(s->start, s->end, t0, t1, width, &c0, &c1))
            continue;
        pt_op_paint g = pt_op_paint_of(s->op);
        /* a send shows which way its data flows (the op's glyph) */
        const pt_op_info *info = pt_op_info_of(s->op);
        char fill = info && (info->facts & PT_OPK_SEND) ? info->glyph : pt_paint_fill(g);
        for (int c = c0; c < c1; c++) {
            out[c].ch = fill;
            out[c].paint = (uint8_t)g;
        }
        if (lane == PT_LANE_COMPUTE && s->mb >= 0) {
            char num[16];
            int n = snprintf(num, sizeof num, "%d", s->mb);
            /* the label starts the block when it fits; a block that began
             * left of the window still shows it when there is room */
            if (n <= c1 - c0)
                for (int k = 0; k < n; k++)
                    out[c0 + k].ch = num[k];
        }
    }
}

void pt_gantt_axis(double t0, double t1, int width, char *out)
{
    memset(out, ' ', (size_t)(width > 0 ? width : 0));
    out[width > 0 ? width : 0] = 0;
    if (width <= 0 || t1 <= t0)
        return;
    /* the unit takes the last cells (" ms"); a tick whose label would run
     * into it is left out whole rather than cut or overwritten */
    int room = width >= AXIS_UNIT_CELLS + 2 ? width - AXIS_UNIT_CELLS : width;
    for (int c = 0; c < width; c += AXIS_TICK_CELLS) {
        double t = t0 + (t1 - t0) * c / width;
        char lab[24];
        int n = snprintf(lab, sizeof lab, "|%.*f", t1 - t0 < 0.01 ? 2 : 1, t * 1e3);
        if (c > 0 && c + n > room)
            break;
        for (int k = 0; k < n && c + k < width; k++)
            out[c + k] = lab[k];
    }
    if (room < width) {
        out[width - 2] = 'm';
        out[width - 1] = 's';
    }
}

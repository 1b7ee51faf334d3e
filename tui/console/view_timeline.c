/* The timeline view: a Gantt chart per stage replica of the measured run
 * (the last iterations) and/or of the simulator's prediction, with zoom and
 * pan. Blocks carry their micro-batch numbers and differ by glyph. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tui/export/gantt.h"
#include "tui/console/ui.h"

#define LABEL_COLS            6 /* "s12r3 " */
#define ZOOM_STEP             1.5
#define ZOOM_MAX              512.0
#define PAN_FRACTION          0.1 /* of the shown width per key */
#define ITERS_MAX             64
#define CELLS_MAX             1024
#define INFO_LEVELS           3
#define INFO_LEGEND_LONG_COLS 100
#define ROW_LINES_MAX         8 /* compute-lane lines of one row on a tall screen */

static attr_t cell_attr(pt_ui *ui, const pt_gantt_cell *c)
{
    if (c->paint == PT_GANTT_NONE)
        return ui->attr[PT_THEME_DIM];
    if (c->paint == PT_PAINT_BUBBLE || c->paint == PT_PAINT_WAIT)
        return ui->attr[PT_THEME_BUBBLE];
    return ui->block[pt_paint_theme_key(c->paint)];
}

/* The shown window [*t0, *t1) of tl. With a common span (> 0: measured and
 * predicted compared), both charts show the same duration from their own
 * start, so one axis, starting at 0, reads for both. */
static void window(const pt_ui *ui, const pt_tline *tl, double common, double *t0, double *t1)
{
    double span = common > 0 ? common : tl->t1 - tl->t0;
    if (span <= 0)
        span = 1e-6;
    double shown = span / ui->tl_zoom;
    *t0 = tl->t0 + ui->tl_pan * span;
    *t1 = *t0 + shown;
}

/* Lines of one stage replica row: the compute lane grows with the room (up
 * to ROW_LINES_MAX), a comm lane under it when there is room for one. */
static void row_lines(int avail, int rows, int *compute, int *comm)
{
    *compute = 1;
    *comm = 0;
    if (rows <= 0)
        return;
    int per = avail / rows;
    if (per >= 2) {
        *comm = 1;
        *compute = per - 1 > ROW_LINES_MAX ? ROW_LINES_MAX : per - 1;
    }
}

/* The fill of the block whose number sits at cell c: its paint's fill (a
 * number cell is always a compute block). */
static char block_fill(const pt_gantt_cell *cells, int width, int c)
{
    (void)width;
    return cells[c].paint == PT_GANTT_NONE ? ' ' : pt_paint_fill(cells[c].paint);
}

static void draw_chart(pt_ui *ui, const pt_rect *r, const pt_tline *tl, const char *title,
                       double common)
{
    pt_rect in = pt_ui_box(ui, r, title);
    if (in.h < 1 || in.w <= LABEL_COLS + 2)
        return;
    if (tl->count == 0) {
        pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "nothing to show yet");
        return;
    }
    int width = in.w - LABEL_COLS;
    if (width > CELLS_MAX)
        width = CELLS_MAX;
    double t0, t1;
    window(ui, tl, common, &t0, &t1);
    char axis[CELLS_MAX + 1];
    if (common > 0) /* times from the chart's own start: one axis for both */
        pt_gantt_axis(t0 - tl->t0, t1 - tl->t0, width, axis);
    else
        pt_gantt_axis(t0, t1, width, axis);
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 1, "%*s%s", LABEL_COLS, "", axis);
    int avail = in.h - 1;
    int compute, comm;
    row_lines(avail, tl->row_count, &compute, &comm);
    int per = compute + comm;
    int visible = avail / per;
    if (ui->tl_scroll > tl->row_count - visible)
        ui->tl_scroll = tl->row_count - visible > 0 ? tl->row_count - visible : 0;
    int scroll = tl->row_count > visible ? ui->tl_scroll : 0;
    pt_gantt_cell cells[CELLS_MAX];
    int y = in.y + 1;
    for (int k = 0; k < visible && scroll + k < tl->row_count; k++) {
        int row = scroll + k;
        const pt_tl_row *tr = &tl->rows[row];
        for (int line = 0; line < per; line++, y++) {
            int lane_comm = line >= compute;
            if (line == 0)
                pt_ui_text(y, in.x, LABEL_COLS, ui->attr[PT_THEME_TEXT], 1, "s%dr%d", tr->stage,
                           tr->replica);
            else if (lane_comm)
                pt_ui_text(y, in.x, LABEL_COLS, ui->attr[PT_THEME_DIM], 1, "  comm");
            else
                pt_ui_text(y, in.x, LABEL_COLS, 0, 1, "%s", "");
            if (line <= 1 || lane_comm)
                pt_gantt_row(tl, row, lane_comm ? PT_LANE_COMM : PT_LANE_COMPUTE, t0, t1, width,
                             tl->t0, tl->t1, cells);
            for (int c = 0; c < width; c++) {
                attr_t a = cell_attr(ui, &cells[c]);
                /* a taller row repeats its blocks; the numbers only once */
                char ch = cells[c].ch;
                if (line > 0 && !lane_comm && ch >= '0' && ch <= '9')
                    ch = block_fill(cells, width, c);
                attron(a);
                mvaddch(y, in.x + LABEL_COLS + c, (chtype)(unsigned char)ch);
                attroff(a);
            }
        }
    }
    if (scroll + visible < tl->row_count)
        pt_ui_text(in.y + in.h - 1, in.x + in.w - 12, 12, ui->attr[PT_THEME_DIM], 0, "v %d more",
                   tl->row_count - scroll - visible);
}

/* The footer's figures line at a level of detail: labels shorten as the
 * level rises, the figures (times, step, zoom) stay. */
static void info_line(const pt_ui *ui, int measured, int level, char *buf, size_t cap)
{
    char pred[64] = "", meas[64] = "";
    const char *unit = level == 0 ? " ms/iter" : " ms";
    if (ui->edit)
        snprintf(pred, sizeof pred, "%s %.3f%s", level == 0 ? "predicted" : "pred",
                 pt_plan_edit_result(ui->edit)->iter_s * 1e3, unit);
    int64_t n = pt_store_step_count(ui->store);
    if (n)
        snprintf(meas, sizeof meas, "%s %.3f%s", level == 0 ? "measured" : "meas",
                 pt_store_step_at(ui->store, n - 1)->iter_ms, unit);
    int64_t last = pt_store_last_step(ui->store);
    const char *mode = ui->tl_mode == PT_TL_BOTH        ? "both"
                       : ui->tl_mode == PT_TL_PREDICTED ? "predicted"
                                                        : "measured";
    if (!measured)
        snprintf(buf, cap, level < 2 ? " %s | zoom %.1fx | %s  %s" : " %s %.1fx %s %s",
                 level < 2 ? mode : "", ui->tl_zoom, pred, meas);
    else if (level == 0)
        snprintf(buf, cap, " %s | last %d iterations up to step %lld | zoom %.1fx | %s  %s", mode,
                 ui->tl_iters, (long long)last, ui->tl_zoom, meas, pred);
    else if (level == 1)
        snprintf(buf, cap, " %s | %d it to step %lld | %.1fx | %s  %s", mode, ui->tl_iters,
                 (long long)last, ui->tl_zoom, meas, pred);
    else
        snprintf(buf, cap, " %dit..%lld %.1fx %s %s", ui->tl_iters, (long long)last, ui->tl_zoom,
                 meas, pred);
}

static void draw_info(pt_ui *ui, const pt_rect *r, int measured)
{
    int y = r->y;
    pt_ui_text(y++, r->x, r->w, ui->attr[PT_THEME_DIM], 1, "%s",
               r->w >= INFO_LEGEND_LONG_COLS
                   ? " 3=== fwd  3### bwd  3+++ recompute  > send act  < send grad  * all-reduce  "
                     "^ optimizer  . bubble"
                   : " 3=== fwd 3### bwd 3+++ recomp > act < grad * allreduce ^ opt . bubble");
    if (y >= r->y + r->h)
        return;
    char line[256];
    for (int level = 0; level < INFO_LEVELS; level++) {
        info_line(ui, measured, level, line, sizeof line);
        if ((int)strlen(line) <= r->w)
            break;
    }
    pt_ui_text(y, r->x, r->w, ui->attr[PT_THEME_TEXT], 1, "%s", line);
}

void pt_view_timeline_draw(pt_ui *ui)
{
    pt_ui_refresh_timelines(ui);
    const pt_rect *main_r = pt_layout_find(&ui->layout, PT_PANEL_TL_MAIN);
    const pt_rect *pred_r = pt_layout_find(&ui->layout, PT_PANEL_TL_PRED);
    const pt_rect *info = pt_layout_find(&ui->layout, PT_PANEL_TL_INFO);
    int have_meas = ui->tl_meas.count > 0;
    int show_meas = have_meas && ui->tl_mode != PT_TL_PREDICTED;
    /* compared: both charts on one axis as long as the longer of the two */
    double common = 0;
    if (pred_r) {
        double a = ui->tl_meas.t1 - ui->tl_meas.t0, b = ui->tl_pred.t1 - ui->tl_pred.t0;
        common = a > b ? a : b;
    }
    char title[128];
    if (main_r) {
        if (show_meas) {
            snprintf(title, sizeof title, "measured timeline: last %d iterations", ui->tl_iters);
            draw_chart(ui, main_r, &ui->tl_meas, title, common);
        } else {
            snprintf(title, sizeof title, "predicted timeline (simulator)%s",
                     have_meas || ui->tl_mode != PT_TL_MEASURED ? "" : ": nothing measured yet");
            draw_chart(ui, main_r, &ui->tl_pred, title, common);
        }
    }
    if (pred_r)
        draw_chart(ui, pred_r, show_meas ? &ui->tl_pred : &ui->tl_meas,
                   show_meas ? "predicted timeline (simulator), same axis"
                             : "measured timeline, same axis",
                   common);
    if (info)
        draw_info(ui, info, show_meas);
}

static void clamp_pan(pt_ui *ui)
{
    double max = 1.0 - 1.0 / ui->tl_zoom;
    if (ui->tl_pan > max)
        ui->tl_pan = max;
    if (ui->tl_pan < 0)
        ui->tl_pan = 0;
}

static void zoom(pt_ui *ui, double f)
{
    double centre = ui->tl_pan + 0.5 / ui->tl_zoom;
    ui->tl_zoom *= f;
    if (ui->tl_zoom < 1)
        ui->tl_zoom = 1;
    if (ui->tl_zoom > ZOOM_MAX)
        ui->tl_zoom = ZOOM_MAX;
    ui->tl_pan = centre - 0.5 / ui->tl_zoom;
    clamp_pan(ui);
}

int pt_view_timeline_key(pt_ui *ui, int ch)
{
    switch (ch) {
    case '+':
    case '=':
        zoom(ui, ZOOM_STEP);
        return 1;
    case '-':
        zoom(ui, 1.0 / ZOOM_STEP);
        return 1;
    case '0':
        ui->tl_zoom = 1;
        ui->tl_pan = 0;
        return 1;
    case KEY_LEFT:
    case 'h':
        ui->tl_pan -= PAN_FRACTION / ui->tl_zoom;
        clamp_pan(ui);
        return 1;
    case KEY_RIGHT:
    case 'l':
        ui->tl_pan += PAN_FRACTION / ui->tl_zoom;
        clamp_pan(ui);
        return 1;
    case 'p':
        ui->tl_mode = (pt_tl_mode)((ui->tl_mode + 1) % PT_TL_MODE_COUNT);
        pt_ui_status(ui, 0, "timeline: %s",
                     ui->tl_mode == PT_TL_BOTH        ? "measured and predicted"
                     : ui->tl_mode == PT_TL_PREDICTED ? "predicted (simulator)"
                                                      : "measured");
        return 1;
    case 'i':
        if (ui->tl_iters > 1)
            ui->tl_iters--;
        return 1;
    case 'I':
        if (ui->tl_iters < ITERS_MAX)
            ui->tl_iters++;
        return 1;
    case KEY_UP:
        if (ui->tl_scroll > 0)
            ui->tl_scroll--;
        return 1;
    case KEY_DOWN:
        ui->tl_scroll++;
        return 1;
    default:
        return 0;
    }
}

int pt_view_timeline_mouse(pt_ui *ui, int y, int x, int wheel)
{
    (void)y, (void)x;
    if (wheel > 0)
        zoom(ui, ZOOM_STEP);
    else if (wheel < 0)
        zoom(ui, 1.0 / ZOOM_STEP);
    return wheel != 0;
}

/* The timeline view: a Gantt chart per stage replica of the measured run
 * (the last iterations) and/or of the simulator's prediction, with zoom and
 * pan. Blocks carry their micro-batch numbers and differ by glyph. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tui/gantt.h"
#include "tui/ui.h"

#define LABEL_COLS   6 /* "s12r3 " */
#define ZOOM_STEP    1.5
#define ZOOM_MAX     512.0
#define PAN_FRACTION 0.1 /* of the shown width per key */
#define ITERS_MAX    64
#define CELLS_MAX    1024

static attr_t cell_attr(pt_ui *ui, const pt_gantt_cell *c)
{
    if (c->paint == PT_GANTT_NONE)
        return ui->attr[PT_THEME_DIM];
    if (c->paint == PT_PAINT_BUBBLE || c->paint == PT_PAINT_WAIT)
        return ui->attr[PT_THEME_BUBBLE];
    return ui->block[pt_paint_theme_key(c->paint)];
}

static void window(const pt_ui *ui, const pt_tline *tl, double *t0, double *t1)
{
    double span = tl->t1 - tl->t0;
    if (span <= 0)
        span = 1e-6;
    double shown = span / ui->tl_zoom;
    *t0 = tl->t0 + ui->tl_pan * span;
    *t1 = *t0 + shown;
}

static void draw_chart(pt_ui *ui, const pt_rect *r, const pt_tline *tl, const char *title)
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
    window(ui, tl, &t0, &t1);
    char axis[CELLS_MAX + 1];
    pt_gantt_axis(t0, t1, width, axis);
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 1, "%*s%s", LABEL_COLS, "", axis);
    int avail = in.h - 1;
    int comm = avail >= 2 * tl->row_count; /* room for a comm line under each row */
    int per = comm ? 2 : 1;
    int visible = avail / per;
    if (ui->tl_scroll > tl->row_count - visible)
        ui->tl_scroll = tl->row_count - visible > 0 ? tl->row_count - visible : 0;
    pt_gantt_cell cells[CELLS_MAX];
    int y = in.y + 1;
    for (int k = 0; k < visible && ui->tl_scroll + k < tl->row_count; k++) {
        int row = ui->tl_scroll + k;
        const pt_tl_row *tr = &tl->rows[row];
        for (int lane = 0; lane < per; lane++, y++) {
            if (lane == 0)
                pt_ui_text(y, in.x, LABEL_COLS, ui->attr[PT_THEME_TEXT], 1, "s%dr%d", tr->stage,
                           tr->replica);
            else
                pt_ui_text(y, in.x, LABEL_COLS, ui->attr[PT_THEME_DIM], 1, "  comm");
            pt_gantt_row(tl, row, lane == 0 ? PT_LANE_COMPUTE : PT_LANE_COMM, t0, t1, width, tl->t0,
                         tl->t1, cells);
            for (int c = 0; c < width; c++) {
                attr_t a = cell_attr(ui, &cells[c]);
                attron(a);
                mvaddch(y, in.x + LABEL_COLS + c, (chtype)(unsigned char)cells[c].ch);
                attroff(a);
            }
        }
    }
    if (ui->tl_scroll + visible < tl->row_count)
        pt_ui_text(in.y + in.h - 1, in.x + in.w - 12, 12, ui->attr[PT_THEME_DIM], 0, "v %d more",
                   tl->row_count - ui->tl_scroll - visible);
}

static void draw_info(pt_ui *ui, const pt_rect *r, int measured)
{
    int y = r->y;
    pt_ui_text(y++, r->x, r->w, ui->attr[PT_THEME_DIM], 1,
               " 3=== fwd  3### bwd  3+++ recompute  > send act  < send grad  * all-reduce  "
               "^ optimizer  . bubble");
    if (y >= r->y + r->h)
        return;
    char pred[64] = "", meas[64] = "";
    if (ui->edit)
        snprintf(pred, sizeof pred, "predicted %.3f ms/iter",
                 pt_plan_edit_result(ui->edit)->iter_s * 1e3);
    int64_t n = pt_store_step_count(ui->store);
    if (n)
        snprintf(meas, sizeof meas, "measured %.3f ms/iter",
                 pt_store_step_at(ui->store, n - 1)->iter_ms);
    int64_t last = pt_store_last_step(ui->store);
    const char *mode = ui->tl_mode == PT_TL_BOTH        ? "both"
                       : ui->tl_mode == PT_TL_PREDICTED ? "predicted"
                                                        : "measured";
    if (measured)
        pt_ui_text(y, r->x, r->w, ui->attr[PT_THEME_TEXT], 1,
                   " %s | last %d iterations up to step %lld | zoom %.1fx | %s  %s", mode,
                   ui->tl_iters, (long long)last, ui->tl_zoom, meas, pred);
    else
        pt_ui_text(y, r->x, r->w, ui->attr[PT_THEME_TEXT], 1, " %s | zoom %.1fx | %s  %s", mode,
                   ui->tl_zoom, pred, meas);
}

void pt_view_timeline_draw(pt_ui *ui)
{
    pt_ui_refresh_timelines(ui);
    const pt_rect *main_r = pt_layout_find(&ui->layout, PT_PANEL_TL_MAIN);
    const pt_rect *pred_r = pt_layout_find(&ui->layout, PT_PANEL_TL_PRED);
    const pt_rect *info = pt_layout_find(&ui->layout, PT_PANEL_TL_INFO);
    int have_meas = ui->tl_meas.count > 0;
    int show_meas = have_meas && ui->tl_mode != PT_TL_PREDICTED;
    char title[128];
    if (main_r) {
        if (show_meas) {
            snprintf(title, sizeof title, "measured timeline: last %d iterations", ui->tl_iters);
            draw_chart(ui, main_r, &ui->tl_meas, title);
        } else {
            snprintf(title, sizeof title, "predicted timeline (simulator)%s",
                     have_meas || ui->tl_mode != PT_TL_MEASURED ? "" : ": nothing measured yet");
            draw_chart(ui, main_r, &ui->tl_pred, title);
        }
    }
    if (pred_r)
        draw_chart(ui, pred_r, show_meas ? &ui->tl_pred : &ui->tl_meas,
                   show_meas ? "predicted timeline (simulator)" : "measured timeline");
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

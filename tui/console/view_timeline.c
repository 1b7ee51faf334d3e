/* The timeline view: a Gantt chart per stage replica of the measured run
 * (the last iterations) and/or of the simulator's prediction, with zoom and
 * pan. Blocks carry their micro-batch numbers and differ by glyph. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tui/export/timeline_ascii.h"
#include "tui/console/ui.h"

#define LABEL_COLS    6 /* "s12r3 " */
#define ZOOM_STEP     1.5
#define ZOOM_MAX      512.0
#define PAN_FRACTION  0.1 /* of the shown width per key */
#define ITERS_MAX     64
#define CELLS_MAX     1024
#define INFO_LEVELS   4
#define ROW_LINES_MAX 8 /* compute-lane lines of one row on a tall screen */

/* The view's own state: the window it shows. */
typedef struct timeline_view {
    double zoom; /* >= 1 */
    double pan;  /* left edge as a fraction of the data span, in [0, 1 - 1/zoom] */
    int scroll;  /* first stage replica row shown */
} timeline_view;

/* Its panels. */
enum { PANEL_MAIN, PANEL_PRED, PANEL_INFO };

static attr_t cell_attr(pt_ui *ui, const pt_timeline_cell *c)
{
    if (c->paint == PT_TIMELINE_BLANK)
        return ui->attr[PT_THEME_DIM];
    if (c->paint == PT_PAINT_BUBBLE || c->paint == PT_PAINT_WAIT)
        return ui->attr[PT_THEME_BUBBLE];
    return ui->block[pt_paint_theme_key(c->paint)];
}

/* The shown window [*t0, *t1) of tl. With a common span (> 0: measured and
 * predicted compared), both charts show the same duration from their own
 * start, so one axis, starting at 0, reads for both. */
static void window(const timeline_view *v, const pt_tline *tl, double common, double *t0,
                   double *t1)
{
    double span = common > 0 ? common : tl->t1 - tl->t0;
    if (span <= 0)
        span = 1e-6;
    double shown = span / v->zoom;
    *t0 = tl->t0 + v->pan * span;
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
static char block_fill(const pt_timeline_cell *cells, int width, int c)
{
    (void)width;
    return cells[c].paint == PT_TIMELINE_BLANK ? ' ' : pt_timeline_fill(cells[c].paint);
}

static void draw_chart(pt_ui *ui, timeline_view *v, const pt_rect *r, const pt_tline *tl,
                       const char *title, double common)
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
    window(v, tl, common, &t0, &t1);
    char axis[CELLS_MAX + 1];
    if (common > 0) /* times from the chart's own start: one axis for both */
        pt_timeline_axis(t0 - tl->t0, t1 - tl->t0, width, axis);
    else
        pt_timeline_axis(t0, t1, width, axis);
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 1, "%*s%s", LABEL_COLS, "", axis);
    int avail = in.h - 1;
    int compute, comm;
    row_lines(avail, tl->row_count, &compute, &comm);
    int per = compute + comm;
    int visible = avail / per;
    if (v->scroll > tl->row_count - visible)
        v->scroll = tl->row_count - visible > 0 ? tl->row_count - visible : 0;
    int scroll = tl->row_count > visible ? v->scroll : 0;
    pt_timeline_cell cells[CELLS_MAX];
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
                pt_timeline_cells(tl, row, lane_comm ? PT_LANE_COMM : PT_LANE_COMPUTE, t0, t1,
                                  width, tl->t0, tl->t1, cells);
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
 * level rises, the figures (the measured and predicted iteration time of
 * tui/record/figures.h, step, zoom) stay. */
static void info_line(const pt_ui *ui, const timeline_view *v, int measured, int level, char *buf,
                      size_t cap)
{
    const pt_ui_figures *f = &ui->fig;
    char pred[160] = "", meas[160] = "";
    if (f->have_pred)
        snprintf(pred, sizeof pred,
                 level == 0   ? "predicted %.3f ms/iter (%s)"
                 : level == 1 ? "pred %.3f ms (%s)"
                              : "pred %.3f",
                 f->pred.iter_ms, level == 0 ? f->pred.label : f->pred.brief);
    if (f->meas.steps > 0 && level == 0)
        snprintf(meas, sizeof meas, "measured %.3f ms/iter (%s)", f->meas.iter_ms, f->meas.label);
    else if (f->meas.steps > 0 && level == 1)
        snprintf(meas, sizeof meas, "meas %.3f ms (med %d)", f->meas.iter_ms, f->meas.steps);
    else if (f->meas.steps > 0)
        snprintf(meas, sizeof meas, "meas %.3f", f->meas.iter_ms);
    int64_t last = pt_store_last_step(ui->store);
    const char *mode = ui->tl.mode == PT_TL_BOTH        ? "both"
                       : ui->tl.mode == PT_TL_PREDICTED ? "predicted"
                                                        : "measured";
    if (level >= 3)
        snprintf(buf, cap, " %.3f/%.3f ms %.1fx", f->meas.steps > 0 ? f->meas.iter_ms : 0.0,
                 f->have_pred ? f->pred.iter_ms : 0.0, v->zoom);
    else if (!measured)
        snprintf(buf, cap, level < 2 ? " %s | zoom %.1fx | %s  %s" : " %s%.1fx %s %s",
                 level < 2 ? mode : "", v->zoom, pred, meas);
    else if (level == 0)
        snprintf(buf, cap, " %s | last %d iterations up to step %lld | zoom %.1fx | %s  %s", mode,
                 ui->tl.iters, (long long)last, v->zoom, meas, pred);
    else if (level == 1)
        snprintf(buf, cap, " %s | %d it to step %lld | %.1fx | %s  %s", mode, ui->tl.iters,
                 (long long)last, v->zoom, meas, pred);
    else
        snprintf(buf, cap, " %dit..%lld %.1fx %s %s ms", ui->tl.iters, (long long)last, v->zoom,
                 meas, pred);
}

static void draw_info(pt_ui *ui, const timeline_view *v, const pt_rect *r, int measured)
{
    int y = r->y;
    pt_ui_text(y++, r->x, r->w, ui->attr[PT_THEME_DIM], 1, " %s", pt_timeline_legend(r->w - 1));
    if (y >= r->y + r->h)
        return;
    char line[256];
    for (int level = 0; level < INFO_LEVELS; level++) {
        info_line(ui, v, measured, level, line, sizeof line);
        if ((int)strlen(line) <= r->w)
            break;
    }
    pt_ui_text(y, r->x, r->w, ui->attr[PT_THEME_TEXT], 1, "%s", line);
}

static void draw(pt_ui *ui, void *state)
{
    timeline_view *v = state;
    pt_ui_timelines(ui);
    const pt_rect *main_r = pt_layout_find(&ui->layout, PANEL_MAIN);
    const pt_rect *pred_r = pt_layout_find(&ui->layout, PANEL_PRED);
    const pt_rect *info = pt_layout_find(&ui->layout, PANEL_INFO);
    int have_meas = ui->tl.meas.count > 0;
    int show_meas = have_meas && ui->tl.mode != PT_TL_PREDICTED;
    /* compared: both charts on one axis as long as the longer of the two */
    double common = 0;
    if (pred_r) {
        double a = ui->tl.meas.t1 - ui->tl.meas.t0, b = ui->tl.pred.t1 - ui->tl.pred.t0;
        common = a > b ? a : b;
    }
    char title[128];
    if (main_r) {
        if (show_meas) {
            snprintf(title, sizeof title, "measured timeline: last %d iterations", ui->tl.iters);
            draw_chart(ui, v, main_r, &ui->tl.meas, title, common);
        } else {
            snprintf(title, sizeof title, "predicted timeline (simulator)%s",
                     have_meas || ui->tl.mode != PT_TL_MEASURED ? "" : ": nothing measured yet");
            draw_chart(ui, v, main_r, &ui->tl.pred, title, common);
        }
    }
    if (pred_r)
        draw_chart(ui, v, pred_r, show_meas ? &ui->tl.pred : &ui->tl.meas,
                   show_meas ? "predicted timeline (simulator), same axis"
                             : "measured timeline, same axis",
                   common);
    if (info)
        draw_info(ui, v, info, show_meas);
}

static void clamp_pan(timeline_view *v)
{
    double max = 1.0 - 1.0 / v->zoom;
    if (v->pan > max)
        v->pan = max;
    if (v->pan < 0)
        v->pan = 0;
}

static void zoom(timeline_view *v, double f)
{
    double centre = v->pan + 0.5 / v->zoom;
    v->zoom *= f;
    if (v->zoom < 1)
        v->zoom = 1;
    if (v->zoom > ZOOM_MAX)
        v->zoom = ZOOM_MAX;
    v->pan = centre - 0.5 / v->zoom;
    clamp_pan(v);
}

static void k_zoom(pt_ui *ui, void *state, int ch)
{
    (void)ui;
    timeline_view *v = state;
    if (ch == '0') {
        v->zoom = 1;
        v->pan = 0;
    } else {
        zoom(v, ch == '-' ? 1.0 / ZOOM_STEP : ZOOM_STEP);
    }
}

static void k_pan(pt_ui *ui, void *state, int ch)
{
    (void)ui;
    timeline_view *v = state;
    v->pan += (ch == KEY_LEFT || ch == 'h' ? -PAN_FRACTION : PAN_FRACTION) / v->zoom;
    clamp_pan(v);
}

static void k_mode(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    ui->tl.mode = (pt_tl_mode)((ui->tl.mode + 1) % PT_TL_MODE_COUNT);
    pt_ui_status(ui, 0, "timeline: %s",
                 ui->tl.mode == PT_TL_BOTH        ? "measured and predicted"
                 : ui->tl.mode == PT_TL_PREDICTED ? "predicted (simulator)"
                                                  : "measured");
}

static void k_iters(pt_ui *ui, void *state, int ch)
{
    (void)state;
    if (ch == 'i' && ui->tl.iters > 1)
        ui->tl.iters--;
    else if (ch == 'I' && ui->tl.iters < ITERS_MAX)
        ui->tl.iters++;
}

static void k_scroll(pt_ui *ui, void *state, int ch)
{
    (void)ui;
    timeline_view *v = state;
    if (ch == KEY_DOWN)
        v->scroll++;
    else if (v->scroll > 0)
        v->scroll--;
}

static const pt_view_key keys[] = {
    {{KEY_LEFT, KEY_RIGHT, 'h', 'l'}, "Left Right h l", "pan", k_pan, NULL},
    {{'+', '=', '-', '0'}, "+ - 0", "zoom in / out / reset (mouse wheel zooms too)", k_zoom, NULL},
    {{'p'}, "p", "measured / predicted / both side by side", k_mode, NULL},
    {{'i', 'I'}, "i I", "one iteration fewer / more shown", k_iters, NULL},
    {{KEY_UP, KEY_DOWN}, "Up Down", "scroll the stage replica rows", k_scroll, NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

static int mouse(pt_ui *ui, void *state, const pt_mouse *m)
{
    (void)ui;
    if (m->wheel)
        zoom(state, m->wheel > 0 ? ZOOM_STEP : 1.0 / ZOOM_STEP);
    return m->wheel != 0;
}

/* Rows of the info band at the bottom. */
#define INFO_ROWS_NARROW 2
#define INFO_ROWS_WIDE   3

static void layout(const pt_ui *ui, const void *state, pt_rect b, pt_layout *l)
{
    (void)state;
    int info = b.w >= PT_LAYOUT_WIDE_COLS && b.h >= 40 ? INFO_ROWS_WIDE : INFO_ROWS_NARROW;
    int main_h = b.h - info, split = ui->tl.mode == PT_TL_BOTH;
    if (split && b.w >= PT_LAYOUT_WIDE_COLS) {
        /* measured | predicted, each as tall as the body: every row shows */
        int left = b.w / 2;
        pt_layout_add(l, PANEL_MAIN, "tl-main", 1, pt_rect_of(b.y, b.x, main_h, left));
        pt_layout_add(l, PANEL_PRED, "tl-pred", 1, pt_rect_of(b.y, b.x + left, main_h, b.w - left));
    } else if (split) {
        int top = main_h / 2;
        pt_layout_add(l, PANEL_MAIN, "tl-main", 1, pt_rect_of(b.y, b.x, top, b.w));
        pt_layout_add(l, PANEL_PRED, "tl-pred", 1, pt_rect_of(b.y + top, b.x, main_h - top, b.w));
    } else {
        pt_layout_add(l, PANEL_MAIN, "tl-main", 1, pt_rect_of(b.y, b.x, main_h, b.w));
    }
    /* two unframed rows */
    pt_layout_add(l, PANEL_INFO, "tl-info", 0, pt_rect_of(b.y + main_h, b.x, info, b.w));
}

static void init(pt_ui *ui, void *state)
{
    (void)ui;
    ((timeline_view *)state)->zoom = 1.0;
}

const pt_view_class pt_view_timeline = {
    .name = "timeline",
    .hotkeys = "2",
    .hints = "h/l pan  +/- zoom  p predicted/measured  i/I iterations  x export  ? help  q quit",
    .keys = keys,
    .state_size = sizeof(timeline_view),
    .init = init,
    .layout = layout,
    .draw = draw,
    .mouse = mouse,
};

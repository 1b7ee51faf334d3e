/* The timeline view: a Gantt chart per stage replica of the measured run
 * (the last iterations) and/or of the simulator's prediction, with zoom and
 * pan. Blocks carry their micro-batch numbers and differ by glyph. A plan
 * whose stages have several replicas shows one row per stage: its median
 * replica's blocks over a band line (tui/record/bands.h); Enter shows one
 * stage's replicas; stragglers are marked "!" and listed in the footer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tui/export/timeline_ascii.h"
#include "tui/console/ui.h"

#define LABEL_COLS      6 /* "s12r3 " */
#define LABEL_COLS_WIDE 9 /* "s12r127! ": stage rows and a drilled stage's replicas */
#define ZOOM_STEP       1.5
#define ZOOM_MAX        512.0
#define PAN_FRACTION    0.1 /* of the shown width per key */
#define ITERS_MAX       64
#define CELLS_MAX       1024
#define INFO_LEVELS     4
#define ROW_LINES_MAX   8  /* compute-lane lines of one row on a tall screen */
#define PAGE_ROWS       10 /* rows PgUp / PgDn move */

/* The view's own state: the window it shows. */
typedef struct timeline_view {
    double zoom; /* >= 1 */
    double pan;  /* left edge as a fraction of the data span, in [0, 1 - 1/zoom] */
    int scroll;  /* first row shown (stage replica, stage, or the drilled stage's replica) */
    /* stages with many replicas show as one row each (bands.h): */
    int sel;        /* the selected stage row */
    int drill;      /* the stage number whose replicas are shown; -1: none */
    int agg_scroll; /* scroll of the stage rows while drilled */
    int items;      /* rows the main chart had at its last draw (keys clamp to it) */
} timeline_view;

/* What a chart's rows are: the timeline's rows as they are (stages of one
 * replica each, or one drilled stage's replicas), or one row per stage. */
typedef struct chart_rows {
    int agg;          /* 1: item k is stage k of the bands, drawn as its median replica */
    int first, count; /* items: timeline rows first.. (agg: band stages first..) */
} chart_rows;

/* Its panels. */
enum { PANEL_MAIN, PANEL_PRED, PANEL_INFO };

static attr_t cell_attr(pt_ui *ui, const pt_timeline_cell *c)
{
    if (c->paint == PT_TIMELINE_BLANK || c->paint == PT_TIMELINE_FOLDED)
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

/* 1 when a chart of b shows one row per stage: a stage has several
 * replicas, or its steps are folded over its replicas (bands.h). */
static int aggregated(const pt_bands *b)
{
    if (b->stage_count > 0 && b->stage_count < b->row_count)
        return 1;
    for (int k = 0; k < b->stage_count; k++)
        if (b->stages[k].folded)
            return 1;
    return 0;
}

/* The rows chart draws of tl: one per stage when a stage has several
 * replicas (unless one stage is drilled into), else the timeline's own. */
static chart_rows rows_of(timeline_view *v, const pt_tline *tl, const pt_bands *b)
{
    if (v->drill >= 0) {
        const pt_band_stage *st = pt_bands_stage(b, v->drill);
        if (st && b->row_count == tl->row_count)
            return (chart_rows){0, st->first_row, st->row_count};
        v->drill = -1; /* the stage is gone (a new plan) */
        v->scroll = v->agg_scroll;
    }
    if (aggregated(b) && b->row_count == tl->row_count)
        return (chart_rows){1, 0, b->stage_count};
    return (chart_rows){0, 0, tl->row_count};
}

/* The timeline row item k of cr draws. */
static int item_row(const chart_rows *cr, const pt_bands *b, int k)
{
    return cr->agg ? b->stages[cr->first + k].median_row : cr->first + k;
}

/* The label of item k: "s3r1" (a replica; "!" marks a straggler) or "s3"
 * with "!" when the stage has stragglers; the selected stage reversed. */
static void draw_label(pt_ui *ui, const timeline_view *v, const pt_tline *tl, const chart_rows *cr,
                       const pt_bands *b, int k, int y, int x, int w)
{
    int row = item_row(cr, b, k);
    const pt_tl_row *tr = &tl->rows[row];
    if (cr->agg) {
        const pt_band_stage *st = &b->stages[cr->first + k];
        attr_t a = ui->attr[st->stragglers ? PT_THEME_WARN : PT_THEME_TEXT];
        if (cr->first + k == v->sel)
            a = ui->attr[PT_THEME_SELECT] | A_REVERSE;
        pt_ui_text(y, x, w, a, 1, "s%d%s", st->stage, st->stragglers ? " !" : "");
        return;
    }
    int strag = b->row_count == tl->row_count && b->straggler[row];
    attr_t a = ui->attr[strag ? PT_THEME_WARN : PT_THEME_TEXT];
    if (tr->replica == PT_TL_ALL_REPLICAS) /* a stage's steps folded over its replicas */
        pt_ui_text(y, x, w, a, 1, "s%d all%s", tr->stage, strag ? "!" : "");
    else
        pt_ui_text(y, x, w, a, 1, "s%dr%d%s", tr->stage, tr->replica, strag ? "!" : "");
}

/* The band line under a stage row: its replicas' min / median / max
 * compute time per iteration and its stragglers; "folded" when the band is
 * the one a run record kept of steps it folded (drawn ':'). */
static void draw_band(pt_ui *ui, const pt_band_stage *st, int y, int x, int label, int w)
{
    pt_ui_text(y, x, label, ui->attr[PT_THEME_DIM], 1, " x%d", st->replicas);
    char text[160];
    int n = snprintf(text, sizeof text, "band %.2f | %.2f | %.2f ms/it (min|med|max)%s",
                     st->min_s * 1e3, st->median_s * 1e3, st->max_s * 1e3,
                     st->folded ? ", folded ':'" : "");
    pt_ui_text(y, x + label, w - label, ui->attr[PT_THEME_DIM], 1, "%s", text);
    if (st->stragglers && n + 2 < w - label)
        pt_ui_text(y, x + label + n + 2, w - label - n - 2, ui->attr[PT_THEME_WARN], 0,
                   "! %d straggler%s", st->stragglers, st->stragglers > 1 ? "s" : "");
}

/* A stage row of replica rows whose stage also has folded steps in the
 * window (the edge of a record's full-detail window): those steps drawn
 * where the median replica's cells are blank. */
static void overlay_folded(const pt_tline *tl, const pt_bands *b, const pt_band_stage *st, int row,
                           const double t[2], int width, pt_timeline_cell *cells)
{
    int fr = st->first_row - 1;
    if (st->folded || fr < 0 || b->rows[fr].stage != st->stage ||
        b->rows[fr].replica != PT_TL_ALL_REPLICAS || fr == row)
        return;
    pt_timeline_cell more[CELLS_MAX];
    pt_timeline_cells(tl, fr, PT_LANE_COMPUTE, t[0], t[1], width, t[0], t[0], more);
    for (int c = 0; c < width; c++)
        if (more[c].paint == PT_TIMELINE_FOLDED &&
            (cells[c].paint == PT_TIMELINE_BLANK || cells[c].paint == PT_PAINT_BUBBLE))
            cells[c] = more[c];
}

/* One row's lines (per of them, the compute lane's first): blocks, or for
 * a stage row the median replica's blocks over its band line. */
static void draw_row(pt_ui *ui, const timeline_view *v, const pt_tline *tl, const pt_bands *b,
                     const chart_rows *cr, int k, int y, const pt_rect *in, int label, int compute,
                     int per, const double t[2])
{
    int row = item_row(cr, b, k), width = in->w - label;
    pt_timeline_cell cells[CELLS_MAX];
    for (int line = 0; line < per; line++, y++) {
        int lane_comm = line >= compute;
        if (lane_comm && cr->agg) {
            draw_band(ui, &b->stages[cr->first + k], y, in->x, label, in->w);
            continue;
        }
        if (line == 0)
            draw_label(ui, v, tl, cr, b, k, y, in->x, label);
        else if (lane_comm)
            pt_ui_text(y, in->x, label, ui->attr[PT_THEME_DIM], 1, "  comm");
        else
            pt_ui_text(y, in->x, label, 0, 1, "%s", "");
        if (line <= 1 || lane_comm)
            pt_timeline_cells(tl, row, lane_comm ? PT_LANE_COMM : PT_LANE_COMPUTE, t[0], t[1],
                              width, tl->t0, tl->t1, cells);
        if (line <= 1 && !lane_comm && cr->agg)
            overlay_folded(tl, b, &b->stages[cr->first + k], row, t, width, cells);
        for (int c = 0; c < width; c++) {
            attr_t a = cell_attr(ui, &cells[c]);
            /* a taller row repeats its blocks; the numbers only once */
            char ch = cells[c].ch;
            if (line > 0 && !lane_comm && ch >= '0' && ch <= '9')
                ch = block_fill(cells, width, c);
            attron(a);
            mvaddch(y, in->x + label + c, (chtype)(unsigned char)ch);
            attroff(a);
        }
    }
}

static void draw_chart(pt_ui *ui, timeline_view *v, const pt_rect *r, const pt_tline *tl,
                       const pt_bands *b, const char *title, double common, int main_chart)
{
    pt_rect in = pt_ui_box(ui, r, title);
    chart_rows cr = rows_of(v, tl, b);
    int label = cr.agg || v->drill >= 0 ? LABEL_COLS_WIDE : LABEL_COLS;
    if (main_chart)
        v->items = cr.count;
    if (in.h < 1 || in.w <= label + 2)
        return;
    if (pt_tline_is_empty(tl)) {
        pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "nothing to show yet");
        return;
    }
    int width = in.w - label;
    if (width > CELLS_MAX)
        width = CELLS_MAX;
    double t[2];
    window(v, tl, common, &t[0], &t[1]);
    char axis[CELLS_MAX + 1];
    if (common > 0) /* times from the chart's own start: one axis for both */
        pt_timeline_axis(t[0] - tl->t0, t[1] - tl->t0, width, axis);
    else
        pt_timeline_axis(t[0], t[1], width, axis);
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 1, "%*s%s", label, "", axis);
    int avail = in.h - 1;
    int compute, comm;
    row_lines(avail, cr.count, &compute, &comm);
    if (cr.agg && comm == 0 && avail >= 2 * cr.count) /* a stage row keeps its band line */
        comm = 1;
    int per = compute + comm;
    int visible = avail / per;
    if (cr.agg && main_chart) { /* the selected stage stays in sight */
        if (v->sel >= cr.count)
            v->sel = cr.count - 1;
        if (v->sel < v->scroll)
            v->scroll = v->sel;
        if (v->sel >= v->scroll + visible)
            v->scroll = v->sel - visible + 1;
    }
    if (v->scroll > cr.count - visible)
        v->scroll = cr.count - visible > 0 ? cr.count - visible : 0;
    int scroll = cr.count > visible ? v->scroll : 0;
    in.w = label + width;
    for (int k = 0; k < visible && scroll + k < cr.count; k++)
        draw_row(ui, v, tl, b, &cr, scroll + k, in.y + 1 + k * per, &in, label, compute, per, t);
    if (scroll + visible < cr.count)
        pt_ui_text(in.y + in.h - 1, in.x + in.w - 12, 12, ui->attr[PT_THEME_DIM], 0, "v %d more",
                   cr.count - scroll - visible);
}

/* 1 when the running plan has a stage of several replicas: the footer then
 * has a stragglers line (a plan of one replica per stage has none). */
static int replicated(const pt_ui *ui)
{
    const pt_plan *p = ui->fig.plan ? ui->fig.plan : ui->store ? pt_store_plan(ui->store) : NULL;
    return p && pt_plan_agent_count(p) > p->stage_count;
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

/* The stragglers line: the slowest first, as many as fit, then the
 * selected stage's band (stage rows) or the rule. */
static void straggler_line(const timeline_view *v, const pt_bands *b, char *buf, size_t cap, int w)
{
    size_t n = 0;
    if (b->straggler_count == 0)
        n = (size_t)snprintf(buf, cap, " stragglers: none (%.0f %% over a stage's median)", b->pct);
    else
        n = (size_t)snprintf(buf, cap, " stragglers:");
    for (int k = 0; k < b->straggler_count && n < cap; k++) {
        int row = b->by_slowness[k];
        char one[96];
        int replica = b->rows[row].replica == PT_TL_ALL_REPLICAS /* a folded stage's */
                          ? b->stages[b->stage_of[row]].folded_straggler
                          : b->rows[row].replica;
        int len = snprintf(one, sizeof one, "%s stage %d replica %d +%.0f %%", k ? "," : "",
                           b->rows[row].stage, replica, b->slower[row] * 100.0);
        int left = b->straggler_count - k - 1;
        if ((int)(n + (size_t)len) + (left ? 12 : 0) > w) {
            n += (size_t)snprintf(buf + n, cap - n, " (+%d more)", left + 1);
            break;
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s", one);
    }
    if (v->drill < 0 && v->sel < b->stage_count && n < cap) {
        const pt_band_stage *st = &b->stages[v->sel];
        char sel[128];
        int len = snprintf(sel, sizeof sel, " | s%d: %d replicas%s", st->stage, st->replicas,
                           st->folded ? " (folded)" : ", Enter shows them");
        if ((int)n + len <= w)
            snprintf(buf + n, cap - n, "%s", sel);
    } else if (v->drill >= 0 && n < cap) {
        char back[64];
        int len = snprintf(back, sizeof back, " | stage %d's replicas, Esc: all stages", v->drill);
        if ((int)n + len <= w)
            snprintf(buf + n, cap - n, "%s", back);
    }
}

static void draw_info(pt_ui *ui, const timeline_view *v, const pt_rect *r, int measured,
                      const pt_bands *b)
{
    int y = r->y;
    /* a record's folded steps are one more glyph, named when the chart has
     * them: last where it fits, else first (the legend's end is cut) */
    int folds = measured && ui->tl.meas.fold_count > 0;
    const char *note = ": folded";
    int room = r->w - 1 - (folds ? (int)strlen(note) + 2 : 0);
    const char *legend = pt_timeline_legend(room);
    if (!folds)
        pt_ui_text(y++, r->x, r->w, ui->attr[PT_THEME_DIM], 1, " %s", legend);
    else if ((int)strlen(legend) <= room)
        pt_ui_text(y++, r->x, r->w, ui->attr[PT_THEME_DIM], 1, " %s  %s", legend, note);
    else
        pt_ui_text(y++, r->x, r->w, ui->attr[PT_THEME_DIM], 1, " %s  %s", note, legend);
    if (y >= r->y + r->h)
        return;
    char line[256];
    for (int level = 0; level < INFO_LEVELS; level++) {
        info_line(ui, v, measured, level, line, sizeof line);
        if ((int)strlen(line) <= r->w)
            break;
    }
    pt_ui_text(y++, r->x, r->w, ui->attr[PT_THEME_TEXT], 1, "%s", line);
    if (y >= r->y + r->h || !replicated(ui))
        return;
    char st[512];
    straggler_line(v, b, st, sizeof st, r->w);
    pt_ui_text(y, r->x, r->w, ui->attr[b->straggler_count ? PT_THEME_WARN : PT_THEME_DIM], 1, "%s",
               st);
}

static void draw(pt_ui *ui, void *state)
{
    timeline_view *v = state;
    pt_ui_timelines(ui);
    const pt_rect *main_r = pt_layout_find(&ui->layout, PANEL_MAIN);
    const pt_rect *pred_r = pt_layout_find(&ui->layout, PANEL_PRED);
    const pt_rect *info = pt_layout_find(&ui->layout, PANEL_INFO);
    int have_meas = !pt_tline_is_empty(&ui->tl.meas);
    int show_meas = have_meas && ui->tl.mode != PT_TL_PREDICTED;
    /* compared: both charts on one axis as long as the longer of the two */
    double common = 0;
    if (pred_r) {
        double a = ui->tl.meas.t1 - ui->tl.meas.t0, b = ui->tl.pred.t1 - ui->tl.pred.t0;
        common = a > b ? a : b;
    }
    const pt_bands *mb = &ui->tl.meas_bands, *pb = &ui->tl.pred_bands;
    char title[128];
    if (main_r) {
        if (show_meas) {
            snprintf(title, sizeof title, "measured timeline: last %d iterations", ui->tl.iters);
            draw_chart(ui, v, main_r, &ui->tl.meas, mb, title, common, 1);
        } else {
            snprintf(title, sizeof title, "predicted timeline (simulator)%s",
                     have_meas || ui->tl.mode != PT_TL_MEASURED ? "" : ": nothing measured yet");
            draw_chart(ui, v, main_r, &ui->tl.pred, pb, title, common, 1);
        }
    }
    if (pred_r)
        draw_chart(ui, v, pred_r, show_meas ? &ui->tl.pred : &ui->tl.meas, show_meas ? pb : mb,
                   show_meas ? "predicted timeline (simulator), same axis"
                             : "measured timeline, same axis",
                   common, 0);
    if (info)
        draw_info(ui, v, info, show_meas, show_meas ? mb : pb);
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

/* 1 when the main chart shows one row per stage. */
static int stage_rows(const pt_ui *ui, const timeline_view *v)
{
    const pt_bands *b = ui->tl.mode != PT_TL_PREDICTED && !pt_tline_is_empty(&ui->tl.meas)
                            ? &ui->tl.meas_bands
                            : &ui->tl.pred_bands;
    return v->drill < 0 && aggregated(b);
}

static void k_drill(pt_ui *ui, void *state, int ch);

static void k_scroll(pt_ui *ui, void *state, int ch)
{
    timeline_view *v = state;
    if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        k_drill(ui, state, ch);
        return;
    }
    int *at = stage_rows(ui, v) ? &v->sel : &v->scroll;
    int page = ch == KEY_NPAGE || ch == KEY_PPAGE ? PAGE_ROWS : 1;
    if (ch == KEY_DOWN || ch == KEY_NPAGE)
        *at += page;
    else
        *at -= page;
    if (stage_rows(ui, v) && *at >= v->items)
        *at = v->items - 1;
    if (*at < 0)
        *at = 0;
}

/* Enter: the selected stage's replicas; again (or Esc): back to the stages. */
static void k_drill(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    timeline_view *v = state;
    if (v->drill >= 0) {
        v->drill = -1;
        v->scroll = v->agg_scroll;
        pt_ui_status(ui, 0, "timeline: one row per stage");
        return;
    }
    const pt_bands *b = ui->tl.mode != PT_TL_PREDICTED && !pt_tline_is_empty(&ui->tl.meas)
                            ? &ui->tl.meas_bands
                            : &ui->tl.pred_bands;
    if (!stage_rows(ui, v) || v->sel >= b->stage_count) {
        pt_ui_status(ui, 0, "timeline: every replica has its row already");
        return;
    }
    v->drill = b->stages[v->sel].stage;
    v->agg_scroll = v->scroll;
    v->scroll = 0;
    pt_ui_status(ui, 0, "timeline: stage %d's %d replicas (Esc or Enter: back to the stages)",
                 v->drill, b->stages[v->sel].replicas);
}

static const pt_view_key keys[] = {
    {{KEY_LEFT, KEY_RIGHT, 'h', 'l'}, "Left Right h l", "pan", k_pan, NULL},
    {{'+', '=', '-', '0'}, "+ - 0", "zoom in / out / reset (mouse wheel zooms too)", k_zoom, NULL},
    {{'p'}, "p", "measured / predicted / both side by side", k_mode, NULL},
    {{'i', 'I'}, "i I", "one iteration fewer / more shown", k_iters, NULL},
    {{KEY_UP, KEY_DOWN, KEY_PPAGE, KEY_NPAGE, '\n', '\r', KEY_ENTER},
     "Up Down Enter",
     "scroll, PgUp PgDn (a row a stage: select it); Enter: its replicas, Esc back",
     k_scroll,
     NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

/* Esc leaves a drilled stage before it goes back to the previous view. */
static int key(pt_ui *ui, void *state, int ch)
{
    timeline_view *v = state;
    if (ch != 27 || v->drill < 0)
        return 0;
    k_drill(ui, state, ch);
    return 1;
}

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
    if (replicated(ui) && info < INFO_ROWS_WIDE)
        info = INFO_ROWS_WIDE; /* room for the stragglers line */
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
    ((timeline_view *)state)->drill = -1;
}

const pt_view_class pt_view_timeline = {
    .name = "timeline",
    .hotkeys = "2",
    .hints = "h/l pan  +/- zoom  p predicted/measured  i/I iterations  x export  Enter stage "
             "replicas  ? help  q quit",
    .keys = keys,
    .state_size = sizeof(timeline_view),
    .init = init,
    .layout = layout,
    .draw = draw,
    .key = key,
    .mouse = mouse,
};

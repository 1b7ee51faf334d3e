/* The stats view: throughput and loss over the steps (column and line
 * graphs over the whole run or its recent steps, restarts marked, the loss
 * smoothed beside the raw values, the predicted throughput drawn across), per
 * stage replica busy/bubble measured vs predicted, and memory by category
 * against the device limit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tui/console/ui.h"

#define AXIS_COLS 9 /* "12345.6 " left of a graph */
/* A reference level above this many times the largest measured value is
 * named instead of drawn. */
#define REF_SCALE_MAX 3.0

/* Glyph per memory category (weights, grads, optim, acts, stash, comm). */
static const char mem_glyph[PT_MSG_MEM_COUNT] = {'w', 'g', 'o', 'a', 's', 'c'};

typedef double (*step_value)(const pt_store_step *st);

static double v_throughput(const pt_store_step *st)
{
    return st->samples_per_s;
}

static double v_loss(const pt_store_step *st)
{
    return st->loss;
}

/* Smoothing of the loss line: an exponential moving average over steps
 * with this weight on the newest (about 1 / SMOOTH_ALPHA steps of memory). */
#define SMOOTH_ALPHA 0.1

/* One column of a graph: the steps [lo, hi) of the store it covers. */
typedef struct col_stat {
    double min, mean, max, smooth; /* NaN when no step of the column has a value */
    int restart;                   /* a new plan generation starts in the column */
} col_stat;

/* Folds steps [first, n) into w columns: one step per column (the newest w
 * steps) unless whole, else the whole run downsampled (min / mean / max
 * per column, as btop's and nvtop's history graphs). smooth: the moving
 * average at the column's last step. Returns the first step index shown. */
static int64_t fold(pt_ui *ui, step_value f, int whole, int w, col_stat *cols, int *used)
{
    int64_t n = pt_store_step_count(ui->store);
    int64_t first = whole || n <= w ? 0 : n - w;
    int64_t span = n - first;
    int ncols = span < w ? (int)span : w;
    for (int c = 0; c < ncols; c++)
        cols[c] = (col_stat){NAN, NAN, NAN, NAN, 0};
    double ema = NAN, sum = 0;
    int cnt = 0, cur = -1;
    int64_t prev_gen = -1;
    for (int64_t i = 0; i < n; i++) {
        const pt_store_step *st = pt_store_step_at(ui->store, i);
        double v = f(st);
        if (!isnan(v))
            ema = isnan(ema) ? v : ema + SMOOTH_ALPHA * (v - ema);
        int restart = prev_gen >= 0 && st->gen != prev_gen;
        prev_gen = st->gen;
        if (i < first)
            continue;
        int c = (int)((i - first) * ncols / span);
        if (c != cur) {
            if (cur >= 0 && cnt)
                cols[cur].mean = sum / cnt;
            cur = c;
            sum = 0;
            cnt = 0;
        }
        col_stat *cs = &cols[c];
        cs->restart |= restart;
        cs->smooth = ema;
        if (isnan(v))
            continue;
        cs->min = isnan(cs->min) ? v : fmin(cs->min, v);
        cs->max = isnan(cs->max) ? v : fmax(cs->max, v);
        sum += v;
        cnt++;
    }
    if (cur >= 0 && cnt)
        cols[cur].mean = sum / cnt;
    *used = ncols;
    return first;
}

static int row_of(double v, double lo, double hi, int h)
{
    int k = (int)lround((v - lo) / (hi - lo) * (h - 1));
    return k < 0 ? 0 : (k > h - 1 ? h - 1 : k);
}

/* Draws a series over the steps: columns when bars is set (the mean, with
 * ':' up to the column's max when several steps share it), else the raw
 * values as '*' (with '.' over a column's min..max) and the moving average
 * as 'o'. Restarts (a new plan generation) are '|' in the column where
 * they happen, in either zoom. ref > 0 draws a reference level ('-'). */
static void graph(pt_ui *ui, int whole, const pt_rect *r, const char *title, step_value f, int bars,
                  pt_theme_key key, double ref)
{
    pt_rect in = pt_ui_box(ui, r, title);
    int64_t n = pt_store_step_count(ui->store);
    int w = in.w - AXIS_COLS, h = in.h - 1;
    if (w < 2 || h < 2)
        return;
    if (n == 0) {
        pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "no steps measured yet");
        return;
    }
    col_stat *cols = malloc(sizeof *cols * (size_t)w);
    if (!cols)
        return;
    int ncols = 0;
    int64_t first = fold(ui, f, whole, w, cols, &ncols);
    double lo = INFINITY, hi = -INFINITY;
    for (int c = 0; c < ncols; c++) {
        if (!isnan(cols[c].min)) {
            lo = fmin(lo, cols[c].min);
            hi = fmax(hi, cols[c].max);
        }
    }
    /* a prediction far above what was measured would flatten the measured
     * columns: then it is named in the footer instead of drawn */
    int ref_off = ref > 0 && isfinite(hi) && ref > REF_SCALE_MAX * hi;
    if (ref > 0 && !ref_off) {
        lo = fmin(lo, ref);
        hi = fmax(hi, ref);
    }
    if (!isfinite(lo)) {
        pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "not reported by any stage");
        free(cols);
        return;
    }
    if (bars)
        lo = 0;
    if (hi - lo < 1e-12)
        hi = lo + (fabs(lo) > 0 ? fabs(lo) * 0.1 : 1);
    pt_ui_text(in.y, in.x, AXIS_COLS, ui->attr[PT_THEME_DIM], 1, "%8.4g", hi);
    pt_ui_text(in.y + h - 1, in.x, AXIS_COLS, ui->attr[PT_THEME_DIM], 1, "%8.4g", lo);
    if (ref > 0 && !ref_off) {
        int ry = in.y + h - 1 - row_of(ref, lo, hi, h);
        attron(ui->attr[PT_THEME_PREDICTED]);
        for (int c = 0; c < w; c++)
            mvaddch(ry, in.x + AXIS_COLS + c, '-');
        attroff(ui->attr[PT_THEME_PREDICTED]);
    }
    int base = in.y + h - 1;
    for (int c = 0; c < ncols; c++) {
        const col_stat *cs = &cols[c];
        int x = in.x + AXIS_COLS + c;
        if (cs->restart) {
            attron(ui->attr[PT_THEME_WARN]);
            for (int y = in.y; y < in.y + h; y++)
                mvaddch(y, x, '|');
            attroff(ui->attr[PT_THEME_WARN]);
        }
        if (isnan(cs->mean))
            continue;
        int mean = row_of(cs->mean, lo, hi, h), mx = row_of(cs->max, lo, hi, h),
            mn = row_of(cs->min, lo, hi, h);
        attron(ui->attr[key]);
        if (bars) {
            for (int k = 0; k <= mean; k++)
                mvaddch(base - k, x, '#');
            for (int k = mean + 1; k <= mx; k++)
                mvaddch(base - k, x, ':');
        } else {
            for (int k = mn; k <= mx; k++)
                mvaddch(base - k, x, '.');
            mvaddch(base - mean, x, '*');
        }
        attroff(ui->attr[key]);
        if (!bars && !isnan(cs->smooth)) {
            attron(ui->attr[PT_THEME_ACCENT]);
            mvaddch(base - row_of(cs->smooth, lo, hi, h), x, 'o');
            attroff(ui->attr[PT_THEME_ACCENT]);
        }
    }
    const pt_store_step *a = pt_store_step_at(ui->store, first),
                        *b = pt_store_step_at(ui->store, n - 1);
    char refs[64] = "", zoom[64];
    if (ref_off)
        snprintf(refs, sizeof refs, "  pred %.4g off scale", ref);
    else if (ref > 0)
        snprintf(refs, sizeof refs, "  - pred %.4g", ref);
    int64_t per_col = ncols ? (n - first + ncols - 1) / ncols : 1;
    /* the footer is cut at the panel's width: step range and zoom first */
    if (whole && per_col > 1)
        snprintf(zoom, sizeof zoom, " all %lld/col, z recent", (long long)per_col);
    else if (whole)
        snprintf(zoom, sizeof zoom, " all, z recent");
    else
        snprintf(zoom, sizeof zoom, "%s", first > 0 ? " z all" : "");
    char foot[256];
    int fn = snprintf(foot, sizeof foot, "%*s step %lld..%lld%s%s%s", AXIS_COLS - 1, "",
                      (long long)a->step, (long long)b->step, zoom, bars ? "" : "  * raw o smooth",
                      refs);
    if (fn > in.w) /* narrow: the same words, shorter */
        snprintf(foot, sizeof foot, " step %lld..%lld%s%s%s", (long long)a->step,
                 (long long)b->step, zoom, bars ? "" : " *raw oavg", refs);
    pt_ui_text(in.y + h, in.x, in.w, ui->attr[PT_THEME_DIM], 1, "%s", foot);
    free(cols);
}

/* The headline iteration times (tui/record/figures.h), as the header,
 * plan view and timeline footer show them. */
static void iteration_line(pt_ui *ui, int y, int x, int w)
{
    const pt_ui_figures *f = &ui->fig;
    char m[32] = "-", p[32] = "-", line[160];
    if (f->meas.steps > 0)
        snprintf(m, sizeof m, "%.3f", f->meas.iter_ms);
    if (f->have_pred)
        snprintf(p, sizeof p, "%.3f", f->pred.iter_ms);
    if (snprintf(line, sizeof line, "iteration %s ms measured (med %d), %s predicted (%s)", m,
                 f->meas.steps, p, f->have_pred ? f->pred.brief : "-") > w)
        snprintf(line, sizeof line, "iter %s meas, %s pred ms", m, p);
    pt_ui_text(y, x, w, ui->attr[PT_THEME_ACCENT], 1, "%s", line);
}

static void draw_busy(pt_ui *ui, const pt_rect *r)
{
    pt_rect in = pt_ui_box(ui, r, "busy/bubble: measured vs predicted");
    pt_ui_timelines(ui);
    const pt_tline *tl = &ui->tl.meas;
    const pt_tline *pred = &ui->tl.pred;
    const pt_tline *rows = tl->row_count ? tl : pred;
    int y = in.y;
    if (in.h > 0)
        iteration_line(ui, y++, in.x, in.w);
    /* busy as protocol/op.h defines it, the figure `pipetop run` prints */
    double *busy_of =
        !pt_tline_is_empty(tl) ? malloc(sizeof *busy_of * (size_t)tl->row_count) : NULL;
    int measured = busy_of && pt_tline_busy_fracs(tl, busy_of) == 0;
    for (int row = 0; row < rows->row_count && y < in.y + in.h; row++, y++) {
        const pt_tl_row *tr = &rows->rows[row];
        double busy = -1, pbusy = -1;
        if (measured)
            busy = busy_of[row];
        /* the running plan's prediction, never the edited plan's; a stage's
         * folded steps (its median replica's busy) against its replica 0 */
        int all = tr->replica == PT_TL_ALL_REPLICAS;
        const pt_sim_worker *pw = pt_ui_pred_worker(ui, tr->stage, all ? 0 : tr->replica);
        if (pw)
            pbusy = pw->busy_frac;
        double shown = busy >= 0 ? busy : pbusy;
        if (all)
            pt_ui_text(y, in.x, 7, ui->attr[PT_THEME_TEXT], 1, "s%d all", tr->stage);
        else
            pt_ui_text(y, in.x, 7, ui->attr[PT_THEME_TEXT], 1, "s%dr%d", tr->stage, tr->replica);
        char m[16] = "  -", p[16] = "  -", tail[64];
        if (busy >= 0)
            snprintf(m, sizeof m, "%3.0f%%", busy * 100);
        if (pbusy >= 0)
            snprintf(p, sizeof p, "%3.0f%%", pbusy * 100);
        int tn = snprintf(tail, sizeof tail, " %s pred %s bubble %3.0f%%", m, p,
                          shown >= 0 ? (1 - shown) * 100 : 0);
        int bw = in.w - 7 - tn;
        if (bw >= 3)
            pt_ui_bar(ui, y, in.x + 7, bw, shown > 0 ? shown : 0, ui->block[PT_THEME_FWD], '=');
        int tx = in.x + 7 + (bw >= 3 ? bw : 0);
        pt_ui_text(y, tx, in.x + in.w - tx, ui->attr[PT_THEME_TEXT], 0, "%s", tail);
    }
    free(busy_of);
}

static int64_t stage_limit(pt_ui *ui, int stage, int replica)
{
    if (!ui->edit || !ui->fig.plan)
        return 0;
    const pt_plan *p = ui->fig.plan;
    const pt_topology *t = pt_plan_edit_topology(ui->edit);
    if (stage < 0 || stage >= p->stage_count || replica >= p->stages[stage].replica_count)
        return 0;
    int d = p->stages[stage].replicas[replica];
    return d >= 0 && d < t->device_count ? t->devices[d].memory_bytes : 0;
}

static void draw_memory(pt_ui *ui, const pt_rect *r)
{
    pt_rect in = pt_ui_box(ui, r,
                           r->w >= 44 ? "memory, bar = device limit: w g o a s c"
                                      : "memory/limit: w g o a s c");
    int y = in.y;
    pt_ui_timelines(ui);
    /* the measured rows while they hold spans; folded steps keep no memory
     * of their own (each replica's newest sample is shown, by the plan's rows) */
    const pt_tline *rows = ui->tl.meas.count ? &ui->tl.meas : &ui->tl.pred;
    for (int row = 0; row < rows->row_count && y < in.y + in.h; row++, y++) {
        int s = rows->rows[row].stage, rep = rows->rows[row].replica;
        if (rep == PT_TL_ALL_REPLICAS) { /* a stage folded beside its replicas' rows */
            y--;
            continue;
        }
        int64_t bytes[PT_MSG_MEM_COUNT] = {0}, total = 0, pred_total = 0;
        const pt_store_mem *m = pt_store_mem_latest(ui->store, s, rep);
        if (m) {
            memcpy(bytes, m->peak, sizeof bytes);
            total = m->total_peak;
        }
        /* the running plan's prediction, never the edited plan's */
        const pt_sim_worker *pw = pt_ui_pred_worker(ui, s, rep);
        if (pw) {
            pred_total = pw->peak.total;
            if (!m) {
                for (int k = 0; k < PT_MSG_MEM_COUNT && k < PT_MEM_KIND_COUNT; k++)
                    bytes[k] = pw->peak.bytes[k];
                total = pw->peak.total;
            }
        }
        int64_t limit = stage_limit(ui, s, rep);
        pt_ui_text(y, in.x, 7, ui->attr[PT_THEME_TEXT], 1, "s%dr%d", s, rep);
        char a[24], b[24], c[24], tail[80];
        char pct[16] = "";
        if (limit > 0)
            snprintf(pct, sizeof pct, " %.1f%%", 100.0 * (double)total / (double)limit);
        int tn = snprintf(tail, sizeof tail, " %s/%s%s %s%s", pt_ui_bytes_short(total, a, sizeof a),
                          limit ? pt_ui_bytes_short(limit, b, sizeof b) : "?", pct,
                          m ? "pred " : "(pred)",
                          m && pred_total ? pt_ui_bytes_short(pred_total, c, sizeof c) : "");
        if (in.w - 7 - tn < 6) /* narrow: the percentage goes, the bar stays */
            tn = snprintf(tail, sizeof tail, " %s/%s %s%s", pt_ui_bytes_short(total, a, sizeof a),
                          limit ? pt_ui_bytes_short(limit, b, sizeof b) : "?", m ? "p " : "(p)",
                          m && pred_total ? pt_ui_bytes_short(pred_total, c, sizeof c) : "");
        int bw = in.w - 7 - tn;
        int64_t scale = limit > total ? limit : total;
        int x = in.x + 7;
        if (bw >= 6 && scale > 0) {
            /* to scale: category k ends at the cell its running total rounds
             * to, so a category under half a cell takes none (the percentage
             * beside the bar still tells) */
            int used = 0;
            int64_t sum = 0;
            for (int k = 0; k < PT_MSG_MEM_COUNT; k++) {
                sum += bytes[k];
                int end = (int)((double)sum / (double)scale * bw + 0.5);
                int cells = end - used;
                attr_t at = ui->block[PT_THEME_MEM_WEIGHTS + k];
                attron(at);
                for (int q = 0; q < cells && used < bw; q++, used++)
                    mvaddch(y, x + used, (chtype)(unsigned char)mem_glyph[k]);
                attroff(at);
            }
            attron(ui->attr[PT_THEME_DIM]);
            for (; used < bw; used++)
                mvaddch(y, x + used, '.');
            attroff(ui->attr[PT_THEME_DIM]);
            x += bw;
        }
        pt_ui_text(y, x, in.x + in.w - x,
                   total > limit && limit ? ui->attr[PT_THEME_ERROR] : ui->attr[PT_THEME_TEXT], 0,
                   "%s", tail);
    }
}

/* The view's own state. */
typedef struct stats_view {
    int whole; /* graphs: the whole run (1) or one step per column (0) */
} stats_view;

static void k_zoom(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    stats_view *v = state;
    v->whole = !v->whole;
    pt_ui_status(ui, 0, "stats: %s", v->whole ? "the whole run" : "the recent steps");
}

static const pt_view_key keys[] = {
    {{'z'},
     "z",
     "graphs: the whole run (downsampled: mean, min-max) / the recent steps",
     k_zoom,
     NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

/* Its panels: a 2 x 2 grid, graphs on top (they want width), tables below. */
enum { PANEL_THROUGHPUT, PANEL_LOSS, PANEL_BUSY, PANEL_MEMORY };

static void layout(const pt_ui *ui, const void *state, pt_rect b, pt_layout *l)
{
    (void)ui, (void)state;
    int top = b.h / 2, left = b.w / 2;
    pt_layout_add(l, PANEL_THROUGHPUT, "st-throughput", 1, pt_rect_of(b.y, b.x, top, left));
    pt_layout_add(l, PANEL_LOSS, "st-loss", 1, pt_rect_of(b.y, b.x + left, top, b.w - left));
    pt_layout_add(l, PANEL_BUSY, "st-busy", 1, pt_rect_of(b.y + top, b.x, b.h - top, left));
    pt_layout_add(l, PANEL_MEMORY, "st-memory", 1,
                  pt_rect_of(b.y + top, b.x + left, b.h - top, b.w - left));
}

static void draw(pt_ui *ui, void *state)
{
    int whole = ((stats_view *)state)->whole;
    const pt_rect *tp = pt_layout_find(&ui->layout, PANEL_THROUGHPUT);
    const pt_rect *lo = pt_layout_find(&ui->layout, PANEL_LOSS);
    const pt_rect *bu = pt_layout_find(&ui->layout, PANEL_BUSY);
    const pt_rect *me = pt_layout_find(&ui->layout, PANEL_MEMORY);
    pt_ui_figures_update(ui);
    double pred = ui->fig.have_pred ? ui->fig.pred.throughput : 0;
    if (tp)
        graph(ui, whole, tp, "throughput (samples/s)", v_throughput, 1, PT_THEME_THROUGHPUT, pred);
    if (lo)
        graph(ui, whole, lo, "loss", v_loss, 0, PT_THEME_LOSS, 0);
    if (bu)
        draw_busy(ui, bu);
    if (me)
        draw_memory(ui, me);
}

const pt_view_class pt_view_stats = {
    .name = "stats",
    .hotkeys = "3",
    .hints = "z whole run/recent  1-4 views  x export  t theme  ? help  q quit",
    .keys = keys,
    .state_size = sizeof(stats_view),
    .layout = layout,
    .draw = draw,
};

/* The plan view: layers with their profile bars under stage headers, the
 * prediction of the edited plan, and per-stage replicas and memory; every
 * edit key goes through the plan editor, which re-simulates or refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"
#include "tui/console/ui.h"
#include "tui/export/timeline_ascii.h"

#define NAME_MIN_COLS 8
#define NAME_MAX_COLS 22
#define VALUE_COLS    9 /* " 12.34ms " */
#define PAGE_LINES    10
#define SAVE_PATH     "plan-edited.json"

/* The view's own state. */
typedef struct plan_view {
    int cursor;                /* layer under the cursor */
    int scroll;                /* first list line shown */
    int drag;                  /* boundary being dragged with the mouse, 0 none */
    int replica;               /* replica the placement key moves */
    char planner[PT_NAME_MAX]; /* what P runs */
    int kind_cursor;           /* the kind S visited last (applied or skipped); -1: none */
    int kind_of_plan;          /* the plan's kind when S left it there */
    int kind_before_chunks;    /* the kind V goes back to from interleaved */
} plan_view;

/* Its panels. */
enum { PANEL_LAYERS, PANEL_SUMMARY, PANEL_STAGES };

/* A list line is a stage header (layer < 0) or a layer row. */
typedef struct line_ref {
    int stage, layer;
} line_ref;

static int line_count(const pt_plan *p)
{
    return p->stage_count + p->layer_count;
}

static line_ref line_at(const pt_plan *p, int i)
{
    line_ref r = {-1, -1};
    for (int s = 0; s < p->stage_count; s++) {
        int n = p->stages[s].last - p->stages[s].first + 1;
        if (i < n) {
            r.stage = s;
            r.layer = i == 0 ? -1 : p->stages[s].first + i - 1;
            return r;
        }
        i -= n;
    }
    return r;
}

static int line_of_layer(const pt_plan *p, int layer)
{
    int i = 0;
    for (int s = 0; s < p->stage_count; s++) {
        if (layer < p->stages[s].last)
            return i + 1 + layer - p->stages[s].first;
        i += p->stages[s].last - p->stages[s].first + 1;
    }
    return 0;
}

static void draw_layer(pt_ui *ui, const pt_profile *prof, int layer, int y, int x, int w,
                       double max_f, double max_b, double max_m, int selected)
{
    const pt_profile_layer *L = &prof->layers[layer];
    int name_w = w / 5;
    name_w = name_w < NAME_MIN_COLS   ? NAME_MIN_COLS
             : name_w > NAME_MAX_COLS ? NAME_MAX_COLS
                                      : name_w;
    int fixed = 5 + name_w + 1 + 3 * (2 + VALUE_COLS);
    int bar = (w - fixed) / 3;
    if (bar < 2)
        bar = 2;
    attr_t base = selected ? ui->attr[PT_THEME_SELECT] : ui->attr[PT_THEME_TEXT];
    pt_ui_text(y, x, w, base, 1, "%4d %-*.*s", layer, name_w, name_w, L->name);
    int cx = x + 5 + name_w + 1;
    struct {
        const char *tag;
        double v, max;
        pt_theme_key key;
        char glyph;
        const char *unit;
    } col[3] = {{"F", L->fwd_ms, max_f, PT_THEME_FWD, pt_timeline_fill(PT_PAINT_FWD), "ms"},
                {"B", L->bwd_ms, max_b, PT_THEME_BWD, pt_timeline_fill(PT_PAINT_BWD), "ms"},
                {"M", (double)(L->param_bytes + L->act_bytes) / (1024.0 * 1024.0), max_m,
                 PT_THEME_MEM_WEIGHTS, 'w', "M"}};
    for (int k = 0; k < 3 && cx + 2 < x + w; k++) {
        pt_ui_text(y, cx, 2, base, 0, "%s ", col[k].tag);
        int bw = bar;
        if (cx + 2 + bw > x + w)
            bw = x + w - cx - 2;
        pt_ui_bar(ui, y, cx + 2, bw, col[k].max > 0 ? col[k].v / col[k].max : 0,
                  ui->block[col[k].key], col[k].glyph);
        int vx = cx + 2 + bw;
        if (vx < x + w)
            pt_ui_text(y, vx, x + w - vx, base, 0, "%6.2f%-2s", col[k].v, col[k].unit);
        cx += 2 + bar + VALUE_COLS;
    }
}

static void draw_stage_header(pt_ui *ui, const plan_view *v, const pt_plan *p, int s, int y, int x,
                              int w)
{
    const pt_stage *st = &p->stages[s];
    char devs[96] = "";
    for (int r = 0; r < st->replica_count; r++) {
        size_t n = strlen(devs);
        if (n + 8 >= sizeof devs) {
            snprintf(devs + n, sizeof devs - n, ",...");
            break;
        }
        snprintf(devs + n, sizeof devs - n, "%s%sd%d", r ? "," : "",
                 r == v->replica % st->replica_count &&
                         s == pt_plan_edit_stage_of_layer(ui->edit, v->cursor)
                     ? "*"
                     : "",
                 st->replicas[r]);
    }
    pt_plan_stage_info si;
    char peak[24] = "";
    if (pt_plan_edit_stage_info(ui->edit, s, &si) == 0)
        pt_ui_bytes(si.peak_bytes, peak, sizeof peak);
    pt_ui_text(y, x, w, ui->attr[PT_THEME_BOUNDARY], 1,
               "== stage %d  layers %d-%d  x%d on %s%s  peak %s %s", s, st->first, st->last - 1,
               st->replica_count, devs, st->recompute ? "  recompute" : "", peak,
               "====================================================================");
}

static void draw_layers(pt_ui *ui, plan_view *v, const pt_rect *r)
{
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    const pt_profile *prof = pt_plan_edit_profile(ui->edit);
    char title[96];
    snprintf(title, sizeof title, "plan: %s, %d layers, %d stages", p->model, p->layer_count,
             p->stage_count);
    pt_rect in = pt_ui_box(ui, r, title);
    double max_f = 0, max_b = 0, max_m = 0;
    for (int i = 0; i < prof->layer_count; i++) {
        const pt_profile_layer *L = &prof->layers[i];
        max_f = fmax(max_f, L->fwd_ms);
        max_b = fmax(max_b, L->bwd_ms);
        max_m = fmax(max_m, (double)(L->param_bytes + L->act_bytes) / (1024.0 * 1024.0));
    }
    int n = line_count(p), cur = line_of_layer(p, v->cursor);
    if (cur < v->scroll + 1)
        v->scroll = cur - 1 > 0 ? cur - 1 : 0;
    if (cur >= v->scroll + in.h)
        v->scroll = cur - in.h + 1;
    if (v->scroll > n - in.h)
        v->scroll = n - in.h > 0 ? n - in.h : 0;
    for (int k = 0; k < in.h && v->scroll + k < n; k++) {
        line_ref lr = line_at(p, v->scroll + k);
        if (lr.layer < 0)
            draw_stage_header(ui, v, p, lr.stage, in.y + k, in.x, in.w);
        else
            draw_layer(ui, prof, lr.layer, in.y + k, in.x, in.w, max_f, max_b, max_m,
                       lr.layer == v->cursor);
    }
}

/* One line of the summary panel: its text (the long form, and a short one
 * for narrow panels) and how much it matters when rows are few (0 first). */
typedef struct sum_line {
    char text[160], brief[96];
    attr_t attr;
    int prio;
} sum_line;

enum { SUM_LINES_MAX = 12 };

static sum_line *add_line(sum_line *v, int *n, int prio, attr_t attr)
{
    sum_line *l = &v[(*n)++];
    l->text[0] = l->brief[0] = 0;
    l->attr = attr;
    l->prio = prio;
    return l;
}

/* The running plan's figures, as every screen shows them
 * (tui/record/figures.h): predicted with its label, measured with its
 * statistic, bubble and memory of the running plan's simulation. */
static void running_lines(pt_ui *ui, sum_line *v, int *n)
{
    const pt_ui_figures *f = &ui->fig;
    attr_t t = ui->attr[PT_THEME_TEXT], acc = ui->attr[PT_THEME_ACCENT];
    sum_line *l = add_line(v, n, 0, acc);
    if (f->have_pred) {
        snprintf(l->text, sizeof l->text, "predicted  %.3f ms/iteration (%s)", f->pred.iter_ms,
                 f->pred.label);
        snprintf(l->brief, sizeof l->brief, "predicted  %.3f ms (%s)", f->pred.iter_ms,
                 f->pred.brief);
    } else {
        snprintf(l->text, sizeof l->text, "predicted  -");
    }
    l = add_line(v, n, 1, acc);
    if (!f->running) {
        snprintf(l->text, sizeof l->text, "measured   - (nothing runs: a simulation)");
        snprintf(l->brief, sizeof l->brief, "measured   - (nothing runs)");
    } else if (f->meas.steps > 0) {
        snprintf(l->text, sizeof l->text, "measured   %.3f ms/iteration (%s)", f->meas.iter_ms,
                 f->meas.label);
        snprintf(l->brief, sizeof l->brief, "measured   %.3f ms (med %d)", f->meas.iter_ms,
                 f->meas.steps);
    } else
        snprintf(l->text, sizeof l->text, "measured   not yet (%s)", f->meas.label);
    if (!f->have_pred)
        return;
    l = add_line(v, n, 2, t);
    snprintf(l->text, sizeof l->text, "bubble     %.1f %% predicted", f->res.bubble_frac * 100);
    snprintf(l->brief, sizeof l->brief, "bubble     %.1f %%", f->res.bubble_frac * 100);
    const pt_sim_worker *w = f->res.worker_count ? &f->res.workers[f->res.worst_worker] : NULL;
    if (w) {
        char need[24], have[24];
        l = add_line(v, n, 3, f->res.fits ? ui->attr[PT_THEME_OK] : ui->attr[PT_THEME_ERROR]);
        snprintf(l->text, sizeof l->text, "memory     %s (%s / %s)",
                 f->res.fits ? "fits" : "DOES NOT FIT",
                 pt_ui_bytes(w->peak.total, need, sizeof need),
                 pt_ui_bytes(w->limit, have, sizeof have));
        snprintf(l->brief, sizeof l->brief, "memory     %s %s/%s", f->res.fits ? "fits" : "NO FIT",
                 pt_ui_bytes_short(w->peak.total, need, sizeof need),
                 pt_ui_bytes_short(w->limit, have, sizeof have));
    }
    l = add_line(v, n, 8, t);
    snprintf(l->text, sizeof l->text, "throughput %.1f samples/s predicted", f->res.throughput);
    snprintf(l->brief, sizeof l->brief, "throughput %.1f/s", f->res.throughput);
}

/* " policy A", " vsync", " v=2": what the plan's kind reads besides its name. */
static void kind_options(const pt_plan *p, char *buf, size_t cap)
{
    buf[0] = 0;
    if (pt_sched_kind_has(p->schedule, PT_SCHED_OPT_POLICY))
        snprintf(buf, cap, " policy %c", p->policy);
    else if (pt_sched_kind_has(p->schedule, PT_SCHED_OPT_VSYNC) && p->vertical_sync)
        snprintf(buf, cap, " vsync");
    else if (p->chunks > 1)
        snprintf(buf, cap, " v=%d", p->chunks);
}

/* The edited plan, apart from the running one and only while they differ:
 * what it is, then what it would do. */
static void edited_lines(pt_ui *ui, sum_line *v, int *n)
{
    if (!ui->fig.edited)
        return;
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    const pt_sim_result *res = pt_plan_edit_result(ui->edit);
    char opt[16];
    kind_options(p, opt, sizeof opt);
    sum_line *l = add_line(v, n, 4, ui->attr[PT_THEME_WARN]);
    snprintf(l->text, sizeof l->text, "edited:    %s%s, %d stages (A applies it)",
             pt_sched_kind_name(p->schedule), opt, p->stage_count);
    snprintf(l->brief, sizeof l->brief, "edited:    %s%s, %d stages",
             pt_sched_kind_name(p->schedule), opt, p->stage_count);
    l = add_line(v, n, 5, ui->attr[PT_THEME_WARN]);
    snprintf(l->text, sizeof l->text, "           %.3f ms predicted, bubble %.1f %%, %s",
             res->iter_s * 1e3, res->bubble_frac * 100, res->fits ? "fits" : "DOES NOT FIT");
    snprintf(l->brief, sizeof l->brief, "           %.3f ms, bub %.1f%%, %s", res->iter_s * 1e3,
             res->bubble_frac * 100, res->fits ? "fits" : "NO FIT");
}

/* The plan the summary describes: its schedule and batch. */
static void plan_lines(pt_ui *ui, const pt_plan *p, sum_line *v, int *n)
{
    attr_t t = ui->attr[PT_THEME_TEXT];
    char pol[16];
    kind_options(p, pol, sizeof pol);
    sum_line *l = add_line(v, n, 6, t);
    snprintf(l->text, sizeof l->text, "schedule   %s%s, %d stages, %d workers",
             pt_sched_kind_name(p->schedule), pol, p->stage_count, pt_plan_device_count(p));
    snprintf(l->brief, sizeof l->brief, "schedule   %s%s, %dst", pt_sched_kind_name(p->schedule),
             pol, p->stage_count);
    /* the global batch: edits keep it unless the user changes it */
    l = add_line(v, n, 7, t);
    snprintf(l->text, sizeof l->text, "batch      %d samples = %d micro-batches x %d",
             p->microbatch_count * p->microbatch_size, p->microbatch_count, p->microbatch_size);
    snprintf(l->brief, sizeof l->brief, "batch      %d = %d mb x %d",
             p->microbatch_count * p->microbatch_size, p->microbatch_count, p->microbatch_size);
}

/* The summary: the running plan's predicted and measured figures, then the
 * edited plan's apart ("edited: ..."), then the rest. Rows are given by
 * importance when the panel is short (80x24 keeps the predicted, measured,
 * bubble, memory, edited and schedule lines) and drawn in reading order. */
static void draw_summary(pt_ui *ui, const plan_view *v, const pt_rect *r)
{
    pt_ui_figures_update(ui);
    pt_rect in = pt_ui_box(ui, r,
                           ui->fig.running ? "running plan: predicted, measured"
                                           : "plan: prediction (simulator)");
    const pt_plan *p = ui->fig.plan ? ui->fig.plan : pt_plan_edit_plan(ui->edit);
    sum_line lines[SUM_LINES_MAX];
    int n = 0;
    plan_lines(ui, p, lines, &n);
    running_lines(ui, lines, &n);
    edited_lines(ui, lines, &n);
    sum_line *l = add_line(lines, &n, 9, ui->attr[PT_THEME_TEXT]);
    snprintf(l->text, sizeof l->text, "planner    %s (P runs it, o picks another)", v->planner);
    snprintf(l->brief, sizeof l->brief, "planner    %s (P runs it)", v->planner);
    l = add_line(lines, &n, 10, ui->attr[PT_THEME_DIM]);
    snprintf(l->text, sizeof l->text, "re-simulated in %.2f ms",
             pt_plan_edit_last_sim_s(ui->edit) * 1e3);
    /* the in.h most important lines, in reading order */
    int y = in.y;
    for (int i = 0; i < n; i++) {
        int better = 0;
        for (int k = 0; k < n; k++)
            better += lines[k].prio < lines[i].prio;
        if (better >= in.h)
            continue;
        const char *text =
            (int)strlen(lines[i].text) > in.w && lines[i].brief[0] ? lines[i].brief : lines[i].text;
        pt_ui_text(y++, in.x, in.w, lines[i].attr, 1, "%s", text);
    }
}

static void draw_stages(pt_ui *ui, const plan_view *v, const pt_rect *r)
{
    /* the editor's plan: named as the edited one when it is not the running one */
    pt_ui_figures_update(ui);
    const char *title =
        ui->fig.edited
            ? (r->w >= 46 ? "edited: stages, memory vs device limit, busy"
                          : "edited: memory/limit, busy")
            : (r->w >= 42 ? "stages: memory vs device limit, busy" : "stages: memory/limit, busy");
    pt_rect in = pt_ui_box(ui, r, title);
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    int cur_stage = pt_plan_edit_stage_of_layer(ui->edit, v->cursor);
    for (int s = 0; s < p->stage_count && s < in.h; s++) {
        pt_plan_stage_info si;
        if (pt_plan_edit_stage_info(ui->edit, s, &si) < 0)
            continue;
        char a[24], b[24], head[48];
        int y = in.y + s;
        attr_t t = s == cur_stage ? ui->attr[PT_THEME_ACCENT] : ui->attr[PT_THEME_TEXT];
        int hn = snprintf(head, sizeof head, "s%d L%d-%d x%d ", s, p->stages[s].first,
                          p->stages[s].last - 1, p->stages[s].replica_count);
        pt_ui_text(y, in.x, in.w, t, 1, "%s", head);
        double frac = si.limit_bytes > 0 ? (double)si.peak_bytes / (double)si.limit_bytes : 0;
        char tail[64];
        int tn = snprintf(tail, sizeof tail, " %s/%s busy %2.0f%%",
                          pt_ui_bytes_short(si.peak_bytes, a, sizeof a),
                          pt_ui_bytes_short(si.limit_bytes, b, sizeof b), si.busy_frac * 100);
        int bw = in.w - hn - tn;
        int bx = in.x + hn;
        if (bw >= 3) {
            pt_ui_bar(ui, y, bx, bw, frac,
                      frac > 1 ? ui->block[PT_THEME_LIMIT] : ui->block[PT_THEME_MEM_ACTS], 'm');
            bx += bw;
        }
        if (bx < in.x + in.w)
            pt_ui_text(y, bx, in.x + in.w - bx, frac > 1 ? ui->attr[PT_THEME_ERROR] : t, 0, "%s",
                       tail);
    }
}

static void draw(pt_ui *ui, void *state)
{
    plan_view *v = state;
    const pt_rect *layers = pt_layout_find(&ui->layout, PANEL_LAYERS);
    const pt_rect *sum = pt_layout_find(&ui->layout, PANEL_SUMMARY);
    const pt_rect *stg = pt_layout_find(&ui->layout, PANEL_STAGES);
    if (!ui->edit) {
        if (layers) {
            pt_rect in = pt_ui_box(ui, layers, "plan");
            pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_TEXT], 0,
                       "no plan to edit: start with --plan, --profile and --topology, or replay "
                       "a run record");
        }
        if (sum)
            pt_ui_box(ui, sum, "prediction (simulator)");
        if (stg)
            pt_ui_box(ui, stg, "stages");
        return;
    }
    if (v->cursor >= pt_plan_edit_plan(ui->edit)->layer_count)
        v->cursor = pt_plan_edit_plan(ui->edit)->layer_count - 1;
    if (layers)
        draw_layers(ui, v, layers);
    if (sum)
        draw_summary(ui, v, sum);
    if (stg)
        draw_stages(ui, v, stg);
}

/* Reports an edit's outcome in the status line. */
static void done(pt_ui *ui, int rc, const pt_error *err, const char *what)
{
    if (rc < 0) {
        pt_ui_status(ui, 1, "refused: %s", err->msg[0] ? err->msg : pt_strerror(rc));
        return;
    }
    const pt_sim_result *res = pt_plan_edit_result(ui->edit);
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    pt_ui_figures_update(ui);
    pt_ui_status(ui, 0, "%s; %s %.3f ms predicted, bubble %.1f %%, batch %d = %d x %d%s", what,
                 ui->fig.running ? "edited:" : "plan:", res->iter_s * 1e3, res->bubble_frac * 100,
                 p->microbatch_count * p->microbatch_size, p->microbatch_count, p->microbatch_size,
                 ui->fig.edited ? " (not applied: A applies it)" : "");
}

static void run_planner(pt_ui *ui, plan_view *v)
{
    pt_plan_edit_gain g;
    pt_error err = {0};
    pt_ui_status(ui, 0, "running planner %s ...", v->planner);
    int rc = pt_plan_edit_run_planner(ui->edit, v->planner, &g, &err);
    if (rc < 0) {
        pt_ui_status(ui, 1, "planner %s: %s", v->planner, err.msg);
        return;
    }
    pt_ui_status(ui, 0,
                 "planner %s: %.3f -> %.3f ms per iteration (%+.1f %%), %.0f -> %.0f samples/s",
                 v->planner, g.old_iter_s * 1e3, g.new_iter_s * 1e3, -g.gain * 100,
                 g.old_throughput, g.new_throughput);
}

static void next_planner(pt_ui *ui, plan_view *v)
{
    int n = pt_planner_count(), k = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(pt_planner_get(i)->name, v->planner))
            k = (i + 1) % n;
    snprintf(v->planner, sizeof v->planner, "%s", pt_planner_get(k)->name);
    pt_ui_status(ui, 0, "planner %s: %s (P runs it)", v->planner, pt_planner_get(k)->summary);
}

static void save_plan(pt_ui *ui)
{
    pt_error err = {0};
    if (pt_plan_save(pt_plan_edit_plan(ui->edit), SAVE_PATH, &err) < 0)
        pt_ui_status(ui, 1, "write: %s", err.msg);
    else
        pt_ui_status(ui, 0, "wrote the edited plan to %s", SAVE_PATH);
}

/* ---- keys: one handler per table entry ----------------------------------- */

/* The stage under the cursor. */
static int cur_stage(const pt_ui *ui, const plan_view *v)
{
    return pt_plan_edit_stage_of_layer(ui->edit, v->cursor);
}

static void k_cursor(pt_ui *ui, void *state, int ch)
{
    plan_view *v = state;
    int last = pt_plan_edit_plan(ui->edit)->layer_count - 1;
    int to = ch == KEY_UP || ch == 'k'     ? v->cursor - 1
             : ch == KEY_DOWN || ch == 'j' ? v->cursor + 1
             : ch == KEY_PPAGE             ? v->cursor - PAGE_LINES
             : ch == KEY_NPAGE             ? v->cursor + PAGE_LINES
             : ch == KEY_HOME              ? 0
                                           : last;
    v->cursor = to < 0 ? 0 : to > last ? last : to;
}

static void k_start(pt_ui *ui, void *state, int ch)
{
    plan_view *v = state;
    int s = cur_stage(ui, v);
    if (s == 0) {
        pt_ui_status(ui, 1, "refused: stage 0 starts at layer 0; use { } to move its end");
        return;
    }
    pt_error err = {0};
    int rc = pt_plan_edit_move_boundary(ui->edit, s, ch == '[' ? -1 : 1, &err);
    if (rc == 0)
        v->cursor = pt_plan_edit_plan(ui->edit)->stages[s].first;
    done(ui, rc, &err, "boundary moved");
}

static void k_end(pt_ui *ui, void *state, int ch)
{
    int s = cur_stage(ui, state);
    if (s == pt_plan_edit_plan(ui->edit)->stage_count - 1) {
        pt_ui_status(ui, 1,
                     "refused: the last stage ends at the last layer; use [ ] to move its start");
        return;
    }
    pt_error err = {0};
    done(ui, pt_plan_edit_move_boundary(ui->edit, s + 1, ch == '{' ? -1 : 1, &err), &err,
         "boundary moved");
}

static void k_split(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    pt_error err = {0};
    done(ui, pt_plan_edit_split(ui->edit, ((plan_view *)state)->cursor, &err), &err, "stage split");
}

static void k_join(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    int s = cur_stage(ui, state);
    if (s == 0) {
        pt_ui_status(ui, 1, "refused: stage 0 has no stage before it to join");
        return;
    }
    pt_error err = {0};
    done(ui, pt_plan_edit_merge(ui->edit, s, &err), &err, "stages joined");
}

static void k_replicas(pt_ui *ui, void *state, int ch)
{
    pt_error err = {0};
    done(ui, pt_plan_edit_replicas(ui->edit, cur_stage(ui, state), ch == '-' ? -1 : 1, &err), &err,
         ch == '-' ? "replica removed" : "replica added");
}

static void k_replica(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    plan_view *v = state;
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    int s = cur_stage(ui, v);
    v->replica = (v->replica + 1) % p->stages[s].replica_count;
    pt_ui_status(ui, 0, "stage %d: replica %d selected (on device %d); d moves it", s, v->replica,
                 p->stages[s].replicas[v->replica]);
}

static void k_place(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    plan_view *v = state;
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    int s = cur_stage(ui, v), r = v->replica % p->stages[s].replica_count;
    int dev = (p->stages[s].replicas[r] + 1) % pt_plan_edit_topology(ui->edit)->device_count;
    pt_error err = {0};
    done(ui, pt_plan_edit_place(ui->edit, s, r, dev, &err), &err, "replica moved");
}

static void k_recompute(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    pt_error err = {0};
    done(ui, pt_plan_edit_toggle_recompute(ui->edit, cur_stage(ui, state), &err), &err,
         "recomputation toggled");
}

/* S: the next kind after the one S visited last, whether the plan took it
 * or not, so S visits every kind in turn and comes back to the first; a
 * kind is applied with every stage boundary kept (pt_plan_edit_kind), or
 * named as skipped with the whole reason. */
static void k_schedule(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    plan_view *v = state;
    int n = pt_sched_kind_count(), kind = (int)pt_plan_edit_plan(ui->edit)->schedule;
    if (v->kind_cursor < 0 || kind != v->kind_of_plan) /* moved by another key: start there */
        v->kind_cursor = kind;
    int next = (v->kind_cursor + 1) % n;
    v->kind_cursor = next;
    pt_error err = {0};
    int rc = pt_plan_edit_kind(ui->edit, (pt_sched_kind)next, &err);
    v->kind_of_plan = (int)pt_plan_edit_plan(ui->edit)->schedule;
    char what[96];
    snprintf(what, sizeof what, "schedule %s (%d of %d kinds, S next)",
             pt_sched_kind_name((pt_sched_kind)next), next + 1, n);
    if (rc == 0) {
        done(ui, rc, &err, what);
        return;
    }
    pt_ui_status(ui, 1, "S: %s (%d of %d kinds) skipped, the plan stays %s: %s",
                 pt_sched_kind_name((pt_sched_kind)next), next + 1, n,
                 pt_sched_kind_name((pt_sched_kind)v->kind_of_plan),
                 err.msg[0] ? err.msg : pt_strerror(rc));
}

static void k_policy(pt_ui *ui, void *state, int ch)
{
    (void)state;
    pt_error err = {0};
    if (ch == 'v') {
        done(ui, pt_plan_edit_toggle_vsync(ui->edit, &err), &err, "vertical sync toggled");
        return;
    }
    char policy = pt_plan_edit_plan(ui->edit)->policy == 'A' ? 'B' : 'A';
    done(ui, pt_plan_edit_policy(ui->edit, policy, &err), &err, "policy changed");
}

/* V, the key that re-cuts: into interleaved (2 chunks per device) from any
 * other kind, then one chunk more per device, and past what the layers (or
 * the kind) allow back to one stage per device under the kind it came from.
 * The boundaries move, as asked. */
static void k_chunks(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    plan_view *v = state;
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    int lo, hi, rc;
    pt_sched_kind_chunks(p->schedule, &lo, &hi);
    pt_error err = {0};
    if (lo == hi) {
        v->kind_before_chunks = (int)p->schedule;
        for (int k = 0; k < pt_sched_kind_count(); k++) {
            int klo, khi;
            pt_sched_kind_chunks((pt_sched_kind)k, &klo, &khi);
            if (klo < khi) {
                done(ui, pt_plan_edit_schedule(ui->edit, (pt_sched_kind)k, &err), &err,
                     "interleaved: the layers re-cut into model chunks per device");
                return;
            }
        }
        pt_ui_status(ui, 1, "V: no schedule kind takes model chunks");
        return;
    }
    rc = pt_plan_edit_chunks(ui->edit, p->chunks + 1, &err);
    if (rc == PT_EINVAL) {
        err = (pt_error){0};
        rc = pt_plan_edit_schedule(ui->edit, (pt_sched_kind)v->kind_before_chunks, &err);
        done(ui, rc, &err, "one stage per device again: the layers re-cut");
        return;
    }
    done(ui, rc, &err, "model chunks per device changed: the layers re-cut");
}

static void k_resplit(pt_ui *ui, void *state, int ch)
{
    (void)state;
    pt_error err = {0};
    int size = ch == 'B' ? 1 : ch == 'b' ? -1 : 0, count = ch == 'M' ? 1 : ch == 'm' ? -1 : 0;
    done(ui, pt_plan_edit_resplit(ui->edit, size, count, &err), &err,
         size ? "micro-batch size changed, global batch kept"
              : "micro-batch count changed, global batch kept");
}

/* The global batch changes only here: the count follows, or the size when
 * halving an odd count. */
static void k_global(pt_ui *ui, void *state, int ch)
{
    (void)state;
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    int size = p->microbatch_size, count = p->microbatch_count;
    if (ch == 'G')
        count *= 2;
    else if (count % 2 == 0)
        count /= 2;
    else
        size /= 2;
    if (size < 1) {
        pt_ui_status(ui, 1, "refused: the global batch is 1 sample already");
        return;
    }
    pt_error err = {0};
    done(ui, pt_plan_edit_microbatch(ui->edit, size, count, &err), &err, "global batch changed");
}

static void k_undo(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    pt_error err = {0};
    done(ui, pt_plan_edit_undo(ui->edit, &err), &err, "undone");
}

static void k_planner(pt_ui *ui, void *state, int ch)
{
    if (ch == 'P')
        run_planner(ui, state);
    else
        next_planner(ui, state);
}

static void k_save(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    save_plan(ui);
}

/* Apply & restart: the source checkpoints, stops and re-assigns beside the
 * loop (tui/record/live.h), so keys and the screen stay live meanwhile. */
static void k_apply(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    if (!ui->edit) {
        pt_ui_status(ui, 1, "apply & restart: there is no plan to apply");
        return;
    }
    if (!ui->src || !ui->src->vt->apply) {
        pt_ui_status(ui, 1, "apply & restart needs a live run (this console shows a %s)",
                     ui->src ? ui->src->vt->kind : "simulation");
        return;
    }
    if (!pt_plan_edit_fits(ui->edit)) {
        pt_ui_status(ui, 1, "apply & restart refused: the edited plan does not fit memory");
        return;
    }
    pt_error err = {0};
    pt_ui_status(ui, 0, "apply & restart: checkpointing and stopping the run ...");
    pt_ui_redraw(ui);
    if (ui->src->vt->apply(ui->src, pt_plan_edit_plan(ui->edit), &err) < 0)
        pt_ui_status(ui, 1, "apply & restart refused: %s", err.msg);
    else
        pt_ui_status(ui, 0, "apply & restart: %s", err.msg[0] ? err.msg : "restarted");
    pt_ui_redraw(ui);
}

#define EDIT "edit the plan"

static const pt_view_key keys[] = {
    {{KEY_UP, KEY_DOWN, 'j', 'k', KEY_PPAGE, KEY_NPAGE, KEY_HOME, KEY_END},
     "Up Down j k",
     "move the cursor over the layers (PgUp PgDn Home End)",
     k_cursor,
     NULL},
    {{'[', ']'},
     "[ ]",
     "move the boundary at the start of the cursor's stage up / down",
     k_start,
     EDIT},
    {{'{', '}'},
     "{ }",
     "move the boundary at the end of the cursor's stage up / down",
     k_end,
     EDIT},
    {{'s'}, "s", "split: a new stage starts at the cursor's layer", k_split, EDIT},
    {{'J'}, "J", "join the cursor's stage with the one before it", k_join, EDIT},
    {{'+', '=', '-'}, "+ -", "one replica more / less for the cursor's stage", k_replicas, EDIT},
    {{'r'}, "r", "select the stage's next replica", k_replica, NULL},
    {{'d'}, "d", "move the selected replica to the next device", k_place, EDIT},
    {{'c'}, "c", "recomputation on / off for the cursor's stage", k_recompute, EDIT},
    {{'S'},
     "S",
     "next schedule kind, every kind in turn, stage boundaries kept (a kind the plan cannot "
     "take is skipped with the reason)",
     k_schedule,
     EDIT},
    {{'a', 'v'},
     "a v",
     "dapple's warm-up policy A / B; pipedream's vertical sync on / off",
     k_policy,
     EDIT},
    {{'V'},
     "V",
     "re-cut the layers: interleaved with 2 model chunks per device, then one more, then back "
     "to one stage per device",
     k_chunks,
     EDIT},
    {{'b', 'B'},
     "b B",
     "micro-batch size halved / doubled (the count follows: batch kept)",
     k_resplit,
     EDIT},
    {{'m', 'M'},
     "m M",
     "fewer / more micro-batches (the size follows: batch kept)",
     k_resplit,
     EDIT},
    {{'g', 'G'}, "g G", "global batch halved / doubled", k_global, EDIT},
    {{'u'}, "u", "undo the last edit", k_undo, EDIT},
    {{'P'}, "P", "run the planner and fill the plan (shows the gain)", k_planner, EDIT},
    {{'o'}, "o", "next planner", k_planner, NULL},
    {{'A'},
     "A",
     "apply & restart: checkpoint, stop, re-assign, resume (live runs)",
     k_apply,
     "restart the run"},
    {{'w'}, "w", "write the edited plan to " SAVE_PATH, k_save, EDIT},
    {{0}, "mouse", "click a layer to select it; drag a stage header to a layer", NULL, NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

/* Without a plan to edit, the keys are not the view's. */
static int key(pt_ui *ui, void *state, int ch)
{
    (void)state;
    return ui->edit || ch == 'A' ? 0 : -1;
}

static int mouse(pt_ui *ui, void *state, const pt_mouse *m)
{
    plan_view *v = state;
    int y = m->y, x = m->x, pressed = m->pressed, released = m->released;
    const pt_rect *r = pt_layout_find(&ui->layout, PANEL_LAYERS);
    if (!ui->edit || !r || !pt_rect_contains(r, y, x) || y == r->y || y == r->y + r->h - 1)
        return 0;
    const pt_plan *p = pt_plan_edit_plan(ui->edit);
    int i = v->scroll + (y - r->y - 1);
    if (i < 0 || i >= line_count(p))
        return 0;
    line_ref lr = line_at(p, i);
    if (pressed && !released && lr.layer < 0) {
        v->drag = lr.stage; /* dragging the boundary at the start of this stage */
        return 1;
    }
    if (released && v->drag > 0) {
        int b = v->drag;
        v->drag = 0;
        int layer = lr.layer >= 0 ? lr.layer : p->stages[lr.stage].first;
        pt_error err = {0};
        done(ui, pt_plan_edit_set_boundary(ui->edit, b, layer, &err), &err, "boundary moved");
        return 1;
    }
    v->drag = 0;
    if (lr.layer >= 0)
        v->cursor = lr.layer;
    else
        v->cursor = p->stages[lr.stage].first;
    return 1;
}

/* ---- the class --------------------------------------------------------------- */

/* Rows the summary/stages band takes when stacked. */
#define BAND_MIN_ROWS 7
#define BAND_MAX_ROWS 14
/* Height of the summary panel in the wide (side-by-side) layout. */
#define SUMMARY_ROWS 13

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void layout(const pt_ui *ui, const void *state, pt_rect b, pt_layout *l)
{
    (void)ui, (void)state;
    if (b.w >= PT_LAYOUT_WIDE_COLS) {
        /* layers on the left, summary over stages on the right */
        int left = b.w * 11 / 20;
        int sum_h = clampi(SUMMARY_ROWS, 1, b.h / 2);
        pt_layout_add(l, PANEL_LAYERS, "plan-layers", 1, pt_rect_of(b.y, b.x, b.h, left));
        pt_layout_add(l, PANEL_SUMMARY, "plan-summary", 1,
                      pt_rect_of(b.y, b.x + left, sum_h, b.w - left));
        pt_layout_add(l, PANEL_STAGES, "plan-stages", 1,
                      pt_rect_of(b.y + sum_h, b.x + left, b.h - sum_h, b.w - left));
        return;
    }
    /* stacked: layers on top, a band of summary | stages below */
    int band = clampi(b.h * 2 / 5, BAND_MIN_ROWS, BAND_MAX_ROWS);
    if (band > b.h - 3)
        band = b.h / 2;
    int half = b.w / 2;
    pt_layout_add(l, PANEL_LAYERS, "plan-layers", 1, pt_rect_of(b.y, b.x, b.h - band, b.w));
    pt_layout_add(l, PANEL_SUMMARY, "plan-summary", 1,
                  pt_rect_of(b.y + b.h - band, b.x, band, half));
    pt_layout_add(l, PANEL_STAGES, "plan-stages", 1,
                  pt_rect_of(b.y + b.h - band, b.x + half, band, b.w - half));
}

static void init(pt_ui *ui, void *state)
{
    plan_view *v = state;
    snprintf(v->planner, sizeof v->planner, "%s", ui->cfg.planner);
    v->kind_cursor = -1;
    v->kind_before_chunks = (int)PT_SCHED_1F1B_FLUSH;
}

const pt_view_class pt_view_plan = {
    .name = "plan",
    .hotkeys = "1",
    .hints = "[ ] move boundary  +/- replicas  S schedule  V chunks  b/B m/M micro-batches  "
             "P planner  A apply  ? help  q quit",
    .keys = keys,
    .state_size = sizeof(plan_view),
    .init = init,
    .layout = layout,
    .draw = draw,
    .key = key,
    .mouse = mouse,
};

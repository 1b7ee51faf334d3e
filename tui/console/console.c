/* The console's main loop, key dispatch and frame (see console.h). */
#include "protocol/clock.h"
#include "tui/console/console.h"

#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tui/export/export.h"
#include "tui/console/ui.h"
#include "tui/console/view.h"

#define NS_PER_S         1000000000LL
#define IDLE_WAIT_MS     20 /* longest getch wait: the source is polled at least this often */
#define ESC_KEY          27
#define CTRL_L           12
#define EXPORT_SVG_WIDTH 1600

static volatile sig_atomic_t g_quit_signal;

static void on_signal(int sig)
{
    g_quit_signal = sig;
}

static const char *const theme_cycle[] = {"dark", "light", "mono", "okabe-ito"};

static void layout(pt_ui *ui)
{
    getmaxyx(stdscr, ui->rows, ui->cols);
    pt_view_layout(ui->view, ui, ui->state[ui->view], ui->rows, ui->cols, &ui->layout);
}

/* The iteration times of the header: measured (tui/record/figures.h, of
 * the running generation) and predicted (of the running plan). */
static void header_times(const pt_ui *ui, int level, char *buf, size_t cap)
{
    const pt_ui_figures *f = &ui->fig;
    char m[32] = "-", p[32] = "-";
    if (f->meas.steps > 0)
        snprintf(m, sizeof m, level < 2 ? "%.3f" : "%.2f", f->meas.iter_ms);
    if (f->have_pred)
        snprintf(p, sizeof p, level < 2 ? "%.3f" : "%.2f", f->pred.iter_ms);
    if (!f->running || (f->meas.steps <= 0 && !f->have_pred))
        buf[0] = 0; /* nothing runs: the plan view has the prediction */
    else if (level == 0)
        snprintf(buf, cap, "iter %s ms meas, %s pred", m, p);
    else if (level == 1)
        snprintf(buf, cap, "%s/%s ms", m, p);
    else
        snprintf(buf, cap, "%s/%sms", m, p);
}

/* The run summary of the header at a level of detail: 0 full, higher levels
 * shorten labels and drop the model and the source's words, never the
 * figures (step, loss, throughput, measured / predicted iteration time),
 * nor that the agents are simulated ("simulated", at the shortest "sim"). */
static void header_summary(const pt_ui *ui, int level, char *buf, size_t cap)
{
    char src[PT_SOURCE_DESC_MAX] = "";
    if (ui->paused)
        snprintf(src, sizeof src, "%s", ui->frozen_desc);
    else if (ui->src && ui->src->vt->describe)
        ui->src->vt->describe(ui->src, src, sizeof src);
    int64_t n = pt_store_step_count(ui->store);
    const pt_store_step *st = n ? pt_store_step_at(ui->store, n - 1) : NULL;
    char fig[160] = "", times[64];
    header_times(ui, level, times, sizeof times);
    if (st) {
        char loss[32] = "";
        if (!isnan(st->loss))
            snprintf(loss, sizeof loss, level < 2 ? " loss %.4f" : " L %.3f", st->loss);
        snprintf(fig, sizeof fig, level < 2 ? "step %lld%s %.0f/s%s%s" : "s%lld%s %.0f/s%s%s",
                 (long long)st->step, loss, st->samples_per_s, times[0] ? " " : "", times);
    } else {
        snprintf(fig, sizeof fig, "%s", times);
    }
    const char *paused = ui->paused ? (level < 2 ? "PAUSED | " : "PAUSED ") : "";
    const char *sim = !pt_store_simulated_agents(ui->store) ? ""
                      : level < 2                           ? "simulated | "
                                                            : "sim ";
    const char *model = ui->model_name ? ui->model_name : "";
    if (ui->src && ui->src->vt->describe && level >= 2) {
        /* only the generation survives of the source's words */
        int64_t gen = pt_store_generation(ui->store);
        if (gen > 0)
            snprintf(src, sizeof src, "g%lld", (long long)gen);
        else
            src[0] = 0;
    }
    const char *sep = src[0] && fig[0] ? " | " : "";
    if (level == 0)
        snprintf(buf, cap, "%s%s%s%s%s%s%s", paused, sim, model, model[0] ? " | " : "", src, sep,
                 fig);
    else if (level <= 2)
        snprintf(buf, cap, "%s%s%s%s%s", paused, sim, src, sep, fig);
    else
        snprintf(buf, cap, "%s%s%s", paused, sim, fig);
}

#define HEADER_LEVELS    4
#define HEADER_FULL_TABS 2 /* summary levels tried before the tabs shorten */

static void draw_header(pt_ui *ui)
{
    const pt_rect *r = pt_layout_find(&ui->layout, PT_PANEL_HEADER);
    if (!r)
        return;
    move(r->y, 0);
    attron(ui->attr[PT_THEME_HEADER]);
    hline(' ', r->w);
    attroff(ui->attr[PT_THEME_HEADER]);
    int views = pt_view_count();
    /* the widest tabs and summary that fit together: full tabs first, then
     * only the shown view's tab named, then shorter summaries */
    char right[PT_SOURCE_DESC_MAX + 160];
    int compact = 0, level = 0, tabs_w = 0, len = 0;
    /* full tabs with the full summary or without the model's name, then
     * compact tabs with ever shorter summaries */
    for (int attempt = 0; attempt < HEADER_FULL_TABS + HEADER_LEVELS; attempt++) {
        compact = attempt >= HEADER_FULL_TABS;
        level = compact ? attempt - HEADER_FULL_TABS : attempt;
        tabs_w = 8;
        for (int v = 0; v < views; v++)
            tabs_w += (compact && v != ui->view ? 1 : 2 + (int)strlen(pt_view_at(v)->name)) + 1;
        header_summary(ui, level, right, sizeof right);
        len = (int)strlen(right);
        if (tabs_w + len + 1 <= r->w)
            break;
    }
    int x = 0;
    pt_ui_text(r->y, x, r->w, ui->attr[PT_THEME_HEADER], 0, "pipetop ");
    x += 8;
    for (int v = 0; v < views && x < r->w; v++) {
        const pt_view_class *c = pt_view_at(v);
        char tab[48];
        if (compact && v != ui->view)
            snprintf(tab, sizeof tab, "%c", c->hotkeys[0]);
        else
            snprintf(tab, sizeof tab, "%c %s", c->hotkeys[0], c->name);
        attr_t a = v == ui->view ? ui->attr[PT_THEME_TAB] | A_REVERSE : ui->attr[PT_THEME_DIM];
        pt_ui_text(r->y, x, r->w - x, a, 0, "%s", tab);
        ui->tab_x[v] = x;
        x += (int)strlen(tab) + 1;
        ui->tab_end[v] = x - 1;
    }
    if (x + 2 < r->w) {
        int w = r->w - x - 1;
        int at = len < w ? r->w - len - 1 : x + 1;
        pt_ui_text(r->y, at, r->w - at, ui->attr[PT_THEME_HEADER], 0, "%s", right);
    }
}

/* Lines a message longer than the status row may take, over the bottom of
 * the view for as long as it shows. */
#define STATUS_LINES_MAX 4

/* The status message in full: cut between words into lines of the row's
 * width, the last on the status row and the ones before it above it. */
static void status_wrapped(pt_ui *ui, const pt_rect *r, attr_t attr)
{
    const char *at[STATUS_LINES_MAX];
    int len[STATUS_LINES_MAX], n = 0, w = r->w > 8 ? r->w : 8;
    for (const char *p = ui->status; *p && n < STATUS_LINES_MAX;) {
        int k = (int)strlen(p);
        if (k > w && n < STATUS_LINES_MAX - 1) {
            k = w;
            while (k > w / 2 && p[k] != ' ')
                k--;
            if (p[k] != ' ')
                k = w;
        }
        at[n] = p;
        len[n++] = k;
        p += k;
        while (*p == ' ')
            p++;
    }
    for (int i = 0; i < n; i++) {
        int y = r->y - (n - 1 - i);
        if (y >= 1)
            pt_ui_text(y, 0, r->w, attr, 1, "%.*s", len[i], at[i]);
    }
}

/* What the status row says while the display is paused, when no message
 * of the user's own is up: the pause, for as long as it lasts. */
#define PAUSED_LINE "display paused: every figure is as Z found it; training goes on; Z resumes"

static void draw_status(pt_ui *ui)
{
    const pt_rect *r = pt_layout_find(&ui->layout, PT_PANEL_STATUS);
    if (!r)
        return;
    if (ui->paused && !(ui->status[0] && ui->now_ns - ui->status_ns < PT_UI_STATUS_NS &&
                        strcmp(ui->status, PAUSED_LINE))) {
        pt_ui_text(r->y, 0, r->w, ui->attr[PT_THEME_STATUS], 1, "%s", PAUSED_LINE);
        return;
    }
    const char *note = pt_store_last_note(ui->store);
    /* a message goes when it expires or when the source reports a state
     * change after it (the run restarted, an agent died): the newer wins */
    int fresh_note = note[0] && ui->now_ns - ui->note_ns < PT_UI_NOTE_NS;
    int64_t age = ui->now_ns - ui->status_ns;
    if (ui->status[0] && age < PT_UI_STATUS_NS &&
        (age < PT_UI_STATUS_MIN_NS || !(fresh_note && ui->note_seq > ui->status_note_seq))) {
        status_wrapped(ui, r, ui->attr[ui->status_error ? PT_THEME_ERROR : PT_THEME_STATUS]);
        return;
    }
    if (fresh_note) {
        pt_ui_text(r->y, 0, r->w, ui->attr[PT_THEME_STATUS], 1, "%s", note);
        return;
    }
    /* a replay's own keys come first: they are what its user reaches for */
    const pt_view_class *c = pt_view_at(ui->view);
    int replay = ui->src && !strcmp(ui->src->vt->kind, "replay");
    char all[PT_UI_STATUS_MAX], bar[PT_UI_STATUS_MAX];
    snprintf(all, sizeof all, "%s%s",
             replay ? "replay: space pause  n/N step  ,/. generation  R rewind  e end  " : "",
             c->hints ? c->hints : "? help  q quit");
    pt_ui_text(r->y, 0, r->w, ui->attr[PT_THEME_DIM], 1, "%s",
               pt_ui_fit_hints(all, r->w, bar, sizeof bar));
}

/* Predicts with (profile, topo) from now on: the editor's costs, and so
 * the running plan's prediction; cal_gen the run's calibration they are
 * (-1: the base profile). 0, or the editor's refusal in err. */
static int use_costs(pt_ui *ui, const pt_profile *p, const pt_topology *t, int64_t cal_gen,
                     pt_error *err)
{
    if (!ui->edit || !p || !t)
        return PT_EINVAL;
    int rc = pt_plan_edit_set_costs(ui->edit, p, t, err);
    if (rc == 0) {
        ui->cost_cal_gen = cal_gen;
        ui->cost_seq++;
    }
    return rc;
}

/* A calibration the source put in the store (tui/record/live.h) becomes the plan
 * editor's cost model at once; the status line says so once it is free (a
 * message of the user's own, such as an edit's outcome, is not replaced).
 * *said: the count already announced. Returns the store's calibration count. */
static int take_calibration(pt_ui *ui, int seen, int *said)
{
    const pt_profile *p;
    const pt_topology *t;
    int64_t gen;
    int n = pt_store_calibration(ui->store, &p, &t, &gen);
    if (!ui->edit || !p)
        return n;
    if (n != seen) {
        pt_error err = {0};
        if (use_costs(ui, p, t, gen, &err) < 0) {
            pt_ui_status(ui, 1, "calibration of generation %lld not used: %s", (long long)gen,
                         err.msg);
            *said = n;
        }
    }
    int busy = ui->status[0] && ui->now_ns - ui->status_ns < PT_UI_STATUS_NS;
    if (*said != n && !busy) {
        pt_ui_status(ui, 0,
                     "calibrated on generation %lld: predictions use this run's costs "
                     "(run folder: calibrated-gen-%lld.json)",
                     (long long)gen, (long long)gen);
        *said = n;
    }
    return n;
}

static void draw(pt_ui *ui)
{
    pt_ui_figures_update(ui); /* first: a view's layout may read the running plan */
    layout(ui);
    erase();
    if (ui->rows < PT_LAYOUT_MIN_ROWS || ui->cols < PT_LAYOUT_MIN_COLS) {
        pt_ui_text(0, 0, ui->cols, A_BOLD, 0, "terminal too small: %dx%d, need %dx%d", ui->cols,
                   ui->rows, PT_LAYOUT_MIN_COLS, PT_LAYOUT_MIN_ROWS);
        refresh();
        return;
    }
    draw_header(ui);
    pt_view_at(ui->view)->draw(ui, ui->state[ui->view]);
    draw_status(ui);
    refresh();
}

static void set_view(pt_ui *ui, int v)
{
    if (v == ui->view)
        return;
    ui->prev_view = ui->view;
    ui->view = v;
    ui->dirty = 1;
}

static void next_theme(pt_ui *ui, const char *config_path)
{
    size_t n = sizeof theme_cycle / sizeof theme_cycle[0], k = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(theme_cycle[i], ui->theme.name))
            k = (i + 1) % n;
    pt_error err = {0};
    pt_theme t;
    if (pt_theme_find(theme_cycle[k], &t, &err) < 0) {
        pt_ui_status(ui, 1, "%s", err.msg);
        return;
    }
    ui->theme = t;
    pt_ui_colors_init(ui);
    snprintf(ui->cfg.theme, sizeof ui->cfg.theme, "%s", t.name);
    if (config_path && pt_config_save(config_path, &ui->cfg, &err) < 0)
        pt_ui_status(ui, 1, "theme %s (not saved: %s)", t.name, err.msg);
    else
        pt_ui_status(ui, 0, "theme %s (saved in %s)", t.name, config_path ? config_path : "-");
    clear();
}

/* Exports the timeline shown (trace and SVG files in the current folder) and
 * names them in the status line. */
static void export_shown(pt_ui *ui)
{
    pt_ui_timelines(ui);
    int measured = !pt_tline_is_empty(&ui->tl.meas) && ui->tl.mode != PT_TL_PREDICTED;
    const pt_tline *tl = measured ? &ui->tl.meas : &ui->tl.pred;
    if (tl->count == 0) { /* (a measured one of folded steps only has no ops to export) */
        pt_ui_status(ui, 1,
                     tl->fold_count ? "export: these steps are folded in the record (no ops "
                                      "kept); pipetop export RUN --last N has full detail"
                                    : "export: no timeline to export yet");
        return;
    }
    char base[64], trace[96], svg[96];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(base, sizeof base, "pipetop-%Y%m%d-%H%M%S", &tm);
    snprintf(trace, sizeof trace, "%s.json", base);
    snprintf(svg, sizeof svg, "%s.svg", base);
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    int rc = pt_export_trace(tl, NULL, 0, &text, &len, NULL, &err);
    if (rc == 0)
        rc = pt_export_write(trace, text, len, &err);
    free(text);
    text = NULL;
    if (rc == 0) {
        pt_export_svg_opts o = {.width_px = EXPORT_SVG_WIDTH,
                                .title =
                                    measured ? "pipetop: measured timeline" : "pipetop: predicted"};
        rc = pt_export_svg(tl, NULL, &o, &text, &len, &err); /* slide colours */
        if (rc == 0)
            rc = pt_export_write(svg, text, len, &err);
        free(text);
    }
    if (rc < 0)
        pt_ui_status(ui, 1, "export: %s", err.msg);
    else
        pt_ui_status(ui, 0, "exported the %s timeline to %s and %s",
                     measured ? "measured" : "predicted", trace, svg);
}

/* Z: the views go on reading a copy of the store as it is now, and the
 * header the source's words as they are now, so every figure on the screen
 * stays as it was while the source keeps filling the live store. */
static void toggle_pause(pt_ui *ui)
{
    if (!ui->paused) {
        pt_store *frozen = NULL;
        if (pt_store_clone(ui->live, &frozen) < 0) {
            pt_ui_status(ui, 1, "pause: out of memory");
            return;
        }
        ui->frozen_desc[0] = 0;
        if (ui->src && ui->src->vt->describe)
            ui->src->vt->describe(ui->src, ui->frozen_desc, sizeof ui->frozen_desc);
        ui->store = frozen;
        ui->paused = 1;
        ui->frozen_steps = pt_store_step_count(frozen);
        pt_ui_status(ui, 0, PAUSED_LINE);
        return;
    }
    pt_store_free(&ui->store);
    ui->store = ui->live;
    ui->paused = 0;
    pt_ui_status(ui, 0, "display resumed");
}

/* "x", "F5", "Left": a key as the user pressed it, for messages. */
static const char *key_words(int ch, char *buf, size_t cap)
{
    const char *name = keyname(ch);
    if (ch == ' ')
        snprintf(buf, cap, "space");
    else if (ch > ' ' && ch < 127)
        snprintf(buf, cap, "%c", ch);
    else if (name && !strncmp(name, "KEY_", 4))
        snprintf(buf, cap, "%s", name + 4);
    else
        snprintf(buf, cap, "%s", name ? name : "?");
    return buf;
}

/* A source the user cannot apply plans to (a replay) shows the plan of the
 * generation being played: the plan view, its prediction and the predicted
 * rows follow each plan entry, forwards and after a seek back. */
static void follow_generation(pt_ui *ui)
{
    const pt_plan *plan = pt_store_plan(ui->store);
    int64_t gen = pt_store_generation(ui->store);
    if (!ui->edit || !plan || gen == ui->shown_gen || (ui->src && ui->src->vt->apply))
        return;
    ui->shown_gen = gen;
    pt_error err = {0};
    /* the costs as the live console had them then: the run folder's newest
     * calibration up to this generation (tui/record/figures.h), else the
     * base profile */
    pt_profile *p = NULL;
    pt_topology *t = NULL;
    int64_t cal_gen = -1;
    if (pt_fig_calibration_load(ui->run_dir, gen, plan->layer_count, &p, &t, &cal_gen) < 0 ||
        use_costs(ui, p, t, cal_gen, &err) < 0) {
        if (ui->cost_cal_gen >= 0)
            use_costs(ui, ui->base_profile, ui->base_topology, -1, &err);
    }
    pt_profile_free(&p);
    pt_topology_free(&t);
    if (pt_plan_edit_replace(ui->edit, plan, &err) < 0)
        pt_ui_status(ui, 1, "generation %lld's plan cannot be shown: %s", (long long)gen, err.msg);
}

/* ---- the keys of every view ------------------------------------------------- */

static void k_quit(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    ui->quit = 1;
}

static void k_help(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    set_view(ui, pt_view_find("help"));
}

static void k_next_view(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    set_view(ui, (ui->view + 1) % pt_view_count());
}

static void k_back(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    /* help goes back to where it was opened (the first view when it was
     * opened first) */
    if (ui->view != ui->prev_view)
        set_view(ui, ui->prev_view);
    else if (ui->view == pt_view_find("help"))
        set_view(ui, 0);
}

static void k_export(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    export_shown(ui);
}

static void k_theme(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    next_theme(ui, ui->config_path);
}

static void k_redraw(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    clear();
    ui->dirty = 1;
}

static void k_pause(pt_ui *ui, void *state, int ch)
{
    (void)state, (void)ch;
    toggle_pause(ui);
}

static const pt_view_key global_keys[] = {
    {{0}, "1 2 3 4", "plan, timeline, stats, agents view (each tab shows its key)", NULL, NULL},
    {{KEY_F(1)}, "? 5 F1", "this help", k_help, NULL},
    {{'\t'}, "Tab", "next view", k_next_view, NULL},
    {{ESC_KEY}, "Esc", "back to the previous view (closes help)", k_back, NULL},
    {{'x'}, "x", "export the shown timeline: trace JSON (Perfetto) and SVG", k_export, NULL},
    {{'t'}, "t", "next theme (dark, light, mono, okabe-ito); saved in the config", k_theme, NULL},
    {{CTRL_L, KEY_RESIZE}, "Ctrl-L", "redraw the screen", k_redraw, NULL},
    {{'Z'},
     "Z",
     "pause the display, as htop (training goes on; space too, outside replay)",
     k_pause,
     NULL},
    {{'q', KEY_F(10)}, "q F10", "quit (stops the agents this console started)", k_quit, NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

static void handle_mouse(pt_ui *ui)
{
    MEVENT ev;
    if (getmouse(&ev) != OK)
        return;
    const pt_rect *hdr = pt_layout_find(&ui->layout, PT_PANEL_HEADER);
    if (hdr && ev.y == hdr->y && (ev.bstate & (BUTTON1_PRESSED | BUTTON1_CLICKED))) {
        /* the tabs where draw_header put them (they shorten on narrow screens) */
        for (int v = 0; v < pt_view_count(); v++)
            if (ev.x >= ui->tab_x[v] && ev.x < ui->tab_end[v]) {
                set_view(ui, v);
                break;
            }
        return;
    }
    pt_mouse m = {ev.y, ev.x, (ev.bstate & (BUTTON1_PRESSED | BUTTON1_CLICKED)) != 0,
                  (ev.bstate & (BUTTON1_RELEASED | BUTTON1_CLICKED)) != 0,
                  ev.bstate & BUTTON4_PRESSED ? 1 : (ev.bstate & BUTTON5_PRESSED ? -1 : 0)};
    const pt_view_class *c = pt_view_at(ui->view);
    int edits = 0;
    for (const pt_view_key *k = c->keys; k && k->label && !edits; k++)
        edits = k->edits != NULL;
    if (ui->readonly && edits && (m.pressed || m.released))
        pt_ui_status(ui, 1, "%s: the plan cannot be edited", ui->readonly_why);
    else if (c->mouse)
        c->mouse(ui, ui->state[ui->view], &m);
    ui->dirty = 1;
}

/* The view's hook, then its table (an edit refused under --readonly), then
 * its hot key; 1 when something took ch. */
static int view_key(pt_ui *ui, int ch)
{
    const pt_view_class *c = pt_view_at(ui->view);
    void *st = ui->state[ui->view];
    int hook = c->key ? c->key(ui, st, ch) : 0;
    if (hook > 0)
        return 1;
    const pt_view_key *refused = NULL;
    if (hook == 0 && pt_view_keys_run(c->keys, ui, st, ch, ui->readonly, &refused)) {
        if (refused)
            pt_ui_status(ui, 1, "%s: '%c' would %s; refused", ui->readonly_why, ch, refused->edits);
        return 1;
    }
    int v = pt_view_by_hotkey(ch);
    if (v >= 0) {
        set_view(ui, v);
        return 1;
    }
    return 0;
}

static void handle_key(pt_ui *ui, int ch)
{
    ui->dirty = 1;
    if (ch == KEY_MOUSE) {
        handle_mouse(ui);
        return;
    }
    if (view_key(ui, ch) || pt_view_keys_run(global_keys, ui, NULL, ch, 0, NULL))
        return;
    char msg[PT_UI_STATUS_MAX] = "";
    if (ui->src && ui->src->vt->key && ui->src->vt->key(ui->src, ch, ui->now_ns, msg, sizeof msg)) {
        if (msg[0])
            pt_ui_status(ui, 0, "%s", msg);
        return;
    }
    if (ch == ' ') {
        toggle_pause(ui);
        return;
    }
    char kw[32];
    pt_ui_status(ui, 1, "key %s does nothing in the %s view (? lists the keys)",
                 key_words(ch, kw, sizeof kw), pt_view_at(ui->view)->name);
}

/* Each view's own state, zeroed, then set up by the view. */
static int make_views(pt_ui *ui, pt_error *err)
{
    for (int i = 0; i < pt_view_count(); i++) {
        const pt_view_class *c = pt_view_at(i);
        if (c->state_size && !(ui->state[i] = calloc(1, c->state_size)))
            return pt_error_set(err, PT_ENOMEM, "console: out of memory");
        if (c->init)
            c->init(ui, ui->state[i]);
    }
    return 0;
}

static int setup(pt_ui *ui, const pt_console_opts *o, char *config_path, size_t cap, pt_error *err)
{
    memset(ui, 0, sizeof *ui);
    pt_config_default(&ui->cfg);
    config_path[0] = 0;
    if (o->config_path)
        snprintf(config_path, cap, "%s", o->config_path);
    else if (pt_config_path(config_path, cap, NULL) < 0)
        config_path[0] = 0;
    ui->config_path = config_path[0] ? config_path : NULL;
    if (config_path[0] && pt_config_load(config_path, &ui->cfg, err) < 0)
        return err->code;
    const char *theme = o->theme ? o->theme : ui->cfg.theme;
    int rc = pt_theme_find(theme, &ui->theme, err);
    if (rc < 0)
        return rc;
    if (pt_store_new(0, &ui->store) < 0)
        return pt_error_set(err, PT_ENOMEM, "console: out of memory");
    ui->live = ui->store;
    ui->cost_cal_gen = -1;
    ui->base_profile = o->profile;
    ui->base_topology = o->topology;
    ui->run_dir = o->run_dir;
    if (o->plan && o->profile && o->topology &&
        (rc = pt_plan_edit_new(o->plan, o->profile, o->topology, &ui->edit, err)) < 0)
        return rc;
    ui->src = o->source;
    ui->model_name = o->model_name;
    ui->view = pt_view_find(o->start_view ? o->start_view : "plan");
    if (ui->view < 0)
        return pt_error_set(err, PT_EINVAL, "console: no view named \"%s\"", o->start_view);
    ui->prev_view = ui->view;
    ui->readonly = o->readonly;
    ui->readonly_why = o->readonly_why ? o->readonly_why : "read-only console (--readonly)";
    ui->global_keys = global_keys;
    ui->redraw = draw;
    ui->tl.mode = ui->cfg.timeline_split ? PT_TL_BOTH : PT_TL_MEASURED;
    ui->tl.iters = ui->cfg.timeline_iters;
    ui->shown_gen = -1;
    ui->dirty = 1;
    return make_views(ui, err);
}

static void teardown(pt_ui *ui)
{
    pt_source_close(&ui->src);
    for (int i = 0; i < PT_VIEWS_MAX; i++) {
        const pt_view_class *c = pt_view_at(i);
        if (c && c->fini && ui->state[i])
            c->fini(ui->state[i]);
        free(ui->state[i]);
        ui->state[i] = NULL;
    }
    pt_ui_figures_release(ui);
    pt_plan_edit_free(&ui->edit);
    if (ui->store != ui->live)
        pt_store_free(&ui->store);
    pt_store_free(&ui->live);
    ui->store = NULL;
    pt_tline_release(&ui->tl.meas);
    pt_tline_release(&ui->tl.pred);
    pt_bands_release(&ui->tl.meas_bands);
    pt_bands_release(&ui->tl.pred_bands);
}

int pt_console_has_view(const char *name)
{
    return pt_view_find(name) >= 0;
}

int pt_console_run(const pt_console_opts *o, pt_error *err)
{
    pt_ui ui;
    char config_path[PT_CONFIG_PATH_MAX];
    int rc = setup(&ui, o, config_path, sizeof config_path, err);
    if (rc < 0) {
        ui.src = o->source;
        teardown(&ui);
        return rc;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        teardown(&ui);
        return pt_error_set(err, PT_EUNSUPP,
                            "the console needs a terminal (use --help for the "
                            "headless commands: export, status --json, run)");
    }
    setlocale(LC_ALL, "");
    ui.utf8 = MB_CUR_MAX > 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    g_quit_signal = 0;
    if (!initscr()) {
        teardown(&ui);
        return pt_error_set(err, PT_EIO, "console: cannot start the terminal (TERM=%s)",
                            getenv("TERM") ? getenv("TERM") : "");
    }
    set_escdelay(PT_CONSOLE_ESC_DELAY_MS);
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    curs_set(0);
    if (ui.cfg.mouse && !o->no_mouse) {
        mousemask(BUTTON1_PRESSED | BUTTON1_RELEASED | BUTTON1_CLICKED | BUTTON4_PRESSED |
                      BUTTON5_PRESSED,
                  NULL);
        mouseinterval(0);
    }
    pt_ui_colors_init(&ui);
    int64_t frame_ns =
        NS_PER_S / (ui.cfg.refresh_hz > 0 ? ui.cfg.refresh_hz : PT_CONFIG_REFRESH_DEF);
    int64_t last_draw = 0, start = pt_clock_ns();
    uint64_t seen_store = 0, seen_edit = 0;
    int src_rc = 0, seen_cal = 0, said_cal = 0, keyed = 0;
    while (!ui.quit && !g_quit_signal) {
        ui.now_ns = pt_clock_ns();
        if (o->exit_after_s > 0 && ui.now_ns - start > (int64_t)(o->exit_after_s * NS_PER_S))
            break;
        if (ui.src) {
            src_rc = ui.src->vt->poll(ui.src, ui.live, ui.now_ns, 0);
            if (src_rc < 0) {
                pt_ui_status(&ui, 1, "the data source failed (%s); q quits", pt_strerror(src_rc));
                src_rc = 0;
            }
            follow_generation(&ui);
            seen_cal = take_calibration(&ui, seen_cal, &said_cal);
        }
        if ((pt_store_version(ui.store) != seen_store && !ui.paused) ||
            (ui.edit && pt_plan_edit_version(ui.edit) != seen_edit)) {
            seen_store = pt_store_version(ui.store);
            seen_edit = ui.edit ? pt_plan_edit_version(ui.edit) : 0;
            ui.dirty = 1;
        }
        if (pt_store_note_seq(ui.store) != ui.note_seq) {
            ui.note_seq = pt_store_note_seq(ui.store);
            ui.note_ns = ui.now_ns;
            ui.dirty = 1;
        }
        /* redraw once when a message or a note expires */
        int64_t age = ui.now_ns - ui.status_ns;
        if ((ui.status[0] &&
             ((age >= PT_UI_STATUS_NS && age < PT_UI_STATUS_NS + frame_ns * 2) ||
              (age >= PT_UI_STATUS_MIN_NS && age < PT_UI_STATUS_MIN_NS + frame_ns * 2))) ||
            (ui.note_seq && ui.now_ns - ui.note_ns >= PT_UI_NOTE_NS &&
             ui.now_ns - ui.note_ns < PT_UI_NOTE_NS + frame_ns * 2))
            ui.dirty = 1;
        int64_t wait_ms = IDLE_WAIT_MS;
        if (ui.dirty) {
            /* data redraws at most refresh_hz a second (legible live); a
             * key's answer is drawn at once */
            int64_t due = keyed ? 0 : last_draw + frame_ns - ui.now_ns;
            keyed = 0;
            if (due <= 0) {
                draw(&ui);
                last_draw = ui.now_ns;
                ui.dirty = 0;
            } else if (due / 1000000 < wait_ms) {
                wait_ms = due / 1000000 + 1;
            }
        }
        timeout((int)wait_ms);
        int ch = getch();
        while (ch != ERR && !ui.quit) {
            handle_key(&ui, ch);
            keyed = 1;
            follow_generation(&ui); /* a replay key may have moved to another generation */
            timeout(0);
            ch = getch();
        }
    }
    endwin();
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    teardown(&ui);
    return 0;
}

/* Drawing helpers of the console (see ui.h). */
#include "tui/console/ui.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/schedule.h"
#include "tui/record/tline.h"

#define LINE_MAX_CHARS 1024
/* Text keys drawn bold so they stand out without colour. */
static const int bold_keys[] = {PT_THEME_HEADER, PT_THEME_TAB, PT_THEME_ERROR, PT_THEME_BOUNDARY,
                                PT_THEME_ACCENT};

static int luminance(pt_color c)
{
    return (299 * c.r + 587 * c.g + 114 * c.b) / 1000;
}

void pt_ui_colors_init(pt_ui *ui)
{
    ui->colors = 0;
    if (has_colors() && !pt_theme_is_mono(&ui->theme)) {
        start_color();
        use_default_colors();
        ui->colors = COLORS >= 256 ? 256 : COLORS >= 8 ? 8 : 0;
    }
    /* text on the terminal's own background and foreground unless the theme
     * sets both (then it paints the whole screen in them) */
    int paint = ui->colors && pt_theme_paints_background(&ui->theme) &&
                COLOR_PAIRS >= 2 * PT_THEME_KEY_COUNT + 2;
    short bg = -1, fg = -1;
    if (paint) {
        pt_color b = ui->theme.color[PT_THEME_BACKGROUND], f = ui->theme.color[PT_THEME_FOREGROUND];
        bg = (short)(ui->colors == 256 ? pt_color_to_256(b) : pt_color_to_8(b));
        fg = (short)(ui->colors == 256 ? pt_color_to_256(f) : pt_color_to_8(f));
        init_pair((short)(2 * PT_THEME_KEY_COUNT + 1), fg, bg);
        bkgdset(COLOR_PAIR(2 * PT_THEME_KEY_COUNT + 1) | ' ');
        bkgd(COLOR_PAIR(2 * PT_THEME_KEY_COUNT + 1) | ' ');
    } else {
        bkgdset(' ');
        bkgd(' ');
    }
    for (int k = 0; k < PT_THEME_KEY_COUNT; k++) {
        attr_t bold = 0;
        for (size_t i = 0; i < sizeof bold_keys / sizeof bold_keys[0]; i++)
            if (bold_keys[i] == k)
                bold = A_BOLD;
        pt_color c = ui->theme.color[k];
        if (!ui->colors || !c.set || COLOR_PAIRS < 2 * PT_THEME_KEY_COUNT + 1) {
            /* monochrome: attributes only; blocks in reverse video except
             * bubbles and waits, which stay plain */
            ui->attr[k] = bold | (k == PT_THEME_DIM || k == PT_THEME_BUBBLE ? A_DIM : 0);
            ui->block[k] = k == PT_THEME_BUBBLE || k == PT_THEME_DIM ? A_DIM
                           : k == PT_THEME_BWD                       ? A_REVERSE | A_BOLD
                                                                     : A_REVERSE;
            if (k == PT_THEME_SELECT)
                ui->attr[k] = A_REVERSE;
            continue;
        }
        short col = (short)(ui->colors == 256 ? pt_color_to_256(c) : pt_color_to_8(c));
        short text_on = luminance(c) > 140 ? COLOR_BLACK : COLOR_WHITE;
        /* plain text in the foreground in use: the terminal's (-1) or the theme's */
        int plain = k == PT_THEME_TEXT || k == PT_THEME_HEADER || k == PT_THEME_STATUS;
        init_pair((short)(1 + k), plain ? fg : col, bg);
        init_pair((short)(1 + PT_THEME_KEY_COUNT + k), text_on, col);
        ui->attr[k] = COLOR_PAIR(1 + k) | bold;
        ui->block[k] = COLOR_PAIR(1 + PT_THEME_KEY_COUNT + k);
        if (k == PT_THEME_SELECT)
            ui->attr[k] = A_REVERSE;
    }
}

void pt_ui_status(pt_ui *ui, int error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ui->status, sizeof ui->status, fmt, ap);
    va_end(ap);
    ui->status_error = error;
    ui->status_ns = ui->now_ns;
    ui->status_note_seq = ui->store ? pt_store_note_seq(ui->store) : 0;
    ui->dirty = 1;
}

void pt_ui_text(int y, int x, int w, attr_t attr, int pad, const char *fmt, ...)
{
    if (w <= 0 || y < 0 || x < 0)
        return;
    char line[LINE_MAX_CHARS];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* clip to w display columns: count UTF-8 lead bytes only */
    int cols = 0;
    size_t i = 0;
    for (; line[i]; i++) {
        if (((unsigned char)line[i] & 0xC0) != 0x80) {
            if (cols == w)
                break;
            cols++;
        }
    }
    line[i] = 0;
    attron(attr);
    mvaddstr(y, x, line);
    if (pad)
        for (; cols < w; cols++)
            addch(' ');
    attroff(attr);
}

pt_rect pt_ui_box(pt_ui *ui, const pt_rect *r, const char *title)
{
    pt_rect in = {r->y + 1, r->x + 1, r->h - 2, r->w - 2};
    if (r->h < 2 || r->w < 2) {
        in = *r;
        return in;
    }
    attr_t a = ui->attr[PT_THEME_BORDER];
    attron(a);
    if (ui->utf8) {
        mvadd_wch(r->y, r->x, WACS_ULCORNER);
        mvhline_set(r->y, r->x + 1, WACS_HLINE, r->w - 2);
        mvadd_wch(r->y, r->x + r->w - 1, WACS_URCORNER);
        mvvline_set(r->y + 1, r->x, WACS_VLINE, r->h - 2);
        mvvline_set(r->y + 1, r->x + r->w - 1, WACS_VLINE, r->h - 2);
        mvadd_wch(r->y + r->h - 1, r->x, WACS_LLCORNER);
        mvhline_set(r->y + r->h - 1, r->x + 1, WACS_HLINE, r->w - 2);
        mvadd_wch(r->y + r->h - 1, r->x + r->w - 1, WACS_LRCORNER);
    } else {
        /* plain ASCII: readable on any terminal and in any capture */
        mvaddch(r->y, r->x, '+');
        mvhline(r->y, r->x + 1, '-', r->w - 2);
        mvaddch(r->y, r->x + r->w - 1, '+');
        mvvline(r->y + 1, r->x, '|', r->h - 2);
        mvvline(r->y + 1, r->x + r->w - 1, '|', r->h - 2);
        mvaddch(r->y + r->h - 1, r->x, '+');
        mvhline(r->y + r->h - 1, r->x + 1, '-', r->w - 2);
        mvaddch(r->y + r->h - 1, r->x + r->w - 1, '+');
    }
    attroff(a);
    if (title && r->w > 6)
        pt_ui_text(r->y, r->x + 2, r->w - 4, ui->attr[PT_THEME_HEADER], 0, " %s ", title);
    for (int y = in.y; y < in.y + in.h; y++)
        mvhline(y, in.x, ' ', in.w);
    return in;
}

void pt_ui_bar(pt_ui *ui, int y, int x, int w, double frac, attr_t attr, char c)
{
    if (w <= 0)
        return;
    if (frac < 0)
        frac = 0;
    int over = frac > 1.0;
    if (frac > 1)
        frac = 1;
    int n = (int)(frac * w + 0.5); /* to scale: under half a cell shows none */
    attron(attr);
    for (int i = 0; i < n; i++)
        mvaddch(y, x + i, (chtype)(unsigned char)c);
    attroff(attr);
    attron(ui->attr[PT_THEME_DIM]);
    for (int i = n; i < w; i++)
        mvaddch(y, x + i, '.');
    attroff(ui->attr[PT_THEME_DIM]);
    if (over) {
        attron(ui->attr[PT_THEME_ERROR]);
        mvaddch(y, x + w - 1, '!');
        attroff(ui->attr[PT_THEME_ERROR]);
    }
}

const char *pt_ui_bytes(int64_t bytes, char *buf, int cap)
{
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, (size_t)cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, (size_t)cap, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, (size_t)cap, "%.0f KiB", b / 1024.0);
    return buf;
}

const char *pt_ui_bytes_short(int64_t bytes, char *buf, int cap)
{
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, (size_t)cap, "%.1fG", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, (size_t)cap, "%.1fM", b / (1024.0 * 1024));
    else
        snprintf(buf, (size_t)cap, "%.0fK", b / 1024.0);
    return buf;
}

/* 1 when a and b are the same plan (their encodings agree). */
static int same_plan(const pt_plan *a, const pt_plan *b)
{
    if (a == b)
        return 1;
    if (!a || !b)
        return 0;
    char *x = pt_plan_to_json(a), *y = pt_plan_to_json(b);
    int same = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return same;
}

void pt_ui_figures_release(pt_ui *ui)
{
    pt_sim_free(&ui->fig.sim);
    pt_program_release(&ui->fig.prog);
    memset(&ui->fig, 0, sizeof ui->fig);
}

/* The running plan's prediction with the editor's current costs. */
static void predict_running(pt_ui *ui)
{
    pt_ui_figures *f = &ui->fig;
    pt_sim_free(&f->sim);
    pt_program_release(&f->prog);
    f->have_pred = 0;
    f->pred_seq++;
    if (!f->plan || !ui->edit)
        return;
    const pt_profile *prof = pt_plan_edit_profile(ui->edit);
    if (pt_fig_simulate(f->plan, prof, pt_plan_edit_topology(ui->edit), &f->sim, &f->prog, &f->res,
                        NULL) == 0) {
        pt_fig_pred_from(&f->res, prof, ui->cost_cal_gen, &f->pred);
        f->have_pred = 1;
    } else {
        pt_sim_free(&f->sim);
        pt_program_release(&f->prog);
    }
}

void pt_ui_figures_update(pt_ui *ui)
{
    pt_ui_figures *f = &ui->fig;
    uint64_t sv = pt_store_version(ui->store), ev = ui->edit ? pt_plan_edit_version(ui->edit) : 0;
    const pt_plan *sp = pt_store_plan(ui->store);
    int64_t gen = pt_store_generation(ui->store);
    if (sv != f->store_version || f->sim == NULL)
        pt_fig_measure_store(ui->store, -1, &f->meas);
    int plan_moved = sp != f->store_plan || gen != f->gen || (!sp && ev != f->edit_version);
    if (plan_moved || ui->cost_seq != f->cost_seq || (!f->have_pred && ev != f->edit_version)) {
        f->running = sp != NULL;
        f->plan = sp ? sp : ui->edit ? pt_plan_edit_plan(ui->edit) : NULL;
        predict_running(ui);
    }
    if (plan_moved || ev != f->edit_version)
        f->edited = f->running && ui->edit && !same_plan(pt_plan_edit_plan(ui->edit), sp);
    f->store_version = sv;
    f->edit_version = ev;
    f->cost_seq = ui->cost_seq;
    f->gen = gen;
    f->store_plan = sp;
}

const pt_sim_worker *pt_ui_pred_worker(const pt_ui *ui, int stage, int replica)
{
    const pt_ui_figures *f = &ui->fig;
    if (!f->have_pred)
        return NULL;
    for (int w = 0; w < f->prog.worker_count && w < f->res.worker_count; w++)
        if (f->prog.workers[w].stage == stage && f->prog.workers[w].replica == replica)
            return &f->res.workers[w];
    return NULL;
}

void pt_ui_timelines(pt_ui *ui)
{
    pt_ui_tlines *tl = &ui->tl;
    pt_ui_figures_update(ui);
    /* the predicted timeline is the running plan's: an edit shows in it only
     * when nothing runs (the editor's plan is then the running one) */
    uint64_t pv = ui->fig.pred_seq;
    if (pv != tl->pred_version) {
        pt_tline_clear(&tl->pred);
        if (ui->fig.have_pred)
            pt_tline_from_sim(&tl->pred, &ui->fig.prog, &ui->fig.res);
        pt_bands_build(&tl->pred_bands, &tl->pred, ui->cfg.straggler_pct);
        tl->pred_version = pv;
    }
    uint64_t v = pt_store_version(ui->store) * 131 + (uint64_t)tl->iters;
    if (v == tl->meas_version)
        return;
    int64_t last = pt_store_last_step(ui->store);
    pt_tline_clear(&tl->meas);
    if (last >= 0) {
        /* the newest step may still be arriving: show complete ones when there are */
        int64_t hi = last > 0 ? last - 1 : last;
        pt_store_timeline(ui->store, hi - tl->iters + 1, hi, 1, &tl->meas, NULL);
        if (pt_tline_is_empty(&tl->meas))
            pt_store_timeline(ui->store, last - tl->iters + 1, last, 1, &tl->meas, NULL);
    }
    pt_bands_build(&tl->meas_bands, &tl->meas, ui->cfg.straggler_pct);
    tl->meas_version = v;
}

void pt_ui_redraw(pt_ui *ui)
{
    if (ui->redraw)
        ui->redraw(ui);
}

/* A hint that always stays on the key bar: help and quit. */
static int hint_kept(const char *item, size_t n)
{
    return (n >= 6 && !strncmp(item, "? help", 6)) || (n >= 6 && !strncmp(item, "q quit", 6));
}

const char *pt_ui_fit_hints(const char *hints, int w, char *out, size_t cap)
{
    /* items are separated by two spaces */
    const char *item[PT_UI_HINTS_MAX];
    size_t len[PT_UI_HINTS_MAX];
    int n = 0;
    for (const char *p = hints; *p && n < PT_UI_HINTS_MAX;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *e = strstr(p, "  ");
        size_t k = e ? (size_t)(e - p) : strlen(p);
        item[n] = p;
        len[n++] = k;
        p += k;
    }
    int used = 0;
    for (int i = 0; i < n; i++)
        if (hint_kept(item[i], len[i]))
            used += (int)len[i] + 2;
    char keep[PT_UI_HINTS_MAX] = {0};
    for (int i = 0; i < n; i++)
        if (!hint_kept(item[i], len[i]) && used + (int)len[i] + 2 <= w + 2) {
            keep[i] = 1;
            used += (int)len[i] + 2;
        }
    size_t at = 0;
    out[0] = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (pass == 0 ? !keep[i] : !hint_kept(item[i], len[i]))
                continue;
            int k = snprintf(out + at, cap - at, "%s%.*s", at ? "  " : "", (int)len[i], item[i]);
            if (k < 0 || (size_t)k >= cap - at)
                return out;
            at += (size_t)k;
        }
    return out;
}

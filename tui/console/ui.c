/* Drawing helpers of the console (see ui.h). */
#include "tui/console/ui.h"

#include <stdarg.h>
#include <stdio.h>
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

void pt_ui_timelines(pt_ui *ui)
{
    pt_ui_tlines *tl = &ui->tl;
    if (ui->edit && tl->pred_version != pt_plan_edit_version(ui->edit)) {
        pt_tline_from_sim(&tl->pred, pt_plan_edit_program(ui->edit), pt_plan_edit_result(ui->edit));
        tl->pred_version = pt_plan_edit_version(ui->edit);
    }
    uint64_t v = pt_store_version(ui->store) * 131 + (uint64_t)tl->iters;
    if (v == tl->meas_version || (ui->paused && tl->meas.count > 0))
        return;
    int64_t last = pt_store_last_step(ui->store);
    pt_tline_clear(&tl->meas);
    if (last >= 0) {
        /* the newest step may still be arriving: show complete ones when there are */
        int64_t hi = last > 0 ? last - 1 : last;
        pt_store_timeline(ui->store, hi - tl->iters + 1, hi, 1, &tl->meas, NULL);
        if (tl->meas.count == 0)
            pt_store_timeline(ui->store, last - tl->iters + 1, last, 1, &tl->meas, NULL);
    }
    tl->meas_version = v;
}

void pt_ui_redraw(pt_ui *ui)
{
    if (ui->redraw)
        ui->redraw(ui);
}

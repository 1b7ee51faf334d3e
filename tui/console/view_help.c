/* The help view: every key of the console, everywhere and then view by view,
 * from the tables the console dispatches by (the console's own keys and each
 * view class's), plus the data source's own keys. */
#include <stdio.h>
#include <string.h>

#include "tui/console/ui.h"

#define KEY_COLS 16

/* The view's own state. */
typedef struct help_view {
    int scroll;
} help_view;

/* Lines are replayed into the panel from the scroll position. */
typedef struct lines {
    pt_ui *ui;
    pt_rect in;
    int line, y, from;
} lines;

static void put_line(lines *l, attr_t attr, const char *key, const char *what, int n)
{
    if (l->line >= l->from && l->y < l->in.y + l->in.h)
        pt_ui_text(l->y++, l->in.x, l->in.w, attr, 1, "  %-*s %.*s", KEY_COLS, key, n, what);
    l->line++;
}

/* A key's line; a description wider than the panel goes on under itself,
 * cut between words, so no help line is ever cut off. */
static void emit(lines *l, attr_t attr, const char *key, const char *what)
{
    if (!key) {
        if (l->line >= l->from && l->y < l->in.y + l->in.h)
            pt_ui_text(l->y++, l->in.x, l->in.w, attr, 1, "%s", what);
        l->line++;
        return;
    }
    int room = l->in.w - (KEY_COLS + 3);
    if (room < 8)
        room = 8;
    while ((int)strlen(what) > room) {
        int cut = room;
        while (cut > room / 2 && what[cut] != ' ')
            cut--;
        if (what[cut] != ' ')
            cut = room;
        put_line(l, attr, key, what, cut);
        key = "";
        what += cut;
        while (*what == ' ')
            what++;
    }
    put_line(l, attr, key, what, (int)strlen(what));
}

static void section(lines *l, const char *title, const pt_view_key *keys)
{
    pt_ui *ui = l->ui;
    emit(l, ui->attr[PT_THEME_ACCENT], NULL, title);
    for (const pt_view_key *k = keys; k && k->label; k++)
        emit(l, ui->attr[PT_THEME_TEXT], k->label, k->what);
    emit(l, 0, NULL, "");
}

static void draw(pt_ui *ui, void *state)
{
    help_view *v = state;
    const pt_rect *r = pt_layout_find(&ui->layout, 0);
    if (!r)
        return;
    lines l = {ui, pt_ui_box(ui, r, "keys"), 0, 0, v->scroll};
    l.y = l.in.y;
    section(&l, "everywhere", ui->global_keys);
    char title[64];
    for (int i = 0; i < pt_view_count(); i++) {
        const pt_view_class *c = pt_view_at(i);
        snprintf(title, sizeof title, "%s view (%c)", c->name, c->hotkeys[0]);
        section(&l, title, c->keys);
    }
    if (ui->src && ui->src->vt->keys && ui->src->vt->keys[0][0]) { /* no heading without keys */
        snprintf(title, sizeof title, "%s (this console's data source)", ui->src->vt->kind);
        emit(&l, ui->attr[PT_THEME_ACCENT], NULL, title);
        for (const char *const(*k)[2] = ui->src->vt->keys; (*k)[0]; k++)
            emit(&l, ui->attr[PT_THEME_TEXT], (*k)[0], (*k)[1]);
    }
    if (v->scroll > 0 && l.line - v->scroll < l.in.h)
        v->scroll = l.line - l.in.h > 0 ? l.line - l.in.h : 0;
    /* more below: said on the bottom border, as the views' lists do */
    int below = l.line - v->scroll - l.in.h;
    if (below > 0 && r->w > 24)
        pt_ui_text(r->y + r->h - 1, r->x + r->w - 22, 20, ui->attr[PT_THEME_DIM], 0,
                   " v %d more (Down) ", below);
}

static void k_scroll(pt_ui *ui, void *state, int ch)
{
    (void)ui;
    help_view *v = state;
    if (ch == KEY_DOWN)
        v->scroll++;
    else if (v->scroll > 0)
        v->scroll--;
}

static const pt_view_key keys[] = {
    {{KEY_UP, KEY_DOWN}, "Up Down", "scroll this help", k_scroll, NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

const pt_view_class pt_view_help = {
    .name = "help",
    .hotkeys = "?5",
    .hints = "Esc back  q quit",
    .keys = keys,
    .state_size = sizeof(help_view),
    .draw = draw,
};

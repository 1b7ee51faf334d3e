/* The help view: every key of the console, by view, from the one table the
 * console dispatches by (pt_ui_keys), plus the data source's own keys. */
#include <stdio.h>
#include <string.h>

#include "tui/console/ui.h"

#define KEY_COLS 16

static const char *const section[PT_VIEW_COUNT + 1] = {"plan view (1)",  "timeline view (2)",
                                                       "stats view (3)", "agents view (4)",
                                                       "help (?)",       "everywhere"};

void pt_view_help_draw(pt_ui *ui)
{
    const pt_rect *r = pt_layout_find(&ui->layout, PT_PANEL_HELP);
    if (!r)
        return;
    pt_rect in = pt_ui_box(ui, r, "keys");
    /* lines: a section title, its keys, a blank line; replayed into the panel
     * from help_scroll */
    int line = 0, y = in.y;
    static const int order[] = {PT_VIEW_COUNT, PT_VIEW_PLAN,   PT_VIEW_TIMELINE,
                                PT_VIEW_STATS, PT_VIEW_AGENTS, PT_VIEW_HELP};
#define EMIT(attr, ...)                                                                            \
    do {                                                                                           \
        if (line >= ui->help_scroll && y < in.y + in.h)                                            \
            pt_ui_text(y++, in.x, in.w, attr, 1, __VA_ARGS__);                                     \
        line++;                                                                                    \
    } while (0)
    for (size_t o = 0; o < sizeof order / sizeof order[0]; o++) {
        EMIT(ui->attr[PT_THEME_ACCENT], "%s", section[order[o]]);
        for (const pt_ui_key *k = pt_ui_keys; k->key; k++)
            if (k->view == order[o])
                EMIT(ui->attr[PT_THEME_TEXT], "  %-*s %s", KEY_COLS, k->key, k->what);
        EMIT(0, "%s", "");
    }
    if (ui->src && ui->src->vt->keys && ui->src->vt->keys[0][0]) { /* no heading without keys */
        EMIT(ui->attr[PT_THEME_ACCENT], "%s (this console's data source)", ui->src->vt->kind);
        for (const char *const(*k)[2] = ui->src->vt->keys; (*k)[0]; k++)
            EMIT(ui->attr[PT_THEME_TEXT], "  %-*s %s", KEY_COLS, (*k)[0], (*k)[1]);
    }
#undef EMIT
    if (ui->help_scroll > 0 && line - ui->help_scroll < in.h)
        ui->help_scroll = line - in.h > 0 ? line - in.h : 0;
}

int pt_view_help_key(pt_ui *ui, int ch)
{
    if (ch == KEY_UP) {
        if (ui->help_scroll > 0)
            ui->help_scroll--;
        return 1;
    }
    if (ch == KEY_DOWN) {
        ui->help_scroll++;
        return 1;
    }
    return 0;
}

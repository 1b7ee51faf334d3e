/* The agents view: one row per agent with host, device, stage replica,
 * state, heartbeat age, telemetry dropped and the last error. */
#include <stdio.h>
#include <string.h>

#include "tui/ui.h"

#define NS_PER_MS 1000000LL

static pt_theme_key state_key(const char *state)
{
    if (!strcmp(state, "running") || !strcmp(state, "idle") || !strcmp(state, "assigned"))
        return PT_THEME_OK;
    if (!strcmp(state, "dead") || !strcmp(state, "failed"))
        return PT_THEME_ERROR;
    if (!strcmp(state, "gone") || !strcmp(state, "stopped"))
        return PT_THEME_DIM;
    return PT_THEME_TEXT;
}

void pt_view_agents_draw(pt_ui *ui)
{
    const pt_rect *r = pt_layout_find(&ui->layout, PT_PANEL_AGENTS);
    if (!r)
        return;
    int n = pt_store_agent_count(ui->store);
    char title[64];
    snprintf(title, sizeof title, "agents: %d", n);
    pt_rect in = pt_ui_box(ui, r, title);
    if (n == 0) {
        pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "no agents (%s)",
                   ui->src ? ui->src->vt->kind : "simulation");
        return;
    }
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_HEADER], 1,
               "%-10s %-12s %-8s %-6s %-10s %9s %7s %6s  %s", "agent", "host", "device", "stage",
               "state", "heartbeat", "dropped", "step", "last error");
    int rows = in.h - 1;
    if (ui->ag_scroll > n - rows)
        ui->ag_scroll = n - rows > 0 ? n - rows : 0;
    for (int k = 0; k < rows && ui->ag_scroll + k < n; k++) {
        const pt_store_agent *a = pt_store_agent_at(ui->store, ui->ag_scroll + k);
        char stage[16] = "-", hb[32] = "-", step[24] = "-";
        if (a->stage >= 0)
            snprintf(stage, sizeof stage, "s%dr%d", a->stage, a->replica);
        int64_t age = a->hb_age_ms;
        if (age < 0 && a->last_heard_ns >= 0)
            age = (pt_store_now(ui->store) - a->last_heard_ns) / NS_PER_MS;
        if (age >= 0)
            snprintf(hb, sizeof hb, "%lld ms", (long long)age);
        if (a->step >= 0)
            snprintf(step, sizeof step, "%lld", (long long)a->step);
        int y = in.y + 1 + k;
        pt_ui_text(y, in.x, in.w, ui->attr[PT_THEME_TEXT], 1,
                   "%-10.10s %-12.12s %-8.8s %-6s %-10s %9s %7llu %6s  %s", a->id, a->host,
                   a->device, stage, "", hb, (unsigned long long)a->dropped, step, a->last_error);
        pt_ui_text(y, in.x + 10 + 1 + 12 + 1 + 8 + 1 + 6 + 1, 10, ui->attr[state_key(a->state)], 0,
                   "%-10.10s", a->state);
    }
}

int pt_view_agents_key(pt_ui *ui, int ch)
{
    if (ch == KEY_UP) {
        if (ui->ag_scroll > 0)
            ui->ag_scroll--;
        return 1;
    }
    if (ch == KEY_DOWN) {
        ui->ag_scroll++;
        return 1;
    }
    return 0;
}

/* The agents view: one row per agent with its process (pid, CPU %, RSS read
 * from /proc when it runs on this machine), host, device, stage replica,
 * state, heartbeat age, telemetry dropped, the device's free/total memory
 * (a GPU's from the driver) and the last error; a filter and a
 * sort key, as in htop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tui/console/ui.h"

#define NS_PER_MS      1000000LL
#define PROC_SAMPLE_NS 1000000000LL /* CPU % is measured over about a second */
/* column of the state field in a row (after agent, pid, cpu%, rss, host, device, stage) */
#define STATE_COL (10 + 1 + 7 + 1 + 5 + 1 + 7 + 1 + 12 + 1 + 16 + 1 + 6 + 1)

#define AGENTS_MAX 256 /* agents whose process figures the view keeps */

/* Its sample of one agent's process (local agents only). */
typedef struct proc_sample_t {
    int64_t pid;
    long long ticks; /* CPU time at the last sample, clock ticks */
    long long rss;   /* bytes, -1 unknown */
    double cpu_pct;  /* over the last interval, -1 unknown */
    int64_t sampled_ns;
} proc_sample_t;

enum { SORT_ID, SORT_STAGE, SORT_CPU, SORT_RSS, SORT_STATE, SORT_COUNT };

/* The view's own state. */
typedef struct agents_view {
    int scroll;
    int sort;        /* SORT_* */
    char filter[48]; /* substring of id, host, device or state; "" all */
    int filter_edit; /* typing the filter */
    proc_sample_t proc[AGENTS_MAX];
} agents_view;

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

/* CPU time (clock ticks) and resident set of a local process from /proc;
 * 0 when read, -1 when the process is not on this machine or gone. */
static int proc_sample(int64_t pid, long long *ticks, long long *rss_bytes)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    long long rss_pages = 0;
    /* after ") ": state(3) ... utime(14) stime(15) ... rss(24) */
    if (sscanf(p + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
               "%*d %*u %*u %lld",
               &ut, &st, &rss_pages) != 3)
        return -1;
    *ticks = (long long)(ut + st);
    *rss_bytes = rss_pages * sysconf(_SC_PAGESIZE);
    return 0;
}

/* Updates the CPU % and RSS of agent slot i (pid), at most once a second. */
static void proc_update(const pt_ui *ui, agents_view *v, int i, int64_t pid)
{
    if (i >= AGENTS_MAX)
        return;
    proc_sample_t *pr = &v->proc[i];
    if (pr->pid != pid) {
        memset(pr, 0, sizeof *pr);
        pr->pid = pid;
        pr->cpu_pct = -1;
        pr->rss = -1;
    }
    if (pr->sampled_ns && ui->now_ns - pr->sampled_ns < PROC_SAMPLE_NS)
        return;
    long long ticks, rss;
    if (pid <= 0 || proc_sample(pid, &ticks, &rss) < 0) {
        pr->cpu_pct = -1;
        pr->rss = -1;
        pr->sampled_ns = ui->now_ns;
        return;
    }
    if (pr->sampled_ns) {
        double secs = (double)(ui->now_ns - pr->sampled_ns) / 1e9;
        double hz = (double)sysconf(_SC_CLK_TCK);
        if (secs > 0 && hz > 0)
            pr->cpu_pct = 100.0 * (double)(ticks - pr->ticks) / hz / secs;
    }
    pr->ticks = ticks;
    pr->rss = rss;
    pr->sampled_ns = ui->now_ns;
}

static const char *const sort_names[SORT_COUNT] = {"agent", "stage", "cpu", "rss", "state"};

static int matches(const agents_view *v, const pt_store_agent *a)
{
    const char *f = v->filter;
    return !f[0] || strstr(a->id, f) || strstr(a->host, f) || strstr(a->device, f) ||
           strstr(a->state, f);
}

/* qsort has no user pointer */
static const pt_ui *g_sort_ui;
static const agents_view *g_sort_view;

static int by_key(const void *pa, const void *pb)
{
    int ia = *(const int *)pa, ib = *(const int *)pb;
    const pt_ui *ui = g_sort_ui;
    const agents_view *v = g_sort_view;
    const pt_store_agent *a = pt_store_agent_at(ui->store, ia),
                         *b = pt_store_agent_at(ui->store, ib);
    double d = 0;
    switch (v->sort) {
    case SORT_STAGE:
        d = a->stage != b->stage ? a->stage - b->stage : a->replica - b->replica;
        break;
    case SORT_CPU: /* busiest first, like top */
        d = (ia < AGENTS_MAX && ib < AGENTS_MAX) ? v->proc[ib].cpu_pct - v->proc[ia].cpu_pct : 0;
        break;
    case SORT_RSS:
        d = (ia < AGENTS_MAX && ib < AGENTS_MAX) ? (double)(v->proc[ib].rss - v->proc[ia].rss) : 0;
        break;
    case SORT_STATE:
        d = strcmp(a->state, b->state);
        break;
    default:
        break;
    }
    if (d == 0)
        d = strcmp(a->id, b->id);
    return d < 0 ? -1 : d > 0;
}

static void draw(pt_ui *ui, void *state)
{
    agents_view *v = state;
    const pt_rect *r = pt_layout_find(&ui->layout, 0);
    if (!r)
        return;
    int n = pt_store_agent_count(ui->store);
    int order[AGENTS_MAX];
    int shown = 0;
    for (int i = 0; i < n && i < AGENTS_MAX; i++) {
        const pt_store_agent *a = pt_store_agent_at(ui->store, i);
        proc_update(ui, v, i, a->pid);
        if (matches(v, a))
            order[shown++] = i;
    }
    g_sort_ui = ui;
    g_sort_view = v;
    qsort(order, (size_t)shown, sizeof order[0], by_key);
    char title[160];
    snprintf(title, sizeof title, "agents: %d%s%s%s, sorted by %s", n,
             v->filter[0] || v->filter_edit ? ", filter \"" : "", v->filter,
             v->filter[0] || v->filter_edit ? (v->filter_edit ? "_\"" : "\"") : "",
             sort_names[v->sort]);
    pt_rect in = pt_ui_box(ui, r, title);
    if (n == 0) {
        pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "no agents (%s)",
                   ui->src ? ui->src->vt->kind : "simulation");
        return;
    }
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_HEADER], 1,
               "%-10s %7s %5s %7s %-12s %-16s %-6s %-10s %9s %7s %6s %13s  %s", "agent", "pid",
               "cpu%", "rss", "host", "device", "stage", "state", "heartbeat", "dropped", "step",
               "free/memory", "last error");
    int rows = in.h - 1;
    if (v->scroll > shown - rows)
        v->scroll = shown - rows > 0 ? shown - rows : 0;
    for (int k = 0; k < rows && v->scroll + k < shown; k++) {
        int idx = order[v->scroll + k];
        const pt_store_agent *a = pt_store_agent_at(ui->store, idx);
        const proc_sample_t *pr = &v->proc[idx];
        char stage[16] = "-", hb[32] = "-", step[24] = "-", pid[24] = "-", cpu[16] = "-",
             rss[24] = "-", dev[PT_MSG_NAME_MAX + 16], mem[40] = "-";
        if (a->stage >= 0)
            snprintf(stage, sizeof stage, "s%dr%d", a->stage, a->replica);
        int64_t age = a->hb_age_ms;
        if (age < 0 && a->last_heard_ns >= 0)
            age = (pt_store_now(ui->store) - a->last_heard_ns) / NS_PER_MS;
        if (age >= 0)
            snprintf(hb, sizeof hb, "%lld ms", (long long)age);
        if (a->step >= 0)
            snprintf(step, sizeof step, "%lld", (long long)a->step);
        if (a->pid > 0)
            snprintf(pid, sizeof pid, "%lld", (long long)a->pid);
        if (pr->cpu_pct >= 0)
            snprintf(cpu, sizeof cpu, "%.0f", pr->cpu_pct);
        if (pr->rss >= 0)
            pt_ui_bytes_short(pr->rss, rss, sizeof rss);
        snprintf(dev, sizeof dev, "%s:%d", a->device[0] ? a->device : "?", a->device_index);
        if (a->mem_total > 0) {
            char fr[16] = "?", tot[16];
            if (a->mem_free >= 0)
                pt_ui_bytes_short(a->mem_free, fr, sizeof fr);
            pt_ui_bytes_short(a->mem_total, tot, sizeof tot);
            snprintf(mem, sizeof mem, "%s/%s", fr, tot);
        }
        int y = in.y + 1 + k;
        pt_ui_text(y, in.x, in.w, ui->attr[PT_THEME_TEXT], 1,
                   "%-10.10s %7s %5s %7s %-12.12s %-16.16s %-6s %-10s %9s %7llu %6s %13s  %s",
                   a->id, pid, cpu, rss, a->host, dev, stage, "", hb,
                   (unsigned long long)a->dropped, step, mem, a->last_error);
        pt_ui_text(y, in.x + STATE_COL, 10, ui->attr[state_key(a->state)], 0, "%-10.10s", a->state);
    }
    if (shown == 0)
        pt_ui_text(in.y + 1, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "no agent matches \"%s\"",
                   v->filter);
}

/* While the filter is typed, every key is the filter's. */
static int key(pt_ui *ui, void *state, int ch)
{
    (void)ui;
    agents_view *v = state;
    if (!v->filter_edit)
        return 0;
    size_t len = strlen(v->filter);
    if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        v->filter_edit = 0;
    } else if (ch == 27) {
        v->filter_edit = 0;
        v->filter[0] = 0;
    } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        if (len)
            v->filter[len - 1] = 0;
    } else if (ch >= ' ' && ch < 127 && len + 1 < sizeof v->filter) {
        v->filter[len] = (char)ch;
        v->filter[len + 1] = 0;
    } else {
        return -1;
    }
    v->scroll = 0;
    return 1;
}

static void k_scroll(pt_ui *ui, void *state, int ch)
{
    (void)ui;
    agents_view *v = state;
    if (ch == KEY_DOWN)
        v->scroll++;
    else if (v->scroll > 0)
        v->scroll--;
}

static void k_filter(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    ((agents_view *)state)->filter_edit = 1;
    pt_ui_status(ui, 0,
                 "filter agents: type text (id, host, device, state), Enter keeps it, Esc clears "
                 "it");
}

static void k_sort(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    agents_view *v = state;
    v->sort = (v->sort + 1) % SORT_COUNT;
    pt_ui_status(ui, 0, "agents sorted by %s", sort_names[v->sort]);
}

static const pt_view_key keys[] = {
    {{KEY_UP, KEY_DOWN}, "Up Down", "scroll the agent table", k_scroll, NULL},
    {{'/', KEY_F(4)},
     "/ F4",
     "filter: type text (id, host, device, state); Enter keeps, Esc clears",
     k_filter,
     NULL},
    {{'s', KEY_F(6)}, "s F6", "next sort key: agent, stage, cpu, rss, state", k_sort, NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

const pt_view_class pt_view_agents = {
    .name = "agents",
    .hotkeys = "4",
    .hints = "Up/Down scroll  1-4 views  ? help  q quit",
    .keys = keys,
    .state_size = sizeof(agents_view),
    .draw = draw,
    .key = key,
};

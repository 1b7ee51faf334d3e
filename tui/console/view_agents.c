/* The agents view: one row per agent with its process (pid, CPU %, RSS read
 * from /proc when it runs on this machine), host, device, stage replica,
 * state, heartbeat age, telemetry dropped, step, its compute time per
 * iteration against its stage's median (tui/record/bands.h; a straggler
 * marked "!"), the device's free/total memory (a GPU's from the driver) and
 * the last error; a filter (on every column that names something, or the
 * stragglers only) and a sort key, as in htop. Columns shrink, then drop, to
 * fit the screen (AGENT_COLS). A frame costs the filter's test of every
 * agent, a sort and the shown rows: 1,024 agents stay fluid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tui/console/ui.h"

#define NS_PER_MS      1000000LL
#define PROC_SAMPLE_NS 1000000000LL /* CPU % is measured over about a second */
#define PAGE_CHROME    5 /* screen rows that are not agent rows (header, frame, heading, status) */

/* The table's columns: X(id, heading, short heading, width, narrowest,
 * right-aligned, drop rank). A narrow screen first shrinks columns toward their narrowest
 * (a cut cell ends with '~'), then drops the ones of the lowest drop rank
 * (the title says how many are hidden); last error takes what is left. */
#define AGENT_COLS(X)                                                                              \
    X(COL_AGENT, "agent", "agent", 10, 6, 0, 9)                                                    \
    X(COL_PID, "pid", "pid", 7, 5, 1, 3)                                                           \
    X(COL_CPU, "cpu%", "cpu%", 5, 4, 1, 4)                                                         \
    X(COL_RSS, "rss", "rss", 7, 5, 1, 2)                                                           \
    X(COL_HOST, "host", "host", 12, 4, 0, 5)                                                       \
    X(COL_DEVICE, "device", "dev", 16, 5, 0, 7)                                                    \
    X(COL_STAGE, "stage", "stg", 6, 4, 0, 8)                                                       \
    X(COL_STATE, "state", "state", 10, 8, 0, 9)                                                    \
    X(COL_HB, "heartbeat", "hb", 9, 7, 1, 6)                                                       \
    X(COL_DROPPED, "dropped", "drop", 7, 4, 1, 1)                                                  \
    X(COL_STEP, "step", "step", 6, 4, 1, 6)                                                        \
    X(COL_COMPUTE, "compute/it", "comp", 11, 11, 1, 5)                                             \
    X(COL_MEM, "free/memory", "free/memory", 13, 11, 1, 5)                                         \
    X(COL_ERROR, "last error", "error", 0, 10, 0, 0)

#define COL_ENUM_(id, head, brief, w, min, right, rank) id,
enum { AGENT_COLS(COL_ENUM_) COL_COUNT };
#undef COL_ENUM_

typedef struct agent_col {
    const char *head, *brief; /* brief: when head is wider than the column */
    int w, min, right, rank;
} agent_col;

#define COL_ROW_(id, head, brief, w, min, right, rank) {head, brief, w, min, right, rank},
static const agent_col cols[COL_COUNT] = {AGENT_COLS(COL_ROW_)};
#undef COL_ROW_

#define CELL_MAX 520 /* the longest: last error (PT_MSG_TEXT_MAX) */

#define PROCS_MAX 256 /* agents whose process figures the view keeps (local ones) */

/* Its sample of one agent's process (local agents only). */
typedef struct proc_sample_t {
    int64_t pid;
    long long ticks; /* CPU time at the last sample, clock ticks */
    long long rss;   /* bytes, -1 unknown */
    double cpu_pct;  /* over the last interval, -1 unknown */
    int64_t sampled_ns;
} proc_sample_t;

enum { SORT_ID, SORT_STAGE, SORT_STEP, SORT_COMPUTE, SORT_CPU, SORT_RSS, SORT_STATE, SORT_COUNT };

/* The view's own state. */
typedef struct agents_view {
    int scroll;
    int sort;        /* SORT_* */
    char filter[48]; /* substring of id, host, device or state; "" all */
    int filter_edit; /* typing the filter */
    int stragglers;  /* 1: only the stragglers */
    proc_sample_t proc[PROCS_MAX];
    int *order; /* the shown agents' indexes, sorted (owned) */
    int order_cap;
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
    if (i >= PROCS_MAX)
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

static const char *const sort_names[SORT_COUNT] = {"agent", "stage", "step", "compute",
                                                   "cpu",   "rss",   "state"};

/* The agent's compute figure of the measured timeline's bands (bands.h):
 * its row's, or in steps a record folded over its stage's replicas, the
 * band's max when it is the replica the record named as the slowest (the
 * others' own figures were not kept). 1 with *fig (s per iteration), *slower
 * (over the stage's median) and *strag; 0 when it has none (not assigned,
 * no events in the shown iterations, a folded stage's other replicas). */
static int agent_figure(const pt_ui *ui, const pt_store_agent *a, double *fig, double *slower,
                        int *strag)
{
    const pt_bands *b = &ui->tl.meas_bands;
    if (a->stage < 0)
        return 0;
    int row = pt_bands_find(b, a->stage, a->replica);
    if (row >= 0) {
        *fig = b->figure[row];
        *slower = b->slower[row];
        *strag = b->straggler[row];
        return 1;
    }
    row = pt_bands_find(b, a->stage, PT_TL_ALL_REPLICAS);
    const pt_band_stage *st = row >= 0 ? &b->stages[b->stage_of[row]] : NULL;
    if (!st || !st->folded || st->folded_straggler != a->replica)
        return 0;
    *fig = st->max_s;
    *slower = b->slower[row];
    *strag = b->straggler[row];
    return 1;
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
        d = (ia < PROCS_MAX && ib < PROCS_MAX) ? v->proc[ib].cpu_pct - v->proc[ia].cpu_pct : 0;
        break;
    case SORT_RSS:
        d = (ia < PROCS_MAX && ib < PROCS_MAX) ? (double)(v->proc[ib].rss - v->proc[ia].rss) : 0;
        break;
    case SORT_STATE:
        d = strcmp(a->state, b->state);
        break;
    case SORT_STEP: /* furthest first */
        d = (double)(b->step - a->step);
        break;
    case SORT_COMPUTE: {            /* slowest first; agents without a figure last */
        double fa = -1, fb = -1, s; /* agent_figure leaves them when it has none */
        int k;
        agent_figure(ui, a, &fa, &s, &k);
        agent_figure(ui, b, &fb, &s, &k);
        d = fb - fa;
        break;
    }
    default:
        break;
    }
    if (d == 0)
        d = strcmp(a->id, b->id);
    return d < 0 ? -1 : d > 0;
}

/* The cells of agent idx's row, as shown (full text; fit cuts them). */
static void row_cells(const pt_ui *ui, const agents_view *v, int idx, char cell[][CELL_MAX])
{
    const pt_store_agent *a = pt_store_agent_at(ui->store, idx);
    for (int c = 0; c < COL_COUNT; c++)
        snprintf(cell[c], CELL_MAX, "-");
    snprintf(cell[COL_AGENT], CELL_MAX, "%s", a->id);
    snprintf(cell[COL_HOST], CELL_MAX, "%s", a->host);
    snprintf(cell[COL_DEVICE], CELL_MAX, "%s:%d", a->device[0] ? a->device : "?", a->device_index);
    if (a->stage >= 0)
        snprintf(cell[COL_STAGE], CELL_MAX, "s%dr%d", a->stage, a->replica);
    snprintf(cell[COL_STATE], CELL_MAX, "%s", a->state);
    int64_t age = a->hb_age_ms;
    if (age < 0 && a->last_heard_ns >= 0)
        age = (pt_store_now(ui->store) - a->last_heard_ns) / NS_PER_MS;
    if (age >= 0)
        snprintf(cell[COL_HB], CELL_MAX, "%lld ms", (long long)age);
    snprintf(cell[COL_DROPPED], CELL_MAX, "%llu", (unsigned long long)a->dropped);
    if (a->step >= 0)
        snprintf(cell[COL_STEP], CELL_MAX, "%lld", (long long)a->step);
    if (a->pid > 0)
        snprintf(cell[COL_PID], CELL_MAX, "%lld", (long long)a->pid);
    const proc_sample_t *pr = idx < PROCS_MAX ? &v->proc[idx] : NULL;
    if (pr && pr->cpu_pct >= 0)
        snprintf(cell[COL_CPU], CELL_MAX, "%.0f", pr->cpu_pct);
    if (pr && pr->rss >= 0)
        pt_ui_bytes_short(pr->rss, cell[COL_RSS], CELL_MAX);
    if (a->mem_total > 0) { /* free unknown (a CPU): "?" */
        char fr[16] = "?", tot[16];
        if (a->mem_free >= 0)
            pt_ui_bytes_short(a->mem_free, fr, sizeof fr);
        pt_ui_bytes_short(a->mem_total, tot, sizeof tot);
        snprintf(cell[COL_MEM], CELL_MAX, "%s/%s", fr, tot);
    }
    snprintf(cell[COL_ERROR], CELL_MAX, "%s", a->last_error);
    double fig, slower;
    int strag;
    if (agent_figure(ui, a, &fig, &slower, &strag)) {
        double pct = slower * 100.0;
        snprintf(cell[COL_COMPUTE], CELL_MAX, "%s%.2f %+.0f%%", strag ? "!" : "", fig * 1e3,
                 pct > -0.5 && pct < 0.5 ? 0.0 : pct); /* no "-0%" */
        if (strag)                                     /* the mark shows without colour too */
            snprintf(cell[COL_AGENT], CELL_MAX, "!%s", a->id);
    }
}

/* 1 when agent idx is a straggler of the measured timeline. */
static int straggler(const pt_ui *ui, int idx)
{
    double fig, slower;
    int strag = 0;
    return agent_figure(ui, pt_store_agent_at(ui->store, idx), &fig, &slower, &strag) && strag;
}

/* The filter looks at every column that names something: agent, host,
 * device, stage and state, as the row shows them ("cpu:1", "s2r0"); with
 * stragglers set, only stragglers pass. */
static int matches(const pt_ui *ui, const agents_view *v, int idx)
{
    if (v->stragglers && !straggler(ui, idx))
        return 0;
    if (!v->filter[0])
        return 1;
    const pt_store_agent *a = pt_store_agent_at(ui->store, idx);
    char dev[PT_MSG_NAME_MAX + 16], stage[32] = "-";
    snprintf(dev, sizeof dev, "%s:%d", a->device[0] ? a->device : "?", a->device_index);
    if (a->stage >= 0)
        snprintf(stage, sizeof stage, "s%dr%d", a->stage, a->replica);
    return strstr(a->id, v->filter) || strstr(a->host, v->filter) || strstr(dev, v->filter) ||
           strstr(stage, v->filter) || strstr(a->state, v->filter);
}

/* Room the shown columns take at these widths: one space between columns. */
static int cols_room(const int width[COL_COUNT])
{
    int room = -1;
    for (int c = 0; c < COL_COUNT; c++)
        if (width[c] > 0)
            room += width[c] + 1;
    return room;
}

/* Widths (0: hidden) for w columns of room; returns how many are hidden.
 * Last error is sized at its narrowest here and gets the rest after.
 * Without replicas (one per stage) there is no median to compare with: the
 * compute column is left out, not counted as hidden. */
static int fit_cols(int w, int replicated, int width[COL_COUNT])
{
    for (int c = 0; c < COL_COUNT; c++)
        width[c] = c == COL_ERROR ? cols[c].min : cols[c].w;
    if (!replicated)
        width[COL_COMPUTE] = 0;
    for (int rank = 0; rank < 10 && cols_room(width) > w; rank++)
        for (int c = 0; c < COL_COUNT; c++) {
            int over = cols_room(width) - w, give = width[c] - cols[c].min;
            if (cols[c].rank == rank && over > 0 && give > 0)
                width[c] -= give < over ? give : over;
        }
    int hidden = 0;
    for (int rank = 0; rank < 10 && cols_room(width) > w; rank++)
        for (int c = 0; c < COL_COUNT; c++)
            if (cols[c].rank == rank && width[c] > 0 && cols_room(width) > w) {
                width[c] = 0;
                hidden++;
            }
    if (width[COL_ERROR] > 0)
        width[COL_ERROR] += w - cols_room(width);
    return hidden;
}

/* cell into exactly width columns (ASCII cells; a cut one ends with '~'). */
static void put_cell(char *out, const char *cell, int width, int right)
{
    int len = (int)strlen(cell);
    if (len > width) {
        memcpy(out, cell, (size_t)(width - 1));
        out[width - 1] = '~';
    } else {
        int pad = width - len;
        memset(out, ' ', (size_t)width);
        memcpy(out + (right ? pad : 0), cell, (size_t)len);
    }
    out[width] = 0;
}

/* The row of the shown columns into line; *state_x: where the state cell
 * starts (-1: hidden). */
static void join_cells(char cell[][CELL_MAX], const int width[COL_COUNT], char *line, size_t cap,
                       int *state_x)
{
    size_t n = 0;
    *state_x = -1;
    line[0] = 0;
    for (int c = 0; c < COL_COUNT; c++) {
        if (width[c] <= 0 || n + (size_t)width[c] + 2 > cap)
            continue;
        if (n)
            line[n++] = ' ';
        if (c == COL_STATE)
            *state_x = (int)n;
        put_cell(line + n, cell[c], width[c], cols[c].right);
        n += (size_t)width[c];
    }
}

static void draw(pt_ui *ui, void *state)
{
    agents_view *v = state;
    const pt_rect *r = pt_layout_find(&ui->layout, 0);
    if (!r)
        return;
    pt_ui_timelines(ui); /* the compute figures and stragglers */
    int n = pt_store_agent_count(ui->store);
    if (n > v->order_cap) {
        int *o = realloc(v->order, sizeof *o * (size_t)n);
        if (!o)
            return;
        v->order = o;
        v->order_cap = n;
    }
    int *order = v->order;
    int shown = 0;
    char cell[COL_COUNT][CELL_MAX];
    for (int i = 0; i < n; i++) {
        if (i < PROCS_MAX)
            proc_update(ui, v, i, pt_store_agent_at(ui->store, i)->pid);
        if (matches(ui, v, i))
            order[shown++] = i;
    }
    g_sort_ui = ui;
    g_sort_view = v;
    if (shown > 1)
        qsort(order, (size_t)shown, sizeof order[0], by_key);
    int width[COL_COUNT];
    const pt_bands *b = &ui->tl.meas_bands;
    int hidden = fit_cols(r->w - 2, b->stage_count > 0 && b->stage_count < b->row_count, width);
    char title[200], more[48] = "";
    if (hidden)
        snprintf(more, sizeof more, ", %d col%s hidden", hidden, hidden > 1 ? "s" : "");
    char strag[48] = "";
    if (v->stragglers)
        snprintf(strag, sizeof strag, ", stragglers only (%d)", shown);
    snprintf(title, sizeof title, "agents: %d%s%s%s%s, sorted by %s%s", n,
             v->filter[0] || v->filter_edit ? ", filter \"" : "", v->filter,
             v->filter[0] || v->filter_edit ? (v->filter_edit ? "_\"" : "\"") : "", strag,
             sort_names[v->sort], more);
    pt_rect in = pt_ui_box(ui, r, title);
    if (n == 0) {
        pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "no agents (%s)",
                   ui->src ? ui->src->vt->kind : "simulation");
        return;
    }
    char line[1024];
    int state_x;
    for (int c = 0; c < COL_COUNT; c++)
        snprintf(cell[c], CELL_MAX, "%s",
                 (int)strlen(cols[c].head) > width[c] ? cols[c].brief : cols[c].head);
    join_cells(cell, width, line, sizeof line, &state_x);
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_HEADER], 1, "%s", line);
    int rows = in.h - 1;
    if (v->scroll > shown - rows)
        v->scroll = shown - rows > 0 ? shown - rows : 0;
    for (int k = 0; k < rows && v->scroll + k < shown; k++) {
        int idx = order[v->scroll + k], y = in.y + 1 + k;
        row_cells(ui, v, idx, cell);
        join_cells(cell, width, line, sizeof line, &state_x);
        pt_ui_text(y, in.x, in.w, ui->attr[straggler(ui, idx) ? PT_THEME_WARN : PT_THEME_TEXT], 1,
                   "%s", line);
        if (state_x >= 0 && state_x < in.w) /* the state in its colour, over its cell */
            pt_ui_text(y, in.x + state_x,
                       width[COL_STATE] < in.w - state_x ? width[COL_STATE] : in.w - state_x,
                       ui->attr[state_key(pt_store_agent_at(ui->store, idx)->state)], 0, "%.*s",
                       width[COL_STATE], line + state_x);
    }
    if (shown == 0)
        pt_ui_text(in.y + 1, in.x, in.w, ui->attr[PT_THEME_DIM], 0, "no agent matches \"%s\"%s",
                   v->filter, v->stragglers ? " among the stragglers" : "");
    else if (v->scroll + rows < shown)
        pt_ui_text(in.y + in.h - 1, in.x + in.w - 14, 14, ui->attr[PT_THEME_DIM], 0, "v %d more",
                   shown - v->scroll - rows);
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
    agents_view *v = state;
    int page = ui->rows - PAGE_CHROME > 1 ? ui->rows - PAGE_CHROME : 1;
    if (ch == KEY_DOWN)
        v->scroll++;
    else if (ch == KEY_NPAGE)
        v->scroll += page;
    else if (ch == KEY_PPAGE)
        v->scroll -= page;
    else if (ch == KEY_HOME)
        v->scroll = 0;
    else if (ch == KEY_END)
        v->scroll = pt_store_agent_count(ui->store); /* draw clamps it */
    else
        v->scroll--;
    if (v->scroll < 0)
        v->scroll = 0;
}

static void k_stragglers(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    agents_view *v = state;
    v->stragglers = !v->stragglers;
    v->scroll = 0;
    pt_ui_status(ui, 0, "agents: %s (a straggler: %.0f %% over its stage's median compute time)",
                 v->stragglers ? "stragglers only" : "all", ui->tl.meas_bands.pct);
}

static void fini(void *state)
{
    agents_view *v = state;
    free(v->order);
    v->order = NULL;
}

static void k_stragglers(pt_ui *ui, void *state, int ch);

static void k_filter(pt_ui *ui, void *state, int ch)
{
    if (ch == '!') {
        k_stragglers(ui, state, ch);
        return;
    }
    ((agents_view *)state)->filter_edit = 1;
    pt_ui_status(ui, 0,
                 "filter agents: type text (agent, host, device, stage, state), Enter keeps it, "
                 "Esc clears it");
}

static void k_sort(pt_ui *ui, void *state, int ch)
{
    (void)ch;
    agents_view *v = state;
    v->sort = (v->sort + 1) % SORT_COUNT;
    pt_ui_status(ui, 0, "agents sorted by %s", sort_names[v->sort]);
}

static const pt_view_key keys[] = {
    {{KEY_UP, KEY_DOWN, KEY_PPAGE, KEY_NPAGE, KEY_HOME, KEY_END},
     "Up Down PgDn End",
     "scroll the agent table",
     k_scroll,
     NULL},
    {{'/', KEY_F(4), '!'},
     "/ F4 !",
     "filter: type text (agent, host, device, stage, state); Enter keeps, Esc clears; ! stragglers",
     k_filter,
     NULL},
    {{'s', KEY_F(6)},
     "s F6",
     "next sort key: agent stage step compute cpu rss state",
     k_sort,
     NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

const pt_view_class pt_view_agents = {
    .name = "agents",
    .hotkeys = "4",
    .hints = "Up/Down scroll  1-4 views  / filter  s sort  ! stragglers  ? help  q quit",
    .keys = keys,
    .state_size = sizeof(agents_view),
    .fini = fini,
    .draw = draw,
    .key = key,
};

/* Pure layout of the console's panels (see layout.h). */
#include "tui/console/layout.h"

#include <stddef.h>

#include "protocol/error.h"

/* Rows the plan view's summary/stages band takes when stacked. */
#define PLAN_BAND_MIN_ROWS 7
#define PLAN_BAND_MAX_ROWS 14
/* Rows of the timeline's info band at the bottom. */
#define TL_INFO_ROWS_NARROW 2
#define TL_INFO_ROWS_WIDE   3
/* Height of the plan summary panel in the wide (side-by-side) layout. */
#define PLAN_SUMMARY_ROWS 12

static const char *const view_names[PT_VIEW_COUNT] = {"plan", "timeline", "stats", "agents",
                                                      "help"};
static const char *const panel_names[PT_PANEL_COUNT] = {
    "header",  "status",        "plan-layers", "plan-summary", "plan-stages", "tl-main", "tl-pred",
    "tl-info", "st-throughput", "st-loss",     "st-busy",      "st-memory",   "agents",  "help"};

const char *pt_view_name(pt_view view)
{
    return view >= 0 && view < PT_VIEW_COUNT ? view_names[view] : NULL;
}

const char *pt_panel_name(pt_panel id)
{
    return id >= 0 && id < PT_PANEL_COUNT ? panel_names[id] : "?";
}

static pt_rect rect(int y, int x, int h, int w)
{
    pt_rect r = {y, x, h, w};
    return r;
}

static void add(pt_layout *l, pt_panel id, pt_rect r)
{
    if (l->count < PT_LAYOUT_PANELS_MAX && r.h > 0 && r.w > 0) {
        l->id[l->count] = id;
        l->rect[l->count] = r;
        l->count++;
    }
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void layout_plan(pt_layout *l, pt_rect body)
{
    if (body.w >= PT_LAYOUT_WIDE_COLS) {
        /* layers on the left, summary over stages on the right */
        int left = body.w * 11 / 20;
        int sum_h = clampi(PLAN_SUMMARY_ROWS, 1, body.h / 2);
        add(l, PT_PANEL_PLAN_LAYERS, rect(body.y, body.x, body.h, left));
        add(l, PT_PANEL_PLAN_SUMMARY, rect(body.y, body.x + left, sum_h, body.w - left));
        add(l, PT_PANEL_PLAN_STAGES,
            rect(body.y + sum_h, body.x + left, body.h - sum_h, body.w - left));
        return;
    }
    /* stacked: layers on top, a band of summary | stages below */
    int band = clampi(body.h * 2 / 5, PLAN_BAND_MIN_ROWS, PLAN_BAND_MAX_ROWS);
    if (band > body.h - 3)
        band = body.h / 2;
    int half = body.w / 2;
    add(l, PT_PANEL_PLAN_LAYERS, rect(body.y, body.x, body.h - band, body.w));
    add(l, PT_PANEL_PLAN_SUMMARY, rect(body.y + body.h - band, body.x, band, half));
    add(l, PT_PANEL_PLAN_STAGES, rect(body.y + body.h - band, body.x + half, band, body.w - half));
}

static void layout_timeline(pt_layout *l, pt_rect body, int split)
{
    int info =
        body.w >= PT_LAYOUT_WIDE_COLS && body.h >= 40 ? TL_INFO_ROWS_WIDE : TL_INFO_ROWS_NARROW;
    int main_h = body.h - info;
    if (split && body.w >= PT_LAYOUT_WIDE_COLS) {
        /* measured | predicted, each as tall as the body: every row shows */
        int left = body.w / 2;
        add(l, PT_PANEL_TL_MAIN, rect(body.y, body.x, main_h, left));
        add(l, PT_PANEL_TL_PRED, rect(body.y, body.x + left, main_h, body.w - left));
    } else if (split) {
        int top = main_h / 2;
        add(l, PT_PANEL_TL_MAIN, rect(body.y, body.x, top, body.w));
        add(l, PT_PANEL_TL_PRED, rect(body.y + top, body.x, main_h - top, body.w));
    } else {
        add(l, PT_PANEL_TL_MAIN, rect(body.y, body.x, main_h, body.w));
    }
    add(l, PT_PANEL_TL_INFO, rect(body.y + main_h, body.x, info, body.w));
}

static void layout_stats(pt_layout *l, pt_rect body)
{
    /* 2 x 2 grid: graphs on top (they want width), tables below */
    int top = body.h / 2, left = body.w / 2;
    add(l, PT_PANEL_ST_THROUGHPUT, rect(body.y, body.x, top, left));
    add(l, PT_PANEL_ST_LOSS, rect(body.y, body.x + left, top, body.w - left));
    add(l, PT_PANEL_ST_BUSY, rect(body.y + top, body.x, body.h - top, left));
    add(l, PT_PANEL_ST_MEMORY, rect(body.y + top, body.x + left, body.h - top, body.w - left));
}

int pt_layout_compute(pt_view view, int rows, int cols, const pt_layout_opts *opts, pt_layout *out)
{
    if (!out || view < 0 || view >= PT_VIEW_COUNT)
        return PT_EINVAL;
    out->rows = rows;
    out->cols = cols;
    out->count = 0;
    if (rows < PT_LAYOUT_MIN_ROWS || cols < PT_LAYOUT_MIN_COLS) {
        if (rows >= 2 && cols >= 1) {
            add(out, PT_PANEL_HEADER, rect(0, 0, 1, cols));
            add(out, PT_PANEL_STATUS, rect(rows - 1, 0, 1, cols));
        }
        return PT_ERANGE;
    }
    add(out, PT_PANEL_HEADER, rect(0, 0, 1, cols));
    add(out, PT_PANEL_STATUS, rect(rows - 1, 0, 1, cols));
    pt_rect body = rect(1, 0, rows - 2, cols);
    switch (view) {
    case PT_VIEW_PLAN:
        layout_plan(out, body);
        break;
    case PT_VIEW_TIMELINE:
        layout_timeline(out, body, opts && opts->timeline_split);
        break;
    case PT_VIEW_STATS:
        layout_stats(out, body);
        break;
    case PT_VIEW_AGENTS:
        add(out, PT_PANEL_AGENTS, body);
        break;
    default:
        add(out, PT_PANEL_HELP, body);
        break;
    }
    return 0;
}

const pt_rect *pt_layout_find(const pt_layout *layout, pt_panel id)
{
    if (!layout)
        return NULL;
    for (int i = 0; i < layout->count; i++)
        if (layout->id[i] == id)
            return &layout->rect[i];
    return NULL;
}

int pt_rect_contains(const pt_rect *r, int y, int x)
{
    return y >= r->y && y < r->y + r->h && x >= r->x && x < r->x + r->w;
}

int pt_rect_overlap(const pt_rect *a, const pt_rect *b)
{
    return a->x < b->x + b->w && b->x < a->x + a->w && a->y < b->y + b->h && b->y < a->y + a->h;
}

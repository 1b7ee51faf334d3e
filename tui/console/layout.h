/* Pure screen layout of the console: from a terminal size and a view to the
 * rectangles of its panels. No ncurses here, so every size can be checked by
 * a unit test (tests/tui/layout_test.c): panels never overlap, all lie inside
 * the screen, and together they cover it (no wasted cells) from the smallest
 * supported size up to any large terminal.
 *
 * Every view has the same frame: a header row (view tabs and run summary) on
 * row 0 and a status row (messages, key hints) on the last row; the body in
 * between is split per view, side by side on wide terminals and stacked on
 * narrow ones. */
#ifndef PT_TUI_LAYOUT_H
#define PT_TUI_LAYOUT_H

/* Smallest terminal the console draws on; below it shows "terminal too small". */
#define PT_LAYOUT_MIN_COLS 40
#define PT_LAYOUT_MIN_ROWS 12
/* From this width on, views put panels side by side (the timeline's measured
 * and predicted charts too). */
#define PT_LAYOUT_WIDE_COLS 120
/* Most panels of one view (header and status included). */
#define PT_LAYOUT_PANELS_MAX 8

typedef struct pt_rect {
    int y, x; /* top-left cell, 0-based */
    int h, w; /* rows and columns, >= 1 for a laid-out panel */
} pt_rect;

typedef enum pt_view {
    PT_VIEW_PLAN,
    PT_VIEW_TIMELINE,
    PT_VIEW_STATS,
    PT_VIEW_AGENTS,
    PT_VIEW_HELP,
    PT_VIEW_COUNT
} pt_view;

typedef enum pt_panel {
    PT_PANEL_HEADER,
    PT_PANEL_STATUS,
    PT_PANEL_PLAN_LAYERS,  /* layer rows with profile bars and stage boundaries */
    PT_PANEL_PLAN_SUMMARY, /* predicted time, throughput, bubble, schedule */
    PT_PANEL_PLAN_STAGES,  /* per-stage replicas, placement, memory against the limit */
    PT_PANEL_TL_MAIN,      /* Gantt chart (measured, or predicted when nothing is measured) */
    PT_PANEL_TL_PRED,      /* predicted Gantt beside the measured one (split mode only) */
    PT_PANEL_TL_INFO,      /* legend, zoom, the block under the cursor */
    PT_PANEL_ST_THROUGHPUT,
    PT_PANEL_ST_LOSS,
    PT_PANEL_ST_BUSY,   /* per-stage busy/bubble, measured vs predicted */
    PT_PANEL_ST_MEMORY, /* per-stage memory by category against the limit */
    PT_PANEL_AGENTS,
    PT_PANEL_HELP,
    PT_PANEL_COUNT
} pt_panel;

typedef struct pt_layout_opts {
    int timeline_split; /* 1: timeline view shows measured and predicted panels */
} pt_layout_opts;

typedef struct pt_layout {
    int rows, cols;
    int count;
    pt_panel id[PT_LAYOUT_PANELS_MAX];
    pt_rect rect[PT_LAYOUT_PANELS_MAX];
} pt_layout;

/* Lays out `view` on a rows x cols screen (opts may be NULL). Returns 0, or
 * PT_ERANGE when the screen is below PT_LAYOUT_MIN_ROWS x PT_LAYOUT_MIN_COLS
 * (out then holds the header and status only when they fit, else count 0),
 * or PT_EINVAL for a bad view or NULL out. */
int pt_layout_compute(pt_view view, int rows, int cols, const pt_layout_opts *opts, pt_layout *out);

/* The rectangle of panel id in a computed layout, or NULL when the view has
 * no such panel. */
const pt_rect *pt_layout_find(const pt_layout *layout, pt_panel id);

/* 1 when (y, x) lies inside r. */
int pt_rect_contains(const pt_rect *r, int y, int x);
/* 1 when a and b share at least one cell. */
int pt_rect_overlap(const pt_rect *a, const pt_rect *b);

/* Short name of a view ("plan", "timeline"...), NULL when out of range. */
const char *pt_view_name(pt_view view);
/* Short name of a panel, for tests and messages; "?" when out of range. */
const char *pt_panel_name(pt_panel id);

#endif

/* Pure screen geometry of the console: rectangles, the frame every view
 * shares, and a layout (the panels of one view with their rectangles). No
 * ncurses here, so every size can be checked by a unit test
 * (tests/tui/layout_test.c): panels never overlap, all lie inside the
 * screen, and together they cover it (no wasted cells) from the smallest
 * supported size up to any large terminal.
 *
 * Every view has the same frame: a header row (view tabs and run summary) on
 * row 0 and a status row (messages, key hints) on the last row; the body in
 * between is the view's, which splits it into panels (tui/console/view.h,
 * pt_view_class.layout), side by side on wide terminals and stacked on
 * narrow ones. A view numbers its own panels from 0. */
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

/* The frame's panels; a view's own are 0, 1, ... */
enum { PT_PANEL_HEADER = -2, PT_PANEL_STATUS = -1 };

typedef struct pt_rect {
    int y, x; /* top-left cell, 0-based */
    int h, w; /* rows and columns, >= 1 for a laid-out panel */
} pt_rect;

typedef struct pt_layout {
    int rows, cols;
    int count;
    int id[PT_LAYOUT_PANELS_MAX];               /* PT_PANEL_HEADER, _STATUS, or the view's own */
    const char *name[PT_LAYOUT_PANELS_MAX];     /* "header", "plan-layers", ... (static text) */
    unsigned char framed[PT_LAYOUT_PANELS_MAX]; /* 1: drawn in a box (needs 3 rows, a title) */
    pt_rect rect[PT_LAYOUT_PANELS_MAX];
} pt_layout;

/* Starts a layout of a rows x cols screen with the frame: the header and
 * status rows, and the body between them in *body. Returns 0, or PT_ERANGE
 * when the screen is below PT_LAYOUT_MIN_ROWS x PT_LAYOUT_MIN_COLS (out then
 * holds the header and status only when they fit, else nothing), or
 * PT_EINVAL for a NULL argument. */
int pt_layout_frame(int rows, int cols, pt_layout *out, pt_rect *body);

/* Adds a panel (ignored when r is empty or the layout is full). */
void pt_layout_add(pt_layout *l, int id, const char *name, int framed, pt_rect r);

/* The rectangle of panel id in a computed layout, or NULL when it has none. */
const pt_rect *pt_layout_find(const pt_layout *layout, int id);
/* The same by name; NULL when absent. */
const pt_rect *pt_layout_find_name(const pt_layout *layout, const char *name);

/* A rectangle. */
pt_rect pt_rect_of(int y, int x, int h, int w);
/* 1 when (y, x) lies inside r. */
int pt_rect_contains(const pt_rect *r, int y, int x);
/* 1 when a and b share at least one cell. */
int pt_rect_overlap(const pt_rect *a, const pt_rect *b);

#endif

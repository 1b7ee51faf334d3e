/* Internal to the console (tui/console.c and tui/view_*.c): the state the
 * views share, the drawing helpers over ncurses, and each view's draw, key
 * and mouse functions. Nothing outside the console includes it. */
#ifndef PT_TUI_UI_H
#define PT_TUI_UI_H

#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1 /* box drawing as Unicode in UTF-8 locales */
#endif
#include <curses.h>
#include <stdint.h>

#include "tui/console/config.h"
#include "tui/console/layout.h"
#include "tui/console/plan_edit.h"
#include "tui/record/source.h"
#include "tui/record/store.h"
#include "tui/export/theme.h"
#include "tui/record/tline.h"

#define PT_UI_STATUS_MAX    320
#define PT_UI_STATUS_NS     5000000000LL  /* a message stays this long (ns) */
#define PT_UI_STATUS_MIN_NS 1500000000LL  /* ... and at least this long, to be read */
#define PT_UI_NOTE_NS       10000000000LL /* a data source's note (state change) stays this long */

typedef enum pt_tl_mode {
    PT_TL_MEASURED,  /* the measured timeline (predicted when nothing is measured) */
    PT_TL_PREDICTED, /* the simulator's timeline of the plan being edited */
    PT_TL_BOTH,      /* both, in two panels */
    PT_TL_MODE_COUNT
} pt_tl_mode;

#define PT_UI_AGENTS_MAX 256 /* agents whose process figures the agents view keeps */

/* The agents view's sample of one agent's process (local agents only). */
typedef struct pt_ui_proc {
    int64_t pid;
    long long ticks; /* CPU time at the last sample, clock ticks */
    long long rss;   /* bytes, -1 unknown */
    double cpu_pct;  /* over the last interval, -1 unknown */
    int64_t sampled_ns;
} pt_ui_proc;

enum { AG_SORT_ID, AG_SORT_STAGE, AG_SORT_CPU, AG_SORT_RSS, AG_SORT_STATE, AG_SORT_COUNT };

typedef struct pt_ui {
    /* environment */
    pt_config cfg;
    pt_theme theme;
    int colors; /* 0 (monochrome), 8 or 256 */
    int utf8;
    attr_t attr[PT_THEME_KEY_COUNT];  /* text in a key's colour */
    attr_t block[PT_THEME_KEY_COUNT]; /* a key's colour as background */
    int rows, cols;
    pt_layout layout;
    pt_view view, prev_view;
    int tab_x[PT_VIEW_COUNT], tab_end[PT_VIEW_COUNT]; /* header columns of the tabs, as drawn */
    int paused;           /* display frozen (the source still polls, training goes on) */
    int64_t frozen_steps; /* steps the header shows while paused */
    int readonly; /* --readonly: keys that edit the plan or act on the run are refused */
    /* data */
    pt_store *store;
    pt_source *src;
    pt_plan_edit *edit; /* NULL when there is no profile / topology */
    const char *model_name;
    char planner[PT_NAME_MAX];
    /* plan view */
    int pl_cursor;  /* layer under the cursor */
    int pl_scroll;  /* first list line shown */
    int pl_drag;    /* boundary being dragged with the mouse, 0 none */
    int pl_replica; /* replica the placement key moves */
    /* timeline view */
    pt_tl_mode tl_mode;
    double tl_zoom; /* >= 1 */
    double tl_pan;  /* left edge as a fraction of the data span, in [0, 1 - 1/zoom] */
    int tl_iters;
    int tl_scroll; /* first stage replica row shown */
    pt_tline tl_meas, tl_pred;
    uint64_t tl_meas_version, tl_pred_version;
    /* agents view */
    int ag_scroll;
    int ag_sort;        /* AG_SORT_* */
    char ag_filter[48]; /* substring of id, host, device or state; "" all */
    int ag_filter_edit; /* typing the filter */
    pt_ui_proc ag_proc[PT_UI_AGENTS_MAX];
    /* help view */
    int help_scroll;
    /* status line */
    char status[PT_UI_STATUS_MAX];
    int status_error;
    int64_t status_ns;
    uint64_t status_note_seq; /* the source's note count when the message was set */
    uint64_t note_seq;        /* the newest note seen, and when */
    int64_t note_ns;
    int quit;
    int st_whole;      /* stats graphs: the whole run (1) or one step per column (0) */
    int64_t shown_gen; /* plan generation the editor follows (sources without apply) */
    int dirty;
    int64_t now_ns;
} pt_ui;

/* ---- helpers (ui.c) */
void pt_ui_colors_init(pt_ui *ui);
/* Sets the status line; error selects the error colour. */
void pt_ui_status(pt_ui *ui, int error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints at (y, x) at most w columns (pads with spaces to w when pad). */
void pt_ui_text(int y, int x, int w, attr_t attr, int pad, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* A framed panel with a title; returns the inner rectangle. */
pt_rect pt_ui_box(pt_ui *ui, const pt_rect *r, const char *title);
/* A horizontal bar of w cells filled to frac (0..1), fill glyph c. */
void pt_ui_bar(pt_ui *ui, int y, int x, int w, double frac, attr_t attr, char c);
/* "1.23 GiB" / "12.0 MiB" / "512 KiB". */
const char *pt_ui_bytes(int64_t bytes, char *buf, int cap);
/* "1.2G" / "12.0M" / "512K": for narrow columns. */
const char *pt_ui_bytes_short(int64_t bytes, char *buf, int cap);

/* ---- views (view_*.c): draw into the current layout; keys return 1 when
 * taken; mouse handlers get a click at screen cell (y, x). */
void pt_view_plan_draw(pt_ui *ui);
int pt_view_plan_key(pt_ui *ui, int ch);
int pt_view_plan_mouse(pt_ui *ui, int y, int x, int pressed, int released);
void pt_view_timeline_draw(pt_ui *ui);
int pt_view_timeline_key(pt_ui *ui, int ch);
int pt_view_timeline_mouse(pt_ui *ui, int y, int x, int wheel);
void pt_view_stats_draw(pt_ui *ui);
void pt_view_agents_draw(pt_ui *ui);
int pt_view_agents_key(pt_ui *ui, int ch);
int pt_view_stats_key(pt_ui *ui, int ch);
void pt_view_help_draw(pt_ui *ui);
int pt_view_help_key(pt_ui *ui, int ch);

/* Every key of the console, for the help view: the view it works in
 * (PT_VIEW_COUNT: everywhere), the key as written, what it does. */
typedef struct pt_ui_key {
    int view;
    const char *key;
    const char *what;
} pt_ui_key;
extern const pt_ui_key pt_ui_keys[];

/* Exports the timeline the view shows (console.c): trace and SVG files in
 * the current folder; returns 0 and names them in the status line. */
int pt_ui_export(pt_ui *ui);
/* Rebuilds ui->tl_meas / tl_pred when their sources changed. */
void pt_ui_refresh_timelines(pt_ui *ui);

#endif

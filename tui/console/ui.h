/* Internal to the console (tui/console/): the state the views share and the
 * drawing helpers over ncurses. Nothing outside the console includes it. */
#ifndef PT_TUI_UI_H
#define PT_TUI_UI_H

#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1 /* box drawing as Unicode in UTF-8 locales */
#endif
#include <curses.h>
#include <stdint.h>

#include "tui/console/config.h"
#include "tui/console/layout.h"
#include "tui/console/view.h"
#include "tui/console/plan_edit.h"
#include "tui/record/source.h"
#include "tui/record/figures.h"
#include "tui/record/store.h"
#include "tui/export/theme.h"
#include "tui/record/tline.h"
#include "tui/record/bands.h"

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

/* The timelines the console shows: the measured one (the last `iters`
 * iterations in the store) and the simulator's of the edited plan, rebuilt
 * when their sources change (pt_ui_timelines), with each one's bands and
 * stragglers (tui/record/bands.h; the rule: cfg.straggler_pct). The
 * timeline and stats views draw them, `x` exports the one shown, the agents
 * view shows each agent's figure and straggler mark. */
typedef struct pt_ui_tlines {
    pt_tline meas, pred;
    pt_bands meas_bands, pred_bands;
    uint64_t meas_version, pred_version;
    int iters;       /* iterations of the measured timeline */
    pt_tl_mode mode; /* which the timeline view shows (and x exports) */
} pt_ui_tlines;

/* The headline figures the views show (tui/record/figures.h, the one
 * definition): the measured iteration time of the store's current
 * generation and the prediction of the running plan (the store's current
 * plan; the editor's when nothing runs), made with the editor's costs (the
 * run's calibration once there is one). The edited plan is kept apart: it
 * changes only `edited` and the plan editor's own figures. */
typedef struct pt_ui_figures {
    pt_fig_meas meas;
    pt_fig_pred pred;
    int have_pred;
    const pt_plan *plan; /* the running plan (the store's or the editor's); NULL: none */
    int running;         /* 1: a run's plan (the store has one); 0: only the editor's */
    int edited;          /* 1: the editor's plan is not the running one */
    pt_sim *sim;         /* the running plan's simulation: timeline, busy, memory */
    pt_program prog;
    pt_sim_result res;
    uint64_t pred_seq; /* moves with every new prediction */
    /* what they were computed from */
    uint64_t store_version, edit_version, cost_seq;
    int64_t gen;
    const pt_plan *store_plan;
} pt_ui_figures;

/* What the views share; each view's own state is its own struct
 * (tui/console/view.h). */
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
    int view, prev_view;                            /* indexes of pt_view_at */
    void *state[PT_VIEWS_MAX];                      /* each view's own, allocated by the console */
    int tab_x[PT_VIEWS_MAX], tab_end[PT_VIEWS_MAX]; /* header columns of the tabs, as drawn */
    const pt_view_key *global_keys;                 /* the keys of every view, for the help view */
    const char *config_path;                        /* where settings are saved; NULL: nowhere */
    int paused;           /* display frozen (the source still polls, training goes on) */
    int64_t frozen_steps; /* steps the header shows while paused */
    char frozen_desc[PT_SOURCE_DESC_MAX]; /* the source's words as the pause found them */
    int readonly; /* --readonly: keys that edit the plan or act on the run are refused */
    const char *readonly_why; /* what a refusal says (pt_console_opts.readonly_why) */
    /* Draws the screen now (set by the console): for an action that blocks
     * the loop (apply & restart) to show that it started. */
    void (*redraw)(pt_ui *ui);
    /* data: the views read `store`, which is the live store, or while the
     * display is paused a copy of it as the pause found it (the source
     * keeps filling `live`) */
    pt_store *store;
    pt_store *live;
    pt_source *src;
    pt_plan_edit *edit; /* NULL when there is no profile / topology */
    const char *model_name;
    pt_ui_tlines tl;
    pt_ui_figures fig;
    const pt_profile *base_profile; /* the costs the console started with (borrowed) */
    const pt_topology *base_topology;
    const char *run_dir;  /* a replayed run's folder (its calibrations); NULL none */
    uint64_t cost_seq;    /* moves when the editor's costs change (a calibration taken) */
    int64_t cost_cal_gen; /* the run's calibration the costs are (-1: the base profile) */
    /* status line */
    char status[PT_UI_STATUS_MAX];
    int status_error;
    int64_t status_ns;
    uint64_t status_note_seq; /* the source's note count when the message was set */
    uint64_t note_seq;        /* the newest note seen, and when */
    int64_t note_ns;
    int quit;
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

/* Rebuilds ui->tl.meas and ui->tl.pred (the running plan's prediction,
 * pt_ui_figures) when the store or the running plan changed since. */
void pt_ui_timelines(pt_ui *ui);
/* Brings ui->fig up to date (cheap when nothing changed). */
void pt_ui_figures_update(pt_ui *ui);
/* Frees what ui->fig holds. */
void pt_ui_figures_release(pt_ui *ui);
/* The running plan's simulated worker of (stage, replica), or NULL. */
const pt_sim_worker *pt_ui_pred_worker(const pt_ui *ui, int stage, int replica);
/* The key bar for w columns: hints are items two spaces apart; "? help"
 * and "q quit" always stay (last), the others in their order while they
 * fit, so the bar is never cut in the middle of a key. Returns out. */
#define PT_UI_HINTS_MAX 32
const char *pt_ui_fit_hints(const char *hints, int w, char *out, size_t cap);
/* Draws the screen through ui->redraw, when the console set it. */
void pt_ui_redraw(pt_ui *ui);

#endif

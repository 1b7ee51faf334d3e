/* The ncurses console: views over a data source (tui/record/source.h), the plan
 * editor (tui/console/plan_edit.h) and the run store (tui/record/store.h).
 *
 * The loop polls the source on every turn, redraws at most
 * config.refresh_hz times a second and only when something changed (data,
 * plan, terminal size, a key), handles resize, Esc without delay
 * (set_escdelay), the mouse, and quits on `q` from any view, closing the
 * source (which stops every agent it started). SIGINT, SIGTERM and SIGHUP
 * quit the same way. */
#ifndef PT_TUI_CONSOLE_H
#define PT_TUI_CONSOLE_H

#include "protocol/error.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tui/record/source.h"

#define PT_CONSOLE_ESC_DELAY_MS 25 /* Esc alone vs the start of an escape sequence */

typedef struct pt_console_opts {
    const pt_plan *plan;         /* plan to edit; NULL: the plan view says there is none */
    const pt_profile *profile;   /* borrowed; needed with plan */
    const pt_topology *topology; /* borrowed; needed with plan */
    const char *model_name;      /* for the header; may be NULL */
    pt_source *source;           /* taken over: closed when the console ends */
    const char *start_view;      /* a view's name (tui/console/view.h); NULL: "plan" */
    const char *theme;           /* NULL: the config's */
    const char *config_path;     /* NULL: pt_config_path() */
    int no_mouse;
    double exit_after_s; /* > 0: quit by itself after this long (tests, demos) */
    int readonly;        /* monitoring only: plan edits and apply & restart are refused */
    /* what a refused edit says, with readonly (NULL: "read-only console
     * (--readonly)"); an observed PyTorch run says why it cannot restart */
    const char *readonly_why;
    /* A replayed run's folder: the plan view predicts each generation with
     * its newest calibrated-gen-K.json up to it (tui/record/figures.h), as
     * status does. NULL: none. */
    const char *run_dir;
} pt_console_opts;

/* Runs the console until the user quits. Returns 0, or a negative PT_E*
 * code with err set when it cannot start (not a terminal, bad theme, a plan
 * the editor refuses) or the source failed; the source is closed in every
 * case. */
int pt_console_run(const pt_console_opts *opts, pt_error *err);

/* 1 when the console has a view of that name (built in or registered). */
int pt_console_has_view(const char *name);

#endif

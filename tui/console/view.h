/* A view of the console, after htop's Panel/PanelClass: a class holds what
 * the view is (its name, hot keys, status hints and its keys with their
 * handlers, which the help view lists) and what it does (lay out its panels
 * in the body, draw, take a key or a click); its state is a struct of its
 * own, which the console allocates (state_size bytes, zeroed) and hands to
 * every call. The console loop calls through the class and never switches on
 * the view, and no view calls back into the loop.
 *
 * Adding a view is one file defining a `const pt_view_class` and one line in
 * tui/console/views.c (PT_VIEW_LIST), or, at run time, pt_view_register
 * before the console starts (tests/tui/view_register_itest.c does). */
#ifndef PT_TUI_VIEW_H
#define PT_TUI_VIEW_H

#include <stddef.h>

#include "protocol/error.h"
#include "tui/console/layout.h"

typedef struct pt_ui pt_ui; /* tui/console/ui.h */

#define PT_VIEWS_MAX        12 /* built-in and registered views together */
#define PT_VIEW_KEY_CODES   8  /* key codes one table entry takes */
#define PT_VIEW_HOTKEYS_MAX 4

/* One key (or a few that act alike) of a view: what the help view shows and
 * what runs it. */
typedef struct pt_view_key {
    int codes[PT_VIEW_KEY_CODES]; /* the getch() values it takes, 0-ended; none: a help line */
    const char *label;            /* as the help shows it: "Up Down j k" */
    const char *what;             /* what it does */
    /* Runs the key on the view's state (ch: which of codes); NULL: help only. */
    void (*run)(pt_ui *ui, void *state, int ch);
    /* What it would do to the plan or the run ("edit the plan"): refused under
     * --readonly with these words. NULL for a key that only looks. */
    const char *edits;
} pt_view_key;

/* A click or a wheel turn at screen cell (y, x). */
typedef struct pt_mouse {
    int y, x;
    int pressed, released; /* button 1 */
    int wheel;             /* +1 up, -1 down, 0 none */
} pt_mouse;

typedef struct pt_view_class {
    const char *name;        /* "plan": --view, the tab, messages; unique */
    const char *hotkeys;     /* keys that show it ("1"; help "?5"); the first labels its tab */
    const char *hints;       /* the status row's key hints while it is shown */
    const pt_view_key *keys; /* ended by an entry with label NULL; may be NULL */
    size_t state_size;       /* bytes of its state (0: none) */
    /* Sets up a zeroed state when the console starts (ui: settings, data);
     * NULL: zeroed is ready. */
    void (*init)(pt_ui *ui, void *state);
    /* Frees what the state owns; NULL: nothing. */
    void (*fini)(void *state);
    /* Splits body into the view's panels (pt_layout_add, ids from 0). Pure:
     * reads ui and state only. NULL: one framed panel, the body. */
    void (*layout)(const pt_ui *ui, const void *state, pt_rect body, pt_layout *out);
    /* Draws into ui->layout. */
    void (*draw)(pt_ui *ui, void *state);
    /* Sees a key before the table: 1 taken (a text field), 0 on to the table,
     * -1 not the view's (the table is skipped). NULL: the table only. */
    int (*key)(pt_ui *ui, void *state, int ch);
    /* A click or wheel turn in the body; 1 taken. NULL: ignores the mouse. */
    int (*mouse)(pt_ui *ui, void *state, const pt_mouse *m);
} pt_view_class;

/* The views, built-in first (in tab order), then registered ones. */
int pt_view_count(void);
const pt_view_class *pt_view_at(int i);
/* The index of the view named name, or -1. */
int pt_view_find(const char *name);
/* The index of the view one of whose hot keys is ch, or -1. */
int pt_view_by_hotkey(int ch);

/* Adds a view after the built-in ones. 0, or PT_EINVAL (no name, draw or
 * hot key; a name or hot key taken) or PT_ERANGE (PT_VIEWS_MAX views) with
 * err saying which. Not thread-safe; call before the console starts. */
int pt_view_register(const pt_view_class *cls, pt_error *err);

/* Lays out view i on a rows x cols screen: the frame, then the view's
 * panels. Returns what pt_layout_frame does (the view adds nothing to a
 * screen below the minimum). */
int pt_view_layout(int i, const pt_ui *ui, const void *state, int rows, int cols, pt_layout *out);

/* Runs ch through a key table; 1 when an entry took it. readonly: an entry
 * that edits is refused (*refused set to it, not run). */
int pt_view_keys_run(const pt_view_key *keys, pt_ui *ui, void *state, int ch, int readonly,
                     const pt_view_key **refused);

#endif

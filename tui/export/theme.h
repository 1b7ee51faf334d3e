/* Colour themes of the console: plain-text files in themes/ with one
 *   key = #RRGGBB      (a colour)
 *   key = none         (no colour: the terminal's default; attributes only)
 * per line, '#' or ';' starting a comment line, unknown keys ignored (so old
 * binaries read new themes). Keys a file leaves out keep the built-in dark
 * theme's value. Text sits on the terminal's own background in the
 * terminal's own foreground (so it reads on dark and light terminals alike)
 * unless a theme sets both `background` and `foreground`: then the console
 * paints that background everywhere and writes plain text in that
 * foreground. Timeline blocks and bars use a colour as background either way.
 *
 * State is never told by colour alone: the text Gantt's fills
 * (tui/export/timeline_ascii.h) tell forward, backward, recompute, bubble,
 * communication, all-reduce and optimizer blocks apart on a monochrome
 * terminal too. */
#ifndef PT_TUI_THEME_H
#define PT_TUI_THEME_H

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/op.h"

typedef enum pt_theme_key {
    PT_THEME_TEXT,
    PT_THEME_DIM,
    PT_THEME_ACCENT,
    PT_THEME_HEADER,
    PT_THEME_TAB, /* the active view's tab */
    PT_THEME_STATUS,
    PT_THEME_ERROR,
    PT_THEME_WARN,
    PT_THEME_OK,
    PT_THEME_BORDER,
    PT_THEME_SELECT,   /* the cursor row */
    PT_THEME_BOUNDARY, /* stage boundaries in the plan view */
    PT_THEME_FWD,
    PT_THEME_BWD,
    PT_THEME_RECOMPUTE,
    PT_THEME_BUBBLE,
    PT_THEME_COMM, /* point-to-point sends */
    PT_THEME_ALLREDUCE,
    PT_THEME_OPTSTEP,
    PT_THEME_PREDICTED,
    PT_THEME_MEM_WEIGHTS, /* memory categories, in protocol/memory.h pt_mem_kind order */
    PT_THEME_MEM_GRADS,
    PT_THEME_MEM_OPTIM,
    PT_THEME_MEM_ACTS,
    PT_THEME_MEM_STASH,
    PT_THEME_MEM_BUFFERS,
    PT_THEME_LOSS,
    PT_THEME_THROUGHPUT,
    PT_THEME_LIMIT,
    PT_THEME_BWD_INPUT,  /* B of a split backward (zero-bubble schedules) */
    PT_THEME_BWD_WEIGHT, /* W of a split backward */
    PT_THEME_BACKGROUND, /* the screen's background: used only with foreground */
    PT_THEME_FOREGROUND, /* plain text on that background */
    PT_THEME_KEY_COUNT
} pt_theme_key;

typedef struct pt_color {
    int set; /* 0: none (terminal default) */
    unsigned char r, g, b;
} pt_color;

typedef struct pt_theme {
    char name[PT_NAME_MAX];
    pt_color color[PT_THEME_KEY_COUNT];
} pt_theme;

/* Name of a key as written in theme files ("fwd", "mem.acts"...); NULL when
 * out of range. */
const char *pt_theme_key_name(int key);

/* The built-in dark theme (what a file's missing keys fall back to); it
 * sets no background or foreground. */
void pt_theme_default(pt_theme *out);

/* Parses theme text. Starts from pt_theme_default, applies every known key,
 * ignores unknown ones. A malformed line of a known key (not "#RRGGBB" nor
 * "none"), or a line without '=', is PT_EPARSE with err naming source, the
 * line number and the reason; *out then holds the defaults. */
int pt_theme_parse(const char *text, const char *source, pt_theme *out, pt_error *err);

/* Reads and parses a file; the theme's name is the file name without
 * directory and ".theme". */
int pt_theme_load(const char *path, pt_theme *out, pt_error *err);

/* Finds a theme by name: a path when it contains '/', otherwise <name>.theme
 * in $PT_THEMES_DIR, $XDG_CONFIG_HOME/pipetop/themes (or ~/.config/...),
 * then the source tree's themes/. "dark" not found anywhere is the built-in
 * default. PT_ENOTFOUND with err listing where it looked. */
int pt_theme_find(const char *name, pt_theme *out, pt_error *err);

/* 1 when no key has a colour (a monochrome theme). */
/* 1 when the theme sets both background and foreground (it paints its own
 * screen), 0 when text uses the terminal's defaults. */
int pt_theme_paints_background(const pt_theme *theme);
int pt_theme_is_mono(const pt_theme *theme);

/* Nearest xterm-256 palette index (16..255: colour cube and grey ramp). */
int pt_color_to_256(pt_color c);
/* Nearest of the 8 ANSI colours (0 black .. 7 white). */
int pt_color_to_8(pt_color c);

/* How a paint class of protocol/op.h (an op kind's pt_op_paint_of, or
 * PT_PAINT_BUBBLE) is coloured: the one mapping from paint to theme key,
 * used by the console's timeline and the SVG export alike (its glyph is
 * pt_timeline_fill's). */
pt_theme_key pt_paint_theme_key(int paint); /* PT_THEME_TEXT when out of range */

#endif

/* Console settings, kept in $XDG_CONFIG_HOME/pipetop/config (or
 * ~/.config/pipetop/config): "key = value" lines, '#' comments, unknown keys
 * ignored (kept for a newer version to read), written atomically so a crash
 * never leaves half a file. */
#ifndef PT_TUI_CONFIG_H
#define PT_TUI_CONFIG_H

#include <stddef.h>

#include "protocol/error.h"
#include "protocol/model.h"

#define PT_CONFIG_PATH_MAX      1024
#define PT_CONFIG_REFRESH_MIN   1 /* redraws per second */
#define PT_CONFIG_REFRESH_MAX   60
#define PT_CONFIG_REFRESH_DEF   4 /* legible live: a timeline that moves 10 times a second is not */
#define PT_CONFIG_ITERS_DEF     2 /* iterations the timeline shows */
#define PT_CONFIG_ITERS_MAX     64
#define PT_CONFIG_SPEED_MIN     0.01 /* replay speed factor */
#define PT_CONFIG_SPEED_MAX     1000.0
#define PT_CONFIG_STRAGGLER_DEF 20.0 /* % over the stage median (tui/record/bands.h) */
#define PT_CONFIG_STRAGGLER_MIN 1.0
#define PT_CONFIG_STRAGGLER_MAX 1000.0

typedef struct pt_config {
    char theme[PT_NAME_MAX];   /* theme name (themes/<name>.theme) or path; "dark" */
    int refresh_hz;            /* redraw rate when something changed */
    int mouse;                 /* 1: mouse clicks and wheel */
    char planner[PT_NAME_MAX]; /* planner the plan view's key runs */
    int timeline_iters;        /* iterations shown in the timeline */
    int timeline_split;        /* 1: measured and predicted side by side */
    double replay_speed;       /* default replay speed factor */
    double straggler_pct;      /* a replica this % slower than its stage's median is a straggler */
} pt_config;

/* Defaults: theme "dark", 10 Hz, mouse on, planner "dapple", 2 iterations,
 * no split, replay speed 1, stragglers at 20 %. */
void pt_config_default(pt_config *cfg);

/* The config file's path into buf: $XDG_CONFIG_HOME/pipetop/config, else
 * $HOME/.config/pipetop/config. PT_ENOTFOUND when neither variable is set,
 * PT_ERANGE when it does not fit. */
int pt_config_path(char *buf, size_t cap, pt_error *err);

/* Parses text over the defaults. Unknown keys are ignored; a known key with
 * a bad value is PT_EINVAL naming source, line, key and reason (cfg then
 * holds the defaults). */
int pt_config_parse(const char *text, const char *source, pt_config *cfg, pt_error *err);

/* Loads path; a missing file gives the defaults and 0. */
int pt_config_load(const char *path, pt_config *cfg, pt_error *err);

/* Writes cfg to path (directories created) atomically. */
int pt_config_save(const char *path, const pt_config *cfg, pt_error *err);

#endif

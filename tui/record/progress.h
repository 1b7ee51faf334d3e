/* A progress bar for long loops (training epochs). On a terminal it redraws
 * one line in place ("epoch 1/3 [#####.....] 48% 28800/60000 loss 0.41
 * 5120 samples/s ETA 0:07"), at most PT_PROGRESS_REDRAW_MS apart and sized
 * to the terminal; anywhere else (a pipe, a log file) it prints a plain line
 * at each tenth of the way, so logs stay readable. */
#ifndef PT_TUI_PROGRESS_H
#define PT_TUI_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PT_PROGRESS_REDRAW_MS    100
#define PT_PROGRESS_PLAIN_STEPS  10
#define PT_PROGRESS_DEFAULT_COLS 80

typedef struct pt_progress pt_progress;

/* Starts a display of `total` units (> 0) on `out` (not owned; must outlive
 * it). tty selects the mode: 1 bar, 0 plain lines, -1 decide by
 * isatty(fileno(out)). label is copied. Returns NULL on no memory. */
pt_progress *pt_progress_new(FILE *out, const char *label, int64_t total, int tty);

/* Records that `done` units are finished; `fields` (may be NULL) is shown
 * after the counts ("loss 0.41  5120 samples/s"). Cheap when nothing is
 * drawn. NULL-safe. */
void pt_progress_update(pt_progress *p, int64_t done, const char *fields);

/* Draws the final state and ends the line; `summary` (may be NULL) replaces
 * the fields. Then frees p and sets *p_p = NULL. NULL-safe. */
void pt_progress_finish(pt_progress **p_p, const char *summary);

/* Lays one bar line into buf (cap bytes, NUL-terminated), at most cols - 1
 * visible characters: label, bar, percent, done/total, fields, and the ETA
 * from elapsed_s when done > 0. Pure; exposed for tests. */
void pt_progress_format(char *buf, size_t cap, int cols, const char *label, int64_t done,
                        int64_t total, double elapsed_s, const char *fields);

#endif

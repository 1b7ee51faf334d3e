/* Exports of a timeline: Chrome trace-event JSON (Perfetto, chrome://tracing)
 * and an SVG picture of the Gantt chart, both written as a stream.
 *
 * What is exported is a pt_export_set: the op spans of a run record (a step
 * range of it) or of a timeline, normalised so that
 * - the events of one agent in one plan generation share one clock offset
 *   (the agent's last estimate in that generation), since they come from one
 *   clock: the per-frame offsets the console applied live move by
 *   milliseconds between frames and made consecutive ops overlap;
 * - slices on a track never overlap: spans of a (stage, replica, lane) that
 *   still overlap go to a further track of that lane ("r0 comm 2"), never
 *   moved or cut;
 * - bubbles are the gaps of a stage replica's compute lane inside the time
 *   the selected iterations occupy (protocol/op.h's definition), so they
 *   never overlap an op or each other;
 * - every SEND is paired with the RECV of the same generation, step,
 *   micro-batch and direction on the neighbouring stage, as a flow
 *   (split-concat pieces in row order: sends by sender replica then time,
 *   receives by receiver replica then time; equal bytes first when those
 *   lists differ).
 *
 * Trace: {"displayTimeUnit":"ms","traceEvents":[...]} with one process per
 * stage (pid = stage + 1), one thread per replica, lane and extra track
 * (tid = (replica * 3 + lane) * 100 + track), named by metadata events; an
 * "X" event per op and bubble, ts/dur in microseconds, args {step, mb, gen,
 * agent, version, bytes}; flows as trace-event v1 flow events ("ph":"s" in
 * the SEND slice, "ph":"f" with "bp":"e" in the RECV slice, one "id" per
 * pair), which Perfetto and chrome://tracing both bind to the enclosing
 * slice; a "C" counter per memory sample ("memory r<r>" in its stage).
 *
 * SVG: a title, one band per stage replica, compute blocks labelled with
 * their micro-batch where they are wide enough, backward hatched, recompute
 * dotted, sends and all-reduce on a thin band below, bubbles grey, a time
 * axis in ms whose labels stay inside the picture, a legend; on a white
 * background unless the theme's text is light (then a dark one). */
#ifndef PT_TUI_EXPORT_H
#define PT_TUI_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "protocol/error.h"
#include "protocol/message.h"
#include "protocol/record.h"
#include "tui/export/theme.h"
#include "tui/record/figures.h"
#include "tui/record/tline.h"

/* Microseconds per second, for trace timestamps. */
#define PT_EXPORT_US_PER_S 1e6
/* Tracks one lane of a stage replica may spread over (tid arithmetic). */
#define PT_EXPORT_TRACKS_MAX 100

/* One exported slice. op PT_OP_KIND_COUNT: a bubble. */
typedef struct pt_export_span {
    double start, end; /* seconds from the set's origin */
    int64_t step, gen, version, bytes;
    int32_t mb, stage, replica;
    int32_t agent; /* index into the set's agents, -1: none */
    int32_t row;   /* index into the set's rows */
    int32_t track; /* 0: the lane's first track */
    int64_t flow;  /* SEND and RECV: the pair's flow id (> 0), else 0 */
    uint8_t op, lane;
} pt_export_span;

/* A memory sample: t in seconds on the set's clock. */
typedef struct pt_export_mem {
    double t;
    int stage, replica;
    int64_t bytes[PT_MSG_MEM_COUNT];
    int64_t total;
} pt_export_mem;

/* What to take from a record: steps [first, last] (last < 0: to the end),
 * or, when last_n > 0, the last last_n iterations (by their order in the
 * record; a step run again by a later generation counts again). */
typedef struct pt_export_select {
    int64_t first, last;
    int64_t last_n;
} pt_export_select;

typedef struct pt_export_set {
    pt_export_span *spans; /* ops, then bubbles; ops sorted by (row, lane, start) */
    int64_t count, ops, bubbles, flows;
    int64_t unmatched_sends; /* SENDs no RECV could be paired with */
    int64_t extra_tracks;    /* spans put on a further track to avoid an overlap */
    pt_tl_row *rows;         /* sorted by (stage, replica) */
    int row_count;
    int tracks[64][3]; /* tracks per row (first 64 rows) and lane */
    char (*agents)[PT_MSG_ID_MAX];
    int agent_count;
    pt_export_mem *mem;
    int64_t mem_count;
    double t0, t1;                 /* of the ops; t0 is 0 */
    int64_t iterations;            /* (generation, step) pairs exported */
    int64_t first_step, last_step; /* exported, -1 when none */
    char title[512];               /* model, plan, schedule, figures ("" when unknown) */
    int simulated; /* 1: its agents were simulated (pipetop-agent --simulate): the title starts
                      "simulated", the trace's otherData has "simulated": true */
    /* the run's headline figures (tui/record/figures.h), when the caller
     * gave them (pt_export_set_figures): the title says them, the trace
     * carries them in "otherData" */
    int has_meas, has_pred;
    pt_fig_meas meas;
    pt_fig_pred pred;
} pt_export_set;

/* Sets the run's headline figures (either may be NULL) and adds them to
 * the title: "...: measured 26.279 ms/iteration (median of last 20 steps),
 * predicted 23.787 ms (analytic, measured profile)". */
void pt_export_set_figures(pt_export_set *set, const pt_fig_meas *meas, const pt_fig_pred *pred);

/* Frees what set owns and zeroes it (NULL-safe). */
void pt_export_set_release(pt_export_set *set);

/* Builds the set of a run record's selection (sel NULL: every step). A
 * record without op events gives an empty set. 0, or the record's load
 * error (naming the file), or PT_ENOMEM. */
int pt_export_load_run(const char *record_path, const pt_export_select *sel, pt_export_set *set,
                       pt_error *err);
/* The same for a record already read (a command that also reads its figures
 * from it reads it once). 0 or PT_ENOMEM. */
int pt_export_from_record(const pt_record *rec, const pt_export_select *sel, pt_export_set *set,
                          pt_error *err);

/* Builds the set of a timeline (from the simulator or the console's store);
 * mem may be NULL. 0 or PT_ENOMEM. */
int pt_export_from_tline(const pt_tline *tl, const pt_export_mem *mem, int64_t mem_count,
                         pt_export_set *set);

/* The time the last n iterations of set occupy (by their start), [*t0,
 * *t1]; the whole set when it holds n or fewer. 0 or PT_ENOMEM. */
int pt_export_last_window(const pt_export_set *set, int64_t n, double *t0, double *t1);

/* Counts of what a trace holds. */
typedef struct pt_export_counts {
    int64_t ops, bubbles, counters, tracks, flows;
} pt_export_counts;

/* Streams the trace of set to f. counts may be NULL. 0 or PT_EIO. */
int pt_export_trace_write(const pt_export_set *set, FILE *f, pt_export_counts *counts,
                          pt_error *err);

typedef struct pt_export_svg_opts {
    int width_px;      /* 0: 1200 */
    double t0, t1;     /* seconds shown; t1 <= t0: the whole set */
    const char *title; /* NULL: the set's title */
    /* --compare: this set (the prediction) drawn above the measured one, both
     * from 0 on one time axis as long as the longer; labels name the two
     * sections (NULL: "predicted", "measured"). NULL: the set alone. */
    const pt_export_set *compare;
    const char *compare_label, *label;
} pt_export_svg_opts;

/* Streams an SVG picture of set to f; theme NULL: the built-in light
 * colours (for slides). 0 or PT_EIO. */
int pt_export_svg_write(const pt_export_set *set, const pt_theme *theme,
                        const pt_export_svg_opts *opts, FILE *f, pt_error *err);

/* The trace / SVG of a timeline as malloc'd text (*out, caller frees; *len
 * may be NULL), for the console's export key. 0, PT_ENOMEM or PT_EIO. */
int pt_export_trace(const pt_tline *tl, const pt_export_mem *mem, int64_t mem_count, char **out,
                    size_t *len, pt_export_counts *counts, pt_error *err);
int pt_export_svg(const pt_tline *tl, const pt_theme *theme, const pt_export_svg_opts *opts,
                  char **out, size_t *len, pt_error *err);

/* Writes text to path atomically. */
/* Runs write(set, f, arg, err) into memory: on success *out owns the text (free())
 * and *len (if not NULL) its length. Releases *set in every case. */
typedef int (*pt_export_writer)(const pt_export_set *set, FILE *f, void *arg, pt_error *err);
int pt_export_set_to_text(pt_export_set *set, pt_export_writer write, void *arg, char **out,
                          size_t *len, pt_error *err);
int pt_export_write(const char *path, const char *text, size_t len, pt_error *err);

#endif

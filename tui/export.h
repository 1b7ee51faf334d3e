/* Exports of a timeline: Chrome trace-event JSON (Perfetto, chrome://tracing)
 * and an SVG picture of the Gantt chart.
 *
 * Trace: {"traceEvents":[...], "displayTimeUnit":"ms"} with
 * - one process per stage (pid = stage + 1, named "stage <s>") and one track
 *   (thread) per replica and op lane (tid = replica * 4 + lane; "r<r> compute",
 *   "r<r> comm", "r<r> wait", named by metadata events);
 * - an "X" event per op span, ts/dur in microseconds, name "FWD mb3", cat the
 *   op in lower case, args {mb, step, bytes};
 * - an "X" event per bubble (cat "bubble", on the compute track): a gap of a
 *   replica's compute lane inside its iteration, the interval from the first
 *   start to the last end of that iteration's spans over every replica;
 * - a "C" counter per memory sample, named "memory r<r>" in its stage's
 *   process, args = bytes per category.
 *
 * SVG: one band per stage replica, compute blocks labelled with their
 * micro-batch, backward hatched, recompute dotted, bubbles grey with dots,
 * sends and all-reduce on a thin band below, a time axis in ms and a legend;
 * colours from a theme (monochrome themes still differ by pattern). */
#ifndef PT_TUI_EXPORT_H
#define PT_TUI_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "tui/store.h"
#include "tui/theme.h"
#include "tui/tline.h"

/* Microseconds per second, for trace timestamps. */
#define PT_EXPORT_US_PER_S 1e6

/* Memory samples for counters: times in seconds on the timeline's clock. */
typedef struct pt_export_mem {
    double t;
    int stage, replica;
    int64_t bytes[PT_MSG_MEM_COUNT];
    int64_t total;
} pt_export_mem;

/* Writes the trace of tl (and mem[0..mem_count), may be NULL) as JSON text:
 * *out is malloc'd (caller frees), *len its length (may be NULL). Counts of
 * what was written go to *counts when not NULL. 0 or PT_ENOMEM. */
typedef struct pt_export_counts {
    int64_t ops, bubbles, counters, tracks;
} pt_export_counts;
int pt_export_trace(const pt_tline *tl, const pt_export_mem *mem, int64_t mem_count, char **out,
                    size_t *len, pt_export_counts *counts, pt_error *err);

typedef struct pt_export_svg_opts {
    int width_px;      /* 0: 1200 */
    double t0, t1;     /* seconds shown; t1 <= t0: the whole timeline */
    const char *title; /* may be NULL */
} pt_export_svg_opts;

/* Writes an SVG picture of tl; theme may be NULL (built-in dark colours).
 * Same ownership as pt_export_trace. */
int pt_export_svg(const pt_tline *tl, const pt_theme *theme, const pt_export_svg_opts *opts,
                  char **out, size_t *len, pt_error *err);

/* Builds the timeline of a whole run record (every step, every generation),
 * times in seconds from its first op event, and its memory samples on the
 * same clock (*mem malloc'd, caller frees; may be NULL when not wanted).
 * Returns 0 or the record's load error. */
int pt_export_load_run(const char *record_path, pt_tline *tl, pt_export_mem **mem,
                       int64_t *mem_count, pt_error *err);

/* Memory samples of a store on the clock of a timeline built from it with
 * origin_ns (pt_store_timeline). *out malloc'd; 0 or PT_ENOMEM. */
int pt_export_store_mem(const pt_store *store, int64_t origin_ns, pt_export_mem **out,
                        int64_t *count);

/* Writes text to path atomically. */
int pt_export_write(const char *path, const char *text, size_t len, pt_error *err);

#endif

/* pipetop export RUN --trace out.json [--svg out.svg]: the timeline of a
 * recorded run as a Chrome trace (Perfetto, chrome://tracing) and/or as an
 * SVG picture. RUN is a run record (.ndjson) or a run folder holding
 * run.ndjson. Both are streamed to their file (a temporary name renamed
 * when complete). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/opts.h"
#include "tui/commands.h"
#include "tui/export.h"
#include "tui/theme.h"

#define EXPORT_PATH_MAX 4096
#define SVG_WIDTH_MIN   200
#define SVG_WIDTH_MAX   20000
#define SVG_LAST_DEF    4 /* iterations an SVG shows unless told (more is a smear) */
#define EXPORT_BUF      (1 << 20)
#define EXPORT_LAST_MAX 1000000000 /* iterations --last takes, at most */

static const char usage_text[] =
    "usage: pipetop export RUN [--trace OUT.json] [--svg OUT.svg] [--steps A:B | --last N]\n"
    "                          [--theme NAME] [--width PX]\n"
    "Writes the timeline of a recorded run (RUN: a run.ndjson, or a run folder that\n"
    "holds one) as a Chrome trace-event file that Perfetto and chrome://tracing open\n"
    "(one process per stage, one track per replica and op lane, bubbles, flows from\n"
    "each send to its receive, memory counters), and/or as an SVG picture of the\n"
    "Gantt chart for slides. The trace holds the whole run unless --steps or --last\n"
    "choose; the SVG shows the last 4 iterations of that unless --steps or --last do.\n";

/* "A:B", "A:", ":B" or "A" (steps A to B, inclusive). 0 or -1. */
static int parse_steps(const char *s, int64_t *first, int64_t *last)
{
    char *end;
    *first = 0;
    *last = -1;
    if (*s != ':') {
        errno = 0;
        long long a = strtoll(s, &end, 10);
        if (errno || end == s || a < 0)
            return -1;
        *first = a;
        s = end;
        if (!*s) {
            *last = a;
            return 0;
        }
    }
    if (*s != ':')
        return -1;
    s++;
    if (!*s)
        return 0;
    errno = 0;
    long long b = strtoll(s, &end, 10);
    if (errno || end == s || *end || b < *first)
        return -1;
    *last = b;
    return 0;
}

/* Streams one output to path through a temporary file renamed at the end. */
static int write_out(const char *path, const pt_export_set *set, const pt_theme *theme,
                     const pt_export_svg_opts *svg, pt_export_counts *counts, pt_error *err)
{
    char tmp[EXPORT_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    setvbuf(f, NULL, _IOFBF, EXPORT_BUF);
    int rc = svg ? pt_export_svg_write(set, theme, svg, f, err)
                 : pt_export_trace_write(set, f, counts, err);
    if (fclose(f) != 0 && rc == 0)
        rc = pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    if (rc < 0)
        unlink(tmp);
    return rc;
}

int pt_cmd_export(int argc, char **argv)
{
    const char *run = NULL, *steps = NULL;
    const char *trace = NULL, *svg = NULL, *theme_name = NULL;
    int width = 0;
    int64_t last_n = 0;
    pt_opt opts[] = {
        {"RUN", PT_OPT_ARG, &run, 1, 1, 0, NULL, "a run.ndjson, or a run folder holding one"},
        {"trace", PT_OPT_STRING, &trace, 0, 0, 0, "OUT.json", "trace-event JSON"},
        {"svg", PT_OPT_STRING, &svg, 0, 0, 0, "OUT.svg",
         "SVG picture (--theme for its colours, --width in pixels)"},
        {"steps", PT_OPT_STRING, &steps, 0, 0, 0, "A:B",
         "only steps A to B (inclusive; A: or :B leave an end open)"},
        {"last", PT_OPT_INT64, &last_n, 1, EXPORT_LAST_MAX, 0, "N",
         "only the last N iterations (default for the SVG: 4)"},
        {"theme", PT_OPT_STRING, &theme_name, 0, 0, 0, "NAME",
         "SVG colours: a theme file or a name in themes/ (default: white slide colours)"},
        {"width", PT_OPT_INT, &width, SVG_WIDTH_MIN, SVG_WIDTH_MAX, 0, "PX", "SVG width in pixels"},
    };
    int rc = pt_opts_command("export", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    if (!trace && !svg) {
        fprintf(stderr, "pipetop export: give --trace and/or --svg\n");
        return 2;
    }
    pt_export_select sel = {0, -1, last_n};
    if (steps && last_n > 0) {
        fprintf(stderr, "pipetop export: --steps and --last: give one of them\n");
        return 2;
    }
    if (steps && parse_steps(steps, &sel.first, &sel.last) < 0) {
        fprintf(stderr,
                "pipetop export: --steps: \"%s\" is not A:B (steps, A <= B; A: or :B open)\n",
                steps);
        return 2;
    }
    int chosen = steps || last_n > 0;
    if (!trace && !chosen)
        sel.last_n = SVG_LAST_DEF; /* the SVG alone: read only what it shows */
    pt_theme theme;
    pt_error err = {0};
    if (svg && theme_name && pt_theme_find(theme_name, &theme, &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        return 1;
    }
    char path[EXPORT_PATH_MAX];
    struct stat st;
    if (stat(run, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/run.ndjson", run);
    else
        snprintf(path, sizeof path, "%s", run);

    pt_export_set set;
    if (pt_export_load_run(path, &sel, &set, &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        return 1;
    }
    int status = 0;
    if (set.ops == 0)
        fprintf(stderr, "pipetop export: %s: no op events in the steps chosen\n", path);
    if (trace) {
        pt_export_counts c;
        if (write_out(trace, &set, NULL, NULL, &c, &err) < 0) {
            fprintf(stderr, "pipetop export: %s\n", err.msg);
            status = 1;
        } else {
            printf("%s: %" PRId64 " iterations (steps %" PRId64 "-%" PRId64 "), %" PRId64
                   " op events, %" PRId64 " bubbles, %" PRId64 " flows, %" PRId64
                   " memory counters, %d stage replicas, %.3f ms\n",
                   trace, set.iterations, set.first_step, set.last_step, c.ops, c.bubbles, c.flows,
                   c.counters, set.row_count, (set.t1 - set.t0) * 1e3);
            if (set.unmatched_sends > 0)
                printf("%s: %" PRId64 " sends without a receive in the steps chosen\n", trace,
                       set.unmatched_sends);
        }
    }
    if (svg && status == 0) {
        pt_export_svg_opts o = {width, 0, 0, NULL};
        if (!chosen && trace && pt_export_last_window(&set, SVG_LAST_DEF, &o.t0, &o.t1) < 0) {
            fprintf(stderr, "pipetop export: out of memory\n");
            status = 1;
        } else if (write_out(svg, &set, theme_name ? &theme : NULL, &o, NULL, &err) < 0) {
            fprintf(stderr, "pipetop export: %s\n", err.msg);
            status = 1;
        } else {
            printf("%s: %d stage replicas, %.3f ms shown\n", svg, set.row_count,
                   ((o.t1 > o.t0 ? o.t1 - o.t0 : set.t1 - set.t0)) * 1e3);
        }
    }
    pt_export_set_release(&set);
    return status;
}

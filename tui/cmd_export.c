/* pipetop export RUN --trace out.json [--svg out.svg]: the timeline of a
 * recorded run as a Chrome trace (Perfetto, chrome://tracing) and/or as an
 * SVG picture. RUN is a run record (.ndjson) or a run folder holding
 * run.ndjson. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "protocol/opts.h"
#include "tui/commands.h"
#include "tui/export.h"
#include "tui/theme.h"

#define EXPORT_PATH_MAX 4096
#define SVG_WIDTH_MIN   200
#define SVG_WIDTH_MAX   20000

static const char usage_text[] =
    "usage: pipetop export RUN [--trace OUT.json] [--svg OUT.svg] [--theme NAME] [--width PX]\n"
    "Writes the timeline of a recorded run (RUN: a run.ndjson, or a run folder that\n"
    "holds one) as a Chrome trace-event file that Perfetto and chrome://tracing open\n"
    "(one process per stage, one track per replica and op lane, bubbles and memory\n"
    "counters), and/or as an SVG picture of the Gantt chart.\n";

int pt_cmd_export(int argc, char **argv)
{
    const char *run = NULL;
    const char *trace = NULL, *svg = NULL, *theme_name = "light";
    int width = 0;
    pt_opt opts[] = {
        {"RUN", PT_OPT_ARG, &run, 1, 1, 0, NULL, "a run.ndjson, or a run folder holding one"},
        {"trace", PT_OPT_STRING, &trace, 0, 0, 0, "OUT.json", "trace-event JSON"},
        {"svg", PT_OPT_STRING, &svg, 0, 0, 0, "OUT.svg",
         "SVG picture (--theme for its colours, --width in pixels)"},
        {"theme", PT_OPT_STRING, &theme_name, 0, 0, 0, "NAME",
         "SVG colours: a theme file or a name in themes/ (default light)"},
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
    char path[EXPORT_PATH_MAX];
    struct stat st;
    if (stat(run, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/run.ndjson", run);
    else
        snprintf(path, sizeof path, "%s", run);

    pt_error err = {0};
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    pt_export_mem *mem = NULL;
    int64_t nmem = 0;
    if (pt_export_load_run(path, &tl, &mem, &nmem, &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        return 1;
    }
    int status = 0;
    if (tl.count == 0)
        fprintf(stderr, "pipetop export: %s: the record holds no op events\n", path);
    if (trace) {
        char *text = NULL;
        size_t len = 0;
        pt_export_counts c;
        if (pt_export_trace(&tl, mem, nmem, &text, &len, &c, &err) < 0 ||
            pt_export_write(trace, text, len, &err) < 0) {
            fprintf(stderr, "pipetop export: %s\n", err.msg);
            status = 1;
        } else {
            printf("%s: %lld op events, %lld bubbles, %lld memory counters, %d stage replicas, "
                   "%.3f ms\n",
                   trace, (long long)c.ops, (long long)c.bubbles, (long long)c.counters,
                   tl.row_count, (tl.t1 - tl.t0) * 1e3);
        }
        free(text);
    }
    if (svg && status == 0) {
        pt_theme theme;
        if (pt_theme_find(theme_name, &theme, &err) < 0) {
            fprintf(stderr, "pipetop export: %s\n", err.msg);
            status = 1;
        } else {
            char *text = NULL;
            size_t len = 0;
            char title[EXPORT_PATH_MAX + 32];
            snprintf(title, sizeof title, "pipetop: %s", path);
            pt_export_svg_opts o = {width, 0, 0, title};
            if (pt_export_svg(&tl, &theme, &o, &text, &len, &err) < 0 ||
                pt_export_write(svg, text, len, &err) < 0) {
                fprintf(stderr, "pipetop export: %s\n", err.msg);
                status = 1;
            } else {
                printf("%s: %d stage replicas, %lld spans\n", svg, tl.row_count,
                       (long long)tl.count);
            }
            free(text);
        }
    }
    free(mem);
    pt_tline_release(&tl);
    return status;
}

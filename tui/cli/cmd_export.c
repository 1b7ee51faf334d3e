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
#include <unistd.h>

#include "planner/cost.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/fileio.h"
#include "protocol/opts.h"
#include "tui/cli/inputs.h"
#include "tui/cli/commands.h"
#include "tui/export/export.h"
#include "tui/export/theme.h"
#include "tui/record/replay.h"

#define EXPORT_PATH_MAX 4096
#define SVG_WIDTH_MIN   200
#define SVG_WIDTH_MAX   20000
#define SVG_LAST_DEF    4 /* iterations an SVG shows unless told (more is a smear) */
#define EXPORT_BUF      (1 << 20)
#define EXPORT_LAST_MAX 1000000000 /* iterations --last takes, at most */

static const char usage_text[] =
    "usage: pipetop export RUN [--trace OUT.json] [--svg OUT.svg] [--steps A:B | --last N]\n"
    "                          [--theme NAME] [--width PX] [--compare]\n"
    "Writes the timeline of a recorded run (RUN: a run.ndjson, or a run folder that\n"
    "holds one) as a Chrome trace-event file that Perfetto and chrome://tracing open\n"
    "(one process per stage, one track per replica and op lane, bubbles, flows from\n"
    "each send to its receive, memory counters), and/or as an SVG picture of the\n"
    "Gantt chart for slides. The trace holds the whole run unless --steps or --last\n"
    "choose; the SVG shows the last 4 iterations of that unless --steps or --last do.\n"
    "With --compare the SVG draws the simulator's prediction of the shown generation's\n"
    "plan (the run folder's profile.json and topology.json) above the measurement, on\n"
    "one time axis.\n";

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

/* One output: the trace, or the SVG when svg is set. */
typedef struct output {
    const pt_export_set *set;
    const pt_theme *theme;
    const pt_export_svg_opts *svg;
    pt_export_counts *counts;
} output;

static int write_output(FILE *f, void *user, pt_error *err)
{
    const output *o = user;
    setvbuf(f, NULL, _IOFBF, EXPORT_BUF);
    return o->svg ? pt_export_svg_write(o->set, o->theme, o->svg, f, err)
                  : pt_export_trace_write(o->set, f, o->counts, err);
}

/* Streams one output to path (a temporary file renamed when complete). */
static int write_out(const char *path, const pt_export_set *set, const pt_theme *theme,
                     const pt_export_svg_opts *svg, pt_export_counts *counts, pt_error *err)
{
    output o = {set, theme, svg, counts};
    return pt_file_save_stream(path, write_output, &o, err);
}

/* The generation of the newest op in [t0, t1] (the whole set when t1 <= t0). */
static int64_t shown_generation(const pt_export_set *set, double t0, double t1)
{
    int64_t gen = -1;
    double newest = -1;
    for (int64_t i = 0; i < set->ops; i++) {
        const pt_export_span *s = &set->spans[i];
        if (t1 > t0 && (s->end < t0 || s->start > t1))
            continue;
        if (s->start > newest) {
            newest = s->start;
            gen = s->gen;
        }
    }
    return gen;
}

/* The simulator's timeline of generation gen's plan (predicted as every
 * other place predicts it: tui/record/figures.h), repeated for at least
 * `iters` iterations, each program (one iteration, or one window of an
 * asynchronous kind) after the one before, from 0: every copy starts at an
 * iteration boundary. */
static int predicted_set(const char *record, int64_t gen, int64_t iters, pt_export_set *out,
                         pt_error *err)
{
    char path[EXPORT_PATH_MAX], dir[EXPORT_PATH_MAX];
    pt_inputs_run_paths(record, path, dir, sizeof dir);
    pt_record *rec = NULL;
    pt_inputs in = {0};
    pt_program prog = {0};
    pt_sim *sim = NULL;
    pt_sim_result res;
    memset(&res, 0, sizeof res);
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    int64_t plan_gen, cal_gen;
    int rc = pt_record_load(record, &rec, err);
    if (rc == 0)
        rc = pt_inputs_from_run(rec, dir, gen, &in, &plan_gen, &cal_gen, err);
    if (rc == 0 && !in.plan)
        rc = pt_error_set(err, PT_EINVAL, "%s: --compare: the record holds no plan", record);
    if (rc == 0 && (rc = pt_inputs_simulate(&in, &sim, &prog, &res, err)) < 0)
        pt_error_prefix(err, "--compare");
    if (rc == 0 && (rc = pt_tline_from_sim(&tl, &prog, &res)) < 0)
        pt_error_set(err, rc, "out of memory");
    if (rc == 0) {
        double period = res.makespan_s > 0 ? res.makespan_s : res.iter_s;
        int64_t one = tl.count, wc = prog.window_count > 0 ? prog.window_count : 1;
        int64_t copies = (iters + wc - 1) / wc;
        for (int64_t k = 1; k < copies && rc == 0; k++)
            for (int64_t i = 0; i < one && rc == 0; i++) {
                pt_tl_span sp = tl.spans[i];
                sp.start += (double)k * period;
                sp.end += (double)k * period;
                sp.step += k * wc;
                rc = pt_tline_add(&tl, &sp);
            }
        if (rc == 0 && (rc = pt_export_from_tline(&tl, NULL, 0, out)) < 0)
            pt_error_set(err, rc, "out of memory");
    }
    pt_tline_release(&tl);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_inputs_release(&in);
    pt_record_free(&rec);
    return rc;
}

/* The headline figures of generation gen of the record (the ones status
 * prints: tui/record/figures.h) into the set's title and trace. */
static int set_figures(pt_record *rec, const char *record, int64_t gen, pt_export_set *set,
                       pt_error *err)
{
    char path[EXPORT_PATH_MAX], dir[EXPORT_PATH_MAX];
    pt_inputs_run_paths(record, path, dir, sizeof dir);
    pt_fig_meas meas;
    pt_fig_pred pred;
    int have_pred = 0;
    int rc = pt_inputs_run_figures(rec, dir, gen, &meas, &pred, &have_pred);
    if (rc < 0)
        pt_error_set(err, rc, "out of memory");
    if (rc == 0)
        pt_export_set_figures(set, &meas, have_pred ? &pred : NULL);
    return rc;
}

/* What the command line asked for. */
typedef struct export_args {
    const char *run, *steps, *trace, *svg, *theme_name;
    int width, compare, chosen; /* chosen: --steps or --last */
    int64_t last_n;
    pt_export_select sel;
    pt_theme theme;
    char path[EXPORT_PATH_MAX]; /* the record */
} export_args;

/* Parses and checks the options: -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, export_args *a)
{
    pt_opt opts[] = {
        {"RUN", PT_OPT_ARG, &a->run, 1, 1, 0, NULL, "a run.ndjson, or a run folder holding one"},
        {"trace", PT_OPT_STRING, &a->trace, 0, 0, 0, "OUT.json", "trace-event JSON"},
        {"svg", PT_OPT_STRING, &a->svg, 0, 0, 0, "OUT.svg",
         "SVG picture (--theme for its colours, --width in pixels)"},
        {"steps", PT_OPT_STRING, &a->steps, 0, 0, 0, "A:B",
         "only steps A to B (inclusive; A: or :B leave an end open)"},
        {"last", PT_OPT_INT64, &a->last_n, 1, EXPORT_LAST_MAX, 0, "N",
         "only the last N iterations (default for the SVG: 4)"},
        {"theme", PT_OPT_STRING, &a->theme_name, 0, 0, 0, "NAME",
         "SVG colours: a theme file or a name in themes/ (default: white slide colours)"},
        {"width", PT_OPT_INT, &a->width, SVG_WIDTH_MIN, SVG_WIDTH_MAX, 0, "PX",
         "SVG width in pixels"},
        {"compare", PT_OPT_FLAG, &a->compare, 0, 0, 0, NULL,
         "SVG: the prediction above the measurement, one time axis"},
    };
    int rc = pt_opts_command("export", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    const char *why = !a->trace && !a->svg        ? "give --trace and/or --svg"
                      : a->compare && !a->svg     ? "--compare draws into the SVG: give --svg"
                      : a->steps && a->last_n > 0 ? "--steps and --last: give one of them"
                                                  : NULL;
    a->sel = (pt_export_select){0, -1, a->last_n};
    if (!why && a->steps && parse_steps(a->steps, &a->sel.first, &a->sel.last) < 0) {
        fprintf(stderr,
                "pipetop export: --steps: \"%s\" is not A:B (steps, A <= B; A: or :B open)\n",
                a->steps);
        return 2;
    }
    if (why) {
        fprintf(stderr, "pipetop export: %s\n", why);
        return 2;
    }
    a->chosen = a->steps || a->last_n > 0;
    if (!a->trace && !a->chosen)
        a->sel.last_n = SVG_LAST_DEF; /* the SVG alone: read only what it shows */
    pt_error err = {0};
    if (a->svg && a->theme_name && pt_theme_find(a->theme_name, &a->theme, &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        return 1;
    }
    char dir[EXPORT_PATH_MAX];
    pt_inputs_run_paths(a->run, a->path, dir, sizeof dir);
    return -1;
}

static int export_trace(const export_args *a, const pt_export_set *set)
{
    pt_export_counts c;
    pt_error err = {0};
    if (write_out(a->trace, set, NULL, NULL, &c, &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        return 1;
    }
    printf("%s: %" PRId64 " iterations (steps %" PRId64 "-%" PRId64 "), %" PRId64
           " op events, %" PRId64 " bubbles, %" PRId64 " flows, %" PRId64
           " memory counters, %d stage replicas, %.3f ms\n",
           a->trace, set->iterations, set->first_step, set->last_step, c.ops, c.bubbles, c.flows,
           c.counters, set->row_count, (set->t1 - set->t0) * 1e3);
    if (set->unmatched_sends > 0)
        printf("%s: %" PRId64 " sends without a receive in the steps chosen\n", a->trace,
               set->unmatched_sends);
    return 0;
}

/* --compare: the prediction of the shown generation above the measurement,
 * each from the start of its first iteration, both labelled with the
 * figures status prints. */
static int add_prediction(const export_args *a, const pt_export_set *set, pt_export_svg_opts *o,
                          pt_export_set *pred, char *plabel, char *mlabel, size_t cap)
{
    int64_t shown = !a->chosen && a->trace
                        ? (set->iterations < SVG_LAST_DEF ? set->iterations : SVG_LAST_DEF)
                        : set->iterations;
    pt_error err = {0};
    if (predicted_set(a->path, shown_generation(set, o->t0, o->t1), shown > 0 ? shown : 1, pred,
                      &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        return 1;
    }
    if (set->has_pred)
        snprintf(plabel, cap, "predicted: %.3f ms/iteration (%s)", set->pred.iter_ms,
                 set->pred.label);
    else
        snprintf(plabel, cap, "predicted (simulator)");
    if (set->has_meas)
        snprintf(mlabel, cap, "measured: %.3f ms/iteration (%s); %lld iterations shown",
                 set->meas.iter_ms, set->meas.label, (long long)shown);
    else
        snprintf(mlabel, cap, "measured: %lld iterations shown", (long long)shown);
    o->compare = pred;
    o->compare_label = plabel;
    o->label = mlabel;
    return 0;
}

static int export_svg(const export_args *a, const pt_export_set *set)
{
    pt_export_svg_opts o = {.width_px = a->width};
    pt_export_set pred;
    memset(&pred, 0, sizeof pred);
    char plabel[256], mlabel[256];
    int status = 0;
    pt_error err = {0};
    if (!a->chosen && a->trace && pt_export_last_window(set, SVG_LAST_DEF, &o.t0, &o.t1) < 0) {
        fprintf(stderr, "pipetop export: out of memory\n");
        status = 1;
    } else if (a->compare) {
        status = add_prediction(a, set, &o, &pred, plabel, mlabel, sizeof plabel);
    }
    if (status == 0 &&
        write_out(a->svg, set, a->theme_name ? &a->theme : NULL, &o, NULL, &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        status = 1;
    } else if (status == 0) {
        printf("%s: %d stage replicas, %.3f ms shown%s\n", a->svg, set->row_count,
               ((o.t1 > o.t0 ? o.t1 - o.t0 : set->t1 - set->t0)) * 1e3,
               a->compare ? ", the prediction above" : "");
    }
    pt_export_set_release(&pred);
    return status;
}

int pt_cmd_export(int argc, char **argv)
{
    export_args a;
    memset(&a, 0, sizeof a);
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    pt_export_set set;
    pt_error err = {0};
    pt_record *rec = NULL; /* read once, for the set and its figures */
    if (pt_replay_load(a.path, &rec, &err) < 0 ||
        pt_export_from_record(rec, &a.sel, &set, &err) < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        pt_record_free(&rec);
        return 1;
    }
    int frc = set_figures(rec, a.path, set.ops ? shown_generation(&set, 0, 0) : -1, &set, &err);
    pt_record_free(&rec);
    if (frc < 0) {
        fprintf(stderr, "pipetop export: %s\n", err.msg);
        pt_export_set_release(&set);
        return 1;
    }
    status = 0;
    if (set.ops == 0) {
        /* a record of only its session line, or a --last/--steps window
         * outside the run: an empty file would read as a run that did
         * nothing */
        fprintf(stderr, "pipetop export: %s: no op events in the steps chosen; nothing written\n",
                a.path);
        pt_export_set_release(&set);
        return 1;
    }
    if (a.trace)
        status = export_trace(&a, &set);
    if (a.svg && status == 0)
        status = export_svg(&a, &set);
    pt_export_set_release(&set);
    return status;
}

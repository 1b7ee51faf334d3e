/* pipetop replay RUN: the console on a recorded run. */
#include <stdio.h>

#include "protocol/opts.h"
#include "tui/cli/commands.h"
#include "tui/cli/inputs.h"
#include "tui/cli/launch.h"
#include "tui/console/console.h"
#include "tui/record/replay.h"
#include "tui/record/source.h"

#define PATH_CAP  4096
#define SPEED_MIN 0.01
#define SPEED_MAX 1000.0

int pt_cmd_replay(int argc, char **argv)
{
    static const char usage[] =
        "usage: pipetop replay RUN [--speed X] [--paused] [--end] [--theme NAME]\n"
        "                          [--view plan|timeline|stats|agents] [--no-mouse]\n"
        "Plays a recorded run (RUN: a run.ndjson, or a run folder holding one) in the\n"
        "console at X times real speed (default 1): the measured timeline, the loss and\n"
        "throughput graphs, the agents; next to the simulator's prediction of its plan.\n"
        "Keys: space pause, n next step, > < faster / slower, e jump to the end.\n";
    const char *run = NULL;
    double speed = 1.0, exit_after = 0;
    int paused = 0, to_end = 0, no_mouse = 0;
    const char *theme = NULL, *view = "timeline";
    pt_opt opts[] = {
        {"RUN", PT_OPT_ARG, &run, 1, 1, 0, NULL, "a run.ndjson, or a run folder holding one"},
        {"speed", PT_OPT_DOUBLE, &speed, SPEED_MIN, SPEED_MAX, 0, "X",
         "play at X times real speed (default 1)"},
        {"paused", PT_OPT_FLAG, &paused, 0, 0, 0, NULL, "start paused (n steps)"},
        {"end", PT_OPT_FLAG, &to_end, 0, 0, 0, NULL, "show the whole record at once"},
        {"theme", PT_OPT_STRING, &theme, 0, 0, 0, "NAME",
         "colour theme (a file or a name in themes/)"},
        {"view", PT_OPT_STRING, &view, 0, 0, 0, "V",
         "view to start in: plan, timeline (default), stats or agents"},
        {"no-mouse", PT_OPT_FLAG, &no_mouse, 0, 0, 0, NULL, "ignore the mouse"},
        {"exit-after", PT_OPT_DOUBLE, &exit_after, 0, 86400, 0, "X",
         "quit after X seconds (scripted runs; 0: never)"},
    };
    int rc = pt_opts_command("replay", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), usage,
                             NULL);
    if (rc >= 0)
        return rc;
    if (pt_console_check_view("replay", view) < 0)
        return 2;
    char record[PATH_CAP], dir[PATH_CAP];
    pt_inputs_run_paths(run, record, dir, sizeof record);
    pt_error err = {0};
    pt_record *rec = NULL;
    pt_inputs in = {0};
    pt_source *src = NULL;
    if ((rc = pt_replay_load(record, &rec, &err)) < 0 ||
        (rc = pt_inputs_from_record(rec, dir, -1, &in, &err)) < 0) {
        fprintf(stderr, "pipetop replay: %s\n", err.msg);
        pt_record_free(&rec);
        pt_inputs_release(&in);
        return 1;
    }
    if (pt_source_replay_new(rec, speed, paused, to_end, &src) < 0) {
        fprintf(stderr, "pipetop replay: out of memory\n");
        pt_record_free(&rec);
        pt_inputs_release(&in);
        return 1;
    }
    pt_console_opts co = {.plan = in.plan,
                          .profile = in.profile,
                          .topology = in.topo,
                          .model_name = in.spec ? in.spec->name : NULL,
                          .source = src,
                          .start_view = view,
                          .theme = theme,
                          .no_mouse = no_mouse,
                          .exit_after_s = exit_after,
                          .run_dir = dir};
    rc = pt_console_run(&co, &err);
    if (rc < 0)
        fprintf(stderr, "pipetop replay: %s\n", err.msg);
    pt_inputs_release(&in);
    return rc < 0 ? 1 : 0;
}

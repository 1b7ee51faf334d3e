/* pipetop demo: the whole product on this machine alone. Plans
 * fmnist-mlp-deep for 4 local CPU agents with the DAPPLE planner (analytic
 * profile of devices/cpu-local.json, topology local-cpu-4), spawns the agents,
 * trains on Fashion-MNIST and opens the console on the timeline view. */
#include <stdio.h>
#include <string.h>

#include "protocol/datadir.h"
#include "protocol/model.h"
#include "tui/cmd_console.h"
#include "protocol/opts.h"
#include "tui/commands.h"
#include "tui/console.h"
#include "tui/live.h"

#define DEMO_MODEL    "fmnist-mlp-deep"
#define DEMO_TOPOLOGY "local-cpu-4"
#define DEMO_PLANNER  "dapple"
#define DEMO_AGENTS   4
#define DEMO_GLOBAL   64
#define PATH_CAP      4096

static const char usage_text[] =
    "usage: pipetop demo [--data D] [--steps N] [--planner NAME] [--theme NAME]\n"
    "                    [--view plan|timeline|stats|agents] [--run-dir DIR]\n"
    "Plans " DEMO_MODEL " for 4 local CPU agents with the DAPPLE planner, spawns\n"
    "the agents (pipetop-agent), trains on Fashion-MNIST and opens the console on\n"
    "the timeline view. In the plan view, edit the plan and press A to apply it:\n"
    "the run checkpoints, stops, and resumes under the new plan at the same step.\n"
    "q stops the agents and quits. The run is recorded in runs/<time>/ (replay it\n"
    "with pipetop replay, export it with pipetop export).\n";

int pt_cmd_demo(int argc, char **argv)
{
    const char *data = "fashion-mnist", *planner = DEMO_PLANNER, *theme = NULL, *view = "timeline",
               *run_dir = NULL;
    int64_t steps = 0;
    double exit_after = 0;
    int no_mouse = 0;
    pt_opt opts[] = {
        {"data", PT_OPT_STRING, &data, 0, 0, 0, "D",
         "fashion-mnist (default), synthetic, or a path"},
        {"steps", PT_OPT_INT64, &steps, 0, 1e12, 0, "N",
         "stop after N steps (default: train until q)"},
        {"planner", PT_OPT_STRING, &planner, 0, 0, 0, "NAME",
         "planner for the first plan (default dapple)"},
        {"theme", PT_OPT_STRING, &theme, 0, 0, 0, "NAME",
         "colour theme (a file or a name in themes/)"},
        {"view", PT_OPT_STRING, &view, 0, 0, 0, "V",
         "view to start in: plan, timeline (default), stats or agents"},
        {"run-dir", PT_OPT_STRING, &run_dir, 0, 0, 0, "DIR",
         "record the run there (default runs/<time>/)"},
        {"no-mouse", PT_OPT_FLAG, &no_mouse, 0, 0, 0, NULL, "ignore the mouse"},
        {"exit-after", PT_OPT_DOUBLE, &exit_after, 0, 86400, 0, "X",
         "quit after X seconds (scripted runs; 0: never)"},
    };
    int rc = pt_opts_command("demo", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    pt_view start = PT_VIEW_TIMELINE;
    if (pt_console_parse_view(view, &start) < 0) {
        fprintf(stderr, "pipetop demo: --view: unknown view \"%s\"\n", view);
        return 2;
    }
    pt_error err = {0};
    pt_model_spec *spec = NULL;
    pt_topology *topo = NULL;
    pt_profile *prof = NULL;
    pt_plan *plan = NULL;
    pt_source *src = NULL;
    char path[PATH_CAP];
    if ((rc = pt_model_spec_find(DEMO_MODEL, &spec, &err)) < 0 ||
        (rc = pt_datadir_find("topologies", DEMO_TOPOLOGY, ".json", path, sizeof path, &err)) < 0 ||
        (rc = pt_topology_load(path, &topo, &err)) < 0 ||
        (rc = pt_console_analytic_profile(spec, PT_CONSOLE_MB_MIN, &prof, &err)) < 0 ||
        (rc = pt_console_plan_with(planner, prof, topo, DEMO_GLOBAL, &plan, &err)) < 0)
        goto out;
    /* the profile's micro-batch is only its unit; re-derive at the plan's size
     * so the shown bars are for the micro-batches that run */
    if (plan->microbatch_size != prof->microbatch) {
        pt_profile_free(&prof);
        if ((rc = pt_console_analytic_profile(spec, plan->microbatch_size, &prof, &err)) < 0)
            goto out;
    }
    pt_live_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.plan = plan;
    lo.model = spec;
    lo.data = data;
    lo.expect_agents = DEMO_AGENTS > topo->device_count ? topo->device_count : DEMO_AGENTS;
    lo.spawn = 1;
    lo.run_dir = run_dir;
    lo.steps = steps;
    if ((rc = pt_source_live_new(&lo, &src, &err)) < 0)
        goto out;
    char prof_path[PATH_CAP + 32];
    snprintf(prof_path, sizeof prof_path, "%.4000s/profile.json", pt_source_live_run_dir(src));
    pt_profile_save(prof, prof_path, NULL);
    /* beside the record, so pipetop replay predicts with what the demo used */
    snprintf(prof_path, sizeof prof_path, "%.4000s/topology.json", pt_source_live_run_dir(src));
    pt_topology_save(topo, prof_path, NULL);
    pt_console_opts co = {plan,  prof,  topo, spec->name, src,
                          start, theme, NULL, no_mouse,   exit_after};
    src = NULL;
    rc = pt_console_run(&co, &err);
out:
    if (rc < 0)
        fprintf(stderr, "pipetop demo: %s\n", err.msg[0] ? err.msg : pt_strerror(rc));
    pt_source_close(&src);
    pt_plan_free(&plan);
    pt_profile_free(&prof);
    pt_topology_free(&topo);
    pt_model_spec_free(&spec);
    return rc < 0 ? 1 : 0;
}

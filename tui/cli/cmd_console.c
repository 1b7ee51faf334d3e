/* pipetop [console] [options]: the console on a plan (simulation only), or
 * waiting for agents (--agents N / --listen). */
#include <stdio.h>

#include "protocol/opts.h"
#include "tui/cli/commands.h"
#include "tui/cli/launch.h"

#define DEFAULT_MODEL    "fmnist-mlp-deep"
#define DEFAULT_TOPOLOGY "local-cpu-4"
#define DEFAULT_DEVICE   "cpu-local"
#define DEFAULT_PLANNER  "dapple"
#define DEFAULT_GLOBAL   64
#define DEFAULT_MB       16
#define GLOBAL_MAX       (1 << 20)

static const char console_usage[] =
    "usage: pipetop [console] [--model M] [--topology T] [--profile P] [--plan P]\n"
    "               [--planner NAME] [--global-batch N] [--agents N | --listen EP]\n"
    "               [--theme NAME] [--view plan|timeline|stats|agents] [--no-mouse]\n"
    "The console: edit a plan and watch the simulator's prediction update as you\n"
    "edit (plan view), see its timeline, and with --agents/--listen watch agents\n"
    "started elsewhere (pipetop-agent --console EP). Defaults: model " DEFAULT_MODEL ",\n"
    "topology " DEFAULT_TOPOLOGY ", an analytic profile on " DEFAULT_DEVICE
    ", planned with " DEFAULT_PLANNER "\n"
    "at a global batch of " PT_OPTS_STR(DEFAULT_GLOBAL) ". Press ? in the console for every key.\n";

int pt_cmd_console(int argc, char **argv)
{
    const char *model = DEFAULT_MODEL, *topology = DEFAULT_TOPOLOGY, *profile = NULL,
               *plan_path = NULL, *planner = DEFAULT_PLANNER, *theme = NULL, *view = "plan",
               *listen = NULL, *data = "fashion-mnist", *observe = NULL;
    int global = DEFAULT_GLOBAL, no_mouse = 0, agents = 0, readonly = 0;
    double exit_after = 0;
    pt_opt opts[] = {
        {"model", PT_OPT_STRING, &model, 0, 0, 0, "M",
         "model spec: a path or a name in models/ (default " DEFAULT_MODEL ")"},
        {"topology", PT_OPT_STRING, &topology, 0, 0, 0, "T",
         "topology JSON, or a name in topologies/ (default " DEFAULT_TOPOLOGY ")"},
        {"profile", PT_OPT_STRING, &profile, 0, 0, 0, "P",
         "profile JSON (default: analytic, on " DEFAULT_DEVICE ")"},
        {"plan", PT_OPT_STRING, &plan_path, 0, 0, 0, "P",
         "start from this plan JSON instead of planning"},
        {"planner", PT_OPT_STRING, &planner, 0, 0, 0, "NAME",
         "planner for the first plan (default " DEFAULT_PLANNER ")"},
        {"global-batch", PT_OPT_INT, &global, 1, GLOBAL_MAX, 0, "N",
         "global batch size to plan for (default " PT_OPTS_STR(DEFAULT_GLOBAL) ")"},
        {"theme", PT_OPT_STRING, &theme, 0, 0, 0, "NAME",
         "colour theme (a file or a name in themes/)"},
        {"view", PT_OPT_STRING, &view, 0, 0, 0, "V",
         "view to start in: plan (default), timeline, stats or agents"},
        {"no-mouse", PT_OPT_FLAG, &no_mouse, 0, 0, 0, NULL, "ignore the mouse"},
        {"agents", PT_OPT_INT, &agents, 1, 4096, 0, "N",
         "wait for N agents to register, then run the plan on them"},
        {"listen", PT_OPT_STRING, &listen, 0, 0, 0, "EP",
         "control endpoint to bind (default tcp://127.0.0.1:*)"},
        {"data", PT_OPT_STRING, &data, 0, 0, 0, "D",
         "with --agents: data set (default fashion-mnist)"},
        {"exit-after", PT_OPT_DOUBLE, &exit_after, 0, 86400, 0, "X",
         "quit after X seconds (scripted runs; 0: never)"},
        {"readonly", PT_OPT_FLAG, &readonly, 0, 0, 0, NULL,
         "monitoring only: no plan edits, no apply & restart (q still quits)"},
        {"observe", PT_OPT_STRING, &observe, 0, 0, 0, "DIR",
         "watch a PyTorch run live (read-only): needs --plan and --profile;\n"
         "run the training with PIPETOP_OBSERVE=DIR (docs/torch.md)"},
    };
    int rc = pt_opts_command("console", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             console_usage, NULL);
    if (rc >= 0)
        return rc;
    pt_console_launch_opts lo = {0};
    lo.model = model;
    lo.topology = topology;
    lo.local_devices =
        agents > 0 && !pt_opts_find(opts, (int)(sizeof opts / sizeof opts[0]), "topology")->seen
            ? agents
            : 0;
    lo.profile = profile;
    lo.plan = plan_path;
    lo.planner = planner;
    lo.global = global;
    lo.unit_mb = DEFAULT_MB;
    lo.live = agents > 0 || listen || observe;
    lo.observe = observe;
    lo.spawn = observe != NULL;
    if (observe && !pt_opts_find(opts, (int)(sizeof opts / sizeof opts[0]), "topology")->seen)
        lo.topology = NULL; /* a local topology of the plan's devices */
    lo.agents = agents;
    lo.listen = listen;
    lo.data = data;
    lo.theme = theme;
    lo.no_mouse = no_mouse;
    lo.exit_after = exit_after;
    lo.readonly = readonly;
    lo.view = view;
    return pt_console_launch_cmd("console", &lo);
}

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
    pt_console_launch_opts lo = {0};
    lo.model = DEFAULT_MODEL;
    lo.topology = DEFAULT_TOPOLOGY;
    lo.planner = DEFAULT_PLANNER;
    lo.global = DEFAULT_GLOBAL;
    lo.unit_mb = DEFAULT_MB;
    lo.data = "fashion-mnist";
    lo.calibrate_after = PT_LIVE_CAL_STEPS;
    lo.view = "plan";
    pt_opt opts[] = {
        PT_CONSOLE_COMMON_OPTS(lo, "plan"),
        {"model", PT_OPT_STRING, &lo.model, 0, 0, 0, "M",
         "model spec: a path or a name in models/ (default " DEFAULT_MODEL ")"},
        {"topology", PT_OPT_STRING, &lo.topology, 0, 0, 0, "T",
         "topology JSON, or a name in topologies/ (default " DEFAULT_TOPOLOGY ")"},
        {"profile", PT_OPT_STRING, &lo.profile, 0, 0, 0, "P",
         "profile JSON (default: analytic, on " DEFAULT_DEVICE ")"},
        {"plan", PT_OPT_STRING, &lo.plan, 0, 0, 0, "P",
         "start from this plan JSON instead of planning"},
        {"global-batch", PT_OPT_INT, &lo.global, 1, GLOBAL_MAX, 0, "N",
         "global batch size to plan for (default " PT_OPTS_STR(DEFAULT_GLOBAL) ")"},
        {"agents", PT_OPT_INT, &lo.agents, 1, 4096, 0, "N",
         "wait for N agents to register, then run the plan on them"},
        {"listen", PT_OPT_STRING, &lo.listen, 0, 0, 0, "EP",
         "control endpoint to bind (default tcp://127.0.0.1:*)"},
        {"readonly", PT_OPT_FLAG, &lo.readonly, 0, 0, 0, NULL,
         "monitoring only: no plan edits, no apply & restart (q still quits)"},
        {"observe", PT_OPT_STRING, &lo.observe, 0, 0, 0, "DIR",
         "watch a PyTorch run live (read-only): needs --plan and --profile;\n"
         "run the training with PIPETOP_OBSERVE=DIR (docs/torch.md)"},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = pt_opts_command("console", argc, argv, opts, n, console_usage, NULL);
    if (rc >= 0)
        return rc;
    int topology_given = pt_opts_find(opts, n, "topology")->seen;
    lo.local_devices = lo.agents > 0 && !topology_given ? lo.agents : 0;
    lo.live = lo.agents > 0 || lo.listen || lo.observe;
    lo.spawn = lo.observe != NULL;
    if (lo.observe && !topology_given)
        lo.topology = NULL; /* a local topology of the plan's devices */
    return pt_console_launch_cmd("console", &lo);
}

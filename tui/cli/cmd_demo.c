/* pipetop demo: the whole product on this machine alone. Plans
 * fmnist-mlp-deep (or --model) for 4 local CPU agents with the DAPPLE planner
 * (analytic profile of devices/cpu-local.json, topology local-cpu-4), spawns
 * the agents, trains on Fashion-MNIST and opens the console on the timeline
 * view. --simulate: simulated agents, one per device of the plan on
 * --topology (e.g. GPT-3 on cluster-128x8), with an optional straggler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/opts.h"
#include "tui/cli/commands.h"
#include "tui/cli/inputs.h"
#include "tui/cli/launch.h"

#define DEMO_MODEL    "fmnist-mlp-deep"
#define DEMO_TOPOLOGY "local-cpu-4"
#define DEMO_PLANNER  "dapple"
#define DEMO_AGENTS   4
#define DEMO_GLOBAL   64

static const char usage_text[] =
    "usage: pipetop demo [--data D] [--steps N] [--planner NAME] [--theme NAME]\n"
    "                    [--view plan|timeline|stats|agents] [--run-dir DIR]\n"
    "                    [--topology T] [--model M] [--device D] [--precision P]\n"
    "                    [--simulate [--straggler K:PCT:STEP] [--fail K:STEP]]\n"
    "Plans " DEMO_MODEL " for 4 local CPU agents with the DAPPLE planner, spawns\n"
    "the agents (pipetop-agent), trains on Fashion-MNIST and opens the console on\n"
    "the timeline view (--topology: on its devices instead, GPU agents for its\n"
    "\"compute\": \"cuda:N\" devices). In the plan view, edit the plan and press A\n"
    "to apply it: the run checkpoints, stops, and resumes under the new plan at the\n"
    "same step.\n"
    "--simulate: simulated agents instead, one per device of the plan, playing the\n"
    "simulator's timeline in real time; e.g. GPT-3 on 1,008 of 1,024 A100s:\n"
    "  pipetop demo --simulate --model gpt3 --topology cluster-128x8 \\\n"
    "               --device a100-80gb --precision bf16 --straggler 5:50:2\n"
    "(on the default cpu-local device, one GPT-3 step lasts days).\n"
    "q stops the agents and quits. The run is recorded in runs/<time>/ (replay it\n"
    "with pipetop replay, export it with pipetop export).\n";

int pt_cmd_demo(int argc, char **argv)
{
    pt_console_launch_opts lo = {0};
    lo.model = DEMO_MODEL;
    lo.topology = DEMO_TOPOLOGY;
    lo.planner = DEMO_PLANNER;
    lo.global = DEMO_GLOBAL;
    lo.unit_mb = PT_INPUTS_MB_MIN;
    lo.live = 1;
    lo.spawn = 1;
    lo.agents = DEMO_AGENTS;
    lo.data = "fashion-mnist";
    lo.calibrate_after = PT_LIVE_CAL_STEPS;
    lo.view = "timeline";
    pt_opt opts[] = {
        PT_CONSOLE_COMMON_OPTS(lo, "timeline"),
        {"steps", PT_OPT_INT64, &lo.steps, 0, 1e12, 0, "N",
         "stop after N steps (default: train until q)"},
        {"run-dir", PT_OPT_STRING, &lo.run_dir, 0, 0, 0, "DIR",
         "record the run there (default runs/<time>/)"},
        {"topology", PT_OPT_STRING, &lo.topology, 0, 0, 0, "T",
         "devices to start the agents on, at most 4 (default " DEMO_TOPOLOGY
         "; devices with\n\"compute\": \"cuda:N\" get GPU agents; with --simulate, every\n"
         "device of the plan)"},
        {"model", PT_OPT_STRING, &lo.model, 0, 0, 0, "M",
         "model spec: a path or a name in models/ (default " DEMO_MODEL ";\n"
         "one that trains here must fit this machine: others with --simulate)"},
        {"device", PT_OPT_STRING, &lo.device, 0, 0, 0, "D",
         "the device the analytic profile is of (a name in devices/ or a\n"
         "file; default cpu-local): what the simulated agents' ops last"},
        {"precision", PT_OPT_STRING, &lo.precision, 0, 0, 0, "P",
         "the analytic profile's precision: fp32 (default), tf32, bf16, ..."},
        {"simulate", PT_OPT_FLAG, &lo.simulate, 0, 0, 0, NULL,
         "simulated agents (pipetop-agent --simulate), one per device of the\n"
         "plan, on synthetic data: the simulator's timings, nothing trained"},
        {"straggler", PT_OPT_STRING, &lo.sim_straggler, 0, 0, 0, "K:PCT:STEP",
         "with --simulate: the agent of the plan's device K is PCT percent\n"
         "slower from step STEP on (a straggler for the console to mark)"},
        {"fail", PT_OPT_STRING, &lo.sim_fail, 0, 0, 0, "K:STEP",
         "with --simulate: the agent of the plan's device K fails when it\n"
         "reaches step STEP (the run fails, saying which agent and why)"},
    };
    int rc = pt_opts_command("demo", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    if ((lo.sim_straggler || lo.sim_fail) && !lo.simulate) {
        fprintf(stderr, "pipetop demo: --%s goes with --simulate (see pipetop demo --help)\n",
                lo.sim_straggler ? "straggler" : "fail");
        return 2;
    }
    if (lo.simulate) {
        lo.agents = 0; /* one per device of the plan */
        lo.data = "synthetic";
    }
    /* the demo runs for hours: its record is compressed (docs/formats.md,
     * "Compression") unless the environment says otherwise */
    setenv("PT_RECORD_COMPRESS", "1", 0);
    return pt_console_launch_cmd("demo", &lo);
}

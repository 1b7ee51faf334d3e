#include "tui/cli/commands.h"

#include <stddef.h>

/* One line per command; a new command is a file and a line here. */
const pt_command pt_commands[] = {
    {"train", pt_cmd_train, "train a model on this machine (single device)"},
    {"profile", pt_cmd_profile, "measure each layer's forward/backward time and memory"},
    {"import-profile", pt_cmd_import_profile, "convert a PipeDream graph.txt profile to JSON"},
    {"export-profile", pt_cmd_export_profile, "write a profile in PipeDream's graph.txt format"},
    {"plan", pt_cmd_plan, "choose stages, replication and placement with a planner; --compare"},
    {"sim", pt_cmd_sim, "predict a plan's iteration time, bubbles and memory; ASCII timeline"},
    {"validate", pt_cmd_validate, "check a model spec, profile, topology or plan file"},
    {"run", pt_cmd_run, "train a plan with one agent process per stage replica (distributed)"},
    {"calibrate", pt_cmd_calibrate, "fit a profile (and links) to what a recorded run measured"},
    {"export", pt_cmd_export, "write a run's timeline as a Chrome trace (Perfetto) or an SVG"},
    {"console", pt_cmd_console, "the console: edit a plan, watch its timeline (the default)"},
    {"demo", pt_cmd_demo, "plan, spawn 4 local agents, train Fashion-MNIST, watch it live"},
    {"replay", pt_cmd_replay, "play a recorded run in the console (speed, pause, step)"},
    {"status", pt_cmd_status, "one snapshot of a run from its record (--json for scripts)"},
    {"import-trace", pt_cmd_import_trace,
     "a PyTorch run's profiler traces (one per rank) as a run folder to replay"},
    {"export-plan", pt_cmd_export_plan,
     "write a plan for torch.distributed.pipelining, torchtitan, DeepSpeed or Megatron"},
    {"keys", pt_cmd_keys, "make a CURVE key pair (NAME.key, NAME.pub) for authenticated runs"},
    {NULL, NULL, NULL},
};

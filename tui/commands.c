#include "tui/commands.h"

#include <stddef.h>

/* One line per command; a new command is a file and a line here. */
const pt_command pt_commands[] = {
    {"train", pt_cmd_train, "train a model on this machine (single device)"},
    {"profile", pt_cmd_profile, "measure each layer's forward/backward time and memory"},
    {"import-profile", pt_cmd_import_profile, "convert a PipeDream graph.txt profile to JSON"},
    {"export-profile", pt_cmd_export_profile, "write a profile in PipeDream's graph.txt format"},
    {"sim", pt_cmd_sim, "predict a plan's iteration time, bubbles and memory; ASCII timeline"},
    {"validate", pt_cmd_validate, "check a model spec, profile, topology or plan file"},
    {"run", pt_cmd_run, "train a plan with one agent process per stage replica (distributed)"},
    {"export", pt_cmd_export, "write a run's timeline as a Chrome trace (Perfetto) or an SVG"},
    {NULL, NULL, NULL},
};

#include "tui/commands.h"

#include <stddef.h>

/* One line per command; a new command is a file and a line here. */
const pt_command pt_commands[] = {
    {"validate", pt_cmd_validate, "check a model spec, profile, topology or plan file"},
    {NULL, NULL, NULL},
};

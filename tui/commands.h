/* Sub-commands of the pipetop program. Each lives in tui/cmd_<name>.c, takes
 * argv as main does (argv[0] is the command name), prints its own --help,
 * and returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef PT_TUI_COMMANDS_H
#define PT_TUI_COMMANDS_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"

typedef struct pt_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line for `pipetop --help` */
} pt_command;

/* The table of commands, ended by an entry with name NULL. */
extern const pt_command pt_commands[];

int pt_cmd_train(int argc, char **argv);
int pt_cmd_profile(int argc, char **argv);
/* What `pipetop profile` records of top-level layer `layer` of spec at
 * micro-batch size `batch`, read off the arena of a net of that layer alone:
 * *saved, the bytes one micro-batch's forward keeps for its backward besides
 * its input and output (the slot's growth less those two), and *scratch, the
 * net's backward scratch. Returns 0 or the net's error (err says which). */
int pt_profile_measure_memory(const pt_model_spec *spec, int layer, int batch, int64_t *saved,
                              int64_t *scratch, pt_error *err);
/* `pipetop profile --analytic ...`; pt_cmd_profile hands over on --analytic. */
int pt_cmd_profile_analytic(int argc, char **argv);
int pt_cmd_plan(int argc, char **argv);
int pt_cmd_sim(int argc, char **argv);
int pt_cmd_import_profile(int argc, char **argv);
int pt_cmd_export_profile(int argc, char **argv);
int pt_cmd_validate(int argc, char **argv);
/* `pipetop run`: a distributed run with local agents (tui/cmd_run.c). */
int pt_cmd_run(int argc, char **argv);

/* Console commands (tui/cmd_export.c, tui/cmd_console.c). */
int pt_cmd_export(int argc, char **argv);
int pt_cmd_console(int argc, char **argv);
int pt_cmd_demo(int argc, char **argv);
int pt_cmd_replay(int argc, char **argv);
int pt_cmd_status(int argc, char **argv);

#endif

/* Sub-commands of the pipetop program. Each lives in tui/cli/cmd_<name>.c, takes
 * argv as main does (argv[0] is the command name), prints its own --help,
 * and returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef PT_TUI_COMMANDS_H
#define PT_TUI_COMMANDS_H

typedef struct pt_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line for `pipetop --help` */
} pt_command;

/* The table of commands, ended by an entry with name NULL. */
extern const pt_command pt_commands[];

int pt_cmd_train(int argc, char **argv);
int pt_cmd_profile(int argc, char **argv);
/* `pipetop profile --analytic ...`; pt_cmd_profile hands over on --analytic. */
int pt_cmd_profile_analytic(int argc, char **argv);
/* `pipetop profile --torch ...` (tui/cli/cmd_profile_torch.c); likewise. */
int pt_cmd_profile_torch(int argc, char **argv);
int pt_cmd_plan(int argc, char **argv);
int pt_cmd_sim(int argc, char **argv);
int pt_cmd_import_profile(int argc, char **argv);
int pt_cmd_export_profile(int argc, char **argv);
int pt_cmd_validate(int argc, char **argv);
/* `pipetop run`: a distributed run with local agents (tui/cli/cmd_run.c). */
int pt_cmd_run(int argc, char **argv);
/* `pipetop keys`: a CURVE key pair (tui/cli/cmd_keys.c). */
int pt_cmd_keys(int argc, char **argv);
/* `pipetop import-trace`: profiler traces as a run (tui/cli/cmd_import_trace.c). */
int pt_cmd_import_trace(int argc, char **argv);
/* `pipetop export-plan`: a plan for a PyTorch framework (tui/cli/cmd_export_plan.c). */
int pt_cmd_export_plan(int argc, char **argv);
/* `pipetop calibrate`: fit a profile to a run record (tui/cli/cmd_calibrate.c). */
int pt_cmd_calibrate(int argc, char **argv);

/* Console commands (tui/cli/cmd_console.c, cmd_demo.c, cmd_replay.c,
 * cmd_status.c; the export of a record, tui/cli/cmd_export.c). */
int pt_cmd_export(int argc, char **argv);
int pt_cmd_console(int argc, char **argv);
int pt_cmd_demo(int argc, char **argv);
int pt_cmd_replay(int argc, char **argv);
int pt_cmd_status(int argc, char **argv);

#endif

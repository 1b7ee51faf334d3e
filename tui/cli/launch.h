/* Starting the console from the command line, shared by `pipetop console`
 * (tui/cli/cmd_console.c) and `pipetop demo` (tui/cli/cmd_demo.c): inputs
 * resolved by tui/cli/inputs.h, then a simulated or live source. */
#ifndef PT_TUI_CLI_LAUNCH_H
#define PT_TUI_CLI_LAUNCH_H

#include <stdint.h>

#include "protocol/error.h"

/* What pt_console_launch sets up: inputs by name or path, and where training
 * comes from (none: the simulator only; live: agents, spawned or external). */
typedef struct pt_console_launch_opts {
    const char *model;    /* path or name in models/ */
    const char *topology; /* path or name in topologies/ (ignored with local_devices) */
    int local_devices;    /* > 0: a local topology of this many devices instead */
    const char *profile;  /* NULL: analytic on cpu-local, re-derived at the plan's micro-batch */
    const char *plan;     /* NULL: plan with `planner` at `global` samples */
    const char *planner;
    int global;
    int unit_mb;         /* micro-batch of the analytic profile the planner plans with */
    int live;            /* 1: a live source (agents); 0: the simulator only */
    int spawn;           /* live: start `agents` local agents (else await external ones) */
    int agents;          /* live: agents to spawn or await (0: one per plan device) */
    const char *listen;  /* live: control endpoint to bind (NULL: loopback, ephemeral) */
    const char *data;    /* live: data set */
    const char *run_dir; /* live: record folder (NULL: runs/<time>/) */
    int64_t steps;       /* live: stop after this many steps (0: until q) */
    const char *view;    /* the view to start in, by name */
    const char *theme;
    int no_mouse;
    double exit_after;
    int readonly; /* --readonly: monitoring only (pt_console_opts.readonly) */
    /* --observe DIR: watch a PyTorch run (docs/torch.md): plan and profile
     * as given (both required; model is not read), agents spawned to relay
     * the run's Monitors from DIR (made mode 0700), read-only. NULL: not. */
    const char *observe;
} pt_console_launch_opts;

/* Loads or derives model, topology, profile and plan, checks the plan
 * against them, starts the source and runs the console until it quits. A
 * live run saves the profile and topology beside its record. 0, or a
 * negative code with err naming the input at fault. */
int pt_console_launch(const pt_console_launch_opts *o, pt_error *err);

/* A command's whole tail: checks lo->view names a view, launches, and prints
 * a failure as "pipetop CMD: ...". Returns the exit status (0, 1, or 2 for
 * an unknown view). */
int pt_console_launch_cmd(const char *cmd, pt_console_launch_opts *lo);

/* 0 when the console has a view named `name`, else -1 after saying so as
 * "pipetop CMD: --view: unknown view". */
int pt_console_check_view(const char *cmd, const char *name);

#endif

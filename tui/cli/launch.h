/* Starting the console from the command line, shared by `pipetop console`
 * (tui/cli/cmd_console.c) and `pipetop demo` (tui/cli/cmd_demo.c): inputs
 * resolved by tui/cli/inputs.h, then a simulated or live source. */
#ifndef PT_TUI_CLI_LAUNCH_H
#define PT_TUI_CLI_LAUNCH_H

#include <stdint.h>

#include "protocol/error.h"
#include "tui/record/live.h" /* PT_LIVE_CAL_STEPS */

/* What pt_console_launch sets up: inputs by name or path, and where training
 * comes from (none: the simulator only; live: agents, spawned or external). */
typedef struct pt_console_launch_opts {
    const char *model;    /* path or name in models/ */
    const char *topology; /* path or name in topologies/ (ignored with local_devices) */
    int local_devices;    /* > 0: a local topology of this many devices instead */
    const char *profile;  /* NULL: analytic on cpu-local, re-derived at the plan's micro-batch */
    /* the analytic profile's device (path or name in devices/) and precision
     * (protocol/precision.h's names); NULL: cpu-local, fp32 */
    const char *device, *precision;
    const char *plan; /* NULL: plan with `planner` at `global` samples */
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
    int readonly;            /* --readonly: monitoring only (pt_console_opts.readonly) */
    int64_t calibrate_after; /* live: steps before a generation is calibrated (0: never) */
    /* --observe DIR: watch a PyTorch run (docs/torch.md): plan and profile
     * as given (both required; model is not read), agents spawned to relay
     * the run's Monitors from DIR (made mode 0700), read-only. NULL: not. */
    const char *observe;
    int simulate; /* live, spawn: simulated agents (pipetop-agent --simulate), one per device */
    /* simulate: agent K (the plan's device index K) PCT % slower from step
     * STEP on, "K:PCT:STEP" (pipetop-agent --straggler); NULL: none */
    const char *sim_straggler;
    /* simulate: agent K fails when it reaches step STEP, "K:STEP"
     * (pipetop-agent --fail); NULL: none */
    const char *sim_fail;
} pt_console_launch_opts;

/* The options `pipetop console` and `pipetop demo` both take, bound to the
 * fields of lo (a pt_console_launch_opts variable in scope): one table, put
 * inside each command's pt_opt initializer, with the literal default of
 * --view for its help. lo.view, lo.data and lo.planner hold the command's
 * defaults before the options are parsed (lo.calibrate_after
 * PT_LIVE_CAL_STEPS, tui/record/live.h); lo.theme, lo.no_mouse and
 * lo.exit_after start at zero. */
// clang-format off
#define PT_CONSOLE_COMMON_OPTS(lo, view_default)                                                   \
    {"planner", PT_OPT_STRING, &(lo).planner, 0, 0, 0, "NAME",                                     \
     "planner for the first plan (default dapple)"},                                               \
    {"data", PT_OPT_STRING, &(lo).data, 0, 0, 0, "D",                                              \
     "live runs: fashion-mnist (default), synthetic, or a path"},                                  \
    {"theme", PT_OPT_STRING, &(lo).theme, 0, 0, 0, "NAME",                                         \
     "colour theme (a file or a name in themes/)"},                                                \
    {"view", PT_OPT_STRING, &(lo).view, 0, 0, 0, "V",                                              \
     "view to start in: plan, timeline, stats or agents (default " view_default ")"},              \
    {"no-mouse", PT_OPT_FLAG, &(lo).no_mouse, 0, 0, 0, NULL, "ignore the mouse"},                  \
    {"exit-after", PT_OPT_DOUBLE, &(lo).exit_after, 0, 86400, 0, "X",                              \
     "quit after X seconds (scripted runs; 0: never)"},                                            \
    {"calibrate-after", PT_OPT_INT64, &(lo).calibrate_after, 0, 1e12, 0, "N",                      \
     "live runs: fit the cost model after N steps of each generation\n"                            \
     "(default " PT_OPTS_STR(PT_LIVE_CAL_STEPS) "; 0: never)"}
// clang-format on

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

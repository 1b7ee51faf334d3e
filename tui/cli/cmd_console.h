/* Helpers shared by the console's commands (tui/cmd_console.c) and the demo
 * (tui/cmd_demo.c): the inputs a console needs when only a model is given. */
#ifndef PT_TUI_CMD_CONSOLE_H
#define PT_TUI_CMD_CONSOLE_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"

/* Smallest micro-batch the console's planners consider: the analytic cost
 * model has no per-op overhead, so left alone it picks micro-batches of one
 * sample, which real CPU agents run far slower than predicted and which no
 * timeline can label. */
#define PT_CONSOLE_MB_MIN 8

/* An analytic profile of spec on devices/cpu-local.json at micro-batch mb.
 * *out owns a new profile. */
int pt_console_analytic_profile(const pt_model_spec *spec, int mb, pt_profile **out, pt_error *err);

/* One node of `devices` CPU devices sharing this machine's memory, linked as
 * pipetop run charges loopback ZeroMQ. NULL on no memory. */
pt_topology *pt_console_local_topology(int devices);

/* Runs planner on (prof, topo) at a global batch, with micro-batches of at
 * least PT_CONSOLE_MB_MIN samples when the global batch allows. */
int pt_console_plan_with(const char *planner, const pt_profile *prof, const pt_topology *topo,
                         int global, pt_plan **out, pt_error *err);

/* Finds the plan, model, profile and topology a record was run with: the
 * plan of generation gen (gen < 0: the first; past the last: the last) and
 * the model recorded with it; the run folder dir's profile.json, else an
 * analytic one; its topology.json, else a local topology with one device
 * per plan device. A record without a plan leaves *plan NULL and returns 0. */
int pt_console_record_inputs(pt_record *rec, const char *dir, int64_t gen, pt_plan **plan,
                             pt_model_spec **spec, pt_profile **prof, pt_topology **topo,
                             pt_error *err);

/* The view named `name` ("plan", "timeline", "stats", "agents") into *out;
 * 0, or -1 for an unknown name (*out untouched). */
int pt_console_parse_view(const char *name, const char **out);

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
    const char *view;
    const char *theme;
    int no_mouse;
    double exit_after;
    int readonly; /* --readonly: monitoring only (pt_console_opts.readonly) */
} pt_console_launch_opts;

/* Loads or derives model, topology, profile and plan, checks the plan
 * against them, starts the source and runs the console until it quits. A
 * live run saves the profile and topology beside its record. 0, or a
 * negative code with err naming the input at fault. */
int pt_console_launch(const pt_console_launch_opts *o, pt_error *err);

/* A command's whole tail: parses `view` into lo->view, launches, and prints
 * a failure as "pipetop CMD: ...". Returns the exit status (0, 1, or 2 for
 * an unknown view). */
int pt_console_launch_cmd(const char *cmd, const char *view, pt_console_launch_opts *lo);

#endif

/* Helpers shared by the console's commands (tui/cmd_console.c) and the demo
 * (tui/cmd_demo.c): the inputs a console needs when only a model is given. */
#ifndef PT_TUI_CMD_CONSOLE_H
#define PT_TUI_CMD_CONSOLE_H

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tui/layout.h"

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

/* The view named `name` ("plan", "timeline", "stats", "agents") into *out;
 * 0, or -1 for an unknown name (*out untouched). */
int pt_console_parse_view(const char *name, pt_view *out);

#endif

/* The plan view's editing model, pure (no ncurses): a plan being edited
 * against a profile and a topology, re-simulated after every edit.
 *
 * Every edit is applied to a copy, checked (structure, devices, schedule
 * program, simulation, memory) and only then made current, so an invalid
 * edit changes nothing and comes back as a negative PT_E* code with err
 * saying why in words a status line can show ("stage 1 would have no
 * layers", "no free device for another replica of stage 2"). An edit that
 * makes a plan that fits memory stop fitting is refused (PT_ENOFIT); when the
 * plan already does not fit (loaded that way), edits are allowed so the user
 * can repair it.
 *
 * Simulation reuses the editor's buffers: an edit of a 100-layer model
 * re-simulates in well under PT_PLAN_EDIT_BUDGET_MS
 * (bench/plan_edit_speed.c measures it). */
#ifndef PT_TUI_PLAN_EDIT_H
#define PT_TUI_PLAN_EDIT_H

#include <stdint.h>

#include "planner/cost.h"
#include "planner/planner.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/error.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

#define PT_PLAN_EDIT_BUDGET_MS 50 /* re-simulation time an edit may take */
#define PT_PLAN_EDIT_UNDO_MAX  64 /* plans kept for undo */

typedef struct pt_plan_edit pt_plan_edit;

/* Starts editing a copy of plan. profile and topo are borrowed and must
 * outlive the editor. The first plan is accepted even if it does not fit
 * memory (pt_plan_edit_fits says so); a plan whose structure, devices or
 * schedule are invalid is refused. On failure *out is NULL. */
int pt_plan_edit_new(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                     pt_plan_edit **out, pt_error *err);
/* NULL-safe; sets *e_p = NULL. */
void pt_plan_edit_free(pt_plan_edit **e_p);
/* Predicts with other costs from now on (a calibrated profile and its
 * topology, tui/record/live.h): copies both (the editor owns the copies) and
 * re-simulates the current plan; undo history is kept. Refused, leaving the
 * editor as it was, when the profile's layer count or the topology's devices
 * do not fit the current plan. */
int pt_plan_edit_set_costs(pt_plan_edit *e, const pt_profile *profile, const pt_topology *topo,
                           pt_error *err);

/* The current plan, program and simulation (owned by the editor, valid until
 * the next successful edit). */
const pt_plan *pt_plan_edit_plan(const pt_plan_edit *e);
const pt_program *pt_plan_edit_program(const pt_plan_edit *e);
const pt_sim_result *pt_plan_edit_result(const pt_plan_edit *e);
const pt_profile *pt_plan_edit_profile(const pt_plan_edit *e);
const pt_topology *pt_plan_edit_topology(const pt_plan_edit *e);
const pt_cost *pt_plan_edit_cost(const pt_plan_edit *e);
/* 1 when every stage replica fits its device's memory. */
int pt_plan_edit_fits(const pt_plan_edit *e);
/* Counts successful edits (and undos): views redraw when it changes. */
uint64_t pt_plan_edit_version(const pt_plan_edit *e);
/* Wall-clock seconds the last check and simulation took. */
double pt_plan_edit_last_sim_s(const pt_plan_edit *e);

/* Per stage: the largest peak memory among its replicas and the smallest
 * device memory among them; the mean busy fraction of its replicas. */
typedef struct pt_plan_stage_info {
    int64_t peak_bytes, limit_bytes;
    pt_mem peak; /* by category, of the replica with the largest total */
    double busy_frac;
} pt_plan_stage_info;
/* 0, or PT_EINVAL for a stage out of range. */
int pt_plan_edit_stage_info(const pt_plan_edit *e, int stage, pt_plan_stage_info *out);
/* Stage that holds `layer`, or -1. */
int pt_plan_edit_stage_of_layer(const pt_plan_edit *e, int layer);

/* ---- edits: 0, or a negative PT_E* code with err saying why (plan unchanged) */

/* Moves boundary b (between stages b-1 and b, 1 <= b < S) by delta layers
 * (negative: towards layer 0). */
int pt_plan_edit_move_boundary(pt_plan_edit *e, int b, int delta, pt_error *err);
/* Moves boundary b to lie just before layer `layer` (mouse drag). */
int pt_plan_edit_set_boundary(pt_plan_edit *e, int b, int layer, pt_error *err);
/* Cuts the stage holding `layer` so that a new stage starts at it; the new
 * stage gets a free device (PT_ENOTFOUND when none is free). */
int pt_plan_edit_split(pt_plan_edit *e, int layer, pt_error *err);
/* Removes boundary b: stages b-1 and b merge and keep stage b-1's devices. */
int pt_plan_edit_merge(pt_plan_edit *e, int b, pt_error *err);
/* +1: adds a replica of `stage` on a free device (same node first); -1:
 * drops its last replica (refused below 1). */
int pt_plan_edit_replicas(pt_plan_edit *e, int stage, int delta, pt_error *err);
/* Puts replica r of stage s on device d; when d is used by another replica
 * the two swap devices. */
int pt_plan_edit_place(pt_plan_edit *e, int stage, int replica, int device, pt_error *err);
/* Sets the schedule kind (policy and vertical sync kept). A kind that takes
 * model chunks per device (interleaved) re-cuts the layers into S·v chunks on
 * the same devices, v the plan's when it has a valid one, else the kind's
 * fewest; leaving such a kind re-cuts them into one stage per device. */
int pt_plan_edit_schedule(pt_plan_edit *e, pt_sched_kind kind, pt_error *err);
/* Sets the schedule kind and nothing else: every stage boundary, replica
 * and the micro-batching stay (policy and vertical sync kept for the kinds
 * that read them). A kind the plan cannot run as it is cut (interleaved on
 * a plan of one stage per device, or a one-chunk kind on an interleaved
 * plan) is refused with the reason and what re-cuts it (pt_plan_edit_schedule,
 * pt_plan_edit_chunks), as is one the checks refuse; the plan is then
 * unchanged. */
int pt_plan_edit_kind(pt_plan_edit *e, pt_sched_kind kind, pt_error *err);
/* Sets v, the model chunks per device, re-cutting the layers (pt_plan_rechunk):
 * PT_EUNSUPP when the kind takes no chunks, PT_EINVAL when v is outside its
 * range or the layers are fewer than S·v; the plan is unchanged on error. */
int pt_plan_edit_chunks(pt_plan_edit *e, int v, pt_error *err);
/* Sets the dapple policy ('A' or 'B'); PT_EUNSUPP when the schedule kind
 * reads no policy. */
int pt_plan_edit_policy(pt_plan_edit *e, char policy, pt_error *err);
/* Toggles pipedream's vertical sync; PT_EUNSUPP when the kind reads none. */
int pt_plan_edit_toggle_vsync(pt_plan_edit *e, pt_error *err);
/* Toggles recomputation of a stage. */
int pt_plan_edit_toggle_recompute(pt_plan_edit *e, int stage, pt_error *err);
/* Sets micro-batch size and count (each >= 1). */
int pt_plan_edit_microbatch(pt_plan_edit *e, int size, int count, pt_error *err);
/* Changes the split of the global batch and keeps the global batch:
 * size_dir > 0 doubles the micro-batch size, < 0 halves it (the count
 * follows); else count_dir > 0 / < 0 moves to the next larger / smaller
 * count that divides the global batch (the size follows). PT_EINVAL with
 * the reason when no such split exists; the plan is then unchanged. */
int pt_plan_edit_resplit(pt_plan_edit *e, int size_dir, int count_dir, pt_error *err);
/* Replaces the whole plan (a planner's result); same checks as an edit. */
int pt_plan_edit_replace(pt_plan_edit *e, const pt_plan *plan, pt_error *err);
/* Goes back to the plan before the last edit; PT_ESTATE when there is none. */
int pt_plan_edit_undo(pt_plan_edit *e, pt_error *err);

/* Predicts a plan without making it current: its iteration time in
 * seconds (PT_E* code when it cannot be simulated). */
int pt_plan_edit_predict(pt_plan_edit *e, const pt_plan *plan, double *iter_s, pt_error *err);

/* What running a planner gave: the planner's plan is made current when it
 * passes the checks; gain = (old - new) / old of the predicted iteration time
 * at the same global batch. */
typedef struct pt_plan_edit_gain {
    double old_iter_s, new_iter_s, gain;
    double old_throughput, new_throughput;
    pt_planner_report report;
} pt_plan_edit_gain;

/* Runs planner `name` on the editor's profile and topology at the current
 * global batch (micro-batch size x count) and fills the plan with its result;
 * dapple and gpipe may choose any synchronous kind (gain->report.kinds lists
 * each kind's simulated time and peak memory).
 * PT_ENOTFOUND for an unknown planner; the planner's own errors otherwise. */
int pt_plan_edit_run_planner(pt_plan_edit *e, const char *name, pt_plan_edit_gain *gain,
                             pt_error *err);

#endif

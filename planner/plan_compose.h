/* What pt_planner_run composes around a planner's own search (planner.c
 * calls these; no planner calls another). Internal to planner/. */
#ifndef PT_PLANNER_PLAN_COMPOSE_H
#define PT_PLANNER_PLAN_COMPOSE_H

#include "planner/planner.h"

/* pipedream's fallback when no weight-stashing plan fits (the pipedream
 * planner returned PT_ENOFIT with report->stash_need_bytes and
 * stash_need_proven set): plans PipeDream-2BW (the 2bw planner) and
 * PipeDream-Flush (dapple's search relabelled 1f1b-flush), simulates both
 * and keeps the faster that fits; report->fallback holds both rows. Same
 * contract as a planner (pt_planner_fn); report must not be NULL. */
int pc_pipedream_fallback(const pt_profile *profile, const pt_topology *topo, int global_batch,
                          const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                          pt_error *err);

/* The data-parallel floor: plans pure data parallelism on the same devices
 * (the dp planner) and returns it instead of the planner's plan *out when
 * that is not PT_PLANNER_DP_MARGIN faster by the simulator (report->iter_s,
 * which every planner sets to the simulated time of its plan), or when the
 * planner found nothing that fits (rc PT_ENOFIT; err then keeps its message
 * unless data parallelism fits). Fills report's dp_* fields and appends the
 * comparison to report->why. rc is the planner's result; returns the final
 * result (0, or rc when data parallelism gives nothing better, or PT_ENOMEM). */
int pc_dp_floor(const pt_profile *profile, const pt_topology *topo, int global_batch,
                const pt_planner_opts *opts, int rc, pt_plan **out, pt_planner_report *report,
                pt_error *err);

#endif

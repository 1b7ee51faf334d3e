/* Interleaved placement from a plan (docs/architecture.md "Several model
 * chunks per device"): the same devices, pipeline rank d keeping the replicas
 * of the plan's rank d, with the layers cut afresh into S·v balanced chunks,
 * chunk c of rank d being stage d + c·S. Used where a user picks the
 * interleaved kind for a partition planned without it (`pipetop sim
 * --compare-schedules`, `pipetop run --schedule interleaved --chunks v`), and
 * back (v = 1) to compare other kinds with an interleaved plan. */
#ifndef PT_PLANNER_INTERLEAVE_H
#define PT_PLANNER_INTERLEAVE_H

#include "planner/cost.h"
#include "protocol/plan.h"

/* Writes to *out a new plan with pt_plan_rank_count(plan)·v stages: the
 * layers cut into that many contiguous chunks minimising the slowest chunk's
 * forward + backward time on the cost model (each rank's device speed), then
 * (v > 1) cuts moved one layer at a time while that lowers the largest sum
 * of a device's chunks (a local optimum, not an exhaustive search),
 * stage s on the replicas (and with the recompute flag) of the plan's stage
 * s % S, schedule `kind` with chunks = v (1 for a kind without
 * PT_SCHED_OPT_CHUNKS), the micro-batching and optimizer copied. Returns 0,
 * or PT_EINVAL with err naming the reason (fewer layers than S·v chunks, v
 * out of range, a kind that does not take chunks given v > 1) or PT_ENOMEM;
 * *out is NULL on error. */
int pt_plan_rechunk(const pt_plan *plan, const pt_cost *cost, pt_sched_kind kind, int v,
                    pt_plan **out, pt_error *err);

#endif

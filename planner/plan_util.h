/* Helpers shared by the planners (planner/plan_*.c): micro-batch candidates,
 * the balanced partition, boundary costs under one link, plan assembly and
 * memory figures through the shared cost model. Internal to planner/; the
 * public face of the planners is planner/planner.h. */
#ifndef PT_PLANNER_PLAN_UTIL_H
#define PT_PLANNER_PLAN_UTIL_H

#include <stdint.h>

#include "protocol/clock.h"
#include "planner/cost.h"
#include "planner/planner.h"
#include "protocol/error.h"
#include "protocol/plan.h"

/* Fills out[0..return) with the candidate micro-batch sizes, ascending:
 * opts' list when given (already checked to divide global_batch), else every
 * divisor of global_batch, thinned to at most `max` (<= PT_PLANNER_MB_CHOICES_MAX)
 * spread evenly in log scale and always keeping the smallest and largest. */
int pu_microbatch_candidates(const pt_planner_opts *opts, int global_batch, int max, int *out);

/* Rows of the largest share when b samples are split over r replicas
 * (pt_sched_rows): ceil(b / r). */
static inline int pu_rows_max(int b, int r)
{
    return (b + r - 1) / r;
}

/* Split-concat transfer of one micro-batch of mb_rows samples across a
 * boundary whose activation is mb_bytes per profile micro-batch, when every
 * source-destination pair uses `link`: the same sum pt_cost_boundary_s
 * charges (each source sends its overlap with each destination in turn; the
 * slowest source's total). O(src_r + dst_r). */
double pu_boundary_s(pt_link link, int src_r, int dst_r, int mb_rows, int64_t mb_bytes,
                     int profile_mb);

/* Exact balanced contiguous partition of layers [0, n) into S non-empty
 * stages, stage s running at speeds[s] (NULL: all 1.0), minimising the
 * slowest stage's time, where a stage's time is its forward + backward (+
 * recompute when recompute is set) per profile micro-batch divided by its
 * speed. Writes cuts[0..S] (cuts[0] = 0, cuts[S] = n) and returns the slowest
 * stage's time in seconds; ties go to the partition with earlier cuts.
 * O(S n log n). Returns a negative PT_E* code (PT_EINVAL when S is outside
 * 1..n, PT_ENOMEM). */
double pu_balanced_partition(const pt_cost *cost, int n, int S, const double *speeds, int recompute,
                             int *cuts, int *rc);

/* Allocates a plan for profile with S stages over layers cuts[0..S], the
 * given schedule, micro-batching and optimizer (no replicas set yet).
 * NULL on no memory. */
pt_plan *pu_plan_alloc(const pt_profile *profile, int S, const int *cuts, pt_sched_kind kind,
                       int mb_size, int mb_count, pt_optim_kind optim);

/* Memory of one replica of stage i (layers [first,last)) of S stages with
 * `rows` samples per micro-batch, through pt_cost_stage_memory. */
int64_t pu_stage_memory(const pt_cost *cost, pt_sched_kind kind, char policy, int S, int i,
                        int first, int last, int rows, int M, int recompute, pt_optim_kind optim);

/* Largest replica memory of the plan (shared model, each replica at its own
 * rows); per_stage (may be NULL) receives each stage's largest. */
int64_t pu_plan_peak_memory(const pt_cost *cost, const pt_plan *plan, int64_t *per_stage);

/* The planners' recomputation rule on a finished plan: each stage recomputes
 * exactly when its largest replica (pt_cost_replica_memory, the plan's kind)
 * exceeds the smallest memory of its devices without recomputation and fits
 * with it. Sets every stage's flag; returns 1 when every stage then fits,
 * 0 when some stage fits neither way. */
int pu_recompute_where_needed(const pt_cost *cost, pt_plan *plan);

/* Appends to report->why which stages of plan recompute and why: their
 * largest replica's analytic memory without recomputation (over its
 * devices' smallest memory) and with it, as ranges over those stages.
 * Nothing when no stage recomputes. The plan is read only (its flags are
 * toggled and restored). NULL-safe in report. */
void pu_why_recompute(pt_planner_report *report, const pt_cost *cost, pt_plan *plan);

/* Smallest device memory among the plan's devices of stage s. */
int64_t pu_stage_min_memory(const pt_topology *topo, const pt_stage *stage);

/* Smallest memory and slowest speed over all devices. */
int64_t pu_topology_min_memory(const pt_topology *topo);
double pu_topology_min_speed(const pt_topology *topo);

/* A deep copy of topo whose every device has memory_bytes of memory;
 * NULL on no memory. Free with pt_topology_free. */
pt_topology *pu_topology_with_memory(const pt_topology *topo, int64_t memory_bytes);

/* Devices per node when every node has the same number, else 0. */
int pu_uniform_node_size(const pt_topology *topo);

/* "1.23 GiB" into buf; returns buf. */
const char *pu_bytes_str(int64_t bytes, char *buf, int cap);

/* Appends printf text to report->why (truncating). NULL-safe. */
void pu_why(pt_planner_report *report, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Fills the report header fields. NULL-safe. */
void pu_report_begin(pt_planner_report *report, const char *planner, const char *objective);

/* Error for "nothing fits": sets err to PT_ENOFIT with a message naming the
 * planner, the limit and the smallest memory per device a plan of its space
 * needs (`needed`, or "unknown" when <= 0); records it in report (may be NULL). */
int pu_error_nofit(pt_error *err, pt_planner_report *report, const char *planner, int64_t limit,
                   int64_t needed, const char *detail);

#endif

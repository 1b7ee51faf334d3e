/* The shared latency model of a synchronous pipeline plan: DAPPLE's
 * warm-up / steady / ending critical path with the bounds the early-backward
 * order adds (planner/latency.c derives each term). dapple's search
 * minimises it, gpipe orders its candidates by it, and the tests compare it
 * with the simulator; planners call it here, not in each other.
 * Internal to planner/. */
#ifndef PT_PLANNER_LATENCY_H
#define PT_PLANNER_LATENCY_H

#include "planner/cost.h"
#include "protocol/error.h"
#include "protocol/plan.h"
#include "protocol/topology.h"

/* The longest critical path of plan's iteration:
 *   max over pivots p and stages e <= p of
 *     sum_{v<p} F_v + core_p + sum_{e<=v<p} B_v + AR_e + OPT_e
 * over units (stages and the boundaries between them; a boundary is
 * intra-node when both stages sit on one node, otherwise costed at the
 * inter-node link), with core_p = M (F_p + B_p), and for a stage also at least
 * (q+1) RT_p + rho (F_p + B_p) where RT_p is its round trip (its F + B and
 * everything after it), M - 1 = q K_p + rho and K_p its in-flight
 * micro-batches under the plan's schedule and policy (pt_cost_inflight;
 * rho F_p when q = 0), bounds on the end of its last forward and on the drain
 * after its first backward (which waits for the warm-up forwards of every
 * stage from it to the last); plus, for each stage s > 0 and e < s, the path
 * through s's communication lane: sum_{v<=s} F_v + M (activation send of s +
 * gradient send of s to s-1) + sum_{e<=v<s} B_v + AR_e. Optimizer:
 * plan->optimizer. Returns 0 and *latency_s, or PT_EINVAL (err names the
 * stage) when the plan does not match the cost model, PT_ENOMEM. If
 * pivot/ending are not NULL they receive the pivot unit (2s: stage s, 2s+1:
 * boundary s -> s+1) and the stage e of the longest path. O(S^2). */
int pt_latency_critical_path(const pt_cost *cost, const pt_plan *plan, double *latency_s,
                             int *pivot, int *ending, pt_error *err);

/* Communication-to-computation ratio of a plan: the mean boundary transfer
 * (the slower direction) over the mean of a stage's (F + B) / 2; 0 for one
 * stage. What DAPPLE reads to prefer policy B. */
double pt_latency_comm_ratio(const pt_cost *cost, const pt_plan *plan);

/* Whether every replica of stages a and b sits on one node. */
int pt_latency_same_node(const pt_topology *topo, const pt_stage *a, const pt_stage *b);

/* The stage's slowest device (its replicas' smallest speed; the first on a tie). */
int pt_latency_slowest_device(const pt_topology *topo, const pt_stage *stage);

/* Lower bound on the end of a stage's last backward from the early-backward
 * order alone, for a stage with F + B = w, forward F, round trip RT (its w
 * and everything after it) and K micro-batches in flight: micro-batch j + K
 * starts only after j's backward, so j = qK + rho starts after q round trips;
 * once past warm-up, consecutive forwards are a forward and a backward apart
 * (rho more steps of w; of F inside warm-up); its own round trip ends it. */
static inline double pt_latency_loop_bound(int M, int K, double RT, double w, double F)
{
    int q = (M - 1) / K, rho = (M - 1) % K;
    return (q + 1) * RT + rho * (q > 0 ? w : F);
}

#endif

/* GPipe's partition: S contiguous stages, one device each, balanced.
 *
 * Objective: the slowest stage's forward + backward time per micro-batch
 * (stage s on device s, at its speed), minimised exactly by
 * pu_balanced_partition. The micro-batch count and recomputation are then
 * chosen for the smallest iteration latency (pt_planner_dapple_latency, the
 * critical path, which for GPipe's all-forward-then-all-backward order gives
 * the same (M+S-1)(F+B) for equal stages) among those whose M in-flight
 * micro-batches fit memory; without recomputation when both fit equally. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/plan_util.h"
#include "planner/planner.h"

int pt_planner_gpipe(const pt_profile *profile, const pt_topology *topo, int global_batch,
                     const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                     pt_error *err)
{
    *out = NULL;
    double t0 = pu_now_s();
    pu_report_begin(report, "gpipe", "slowest stage: forward + backward per micro-batch");
    int N = profile->layer_count, G = topo->device_count;
    int S = opts->stages > 0 ? opts->stages : (N < G ? N : G);
    if (S > N || S > G)
        return pt_error_set(err, PT_EINVAL, "gpipe: stages: %d stages for %d layers on %d devices",
                            S, N, G);
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    double *speeds = malloc((size_t)S * sizeof *speeds);
    int *cuts = malloc((size_t)(S + 1) * sizeof *cuts);
    if (!speeds || !cuts) {
        rc = pt_error_set(err, PT_ENOMEM, "gpipe: out of memory");
        goto out;
    }
    for (int s = 0; s < S; s++)
        speeds[s] = topo->devices[s].speed;
    pu_balanced_partition(cost, N, S, speeds, 0, cuts, &rc);
    if (rc < 0) {
        rc = pt_error_set(err, rc, "gpipe: partition failed");
        goto out;
    }
    int mbs[PT_PLANNER_MB_CHOICES_MAX];
    int nmb = pu_microbatch_candidates(opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, mbs);
    pt_plan *best = NULL;
    double best_L = INFINITY;
    int64_t need = INT64_MAX;
    for (int c = 0; c < nmb; c++) {
        for (int rec = 0; rec <= 1; rec++) {
            pt_plan *p = pu_plan_alloc(profile, S, cuts, PT_SCHED_GPIPE, mbs[c],
                                       global_batch / mbs[c], opts->optim);
            if (!p) {
                pt_plan_free(&best);
                rc = pt_error_set(err, PT_ENOMEM, "gpipe: out of memory");
                goto out;
            }
            int fits = 1;
            int64_t peak = 0;
            for (int s = 0; s < S && p; s++) {
                p->stages[s].recompute = rec;
                if (pt_plan_set_replicas(p, s, &s, 1) < 0)
                    pt_plan_free(&p);
            }
            if (!p) {
                pt_plan_free(&best);
                rc = pt_error_set(err, PT_ENOMEM, "gpipe: out of memory");
                goto out;
            }
            for (int s = 0; s < S; s++) {
                int64_t m = pu_stage_memory(cost, PT_SCHED_GPIPE, 'A', S, s, cuts[s], cuts[s + 1],
                                            mbs[c], p->microbatch_count, rec, opts->optim);
                if (m > peak)
                    peak = m;
                if (m > topo->devices[s].memory_bytes)
                    fits = 0;
            }
            if (peak < need)
                need = peak;
            double L = INFINITY;
            if (fits)
                pt_planner_dapple_latency(cost, p, &L, NULL, NULL, NULL);
            if (fits && L < best_L) {
                best_L = L;
                pt_plan_free(&best);
                best = p;
            } else {
                pt_plan_free(&p);
            }
        }
    }
    if (!best) {
        rc = pu_error_nofit(err, report, "gpipe", pu_topology_min_memory(topo), need,
                            "every micro-batch size tried, with and without recomputation, "
                            "exceeds it");
        goto out;
    }
    if (report) {
        double slow = 0;
        for (int s = 0; s < S; s++) {
            double t = pt_cost_fwd_s(cost, cuts[s], cuts[s + 1], best->microbatch_size, s) +
                       pt_cost_bwd_s(cost, cuts[s], cuts[s + 1], best->microbatch_size, s);
            if (t > slow)
                slow = t;
        }
        report->objective_s = slow;
        report->iter_s = best_L;
        report->peak_memory_bytes = pu_plan_peak_memory(cost, best, NULL);
        pu_why(report,
               "%d stages balanced on forward+backward (slowest %.3f ms per micro-batch "
               "of %d); M=%d%s; layers",
               S, slow * 1e3, best->microbatch_size, best->microbatch_count,
               best->stages[0].recompute ? " with recomputation (M micro-batches in flight)" : "");
        for (int s = 0; s < S; s++)
            pu_why(report, " [%d,%d)", cuts[s], cuts[s + 1]);
    }
    *out = best;
    rc = 0;
out:
    if (report)
        report->search_s = pu_now_s() - t0;
    free(speeds);
    free(cuts);
    pt_cost_free(&cost);
    return rc;
}

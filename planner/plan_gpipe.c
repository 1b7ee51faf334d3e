/* GPipe's partition: S contiguous stages, one device each, balanced.
 *
 * Objective: the slowest stage's forward + backward time per micro-batch
 * (stage s on device s, at its speed), minimised exactly by
 * pu_balanced_partition. The micro-batch count and recomputation are then
 * chosen for the smallest simulated iteration time among those whose M
 * in-flight micro-batches fit memory (without recomputation on a tie):
 * candidates are simulated in the order of their critical-path bound
 * (pt_latency_critical_path, which for equal stages is (M+S-1)(F+B) and
 * never exceeds the simulated time) until the bound reaches the best
 * simulated time. Finally the partition is compared under every synchronous
 * kind the options allow (plan_score.h), and the fastest that fits is kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/latency.h"
#include "planner/plan_score.h"
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
    /* every (micro-batch size, recomputation) that fits, with its closed form */
    pt_plan *cand[2 * PT_PLANNER_MB_CHOICES_MAX];
    double bound[2 * PT_PLANNER_MB_CHOICES_MAX];
    int nc = 0;
    int64_t need = INT64_MAX;
    for (int c = 0; c < nmb; c++) {
        for (int rec = 0; rec <= 1; rec++) {
            pt_plan *p = pu_plan_alloc(profile, S, cuts, PT_SCHED_GPIPE, mbs[c],
                                       global_batch / mbs[c], opts->optim);
            for (int s = 0; s < S && p; s++) {
                p->stages[s].recompute = rec;
                if (pt_plan_set_replicas(p, s, &s, 1) < 0)
                    pt_plan_free(&p);
            }
            if (!p) {
                rc = pt_error_set(err, PT_ENOMEM, "gpipe: out of memory");
                goto out_cand;
            }
            /* it fits when one of the kinds allowed fits (the simulator decides which) */
            int fits = 0;
            for (int k = 0; k < pt_sched_kind_count(); k++) {
                if (!pu_kind_allowed(opts->kinds, k, PT_SCHED_GPIPE) ||
                    !pt_sched_info_of((pt_sched_kind)k))
                    continue;
                for (int pol = 0; pol < (pt_sched_kind_has(k, PT_SCHED_OPT_POLICY) ? 2 : 1);
                     pol++) {
                    int64_t peak = 0;
                    int ok = 1;
                    for (int s = 0; s < S; s++) {
                        int64_t m = pu_stage_memory(cost, (pt_sched_kind)k, pol ? 'B' : 'A', S, s,
                                                    cuts[s], cuts[s + 1], mbs[c],
                                                    p->microbatch_count, rec, opts->optim);
                        if (m > peak)
                            peak = m;
                        if (m > topo->devices[s].memory_bytes)
                            ok = 0;
                    }
                    fits |= ok;
                    if (peak < need)
                        need = peak;
                }
            }
            double L = INFINITY;
            if (fits && pt_latency_critical_path(cost, p, &L, NULL, NULL, NULL) == 0) {
                /* insertion by bound; earlier candidates first on a tie */
                int j = nc++;
                while (j > 0 && bound[j - 1] > L) {
                    cand[j] = cand[j - 1];
                    bound[j] = bound[j - 1];
                    j--;
                }
                cand[j] = p;
                bound[j] = L;
            } else {
                pt_plan_free(&p);
            }
        }
    }
    if (nc == 0) {
        rc = pu_error_nofit(err, report, "gpipe", pu_topology_min_memory(topo), need,
                            "every micro-batch size tried, with and without recomputation, "
                            "exceeds it");
        goto out;
    }
    /* simulated in the order of the critical path (pu_pick) */
    pu_scorer sc;
    if (pu_scorer_init(&sc, cost) < 0) {
        rc = pt_error_set(err, PT_ENOMEM, "gpipe: out of memory");
        goto out_cand;
    }
    double best_T = INFINITY;
    int simulated = 0;
    int bi =
        pu_pick(&sc, cand, bound, nc, opts->kinds, PT_SCHED_GPIPE, report, &best_T, &simulated);
    pu_scorer_release(&sc);
    if (bi < 0) {
        rc = pt_error_set(err, bi, "gpipe: simulating the candidates failed");
        goto out_cand;
    }
    pt_plan *best = cand[bi];
    double best_L = bound[bi];
    int ncand = nc;
    for (int i = 0; i < nc; i++)
        if (i != bi)
            pt_plan_free(&cand[i]);
    nc = 0;
    if (report) {
        double slow = 0;
        for (int s = 0; s < S; s++) {
            double t = pt_cost_fwd_s(cost, cuts[s], cuts[s + 1], best->microbatch_size, s) +
                       pt_cost_bwd_s(cost, cuts[s], cuts[s + 1], best->microbatch_size, s);
            if (t > slow)
                slow = t;
        }
        report->objective_s = slow;
        report->iter_s = best_T;
        report->bound_s = best_L;
        report->peak_memory_bytes = pu_plan_peak_memory(cost, best, NULL);
        report->evaluated = simulated;
        pu_why(report,
               "%d stages balanced on forward+backward (slowest %.3f ms per micro-batch "
               "of %d); M=%d%s; layers",
               S, slow * 1e3, best->microbatch_size, best->microbatch_count,
               best->stages[0].recompute ? " with recomputation (M micro-batches in flight)" : "");
        for (int s = 0; s < S; s++)
            pu_why(report, " [%d,%d)", cuts[s], cuts[s + 1]);
        pu_why(report,
               "; M and recomputation by simulated iteration time (%d of %d candidates "
               "simulated, critical-path bound %.3f ms)",
               simulated, ncand, best_L * 1e3);
        pu_why_kinds(report);
    }
    *out = best;
    rc = 0;
    goto out;
out_cand:
    for (int i = 0; i < nc; i++)
        pt_plan_free(&cand[i]);
out:
    if (report)
        report->search_s = pu_now_s() - t0;
    free(speeds);
    free(cuts);
    pt_cost_free(&cost);
    return rc;
}

/* PipeDream-2BW's planner: w equal pipelines of depth d (d * w = devices),
 * each stage replicated w times (split-concat), two weight versions,
 * gradients coalesced over M >= d micro-batches.
 *
 * Search: every depth d dividing the device count (d <= layers), two
 * placements (stage-major: a stage's replicas on adjacent devices, so its
 * all-reduce stays inside a node; pipeline-major: a pipeline's stages on
 * adjacent devices, so its transfers do), every candidate micro-batch size
 * (>= w; M = global batch / size >= d) and recomputation off/on. Layers are
 * split by the exact balanced partition of forward + backward (+ recompute).
 * Memory per replica is the shared model's (two versions of the stage's
 * weights, optimizer state, min(d-i, M) micro-batches of activations, or the
 * stage inputs plus one micro-batch with recomputation); a candidate that
 * exceeds any device is dropped.
 * Objective: the steady-state iteration time
 *   T = M * max_s max(F_s + B_s (+ R_s), sends_s) + max_s (AR_s + OPT_s)
 * where sends_s is stage s's communication lane per micro-batch (activation
 * to s+1 and gradient to s-1, split-concat, pt_cost_boundary_s) and AR_s the
 * part of the bucketed ring all-reduce of its weights over its w replicas
 * that outlasts the window's last backward, which it overlaps
 * (pt_cost_overlapped_bwd_allreduce_s); throughput = global
 * batch / T is maximised (T minimised), recomputation off on a tie. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/plan_util.h"
#include "planner/planner.h"

enum { LAYOUT_STAGE_MAJOR, LAYOUT_PIPELINE_MAJOR, LAYOUT_COUNT };
static const char *const layout_name[LAYOUT_COUNT] = {"stage-major", "pipeline-major"};

static inline int64_t imin64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int device_of(int layout, int d, int w, int s, int p)
{
    return layout == LAYOUT_STAGE_MAJOR ? s * w + p : p * d + s;
}

/* Steady-state time of one iteration for a plan with replicas set. */
static double iter_time(const pt_cost *cost, const pt_topology *topo, const pt_plan *p)
{
    int S = p->stage_count, M = p->microbatch_count, b = p->microbatch_size;
    const pt_profile *pr = pt_cost_profile(cost);
    double step = 0, tail = 0;
    for (int s = 0; s < S; s++) {
        const pt_stage *st = &p->stages[s];
        int slow = st->replicas[0];
        for (int r = 1; r < st->replica_count; r++)
            if (topo->devices[st->replicas[r]].speed < topo->devices[slow].speed)
                slow = st->replicas[r];
        int rows = pu_rows_max(b, st->replica_count);
        double c = pt_cost_fwd_s(cost, st->first, st->last, rows, slow) +
                   pt_cost_bwd_s(cost, st->first, st->last, rows, slow);
        if (st->recompute)
            c += pt_cost_recompute_s(cost, st->first, st->last, rows, slow);
        double sends = 0;
        if (s + 1 < S)
            sends += pt_cost_boundary_s(cost, st->replicas, st->replica_count,
                                        p->stages[s + 1].replicas, p->stages[s + 1].replica_count,
                                        b, pr->layers[st->last - 1].act_bytes);
        if (s > 0)
            sends += pt_cost_boundary_s(cost, st->replicas, st->replica_count,
                                        p->stages[s - 1].replicas, p->stages[s - 1].replica_count,
                                        b, pr->layers[st->first - 1].act_bytes);
        double lane = fmax(c, sends);
        if (lane > step)
            step = lane;
        int64_t P = pt_cost_param_bytes(cost, st->first, st->last);
        /* bucketed, overlapping the window's last backward: the part that outlasts it */
        double ar = pt_cost_overlapped_bwd_allreduce_s(cost, st->replicas, st->replica_count,
                                                       st->first, st->last, rows, slow, 0) -
                    pt_cost_bwd_s(cost, st->first, st->last, rows, slow) +
                    pt_cost_opt_step_s(cost, P, p->optimizer.kind, slow);
        if (ar > tail)
            tail = ar;
    }
    return M * step + tail;
}

int pt_planner_2bw(const pt_profile *profile, const pt_topology *topo, int global_batch,
                   const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                   pt_error *err)
{
    *out = NULL;
    double t0 = pu_now_s();
    pu_report_begin(report, "2bw",
                    "steady-state iteration time (maximises throughput) under the memory limit");
    int N = profile->layer_count, G = topo->device_count;
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    int mbs[PT_PLANNER_MB_CHOICES_MAX];
    int nmb = pu_microbatch_candidates(opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, mbs);
    int *cuts = malloc((size_t)(N + 1) * sizeof *cuts);
    int *devs = malloc((size_t)G * sizeof *devs);
    double *speeds = malloc((size_t)G * sizeof *speeds);
    uint8_t *rcs = malloc((size_t)G);
    pt_plan *best = NULL;
    double best_T = INFINITY;
    int best_layout = 0;
    int64_t need = INT64_MAX;
    long long evaluated = 0;
    if (!cuts || !devs || !speeds || !rcs) {
        rc = pt_error_set(err, PT_ENOMEM, "2bw: out of memory");
        goto out;
    }
    for (int d = 1; d <= G && d <= N; d++) {
        if (G % d)
            continue;
        int w = G / d;
        for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
            if (layout == LAYOUT_PIPELINE_MAJOR && (d == 1 || w == 1))
                continue; /* the same devices as stage-major */
            for (int s = 0; s < d; s++) {
                speeds[s] = INFINITY;
                for (int p = 0; p < w; p++)
                    speeds[s] = fmin(speeds[s], topo->devices[device_of(layout, d, w, s, p)].speed);
            }
            for (int rec = 0; rec <= 1; rec++) {
                pu_balanced_partition(cost, N, d, speeds, rec, cuts, &rc);
                if (rc < 0) {
                    rc = pt_error_set(err, rc, "2bw: partition failed");
                    goto out;
                }
                for (int c = 0; c < nmb; c++) {
                    int b = mbs[c], M = global_batch / b;
                    if (b < w || M < d)
                        continue;
                    evaluated++;
                    /* rec: the partition balanced for recomputation, and each stage
                     * recomputes when it does not fit otherwise (only then: it is slower) */
                    int64_t peak = 0;
                    int fits = 1;
                    for (int s = 0; s < d; s++) {
                        int64_t lim = INT64_MAX;
                        for (int p = 0; p < w; p++)
                            lim = imin64(lim,
                                         topo->devices[device_of(layout, d, w, s, p)].memory_bytes);
                        int64_t m = 0;
                        rcs[s] = 0;
                        for (int r = 0; r <= rec; r++) {
                            m = pu_stage_memory(cost, PT_SCHED_2BW, 'A', d, s, cuts[s], cuts[s + 1],
                                                pu_rows_max(b, w), M, r, opts->optim);
                            rcs[s] = (uint8_t)r;
                            if (m <= lim)
                                break;
                        }
                        if (m > peak)
                            peak = m;
                        if (m > lim)
                            fits = 0;
                    }
                    if (peak < need)
                        need = peak;
                    if (!fits)
                        continue;
                    pt_plan *pl = pu_plan_alloc(profile, d, cuts, PT_SCHED_2BW, b, M, opts->optim);
                    for (int s = 0; s < d && pl; s++) {
                        for (int p = 0; p < w; p++)
                            devs[p] = device_of(layout, d, w, s, p);
                        pl->stages[s].recompute = rcs[s];
                        if (pt_plan_set_replicas(pl, s, devs, w) < 0)
                            pt_plan_free(&pl);
                    }
                    if (!pl) {
                        rc = pt_error_set(err, PT_ENOMEM, "2bw: out of memory");
                        goto out;
                    }
                    double T = iter_time(cost, topo, pl);
                    if (T < best_T) {
                        best_T = T;
                        best_layout = layout;
                        pt_plan_free(&best);
                        best = pl;
                    } else {
                        pt_plan_free(&pl);
                    }
                }
            }
        }
    }
    if (!best) {
        if (need == INT64_MAX)
            rc = pt_error_set(err, PT_EINVAL,
                              "2bw: no depth x width with a micro-batch size of at least w "
                              "samples and M >= d micro-batches among the sizes tried");
        else
            rc = pu_error_nofit(err, report, "2bw", pu_topology_min_memory(topo), need,
                                "every depth x width, micro-batch size and recomputation choice "
                                "exceeds it");
        goto out;
    }
    if (report) {
        int d = best->stage_count, w = best->stages[0].replica_count;
        report->objective_s = best_T;
        report->iter_s = best_T;
        report->peak_memory_bytes = pu_plan_peak_memory(cost, best, NULL);
        report->evaluated = evaluated;
        int nrc = 0;
        for (int s = 0; s < d; s++)
            nrc += best->stages[s].recompute;
        pu_why(report,
               "depth %d x width %d (%s), micro-batch %d (%d per replica), M=%d, "
               "recomputation %s; %.1f samples/s",
               d, w, layout_name[best_layout], best->microbatch_size,
               pu_rows_max(best->microbatch_size, w), best->microbatch_count,
               nrc == 0   ? "off"
               : nrc == d ? "on"
                          : "on where needed",
               global_batch / best_T);
        pu_why_recompute(report, cost, best);
    }
    *out = best;
    best = NULL;
    rc = 0;
out:
    if (report)
        report->search_s = pu_now_s() - t0;
    pt_plan_free(&best);
    free(cuts);
    free(devs);
    free(speeds);
    free(rcs);
    pt_cost_free(&cost);
    return rc;
}

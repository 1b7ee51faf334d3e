/* Pure data parallelism and Pipe-SGD's width-two variant.
 *
 * One stage holds every layer, replicated on r = min(devices, global batch)
 * devices (0..r-1); a micro-batch of b samples is split over them and M =
 * global batch / b micro-batches accumulate gradients. With the slowest
 * replica's rows ceil(b/r):
 *   t_compute = M (F + B),  t_update = one optimizer step.
 * dp (synchronous, schedule "dapple" with one stage): the gradients are
 * all-reduced in buckets while the last micro-batch's backward runs (DDP's
 * overlap, pt_cost_overlapped_bwd_allreduce_s); t_comm is the part of it that
 * outlasts that backward:
 *   T = t_update + t_compute + t_comm
 * pipesgd (Pipe-SGD, the all-reduce of step t overlapped with step t+1):
 *   t_comm = ring all-reduce of all parameters over the replicas,
 *   T = max(t_update + t_compute, t_comm)
 * The micro-batch size is the one with the smallest T whose activations fit
 * (fewer micro-batches on a tie). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/plan_util.h"
#include "planner/planner.h"

/* The three terms for micro-batch size b on r replicas. */
typedef struct dp_terms {
    double compute, comm, update;
} dp_terms;

static dp_terms terms(const pt_cost *cost, const pt_topology *topo, int r, int b, int M,
                      const int *devs, pt_optim_kind optim, int pipesgd)
{
    int N = pt_cost_profile(cost)->layer_count, slow = devs[0];
    for (int i = 1; i < r; i++)
        if (topo->devices[devs[i]].speed < topo->devices[slow].speed)
            slow = devs[i];
    int rows = pu_rows_max(b, r);
    int64_t P = pt_cost_param_bytes(cost, 0, N);
    dp_terms t;
    t.compute = M * (pt_cost_fwd_s(cost, 0, N, rows, slow) + pt_cost_bwd_s(cost, 0, N, rows, slow));
    if (pipesgd)
        t.comm = pt_cost_allreduce_s(cost, devs, r, P);
    else
        t.comm = pt_cost_overlapped_bwd_allreduce_s(cost, devs, r, 0, N, rows, slow, 0) -
                 pt_cost_bwd_s(cost, 0, N, rows, slow);
    t.update = pt_cost_opt_step_s(cost, P, optim, slow);
    return t;
}

static int plan_dp_kind(const pt_profile *profile, const pt_topology *topo, int global_batch,
                        const pt_planner_opts *opts, int pipesgd, pt_plan **out,
                        pt_planner_report *report, pt_error *err)
{
    *out = NULL;
    const char *name = pipesgd ? "pipesgd" : "dp";
    double t0 = pt_clock_s();
    pu_report_begin(report, name,
                    pipesgd ? "iteration time max(t_update + t_compute, t_comm) (Pipe-SGD)"
                            : "iteration time t_update + t_compute + t_comm (all-reduce overlapped "
                              "with the last backward)");
    int G = topo->device_count, N = profile->layer_count;
    int r = G < global_batch ? G : global_batch;
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    int *devs = malloc((size_t)r * sizeof *devs);
    if (!devs) {
        pt_cost_free(&cost);
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", name);
    }
    for (int i = 0; i < r; i++)
        devs[i] = i;
    int64_t limit = INT64_MAX;
    for (int i = 0; i < r; i++)
        if (topo->devices[i].memory_bytes < limit)
            limit = topo->devices[i].memory_bytes;
    pt_sched_kind kind = pipesgd ? PT_SCHED_PIPESGD : PT_SCHED_DAPPLE;
    int mbs[PT_PLANNER_MB_CHOICES_MAX];
    int nmb = pu_microbatch_candidates(opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, mbs);
    double best_T = INFINITY;
    int best_b = 0;
    dp_terms best_t = {0, 0, 0};
    int64_t need = INT64_MAX;
    for (int c = nmb - 1; c >= 0; c--) {
        int b = mbs[c], M = global_batch / b;
        if (b < r)
            continue; /* every replica needs a row */
        int64_t mem =
            pu_stage_memory(cost, kind, 'A', 1, 0, 0, N, pu_rows_max(b, r), M, 0, opts->optim);
        if (mem < need)
            need = mem;
        if (mem > limit)
            continue;
        dp_terms t = terms(cost, topo, r, b, M, devs, opts->optim, pipesgd);
        double T = pipesgd ? fmax(t.update + t.compute, t.comm) : t.update + t.compute + t.comm;
        if (T < best_T) {
            best_T = T;
            best_b = b;
            best_t = t;
        }
    }
    if (!best_b) {
        free(devs);
        pt_cost_free(&cost);
        if (need == INT64_MAX)
            return pt_error_set(err, PT_EINVAL,
                                "%s: no micro-batch size of at least %d samples (one per device) "
                                "among those tried",
                                name, r);
        return pu_error_nofit(err, report, name, limit, need,
                              "one replica of the whole model with one micro-batch in flight "
                              "exceeds it");
    }
    int cuts[2] = {0, N};
    pt_plan *p = pu_plan_alloc(profile, 1, cuts, kind, best_b, global_batch / best_b, opts->optim);
    if (!p || pt_plan_set_replicas(p, 0, devs, r) < 0) {
        pt_plan_free(&p);
        free(devs);
        pt_cost_free(&cost);
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", name);
    }
    if (report) {
        report->objective_s = best_T;
        report->iter_s = best_T;
        report->peak_memory_bytes = pu_plan_peak_memory(cost, p, NULL);
        report->evaluated = nmb;
        pu_why(report,
               "%d replicas, M=%d micro-batches of %d; t_compute %.3f ms, t_comm %.3f ms, "
               "t_update %.3f ms",
               r, p->microbatch_count, p->microbatch_size, best_t.compute * 1e3, best_t.comm * 1e3,
               best_t.update * 1e3);
        if (pipesgd)
            pu_why(report, "; the all-reduce hides behind the next step's compute%s",
                   best_t.comm > best_t.update + best_t.compute ? " only partly (comm-bound)" : "");
        report->search_s = pt_clock_s() - t0;
    }
    *out = p;
    free(devs);
    pt_cost_free(&cost);
    return 0;
}

int pt_planner_dp(const pt_profile *profile, const pt_topology *topo, int global_batch,
                  const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                  pt_error *err)
{
    return plan_dp_kind(profile, topo, global_batch, opts, 0, out, report, err);
}

int pt_planner_pipesgd(const pt_profile *profile, const pt_topology *topo, int global_batch,
                       const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                       pt_error *err)
{
    return plan_dp_kind(profile, topo, global_batch, opts, 1, out, report, err);
}

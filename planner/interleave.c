/* Interleaved placement from a plan (planner/interleave.h). */
#include "planner/interleave.h"

#include <stdio.h>
#include <stdlib.h>

#include "planner/plan_util.h"

/* Largest and sum of squares of the ranks' loads (each rank the sum of its
 * chunks' forward + backward time) for cuts[0..P·v]. */
static void loads(const double *pre, const int *cuts, int P, int v, double *worst, double *sq)
{
    *worst = *sq = 0;
    for (int d = 0; d < P; d++) {
        double t = 0;
        for (int c = 0; c < v; c++)
            t += pre[cuts[d + c * P + 1]] - pre[cuts[d + c * P]];
        *worst = t > *worst ? t : *worst;
        *sq += t * t;
    }
}

/* A device's load is the sum of its v chunks, which balancing the chunks
 * alone does not even out (VGG-16's few heavy layers land two heavy chunks on
 * one device). Hill-climbs from the balanced chunks: move one cut by one
 * layer while that lowers the largest rank load (then the sum of squares),
 * keeping every chunk non-empty. pre[l] is the time of layers [0, l) at
 * speed 1 (devices of different speeds are not weighed here). Terminates:
 * every accepted move lowers (largest, sum of squares) lexicographically. */
static void even_out_ranks(const double *pre, int *cuts, int P, int v)
{
    int S = P * v;
    double worst, sq;
    loads(pre, cuts, P, v, &worst, &sq);
    for (int improved = 1; improved;) {
        improved = 0;
        for (int i = 1; i < S; i++)
            for (int step = -1; step <= 1; step += 2) {
                int at = cuts[i] + step;
                if (at <= cuts[i - 1] || at >= cuts[i + 1])
                    continue;
                int was = cuts[i];
                cuts[i] = at;
                double w, q;
                loads(pre, cuts, P, v, &w, &q);
                if (w < worst - 1e-15 || (w <= worst + 1e-15 && q < sq - 1e-18)) {
                    worst = w;
                    sq = q;
                    improved = 1;
                } else {
                    cuts[i] = was;
                }
            }
    }
}

int pt_plan_rechunk(const pt_plan *plan, const pt_cost *cost, pt_sched_kind kind, int v,
                    pt_plan **out, pt_error *err)
{
    *out = NULL;
    if (!plan || !cost)
        return pt_error_set(err, PT_EINVAL, "rechunk: a plan and a cost model are required");
    int chunked = pt_sched_kind_has(kind, PT_SCHED_OPT_CHUNKS);
    if (v < 1 || v > PT_PLAN_CHUNKS_MAX || (chunked && v < 2) || (!chunked && v != 1))
        return pt_error_set(err, PT_EINVAL,
                            "chunks: %d model chunks per device for schedule %s (it takes %s)", v,
                            pt_sched_kind_name(kind), chunked ? "2 or more" : "one");
    int P = pt_plan_rank_count(plan), S = P * v, n = plan->layer_count;
    if (P < 1 || S > n)
        return pt_error_set(err, PT_EINVAL,
                            "chunks: %d pipeline ranks x %d chunks is %d chunks, more than the "
                            "model's %d layers",
                            P, v, S, n);
    const pt_topology *topo = pt_cost_topology(cost);
    double *speeds = malloc((size_t)S * sizeof *speeds);
    int *cuts = malloc((size_t)(S + 1) * sizeof *cuts);
    pt_plan *p = pt_plan_new(S);
    int rc = 0;
    if (!speeds || !cuts || !p) {
        rc = pt_error_set(err, PT_ENOMEM, "rechunk: out of memory");
        goto out;
    }
    for (int s = 0; s < S; s++) {
        int d = plan->stages[s % P].replicas[0];
        speeds[s] = d >= 0 && d < topo->device_count ? topo->devices[d].speed : 1.0;
    }
    pu_balanced_partition(cost, n, S, speeds, 0, cuts, &rc);
    if (rc < 0) {
        rc = pt_error_set(err, rc, "rechunk: partition of %d layers into %d chunks failed", n, S);
        goto out;
    }
    if (v > 1) {
        double *pre = malloc((size_t)(n + 1) * sizeof *pre);
        if (!pre) {
            rc = pt_error_set(err, PT_ENOMEM, "rechunk: out of memory");
            goto out;
        }
        pre[0] = 0;
        for (int l = 0; l < n; l++)
            pre[l + 1] = pre[l] + pt_cost_fwd_s(cost, l, l + 1, plan->microbatch_size, -1) +
                         pt_cost_bwd_s(cost, l, l + 1, plan->microbatch_size, -1);
        even_out_ranks(pre, cuts, P, v);
        free(pre);
    }
    snprintf(p->model, sizeof p->model, "%s", plan->model);
    p->layer_count = n;
    p->microbatch_size = plan->microbatch_size;
    p->microbatch_count = plan->microbatch_count;
    p->schedule = kind;
    p->policy = plan->policy;
    p->vertical_sync = plan->vertical_sync;
    p->chunks = v;
    p->optimizer = plan->optimizer;
    for (int s = 0; s < S && rc == 0; s++) {
        const pt_stage *from = &plan->stages[s % P];
        p->stages[s].first = cuts[s];
        p->stages[s].last = cuts[s + 1];
        p->stages[s].recompute = from->recompute;
        if (pt_plan_set_replicas(p, s, from->replicas, from->replica_count) < 0)
            rc = pt_error_set(err, PT_ENOMEM, "rechunk: out of memory");
    }
out:
    free(speeds);
    free(cuts);
    if (rc < 0)
        pt_plan_free(&p);
    *out = p;
    return rc;
}

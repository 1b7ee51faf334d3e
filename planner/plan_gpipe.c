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

/* Which constraint binds when no (micro-batch, recomputation) of S stages
 * fits: GPipe keeps all M micro-batches in flight, so even recomputing, each
 * stage holds its input for the whole global batch (M x b = GBS samples
 * whatever b), beside its weights, gradient and optimizer state; the stage
 * where their sum is largest is named, and when no partition can help (the
 * smallest activation between two layers, for the whole batch, exceeds the
 * memory: every pipeline of two or more stages has a stage receiving at least
 * that) it says so. */
static void nofit_detail(const pt_cost *cost, const int *cuts, int S, int global_batch,
                         pt_optim_kind optim, int64_t memory, char *buf, size_t cap)
{
    int worst = 0;
    int64_t in_w = 0, st_w = 0;
    for (int s = 0; s < S; s++) {
        int64_t in = pt_cost_boundary_bytes(cost, cuts[s], global_batch);
        int64_t P = pt_cost_param_bytes(cost, cuts[s], cuts[s + 1]);
        int64_t st = 2 * P + pt_cost_optim_state_bytes(cost, P, optim);
        if (in + st > in_w + st_w || s == 0) {
            worst = s;
            in_w = in;
            st_w = st;
        }
    }
    int N = pt_cost_profile(cost)->layer_count, least_at = 1;
    int64_t least = INT64_MAX;
    for (int l = 1; l < N; l++) {
        int64_t in = pt_cost_boundary_bytes(cost, l, global_batch);
        if (in < least) {
            least = in;
            least_at = l;
        }
    }
    char a[32], b[32], c[32], tail[160] = "more stages shrink only the latter";
    if (N > 1 && least > memory)
        snprintf(tail, sizeof tail,
                 "no partition helps: the least activation between two layers (into layer %d) "
                 "is %s for the whole batch",
                 least_at, pu_bytes_str(least, c, sizeof c));
    snprintf(buf, cap,
             "every micro-batch size, with or without recomputation: GPipe keeps all M "
             "micro-batches in flight, so a stage holds its input for the whole batch; stage %d "
             "of %d (layers [%d,%d)) holds %s of input and %s of weights, gradient and optimizer "
             "state; %s",
             worst, S, cuts[worst], cuts[worst + 1], pu_bytes_str(in_w, a, sizeof a),
             pu_bytes_str(st_w, b, sizeof b), tail);
}

/* The search's state: the partition, the candidates in the order of their
 * critical path, and the least memory any needs. */
typedef struct gp {
    const pt_cost *cost;
    const pt_topology *topo;
    const pt_planner_opts *opts;
    int S, *cuts;
    pt_plan *cand[2 * PT_PLANNER_MB_CHOICES_MAX];
    double bound[2 * PT_PLANNER_MB_CHOICES_MAX];
    int nc;
    int64_t need;
} gp;

/* Whether plan p (micro-batch b, recomputation rec) fits under one of the
 * kinds the options allow (the simulator then decides which); the least peak
 * of any goes to G->need. */
static int fits_some_kind(gp *G, const pt_plan *p, int b, int rec)
{
    int fits = 0, S = G->S;
    for (int k = 0; k < pt_sched_kind_count(); k++) {
        if (!pu_kind_allowed(G->opts->kinds, k, PT_SCHED_GPIPE) ||
            !pt_sched_info_of((pt_sched_kind)k))
            continue;
        for (int pol = 0; pol < (pt_sched_kind_has(k, PT_SCHED_OPT_POLICY) ? 2 : 1); pol++) {
            int64_t peak = 0;
            int ok = 1;
            for (int s = 0; s < S; s++) {
                int64_t m =
                    pu_stage_memory(G->cost, (pt_sched_kind)k, pol ? 'B' : 'A', S, s, G->cuts[s],
                                    G->cuts[s + 1], b, p->microbatch_count, rec, G->opts->optim);
                peak = m > peak ? m : peak;
                ok &= m <= G->topo->devices[s].memory_bytes;
            }
            fits |= ok;
            if (peak < G->need)
                G->need = peak;
        }
    }
    return fits;
}

/* Every (micro-batch size, recomputation) that fits, with its closed form,
 * into G->cand in the order of that bound (earlier first on a tie). 0 or
 * PT_ENOMEM. */
static int candidates(gp *G, const pt_profile *profile, int global_batch)
{
    int mbs[PT_PLANNER_MB_CHOICES_MAX];
    int nmb = pu_microbatch_candidates(G->opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, mbs);
    for (int c = 0; c < nmb; c++)
        for (int rec = 0; rec <= 1; rec++) {
            pt_plan *p = pu_plan_alloc(profile, G->S, G->cuts, PT_SCHED_GPIPE, mbs[c],
                                       global_batch / mbs[c], G->opts->optim);
            for (int s = 0; s < G->S && p; s++) {
                p->stages[s].recompute = rec;
                if (pt_plan_set_replicas(p, s, &s, 1) < 0)
                    pt_plan_free(&p);
            }
            if (!p)
                return PT_ENOMEM;
            double L = INFINITY;
            if (!fits_some_kind(G, p, mbs[c], rec) ||
                pt_latency_critical_path(G->cost, p, &L, NULL, NULL, NULL) < 0) {
                pt_plan_free(&p);
                continue;
            }
            int j = G->nc++;
            for (; j > 0 && G->bound[j - 1] > L; j--) {
                G->cand[j] = G->cand[j - 1];
                G->bound[j] = G->bound[j - 1];
            }
            G->cand[j] = p;
            G->bound[j] = L;
        }
    return 0;
}

static void gp_report(pt_planner_report *report, const gp *G, const pt_plan *best, double best_L,
                      double best_T, int simulated)
{
    int S = G->S;
    double slow = 0;
    for (int s = 0; s < S; s++) {
        double t = pt_cost_fwd_s(G->cost, G->cuts[s], G->cuts[s + 1], best->microbatch_size, s) +
                   pt_cost_bwd_s(G->cost, G->cuts[s], G->cuts[s + 1], best->microbatch_size, s);
        slow = t > slow ? t : slow;
    }
    report->objective_s = slow;
    report->iter_s = best_T;
    report->bound_s = best_L;
    report->peak_memory_bytes = pu_plan_peak_memory(G->cost, best, NULL);
    report->evaluated = simulated;
    pu_why(
        report,
        "%d stages balanced on forward+backward (slowest %.3f ms per micro-batch of %d); M=%d%s; "
        "layers",
        S, slow * 1e3, best->microbatch_size, best->microbatch_count,
        best->stages[0].recompute ? " with recomputation (M micro-batches in flight)" : "");
    for (int s = 0; s < S; s++)
        pu_why(report, " [%d,%d)", G->cuts[s], G->cuts[s + 1]);
    pu_why(report,
           "; M and recomputation by simulated iteration time (%d of %d candidates simulated, "
           "critical-path bound %.3f ms)",
           simulated, G->nc, best_L * 1e3);
    pu_why_kinds(report);
}

/* The candidates simulated in the order of the critical path (pu_pick):
 * *out the best, the rest freed. 0 or a PT_E* code. */
static int pick(gp *G, pt_plan **out, pt_planner_report *report)
{
    pu_scorer sc;
    if (pu_scorer_init(&sc, G->cost) < 0)
        return PT_ENOMEM;
    double best_T = INFINITY;
    int simulated = 0;
    int bi = pu_pick(&sc, G->cand, G->bound, G->nc, G->opts->kinds, PT_SCHED_GPIPE, report, &best_T,
                     &simulated);
    pu_scorer_release(&sc);
    if (bi < 0)
        return bi;
    *out = G->cand[bi];
    G->cand[bi] = NULL;
    if (report)
        gp_report(report, G, *out, G->bound[bi], best_T, simulated);
    return 0;
}

int pt_planner_gpipe(const pt_profile *profile, const pt_topology *topo, int global_batch,
                     const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                     pt_error *err)
{
    *out = NULL;
    double t0 = pt_clock_s();
    pu_report_begin(report, "gpipe", "slowest stage: forward + backward per micro-batch");
    int N = profile->layer_count, D = topo->device_count;
    int S = opts->stages > 0 ? opts->stages : (N < D ? N : D);
    if (S > N || S > D)
        return pt_error_set(err, PT_EINVAL, "gpipe: stages: %d stages for %d layers on %d devices",
                            S, N, D);
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    gp G = {.cost = cost, .topo = topo, .opts = opts, .S = S, .need = INT64_MAX};
    double *speeds = malloc((size_t)S * sizeof *speeds);
    G.cuts = malloc((size_t)(S + 1) * sizeof *G.cuts);
    if (!speeds || !G.cuts) {
        rc = pt_error_set(err, PT_ENOMEM, "gpipe: out of memory");
        goto out;
    }
    for (int s = 0; s < S; s++)
        speeds[s] = topo->devices[s].speed;
    pu_balanced_partition(cost, N, S, speeds, 0, G.cuts, &rc);
    if (rc < 0 || (rc = candidates(&G, profile, global_batch)) < 0) {
        rc = pt_error_set(err, rc, "gpipe: %s",
                          rc == PT_ENOMEM ? "out of memory" : "partition failed");
        goto out;
    }
    if (G.nc == 0) {
        char detail[768];
        nofit_detail(cost, G.cuts, S, global_batch, opts->optim, pu_topology_min_memory(topo),
                     detail, sizeof detail);
        rc = pu_error_nofit(err, report, "gpipe", pu_topology_min_memory(topo), G.need, detail);
    } else if ((rc = pick(&G, out, report)) < 0) {
        rc = pt_error_set(err, rc, "gpipe: simulating the candidates failed");
    }
out:
    for (int i = 0; i < G.nc; i++)
        pt_plan_free(&G.cand[i]);
    if (report)
        report->search_s = pt_clock_s() - t0;
    free(speeds);
    free(G.cuts);
    pt_cost_free(&cost);
    return rc;
}

/* PipeDream-2BW's planner: w equal pipelines of depth d (d * w <= devices),
 * each stage replicated w times (split-concat), two weight versions,
 * gradients coalesced over M >= d micro-batches.
 *
 * Search: every depth d up to min(layers, devices) that divides the device
 * count or leaves devices over (d * w <= devices), every width w from the
 * most the devices allow down (all of them when they divide, and the widths
 * that fit a micro-batch: w <= b), two placements (stage-major: a stage's
 * replicas on adjacent devices, so its all-reduce stays inside a node;
 * pipeline-major: a pipeline's stages on adjacent devices, so its transfers
 * do), every candidate micro-batch size (>= w; M = global batch / size >= d)
 * and recomputation off/on. Layers are split by the exact balanced partition
 * of forward + backward (+ recompute). Memory per replica is the shared
 * model's (two versions of the stage's weights, optimizer state, min(d-i, M)
 * micro-batches of activations, or the stage inputs plus one micro-batch with
 * recomputation); a candidate that exceeds any device is dropped. So a plan
 * exists whenever some depth, width, micro-batch size and recomputation fit;
 * when none does, the error names the smallest memory any needs.
 *
 * Objective: the steady-state iteration time, its closed form
 *   T = M * max_s max(F_s + B_s (+ R_s), sends_s) + max_s (AR_s + OPT_s)
 * where sends_s is stage s's communication lane per micro-batch (activation
 * to s+1 and gradient to s-1, split-concat, pt_cost_boundary_s) and AR_s the
 * part of the bucketed ring all-reduce of its weights over its w replicas
 * that outlasts the window's last backward, which it overlaps
 * (pt_cost_overlapped_bwd_allreduce_s), orders the candidates; the best
 * BW_POOL are simulated (their program's steady state) in that order, and the
 * fastest that fits is the plan and its prediction. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/plan_score.h"
#include "planner/plan_util.h"
#include "planner/planner.h"

enum { LAYOUT_STAGE_MAJOR, LAYOUT_PIPELINE_MAJOR, LAYOUT_COUNT };
static const char *const layout_name[LAYOUT_COUNT] = {"stage-major", "pipeline-major"};

/* Candidates simulated, best closed form first. */
#define BW_POOL 6
/* Micro-batch sizes tried past BW_ALL_DEPTHS devices. */
#define BW_SCALE_MB_CHOICES 6

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

/* The search's state: scratch, the pool of the best closed forms, and the
 * least memory any candidate needs. */
typedef struct bw {
    const pt_cost *cost;
    const pt_topology *topo;
    const pt_profile *profile;
    const pt_planner_opts *opts;
    int global_batch;
    int *cuts, *devs;
    double *speeds;
    uint8_t *rcs;
    pt_plan *pool[BW_POOL];
    double pool_T[BW_POOL];
    int pool_layout[BW_POOL], npool;
    int64_t need;
    long long evaluated;
} bw;

/* Keeps plan (owned) when its closed form T is among the best BW_POOL. */
static void pool_offer(bw *B, pt_plan *plan, double T, int layout)
{
    int worst = 0;
    if (B->npool == BW_POOL) {
        for (int i = 1; i < B->npool; i++)
            if (B->pool_T[i] > B->pool_T[worst])
                worst = i;
        if (B->pool_T[worst] <= T) {
            pt_plan_free(&plan);
            return;
        }
        pt_plan_free(&B->pool[worst]);
    } else {
        worst = B->npool++;
    }
    B->pool[worst] = plan;
    B->pool_T[worst] = T;
    B->pool_layout[worst] = layout;
}

/* Recomputation per stage for depth d, width w (rec: the partition balanced
 * with the recompute forward; each stage recomputes only when it does not fit
 * otherwise); 1 when every stage fits. */
static int fit_stages(bw *B, int d, int w, int layout, int rec, int b, int M)
{
    int64_t peak = 0;
    int fits = 1;
    for (int s = 0; s < d; s++) {
        int64_t lim = INT64_MAX, m = 0;
        for (int p = 0; p < w; p++)
            lim = imin64(lim, B->topo->devices[device_of(layout, d, w, s, p)].memory_bytes);
        B->rcs[s] = 0;
        for (int r = 0; r <= rec; r++) {
            m = pu_stage_memory(B->cost, PT_SCHED_2BW, 'A', d, s, B->cuts[s], B->cuts[s + 1],
                                pu_rows_max(b, w), M, r, B->opts->optim);
            B->rcs[s] = (uint8_t)r;
            if (m <= lim)
                break;
        }
        peak = m > peak ? m : peak;
        fits &= m <= lim;
    }
    if (peak < B->need)
        B->need = peak;
    return fits;
}

/* Every micro-batch size for depth d, width w, a placement and a partition. */
static int try_sizes(bw *B, const int *mbs, int nmb, int d, int w, int layout, int rec)
{
    for (int c = 0; c < nmb; c++) {
        int b = mbs[c], M = B->global_batch / b;
        if (b < w || M < d)
            continue;
        B->evaluated++;
        if (!fit_stages(B, d, w, layout, rec, b, M))
            continue;
        pt_plan *pl = pu_plan_alloc(B->profile, d, B->cuts, PT_SCHED_2BW, b, M, B->opts->optim);
        for (int s = 0; s < d && pl; s++) {
            for (int p = 0; p < w; p++)
                B->devs[p] = device_of(layout, d, w, s, p);
            pl->stages[s].recompute = B->rcs[s];
            if (pt_plan_set_replicas(pl, s, B->devs, w) < 0)
                pt_plan_free(&pl);
        }
        if (!pl)
            return PT_ENOMEM;
        pool_offer(B, pl, iter_time(B->cost, B->topo, pl), layout);
    }
    return 0;
}

/* The widths tried at depth d: every one when the devices allow few, else
 * the largest and its halvings (w <= devices / d). */
static int next_width(int w, int wmax)
{
    return wmax <= 16 ? w - 1 : w / 2;
}

/* Depths tried: every one up to BW_ALL_DEPTHS devices; beyond, 1, 2, 3, 4,
 * then growing by half, and the deepest, dmax = min(layers, devices), last. */
#define BW_ALL_DEPTHS 16
static int next_depth(int d, int dmax, int G)
{
    int n = G <= BW_ALL_DEPTHS || d < 4 ? d + 1 : d + d / 2;
    return d < dmax && n > dmax ? dmax : n;
}

/* Whether every device has the same speed: then a depth's balanced
 * partition is the same for every width and placement. */
static int uniform_speed(const pt_topology *t)
{
    for (int d = 1; d < t->device_count; d++)
        if (t->devices[d].speed != t->devices[0].speed)
            return 0;
    return 1;
}

/* The balanced partition of depth d (rec: with the recompute forward) for
 * width w and a placement, into B->cuts; reused across widths and
 * placements when speeds are uniform (*have says it is there). */
static int partition(bw *B, int d, int w, int layout, int rec, int uniform, int *have)
{
    if (uniform && *have)
        return 0;
    for (int s = 0; s < d; s++) {
        B->speeds[s] = INFINITY;
        for (int p = 0; p < w; p++)
            B->speeds[s] =
                fmin(B->speeds[s], B->topo->devices[device_of(layout, d, w, s, p)].speed);
    }
    int rc = 0;
    pu_balanced_partition(B->cost, B->profile->layer_count, d, uniform ? NULL : B->speeds, rec,
                          B->cuts, &rc);
    *have = rc == 0;
    return rc;
}

static int search(bw *B, const int *mbs, int nmb)
{
    int N = B->profile->layer_count, G = B->topo->device_count, uniform = uniform_speed(B->topo);
    int dmax = N < G ? N : G;
    for (int d = 1; d <= dmax; d = next_depth(d, dmax, G)) {
        int wmax = G / d;
        for (int rec = 0; rec <= 1; rec++) {
            int have = 0;
            for (int w = wmax; w >= 1; w = next_width(w, wmax))
                for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
                    if (layout == LAYOUT_PIPELINE_MAJOR && (d == 1 || w == 1))
                        continue; /* the same devices as stage-major */
                    int rc = partition(B, d, w, layout, rec, uniform, &have);
                    if (rc < 0 || (rc = try_sizes(B, mbs, nmb, d, w, layout, rec)) < 0)
                        return rc;
                }
        }
    }
    return 0;
}

/* Simulates the pool best closed form first, while it can still win: *best
 * the index of the fastest that fits (-1: none), *iter_s its time. 0 or a
 * PT_E* code. */
static int pick(bw *B, int *best, double *iter_s, int *simulated, pt_error *err)
{
    for (int i = 1; i < B->npool; i++) /* best closed form first */
        for (int j = i; j > 0 && B->pool_T[j] < B->pool_T[j - 1]; j--) {
            pt_plan *tp = B->pool[j];
            double tt = B->pool_T[j];
            int tl = B->pool_layout[j];
            B->pool[j] = B->pool[j - 1];
            B->pool_T[j] = B->pool_T[j - 1];
            B->pool_layout[j] = B->pool_layout[j - 1];
            B->pool[j - 1] = tp;
            B->pool_T[j - 1] = tt;
            B->pool_layout[j - 1] = tl;
        }
    pu_scorer sc;
    if (pu_scorer_init(&sc, B->cost) < 0)
        return PT_ENOMEM;
    int rc = 0;
    /* a large cluster's programs are large: the first fitting candidate, then
     * more only while a quarter of the budget lasts */
    long long budget =
        B->topo->device_count > BW_ALL_DEPTHS ? PU_SCORE_OPS_BUDGET / 4 : PU_SCORE_OPS_BUDGET;
    *best = -1;
    *iter_s = INFINITY;
    *simulated = 0;
    for (int i = 0; i < B->npool && rc == 0; i++) {
        if (*best >= 0 && (sc.ops >= budget || B->pool_T[i] > *iter_s * (1 + PU_SCORE_BOUND_SLACK)))
            break;
        double t = INFINITY;
        int fits = 0;
        rc = pu_score_steady(&sc, B->pool[i], &t, &fits, err);
        ++*simulated;
        if (rc == 0 && fits && t < *iter_s) {
            *iter_s = t;
            *best = i;
        }
    }
    pu_scorer_release(&sc);
    return rc;
}

static void report_plan(pt_planner_report *report, const bw *B, const pt_plan *best, int layout,
                        double T, double sim_s, int simulated)
{
    int d = best->stage_count, w = best->stages[0].replica_count, nrc = 0;
    report->objective_s = T;
    report->bound_s = B->pool_T[0]; /* the search's optimum (the pool is sorted) */
    report->iter_s = sim_s;
    report->peak_memory_bytes = pu_plan_peak_memory(B->cost, best, NULL);
    report->evaluated = B->evaluated;
    for (int s = 0; s < d; s++)
        nrc += best->stages[s].recompute;
    pu_why(report,
           "depth %d x width %d (%s%s), micro-batch %d (%d per replica), M=%d, recomputation "
           "%s; closed form %.3f ms, simulated %.3f ms (best of %d simulated), %.1f samples/s",
           d, w, layout_name[layout], d * w < B->topo->device_count ? ", devices left over" : "",
           best->microbatch_size, pu_rows_max(best->microbatch_size, w), best->microbatch_count,
           nrc == 0   ? "off"
           : nrc == d ? "on"
                      : "on where needed",
           T * 1e3, sim_s * 1e3, simulated, B->global_batch / sim_s);
    pu_why_recompute(report, B->cost, (pt_plan *)best);
}

static void bw_free(bw *B)
{
    for (int i = 0; i < B->npool; i++)
        pt_plan_free(&B->pool[i]);
    free(B->cuts);
    free(B->devs);
    free(B->speeds);
    free(B->rcs);
}

int pt_planner_2bw(const pt_profile *profile, const pt_topology *topo, int global_batch,
                   const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                   pt_error *err)
{
    *out = NULL;
    double t0 = pt_clock_s();
    pu_report_begin(report, "2bw",
                    "simulated steady-state iteration time (search: its closed form) under the "
                    "memory limit");
    int N = profile->layer_count, G = topo->device_count;
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    bw B = {
        .cost = cost, .topo = topo, .profile = profile, .opts = opts, .global_batch = global_batch};
    B.need = INT64_MAX;
    B.cuts = malloc((size_t)(N + 1) * sizeof *B.cuts);
    B.devs = malloc((size_t)G * sizeof *B.devs);
    B.speeds = malloc((size_t)G * sizeof *B.speeds);
    B.rcs = malloc((size_t)G);
    int mbs[PT_PLANNER_MB_CHOICES_MAX];
    int nmb = pu_microbatch_candidates(
        opts, global_batch, G > BW_ALL_DEPTHS ? BW_SCALE_MB_CHOICES : PT_PLANNER_MB_CHOICES_MAX,
        mbs);
    if (!B.cuts || !B.devs || !B.speeds || !B.rcs || (rc = search(&B, mbs, nmb)) < 0) {
        rc = pt_error_set(err, rc < 0 ? rc : PT_ENOMEM, "2bw: out of memory");
        goto out;
    }
    double sim_s = INFINITY;
    int simulated = 0, bi = -1;
    if ((rc = pick(&B, &bi, &sim_s, &simulated, err)) < 0) {
        rc = pt_error_set(err, rc, "2bw: simulating the candidates failed (%s)", err->msg);
        goto out;
    }
    if (bi < 0) {
        if (B.need == INT64_MAX)
            rc = pt_error_set(err, PT_EINVAL,
                              "2bw: no depth x width with a micro-batch size of at least w "
                              "samples and M >= d micro-batches among the sizes tried");
        else
            rc = pu_error_nofit(err, report, "2bw", pu_topology_min_memory(topo), B.need,
                                "every depth x width, micro-batch size and recomputation choice "
                                "exceeds it");
        goto out;
    }
    if (report)
        report_plan(report, &B, B.pool[bi], B.pool_layout[bi], B.pool_T[bi], sim_s, simulated);
    *out = B.pool[bi];
    B.pool[bi] = NULL;
    rc = 0;
out:
    if (report)
        report->search_s = pt_clock_s() - t0;
    bw_free(&B);
    pt_cost_free(&cost);
    return rc;
}

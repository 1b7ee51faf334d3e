/* `--objective dapple`: DAPPLE's released planner, for comparing with the
 * paper's planning results (DAPPLE §VI-B), beside the general search of
 * plan_dapple.c.
 *
 * Search space (the released planner's): overlapped data parallelism on every
 * device; two-stage pipelines P:Q (P + Q devices, every cut, each stage's
 * micro-batch split evenly over its replicas, stage 0 on the first P
 * devices); straight pipelines of S = 2..min(devices, layers) single-device
 * stages on the exact balanced partition. Every candidate micro-batch size,
 * policy A, plans whose stage memory does not fit are skipped.
 *
 * Costs (DAPPLE's constants): a layer's profiled time t = fwd + bwd is split
 * F = B = t / 2 at the stage's rows per replica; activations cross a boundary
 * at DAPPLE_NVLINK_P2P_BPS inside a server and DAPPLE_ETH_ACT_BPS between
 * servers, over min(P, Q) links at once; a replicated stage all-reduces its
 * parameters W in 2(r-1)/r W / bw with bw = DAPPLE_ALLREDUCE_BPS when its
 * replicas span servers, DAPPLE_NVLINK_P2P_BPS inside one. The two Ethernet
 * figures are DAPPLE's at 25 Gbit/s; they scale with the topology's
 * inter-node bandwidth (so Config-B and Config-C differ, as in the paper).
 * No latency, no optimizer step.
 *
 * A pipeline's latency is DAPPLE's closed form over units u (stages, and the
 * boundaries as pseudo-stages whose F and B are the transfer):
 *   L = (M-1)(F_Q + B_Q) + sum_u F_u + sum_{u>=Q} B_u
 *       + max_e ( sum_{e<=u<Q} B_u + AR_e )
 * with the pivot Q found from the last unit backwards: unit j replaces Q when
 * (M-1)(F_j+B_j) >= (M-1)(F_Q+B_Q) + sum_{j<u<=Q} (F_u+B_u). Overlapped data
 * parallelism hides the all-reduce behind the last micro-batch's backward:
 *   L_dp = M F + (M-1) B + max(B, AR). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/plan_util.h"
#include "planner/planner.h"

#define DAPPLE_NVLINK_P2P_BPS 25e9           /* bytes/s, point-to-point inside a server */
#define DAPPLE_ETH_ACT_BPS    1e9            /* bytes/s, activations between servers */
#define DAPPLE_ALLREDUCE_BPS  3e9            /* bytes/s, all-reduce across servers */
#define DAPPLE_REF_ETH_BPS    (25e9 / 8)     /* the Ethernet those two were taken on */
#define DAPPLE_UNITS_MAX      (2 * 1024 - 1) /* stages and boundaries of one candidate */

typedef struct dpp {
    const pt_cost *cost;
    const pt_topology *topo;
    int N, G;
    double eth_act, eth_ar; /* scaled to the topology */
    pt_optim_kind optim;
    int64_t mem_limit;
} dpp;

/* Kinds of candidate, for the report. */
enum { CAND_DP, CAND_TWO, CAND_STRAIGHT };

typedef struct cand {
    int kind;
    double L;
    int b, S;
    int cuts[DAPPLE_UNITS_MAX + 1]; /* straight: S+1 cuts; two-stage: 3 */
    int reps[2];                    /* two-stage: P, Q */
} cand;

static int spans_nodes(const pt_topology *t, int first_dev, int count)
{
    for (int d = first_dev + 1; d < first_dev + count; d++)
        if (t->devices[d].node != t->devices[first_dev].node)
            return 1;
    return 0;
}

/* Half the profiled time of layers [i,j) at `rows` per replica. */
static double half_time(const dpp *D, int i, int j, int rows)
{
    return 0.5 * (pt_cost_fwd_s(D->cost, i, j, rows, -1) + pt_cost_bwd_s(D->cost, i, j, rows, -1));
}

static double allreduce(const dpp *D, int first_dev, int r, int i, int j)
{
    if (r <= 1)
        return 0;
    double bw = spans_nodes(D->topo, first_dev, r) ? D->eth_ar : DAPPLE_NVLINK_P2P_BPS;
    return 2.0 * (r - 1) / r * (double)pt_cost_param_bytes(D->cost, i, j) / bw;
}

/* DAPPLE's closed form over units: F[u] = B[u] for every unit here. */
static double closed_form(const double *F, const double *B, const double *AR, int U, int M)
{
    int Q = U - 1;
    for (int j = U - 2; j >= 0; j--) {
        double between = 0;
        for (int u = j + 1; u <= Q; u++)
            between += F[u] + B[u];
        if ((M - 1) * (F[j] + B[j]) >= (M - 1) * (F[Q] + B[Q]) + between)
            Q = j;
    }
    double L = (M - 1) * (F[Q] + B[Q]);
    for (int u = 0; u < U; u++)
        L += F[u] + (u >= Q ? B[u] : 0);
    double end = 0;
    for (int e = 0; e < U; e += 2) { /* stages sit at even units */
        double back = 0;
        for (int u = e; u < Q; u++)
            back += B[u];
        if (back + AR[e] > end)
            end = back + AR[e];
    }
    return L + end;
}

static int fits(const dpp *D, int S, int s, int first, int last, int rows, int M)
{
    return pu_stage_memory(D->cost, PT_SCHED_DAPPLE, 'A', S, s, first, last, rows, M, 0,
                           D->optim) <= D->mem_limit;
}

static void try_dp(const dpp *D, int b, int M, cand *best, long long *evaluated)
{
    int r = D->G;
    if (b < r || !fits(D, 1, 0, 0, D->N, pu_rows_max(b, r), M))
        return;
    double h = half_time(D, 0, D->N, pu_rows_max(b, r));
    double ar = allreduce(D, 0, r, 0, D->N);
    double L = M * h + (M - 1) * h + fmax(h, ar);
    ++*evaluated;
    if (L < best->L) {
        best->kind = CAND_DP;
        best->L = L;
        best->b = b;
        best->S = 1;
    }
}

/* Boundary transfer of one micro-batch after layer k-1 between stage replica
 * groups starting at devices a (ra of them) and c (rc). */
static double transfer(const dpp *D, int k, int b, int a, int ra, int c, int rc)
{
    int cross = spans_nodes(D->topo, a < c ? a : c, (a < c ? c + rc - a : a + ra - c));
    double bw = cross ? D->eth_act : DAPPLE_NVLINK_P2P_BPS;
    int links = ra < rc ? ra : rc;
    return (double)pt_cost_boundary_bytes(D->cost, k, b) / (bw * links);
}

static void try_two(const dpp *D, int b, int M, cand *best, long long *evaluated)
{
    for (int P = 1; P < D->G; P++) {
        int Qr = D->G - P;
        if (b < P || b < Qr)
            continue;
        int r0 = pu_rows_max(b, P), r1 = pu_rows_max(b, Qr);
        for (int k = 1; k < D->N; k++) {
            if (!fits(D, 2, 0, 0, k, r0, M) || !fits(D, 2, 1, k, D->N, r1, M))
                continue;
            double F[3], AR[3] = {0, 0, 0};
            F[0] = half_time(D, 0, k, r0);
            F[1] = transfer(D, k, b, 0, P, P, Qr);
            F[2] = half_time(D, k, D->N, r1);
            AR[0] = allreduce(D, 0, P, 0, k);
            AR[2] = allreduce(D, P, Qr, k, D->N);
            double L = closed_form(F, F, AR, 3, M);
            ++*evaluated;
            if (L < best->L) {
                best->kind = CAND_TWO;
                best->L = L;
                best->b = b;
                best->S = 2;
                best->cuts[0] = 0;
                best->cuts[1] = k;
                best->cuts[2] = D->N;
                best->reps[0] = P;
                best->reps[1] = Qr;
            }
        }
    }
}

/* The exact balanced partition of every straight depth, which does not
 * depend on the micro-batch size: cuts of depth S at part[S * (Smax + 1)]. */
typedef struct straight_parts {
    int Smax;
    int *cuts;
} straight_parts;

static int straight_parts_init(const dpp *D, straight_parts *sp)
{
    int Smax = D->G < D->N ? D->G : D->N;
    if (2 * Smax - 1 > DAPPLE_UNITS_MAX)
        Smax = (DAPPLE_UNITS_MAX + 1) / 2;
    sp->Smax = Smax;
    sp->cuts = malloc((size_t)(Smax + 1) * (size_t)(Smax + 1) * sizeof *sp->cuts);
    if (!sp->cuts)
        return PT_ENOMEM;
    for (int S = 2; S <= Smax; S++) {
        int rc = 0;
        pu_balanced_partition(D->cost, D->N, S, NULL, 0, sp->cuts + (size_t)S * (Smax + 1), &rc);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int try_straight(const dpp *D, const straight_parts *sp, int b, int M, cand *best,
                        long long *evaluated)
{
    int Smax = sp->Smax;
    double *F = malloc((size_t)(2 * Smax) * sizeof *F),
           *AR = calloc((size_t)(2 * Smax), sizeof *AR);
    if (!F || !AR) {
        free(F);
        free(AR);
        return PT_ENOMEM;
    }
    for (int S = 2; S <= Smax; S++) {
        const int *cuts = sp->cuts + (size_t)S * (Smax + 1);
        int ok = 1;
        for (int s = 0; s < S && ok; s++)
            ok = fits(D, S, s, cuts[s], cuts[s + 1], b, M);
        if (!ok)
            continue;
        for (int s = 0; s < S; s++) {
            F[2 * s] = half_time(D, cuts[s], cuts[s + 1], b);
            if (s + 1 < S)
                F[2 * s + 1] = transfer(D, cuts[s + 1], b, s, 1, s + 1, 1);
        }
        double L = closed_form(F, F, AR, 2 * S - 1, M);
        ++*evaluated;
        if (L < best->L) {
            best->kind = CAND_STRAIGHT;
            best->L = L;
            best->b = b;
            best->S = S;
            for (int s = 0; s <= S; s++)
                best->cuts[s] = cuts[s];
        }
    }
    free(F);
    free(AR);
    return 0;
}

static pt_plan *build(const dpp *D, const pt_profile *pr, const cand *c, int global_batch)
{
    int M = global_batch / c->b;
    int dp_cuts[2] = {0, D->N};
    const int *cuts = c->kind == CAND_DP ? dp_cuts : c->cuts;
    pt_plan *p = pu_plan_alloc(pr, c->S, cuts, PT_SCHED_DAPPLE, c->b, M, D->optim);
    int *devs = malloc((size_t)D->G * sizeof *devs);
    if (!p || !devs)
        goto fail;
    p->policy = 'A';
    int next = 0;
    for (int s = 0; s < c->S; s++) {
        int r = c->kind == CAND_DP ? D->G : c->kind == CAND_TWO ? c->reps[s] : 1;
        for (int i = 0; i < r; i++)
            devs[i] = next++;
        if (pt_plan_set_replicas(p, s, devs, r) < 0)
            goto fail;
    }
    free(devs);
    return p;
fail:
    free(devs);
    pt_plan_free(&p);
    return NULL;
}

int pt_planner_dapple_paper(const pt_profile *profile, const pt_topology *topo, int global_batch,
                            const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                            pt_error *err)
{
    *out = NULL;
    double t0 = pu_now_s();
    pu_report_begin(report, "dapple",
                    "DAPPLE's released planner: closed-form latency vs overlapped DP");
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    double scale = topo->node_count > 1 ? topo->inter.bandwidth / DAPPLE_REF_ETH_BPS : 1.0;
    dpp D = {cost,
             topo,
             profile->layer_count,
             topo->device_count,
             DAPPLE_ETH_ACT_BPS * scale,
             DAPPLE_ALLREDUCE_BPS * scale,
             opts->optim,
             pu_topology_min_memory(topo)};
    int mbs[PT_PLANNER_MB_CHOICES_MAX];
    int nmb = pu_microbatch_candidates(opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, mbs);
    cand *best = malloc(3 * sizeof *best);
    if (!best) {
        pt_cost_free(&cost);
        return pt_error_set(err, PT_ENOMEM, "dapple: out of memory");
    }
    long long evaluated = 0;
    for (int k = 0; k < 3; k++)
        best[k].L = INFINITY;
    straight_parts sp = {0, NULL};
    rc = straight_parts_init(&D, &sp);
    for (int c = 0; c < nmb && rc == 0; c++) {
        int b = mbs[c], M = global_batch / b;
        try_dp(&D, b, M, &best[CAND_DP], &evaluated);
        try_two(&D, b, M, &best[CAND_TWO], &evaluated);
        rc = try_straight(&D, &sp, b, M, &best[CAND_STRAIGHT], &evaluated);
    }
    free(sp.cuts);
    if (rc < 0) {
        free(best);
        pt_cost_free(&cost);
        return pt_error_set(err, rc, "dapple: out of memory");
    }
    int w = CAND_DP;
    for (int k = 1; k < 3; k++)
        if (best[k].L < best[w].L)
            w = k;
    if (!isfinite(best[w].L)) {
        free(best);
        pt_cost_free(&cost);
        return pu_error_nofit(err, report, "dapple", D.mem_limit, 0,
                              "no overlapped data-parallel, two-stage or straight plan fits "
                              "(DAPPLE's released planner's space)");
    }
    pt_plan *p = build(&D, profile, &best[w], global_batch);
    if (!p) {
        free(best);
        pt_cost_free(&cost);
        return pt_error_set(err, PT_ENOMEM, "dapple: out of memory");
    }
    if (report) {
        report->objective_s = best[w].L;
        report->iter_s = best[w].L;
        report->peak_memory_bytes = pu_plan_peak_memory(cost, p, NULL);
        report->evaluated = evaluated;
        static const char *const names[] = {"overlapped DP", "two-stage", "straight"};
        pu_why(report, "DAPPLE's space and constants; best of each:");
        for (int k = 0; k < 3; k++) {
            if (!isfinite(best[k].L)) {
                pu_why(report, " %s none fits;", names[k]);
                continue;
            }
            pu_why(report, " %s", names[k]);
            if (k == CAND_TWO)
                pu_why(report, " %d:%d cut %d", best[k].reps[0], best[k].reps[1], best[k].cuts[1]);
            if (k == CAND_STRAIGHT)
                pu_why(report, " S=%d", best[k].S);
            pu_why(report, " b=%d %.3f ms;", best[k].b, best[k].L * 1e3);
        }
        pu_why(report, " chose %s", names[w]);
        report->search_s = pu_now_s() - t0;
    }
    free(best);
    pt_cost_free(&cost);
    *out = p;
    return 0;
}

/* PipeDream's planner (PipeDream §3.1): a dynamic program minimising the
 * slowest stage of an asynchronous pipeline, replication allowed.
 *
 * For a micro-batch of b samples, layers [i,j) replicated on m devices cost
 *   stage(i,j,m) = (T(i,j) + sync(W(i,j), m)) / m
 * with T the forward + backward time of the layers at b samples, W their
 * parameter bytes and sync the ring all-reduce 2(m-1)a + 2(m-1)/m W/B over the
 * level's link. A boundary after layer k costs 2 (a + act_k(b)/B) (activation
 * forward, gradient back). Then
 *   A[i][j][m] = min( stage(i,j,m),
 *                     min_{i<k<j, 1<=m'<m} max(A[i][k][m-m'], 2 C_k, stage(k,j,m')) )
 * taken "on at most m devices" (A[i][j][m] <= A[i][j][m-1]).
 * Hierarchical over the topology: level 1 solves every layer range inside one
 * node (m <= P devices, intra-node link); level 2 treats a node as one
 * machine whose time for [i,j) is A1[i][j][P] and solves over nodes with the
 * inter-node link. A level-2 stage on n nodes becomes, in the plan, each of
 * its level-1 stages replicated on n times as many devices.
 *
 * Objective "pipedream" (--objective pipedream) is PipeDream's own optimizer
 * (optimizer_graph_hierarchical.py), for comparing with it: no latency;
 * sync(W, m) = 4(m-1)/m W/B; a new last stage [k,j) on m' replicas costs
 * (T(k,j) + sync(W(k,j), m')) / m' and the split is also at least
 * 2 act_k / (B m') (its input) and, when j < N, 2 act_j / (B m') (its
 * output): the boundary transfer divided by the receiving replica count; the
 * one-stage base case (T + sync / D) / m has no transfer, and at level 2 its
 * sync is divided by D, the devices per server (D = 1 at level 1). The
 * recurrence's sync is not divided, as in PipeDream's code. The transfers
 * make A[i][k] not monotone in k, so this objective scans every k, stopping
 * only when the last stage alone reaches the best found.
 *
 * Speed: for fixed (j, m, m') the first term rises with k and the third falls,
 * so the best k is found by binary search for the crossing and a scan outward
 * that stops as soon as the monotone term alone reaches the best found (the
 * boundary term is arbitrary, so the scan, not the search, decides): exact,
 * and O(N^2 M^2 log N) per level in the worst case with N*M*M*log N typical.
 *
 * Memory: the search ignores it, as PipeDream's does; the plan recomputes
 * where that fits, other micro-batch sizes are tried when it still does not,
 * and when no weight-stashing plan fits (or the stashing bound alone exceeds
 * every device) the planner falls back to PipeDream-2BW or PipeDream-Flush
 * (pt_planner_run: planner/plan_compose.c) unless opts->no_fallback. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan_score.h"
#include "planner/plan_util.h"
#include "planner/planner.h"

typedef struct pdlevel {
    int N;
    int maxm;            /* machines at this level */
    double latency, bw;  /* its link */
    int mbs;             /* plan micro-batch size (replication cap) */
    int unit;            /* devices per machine (level 2: P) for the replication cap */
    const double *T;     /* prefix of stage time: T(i,j) = T[j]-T[i] (level 1), or NULL */
    const double *TX;    /* its rows-independent part (pt_cost_fixed_s), or NULL: none */
    const double *W;     /* prefix of parameter bytes */
    const double *C;     /* C[k]: 2 * transfer of the boundary after layer k-1 (k in 1..N-1) */
    const double *A1P;   /* level 2: A1[i][j][P] at i*(N+1)+j */
    int paper;           /* PipeDream's optimizer's formulas (C without latency) */
    double base_div;     /* paper: the one-stage sync is divided by this (D) */
    double opt_per_byte; /* level 1: optimizer step seconds per parameter byte (slowest device) */
} pdlevel;

/* Our runtime's replicated stage: every micro-batch is split over the m
 * replicas (split-concat, ceil(b/m) rows each), and after every backward the
 * replicas all-reduce the stage's gradients and step; so the sync and the
 * step are paid per micro-batch, not once per round of m micro-batches as
 * in PipeDream's round-robin runtime (whose formula paper_stage keeps). At
 * level 2, t is the level-1 optimum of the node and the stage's n nodes
 * divide it. */
static inline double stage_cost(const pdlevel *L, int i, int j, int m)
{
    double w = L->W[j] - L->W[i];
    double sync = m > 1 ? 2.0 * (m - 1) * L->latency + 2.0 * (m - 1) / m * w / L->bw : 0;
    if (L->A1P)
        return L->A1P[(size_t)i * (L->N + 1) + j] / m + sync;
    double t = L->T[j] - L->T[i];
    int rows = (L->mbs + m - 1) / m;
    double fx = L->TX ? L->TX[j] - L->TX[i] : 0;
    return pt_cost_rows_ms(fx, t - fx, rows, L->mbs) + sync + L->opt_per_byte * w;
}

/* PipeDream's stage time: (t + 4(m-1)/m W/B / div) / m. */
static inline double paper_stage(const pdlevel *L, int i, int j, int m, double div)
{
    double w = L->W[j] - L->W[i];
    double t = L->A1P ? L->A1P[(size_t)i * (L->N + 1) + j] : L->T[j] - L->T[i];
    return (t + 4.0 * (m - 1) / m * w / L->bw / div) / m;
}

/* Whether m machines may replicate one stage: every plan stage must have at
 * most mbs replicas (each needs a row of the micro-batch). */
static inline int rep_ok(const pdlevel *L, int m)
{
    return m == 1 || (int64_t)m * L->unit <= L->mbs;
}

/* DP from start layer i: A[(j)*(maxm+1)+m] for j in (i, N], m in 1..maxm.
 * choice (may be NULL) receives k*(maxm+1)+m' (or -1 for one stage, -2 for
 * "fewer machines"). */
static void solve_from(const pdlevel *L, int i, double *A, int *choice)
{
    int N = L->N, mm = L->maxm, stride = mm + 1;
    for (int j = i + 1; j <= N; j++) {
        for (int m = 1; m <= mm; m++) {
            double best = rep_ok(L, m) ? stage_cost(L, i, j, m) : INFINITY;
            int bc = -1;
            for (int mp = 1; mp < m && j - i >= 2; mp++) {
                if (!rep_ok(L, mp))
                    break;
                int rest = m - mp;
                /* k in [i+1, j-1]: X(k) = A[k][rest] rises, Y(k) = stage(k,j,mp) falls */
                int lo = i + 1, hi = j - 1;
                while (lo < hi) {
                    int mid = (lo + hi) / 2;
                    if (A[(size_t)mid * stride + rest] >= stage_cost(L, mid, j, mp))
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                for (int k = lo; k <= j - 1; k++) {
                    double x = A[(size_t)k * stride + rest];
                    if (x >= best)
                        break;
                    double v = x, y = stage_cost(L, k, j, mp), c = L->C[k];
                    if (y > v)
                        v = y;
                    if (c > v)
                        v = c;
                    if (v < best) {
                        best = v;
                        bc = k * stride + mp;
                    }
                }
                for (int k = lo - 1; k >= i + 1; k--) {
                    double y = stage_cost(L, k, j, mp);
                    if (y >= best)
                        break;
                    double v = A[(size_t)k * stride + rest], c = L->C[k];
                    if (y > v)
                        v = y;
                    if (c > v)
                        v = c;
                    if (v < best) {
                        best = v;
                        bc = k * stride + mp;
                    }
                }
            }
            if (m > 1 && A[(size_t)j * stride + m - 1] <= best) {
                best = A[(size_t)j * stride + m - 1];
                bc = -2;
            }
            A[(size_t)j * stride + m] = best;
            if (choice)
                choice[(size_t)j * stride + m] = bc;
        }
    }
}

/* solve_from under PipeDream's optimizer's formulas (the header comment);
 * same tables and choice codes. */
static void solve_from_paper(const pdlevel *L, int i, double *A, int *choice)
{
    int N = L->N, mm = L->maxm, stride = mm + 1;
    for (int j = i + 1; j <= N; j++) {
        for (int m = 1; m <= mm; m++) {
            double best = rep_ok(L, m) ? paper_stage(L, i, j, m, L->base_div) : INFINITY;
            int bc = -1;
            if (m > 1 && A[(size_t)j * stride + m - 1] < best) {
                best = A[(size_t)j * stride + m - 1];
                bc = -2;
            }
            for (int mp = 1; mp < m && j - i >= 2; mp++) {
                if (!rep_ok(L, mp))
                    break;
                int rest = m - mp;
                double out = j < N ? L->C[j] / mp : 0;
                if (out >= best)
                    continue;
                for (int k = j - 1; k >= i + 1; k--) {
                    double y = paper_stage(L, k, j, mp, 1.0);
                    if (y >= best)
                        break;
                    double v = A[(size_t)k * stride + rest], c = L->C[k] / mp;
                    if (y > v)
                        v = y;
                    if (c > v)
                        v = c;
                    if (out > v)
                        v = out;
                    if (v < best) {
                        best = v;
                        bc = k * stride + mp;
                    }
                }
            }
            A[(size_t)j * stride + m] = best;
            if (choice)
                choice[(size_t)j * stride + m] = bc;
        }
    }
}

static void solve(const pdlevel *L, int i, double *A, int *choice)
{
    if (L->paper)
        solve_from_paper(L, i, A, choice);
    else
        solve_from(L, i, A, choice);
}

/* One stage of a level's solution: layers [first,last) on m machines. */
typedef struct pdstage {
    int first, last, m;
} pdstage;

/* Walks choices from (j, m) back to start i; returns the stage count written
 * to out (in order), or -1 when out is too small. */
static int walk(const pdlevel *L, int i, int j, int m, const int *choice, pdstage *out, int cap)
{
    int stride = L->maxm + 1, n = 0;
    while (j > i) {
        int c = choice[(size_t)j * stride + m];
        if (c == -2) {
            m--;
            continue;
        }
        if (n >= cap)
            return -1;
        if (c == -1) {
            out[n++] = (pdstage){i, j, m};
            break;
        }
        int k = c / stride, mp = c % stride;
        out[n++] = (pdstage){k, j, mp};
        j = k;
        m -= mp;
    }
    for (int a = 0, b = n - 1; a < b; a++, b--) {
        pdstage t = out[a];
        out[a] = out[b];
        out[b] = t;
    }
    return n;
}

typedef struct pdresult {
    double objective;
    pt_plan *plan;
} pdresult;

/* Solves for plan micro-batch size mbs and builds the plan. */
static int plan_for(const pt_cost *cost, const pt_topology *topo, int global_batch, int mbs,
                    pt_optim_kind optim, int paper, pdresult *res, char *levels_text, size_t ltcap)
{
    const pt_profile *pr = pt_cost_profile(cost);
    int N = pr->layer_count, G = topo->device_count;
    int P = pu_uniform_node_size(topo), nodes = topo->node_count;
    double speed = pu_topology_min_speed(topo);
    int two_levels = nodes > 1 && P > 1;
    pt_link l1 = nodes == 1 ? topo->intra : topo->inter;
    int m1 = G;
    if (two_levels) {
        l1 = topo->intra;
        m1 = P;
    }
    if (two_levels)
        snprintf(levels_text, ltcap, "two levels (%d devices per node, then %d nodes)", P, nodes);
    else
        snprintf(levels_text, ltcap, "one level (%d devices, %s link)", G,
                 nodes == 1 ? "intra-node" : "inter-node");
    size_t np1 = (size_t)N + 1;
    double *T = malloc(np1 * sizeof *T), *W = malloc(np1 * sizeof *W);
    double *TX = pt_cost_has_fixed(cost) ? malloc(np1 * sizeof *TX) : NULL;
    double *C1 = calloc(np1, sizeof *C1), *C2 = calloc(np1, sizeof *C2);
    double *A = malloc(np1 * (size_t)(m1 + 1) * sizeof *A);
    int *choice = malloc(np1 * (size_t)(m1 + 1) * sizeof *choice);
    double *A1P = NULL, *A2 = NULL;
    int *choice2 = NULL;
    pdstage *st1 = NULL, *st2 = NULL, *fin = NULL;
    int *devs = NULL, *fin_nodes = NULL;
    int rc = PT_ENOMEM;
    if (!T || !W || !C1 || !C2 || !A || !choice || (pt_cost_has_fixed(cost) && !TX))
        goto out;
    for (int j = 0; j <= N; j++) {
        T[j] = (pt_cost_fwd_s(cost, 0, j, mbs, -1) + pt_cost_bwd_s(cost, 0, j, mbs, -1)) / speed;
        if (TX)
            TX[j] = pt_cost_fixed_s(cost, 0, j, -1) / speed;
        W[j] = (double)pt_cost_param_bytes(cost, 0, j);
    }
    for (int k = 1; k < N; k++) {
        int64_t bytes = pt_cost_boundary_bytes(cost, k, mbs);
        if (paper) {
            C1[k] = 2.0 * (double)bytes / l1.bandwidth;
            C2[k] = 2.0 * (double)bytes / topo->inter.bandwidth;
        } else {
            C1[k] = 2 * pt_cost_link_s(l1, bytes);
            C2[k] = 2 * pt_cost_link_s(topo->inter, bytes);
        }
    }
    const double probe = 1 << 30;
    pdlevel L1 = {N,          m1,
                  l1.latency, l1.bandwidth,
                  mbs,        1,
                  T,          TX,
                  W,          C1,
                  NULL,       paper,
                  1.0,        pt_cost_opt_step_s(cost, (int64_t)probe, optim, -1) / probe / speed};
    for (size_t c = 0; c < np1 * (size_t)(m1 + 1); c++)
        A[c] = INFINITY;
    int nst = 0;
    fin = malloc((size_t)(N + 1) * sizeof *fin);
    st1 = malloc((size_t)(N + 1) * sizeof *st1);
    st2 = malloc((size_t)(N + 1) * sizeof *st2);
    devs = malloc((size_t)G * sizeof *devs);
    if (!fin || !st1 || !st2 || !devs)
        goto out;
    if (!two_levels) {
        solve(&L1, 0, A, choice);
        res->objective = A[(size_t)N * (m1 + 1) + m1];
        if (!isfinite(res->objective)) {
            rc = PT_ENOFIT;
            goto out;
        }
        int n = walk(&L1, 0, N, m1, choice, st1, N + 1);
        for (int s = 0; s < n; s++)
            fin[nst++] = st1[s];
        /* devices in order */
        int next = 0;
        res->plan = NULL;
        int *cuts = malloc((size_t)(nst + 1) * sizeof *cuts);
        if (!cuts)
            goto out;
        for (int s = 0; s < nst; s++)
            cuts[s] = fin[s].first;
        cuts[nst] = N;
        pt_plan *p =
            pu_plan_alloc(pr, nst, cuts, PT_SCHED_PIPEDREAM, mbs, global_batch / mbs, optim);
        free(cuts);
        if (!p)
            goto out;
        for (int s = 0; s < nst; s++) {
            for (int r = 0; r < fin[s].m; r++)
                devs[r] = next++;
            if (pt_plan_set_replicas(p, s, devs, fin[s].m) < 0) {
                pt_plan_free(&p);
                goto out;
            }
        }
        res->plan = p;
        rc = 0;
        goto out;
    }
    /* level 1 for every start layer: keep A1[i][j][P] */
    A1P = malloc(np1 * np1 * sizeof *A1P);
    if (!A1P)
        goto out;
    for (int i = 0; i < N; i++) {
        solve(&L1, i, A, NULL);
        for (int j = i + 1; j <= N; j++)
            A1P[(size_t)i * np1 + j] = A[(size_t)j * (m1 + 1) + m1];
    }
    pdlevel L2 = {N,
                  nodes,
                  topo->inter.latency,
                  topo->inter.bandwidth,
                  mbs,
                  P,
                  NULL,
                  NULL,
                  W,
                  C2,
                  A1P,
                  paper,
                  (double)P,
                  0.0};
    A2 = malloc(np1 * (size_t)(nodes + 1) * sizeof *A2);
    choice2 = malloc(np1 * (size_t)(nodes + 1) * sizeof *choice2);
    if (!A2 || !choice2)
        goto out;
    for (size_t c = 0; c < np1 * (size_t)(nodes + 1); c++)
        A2[c] = INFINITY;
    solve(&L2, 0, A2, choice2);
    res->objective = A2[(size_t)N * (nodes + 1) + nodes];
    if (!isfinite(res->objective)) {
        rc = PT_ENOFIT;
        goto out;
    }
    int n2 = walk(&L2, 0, N, nodes, choice2, st2, N + 1);
    /* each level-2 group [first,last) on st2[g].m nodes runs its level-1
     * sub-pipeline on every one of them: a level-1 stage on m devices of a
     * node becomes a plan stage on m devices of each of the group's nodes */
    fin_nodes = malloc((size_t)(N + 1) * 3 * sizeof *fin_nodes);
    if (!fin_nodes)
        goto out;
    int *node0 = fin_nodes, *gn = fin_nodes + (N + 1), *off = fin_nodes + 2 * (N + 1);
    int node_next = 0;
    for (int g = 0; g < n2; g++) {
        for (size_t c = 0; c < np1 * (size_t)(m1 + 1); c++)
            A[c] = INFINITY;
        solve(&L1, st2[g].first, A, choice);
        int n1 = walk(&L1, st2[g].first, st2[g].last, m1, choice, st1, N + 1);
        int o = 0;
        for (int s = 0; s < n1; s++) {
            fin[nst] = st1[s];
            node0[nst] = node_next;
            gn[nst] = st2[g].m;
            off[nst] = o;
            o += st1[s].m;
            nst++;
        }
        node_next += st2[g].m;
    }
    int *cuts = malloc((size_t)(nst + 1) * sizeof *cuts);
    int *node_first = malloc((size_t)nodes * sizeof *node_first);
    pt_plan *p = NULL;
    if (cuts && node_first) {
        for (int s = 0; s < nst; s++)
            cuts[s] = fin[s].first;
        cuts[nst] = N;
        p = pu_plan_alloc(pr, nst, cuts, PT_SCHED_PIPEDREAM, mbs, global_batch / mbs, optim);
    }
    if (p) {
        for (int d = G - 1; d >= 0; d--)
            node_first[topo->devices[d].node] = d;
        for (int s = 0; s < nst && p; s++) {
            int cnt = 0;
            for (int q = 0; q < gn[s]; q++)
                for (int r = 0; r < fin[s].m; r++)
                    devs[cnt++] = node_first[node0[s] + q] + off[s] + r;
            if (pt_plan_set_replicas(p, s, devs, cnt) < 0)
                pt_plan_free(&p);
        }
    }
    free(cuts);
    free(node_first);
    if (!p)
        goto out;
    res->plan = p;
    rc = 0;
out:
    free(fin_nodes);
    free(T);
    free(TX);
    free(W);
    free(C1);
    free(C2);
    free(A);
    free(choice);
    free(A1P);
    free(A2);
    free(choice2);
    free(st1);
    free(st2);
    free(fin);
    free(devs);
    return rc;
}

/* A lower bound on the memory of any pipedream plan of the model over topo:
 * stage i of S holds V_i = pt_cost_weight_versions(pipedream, S, i) weight
 * versions, its gradient and f (optimizer state factor) times its parameter
 * bytes P_i, so some stage holds max_i (V_i + 1 + f) P_i >= P / sum_i
 * 1/(V_i + 1 + f) with P the model's parameter bytes; the sum grows with S, so
 * the weakest bound is at S = min(layers, devices). Activations only add. */
static double stash_bound(const pt_cost *cost, const pt_topology *topo, pt_optim_kind optim)
{
    int N = pt_cost_profile(cost)->layer_count;
    int S = N < topo->device_count ? N : topo->device_count;
    int f = pt_cost_optim_state_factor(optim);
    double inv = 0;
    for (int i = 0; i < S; i++)
        inv += 1.0 / (pt_cost_weight_versions(PT_SCHED_PIPEDREAM, 0, S, i) + 1 + f);
    return (double)pt_cost_param_bytes(cost, 0, N) / inv;
}

/* PipeDream's search and its weight-stashing plan (pt_planner_pipedream's
 * contract without the fallback). */
static int stash_plan(const pt_profile *profile, const pt_topology *topo, int global_batch,
                      const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                      pt_error *err)
{
    *out = NULL;
    double t0 = pu_now_s();
    int paper = opts->objective == PT_OBJECTIVE_PIPEDREAM;
    pu_report_begin(report, "pipedream",
                    paper ? "slowest stage per micro-batch (PipeDream's optimizer's formulas)"
                          : "slowest stage per micro-batch (PipeDream's model, replication and "
                            "boundaries included)");
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    int G = topo->device_count;
    int mbs_list[PT_PLANNER_MB_CHOICES_MAX], nmb = 0;
    if (opts->microbatch_size_count > 0) {
        nmb = pu_microbatch_candidates(opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, mbs_list);
    } else if (paper && global_batch % profile->microbatch == 0) {
        /* PipeDream's optimizer takes the profile's times as measured */
        mbs_list[nmb++] = profile->microbatch;
    } else {
        /* the smallest micro-batch that lets every device hold a row of it */
        int want = G < global_batch ? G : global_batch;
        for (int b = want; b <= global_batch; b++)
            if (global_batch % b == 0) {
                mbs_list[nmb++] = b;
                break;
            }
    }
    pdresult best = {INFINITY, NULL};
    int best_mbs = 0;
    char levels[128] = "";
    for (int c = 0; c < nmb; c++) {
        pdresult r = {INFINITY, NULL};
        rc = plan_for(cost, topo, global_batch, mbs_list[c], opts->optim, paper, &r, levels,
                      sizeof levels);
        if (rc == PT_ENOMEM) {
            pt_plan_free(&best.plan);
            pt_cost_free(&cost);
            return pt_error_set(err, rc, "pipedream: out of memory");
        }
        if (rc < 0 || !r.plan)
            continue;
        /* compare per sample: micro-batches of different sizes */
        if (r.objective / mbs_list[c] < best.objective / (best_mbs ? best_mbs : 1) || !best.plan) {
            pt_plan_free(&best.plan);
            best = r;
            best_mbs = mbs_list[c];
        } else {
            pt_plan_free(&r.plan);
        }
    }
    if (!best.plan) {
        pt_cost_free(&cost);
        return pt_error_set(err, PT_EINVAL, "pipedream: no plan for the micro-batch sizes given");
    }
    /* PipeDream's search ignores memory. Under our objective a stage that does
     * not fit recomputes when that fits (pu_recompute_where_needed); when the
     * plan still does not fit, the other micro-batch sizes are planned the same
     * way and the fitting plan the simulator runs fastest is kept. PipeDream's
     * own objective keeps its plan as it is. */
    int64_t peak = 0;
    double sim_s = NAN;
    pu_scorer sc;
    if (pu_scorer_init(&sc, cost) < 0) {
        pt_plan_free(&best.plan);
        pt_cost_free(&cost);
        return pt_error_set(err, PT_ENOMEM, "pipedream: out of memory");
    }
    int fits = paper ? pt_cost_plan_memory(cost, best.plan, NULL) == 0
                     : pu_recompute_where_needed(cost, best.plan);
    peak = pu_plan_peak_memory(cost, best.plan, NULL);
    int widened = 0;
    if (!fits && !paper) {
        int all[PT_PLANNER_MB_CHOICES_MAX];
        int na = pu_microbatch_candidates(opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, all);
        pdresult keep = {INFINITY, NULL};
        int64_t least = peak;
        for (int c = 0; c < na && rc != PT_ENOMEM; c++) {
            if (all[c] == best_mbs)
                continue;
            pdresult r = {INFINITY, NULL};
            rc = plan_for(cost, topo, global_batch, all[c], opts->optim, 0, &r, levels,
                          sizeof levels);
            if (rc < 0 || !r.plan)
                continue;
            widened++;
            int ok = pu_recompute_where_needed(cost, r.plan);
            int64_t pk = pu_plan_peak_memory(cost, r.plan, NULL);
            if (pk < least)
                least = pk;
            double t = INFINITY;
            if (ok && (rc = pu_score(&sc, r.plan, &t, NULL, NULL, err)) == 0 &&
                (!keep.plan || t < sim_s)) {
                pt_plan_free(&keep.plan);
                keep = r;
                sim_s = t;
                best_mbs = all[c];
                continue;
            }
            pt_plan_free(&r.plan);
        }
        if (rc == PT_ENOMEM) {
            pt_plan_free(&keep.plan);
            pt_plan_free(&best.plan);
            pu_scorer_release(&sc);
            pt_cost_free(&cost);
            return pt_error_set(err, rc, "pipedream: out of memory");
        }
        rc = 0;
        if (keep.plan) {
            pt_plan_free(&best.plan);
            best = keep;
            fits = 1;
            peak = pu_plan_peak_memory(cost, best.plan, NULL);
        } else {
            peak = least;
        }
    }
    if (!fits) {
        pt_error merr = {0};
        pt_cost_plan_memory(cost, best.plan, &merr);
        int S = best.plan->stage_count;
        double bound = stash_bound(cost, topo, opts->optim);
        char bb[32], detail[2 * PT_ERROR_MAX];
        if (paper)
            snprintf(detail, sizeof detail,
                     "PipeDream's plan (%d stages, which stash up to %d weight versions) needs "
                     "that; its search does not trade speed for memory (try the default "
                     "objective, 2bw or dapple). %s",
                     S, S, merr.msg);
        else
            snprintf(detail, sizeof detail,
                     "the least over its plans for %d micro-batch size%s, stages recomputing "
                     "where that fits. Weight stashing keeps S-i weight versions on stage i, "
                     "so whatever the partition some stage holds at least %s of weights, "
                     "gradients and optimizer state on these %d devices (2bw keeps two "
                     "versions, dapple one). Its first plan: %s",
                     widened + 1, widened ? "s" : "", pu_bytes_str((int64_t)bound, bb, sizeof bb),
                     topo->device_count, merr.msg);
        pt_plan_free(&best.plan);
        pu_scorer_release(&sc);
        pt_cost_free(&cost);
        if (report)
            report->search_s = pu_now_s() - t0;
        return pu_error_nofit(err, report, "pipedream", pu_topology_min_memory(topo), peak, detail);
    }
    /* the prediction is what the simulator charges for the plan's program (the
     * DP's figure leaves out the communication lanes, the overlap of the
     * buckets and the warm-up's effect on the steady state) */
    if (isnan(sim_s))
        rc = pu_score(&sc, best.plan, &sim_s, NULL, NULL, err);
    pu_scorer_release(&sc);
    if (rc < 0) {
        pt_plan_free(&best.plan);
        pt_cost_free(&cost);
        return rc;
    }
    if (report)
        report->search_s = pu_now_s() - t0;
    if (report) {
        report->objective_s = best.objective;
        report->bound_s = best.objective * best.plan->microbatch_count;
        report->iter_s = sim_s;
        report->peak_memory_bytes = peak;
        pu_why(report, "%s; micro-batch %d (%d per iteration); %d stage%s, replicas", levels,
               best.plan->microbatch_size, best.plan->microbatch_count, best.plan->stage_count,
               best.plan->stage_count > 1 ? "s" : "");
        for (int s = 0; s < best.plan->stage_count; s++)
            pu_why(report, "%s%d", s ? ":" : " ", best.plan->stages[s].replica_count);
        pu_why(report,
               "; slowest stage %.3f ms per micro-batch (M x it: %.3f ms per iteration), "
               "simulated steady state %.3f ms per iteration",
               best.objective * 1e3, report->bound_s * 1e3, report->iter_s * 1e3);
        if (widened)
            pu_why(report,
                   "; its first micro-batch size did not fit even recomputing; of %d other "
                   "sizes planned, the fitting plan the simulator runs fastest",
                   widened);
        pu_why_recompute(report, cost, best.plan);
    }
    *out = best.plan;
    pt_cost_free(&cost);
    return 0;
}

static int64_t topology_max_memory(const pt_topology *topo)
{
    int64_t m = 0;
    for (int d = 0; d < topo->device_count; d++)
        if (topo->devices[d].memory_bytes > m)
            m = topo->devices[d].memory_bytes;
    return m;
}

int pt_planner_pipedream(const pt_profile *profile, const pt_topology *topo, int global_batch,
                         const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                         pt_error *err)
{
    *out = NULL;
    if (opts->objective == PT_OBJECTIVE_PIPEDREAM || opts->no_fallback)
        return stash_plan(profile, topo, global_batch, opts, out, report, err);
    double t0 = pu_now_s();
    pt_planner_report local;
    if (!report)
        report = &local;
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    /* when even the bound over every partition exceeds the largest device,
     * no stashing plan can fit: the search would only confirm it */
    double bound = stash_bound(cost, topo, opts->optim);
    pt_cost_free(&cost);
    if (bound > (double)topology_max_memory(topo)) {
        pu_report_begin(report, "pipedream", "slowest stage per micro-batch");
        report->stash_need_bytes = (int64_t)ceil(bound);
        report->stash_need_proven = 1;
        report->device_memory_bytes = pu_topology_min_memory(topo);
        report->search_s = pu_now_s() - t0;
        return pu_error_nofit(err, report, "pipedream", pu_topology_min_memory(topo),
                              report->stash_need_bytes,
                              "weight stashing keeps the weight versions of every micro-batch "
                              "in flight, so whatever the partition some stage holds that much");
    }
    rc = stash_plan(profile, topo, global_batch, opts, out, report, err);
    if (rc == PT_ENOFIT) {
        report->stash_need_bytes = report->needed_memory_bytes;
        report->stash_need_proven = 0;
        report->device_memory_bytes = pu_topology_min_memory(topo);
    }
    report->search_s = pu_now_s() - t0;
    return rc;
}

/* PipeDream's planner (PipeDream §3.1): a dynamic program minimising the
 * slowest stage of an asynchronous pipeline, replication allowed, for the
 * pipedream kind with PipeDream's round-robin replication (schedule.h): a
 * stage's m replicas take whole micro-batches in turn and synchronise once
 * per round of m micro-batches.
 *
 * For a micro-batch of b samples, layers [i,j) replicated on m devices cost,
 * per micro-batch,
 *   stage(i,j,m) = (T(i,j) + sync(W(i,j), m) + opt(W(i,j))) / m
 * with T the forward + backward time of the layers at b samples, W their
 * parameter bytes, sync the ring all-reduce 2(m-1)a + 2(m-1)/m W/B over the
 * level's link and opt the optimizer step: each replica runs one micro-batch,
 * one all-reduce and one step per round. A cut after layer k costs
 * 2 (a + act_k(b)/B) / m' per micro-batch (activation forward, gradient back,
 * the m' replicas of the stage after it sharing the traffic, as PipeDream's
 * optimizer divides it). Then
 *   A[i][j][m] = min( stage(i,j,m),
 *                     min_{i<k<j, 1<=m'<m} max(A[i][k][m-m'], C_k / m', stage(k,j,m')) )
 * taken "on at most m devices" (A[i][j][m] <= A[i][j][m-1]). A stage has at
 * most M = global batch / b replicas, so a round's r·b samples fit in the
 * global batch (the most samples one update averages).
 * Hierarchical over the topology: level 1 solves every layer range inside one
 * node (m <= P devices, intra-node link); level 2 treats a node as one
 * machine whose time for [i,j) is A1[i][j][P] and solves over nodes with the
 * inter-node link, a stage on n nodes costing (A1[i][j][P] + sync over n
 * nodes) / n. A level-2 stage on n nodes becomes, in the plan, each of its
 * level-1 stages replicated on n times as many devices.
 *
 * Objective "pipedream" (--objective pipedream) is PipeDream's own optimizer
 * (optimizer_graph_hierarchical.py), for comparing with it: no latency, no
 * optimizer step, no replica cap; sync(W, m) = 4(m-1)/m W/B; a new last
 * stage [k,j) on m' replicas costs (T(k,j) + sync(W(k,j), m')) / m' and the
 * split is also at least 2 act_k / (B m') (its input) and, when j < N,
 * 2 act_j / (B m') (its output); the one-stage base case (T + sync / D) / m
 * has no transfer, and at level 2 its sync is divided by D, the devices per
 * server (D = 1 at level 1). The recurrence's sync is not divided, as in
 * PipeDream's code. The output transfer makes A[i][k] not monotone in k, so
 * this objective scans every k, stopping only when the last stage alone
 * reaches the best found.
 *
 * Speed: for fixed (j, m, m') the first term rises with k and the third falls,
 * so the best k is found by binary search for the crossing and a scan outward
 * that stops as soon as the monotone term alone reaches the best found (the
 * boundary term is arbitrary, so the scan, not the search, decides): exact,
 * and O(N^2 M^2 log N) per level in the worst case with N*M*M*log N typical.
 *
 * Micro-batch: every candidate size (pu_microbatch_candidates) is planned and
 * the final plans are simulated (their steady state, the program the runtime
 * runs): the fastest that fits is kept. The objective's own figure is the
 * search bound. PipeDream's objective takes the profile's micro-batch.
 *
 * Memory: the search ignores it, as PipeDream's does; a plan recomputes
 * where that fits, and a plan that does not fit even so is dropped; when no
 * weight-stashing plan fits (or the stashing bound alone exceeds every
 * device) the planner falls back to PipeDream-2BW or PipeDream-Flush
 * (pt_planner_run: planner/plan_compose.c) unless opts->no_fallback. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan_pipedream.h"
#include "planner/plan_score.h"
#include "planner/plan_util.h"
#include "planner/planner.h"

typedef struct pdlevel {
    int N;
    int maxm;            /* machines at this level */
    double latency, bw;  /* its link (paper: latency 0) */
    int cap;             /* most devices of one plan stage (INT32_MAX: none) */
    int unit;            /* devices per machine (level 2: P) for the cap */
    const double *T;     /* prefix of stage time: T(i,j) = T[j]-T[i] (level 1), or NULL */
    const double *W;     /* prefix of parameter bytes */
    const double *C;     /* C[k]: paper: 2 * transfer of boundary k (k in 1..N-1); default: one
                            transfer (latency + bytes / bandwidth) */
    const double *A1P;   /* level 2: A1[i][j][P] at i*(N+1)+j */
    int paper;           /* PipeDream's optimizer's formulas */
    double base_div;     /* paper: the one-stage sync is divided by this (D) */
    double opt_per_byte; /* level 1: optimizer step seconds per parameter byte (slowest device) */
    int pow2;            /* replica counts (m * unit) only powers of two */
} pdlevel;

/* A round of m micro-batches on m replicas: each runs one (t), all-reduces
 * and steps once; per micro-batch, the m replicas divide it. At level 2, t
 * is the level-1 optimum of the node. The stage's communication lane carries
 * each of its micro-batches' gradient back over boundary i and activation on
 * over boundary j, its replicas sharing them too; it runs beside the compute,
 * so the stage costs the larger. */
static inline double stage_cost(const pdlevel *L, int i, int j, int m)
{
    double w = L->W[j] - L->W[i];
    double sync = m > 1 ? 2.0 * (m - 1) * L->latency + 2.0 * (m - 1) / m * w / L->bw : 0;
    double lane = ((i > 0 ? L->C[i] : 0) + (j < L->N ? L->C[j] : 0)) / m;
    if (L->A1P)
        return fmax((L->A1P[(size_t)i * (L->N + 1) + j] + sync) / m, lane);
    return fmax((L->T[j] - L->T[i] + sync + L->opt_per_byte * w) / m, lane);
}

/* The compute part of stage_cost alone: it rises as the stage grows, so it
 * bounds the scans below. */
static inline double stage_compute(const pdlevel *L, int i, int j, int m)
{
    double w = L->W[j] - L->W[i];
    double sync = m > 1 ? 2.0 * (m - 1) * L->latency + 2.0 * (m - 1) / m * w / L->bw : 0;
    if (L->A1P)
        return (L->A1P[(size_t)i * (L->N + 1) + j] + sync) / m;
    return (L->T[j] - L->T[i] + sync + L->opt_per_byte * w) / m;
}

/* PipeDream's stage time: (t + 4(m-1)/m W/B / div) / m. */
static inline double paper_stage(const pdlevel *L, int i, int j, int m, double div)
{
    double w = L->W[j] - L->W[i];
    double t = L->A1P ? L->A1P[(size_t)i * (L->N + 1) + j] : L->T[j] - L->T[i];
    return (t + 4.0 * (m - 1) / m * w / L->bw / div) / m;
}

/* Whether m machines may replicate one stage. */
static inline int rep_ok(const pdlevel *L, int m)
{
    int64_t d = (int64_t)m * L->unit;
    return m == 1 || (d <= L->cap && (!L->pow2 || (d & (d - 1)) == 0));
}

/* The best last stage [k, j) on mp of m machines, k in [i+1, j-1], into
 * *best and *bc (k * stride + mp) when it beats them. The prefix A[k][m-mp]
 * is not monotone in k (its last stage's lane carries boundary k), so every
 * k is scanned, from j-1 down, until the stage's compute alone (which only
 * rises) reaches the best. */
static void best_split(const pdlevel *L, int i, int j, int m, int mp, const double *A, double *best,
                       int *bc)
{
    int stride = L->maxm + 1, rest = m - mp;
    for (int k = j - 1; k >= i + 1; k--) {
        if (stage_compute(L, k, j, mp) >= *best)
            break;
        double v = fmax(A[(size_t)k * stride + rest], stage_cost(L, k, j, mp));
        if (v < *best) {
            *best = v;
            *bc = k * stride + mp;
        }
    }
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
            if (m > 1 && A[(size_t)j * stride + m - 1] < best) {
                best = A[(size_t)j * stride + m - 1];
                bc = -2;
            }
            for (int mp = 1; mp < m && j - i >= 2 && (mp == 1 || (int64_t)mp * L->unit <= L->cap);
                 mp++)
                if (rep_ok(L, mp))
                    best_split(L, i, j, m, mp, A, &best, &bc);
            A[(size_t)j * stride + m] = best;
            if (choice)
                choice[(size_t)j * stride + m] = bc;
        }
    }
}

/* The paper objective's best last stage [k, j) on mp of m machines. */
static void paper_split(const pdlevel *L, int i, int j, int m, int mp, const double *A,
                        double *best, int *bc)
{
    int stride = L->maxm + 1, rest = m - mp;
    double out = j < L->N ? L->C[j] / mp : 0;
    if (out >= *best)
        return;
    for (int k = j - 1; k >= i + 1; k--) {
        double y = paper_stage(L, k, j, mp, 1.0);
        if (y >= *best)
            break;
        double v = fmax(fmax(fmax(A[(size_t)k * stride + rest], y), L->C[k] / mp), out);
        if (v < *best) {
            *best = v;
            *bc = k * stride + mp;
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
            for (int mp = 1; mp < m && j - i >= 2 && (mp == 1 || (int64_t)mp * L->unit <= L->cap);
                 mp++)
                if (rep_ok(L, mp))
                    paper_split(L, i, j, m, mp, A, &best, &bc);
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

/* The search for one micro-batch size: the prefix tables, both levels and
 * the plan's stages (plan stage s: layers fin[s] on fin[s].m devices of each
 * of the gn[s] nodes from node node0[s], from device off[s] of each). */
typedef struct pdsearch {
    const pt_cost *cost;
    const pt_topology *topo;
    int N, G, P, nodes, two_levels, m1, mbs, nst;
    int *bnd; /* the DP's layer k is the model's layers up to bnd[k] (cut candidates) */
    double *T, *W, *C1, *C2, *A, *A1P, *A2;
    int *choice, *choice2;
    pdstage *st1, *st2, *fin;
    int *node0, *gn, *off;
    pdlevel L1, L2;
} pdsearch;

static void search_free(pdsearch *s)
{
    free(s->bnd);
    free(s->T);
    free(s->W);
    free(s->C1);
    free(s->C2);
    free(s->A);
    free(s->A1P);
    free(s->A2);
    free(s->choice);
    free(s->choice2);
    free(s->st1);
    free(s->st2);
    free(s->fin);
    free(s->node0);
}

/* The prefix tables and level 1 for micro-batch size mbs. */
/* The cut candidates of a coarse search: at most PD_COARSE_CUTS boundaries
 * at equal shares of the forward + backward work (every boundary when the
 * model has fewer layers); s->N becomes their count. 0 or PT_ENOMEM. */
static int cut_candidates(pdsearch *s, int coarse)
{
    int n = s->N;
    s->bnd = malloc(((size_t)n + 1) * sizeof *s->bnd);
    if (!s->bnd)
        return PT_ENOMEM;
    if (!coarse || n <= PD_COARSE_CUTS) {
        for (int k = 0; k <= n; k++)
            s->bnd[k] = k;
        return 0;
    }
    double total =
        pt_cost_fwd_s(s->cost, 0, n, s->mbs, -1) + pt_cost_bwd_s(s->cost, 0, n, s->mbs, -1);
    int k = 1;
    s->bnd[0] = 0;
    for (int l = 1; l < n && k < PD_COARSE_CUTS; l++) {
        double w =
            pt_cost_fwd_s(s->cost, 0, l, s->mbs, -1) + pt_cost_bwd_s(s->cost, 0, l, s->mbs, -1);
        if (w >= total * k / PD_COARSE_CUTS)
            s->bnd[k++] = l;
    }
    s->bnd[k] = n;
    s->N = k;
    return 0;
}

static int search_init(pdsearch *s, const pt_cost *cost, const pt_topology *topo, int mbs, int M,
                       pt_optim_kind optim, int paper, int flags)
{
    int flat = (flags & PD_FLAT) != 0;
    memset(s, 0, sizeof *s);
    s->cost = cost;
    s->topo = topo;
    s->N = pt_cost_profile(cost)->layer_count;
    s->mbs = mbs;
    if (cut_candidates(s, flags & PD_COARSE) < 0)
        return PT_ENOMEM;
    s->G = topo->device_count;
    s->P = pu_uniform_node_size(topo);
    s->nodes = topo->node_count;
    s->two_levels = s->nodes > 1 && s->P > 1 && !flat;
    s->m1 = s->two_levels ? s->P : s->G;
    pt_link l1 = s->two_levels || s->nodes == 1 ? topo->intra : topo->inter;
    if (flat && s->nodes > 1 && s->P > 1) /* every device a machine, at the slower link */
        l1 = topo->inter.bandwidth < topo->intra.bandwidth ? topo->inter : topo->intra;
    size_t np1 = (size_t)s->N + 1, n1 = np1 * (size_t)(s->m1 + 1);
    s->T = malloc(np1 * sizeof *s->T);
    s->W = malloc(np1 * sizeof *s->W);
    s->C1 = calloc(np1, sizeof *s->C1);
    s->C2 = calloc(np1, sizeof *s->C2);
    s->A = malloc(n1 * sizeof *s->A);
    s->choice = malloc(n1 * sizeof *s->choice);
    s->st1 = malloc(np1 * sizeof *s->st1);
    s->st2 = malloc(np1 * sizeof *s->st2);
    s->fin = malloc(np1 * sizeof *s->fin);
    s->node0 = malloc(np1 * 3 * sizeof *s->node0);
    if (!s->T || !s->W || !s->C1 || !s->C2 || !s->A || !s->choice || !s->st1 || !s->st2 ||
        !s->fin || !s->node0)
        return PT_ENOMEM;
    s->gn = s->node0 + np1;
    s->off = s->gn + np1;
    double speed = pu_topology_min_speed(topo);
    for (int j = 0; j <= s->N; j++) {
        int l = s->bnd[j];
        s->T[j] = (pt_cost_fwd_s(cost, 0, l, mbs, -1) + pt_cost_bwd_s(cost, 0, l, mbs, -1)) / speed;
        s->W[j] = (double)pt_cost_param_bytes(cost, 0, l);
    }
    for (int k = 1; k < s->N; k++) {
        int64_t bytes = pt_cost_boundary_bytes(cost, s->bnd[k], mbs);
        s->C1[k] = paper ? 2.0 * (double)bytes / l1.bandwidth : pt_cost_link_s(l1, bytes);
        s->C2[k] = paper ? 2.0 * (double)bytes / topo->inter.bandwidth
                         : pt_cost_link_s(topo->inter, bytes);
    }
    const double probe = 1 << 30;
    int cap = paper ? INT32_MAX : M;
    s->L1 =
        (pdlevel){s->N,
                  s->m1,
                  paper ? 0 : l1.latency,
                  l1.bandwidth,
                  cap,
                  1,
                  s->T,
                  s->W,
                  s->C1,
                  NULL,
                  paper,
                  1.0,
                  paper ? 0 : pt_cost_opt_step_s(cost, (int64_t)probe, optim, -1) / probe / speed,
                  (flags & PD_POW2) != 0};
    return 0;
}

/* One level over every device (one node, or one device per node). */
static int solve_flat(pdsearch *s, double *objective)
{
    size_t n1 = ((size_t)s->N + 1) * (size_t)(s->m1 + 1);
    for (size_t c = 0; c < n1; c++)
        s->A[c] = INFINITY;
    solve(&s->L1, 0, s->A, s->choice);
    *objective = s->A[(size_t)s->N * (s->m1 + 1) + s->m1];
    if (!isfinite(*objective))
        return PT_ENOFIT;
    int n = walk(&s->L1, 0, s->N, s->m1, s->choice, s->fin, s->N + 1);
    for (int k = 0; k < n; k++) {
        s->node0[k] = 0;
        s->gn[k] = 1;
        s->off[k] = 0;
    }
    s->nst = n;
    return 0;
}

/* Level 1 for every start layer (A1[i][j][P]), then level 2 over nodes. */
static int solve_levels(pdsearch *s, double *objective)
{
    size_t np1 = (size_t)s->N + 1, n1 = np1 * (size_t)(s->m1 + 1), n2 = np1 * (s->nodes + 1);
    s->A1P = malloc(np1 * np1 * sizeof *s->A1P);
    s->A2 = malloc(n2 * sizeof *s->A2);
    s->choice2 = malloc(n2 * sizeof *s->choice2);
    if (!s->A1P || !s->A2 || !s->choice2)
        return PT_ENOMEM;
    for (int i = 0; i < s->N; i++) {
        solve(&s->L1, i, s->A, NULL);
        for (int j = i + 1; j <= s->N; j++)
            s->A1P[(size_t)i * np1 + j] = s->A[(size_t)j * (s->m1 + 1) + s->m1];
    }
    const pt_link inter = s->topo->inter;
    int paper = s->L1.paper;
    s->L2 = (pdlevel){s->N,
                      s->nodes,
                      paper ? 0 : inter.latency,
                      inter.bandwidth,
                      s->L1.cap,
                      s->P,
                      NULL,
                      s->W,
                      s->C2,
                      s->A1P,
                      paper,
                      (double)s->P,
                      0.0,
                      s->L1.pow2};
    for (size_t c = 0; c < n2; c++)
        s->A2[c] = INFINITY;
    solve(&s->L2, 0, s->A2, s->choice2);
    *objective = s->A2[(size_t)s->N * (s->nodes + 1) + s->nodes];
    if (!isfinite(*objective))
        return PT_ENOFIT;
    int n2st = walk(&s->L2, 0, s->N, s->nodes, s->choice2, s->st2, s->N + 1);
    /* each level-2 group [first,last) on st2[g].m nodes runs its level-1
     * sub-pipeline on every one of them */
    int node_next = 0;
    s->nst = 0;
    for (int g = 0; g < n2st; g++) {
        for (size_t c = 0; c < n1; c++)
            s->A[c] = INFINITY;
        solve(&s->L1, s->st2[g].first, s->A, s->choice);
        int n = walk(&s->L1, s->st2[g].first, s->st2[g].last, s->m1, s->choice, s->st1, s->N + 1);
        for (int k = 0, o = 0; k < n; k++) {
            s->fin[s->nst] = s->st1[k];
            s->node0[s->nst] = node_next;
            s->gn[s->nst] = s->st2[g].m;
            s->off[s->nst] = o;
            o += s->st1[k].m;
            s->nst++;
        }
        node_next += s->st2[g].m;
    }
    return 0;
}

/* The plan of the search's stages: plan stage s on fin[s].m devices of each
 * of its gn[s] nodes, round-robin replication. */
static pt_plan *search_plan(const pdsearch *s, int global_batch, pt_optim_kind optim)
{
    int nst = s->nst, N = s->N;
    int *cuts = malloc((size_t)(nst + 1) * sizeof *cuts);
    int *node_first = malloc((size_t)s->nodes * sizeof *node_first);
    int *devs = malloc((size_t)s->G * sizeof *devs);
    pt_plan *p = NULL;
    if (cuts && node_first && devs) {
        for (int k = 0; k < nst; k++)
            cuts[k] = s->bnd[s->fin[k].first];
        cuts[nst] = s->bnd[N];
        p = pu_plan_alloc(pt_cost_profile(s->cost), nst, cuts, PT_SCHED_PIPEDREAM, s->mbs,
                          global_batch / s->mbs, optim);
    }
    if (p) {
        p->replication = PT_REPL_ROUND_ROBIN;
        for (int d = s->G - 1; d >= 0; d--)
            node_first[s->topo->devices[d].node] = d;
        int next = 0; /* one level: devices in order */
        for (int k = 0; k < nst && p; k++) {
            int cnt = 0;
            for (int q = 0; q < s->gn[k]; q++)
                for (int r = 0; r < s->fin[k].m; r++)
                    devs[cnt++] =
                        s->two_levels ? node_first[s->node0[k] + q] + s->off[k] + r : next++;
            if (pt_plan_set_replicas(p, k, devs, cnt) < 0)
                pt_plan_free(&p);
        }
    }
    free(cuts);
    free(node_first);
    free(devs);
    return p;
}

int pd_plan_for(const pt_cost *cost, const pt_topology *topo, int global_batch, int mbs,
                pt_optim_kind optim, int paper, int flags, pdresult *res, char *levels_text,
                size_t ltcap)
{
    pdsearch s;
    int flat = (flags & PD_FLAT) != 0;
    int rc = search_init(&s, cost, topo, mbs, global_batch / mbs, optim, paper, flags);
    if (rc == 0)
        rc = s.two_levels ? solve_levels(&s, &res->objective) : solve_flat(&s, &res->objective);
    if (rc == 0 && !(res->plan = search_plan(&s, global_batch, optim)))
        rc = PT_ENOMEM;
    if (s.two_levels)
        snprintf(levels_text, ltcap, "two levels (%d devices per node, then %d nodes)", s.P,
                 s.nodes);
    else
        snprintf(levels_text, ltcap, "one level (%d devices, %s link)", s.G,
                 s.nodes == 1 || flat ? "intra-node" : "inter-node");
    if (flat && s.nodes > 1)
        snprintf(levels_text, ltcap, "one level over all %d devices at the inter-node link", s.G);
    search_free(&s);
    return rc;
}

/* A hierarchical topology of at most this many devices is also planned flat
 * (every device a machine at the inter-node link): the hierarchical DP gives
 * every node of a level-2 stage the same sub-pipeline, so it cannot express
 * e.g. 15:1 on 4 x 4 (PipeDream's VGG-16 plan), and the simulator keeps the
 * faster. */
#define PD_FLAT_DEVICES 16

/* A lower bound on the memory of any pipedream plan of the model over topo:
 * a replica of stage i holds V_i = ceil(R_i / r_i) weight versions
 * (round-robin; R_i the replicas of stages i.., r_i its own), its gradient
 * and f (optimizer state factor) times the stage's parameter bytes P_i, so
 * some stage holds max_i (V_i + 1 + f) P_i >= P / sum_i 1/(V_i + 1 + f) with
 * P the model's parameter bytes. The largest that sum can be over every
 * replication of at most G devices is a dynamic program from the last stage
 * back over the replicas used so far: best[R + r] >= best[R] +
 * 1/(ceil((R + r) / r) + 1 + f). O(G^2); activations only add. */
static double stash_bound(const pt_cost *cost, const pt_topology *topo, pt_optim_kind optim)
{
    int N = pt_cost_profile(cost)->layer_count, G = topo->device_count;
    int f = pt_cost_optim_state_factor(optim);
    double *best = malloc(((size_t)G + 1) * sizeof *best), top = 0;
    if (!best) /* no bound: every plan must be searched */
        return 0;
    best[0] = 0;
    for (int R = 1; R <= G; R++)
        best[R] = -INFINITY;
    for (int R = 0; R < G; R++)
        for (int r = 1; R + r <= G && isfinite(best[R]); r++) {
            double v = best[R] + 1.0 / ((R + r + r - 1) / r + 1 + f);
            if (v > best[R + r])
                best[R + r] = v;
        }
    for (int R = 1; R <= G; R++)
        top = best[R] > top ? best[R] : top;
    free(best);
    (void)N;
    return top > 0 ? (double)pt_cost_param_bytes(cost, 0, N) / top : 0;
}

/* The micro-batch sizes stash_plan plans: opts' list; PipeDream's objective
 * the profile's micro-batch (its optimizer takes the profiled times as
 * measured) when it divides the global batch; otherwise every candidate. */
static int pd_sizes(const pt_profile *profile, int global_batch, const pt_planner_opts *opts,
                    int paper, int *out)
{
    if (paper && opts->microbatch_size_count == 0 && global_batch % profile->microbatch == 0) {
        out[0] = profile->microbatch;
        return 1;
    }
    return pu_microbatch_candidates(opts, global_batch, PT_PLANNER_MB_CHOICES_MAX, out);
}

/* What stash_plan found over the sizes. */
typedef struct pdpick {
    pdresult best; /* the plan kept (NULL: none) */
    double sim_s;  /* its simulated steady state (NAN: not simulated) */
    int mbs;       /* its micro-batch size */
    int planned;   /* sizes the search planned */
    int fitting;   /* of them, plans that fit memory */
    int64_t least; /* the least peak memory among the plans (recomputing where it fits) */
    int too_long;  /* plans dropped: their round-robin program exceeds PD_RR_MB_MAX */
} pdpick;

/* Default objective: each size's plan recomputes where that fits; the
 * fitting plan the simulator runs fastest is kept. */
static int pick_simulated(pdpick *pk, pu_scorer *sc, pdresult *r, int mbs, pt_error *err)
{
    int ok = pu_recompute_where_needed(sc->cost, r->plan);
    int64_t peak = pu_plan_peak_memory(sc->cost, r->plan, NULL);
    if (peak < pk->least)
        pk->least = peak;
    double t = INFINITY;
    int rc = 0;
    if (ok && (rc = pu_score(sc, r->plan, &t, NULL, NULL, err)) == 0) {
        pk->fitting++;
        if (!pk->best.plan || t < pk->sim_s) {
            pt_plan_free(&pk->best.plan);
            pk->best = *r;
            pk->sim_s = t;
            pk->mbs = mbs;
            r->plan = NULL;
        }
    }
    pt_plan_free(&r->plan);
    return rc == PT_ENOMEM ? rc : 0;
}

/* PipeDream's objective: the lowest objective per sample, as it is. */
static void pick_paper(pdpick *pk, const pt_cost *cost, pdresult *r, int mbs)
{
    if (!pk->best.plan || r->objective / mbs < pk->best.objective / pk->mbs) {
        pt_plan_free(&pk->best.plan);
        pk->best = *r;
        pk->mbs = mbs;
        r->plan = NULL;
        pk->fitting = pt_cost_plan_memory(cost, pk->best.plan, NULL) == 0;
        pk->least = pu_plan_peak_memory(cost, pk->best.plan, NULL);
    }
    pt_plan_free(&r->plan);
}

/* Round-robin programs longer than this many micro-batches (rounds of
 * every stage's replicas make the run a multiple of their least common
 * multiple) are not planned: the runtime would run that many per program. */
#define PD_RR_MB_MAX 4096
/* Micro-batch sizes tried (the candidates thinned evenly in log scale): up
 * to PD_FLAT_DEVICES devices, and beyond. */
#define PD_SIZES       8
#define PD_SCALE_SIZES 4

/* The variants of the dynamic program planned for each size. Every one has
 * at most PD_COARSE_CUTS candidate stage boundaries (all of them on models
 * with fewer layers) under the default objective; PipeDream's objective plans
 * every boundary and nothing else. Up to PD_FLAT_DEVICES devices the
 * hierarchical search and (several nodes) the flat one, each with any
 * replica counts and with powers of two only; up to 64 devices the
 * hierarchical one both ways; beyond, the hierarchical one with powers of
 * two. */
static int pd_variants(const pt_topology *topo, int paper, int *out)
{
    int n = 0, G = topo->device_count;
    if (paper) {
        out[n++] = 0;
        return n;
    }
    int flats = G <= PD_FLAT_DEVICES && topo->node_count > 1 && pu_uniform_node_size(topo) > 1;
    for (int flat = 0; flat <= flats; flat++)
        for (int pow2 = G > 64; pow2 <= 1; pow2++)
            out[n++] = PD_COARSE | (flat ? PD_FLAT : 0) | (pow2 ? PD_POW2 : 0);
    return n;
}

/* Whether plan's round-robin program stays within PD_RR_MB_MAX micro-batches. */
static int rr_short(const pt_plan *plan)
{
    int w = 0;
    return pt_sched_window_count(plan, plan->microbatch_count, 0, &w, NULL) == 0 &&
           (int64_t)w * plan->microbatch_count <= PD_RR_MB_MAX;
}

/* Two-stage candidates kept per micro-batch size (several nodes,
 * PD_FLAT_DEVICES devices or fewer): PipeDream's slowest-stage figure
 * misjudges how round-robin rounds of unequal stages stall each other across
 * nodes (VGG-16 on sosp-cluster-b at 1,024: its optimum 13:2:1 simulates
 * 461 ms, 15:1 337 ms), so the best P:Q splits by that figure are simulated
 * beside the dynamic programs' optima. */
#define PD_TWO_STAGE 2

/* The PD_TWO_STAGE best P:Q splits (P + Q = every device, stage 0 on the
 * first P) at micro-batch mbs by the flat search's stage costs, into pk
 * through pick_simulated. 0 or PT_ENOMEM. */
static int two_stage(pu_scorer *sc, const pt_topology *topo, int global_batch, int mbs,
                     const pt_planner_opts *opts, pdpick *pk, pt_error *err)
{
    pdsearch s;
    int rc = search_init(&s, sc->cost, topo, mbs, global_batch / mbs, opts->optim, 0,
                         PD_FLAT | PD_COARSE);
    double bv[PD_TWO_STAGE];
    int bk[PD_TWO_STAGE], bp[PD_TWO_STAGE], nb = 0, G = s.G;
    for (int k = 1; rc == 0 && k < s.N; k++)
        for (int P = 1; P < G; P++) {
            if (!rep_ok(&s.L1, P) || !rep_ok(&s.L1, G - P))
                continue;
            double v = fmax(stage_cost(&s.L1, 0, k, P), stage_cost(&s.L1, k, s.N, G - P));
            int at = nb;
            if (nb == PD_TWO_STAGE) { /* full: it must beat the worst kept */
                if (v >= bv[nb - 1])
                    continue;
                at = nb - 1;
            } else {
                nb++;
            }
            for (; at > 0 && bv[at - 1] > v; at--) {
                bv[at] = bv[at - 1];
                bk[at] = bk[at - 1];
                bp[at] = bp[at - 1];
            }
            bv[at] = v;
            bk[at] = k;
            bp[at] = P;
        }
    for (int c = 0; rc == 0 && c < nb; c++) {
        int cuts[3] = {0, s.bnd[bk[c]], s.bnd[s.N]};
        pdresult r = {bv[c], pu_plan_alloc(pt_cost_profile(sc->cost), 2, cuts, PT_SCHED_PIPEDREAM,
                                           mbs, global_batch / mbs, opts->optim)};
        for (int t = 0; t < 2 && r.plan; t++) {
            int n = t ? G - bp[c] : bp[c], *d = malloc((size_t)n * sizeof *d);
            for (int i = 0; d && i < n; i++)
                d[i] = (t ? bp[c] : 0) + i;
            if (!d || pt_plan_set_replicas(r.plan, t, d, n) < 0)
                pt_plan_free(&r.plan);
            free(d);
        }
        if (!r.plan) {
            rc = PT_ENOMEM;
            break;
        }
        r.plan->replication = PT_REPL_ROUND_ROBIN;
        pk->planned++;
        if (!rr_short(r.plan)) {
            pk->too_long++;
            pt_plan_free(&r.plan);
            continue;
        }
        rc = pick_simulated(pk, sc, &r, mbs, err);
    }
    search_free(&s);
    return rc;
}

/* Plans every size and variant and picks; 0, or PT_ENOMEM. */
static int pd_search(const pt_profile *profile, const pt_topology *topo, int global_batch,
                     const pt_planner_opts *opts, pu_scorer *sc, pdpick *pk, char *levels,
                     size_t ltcap, pt_error *err)
{
    int paper = opts->objective == PT_OBJECTIVE_PIPEDREAM;
    int sizes[PT_PLANNER_MB_CHOICES_MAX], variants[4];
    int n = pd_sizes(profile, global_batch, opts, paper, sizes);
    int nv = pd_variants(topo, paper, variants), step = 1;
    int want = topo->device_count > PD_FLAT_DEVICES ? PD_SCALE_SIZES : PD_SIZES;
    if (n > want)
        step = (n + want - 1) / want;
    for (int c = n - 1; c >= 0; c -= step) {
        for (int v = 0; v < nv; v++) {
            pdresult r = {INFINITY, NULL};
            char text[96];
            int rc = pd_plan_for(sc->cost, topo, global_batch, sizes[c], opts->optim, paper,
                                 variants[v], &r, text, sizeof text);
            if (rc == PT_ENOMEM)
                return rc;
            if (rc < 0 || !r.plan)
                continue;
            pk->planned++;
            if (!paper && !rr_short(r.plan)) {
                pk->too_long++;
                pt_plan_free(&r.plan);
                continue;
            }
            const pt_plan *kept = pk->best.plan;
            if (paper)
                pick_paper(pk, sc->cost, &r, sizes[c]);
            else if ((rc = pick_simulated(pk, sc, &r, sizes[c], err)) < 0)
                return rc;
            if (pk->best.plan != kept || !*levels)
                snprintf(levels, ltcap, "%s%s", text,
                         variants[v] & PD_POW2 ? ", replica counts powers of two" : "");
        }
        if (!paper && topo->device_count <= PD_FLAT_DEVICES && topo->node_count > 1) {
            const pt_plan *kept = pk->best.plan;
            int rc = two_stage(sc, topo, global_batch, sizes[c], opts, pk, err);
            if (rc < 0)
                return rc;
            if (pk->best.plan != kept)
                snprintf(levels, ltcap, "a two-stage split over all %d devices",
                         topo->device_count);
        }
    }
    return 0;
}

/* PT_ENOFIT naming the stashing need: the least memory among its plans and
 * the bound over every partition. */
static int pd_nofit(const pt_cost *cost, const pt_topology *topo, const pt_planner_opts *opts,
                    const pdpick *pk, pt_planner_report *report, pt_error *err)
{
    pt_error merr = {0};
    char bb[32], detail[2 * PT_ERROR_MAX];
    if (opts->objective == PT_OBJECTIVE_PIPEDREAM) {
        pt_cost_plan_memory(cost, pk->best.plan, &merr);
        int S = pk->best.plan->stage_count;
        snprintf(detail, sizeof detail,
                 "PipeDream's plan (%d stages, which stash up to %d weight versions) needs that; "
                 "its search does not trade speed for memory (try the default objective, 2bw or "
                 "dapple). %s",
                 S, pt_plan_rr_inflight(pk->best.plan, 0), merr.msg);
    } else {
        snprintf(detail, sizeof detail,
                 "the least over its plans for %d micro-batch size%s, stages recomputing where "
                 "that fits. Weight stashing keeps the weight versions of every micro-batch in "
                 "flight, so whatever the partition some stage holds at least %s of weights, "
                 "gradients and optimizer state on these %d devices (2bw keeps two versions, "
                 "dapple one)",
                 pk->planned, pk->planned > 1 ? "s" : "",
                 pu_bytes_str((int64_t)stash_bound(cost, topo, opts->optim), bb, sizeof bb),
                 topo->device_count);
    }
    return pu_error_nofit(err, report, "pipedream", pu_topology_min_memory(topo), pk->least,
                          detail);
}

static void pd_report(pt_planner_report *report, const pt_cost *cost, const pdpick *pk,
                      const char *levels, int paper)
{
    const pt_plan *p = pk->best.plan;
    report->objective_s = pk->best.objective;
    report->bound_s = pk->best.objective * p->microbatch_count;
    report->iter_s = pk->sim_s;
    report->peak_memory_bytes = pu_plan_peak_memory(cost, p, NULL);
    report->evaluated = pk->planned;
    pu_why(report, "%s; micro-batch %d (%d per iteration); %d stage%s, replicas (round-robin)",
           levels, p->microbatch_size, p->microbatch_count, p->stage_count,
           p->stage_count > 1 ? "s" : "");
    for (int s = 0; s < p->stage_count; s++)
        pu_why(report, "%s%d", s ? ":" : " ", p->stages[s].replica_count);
    pu_why(report,
           "; slowest stage %.3f ms per micro-batch (M x it: %.3f ms per iteration), simulated "
           "steady state %.3f ms per iteration",
           pk->best.objective * 1e3, report->bound_s * 1e3, report->iter_s * 1e3);
    if (!paper)
        pu_why(report, "; of %d plans over the micro-batch sizes (%d fit), the fastest simulated",
               pk->planned, pk->fitting);
    if (pk->too_long)
        pu_why(report, " (%d dropped: their round-robin rounds need over %d micro-batches a run)",
               pk->too_long, PD_RR_MB_MAX);
    pu_why_recompute(report, cost, (pt_plan *)p);
}

/* PipeDream's search and its weight-stashing plan (pt_planner_pipedream's
 * contract without the fallback). */
static int stash_plan(const pt_profile *profile, const pt_topology *topo, int global_batch,
                      const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                      pt_error *err)
{
    *out = NULL;
    double t0 = pt_clock_s();
    int paper = opts->objective == PT_OBJECTIVE_PIPEDREAM;
    pu_report_begin(report, "pipedream",
                    paper ? "slowest stage per micro-batch (PipeDream's optimizer's formulas)"
                          : "simulated steady state (search: slowest stage per micro-batch, "
                            "PipeDream's model with round-robin replication)");
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    pu_scorer sc;
    if (pu_scorer_init(&sc, cost) < 0) {
        pt_cost_free(&cost);
        return pt_error_set(err, PT_ENOMEM, "pipedream: out of memory");
    }
    pdpick pk = {{INFINITY, NULL}, NAN, 0, 0, 0, INT64_MAX, 0};
    char levels[128] = "";
    rc = pd_search(profile, topo, global_batch, opts, &sc, &pk, levels, sizeof levels, err);
    if (rc == PT_ENOMEM)
        pt_error_set(err, rc, "pipedream: out of memory");
    else if (rc == 0 && pk.planned == 0)
        rc = pt_error_set(err, PT_EINVAL, "pipedream: no plan for the micro-batch sizes given");
    else if (rc == 0 && !pk.fitting)
        rc = pd_nofit(cost, topo, opts, &pk, report, err);
    if (rc == 0 && isnan(pk.sim_s))
        rc = pu_score(&sc, pk.best.plan, &pk.sim_s, NULL, NULL, err);
    pu_scorer_release(&sc);
    if (rc == 0 && report)
        pd_report(report, cost, &pk, levels, paper);
    if (report)
        report->search_s = pt_clock_s() - t0;
    if (rc == 0) {
        *out = pk.best.plan;
        pk.best.plan = NULL;
    }
    pt_plan_free(&pk.best.plan);
    pt_cost_free(&cost);
    return rc;
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
    double t0 = pt_clock_s();
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
        report->search_s = pt_clock_s() - t0;
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
    report->search_s = pt_clock_s() - t0;
    return rc;
}

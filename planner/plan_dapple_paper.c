/* `--objective dapple`: DAPPLE's released planner (AlibabaPAI/DAPPLE,
 * planner/src: analysis/cc_overlap.rs, analysis/gradient_accumulation.rs,
 * parallelism/sync_pipeline.rs, orchestration/orchestrate.rs), for comparing
 * with the paper's planning results (DAPPLE §VI-B), beside the general
 * search of plan_dapple.c. Its model, as the released code computes it:
 *
 * Profile at the global batch. A layer's time c_l(GBS) and output activation
 * a_l(GBS) are the profile's scaled by GBS / profile micro-batch (its
 * Model::normalize); C(i..j) their sums, W the parameter bytes.
 *
 * Constants (environment/): NVLink point-to-point 25 GB/s inside a server;
 * Ethernet 1 GB/s point-to-point and 3 GB/s for NCCL all-reduce between
 * servers, fixed whatever the topology's links (so Config-B and Config-C
 * are the same to it). All-reduce of W over devices g: 2 (p-1)/p W / 3 GB/s
 * across servers, 2 (p-1)/p W / 25 GB/s / (p/2) inside one (p/2 an integer
 * division). Split-concat of `size` bytes from devices f to devices t
 * (split_concat_all2all_time): when t sits in one server, size / |f| * (the
 * f devices in another server) / 1 GB/s, or size / 25 GB/s when none is;
 * when t spans servers, size / 3 GB/s if f and t do, else size / 25 GB/s.
 *
 * Overlapped data parallelism (gradient_accumulation.rs'
 * dp_cur_ga_inner_overlap_speedup): T = C(0..N)/G + offset, the offset a walk
 * over the layers (cc_overlap_partial without inter-batch overlap): layer l's
 * all-reduce ETA_l (over all G devices) may run during the backward of layer
 * l-1, c_{l-1} g/GBS/2 (g = current_ga_iter_size: GBS when a device holds the
 * whole batch, else GBS / k for the smallest divisor k of GBS with
 * GBS / k <= (16 GB - W * 3) / activation bytes per sample); what an
 * all-reduce leaves over drifts into the offset unless excess slot time left
 * by the layers before absorbs it; layer 0's all-reduce is all offset.
 * ResNet-50 on Config-A at 128: g = 32, T = 27.7 + 8.5 = 36.3 ms.
 *
 * A pipeline of stages (first, last, devices g_s) with rp replicas of the
 * whole pipeline and its max-min block time B (the dynamic program's value:
 * the slowest stage's C(stage)/|g_s|, or a boundary's transfer, at GBS) has
 * M = GBS / rp / min_mbs micro-batches (fixed, min_mbs the smallest
 * micro-batch size: 1 unless --microbatch says) and takes
 *   L = b (M - 1) + C(0..N)/(rp M) + sum_s split_concat(g_s, g_s+1, a_s/(rp M))
 *       + max(0, max_s (AR_s - s b)),   b = B / M
 * (sync_pipeline_speedup_analytical). Its search space: the general stage
 * DP has its all-reduce terms commented out, so for every machine count its
 * answer is one stage on everything (a non-overlapped data parallelism, never
 * below T above); what it can choose is then
 *   - bipartitions P:Q (compute_bipartition): stage 0 = layers [0, l] on P
 *     devices placed Fresh First or Scatter First, stage 1 the rest on the
 *     other Q; B = max(C/P, C/Q, split_concat(a_l(GBS))); rp = 1;
 *   - "8:8" (plan_for(2, straight)): two stages of rp = G/2 devices, the
 *     first Fresh First, B = min over the cut of max(C/rp per stage,
 *     split_concat(2 a(GBS))); when G is even and above 2;
 *   - the straight pipeline of G single-device stages (plan_for(G,
 *     straight)), B the max-min over partitions of the stage times and the
 *     2 a(GBS) transfers between consecutive devices; when layers >= G.
 * The smallest L (largest speed-up) wins; DP when T is smallest.
 *
 * The plan pipetop writes for the winner: the same stages and devices,
 * schedule dapple policy A, micro-batches of the smallest divisor of GBS
 * that gives every replica min_mbs samples (b = rp min_mbs for 8:8, a
 * sample per replica for a bipartition, min_mbs for the straight pipeline;
 * data parallelism: the largest micro-batch whose rows per device fit the
 * memory g says). A candidate whose plan does not fit pipetop's memory model
 * is skipped (DAPPLE's planner checks memory only through g); the report
 * counts them. The planner's objective is DAPPLE's L, not the simulator's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan_util.h"
#include "planner/planner.h"

#define DAPPLE_NVLINK_P2P_BPS 25e9 /* bytes/s, environment/nvlink.rs */
#define DAPPLE_ETH_P2P_BPS    1e9  /* bytes/s, Ethernet point-to-point */
#define DAPPLE_ETH_NCCL_BPS   3e9  /* bytes/s, Ethernet all-reduce */
#define DAPPLE_GPU_MEMORY     16e9 /* bytes, device::GPU_MEMORY */
#define DAPPLE_OPT_SCALING    3    /* optimizer_memory_scaling in its model configs */

/* Kinds of candidate, for the report. */
enum { CAND_DP, CAND_TWO, CAND_PAIR, CAND_STRAIGHT, CAND_KINDS };
static const char *const cand_name[CAND_KINDS] = {"overlapped DP", "bipartition P:Q",
                                                  "G/2:G/2 straight", "straight pipeline"};

typedef struct dpp {
    const pt_cost *cost;
    const pt_topology *topo;
    pt_optim_kind optim;
    int N, G, gbs, min_mbs;
    double *C;     /* prefix of c_l(GBS), seconds: C(i..j) = C[j] - C[i] */
    double *Wp;    /* prefix of parameter bytes */
    double *act;   /* act[k]: a_{k-1}(GBS), the activation crossing a cut before layer k */
    int *order_sf; /* devices in Scatter First order (one per server, round robin) */
    long long evaluated;
    int skipped[CAND_KINDS]; /* candidates whose plan does not fit pipetop's memory model */
} dpp;

/* A candidate: its latency, the stages' cuts and devices (listed in order:
 * stage s owns devs[off[s] .. off[s+1])), rp, and the plan's micro-batch. */
typedef struct cand {
    int kind;
    double L;
    int S, rp, b;
    int *cuts, *off; /* G + 1 entries each */
    int *devs;       /* G entries */
} cand;

/* Buffers for a candidate of up to G stages; 0 or PT_ENOMEM. */
static int cand_init(cand *c, int kind, int G)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->L = INFINITY;
    c->cuts = malloc(((size_t)G + 1) * sizeof *c->cuts);
    c->off = malloc(((size_t)G + 1) * sizeof *c->off);
    c->devs = malloc((size_t)G * sizeof *c->devs);
    return c->cuts && c->off && c->devs ? 0 : PT_ENOMEM;
}

static void cand_free(cand *c)
{
    free(c->cuts);
    free(c->off);
    free(c->devs);
}

static void cand_copy(cand *dst, const cand *src, int G)
{
    int *cuts = dst->cuts, *off = dst->off, *devs = dst->devs;
    *dst = *src;
    dst->cuts = cuts;
    dst->off = off;
    dst->devs = devs;
    memcpy(cuts, src->cuts, ((size_t)src->S + 1) * sizeof *cuts);
    memcpy(off, src->off, ((size_t)src->S + 1) * sizeof *off);
    memcpy(devs, src->devs, (size_t)G * sizeof *devs);
}

static int node_of(const dpp *D, int d)
{
    return D->topo->devices[d].node;
}

static int spans(const dpp *D, const int *g, int n)
{
    for (int i = 1; i < n; i++)
        if (node_of(D, g[i]) != node_of(D, g[0]))
            return 1;
    return 0;
}

/* data_parallel::all_reduce_time */
static double ar_time(const dpp *D, const int *g, int p, double bytes)
{
    if (p <= 1)
        return 0;
    double f = 2.0 * (p - 1) / p * bytes;
    return spans(D, g, p) ? f / DAPPLE_ETH_NCCL_BPS : f / DAPPLE_NVLINK_P2P_BPS / (p / 2);
}

/* split_concat::split_concat_all2all_time */
static double sc_time(const dpp *D, const int *f, int nf, const int *t, int nt, double size)
{
    if (!spans(D, t, nt)) {
        int cross = 0;
        for (int i = 0; i < nf; i++)
            cross += node_of(D, f[i]) != node_of(D, t[0]);
        return cross ? size / nf * cross / DAPPLE_ETH_P2P_BPS : size / DAPPLE_NVLINK_P2P_BPS;
    }
    int any = 0;
    for (int i = 0; i < nf && !any; i++)
        for (int j = 0; j < nt && !any; j++)
            any = node_of(D, f[i]) != node_of(D, t[j]);
    return size / (any ? DAPPLE_ETH_NCCL_BPS : DAPPLE_NVLINK_P2P_BPS);
}

/* The largest per-device batch DAPPLE's memory model allows, and g. */
static int ga_iter_size(const dpp *D)
{
    double act = 0;
    const pt_profile *pr = pt_cost_profile(D->cost);
    for (int l = 0; l < D->N; l++)
        act += (double)pr->layers[l].act_bytes;
    act /= pr->microbatch; /* activation bytes per sample */
    double room = DAPPLE_GPU_MEMORY - D->Wp[D->N] * DAPPLE_OPT_SCALING;
    int max_bs = act > 0 && room > 0 ? (int)fmin(room / act, 1e9) : (act > 0 ? 0 : D->gbs);
    if (max_bs >= D->gbs)
        return D->gbs;
    if (max_bs < 1)
        return 1;
    int it = (D->gbs + max_bs - 1) / max_bs;
    while (it < D->gbs / 2 + 1 && D->gbs % it)
        it++;
    return D->gbs / it;
}

static double c_of(const dpp *D, int l)
{
    return D->C[l + 1] - D->C[l];
}

/* cc_overlap_partial(inter_batch = false, partial), the offset of
 * gradient_accumulation.rs' dp_cur_ga_inner_overlap_speedup: its blocks run
 * from the last layer; layer l's all-reduce may run during the backward of
 * layer l-1, c_{l-1} partial / 2 (its prev_slot; without inter-batch overlap
 * there is no after_slot). */
static double overlap_offset(const dpp *D, const int *all, double partial)
{
    double offset = 0, excess = 0;
    const pt_profile *pr = pt_cost_profile(D->cost);
    for (int l = 0; l < D->N; l++) {
        double eta = ar_time(D, all, D->G, (double)pr->layers[l].param_bytes);
        if (l == 0) {
            offset += eta;
            continue;
        }
        double slot = c_of(D, l - 1) * partial / 2;
        if (slot < eta) {
            double over = eta - slot;
            if (over < excess) {
                excess -= over;
            } else {
                offset += over - excess;
                excess = 0;
            }
        } else {
            excess += slot - eta;
        }
    }
    return offset;
}

/* sync_pipeline_speedup_analytical's length; stages s = devs[off[s] ..
 * off[s+1]) on layers [cuts[s], cuts[s+1]). INFINITY when M is 0. */
static double analytical(const dpp *D, const cand *c, double ppl_time)
{
    int M = D->gbs / c->rp / D->min_mbs;
    if (M < 1)
        return INFINITY;
    double block = ppl_time / M;
    double L = block * (M - 1) + D->C[D->N] / c->rp / M, delta = 0;
    for (int s = 0; s < c->S; s++) {
        const int *g = c->devs + c->off[s];
        int n = c->off[s + 1] - c->off[s];
        if (s + 1 < c->S)
            L += sc_time(D, g, n, c->devs + c->off[s + 1], c->off[s + 2] - c->off[s + 1],
                         D->act[c->cuts[s + 1]] / c->rp / M);
        double ar = ar_time(D, g, n, D->Wp[c->cuts[s + 1]] - D->Wp[c->cuts[s]]);
        if (ar - s * block > delta)
            delta = ar - s * block;
    }
    return L + delta;
}

/* Data parallelism over all G devices; its plan's micro-batch: the largest
 * divisor of GBS (>= G) whose rows per device fit g. */
static void try_dp(dpp *D, cand *c)
{
    c->kind = CAND_DP;
    int g = ga_iter_size(D);
    c->S = 1;
    c->rp = 1;
    c->cuts[0] = 0;
    c->cuts[1] = D->N;
    c->off[0] = 0;
    c->off[1] = D->G;
    for (int i = 0; i < D->G; i++)
        c->devs[i] = i;
    c->L = D->C[D->N] / D->G + overlap_offset(D, c->devs, (double)g / D->gbs);
    c->b = 0;
    for (int b = D->gbs; b >= D->G; b--)
        if (D->gbs % b == 0 && pu_rows_max(b, D->G) <= g && (c->b = b))
            break;
    if (!c->b)
        c->b = D->gbs % D->G == 0 ? D->G : D->gbs;
    D->evaluated++;
}

/* The smallest divisor of GBS that gives each of r replicas min_mbs rows. */
static int mb_for(const dpp *D, int r)
{
    for (int b = r * D->min_mbs; b <= D->gbs; b++)
        if (D->gbs % b == 0)
            return b;
    return D->gbs;
}

/* Keeps candidate x in *best when its latency is lower and its plan fits. */
static int offer(dpp *D, const cand *x, cand *best, int (*fits)(dpp *, const cand *))
{
    D->evaluated++;
    if (!(x->L < best->L))
        return 0;
    int ok = fits(D, x);
    if (ok < 0)
        return ok;
    if (!ok) {
        D->skipped[x->kind]++;
        return 0;
    }
    cand_copy(best, x, D->G);
    return 0;
}

/* compute_bipartition: stage 0 = layers [0, l] on P devices placed Fresh
 * First (in order) or Scatter First, stage 1 the other Q = G - P. */
static int try_two(dpp *D, cand *best, int (*fits)(dpp *, const cand *))
{
    cand x;
    unsigned char *used = malloc((size_t)D->G);
    int rc = cand_init(&x, CAND_TWO, D->G) == 0 && used ? 0 : PT_ENOMEM;
    x.S = 2;
    x.rp = 1;
    for (int P = 1; P < D->G && rc == 0; P++)
        for (int pol = 0; pol < 2 && rc == 0; pol++) {
            const int *order = pol ? D->order_sf : NULL;
            memset(used, 0, (size_t)D->G);
            for (int i = 0; i < P; i++)
                used[x.devs[i] = order ? order[i] : i] = 1;
            for (int d = 0, k = P; d < D->G; d++)
                if (!used[d])
                    x.devs[k++] = d;
            x.off[0] = 0;
            x.off[1] = P;
            x.off[2] = D->G;
            x.b = mb_for(D, P > D->G - P ? P : D->G - P);
            for (int l = 1; l < D->N && rc == 0; l++) {
                double comp = fmax(D->C[l] / P, (D->C[D->N] - D->C[l]) / (D->G - P));
                double comm = sc_time(D, x.devs, P, x.devs + P, D->G - P, D->act[l]);
                x.cuts[0] = 0;
                x.cuts[1] = l;
                x.cuts[2] = D->N;
                x.L = analytical(D, &x, fmax(comp, comm));
                rc = offer(D, &x, best, fits);
            }
        }
    cand_free(&x);
    free(used);
    return rc;
}

/* plan_for(2, straight): two stages of rp = G/2 devices each, the first on
 * devices [0, G/2) (Fresh First), cut where max(C/rp, C/rp, split-concat of
 * 2 a(GBS)) is least. */
static int try_pair(dpp *D, cand *best, int (*fits)(dpp *, const cand *))
{
    int G = D->G, rp = G / 2;
    if (G <= 2 || G % 2 || D->N < 2)
        return 0;
    cand x;
    if (cand_init(&x, CAND_PAIR, G) < 0) {
        cand_free(&x);
        return PT_ENOMEM;
    }
    x.S = 2;
    x.rp = rp;
    for (int d = 0; d < G; d++)
        x.devs[d] = d;
    x.off[0] = 0;
    x.off[1] = rp;
    x.off[2] = G;
    x.b = mb_for(D, rp);
    double best_t = INFINITY;
    int cut = 1;
    for (int l = 1; l < D->N; l++) {
        double t = fmax(fmax(D->C[l], D->C[D->N] - D->C[l]) / rp,
                        sc_time(D, x.devs, rp, x.devs + rp, rp, 2 * D->act[l]));
        if (t < best_t) {
            best_t = t;
            cut = l;
        }
    }
    x.cuts[0] = 0;
    x.cuts[1] = cut;
    x.cuts[2] = D->N;
    x.L = analytical(D, &x, best_t);
    int rc = offer(D, &x, best, fits);
    cand_free(&x);
    return rc;
}

/* plan_for(G, straight): G single-device stages on devices 0..G-1 in order,
 * the partition minimising the slowest of the stage times C(k..j) and the
 * transfers of 2 a(GBS) between consecutive devices (a max-min dynamic
 * program, O(G N^2)); needs G <= layers. */
static int try_straight(dpp *D, cand *best, int (*fits)(dpp *, const cand *))
{
    int G = D->G, N = D->N;
    if (G < 2 || N < G)
        return 0;
    cand x;
    double *A = malloc((size_t)(G + 1) * (size_t)(N + 1) * sizeof *A);
    int *arg = malloc((size_t)(G + 1) * (size_t)(N + 1) * sizeof *arg);
    if (cand_init(&x, CAND_STRAIGHT, G) < 0 || !A || !arg) {
        cand_free(&x);
        free(A);
        free(arg);
        return PT_ENOMEM;
    }
    size_t n1 = (size_t)N + 1;
    for (int j = 0; j <= N; j++)
        A[n1 + j] = j ? D->C[j] : INFINITY; /* one stage, on device 0 */
    for (int m = 2; m <= G; m++) {
        int a = m - 2, b = m - 1; /* the devices of the last two stages */
        for (int j = 0; j <= N; j++) {
            double v = INFINITY;
            int bk = -1;
            for (int k = m - 1; k < j; k++) {
                double t = fmax(fmax(A[(size_t)(m - 1) * n1 + k], D->C[j] - D->C[k]),
                                sc_time(D, &a, 1, &b, 1, 2 * D->act[k]));
                if (t < v) {
                    v = t;
                    bk = k;
                }
            }
            A[(size_t)m * n1 + j] = v;
            arg[(size_t)m * n1 + j] = bk;
        }
    }
    x.S = G;
    x.rp = 1;
    x.b = mb_for(D, 1);
    x.cuts[G] = N;
    for (int m = G, j = N; m > 1; m--)
        j = x.cuts[m - 1] = arg[(size_t)m * n1 + j];
    x.cuts[0] = 0;
    for (int s = 0; s <= G; s++)
        x.off[s] = s;
    for (int d = 0; d < G; d++)
        x.devs[d] = d;
    x.L = analytical(D, &x, A[(size_t)G * n1 + N]);
    int rc = offer(D, &x, best, fits);
    cand_free(&x);
    free(A);
    free(arg);
    return rc;
}

/* The pipetop plan of candidate c: its stages and devices, schedule dapple
 * policy A. NULL on no memory. */
static pt_plan *build(const dpp *D, const cand *c)
{
    pt_plan *p = pu_plan_alloc(pt_cost_profile(D->cost), c->S, c->cuts, PT_SCHED_DAPPLE, c->b,
                               D->gbs / c->b, D->optim);
    if (!p)
        return NULL;
    p->policy = 'A';
    for (int s = 0; s < c->S; s++)
        if (pt_plan_set_replicas(p, s, c->devs + c->off[s], c->off[s + 1] - c->off[s]) < 0) {
            pt_plan_free(&p);
            return NULL;
        }
    return p;
}

/* 1 when c's plan fits pipetop's memory model, 0 when not, PT_ENOMEM. */
static int plan_fits(dpp *D, const cand *c)
{
    pt_plan *p = build(D, c);
    if (!p)
        return PT_ENOMEM;
    int ok = pt_cost_plan_memory(D->cost, p, NULL) == 0;
    pt_plan_free(&p);
    return ok;
}

static void dpp_free(dpp *D)
{
    free(D->C);
    free(D->Wp);
    free(D->act);
    free(D->order_sf);
}

/* Prefix sums at the global batch and the Scatter First device order. */
static int dpp_init(dpp *D, const pt_cost *cost, const pt_topology *topo, int gbs,
                    const pt_planner_opts *opts)
{
    const pt_profile *pr = pt_cost_profile(cost);
    memset(D, 0, sizeof *D);
    D->cost = cost;
    D->topo = topo;
    D->optim = opts->optim;
    D->N = pr->layer_count;
    D->G = topo->device_count;
    D->gbs = gbs;
    D->min_mbs = 1;
    for (int i = 0; i < opts->microbatch_size_count; i++)
        if (i == 0 || opts->microbatch_sizes[i] < D->min_mbs)
            D->min_mbs = opts->microbatch_sizes[i];
    size_t n1 = (size_t)D->N + 1;
    D->C = calloc(n1, sizeof *D->C);
    D->Wp = calloc(n1, sizeof *D->Wp);
    D->act = calloc(n1, sizeof *D->act);
    D->order_sf = malloc((size_t)D->G * sizeof *D->order_sf);
    if (!D->C || !D->Wp || !D->act || !D->order_sf)
        return PT_ENOMEM;
    double scale = (double)gbs / pr->microbatch;
    for (int l = 0; l < D->N; l++) {
        const pt_profile_layer *L = &pr->layers[l];
        D->C[l + 1] = D->C[l] + (L->fwd_ms + L->bwd_ms) / 1000.0 * scale;
        D->Wp[l + 1] = D->Wp[l] + (double)L->param_bytes;
        D->act[l + 1] = (double)L->act_bytes * scale;
    }
    /* one device per server, round robin, servers in order */
    int k = 0;
    for (int round = 0; k < D->G; round++)
        for (int n = 0; n < topo->node_count; n++) {
            int seen = 0;
            for (int d = 0; d < D->G; d++)
                if (topo->devices[d].node == n && seen++ == round)
                    D->order_sf[k++] = d;
        }
    return 0;
}

static void report_paper(pt_planner_report *report, const dpp *D, const cand *best, int w,
                         const pt_plan *p)
{
    report->objective_s = best[w].L;
    report->iter_s = best[w].L;
    report->peak_memory_bytes = pu_plan_peak_memory(D->cost, p, NULL);
    report->evaluated = D->evaluated;
    pu_why(report, "DAPPLE's released planner: M = %d / rp / %d; best of each:", D->gbs,
           D->min_mbs);
    for (int k = 0; k < CAND_KINDS; k++) {
        const cand *c = &best[k];
        if (!isfinite(c->L)) {
            pu_why(report, " %s none%s;", cand_name[k], D->skipped[k] ? " fits" : "");
            continue;
        }
        pu_why(report, " %s", cand_name[k]);
        if (k == CAND_TWO || k == CAND_PAIR)
            pu_why(report, " %d:%d cut %d", c->off[1], c->off[2] - c->off[1], c->cuts[1]);
        if (k == CAND_STRAIGHT)
            pu_why(report, " S=%d", c->S);
        pu_why(report, " %.3f ms;", c->L * 1e3);
    }
    pu_why(report, " chose %s", cand_name[w]);
    int skipped = 0;
    for (int k = 0; k < CAND_KINDS; k++)
        skipped += D->skipped[k];
    if (skipped)
        pu_why(report, " (%d better candidates skipped: their plans exceed device memory)",
               skipped);
}

int pt_planner_dapple_paper(const pt_profile *profile, const pt_topology *topo, int global_batch,
                            const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                            pt_error *err)
{
    *out = NULL;
    double t0 = pt_clock_s();
    pu_report_begin(report, "dapple",
                    "DAPPLE's released planner: its pipeline latency vs its overlapped DP");
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    dpp D;
    cand best[CAND_KINDS];
    rc = dpp_init(&D, cost, topo, global_batch, opts);
    for (int k = 0; k < CAND_KINDS; k++)
        if (cand_init(&best[k], k, D.G) < 0)
            rc = PT_ENOMEM;
    if (rc == 0) {
        try_dp(&D, &best[CAND_DP]);
        int fit = plan_fits(&D, &best[CAND_DP]);
        rc = fit < 0 ? fit : 0;
        if (fit == 0) {
            D.skipped[CAND_DP]++;
            best[CAND_DP].L = INFINITY;
        }
    }
    if (rc == 0 && (rc = try_two(&D, &best[CAND_TWO], plan_fits)) == 0 &&
        (rc = try_pair(&D, &best[CAND_PAIR], plan_fits)) == 0)
        rc = try_straight(&D, &best[CAND_STRAIGHT], plan_fits);
    int w = CAND_DP;
    for (int k = 1; k < CAND_KINDS; k++)
        if (best[k].L < best[w].L)
            w = k;
    pt_plan *p = NULL;
    if (rc < 0)
        rc = pt_error_set(err, rc, "dapple: out of memory");
    else if (!isfinite(best[w].L))
        rc = pu_error_nofit(err, report, "dapple", pu_topology_min_memory(topo), 0,
                            "no overlapped data-parallel, bipartition or straight plan fits "
                            "(DAPPLE's released planner's space)");
    else if (!(p = build(&D, &best[w])))
        rc = pt_error_set(err, PT_ENOMEM, "dapple: out of memory");
    if (rc == 0 && report)
        report_paper(report, &D, best, w, p);
    if (report)
        report->search_s = pt_clock_s() - t0;
    for (int k = 0; k < CAND_KINDS; k++)
        cand_free(&best[k]);
    dpp_free(&D);
    pt_cost_free(&cost);
    *out = p;
    return rc;
}

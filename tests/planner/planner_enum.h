/* Test fixtures for the planner tests: small random profiles, small
 * topologies, and exhaustive enumerators that evaluate each planner's
 * objective on every plan WITHOUT calling the planners' dynamic programs.
 * Only the shared cost model (planner/cost.h: op times, link and ring
 * formulas, the memory model) is used, as the planners use it. */
#ifndef PT_TESTS_PLANNER_ENUM_H
#define PT_TESTS_PLANNER_ENUM_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/planner.h"
#include "planner/schedule.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

#define EN_LAYERS_MAX  8
#define EN_DEVICES_MAX 4
#define EN_GIB         1073741824LL
#define EN_MIB         1048576LL

/* xorshift64*: deterministic across platforms */
static uint64_t en_rng_state;
static inline void en_seed(uint64_t s)
{
    en_rng_state = s * 2654435761ULL + 0x9E3779B97F4A7C15ULL;
}
static inline double en_uniform(double lo, double hi)
{
    en_rng_state ^= en_rng_state >> 12;
    en_rng_state ^= en_rng_state << 25;
    en_rng_state ^= en_rng_state >> 27;
    uint64_t x = en_rng_state * 2685821657736338717ULL;
    return lo + (hi - lo) * (double)(x >> 11) / 9007199254740992.0;
}

/* A random chain profile: times in ms, activations and parameters in bytes
 * chosen so that compute, transfers and all-reduces are all significant on
 * the topologies below. */
static inline pt_profile *en_profile(int layers, uint64_t seed)
{
    en_seed(seed);
    pt_profile *p = pt_profile_new(layers);
    if (!p)
        return NULL;
    snprintf(p->model, sizeof p->model, "rand%llu", (unsigned long long)seed);
    snprintf(p->device, sizeof p->device, "test");
    snprintf(p->source, sizeof p->source, "analytic");
    p->microbatch = 4;
    p->input_bytes = (int64_t)en_uniform(1e5, 4e6);
    for (int l = 0; l < layers; l++) {
        pt_profile_layer *L = &p->layers[l];
        snprintf(L->name, sizeof L->name, "l%d", l);
        L->fwd_ms = en_uniform(0.5, 6.0);
        L->bwd_ms = L->fwd_ms * en_uniform(1.4, 2.6);
        L->recompute_ms = L->fwd_ms;
        L->act_bytes = (int64_t)en_uniform(2e5, 2.5e7);
        L->param_bytes = en_uniform(0, 1) < 0.25 ? 0 : (int64_t)en_uniform(1e5, 6e7);
    }
    return p;
}

/* nodes x per_node devices; intra 100 Gbit/s 5 us, inter `inter_gbps` 20 us. */
static inline pt_topology *en_topology(int nodes, int per_node, double inter_gbps, int64_t mem)
{
    pt_link intra = {100e9 / 8, 5e-6}, inter = {inter_gbps * 1e9 / 8, 20e-6};
    return pt_topology_uniform(nodes, per_node, mem, intra, inter);
}

/* Divisors of gbs, ascending (the planners' default candidates for gbs <= 16). */
static inline int en_divisors(int gbs, int *out)
{
    int n = 0;
    for (int d = 1; d <= gbs; d++)
        if (gbs % d == 0)
            out[n++] = d;
    return n;
}

static inline double en_rel(double a, double b)
{
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return m > 0 ? fabs(a - b) / m : 0;
}

/* ---------- DAPPLE ---------- */

/* DAPPLE's placement policies, written independently of plan_dapple.c from
 * their definitions: Fresh First takes from the nodes with the most free
 * devices (the adjacent stage's node last among equals, then the lowest
 * index); Append First takes the adjacent stage's node first, then partly
 * used nodes with the fewest free devices, then fresh nodes; Scatter First
 * takes one device per node in Fresh First's order, round after round.
 * free[] and taken devices are updated; returns the number of devices
 * written to devs, or -1 when not enough are free. */
static inline int en_place(const pt_topology *t, int *freec, int *used, int bnode, int r, int pol,
                           int *devs)
{
    int nodes = t->node_count, size[64] = {0}, first[64];
    for (int n = 0; n < nodes; n++)
        first[n] = -1;
    for (int d = 0; d < t->device_count; d++) {
        if (first[t->devices[d].node] < 0)
            first[t->devices[d].node] = d;
        size[t->devices[d].node]++;
    }
    int total = 0;
    for (int n = 0; n < nodes; n++)
        total += freec[n];
    if (total < r)
        return -1;
    int order[64], no = 0, picked[64] = {0};
    /* build the visiting order by repeated selection */
    for (int step = 0; step < nodes; step++) {
        int best = -1;
        for (int n = 0; n < nodes; n++) {
            if (picked[n] || freec[n] == 0)
                continue;
            if (best < 0) {
                best = n;
                continue;
            }
            int better;
            if (pol == 1) { /* append first */
                int nb = n == bnode, bb = best == bnode;
                int nf = freec[n] == size[n], bf = freec[best] == size[best];
                if (nb != bb)
                    better = nb;
                else if (nf != bf)
                    better = !nf;
                else if (freec[n] != freec[best])
                    better = freec[n] < freec[best];
                else
                    better = 0; /* lower index already */
            } else {            /* fresh first and scatter first */
                if (freec[n] != freec[best])
                    better = freec[n] > freec[best];
                else if ((n == bnode) != (best == bnode))
                    better = best == bnode;
                else
                    better = 0;
            }
            if (better)
                best = n;
        }
        if (best < 0)
            break;
        picked[best] = 1;
        order[no++] = best;
    }
    int take[64] = {0}, rem = r, avail[64];
    for (int n = 0; n < nodes; n++)
        avail[n] = freec[n];
    if (pol == 2) {
        while (rem > 0)
            for (int i = 0; i < no && rem > 0; i++)
                if (avail[order[i]] > 0) {
                    avail[order[i]]--;
                    take[i]++;
                    rem--;
                }
    } else {
        for (int i = 0; i < no && rem > 0; i++) {
            int t2 = avail[order[i]] < rem ? avail[order[i]] : rem;
            avail[order[i]] -= t2;
            take[i] = t2;
            rem -= t2;
        }
    }
    int cnt = 0;
    for (int i = 0; i < no; i++) {
        int n = order[i];
        for (int k = 0; k < take[i]; k++)
            devs[cnt++] = first[n] + used[n]++;
        freec[n] -= take[i];
    }
    return cnt;
}

/* DAPPLE's latency of a plan by its definition under a policy: the largest,
 * over pivot units p (stages and the boundaries between them) and stages
 * e <= p, of
 *   sum_{v<p} F_v + core_p + sum_{e<=v<p} B_v + AR_e,
 * and over stages p and stages e > p of
 *   sum_{v<p} F_v + Y_p + sum_{v>p} F_v + sum_{v>=e} B_v + AR_e
 * with Y_p = max(M F_p + (M-K_p) B_p, F_p + RT + (M-K_p)(F_p+B_p)) (the second
 * when M > K_p, RT the F + B of every unit after p) bounding p's last forward;
 * core_p = M (F_p + B_p), and for a stage at least (q+1) RT + rho w_p (RT the
 * sum of F + B over p and every unit after it, M - 1 = q K_p + rho) and
 * Y_p + RT + B_p and max(F_p + RT', S0_p) + M B_p + (M-K_p) F_p (RT' the units
 * after p; S0_p = max(K_p F_p, F_p + cf_p + S0_{p+1} + B_{p+1} + cb_p) the first
 * backward's start after micro-batch 0 enters p, behind the warm-ups);
 * and, for stages p > 0 and e < p, sum_{v<=p} F_v + M (F_{p+1} + B_{p-1}) +
 * sum_{e<=v<=p-2} B_v + AR_e (p's communication lane);
 * K_p = min(S - p, M) (policy A) or min(2(S - p) - 1, M) (policy B),
 * w_p = F_p + B_p (F_p when q = 0); a boundary on
 * one node when both its stages sit on one node, else at the inter-node link
 * for every pair; split-concat transfers; AR_e the part of stage e's bucketed
 * ring all-reduce that outlasts its last backward plus its optimizer step. */
/* The part of a replicated stage's gradient all-reduce that outlasts its last
 * backward, written from the rule in planner/schedule.h (buckets of
 * PT_SCHED_BUCKET_BYTES walked from the last layer, each all-reduced once the
 * backward has run its layers, one after another), independently of
 * planner/cost.c's implementation. */
static inline double en_exposed_allreduce(const pt_cost *cost, const pt_stage *st, int rows,
                                          int dev)
{
    const pt_profile *pr = pt_cost_profile(cost);
    double end = 0, bwd = pt_cost_bwd_s(cost, st->first, st->last, rows, dev);
    int hi = st->last;
    while (hi > st->first) {
        int lo = hi;
        int64_t bytes = 0;
        while (lo > st->first && (lo == hi || bytes < PT_SCHED_BUCKET_BYTES)) {
            lo--;
            bytes += pr->layers[lo].param_bytes;
        }
        int64_t below = 0;
        for (int l = st->first; l < lo; l++)
            below += pr->layers[l].param_bytes;
        if (below == 0) {
            bytes += below;
            lo = st->first;
        }
        double ready = pt_cost_bwd_s(cost, lo, st->last, rows, dev);
        end = (end > ready ? end : ready) +
              pt_cost_allreduce_s(cost, st->replicas, st->replica_count, bytes);
        hi = lo;
    }
    return end > bwd ? end - bwd : 0;
}

static inline double en_dapple_latency_pol(const pt_cost *cost, const pt_plan *p, char policy)
{
    const pt_topology *t = pt_cost_topology(cost);
    const pt_profile *pr = pt_cost_profile(cost);
    int S = p->stage_count, M = p->microbatch_count, b = p->microbatch_size;
    double F[2 * EN_LAYERS_MAX], B[2 * EN_LAYERS_MAX], AR[2 * EN_LAYERS_MAX];
    for (int s = 0; s < S; s++) {
        const pt_stage *st = &p->stages[s];
        int r = st->replica_count, rows = (b + r - 1) / r, dev = st->replicas[0];
        F[2 * s] = pt_cost_fwd_s(cost, st->first, st->last, rows, dev);
        B[2 * s] = pt_cost_bwd_s(cost, st->first, st->last, rows, dev);
        if (st->recompute)
            B[2 * s] += pt_cost_recompute_s(cost, st->first, st->last, rows, dev);
        int64_t P = pt_cost_param_bytes(cost, st->first, st->last);
        AR[2 * s] = (r > 1 ? en_exposed_allreduce(cost, st, rows, dev) : 0) +
                    pt_cost_opt_step_s(cost, P, p->optimizer.kind, dev);
        if (s + 1 < S) {
            const pt_stage *nx = &p->stages[s + 1];
            int one = 1, node = t->devices[st->replicas[0]].node;
            for (int k = 0; k < r; k++)
                one &= t->devices[st->replicas[k]].node == node;
            for (int k = 0; k < nx->replica_count; k++)
                one &= t->devices[nx->replicas[k]].node == node;
            /* every pair on the chosen link: realise it with pt_cost_boundary_s
             * by a direct sum over the split-concat overlaps */
            pt_link l = one ? t->intra : t->inter;
            int64_t mb_bytes = pr->layers[st->last - 1].act_bytes;
            double cf = 0, cb = 0;
            for (int dir = 0; dir < 2; dir++) {
                int sr = dir ? nx->replica_count : r, dr = dir ? r : nx->replica_count;
                double worst = 0;
                for (int j = 0; j < sr; j++) {
                    double tt = 0;
                    for (int k = 0; k < dr; k++) {
                        int slo = b * j / sr, shi = b * (j + 1) / sr;
                        int dlo = b * k / dr, dhi = b * (k + 1) / dr;
                        int lo = slo > dlo ? slo : dlo, hi = shi < dhi ? shi : dhi;
                        if (lo < hi)
                            tt += pt_cost_link_s(l, mb_bytes * (hi - lo) / pr->microbatch);
                    }
                    if (tt > worst)
                        worst = tt;
                }
                if (dir)
                    cb = worst;
                else
                    cf = worst;
            }
            F[2 * s + 1] = cf;
            B[2 * s + 1] = cb;
            AR[2 * s + 1] = 0;
        }
    }
    double best = 0;
    int U = 2 * S - 1;
    /* S0[s]: earliest start of stage s's first backward after micro-batch 0
     * enters it: its warm-up forwards, and the first gradient from s+1 */
    double S0[EN_LAYERS_MAX];
    for (int st = S - 1; st >= 0; st--) {
        int K = policy == 'B' ? 2 * (S - st) - 1 : S - st;
        if (K > M)
            K = M;
        S0[st] = K * F[2 * st];
        if (st + 1 < S) {
            double g = F[2 * st] + F[2 * st + 1] + S0[st + 1] + B[2 * st + 2] + B[2 * st + 1];
            if (g > S0[st])
                S0[st] = g;
        }
    }
    for (int p = 0; p < U; p++) {
        double w = F[p] + B[p], core = M * w, Y = 0, after = 0, fwd_after = 0;
        for (int v = p + 1; v < U; v++) {
            after += F[v] + B[v];
            fwd_after += F[v];
        }
        if (p % 2 == 0) {
            int K = policy == 'B' ? 2 * (S - p / 2) - 1 : S - p / 2;
            if (K > M)
                K = M;
            /* micro-batch j + K waits for j's backward; past warm-up forwards
             * are a forward and a backward apart */
            int q = (M - 1) / K, rho = (M - 1) % K;
            double loop = (q + 1) * (w + after) + rho * (q > 0 ? w : F[p]);
            if (loop > core)
                core = loop;
            /* the last forward: behind M forwards and M-K backwards on the
             * stage, and (past warm-up) behind the first round trip */
            Y = M * F[p] + (M - K) * B[p];
            if (M > K && p + 1 < U && F[p] + after + (M - K) * w > Y)
                Y = F[p] + after + (M - K) * w;
            if (Y + after + B[p] > core)
                core = Y + after + B[p];
            /* the first backward waits for the round trip and the warm-ups
             * (S0); then every backward and the forwards past warm-up */
            double first = F[p] + after > S0[p / 2] ? F[p] + after : S0[p / 2];
            double drain = first + M * B[p] + (M - K) * F[p];
            if (drain > core)
                core = drain;
        }
        double before = 0;
        for (int q = 0; q < p; q++)
            before += F[q];
        for (int e = 0; e <= p; e += 2) {
            double v = before + core + AR[e];
            for (int q = e; q < p; q++)
                v += B[q];
            if (v > best)
                best = v;
        }
        if (p % 2 == 0)
            for (int e = p + 2; e < U; e += 2) {
                double v = before + Y + fwd_after + AR[e];
                for (int q = e; q < U; q++)
                    v += B[q];
                if (v > best)
                    best = v;
            }
        /* the communication lane of stage p (> 0): after its first forward it
         * sends M activations on (unit p+1) and M gradients back (unit p-1);
         * then the backwards from stage p-1 down to e and e's all-reduce */
        if (p % 2 == 0 && p > 0) {
            double lane = (p + 1 < U ? F[p + 1] : 0) + B[p - 1];
            for (int e = 0; e < p; e += 2) {
                double v = before + F[p] + M * lane + AR[e];
                for (int q = e; q <= p - 2; q++)
                    v += B[q];
                if (v > best)
                    best = v;
            }
        }
    }
    return best;
}

/* Whether stage s of a dapple plan fits (largest share of rows) with its
 * recompute flag as given. */
static inline int en_dapple_stage_fits(const pt_cost *cost, const pt_plan *p, int s, char policy,
                                       int recompute)
{
    const pt_topology *t = pt_cost_topology(cost);
    const pt_stage *st = &p->stages[s];
    pt_mem_query q = {PT_SCHED_DAPPLE,
                      policy,
                      0,
                      p->optimizer.kind,
                      p->stage_count,
                      s,
                      st->first,
                      st->last,
                      (p->microbatch_size + st->replica_count - 1) / st->replica_count,
                      p->microbatch_count,
                      recompute,
                      1};
    pt_mem m;
    pt_cost_stage_memory(cost, &q, &m);
    for (int r = 0; r < st->replica_count; r++)
        if (m.total > t->devices[st->replicas[r]].memory_bytes)
            return 0;
    return 1;
}

/* Whether every stage of a dapple plan fits with its recompute flags. */
static inline int en_dapple_fits(const pt_cost *cost, const pt_plan *p, char policy)
{
    for (int s = 0; s < p->stage_count; s++)
        if (!en_dapple_stage_fits(cost, p, s, policy, p->stages[s].recompute))
            return 0;
    return 1;
}

/* The planners' recomputation rule: a stage recomputes exactly when it does
 * not fit without and fits with it. Sets the flags; 0 when a stage fits
 * neither way. */
static inline int en_dapple_set_recompute(const pt_cost *cost, pt_plan *p, char policy)
{
    int ok = 1;
    for (int s = 0; s < p->stage_count; s++) {
        p->stages[s].recompute = 0;
        if (en_dapple_stage_fits(cost, p, s, policy, 0))
            continue;
        p->stages[s].recompute = 1;
        ok &= en_dapple_stage_fits(cost, p, s, policy, 1);
    }
    return ok;
}

/* The planner's objective for a plan: the lower latency of the policies
 * that fit memory (A on a tie), each with the recomputation rule applied
 * (p's flags are left as the rule sets them for the last policy tried);
 * INFINITY when neither fits. *policy gets it. */
static inline double en_dapple_objective(const pt_cost *cost, pt_plan *p, char *policy)
{
    double best = INFINITY;
    for (int k = 0; k < 2; k++) {
        char pol = k ? 'B' : 'A';
        if (!en_dapple_set_recompute(cost, p, pol))
            continue;
        double L = en_dapple_latency_pol(cost, p, pol);
        if (L < best) {
            best = L;
            if (policy)
                *policy = pol;
        }
    }
    return best;
}

/* Calls fn(plan, ctx) for every dapple plan: every micro-batch size in mbs,
 * every contiguous partition, every replica count per stage (at most the
 * micro-batch size, all together at most the devices) and every placement
 * policy per stage (applied from the last stage to the first). Returns the
 * number of plans visited. */
typedef void (*en_visit_fn)(pt_plan *plan, void *ctx);

static inline long en_dapple_all(const pt_profile *pr, const pt_topology *t, int gbs,
                                 const int *mbs, int nmb, en_visit_fn fn, void *ctx)
{
    int N = pr->layer_count, G = t->device_count;
    long visited = 0;
    for (int c = 0; c < nmb; c++) {
        int b = mbs[c];
        for (int mask = 0; mask < (1 << (N - 1)); mask++) {
            int cuts[EN_LAYERS_MAX + 1], S = 0;
            cuts[S++] = 0;
            for (int k = 1; k < N; k++)
                if (mask & (1 << (k - 1)))
                    cuts[S++] = k;
            cuts[S] = N;
            if (S > G)
                continue;
            int r[EN_LAYERS_MAX];
            for (int s = 0; s < S; s++)
                r[s] = 1;
            for (;;) {
                int sum = 0, ok = 1;
                for (int s = 0; s < S; s++) {
                    sum += r[s];
                    ok &= r[s] <= b;
                }
                if (sum <= G && ok) {
                    int npol = 1;
                    for (int s = 0; s < S; s++)
                        npol *= 3;
                    for (int code = 0; code < npol; code++) {
                        int pol[EN_LAYERS_MAX], x = code;
                        for (int s = 0; s < S; s++) {
                            pol[s] = x % 3;
                            x /= 3;
                        }
                        pt_plan *p = pt_plan_new(S);
                        int freec[64], used[64] = {0}, bnode = -1, good = 1;
                        for (int n = 0; n < t->node_count; n++)
                            freec[n] = 0;
                        for (int d = 0; d < G; d++)
                            freec[t->devices[d].node]++;
                        for (int s = S - 1; s >= 0 && good; s--) {
                            int devs[EN_DEVICES_MAX];
                            int cnt = en_place(t, freec, used, bnode, r[s], pol[s], devs);
                            if (cnt != r[s]) {
                                good = 0;
                                break;
                            }
                            p->stages[s].first = cuts[s];
                            p->stages[s].last = cuts[s + 1];
                            pt_plan_set_replicas(p, s, devs, cnt);
                            int node = t->devices[devs[0]].node;
                            for (int k = 1; k < cnt; k++)
                                if (t->devices[devs[k]].node != node)
                                    node = -1;
                            bnode = node;
                        }
                        if (good) {
                            snprintf(p->model, sizeof p->model, "%s", pr->model);
                            p->layer_count = N;
                            p->microbatch_size = b;
                            p->microbatch_count = gbs / b;
                            p->schedule = PT_SCHED_DAPPLE;
                            p->policy = 'A';
                            visited++;
                            fn(p, ctx);
                        }
                        pt_plan_free(&p);
                    }
                }
                /* next replica vector */
                int s = 0;
                while (s < S && ++r[s] > G) {
                    r[s] = 1;
                    s++;
                }
                if (s == S)
                    break;
            }
        }
    }
    return visited;
}

/* ---------- balanced partitions ---------- */

/* Calls fn(cuts, S, ctx) for every split of [0,N) into S non-empty stages. */
static inline void en_partitions(int N, int S, void (*fn)(const int *cuts, int S, void *ctx),
                                 void *ctx)
{
    for (int mask = 0; mask < (1 << (N - 1)); mask++) {
        if (__builtin_popcount((unsigned)mask) != S - 1)
            continue;
        int cuts[EN_LAYERS_MAX + 1], n = 0;
        cuts[n++] = 0;
        for (int k = 1; k < N; k++)
            if (mask & (1 << (k - 1)))
                cuts[n++] = k;
        cuts[n] = N;
        fn(cuts, S, ctx);
    }
}

#endif

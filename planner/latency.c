/* The shared latency model (planner/latency.h): DAPPLE's critical path of a
 * synchronous pipeline, evaluated on any plan.
 *
 * The pipeline is a chain of U = 2S - 1 units, the stages at even units and
 * the boundaries between them at odd ones (F = activation transfer, B =
 * gradient transfer, split-concat). Three families of paths bound the
 * iteration (pt_latency_critical_path states them); every term is a path the
 * early-backward order forces, so the maximum is a lower bound the
 * simulator's timeline reaches on the exhaustive test instances
 * (planner_dapple_test). */
#include "planner/latency.h"

#include <math.h>
#include <stdlib.h>

#include "planner/plan_util.h"

static inline double dmax(double a, double b)
{
    return a > b ? a : b;
}

int pt_latency_same_node(const pt_topology *t, const pt_stage *a, const pt_stage *b)
{
    int node = -1;
    const pt_stage *st[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < st[k]->replica_count; r++) {
            int d = st[k]->replicas[r];
            if (d < 0 || d >= t->device_count)
                return 0;
            if (node < 0)
                node = t->devices[d].node;
            else if (t->devices[d].node != node)
                return 0;
        }
    return 1;
}

int pt_latency_slowest_device(const pt_topology *t, const pt_stage *st)
{
    int best = st->replicas[0];
    for (int r = 1; r < st->replica_count; r++)
        if (t->devices[st->replicas[r]].speed < t->devices[best].speed)
            best = st->replicas[r];
    return best;
}

/* The units of a plan: F, B and AR (all-reduce outlasting the last backward,
 * plus the step; stages only) per unit, RT[u] the F + B of units u.. U-1, S0
 * the first backward of micro-batch 0 at each stage counted from its entry,
 * K the in-flight micro-batches of each stage. */
typedef struct units {
    int S, U, M;
    double *F, *B, *AR, *RT, *S0;
    int *K;
} units;

static void units_free(units *u)
{
    free(u->F);
    free(u->K);
}

/* Fills F, B and AR of every unit. */
static void unit_costs(const pt_cost *cost, const pt_plan *plan, units *u)
{
    const pt_topology *t = pt_cost_topology(cost);
    const pt_profile *pr = pt_cost_profile(cost);
    int b = plan->microbatch_size;
    for (int s = 0; s < u->S; s++) {
        const pt_stage *st = &plan->stages[s];
        int r = st->replica_count, rows = pu_rows_max(b, r);
        int dev = pt_latency_slowest_device(t, st);
        double bwd = pt_cost_bwd_s(cost, st->first, st->last, rows, dev);
        u->F[2 * s] = pt_cost_fwd_s(cost, st->first, st->last, rows, dev);
        u->B[2 * s] = bwd;
        if (st->recompute)
            u->B[2 * s] += pt_cost_recompute_s(cost, st->first, st->last, rows, dev);
        int64_t P = pt_cost_param_bytes(cost, st->first, st->last);
        u->AR[2 * s] = pt_cost_overlapped_bwd_allreduce_s(cost, st->replicas, r, st->first,
                                                          st->last, rows, dev, 0) -
                       bwd + pt_cost_opt_step_s(cost, P, plan->optimizer.kind, dev);
        if (s + 1 < u->S) {
            const pt_stage *nx = &plan->stages[s + 1];
            pt_link l = pt_latency_same_node(t, st, nx) ? t->intra : t->inter;
            int64_t bytes = pr->layers[st->last - 1].act_bytes;
            u->F[2 * s + 1] = pu_boundary_s(l, r, nx->replica_count, b, bytes, pr->microbatch);
            u->B[2 * s + 1] = pu_boundary_s(l, nx->replica_count, r, b, bytes, pr->microbatch);
        }
    }
}

/* RT, K and S0 from the unit costs: the first backward of micro-batch 0 at a
 * stage waits for its warm-up forwards and for the first gradient, which
 * waits for the warm-ups downstream. */
static void unit_bounds(const pt_plan *plan, units *u)
{
    int S = u->S, U = u->U, M = u->M;
    u->RT[U] = 0;
    for (int k = U - 1; k >= 0; k--)
        u->RT[k] = u->RT[k + 1] + u->F[k] + u->B[k];
    for (int st = S - 1; st >= 0; st--) {
        int K = pt_cost_inflight(plan->schedule, plan->policy, S, st, M);
        K = K < 1 ? 1 : K > M ? M : K;
        u->K[st] = K;
        int P = 2 * st;
        u->S0[st] = K * u->F[P];
        if (st + 1 < S)
            u->S0[st] =
                dmax(u->S0[st], u->F[P] + u->F[P + 1] + u->S0[st + 1] + u->B[P + 2] + u->B[P + 1]);
    }
}

static int units_init(const pt_cost *cost, const pt_plan *plan, units *u)
{
    u->S = plan->stage_count;
    u->U = 2 * u->S - 1;
    u->M = plan->microbatch_count;
    size_t U = (size_t)u->U;
    u->F = calloc(5 * U + 1 + (size_t)u->S, sizeof *u->F);
    u->K = calloc((size_t)u->S, sizeof *u->K);
    if (!u->F || !u->K) {
        units_free(u);
        return PT_ENOMEM;
    }
    u->B = u->F + U;
    u->AR = u->B + U;
    u->RT = u->AR + U;
    u->S0 = u->RT + U + 1;
    unit_costs(cost, plan, u);
    unit_bounds(plan, u);
    return 0;
}

/* The longest path so far and where it runs. */
typedef struct lpath {
    double len;
    int pivot, ending;
} lpath;

static void consider(lpath *lp, double v, int pivot, int ending)
{
    if (v > lp->len) {
        lp->len = v;
        lp->pivot = pivot;
        lp->ending = ending;
    }
}

/* The steady phase of unit p (a stage's core also holds the round-trip,
 * last-forward and drain bounds); *Y the end of its last forward (stages). */
static double unit_core(const units *u, int p, double *Y)
{
    double w = u->F[p] + u->B[p], core = u->M * w;
    *Y = -INFINITY;
    if (p % 2)
        return core;
    int M = u->M, K = u->K[p / 2];
    double F = u->F[p], B = u->B[p];
    *Y = M * F + (M - K) * B;
    if (M > K && p + 1 < u->U)
        *Y = dmax(*Y, F + u->RT[p + 1] + (M - K) * w);
    double drain = dmax(F + u->RT[p + 1], u->S0[p / 2]) + M * B + (M - K) * F;
    return dmax(dmax(core, pt_latency_loop_bound(M, K, u->RT[p], w, F)),
                dmax(*Y + u->RT[p + 1] + B, drain));
}

/* Paths through pivot p: warm-up to it (pf), its core, then back to a stage
 * e <= p; and, for a stage pivot, its last forward, the last micro-batch down
 * the pipeline and back to a stage e > p. */
static void pivot_paths(const units *u, int p, double pf, lpath *lp)
{
    double Y, core = unit_core(u, p, &Y), back = 0;
    for (int e = p; e >= 0; e--) {
        if (e < p)
            back += u->B[e];
        if (e % 2 == 0)
            consider(lp, pf + core + back + u->AR[e], p, e / 2);
    }
    if (p % 2)
        return;
    double fwd = 0, bk = 0;
    for (int v = p + 1; v < u->U; v++)
        fwd += u->F[v];
    for (int e = u->U - 1; e > p; e--) {
        bk += u->B[e];
        if (e % 2 == 0)
            consider(lp, pf + Y + fwd + bk + u->AR[e], p, e / 2);
    }
}

/* Communication lanes: stage s sends M activations onward and M gradients
 * back after its first forward; then the backwards down to e. */
static void lane_paths(const units *u, lpath *lp)
{
    for (int st = 1; st < u->S; st++) {
        int P = 2 * st;
        double fsum = 0, back = 0;
        for (int v = 0; v <= P; v++)
            fsum += u->F[v];
        double lane = (P + 1 < u->U ? u->F[P + 1] : 0) + u->B[P - 1];
        for (int v = P - 2; v >= 0; v--) {
            back += u->B[v];
            if (v % 2 == 0)
                consider(lp, fsum + u->M * lane + back + u->AR[v], P - 1, v / 2);
        }
    }
}

/* PT_EINVAL unless every stage's layers and devices are in range. */
static int check_plan(const pt_cost *cost, const pt_plan *plan, pt_error *err)
{
    const pt_topology *t = pt_cost_topology(cost);
    const pt_profile *pr = pt_cost_profile(cost);
    if (plan->stage_count < 1 || plan->microbatch_count < 1 || plan->microbatch_size < 1)
        return pt_error_set(err, PT_EINVAL, "plan: no stages or no micro-batches");
    for (int s = 0; s < plan->stage_count; s++) {
        const pt_stage *st = &plan->stages[s];
        if (st->replica_count < 1 || st->first < 0 || st->last > pr->layer_count ||
            st->last <= st->first)
            return pt_error_set(err, PT_EINVAL, "plan: stages[%d]: layers or replicas invalid", s);
        for (int r = 0; r < st->replica_count; r++)
            if (st->replicas[r] < 0 || st->replicas[r] >= t->device_count)
                return pt_error_set(err, PT_EINVAL, "plan: stages[%d].replicas[%d]: no device %d",
                                    s, r, st->replicas[r]);
    }
    return 0;
}

int pt_latency_critical_path(const pt_cost *cost, const pt_plan *plan, double *latency_s,
                             int *pivot, int *ending, pt_error *err)
{
    if (!cost || !plan || !latency_s)
        return pt_error_set(err, PT_EINVAL, "latency: a cost model and a plan are required");
    int rc = check_plan(cost, plan, err);
    if (rc < 0)
        return rc;
    units u;
    if (units_init(cost, plan, &u) < 0)
        return pt_error_set(err, PT_ENOMEM, "latency: out of memory");
    lpath lp = {-INFINITY, 0, 0};
    double pf = 0;
    for (int p = 0; p < u.U; p++) {
        pivot_paths(&u, p, pf, &lp);
        pf += u.F[p];
    }
    lane_paths(&u, &lp);
    units_free(&u);
    *latency_s = lp.len;
    if (pivot)
        *pivot = lp.pivot;
    if (ending)
        *ending = lp.ending;
    return 0;
}

double pt_latency_comm_ratio(const pt_cost *cost, const pt_plan *p)
{
    if (p->stage_count < 2)
        return 0;
    const pt_topology *t = pt_cost_topology(cost);
    const pt_profile *pr = pt_cost_profile(cost);
    double comm = 0, comp = 0;
    int b = p->microbatch_size;
    for (int s = 0; s < p->stage_count; s++) {
        const pt_stage *st = &p->stages[s];
        int rows = pu_rows_max(b, st->replica_count), dev = pt_latency_slowest_device(t, st);
        comp += (pt_cost_fwd_s(cost, st->first, st->last, rows, dev) +
                 pt_cost_bwd_s(cost, st->first, st->last, rows, dev)) /
                2;
        if (s + 1 < p->stage_count) {
            const pt_stage *nx = &p->stages[s + 1];
            pt_link l = pt_latency_same_node(t, st, nx) ? t->intra : t->inter;
            int64_t bytes = pr->layers[st->last - 1].act_bytes;
            double cf =
                pu_boundary_s(l, st->replica_count, nx->replica_count, b, bytes, pr->microbatch);
            double cb =
                pu_boundary_s(l, nx->replica_count, st->replica_count, b, bytes, pr->microbatch);
            comm += dmax(cf, cb);
        }
    }
    comm /= p->stage_count - 1;
    comp /= p->stage_count;
    return comp > 0 ? comm / comp : INFINITY;
}

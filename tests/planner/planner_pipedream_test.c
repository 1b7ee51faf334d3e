/* PipeDream planner against exhaustive search.
 *
 * Objective (PipeDream §3.1, with PipeDream's round-robin replication, as the
 * pipedream kind runs it): the slowest stage per micro-batch, a stage of
 * layers [i,j) on m devices costing (its forward + backward at b rows + the
 * ring all-reduce of W(i,j) over m + the optimizer step) / m (one of each per
 * replica and round of m micro-batches), m <= M = global batch / b, or, if
 * larger, its communication lane (latency + bytes / bandwidth of its input
 * boundary and of its output boundary) / m; at level 2 (a node's best inside
 * + the all-reduce over n nodes) / n, or its lane at the inter-node link. On one node (or one
 * device per node) every contiguous partition and every replica count is enumerated; on 2 nodes x 2
 * devices the hierarchical space is: groups of layers on whole nodes, each node of a group running
 * the best plan of the group's layers inside one node (itself enumerated). */
#include "planner/plan_pipedream.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "tests/planner/planner_enum.h"
#include "tests/test.h"

typedef struct level {
    const pt_cost *cost;
    int mbs, M, unit, maxm;
    pt_link link;
    double speed;
    double (*inner)[EN_LAYERS_MAX + 1]; /* level 2: best inside one node of [i,j) */
} level;

/* A boundary before layer k, one transfer over the level's link (0 at the
 * model's ends). */
static double transfer(const level *L, int k)
{
    int N = pt_cost_profile(L->cost)->layer_count;
    if (k <= 0 || k >= N)
        return 0;
    return pt_cost_link_s(L->link, pt_cost_boundary_bytes(L->cost, k, L->mbs));
}

static double stage_cost(const level *L, int i, int j, int m)
{
    int64_t W = pt_cost_param_bytes(L->cost, i, j);
    double sync =
        m > 1 ? 2.0 * (m - 1) * L->link.latency + 2.0 * (m - 1) / m * (double)W / L->link.bandwidth
              : 0;
    /* its lane: each of its micro-batches' gradient back and activation on */
    double lane = (transfer(L, i) + transfer(L, j)) / m;
    if (L->inner)
        return fmax((L->inner[i][j] + sync) / m, lane);
    /* round-robin: one micro-batch, one sync and one step per replica and round */
    double t =
        (pt_cost_fwd_s(L->cost, i, j, L->mbs, -1) + pt_cost_bwd_s(L->cost, i, j, L->mbs, -1)) /
            L->speed +
        sync + pt_cost_opt_step_s(L->cost, W, PT_OPTIM_SGD, -1) / L->speed;
    return fmax(t / m, lane);
}

/* Best slowest stage over every split of [a,b) and replica counts with
 * sum <= L->maxm (each m allowed: m == 1 or m * unit <= M). */
static double enumerate(const level *L, int a, int b)
{
    int n = b - a;
    double best = INFINITY;
    for (int mask = 0; mask < (1 << (n - 1)); mask++) {
        int cuts[EN_LAYERS_MAX + 1], S = 0;
        cuts[S++] = a;
        for (int k = 1; k < n; k++)
            if (mask & (1 << (k - 1)))
                cuts[S++] = a + k;
        cuts[S] = b;
        if (S > L->maxm)
            continue;
        int m[EN_LAYERS_MAX];
        for (int s = 0; s < S; s++)
            m[s] = 1;
        for (;;) {
            int sum = 0, ok = 1;
            for (int s = 0; s < S; s++) {
                sum += m[s];
                ok &= m[s] == 1 || m[s] * L->unit <= L->M;
            }
            if (sum <= L->maxm && ok) {
                double v = 0;
                for (int s = 0; s < S; s++) {
                    double c = stage_cost(L, cuts[s], cuts[s + 1], m[s]);
                    if (c > v)
                        v = c;
                }
                if (v < best)
                    best = v;
            }
            int s = 0;
            while (s < S && ++m[s] > L->maxm) {
                m[s] = 1;
                s++;
            }
            if (s == S)
                break;
        }
    }
    return best;
}

static double pipedream_optimum(const pt_profile *pr, const pt_topology *t, int mbs, int M)
{
    pt_cost *cost = NULL;
    if (pt_cost_new(pr, t, &cost, NULL) < 0)
        return NAN;
    int N = pr->layer_count, per = t->device_count / t->node_count;
    double result;
    if (t->node_count == 1 || per == 1) {
        level L = {cost, mbs, M, 1, t->device_count, t->node_count == 1 ? t->intra : t->inter,
                   1.0,  NULL};
        result = enumerate(&L, 0, N);
    } else {
        static double inner[EN_LAYERS_MAX + 1][EN_LAYERS_MAX + 1];
        level L1 = {cost, mbs, M, 1, per, t->intra, 1.0, NULL};
        for (int i = 0; i < N; i++)
            for (int j = i + 1; j <= N; j++)
                inner[i][j] = enumerate(&L1, i, j);
        level L2 = {cost, mbs, M, per, t->node_count, t->inter, 1.0, inner};
        result = enumerate(&L2, 0, N);
    }
    pt_cost_free(&cost);
    return result;
}

typedef struct instance {
    int nodes, per_node;
    double inter_gbps;
    int layers;
    uint64_t seed;
    int gbs, mbs;
} instance;

static const instance instances[] = {
    {1, 4, 100, 8, 21, 16, 8}, {2, 2, 10, 8, 22, 16, 8},  {2, 2, 10, 7, 23, 16, 4},
    {4, 1, 25, 6, 24, 16, 4},  {2, 2, 1, 8, 25, 16, 16},  {1, 4, 100, 8, 26, 16, 2},
    {2, 2, 10, 8, 27, 16, 2},  {1, 3, 100, 5, 28, 12, 6},
};

/* pipedream's plan of pr on t for global batch gbs, the set-up every case
 * shares: mbs the one micro-batch size (0: the planner's choices), limit the
 * memory of each device (0: the topology's), strict no fallback. The
 * planner's code. */
static int pd_run(const pt_profile *pr, const pt_topology *t, int gbs, int mbs, int64_t limit,
                  int strict, pt_plan **plan, pt_planner_report *rep, pt_error *err)
{
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    if (mbs > 0) {
        o.microbatch_sizes[0] = mbs;
        o.microbatch_size_count = 1;
    }
    o.memory_limit_bytes = limit;
    o.no_fallback = strict;
    o.no_dp_floor = 1; /* the planner's own search, not the data-parallel floor */
    return pt_planner_run("pipedream", pr, t, gbs, &o, plan, rep, err);
}

static void test_exhaustive_optimum(void)
{
    for (size_t k = 0; k < sizeof instances / sizeof instances[0]; k++) {
        const instance *in = &instances[k];
        pt_profile *pr = en_profile(in->layers, in->seed);
        pt_topology *t = en_topology(in->nodes, in->per_node, in->inter_gbps, 64 * EN_GIB);
        REQUIRE(pr && t);
        pt_plan *plan = NULL;
        pt_planner_report rep;
        pt_error err = {0};
        double best = pipedream_optimum(pr, t, in->mbs, in->gbs / in->mbs);
        /* the dynamic program (hierarchical on several nodes) is exact */
        pt_cost *dcost = NULL;
        REQUIRE(pt_cost_new(pr, t, &dcost, NULL) == 0);
        pdresult dr = {0, NULL};
        char levels[128];
        CHECK(pd_plan_for(dcost, t, in->gbs, in->mbs, PT_OPTIM_SGD, 0, 0, &dr, levels,
                          sizeof levels) == 0);
        CHECK_MSG(en_rel(dr.objective, best) < 1e-9, "seed %llu %dx%d: DP %.9g, exhaustive %.9g",
                  (unsigned long long)in->seed, in->nodes, in->per_node, dr.objective, best);
        pt_plan_free(&dr.plan);
        pt_cost_free(&dcost);
        /* the planner keeps the plan the simulator runs fastest (hierarchical or,
         * on several nodes, flat), its prediction the simulated time */
        int rc = pd_run(pr, t, in->gbs, in->mbs, 0, 0, &plan, &rep, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc == 0) {
            CHECK(rep.objective_s >= best * (1 - 1e-9) || t->node_count > 1);
            CHECK(plan->schedule == PT_SCHED_PIPEDREAM);
            CHECK(plan->microbatch_size == in->mbs);
            CHECK(plan->microbatch_count * in->mbs == in->gbs);
            CHECK_NEAR(rep.bound_s, rep.objective_s * plan->microbatch_count, 1e-12);
            /* the prediction is the simulated steady state of the plan's program */
            pt_cost *cost = NULL;
            pt_sim *sim = NULL;
            pt_program prog = {0};
            pt_sim_result res;
            REQUIRE(pt_cost_new(pr, t, &cost, NULL) == 0 && pt_sim_new(&sim) == 0);
            CHECK(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0);
            CHECK_MSG(rep.iter_s == res.iter_s, "predicted %.9g, simulated %.9g", rep.iter_s,
                      res.iter_s);
            pt_program_release(&prog);
            pt_sim_free(&sim);
            pt_cost_free(&cost);
            pt_error e2 = {0};
            CHECK_MSG(pt_plan_check(plan, NULL, t, "plan", &e2) == 0, "%s", e2.msg);
            CHECK(pt_plan_round_robin(plan));
            for (int s = 0; s < plan->stage_count; s++)
                CHECK(plan->stages[s].replica_count <= plan->microbatch_count);
            printf("  seed %llu %dx%d: slowest stage %.4f ms, %d stages\n",
                   (unsigned long long)in->seed, in->nodes, in->per_node, rep.objective_s * 1e3,
                   plan->stage_count);
        }
        pt_plan_free(&plan);
        pt_topology_free(&t);
        pt_profile_free(&pr);
    }
}

/* On one node the plan is the DP's solution itself: its stages, replicated as
 * the plan says, have exactly the reported slowest stage. */
static void test_flat_plan_matches_objective(void)
{
    pt_profile *pr = en_profile(8, 31);
    pt_topology *t = en_topology(1, 4, 100, 64 * EN_GIB);
    REQUIRE(pr && t);
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    REQUIRE(pd_run(pr, t, 16, 4, 0, 0, &plan, &rep, &err) == 0);
    pt_cost *cost = NULL;
    REQUIRE(pt_cost_new(pr, t, &cost, NULL) == 0);
    level L = {cost, 4, 4, 1, 4, t->intra, 1.0, NULL};
    double v = 0;
    for (int s = 0; s < plan->stage_count; s++) {
        const pt_stage *st = &plan->stages[s];
        double c = stage_cost(&L, st->first, st->last, st->replica_count);
        if (c > v)
            v = c;
    }
    CHECK_MSG(en_rel(v, rep.objective_s) < 1e-9, "plan %.9g vs report %.9g", v, rep.objective_s);
    pt_cost_free(&cost);
    pt_plan_free(&plan);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

/* PipeDream's search ignores memory; when its plan does not fit, the error
 * names what that plan needs, and with exactly that much it is accepted. */
static void test_memory_need(void)
{
    pt_profile *pr = en_profile(8, 32);
    pt_topology *t = en_topology(2, 2, 10, 64 * EN_GIB);
    REQUIRE(pr && t);
    /* strict: the stashing plan's own need (test_fallback: without it) */
    int64_t limit = 32 << 20;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    int rc = pd_run(pr, t, 16, 0, limit, 1, &plan, &rep, &err);
    CHECK(rc == PT_ENOFIT);
    CHECK_STR_CONTAINS(err.msg, "needs");
    REQUIRE(rep.needed_memory_bytes > limit);
    limit = rep.needed_memory_bytes;
    rc = pd_run(pr, t, 16, 0, limit, 1, &plan, &rep, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    pt_plan_free(&plan);
    rc = pd_run(pr, t, 16, 0, limit - 1, 1, &plan, &rep, &err);
    CHECK(rc == PT_ENOFIT);
    pt_plan_free(&plan);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

/* Simulated iteration time of plan (NAN on failure); *fits: every device
 * within its memory. */
static double sim_time(const pt_plan *plan, const pt_cost *cost, int *fits)
{
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    int rc = pt_sim_new(&sim);
    if (rc == 0)
        rc = pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err);
    CHECK_MSG(rc == 0, "simulate: %s", err.msg);
    *fits = rc == 0 && res.fits;
    double t = rc == 0 ? res.iter_s : NAN;
    pt_program_release(&prog);
    pt_sim_free(&sim);
    return t;
}

/* Simulated peak within every device's memory (res.fits) for plan. */
static int sim_fits(const pt_plan *plan, const pt_cost *cost)
{
    int fits = 0;
    sim_time(plan, cost, &fits);
    return fits;
}

/* en_profile(layers, seed) whose layers save 20x their output for the
 * backward: recomputation pays off. */
static pt_profile *stash_heavy_profile(int layers, uint64_t seed)
{
    pt_profile *pr = en_profile(layers, seed);
    for (int l = 0; pr && l < pr->layer_count; l++)
        pr->layers[l].saved_bytes = 20 * pr->layers[l].act_bytes;
    return pr;
}

/* Layers that save 20x their output for the backward: one byte below the
 * memory its plan needs, pipedream's plan (one micro-batch size given, so the
 * DP's partition is the same) recomputes the stages that no longer fit, only
 * those, and fits by the simulator, which the same plan without
 * recomputation does not. */
static void test_recompute(void)
{
    pt_profile *pr = stash_heavy_profile(8, 41);
    pt_topology *t = en_topology(1, 4, 10, 64 * EN_GIB);
    REQUIRE(pr && t);
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    REQUIRE(pd_run(pr, t, 16, 4, 0, 0, &plan, &rep, &err) == 0);
    for (int s = 0; s < plan->stage_count; s++)
        CHECK(!plan->stages[s].recompute);
    int S0 = plan->stage_count;
    pt_plan_free(&plan);
    int64_t limit = rep.peak_memory_bytes - 1;
    int rc = pd_run(pr, t, 16, 4, limit, 0, &plan, &rep, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    REQUIRE(rc == 0);
    CHECK(plan->stage_count == S0);
    CHECK_STR_CONTAINS(rep.why, "recomputation on");
    pt_topology *lt = en_topology(1, 4, 10, limit);
    pt_cost *cost = NULL;
    REQUIRE(lt && pt_cost_new(pr, lt, &cost, &err) == 0);
    CHECK(sim_fits(plan, cost));
    pt_plan *off = pt_plan_clone(plan);
    REQUIRE(off);
    int nrc = 0;
    for (int s = 0; s < plan->stage_count; s++) {
        nrc += plan->stages[s].recompute;
        off->stages[s].recompute = 0;
        pt_mem m;
        pt_cost_replica_memory(cost, off, s, 0, &m);
        /* recompute exactly where the stage does not fit otherwise */
        CHECK_MSG(plan->stages[s].recompute == (m.total > limit),
                  "stage %d: recompute %d, %lld > %lld", s, plan->stages[s].recompute,
                  (long long)m.total, (long long)limit);
    }
    CHECK(nrc > 0);
    CHECK(!sim_fits(off, cost));
    pt_plan_free(&off);
    pt_plan_free(&plan);
    pt_cost_free(&cost);
    pt_topology_free(&lt);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

/* The least memory pipedream's plan for micro-batch size b alone needs
 * (recomputing where that helps), by the ENOFIT it reports at 1 byte
 * without the fallback. */
static int64_t need_for(const pt_profile *pr, const pt_topology *t, int b)
{
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    int rc = pd_run(pr, t, 16, b, 1, 1, &plan, &rep, &err);
    CHECK(rc == PT_ENOFIT);
    pt_plan_free(&plan);
    return rep.needed_memory_bytes;
}

/* When micro-batches of 4 do not fit even recomputing, every size is planned
 * and a smaller one that fits is kept. */
static void test_widen(void)
{
    pt_profile *pr = stash_heavy_profile(8, 43);
    pt_topology *t = en_topology(1, 4, 10, 64 * EN_GIB);
    REQUIRE(pr && t);
    int64_t n4 = need_for(pr, t, 4), n1 = need_for(pr, t, 1);
    REQUIRE(n1 < n4); /* the instance has the property the test needs */
    int64_t limit = n4 - 1;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    int rc = pd_run(pr, t, 16, 0, limit, 0, &plan, &rep, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    REQUIRE(rc == 0);
    CHECK(plan->microbatch_size < 4);
    CHECK_STR_CONTAINS(rep.why, "plans over the micro-batch sizes");
    pt_topology *lt = en_topology(1, 4, 10, limit);
    pt_cost *cost = NULL;
    REQUIRE(lt && pt_cost_new(pr, lt, &cost, &err) == 0);
    CHECK(sim_fits(plan, cost));
    pt_plan_free(&plan);
    pt_cost_free(&cost);
    pt_topology_free(&lt);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

/* PipeDream's bound on any stashing plan (plan_pipedream.c's stash_bound,
 * recomputed here by enumerating every replication): stage i of a plan with
 * replicas r_0..r_{S-1} (sum <= devices) holds ceil(R_i / r_i) weight
 * versions, a gradient and sgd's momentum of its parameters, so some stage
 * holds at least P / sum_i 1/(ceil(R_i/r_i) + 2); the bound is the least of
 * that over every replication. */
static double best_sum(int used, int left)
{
    double best = 0;
    for (int r = 1; r <= left; r++) {
        double v = 1.0 / ((used + r + r - 1) / r + 2) + best_sum(used + r, left - r);
        best = v > best ? v : best;
    }
    return best;
}

static double stash_bound_of(const pt_profile *pr, int devices)
{
    double P = 0;
    for (int l = 0; l < pr->layer_count; l++)
        P += (double)pr->layers[l].param_bytes;
    return P / best_sum(0, devices);
}

/* The fallback happens exactly when no weight-stashing plan fits. Over
 * memory limits from well below the stashing need to above it, the default
 * planner gives a pipedream plan exactly when the strict one (no_fallback)
 * gives one, and then the same plan; otherwise a 2bw or 1f1b-flush plan: the
 * one of the two candidates that the simulator runs faster among those that
 * fit, which fits under the limit by the simulator, whose reported time is
 * the simulator's (2 %), and whose why names the stashing need (a proven
 * bound exactly when the bound exceeds the limit). The strict planner still
 * errors there, naming the weight versions. */
static void test_fallback(void)
{
    pt_profile *pr = en_profile(16, 51);
    pt_topology *t = en_topology(1, 4, 10, 64 * EN_GIB);
    REQUIRE(pr && t);
    /* weights spread evenly and activations small beside them, so that below
     * the stashing bound the one- and two-version kinds still fit */
    for (int l = 0; l < pr->layer_count; l++) {
        pr->layers[l].act_bytes /= 20;
        pr->layers[l].param_bytes = (int64_t)(30e6 + 1e6 * (l % 3));
    }
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    REQUIRE(pd_run(pr, t, 16, 0, 1, 1, &plan, &rep, &err) == PT_ENOFIT);
    int64_t need = rep.needed_memory_bytes;
    double bound = stash_bound_of(pr, t->device_count);
    REQUIRE(need > 0 && (double)need >= bound);
    const double frac[] = {0.3, 0.45, 0.6, 0.75, 0.9, 0.99, 1.5, 3.0};
    int64_t limits[12];
    int nl = 0;
    limits[nl++] = need;
    limits[nl++] = need - 1;
    limits[nl++] = (int64_t)bound - 1;
    for (size_t f = 0; f < sizeof frac / sizeof frac[0]; f++)
        limits[nl++] = (int64_t)(frac[f] * (double)need);
    int stashed = 0, fell = 0, proven_seen = 0, none = 0;
    for (int i = 0; i < nl; i++) {
        int64_t lim = limits[i];
        pt_plan *sp = NULL, *fp = NULL;
        pt_planner_report srep, frep;
        pt_error serr = {0}, ferr = {0};
        int src = pd_run(pr, t, 16, 0, lim, 1, &sp, &srep, &serr);
        int frc = pd_run(pr, t, 16, 0, lim, 0, &fp, &frep, &ferr);
        CHECK(src == 0 || src == PT_ENOFIT);
        if (src == 0) {
            stashed++;
            CHECK_MSG(frc == 0 && fp && fp->schedule == PT_SCHED_PIPEDREAM,
                      "limit %lld: stashing fits but the default gave %d", (long long)lim, frc);
            CHECK(frep.fallback_count == 0);
            if (frc == 0)
                CHECK(fp->stage_count == sp->stage_count &&
                      fp->microbatch_size == sp->microbatch_size);
        } else {
            CHECK_STR_CONTAINS(serr.msg, "weight versions");
            if (frc == PT_ENOFIT) {
                none++;
                CHECK_STR_CONTAINS(ferr.msg, "neither memory-lean kind fits");
            } else {
                CHECK_MSG(frc == 0, "limit %lld: %s", (long long)lim, ferr.msg);
            }
        }
        if (src != 0 && frc == 0) {
            fell++;
            CHECK(fp->schedule == PT_SCHED_2BW || fp->schedule == PT_SCHED_1F1B_FLUSH);
            CHECK(frep.fallback_count == 2);
            REQUIRE(frep.fallback_chosen >= 0 && frep.fallback_chosen < 2);
            const pt_planner_kind_row *ch = &frep.fallback[frep.fallback_chosen],
                                      *other = &frep.fallback[1 - frep.fallback_chosen];
            CHECK(ch->kind == (int)fp->schedule && ch->fits);
            if (other->fits)
                CHECK(ch->iter_s <= other->iter_s);
            int proven = bound > (double)lim;
            CHECK(frep.stash_need_proven == proven);
            proven_seen += proven;
            CHECK(frep.stash_need_bytes > lim);
            if (!proven)
                CHECK(frep.stash_need_bytes == srep.needed_memory_bytes);
            CHECK_STR_CONTAINS(frep.why,
                               proven ? "weight stashing needs >= " : "weight stashing needs ");
            CHECK_STR_CONTAINS(frep.why, "(devices have");
            CHECK_STR_CONTAINS(frep.why, "so it planned");
            pt_topology *lt = en_topology(1, 4, 10, lim);
            pt_cost *cost = NULL;
            REQUIRE(lt && pt_cost_new(pr, lt, &cost, &err) == 0);
            int fits = 0;
            double st = sim_time(fp, cost, &fits);
            CHECK_MSG(fits, "limit %lld: the %s plan does not fit by the simulator", (long long)lim,
                      pt_sched_kind_name(fp->schedule));
            CHECK_MSG(fabs(frep.iter_s - st) <= 0.02 * st, "reported %.6f s vs simulated %.6f s",
                      frep.iter_s, st);
            pt_cost_free(&cost);
            pt_topology_free(&lt);
        }
        printf("  limit %.1f MiB: strict %s, default %s%s\n", (double)lim / (1 << 20),
               src == 0 ? "plans" : "no plan",
               frc == 0 ? pt_sched_kind_name(fp->schedule) : "no plan",
               frc == 0 && frep.stash_need_proven ? " (stashing bound)" : "");
        pt_plan_free(&sp);
        pt_plan_free(&fp);
    }
    /* the sweep crosses the boundary both ways, and below the bound too */
    CHECK(stashed > 0);
    CHECK(fell > 0);
    CHECK(proven_seen > 0);
    CHECK(none > 0);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

PT_TEST_MAIN({"exhaustive_optimum", test_exhaustive_optimum}, {"recompute", test_recompute},
             {"flat_plan_matches_objective", test_flat_plan_matches_objective},
             {"memory_need", test_memory_need}, {"widen", test_widen}, {"fallback", test_fallback})

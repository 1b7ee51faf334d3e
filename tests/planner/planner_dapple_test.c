/* DAPPLE planner against exhaustive search on small instances.
 *
 * For random profiles (fixed seeds) on 1x4, 2x2 (slow inter-node link) and
 * 4x1 topologies, with roomy and tight memory, every plan (micro-batch size x
 * contiguous partition x replica counts x placement policy per stage) is
 * evaluated with this file's own implementation of DAPPLE's latency; the
 * planner's search bound (the optimum of its dynamic program) must equal the
 * minimum over the plans that fit memory. The planner returns the simulator's
 * best of its final candidates: every plan is simulated with the synchronous
 * dapple schedule (both policies), and the planner's plan must simulate
 * within 1% of the best (it is the best on every instance) and to the time
 * it reports. Every plan gets the planners' recomputation rule (a stage
 * recomputes exactly when it fits only that way, paying the recompute
 * forward); on the last instances, whose layers save several times their
 * output for the backward, the best plan recomputes some stage. */
#include "planner/latency.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "tests/planner/planner_enum.h"
#include "tests/test.h"

typedef struct best_ctx {
    const pt_cost *cost;
    double best_L;
    long fitting;
    pt_sim *sim;
    pt_program prog;
    double best_sim;
    int simulate;
    long recomputing; /* fitting plans (policy A) with a stage that fits only recomputing */
} best_ctx;

static void visit_latency(pt_plan *p, void *v)
{
    best_ctx *c = v;
    double L = en_dapple_objective(c->cost, p, NULL);
    if (!isfinite(L))
        return;
    c->fitting++;
    if (L < c->best_L)
        c->best_L = L;
    if (en_dapple_set_recompute(c->cost, p, 'A')) {
        int any = 0;
        for (int s = 0; s < p->stage_count; s++)
            any |= p->stages[s].recompute;
        c->recomputing += any;
    }
    if (c->simulate) {
        /* the best synchronous dapple run of this plan: policy A, or B when it fits */
        for (int pol = 0; pol < 2; pol++) {
            pt_plan *q = pt_plan_clone(p);
            if (!q) {
                pt_test_failures_++;
                return;
            }
            q->policy = pol ? 'B' : 'A';
            if (en_dapple_set_recompute(c->cost, q, q->policy)) {
                pt_sim_result res;
                pt_error err = {0};
                if (pt_sim_plan(c->sim, q, c->cost, NULL, &c->prog, &res, &err) == 0) {
                    if (res.iter_s < c->best_sim)
                        c->best_sim = res.iter_s;
                } else {
                    fprintf(stderr, "simulate: %s\n", err.msg);
                    pt_test_failures_++;
                }
            }
            pt_plan_free(&q);
        }
    }
}

typedef struct instance {
    int nodes, per_node;
    double inter_gbps;
    int64_t mem;
    int layers;
    uint64_t seed;
    int gbs;
    double saved; /* > 0: every layer saves this many times its output for the backward
                     (as attention does), so tight memory needs recomputation */
} instance;

static const instance instances[] = {
    {1, 4, 100, 16 * EN_GIB, 6, 1, 16, 0},
    {2, 2, 10, 16 * EN_GIB, 7, 2, 16, 0},
    {2, 2, 10, 16 * EN_GIB, 8, 3, 8, 0},
    {4, 1, 25, 16 * EN_GIB, 6, 4, 16, 0},
    {2, 2, 10, EN_GIB / 2, 7, 5, 16, 0},
    {1, 4, 100, EN_GIB / 3, 8, 6, 16, 0},
    {2, 2, 5, 16 * EN_GIB, 5, 7, 12, 0},
    {1, 3, 100, 16 * EN_GIB, 8, 8, 8, 0},
    /* recomputation decides what fits */
    {1, 4, 100, 300 * EN_MIB, 6, 14, 16, 8.0},
    {1, 4, 100, 300 * EN_MIB, 7, 15, 16, 20.0},
    {2, 2, 10, 600 * EN_MIB, 7, 16, 16, 20.0},
    {4, 1, 25, 500 * EN_MIB, 6, 18, 8, 20.0},
};
#define INSTANCE_COUNT ((int)(sizeof instances / sizeof instances[0]))

static void run_instance(const instance *in, int simulate)
{
    pt_profile *pr = en_profile(in->layers, in->seed);
    pt_topology *t = en_topology(in->nodes, in->per_node, in->inter_gbps, in->mem);
    REQUIRE(pr && t);
    for (int l = 0; in->saved > 0 && l < pr->layer_count; l++)
        pr->layers[l].saved_bytes = (int64_t)(in->saved * (double)pr->layers[l].act_bytes);
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    pt_planner_opts own;
    pt_planner_opts_default(&own);
    own.no_dp_floor = 1; /* the search itself, not the data-parallel floor */
    int rc = pt_planner_run("dapple", pr, t, in->gbs, &own, &plan, &rep, &err);
    pt_cost *cost = NULL;
    REQUIRE(pt_cost_new(pr, t, &cost, &err) == 0);
    best_ctx c = {cost, INFINITY, 0, NULL, {0}, INFINITY, simulate, 0};
    if (simulate)
        REQUIRE(pt_sim_new(&c.sim) == 0);
    int mbs[16];
    int nmb = en_divisors(in->gbs, mbs);
    long all = en_dapple_all(pr, t, in->gbs, mbs, nmb, visit_latency, &c);
    if (c.fitting == 0) {
        CHECK_MSG(rc == PT_ENOFIT, "no plan fits but the planner returned %d", rc);
    } else {
        CHECK_MSG(rc == 0, "planner failed: %s", err.msg);
    }
    if (rc == 0 && plan) {
        /* the search's closed form is exact over its space; the plan returned is
         * the simulator's best of the final candidates */
        double L = en_dapple_latency_pol(cost, plan, plan->policy);
        CHECK_MSG(en_rel(rep.bound_s, c.best_L) < 1e-9,
                  "seed %llu %dx%d: search bound %.9g, exhaustive best %.9g over %ld plans "
                  "(%ld fit)",
                  (unsigned long long)in->seed, in->nodes, in->per_node, rep.bound_s, c.best_L, all,
                  c.fitting);
        CHECK_MSG(L >= c.best_L * (1 - 1e-9), "plan's latency %.9g below the best %.9g", L,
                  c.best_L);
        CHECK_MSG(rep.objective_s == rep.iter_s, "objective %.9g is the simulated %.9g",
                  rep.objective_s, rep.iter_s);
        CHECK(en_dapple_fits(cost, plan, plan->policy));
        /* a stage recomputes exactly when it fits only that way */
        pt_plan *rule = pt_plan_clone(plan);
        REQUIRE(rule);
        CHECK(en_dapple_set_recompute(cost, rule, plan->policy));
        for (int s = 0; s < plan->stage_count; s++)
            CHECK_MSG(rule->stages[s].recompute == plan->stages[s].recompute,
                      "seed %llu: stage %d recompute %d, the rule says %d",
                      (unsigned long long)in->seed, s, plan->stages[s].recompute,
                      rule->stages[s].recompute);
        pt_plan_free(&rule);
        int nrc = 0;
        for (int s = 0; s < plan->stage_count; s++)
            nrc += plan->stages[s].recompute;
        if (in->saved > 0)
            CHECK_MSG(nrc > 0, "seed %llu: the best plan recomputes no stage",
                      (unsigned long long)in->seed);
        CHECK(plan->schedule == PT_SCHED_DAPPLE);
        CHECK(plan->microbatch_size * plan->microbatch_count == in->gbs);
        pt_error e2 = {0};
        CHECK_MSG(pt_plan_check(plan, NULL, t, "plan", &e2) == 0, "%s", e2.msg);
        CHECK_MSG(pt_cost_plan_memory(cost, plan, &e2) == 0, "%s", e2.msg);
        double lib = 0;
        CHECK(pt_latency_critical_path(cost, plan, &lib, NULL, NULL, NULL) == 0);
        CHECK_MSG(en_rel(lib, L) < 1e-9, "pt_latency_critical_path %.9g vs %.9g", lib, L);
        if (simulate) {
            pt_sim_result res;
            REQUIRE(pt_sim_plan(c.sim, plan, cost, NULL, &c.prog, &res, &e2) == 0);
            CHECK_MSG(res.iter_s == rep.iter_s, "simulated %.9g, reported %.9g", res.iter_s,
                      rep.iter_s);
            CHECK_MSG(res.iter_s <= 1.01 * c.best_sim,
                      "seed %llu %dx%d: DAPPLE plan simulates to %.6g s, best plan %.6g s "
                      "(+%.1f%%)",
                      (unsigned long long)in->seed, in->nodes, in->per_node, res.iter_s, c.best_sim,
                      100 * (res.iter_s / c.best_sim - 1));
            printf("  seed %llu %dx%d mem %.2f GiB: %ld plans, %ld fit (%ld recomputing); plan "
                   "%d stages (%d recompute); latency %.4f ms; "
                   "simulated %.4f ms vs best %.4f ms (+%.2f%%)\n",
                   (unsigned long long)in->seed, in->nodes, in->per_node, (double)in->mem / EN_GIB,
                   all, c.fitting, c.recomputing, plan->stage_count, nrc, L * 1e3, res.iter_s * 1e3,
                   c.best_sim * 1e3, 100 * (res.iter_s / c.best_sim - 1));
        }
    }
    pt_program_release(&c.prog);
    pt_sim_free(&c.sim);
    pt_plan_free(&plan);
    pt_cost_free(&cost);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

static void test_exhaustive_optimum(void)
{
    for (int i = 0; i < INSTANCE_COUNT; i++)
        run_instance(&instances[i], 0);
}

static void test_simulated_within_1_percent(void)
{
    for (int i = 0; i < INSTANCE_COUNT; i++)
        run_instance(&instances[i], 1);
}

/* Equal stages, no communication, no all-reduce: the latency model gives
 * (M+S-1)(F+B) for a straight pipeline. */
static void test_closed_form_equal_stages(void)
{
    pt_profile *pr = pt_profile_new(4);
    REQUIRE(pr);
    pr->microbatch = 1;
    for (int l = 0; l < 4; l++) {
        pr->layers[l].fwd_ms = 2;
        pr->layers[l].bwd_ms = 3;
        pr->layers[l].recompute_ms = 2;
    }
    pt_topology *t = en_topology(1, 4, 100, 16 * EN_GIB);
    pt_cost *cost = NULL;
    REQUIRE(pt_cost_new(pr, t, &cost, NULL) == 0);
    pt_cost_set_opt_bandwidth(cost, 0);
    pt_plan *p = pt_plan_new(4);
    for (int s = 0; s < 4; s++) {
        p->stages[s].first = s;
        p->stages[s].last = s + 1;
        pt_plan_set_replicas(p, s, &s, 1);
    }
    p->layer_count = 4;
    p->microbatch_size = 1;
    p->microbatch_count = 8;
    double L = 0;
    int pivot = -1, ending = -1;
    CHECK(pt_latency_critical_path(cost, p, &L, &pivot, &ending, NULL) == 0);
    CHECK_NEAR(L, (8 + 4 - 1) * 5e-3, 1e-12);
    CHECK(ending == 0);
    pt_plan_free(&p);
    pt_cost_free(&cost);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

/* Nothing fits: PT_ENOFIT naming the memory needed, and that figure is
 * (within the search's 0.5%) the threshold where a plan appears. */
static void test_memory_need(void)
{
    pt_profile *pr = en_profile(6, 11);
    pt_topology *t = en_topology(2, 2, 10, 16 * EN_GIB);
    REQUIRE(pr && t);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.memory_limit_bytes = 64 << 20;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    int rc = pt_planner_run("dapple", pr, t, 16, &o, &plan, &rep, &err);
    CHECK(rc == PT_ENOFIT);
    CHECK(plan == NULL);
    CHECK_STR_CONTAINS(err.msg, "needs");
    CHECK_STR_CONTAINS(err.msg, "per device");
    REQUIRE(rep.needed_memory_bytes > o.memory_limit_bytes);
    char want[32];
    double gib = (double)rep.needed_memory_bytes;
    const char *unit = "B";
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    for (int u = 0; u < 4; u++) {
        unit = units[u];
        if (gib < 1024 || u == 3)
            break;
        gib /= 1024;
    }
    snprintf(want, sizeof want, "needs %.2f %s", gib, unit);
    CHECK_STR_CONTAINS(err.msg, want);
    o.memory_limit_bytes = rep.needed_memory_bytes;
    rc = pt_planner_run("dapple", pr, t, 16, &o, &plan, &rep, &err);
    CHECK_MSG(rc == 0, "with the named memory: %s", err.msg);
    pt_plan_free(&plan);
    int64_t named = o.memory_limit_bytes;
    o.memory_limit_bytes = (int64_t)(named * 0.99);
    rc = pt_planner_run("dapple", pr, t, 16, &o, &plan, &rep, &err);
    CHECK_MSG(rc == PT_ENOFIT, "1%% below the named memory the planner still found a plan");
    pt_plan_free(&plan);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

PT_TEST_MAIN({"exhaustive_optimum", test_exhaustive_optimum},
             {"simulated_within_1_percent", test_simulated_within_1_percent},
             {"closed_form_equal_stages", test_closed_form_equal_stages},
             {"memory_need", test_memory_need})

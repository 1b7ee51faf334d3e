/* GPipe planner: its partition against every contiguous partition, its
 * micro-batching against every candidate, and its input checks. */
#include "planner/planner.h"
#include "planner/simulate.h"
#include "tests/planner/planner_enum.h"
#include "tests/test.h"

typedef struct part_ctx {
    const pt_cost *cost;
    const pt_topology *topo;
    int rows;
    double best;
} part_ctx;

static void visit_partition(const int *cuts, int S, void *v)
{
    part_ctx *c = v;
    double slow = 0;
    for (int s = 0; s < S; s++) {
        double t = pt_cost_fwd_s(c->cost, cuts[s], cuts[s + 1], c->rows, s) +
                   pt_cost_bwd_s(c->cost, cuts[s], cuts[s + 1], c->rows, s);
        if (t > slow)
            slow = t;
    }
    if (slow < c->best)
        c->best = slow;
}

static void check_instance(int layers, uint64_t seed, int nodes, int per, const double *speeds)
{
    pt_profile *pr = en_profile(layers, seed);
    pt_topology *t = en_topology(nodes, per, 25, 64 * EN_GIB);
    REQUIRE(pr && t);
    if (speeds)
        for (int d = 0; d < t->device_count; d++)
            t->devices[d].speed = speeds[d];
    pt_cost *cost = NULL;
    REQUIRE(pt_cost_new(pr, t, &cost, NULL) == 0);
    int G = t->device_count;
    for (int S = 1; S <= layers && S <= G; S++) {
        pt_planner_opts o;
        pt_planner_opts_default(&o);
        o.stages = S;
        pt_plan *plan = NULL;
        pt_planner_report rep;
        pt_error err = {0};
        int rc = pt_planner_run("gpipe", pr, t, 16, &o, &plan, &rep, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc)
            continue;
        CHECK(plan->stage_count == S);
        CHECK(plan->schedule == PT_SCHED_GPIPE);
        part_ctx c = {cost, t, plan->microbatch_size, INFINITY};
        en_partitions(layers, S, visit_partition, &c);
        CHECK_MSG(en_rel(rep.objective_s, c.best) < 1e-9,
                  "seed %llu S=%d: planner %.9g, exhaustive %.9g", (unsigned long long)seed, S,
                  rep.objective_s, c.best);
        int cuts[EN_LAYERS_MAX + 1];
        for (int s = 0; s < S; s++) {
            cuts[s] = plan->stages[s].first;
            CHECK(plan->stages[s].replica_count == 1);
            CHECK(plan->stages[s].replicas[0] == s);
        }
        cuts[S] = layers;
        part_ctx mine = {cost, t, plan->microbatch_size, INFINITY};
        visit_partition(cuts, S, &mine);
        CHECK_MSG(en_rel(mine.best, c.best) < 1e-9, "its partition %.9g vs best %.9g", mine.best,
                  c.best);
        /* micro-batching: the lowest simulated time among the candidates that fit */
        double best_L = INFINITY;
        pt_sim *sim = NULL;
        REQUIRE(pt_sim_new(&sim) == 0);
        int mbs[16], nmb = en_divisors(16, mbs);
        for (int k = 0; k < nmb; k++)
            for (int rec = 0; rec <= 1; rec++) {
                pt_plan *q = pt_plan_clone(plan);
                q->microbatch_size = mbs[k];
                q->microbatch_count = 16 / mbs[k];
                for (int s = 0; s < S; s++)
                    q->stages[s].recompute = rec;
                pt_program prog = {0};
                pt_sim_result res;
                if (pt_cost_plan_memory(cost, q, NULL) == 0 &&
                    pt_sim_plan(sim, q, cost, NULL, &prog, &res, NULL) == 0 && res.iter_s < best_L)
                    best_L = res.iter_s;
                pt_program_release(&prog);
                pt_plan_free(&q);
            }
        pt_sim_free(&sim);
        CHECK_MSG(en_rel(rep.iter_s, best_L) < 1e-9, "S=%d: simulated %.9g, best %.9g", S,
                  rep.iter_s, best_L);
        CHECK(pt_cost_plan_memory(cost, plan, NULL) == 0);
        pt_plan_free(&plan);
    }
    pt_cost_free(&cost);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

static void test_partition_optimal(void)
{
    check_instance(8, 41, 1, 4, NULL);
    check_instance(7, 42, 2, 2, NULL);
    check_instance(6, 43, 4, 1, NULL);
    const double speeds[4] = {1.0, 0.5, 2.0, 1.25};
    check_instance(8, 44, 1, 4, speeds);
}

/* Memory: GPipe keeps every micro-batch in flight; when nothing fits, the
 * error names the smallest peak among the candidates, and that is enough. */
static void test_memory_need(void)
{
    pt_profile *pr = en_profile(8, 45);
    pt_topology *t = en_topology(1, 4, 25, 64 * EN_GIB);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.stages = 4;
    o.memory_limit_bytes = 16 << 20;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    CHECK(pt_planner_run("gpipe", pr, t, 16, &o, &plan, &rep, &err) == PT_ENOFIT);
    CHECK_STR_CONTAINS(err.msg, "needs");
    REQUIRE(rep.needed_memory_bytes > o.memory_limit_bytes);
    o.memory_limit_bytes = rep.needed_memory_bytes;
    CHECK(pt_planner_run("gpipe", pr, t, 16, &o, &plan, &rep, &err) == 0);
    pt_plan_free(&plan);
    o.memory_limit_bytes -= 1;
    CHECK(pt_planner_run("gpipe", pr, t, 16, &o, &plan, &rep, &err) == PT_ENOFIT);
    CHECK_STR_CONTAINS(err.msg, "holds its input for the whole batch");
    /* every activation between two layers, for the whole batch, above the
     * memory: the error says no partition helps (GPT-3's case) */
    for (int l = 0; l < pr->layer_count; l++)
        pr->layers[l].act_bytes = (int64_t)1 << 30;
    o.memory_limit_bytes = (int64_t)512 << 20;
    CHECK(pt_planner_run("gpipe", pr, t, 16, &o, &plan, &rep, &err) == PT_ENOFIT);
    CHECK_STR_CONTAINS(err.msg, "no partition helps");
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

static void test_stages_checked(void)
{
    pt_profile *pr = en_profile(5, 46);
    pt_topology *t = en_topology(2, 4, 25, 64 * EN_GIB);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.stages = 6;
    pt_plan *plan = NULL;
    pt_error err = {0};
    CHECK(pt_planner_run("gpipe", pr, t, 16, &o, &plan, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "stages");
    CHECK_STR_CONTAINS(err.msg, "5 layers");
    CHECK(plan == NULL);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

PT_TEST_MAIN({"partition_optimal", test_partition_optimal}, {"memory_need", test_memory_need},
             {"stages_checked", test_stages_checked})

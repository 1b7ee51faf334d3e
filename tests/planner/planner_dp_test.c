/* Data-parallel and Pipe-SGD planners against their timing formulas worked
 * out by hand on round numbers. */
#include "planner/planner.h"
#include "tests/planner/planner_enum.h"
#include "tests/test.h"

/* Two layers: forward 1 + 2 ms, backward 2 + 4 ms at 2 samples; 1 MB of
 * parameters each. One node of 4 devices, 1 GB/s, 10 us. */
static pt_profile *hand_profile(void)
{
    pt_profile *p = pt_profile_new(2);
    p->microbatch = 2;
    snprintf(p->model, sizeof p->model, "hand");
    p->layers[0] = (pt_profile_layer){.name = "a",
                                      .fwd_ms = 1,
                                      .bwd_ms = 2,
                                      .recompute_ms = 1,
                                      .act_bytes = 1000,
                                      .param_bytes = 1000000};
    p->layers[1] = (pt_profile_layer){.name = "b",
                                      .fwd_ms = 2,
                                      .bwd_ms = 4,
                                      .recompute_ms = 2,
                                      .act_bytes = 1000,
                                      .param_bytes = 1000000};
    p->input_bytes = 1000;
    return p;
}

static void test_formulas(void)
{
    pt_profile *pr = hand_profile();
    pt_link link = {1e9, 1e-5};
    pt_topology *t = pt_topology_uniform(1, 4, 64LL << 30, link, link);
    REQUIRE(pr && t);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.microbatch_sizes[0] = 8;
    o.microbatch_size_count = 1;
    /* by hand: 4 replicas of 2 samples each, one micro-batch:
     *   t_compute = (1+2 + 2+4) ms                      = 9 ms
     *   t_comm    = 2*3*10us + 2*3/4 * 2e6 B / 1e9 B/s   = 0.06 + 3 ms = 3.06 ms
     *   t_update  = 2e6 B * (3 + 2*1) passes / 500e9 B/s = 0.02 ms (sgd) */
    double compute = 9e-3, comm = 3.06e-3, update = 2e6 * 5 / 500e9;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    REQUIRE(pt_planner_run("dp", pr, t, 8, &o, &plan, &rep, &err) == 0);
    CHECK_NEAR(rep.objective_s, compute + comm + update, 1e-12);
    CHECK(plan->stage_count == 1 && plan->stages[0].replica_count == 4);
    CHECK(plan->microbatch_count == 1 && plan->microbatch_size == 8);
    pt_plan_free(&plan);
    REQUIRE(pt_planner_run("pipesgd", pr, t, 8, &o, &plan, &rep, &err) == 0);
    CHECK_NEAR(rep.objective_s, update + compute, 1e-12); /* max(9.02, 3.06) ms */
    CHECK(plan->schedule == PT_SCHED_PIPESGD);
    pt_plan_free(&plan);
    /* a slow link makes Pipe-SGD communication-bound: 1e7 B/s -> t_comm =
     * 0.06 ms + 1.5 * 2e6 / 1e7 s = 300.06 ms */
    pt_topology_free(&t);
    pt_link slow = {1e7, 1e-5};
    t = pt_topology_uniform(1, 4, 64LL << 30, slow, slow);
    REQUIRE(pt_planner_run("pipesgd", pr, t, 8, &o, &plan, &rep, &err) == 0);
    CHECK_NEAR(rep.objective_s, 0.30006, 1e-12);
    pt_plan_free(&plan);
    REQUIRE(pt_planner_run("dp", pr, t, 8, &o, &plan, &rep, &err) == 0);
    CHECK_NEAR(rep.objective_s, 0.30006 + compute + update, 1e-12);
    pt_plan_free(&plan);
    /* two micro-batches of 4 (one sample per replica): same compute, same
     * all-reduce; the planner prefers fewer micro-batches on a tie */
    o.microbatch_sizes[1] = 4;
    o.microbatch_size_count = 2;
    REQUIRE(pt_planner_run("dp", pr, t, 8, &o, &plan, &rep, &err) == 0);
    CHECK(plan->microbatch_size == 8);
    pt_plan_free(&plan);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

/* Memory forces smaller micro-batches: activations of one micro-batch of
 * 4 samples per replica do not fit, of 1 sample they do. */
static void test_memory_picks_microbatch(void)
{
    pt_profile *pr = hand_profile();
    pr->layers[0].act_bytes = 100000000; /* 100 MB per 2 samples */
    pt_link link = {1e9, 1e-5};
    pt_topology *t = pt_topology_uniform(1, 4, 64LL << 30, link, link);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    /* weights 2 MB + grads 2 MB + momentum 2 MB = 6 MB; activations per
     * replica with r rows: (in 500 B/sample + 50 MB/sample + 500 B/sample) * r (a
     * profile without saved or scratch bytes has no backward scratch) */
    o.memory_limit_bytes = 6000000 + 60000000;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    REQUIRE(pt_planner_run("dp", pr, t, 16, &o, &plan, &rep, &err) == 0);
    CHECK(plan->microbatch_size == 4); /* one row per replica */
    CHECK(plan->microbatch_count == 4);
    pt_plan_free(&plan);
    o.memory_limit_bytes = 6000000 + 40000000;
    CHECK(pt_planner_run("dp", pr, t, 16, &o, &plan, &rep, &err) == PT_ENOFIT);
    CHECK_STR_CONTAINS(err.msg, "needs");
    CHECK(rep.needed_memory_bytes == 6000000 + 50000000 + 1000);
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

PT_TEST_MAIN({"formulas", test_formulas}, {"memory_picks_microbatch", test_memory_picks_microbatch})

/* Planners charge what the simulator (and the runtime) does.
 *
 * overlap: on shipped profiles, a data-parallel plan simulated with the
 * default bucketed all-reduce (overlapping the last backward) is faster than
 * with one all-reduce after the backward by exactly what the cost model
 * predicts: (B + allreduce(P)) - pt_cost_overlapped_bwd_allreduce_s.
 *
 * agree: for every shipped profile x topology, dp's
 * predicted iteration equals the simulated iteration of the plan it returns
 * within 2 %. With PT_AGREE_ALL=1 in the environment it also measures and
 * prints dapple's and gpipe's deviations (their pipeline models are still up
 * to 17 % and 19 % below the simulator on some of them: docs/planners.md);
 * those are not asserted, and their searches are too slow for every run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tests/test.h"

#define GBS 128

static const char *const profiles[] = {"alexnet",    "densenet121",  "gnmt",
                                       "gnmt_large", "inception_v3", "resnet101",
                                       "resnet18",   "resnet50",     "vgg16"};
static const char *const topologies[] = {
    "dapple-config-a", "dapple-config-b",     "dapple-config-c",     "dgx1-v100-x8", "h100-8x8",
    "local-cpu-4",     "pipedream-cluster-a", "pipedream-cluster-b", "cluster-128x8"};
#define NP ((int)(sizeof profiles / sizeof *profiles))
#define NT ((int)(sizeof topologies / sizeof *topologies))

static pt_profile *load_profile(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "profiles/%s.json", name);
    pt_profile *p = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_profile_load(pt_test_path(rel), &p, &err) == 0, "%s", err.msg);
    return p;
}

static pt_topology *load_topology(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "topologies/%s.json", name);
    pt_topology *t = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_topology_load(pt_test_path(rel), &t, &err) == 0, "%s", err.msg);
    return t;
}

static double simulate(pt_sim *sim, const pt_plan *plan, const pt_cost *cost, int64_t bucket)
{
    pt_sched_opts o = {.bucket_bytes = bucket};
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    int rc = pt_sim_plan(sim, plan, cost, &o, &prog, &res, &err);
    CHECK_MSG(rc == 0, "simulate: %s", err.msg);
    pt_program_release(&prog);
    return rc == 0 ? res.iter_s : NAN;
}

static void test_overlap(void)
{
    static const char *const models[] = {"resnet50", "vgg16", "gnmt"};
    pt_topology *t = load_topology("dapple-config-b");
    REQUIRE(t);
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    for (int m = 0; m < 3; m++) {
        pt_profile *p = load_profile(models[m]);
        pt_cost *cost = NULL;
        pt_error err = {0};
        REQUIRE(p && pt_cost_new(p, t, &cost, &err) == 0);
        pt_planner_opts o;
        pt_planner_opts_default(&o);
        pt_plan *plan = NULL;
        REQUIRE(pt_planner_run("dp", p, t, GBS, &o, &plan, NULL, &err) == 0);
        const pt_stage *st = &plan->stages[0];
        int r = st->replica_count, b = plan->microbatch_size;
        int rows = (b + r - 1) / r;
        double over = simulate(sim, plan, cost, 0), plain = simulate(sim, plan, cost, -1);
        double bwd = pt_cost_bwd_s(cost, st->first, st->last, rows, st->replicas[0]);
        double ar = pt_cost_allreduce_s(cost, st->replicas, r,
                                        pt_cost_param_bytes(cost, st->first, st->last));
        double predicted = bwd + ar -
                           pt_cost_overlapped_bwd_allreduce_s(cost, st->replicas, r, st->first,
                                                              st->last, rows, st->replicas[0], 0);
        printf("  %s dp x%d on dapple-config-b: unoverlapped %.3f ms, overlapped %.3f ms, saved "
               "%.3f ms, cost model %.3f ms\n",
               models[m], r, plain * 1e3, over * 1e3, (plain - over) * 1e3, predicted * 1e3);
        CHECK(predicted > 1e-4); /* a real overlap: more than 0.1 ms */
        CHECK_MSG(fabs((plain - over) - predicted) <= 1e-9 * plain,
                  "%s: saved %.9f, predicted %.9f", models[m], plain - over, predicted);
        pt_plan_free(&plan);
        pt_cost_free(&cost);
        pt_profile_free(&p);
    }
    pt_sim_free(&sim);
    pt_topology_free(&t);
}

static void test_agree(void)
{
    static const char *const planners[] = {"dp", "dapple", "gpipe"};
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    double worst[3] = {0, 0, 0};
    int compared[3] = {0, 0, 0};
    const char *all = getenv("PT_AGREE_ALL");
    int nk = all && *all == '1' ? 3 : 1;
    for (int ti = 0; ti < NT; ti++) {
        pt_topology *t = load_topology(topologies[ti]);
        for (int pi = 0; pi < NP && t; pi++) {
            pt_profile *p = load_profile(profiles[pi]);
            pt_cost *cost = NULL;
            pt_error err = {0};
            if (!p || pt_cost_new(p, t, &cost, &err) < 0) {
                CHECK_MSG(0, "%s on %s: %s", profiles[pi], topologies[ti], err.msg);
                pt_profile_free(&p);
                continue;
            }
            /* dapple and gpipe on the 1,024-device cluster take minutes */
            int kmax = strcmp(topologies[ti], "cluster-128x8") ? nk : 1;
            for (int k = 0; k < kmax; k++) {
                pt_planner_opts o;
                pt_planner_opts_default(&o);
                pt_plan *plan = NULL;
                pt_planner_report rep;
                int rc = pt_planner_run(planners[k], p, t, GBS, &o, &plan, &rep, &err);
                if (rc == PT_ENOFIT) /* nothing fits: nothing to compare */
                    continue;
                CHECK_MSG(rc == 0, "%s %s on %s: %s", planners[k], profiles[pi], topologies[ti],
                          err.msg);
                if (rc < 0)
                    continue;
                double sim_s = simulate(sim, plan, cost, 0);
                double dev = (rep.iter_s - sim_s) / sim_s;
                compared[k]++;
                if (fabs(dev) > fabs(worst[k]))
                    worst[k] = dev;
                if (fabs(dev) > 0.02)
                    printf("  %s %s on %s: planner %.3f ms, simulator %.3f ms (%+.1f%%)\n",
                           planners[k], profiles[pi], topologies[ti], rep.iter_s * 1e3, sim_s * 1e3,
                           dev * 100);
                CHECK_MSG(k != 0 || fabs(dev) <= 0.02,
                          "%s %s on %s: planner %.3f ms, simulator %.3f ms (%+.1f%%)", planners[k],
                          profiles[pi], topologies[ti], rep.iter_s * 1e3, sim_s * 1e3, dev * 100);
                pt_plan_free(&plan);
            }
            pt_cost_free(&cost);
            pt_profile_free(&p);
        }
        pt_topology_free(&t);
    }
    for (int k = 0; k < nk; k++)
        printf("  %s: worst planner vs simulator %+.2f%% over %d plans (%d profiles x %d "
               "topologies)\n",
               planners[k], worst[k] * 100, compared[k], NP, NT);
    CHECK(compared[0] == NP * NT); /* dp plans every case */
    pt_sim_free(&sim);
}

PT_TEST_MAIN({"overlap", test_overlap}, {"agree", test_agree})

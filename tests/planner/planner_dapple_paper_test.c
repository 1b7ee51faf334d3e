/* `--objective dapple`: DAPPLE's released planner's space and closed form
 * (planner/plan_dapple_paper.c).
 *  - hand-computed latencies on a two-layer model (overlapped DP against a
 *    two-stage pipeline, with and without a pivot steady phase);
 *  - the paper's planning decisions on its configurations (topologies/
 *    dapple-config-{a,b,c}.json) at 128 samples per device: ResNet-50 data
 *    parallel on A, B and C; VGG data parallel on A and B, 15:1 on C. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/planner.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tests/test.h"

#define MS 1e-3

/* Two servers of one device at 25 Gbit/s (DAPPLE's own Ethernet: its
 * constants apply unscaled). Layers: 1 ms forward, 1 ms backward at 4
 * samples; 1e6 activation bytes; layer 0 holds `params` bytes. */
static void tiny(double params, double ms0, pt_profile **pp, pt_topology **tp)
{
    static const char topo[] =
        "{\"v\":1,\"name\":\"two\",\"nodes\":[{\"name\":\"s\",\"repeat\":2,\"count\":1,"
        "\"device\":{\"name\":\"g\",\"memory_gib\":16,\"speed\":1.0}}],\"links\":{\"intra\":{"
        "\"bandwidth_gbps\":1000,\"latency_us\":0},\"inter\":{\"bandwidth_gbps\":25,\"latency_"
        "us\":0}}}";
    pt_error err = {0};
    REQUIRE(pt_topology_parse(topo, "two", tp, &err) == 0);
    pt_profile *p = pt_profile_new(2);
    REQUIRE(p);
    snprintf(p->model, sizeof p->model, "tiny");
    p->microbatch = 4;
    p->input_bytes = 1000;
    for (int l = 0; l < 2; l++) {
        snprintf(p->layers[l].name, sizeof p->layers[l].name, "l%d", l);
        p->layers[l].fwd_ms = 1;
        p->layers[l].bwd_ms = 1;
        p->layers[l].recompute_ms = 1;
        p->layers[l].act_bytes = 1000000;
    }
    p->layers[0].param_bytes = (int64_t)params;
    p->layers[0].fwd_ms = p->layers[0].bwd_ms = p->layers[0].recompute_ms = ms0;
    *pp = p;
}

static void run(const pt_profile *p, const pt_topology *t, int gbs, pt_plan **plan,
                pt_planner_report *rep)
{
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.objective = PT_OBJECTIVE_DAPPLE;
    o.microbatch_sizes[0] = 4;
    o.microbatch_size_count = 1;
    pt_error err = {0};
    CHECK_MSG(pt_planner_run("dapple", p, t, gbs, &o, plan, rep, &err) == 0, "%s", err.msg);
}

/* DP: micro-batch 4 on two replicas, 2 rows each, so each layer takes
 * 0.5 ms forward + 0.5 ms backward and h = F = B = half of the 2 ms of both
 * layers = 1 ms; all-reduce 2 (2-1)/2 W / 3 GB/s. Two-stage 1:1 at 4 rows:
 * F = B = 1 ms per stage, the transfer 1e6 B / 1 GB/s = 1 ms each way. */
static void test_by_hand(void)
{
    static const struct {
        double params, ms0;
        int gbs;
        double want_ms;
        int stages;
    } cases[] = {
        /* W = 3 MB: AR 1 ms. M = 1: DP h + max(h, AR) = 2; pipeline 3 F + 3 B = 6 */
        {3e6, 1, 4, 2.0, 1},
        /* M = 2: DP 2h + h + max(h, AR) = 4; pipeline (M-1)(2) + 6 = 8 */
        {3e6, 1, 8, 4.0, 1},
        /* W = 30 MB: AR 10 ms; DP 3 + 10 = 13; pipeline 8 (no all-reduce) */
        {30e6, 1, 8, 8.0, 2},
        /* layer 0 at 3 ms each way: stage 0 F = B = 3, the pivot (M-1) 6 >= (M-1) 2 + 6;
         * L = 6 + sum F 5 + sum B 5 = 16; DP: h = 2, AR 20: 4 + 2 + 20 = 26 */
        {60e6, 3, 8, 16.0, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pt_profile *p = NULL;
        pt_topology *t = NULL;
        tiny(cases[i].params, cases[i].ms0, &p, &t);
        pt_plan *plan = NULL;
        pt_planner_report rep;
        run(p, t, cases[i].gbs, &plan, &rep);
        if (plan) {
            CHECK_NEAR(rep.objective_s, cases[i].want_ms * MS, 1e-9);
            CHECK(plan->stage_count == cases[i].stages);
            CHECK(plan->schedule == PT_SCHED_DAPPLE && plan->policy == 'A');
        }
        pt_plan_free(&plan);
        pt_profile_free(&p);
        pt_topology_free(&t);
    }
}

static void decision(const char *model, const char *config, int want_stages, int want_p, int want_q)
{
    char path[128];
    snprintf(path, sizeof path, "profiles/%s.json", model);
    pt_profile *p = NULL;
    pt_topology *t = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_load(pt_test_path(path), &p, &err) == 0);
    snprintf(path, sizeof path, "topologies/dapple-config-%s.json", config);
    REQUIRE(pt_topology_load(pt_test_path(path), &t, &err) == 0);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.objective = PT_OBJECTIVE_DAPPLE;
    pt_plan *plan = NULL;
    int gbs = 128 * t->device_count;
    CHECK_MSG(pt_planner_run("dapple", p, t, gbs, &o, &plan, NULL, &err) == 0, "%s", err.msg);
    if (plan) {
        CHECK_MSG(plan->stage_count == want_stages, "%s on %s: %d stages, want %d", model, config,
                  plan->stage_count, want_stages);
        if (want_stages == 2 && plan->stage_count == 2)
            CHECK_MSG(plan->stages[0].replica_count == want_p &&
                          plan->stages[1].replica_count == want_q,
                      "%s on %s: %d:%d, want %d:%d", model, config, plan->stages[0].replica_count,
                      plan->stages[1].replica_count, want_p, want_q);
        if (want_stages == 1 && plan->stage_count == 1)
            CHECK(plan->stages[0].replica_count == t->device_count);
    }
    pt_plan_free(&plan);
    pt_profile_free(&p);
    pt_topology_free(&t);
}

static void test_paper_decisions(void)
{
    decision("resnet50", "a", 1, 0, 0);
    decision("resnet50", "b", 1, 0, 0);
    decision("resnet50", "c", 1, 0, 0);
    decision("vgg16", "a", 1, 0, 0);
    decision("vgg16", "b", 1, 0, 0);
    decision("vgg16", "c", 2, 15, 1);
}

PT_TEST_MAIN({"by_hand", test_by_hand}, {"paper_decisions", test_paper_decisions})

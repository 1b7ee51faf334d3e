/* `--objective dapple`: DAPPLE's released planner's space and formulas
 * (planner/plan_dapple_paper.c).
 *  - hand-computed latencies on a two-layer model: its overlapped DP
 *    T = C/G + offset against its analytical pipeline length
 *    b (M-1) + C/(rp M) + transfer(a/(rp M)) + max(0, AR_s - s b);
 *  - its decisions on the paper's configurations (topologies/
 *    dapple-config-{a,b,c}.json): ResNet-50 data parallel on A, B and C at
 *    global batch 128 and at 128 per device; VGG-16 the same plan on B and C
 *    (its constants do not depend on the topology's links, so Config-B and
 *    Config-C are the same to it), and 15:1 on A at 128 per device; the
 *    overlapped DP figure for ResNet-50 on A at 128
 *    (g = 32 samples fit a device, 27.7 ms of compute + 8.5 ms of offset). */
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

/* Two single-device servers, min_mbs 4, layers c_l = (f + b) GBS / 4 at the
 * global batch. DP: C/2 + the offset, here layer 0's whole all-reduce
 * W / 3 GB/s (layer 1 has no parameters). The 1:1 bipartition and the
 * straight pipeline are the same plan: M = GBS / 4, B = max(c_0, c_1,
 * transfer of a_0(GBS) = 1e6 GBS / 4 bytes at 1 GB/s), block B / M,
 * L = block (M-1) + C / M + 1e6 / 1 GB/s = 1 ms; no all-reduce. */
static void test_by_hand(void)
{
    static const struct {
        double params, ms0;
        int gbs;
        double want_ms;
        int stages;
    } cases[] = {
        /* GBS 4: c = 2, 2; C = 4. DP 2 + 1 (3 MB) = 3; pipeline B = 2, M = 1: 4 + 1 = 5 */
        {3e6, 1, 4, 3.0, 1},
        /* GBS 8: c = 4, 4; C = 8. DP 4 + 1 = 5; pipeline B = 4, M = 2: 2 + 4 + 1 = 7 */
        {3e6, 1, 8, 5.0, 1},
        /* W = 30 MB: DP 4 + 10 = 14; pipeline 7 */
        {30e6, 1, 8, 7.0, 2},
        /* layer 0 at 3 ms each way: c = 12, 4; C = 16. DP 8 + 20 = 28; pipeline B = 12,
         * block 6: 6 + 8 + 1 = 15 */
        {60e6, 3, 8, 15.0, 2},
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

/* DAPPLE's plan for model on a config at global batch gbs: its stage count
 * and, for two stages, P:Q. */
static void decide(const char *model, const char *config, int gbs, int *stages, int *p, int *q,
                   double *objective)
{
    char path[128];
    snprintf(path, sizeof path, "profiles/%s.json", model);
    pt_profile *pr = NULL;
    pt_topology *t = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_load(pt_test_path(path), &pr, &err) == 0);
    snprintf(path, sizeof path, "topologies/dapple-config-%s.json", config);
    REQUIRE(pt_topology_load(pt_test_path(path), &t, &err) == 0);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.objective = PT_OBJECTIVE_DAPPLE;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    *stages = *p = *q = 0;
    CHECK_MSG(pt_planner_run("dapple", pr, t, gbs, &o, &plan, &rep, &err) == 0, "%s", err.msg);
    if (plan) {
        *stages = plan->stage_count;
        *p = plan->stages[0].replica_count;
        *q = plan->stage_count > 1 ? plan->stages[1].replica_count : 0;
        *objective = rep.objective_s;
        printf("  %s on %s at %d: %d stages %d:%d, %.3f ms\n", model, config, gbs, *stages, *p, *q,
               rep.objective_s * 1e3);
    }
    pt_plan_free(&plan);
    pt_profile_free(&pr);
    pt_topology_free(&t);
}

static void test_paper_decisions(void)
{
    static const char *const configs[] = {"a", "b", "c"};
    int S, P, Q, S2, P2, Q2;
    double L, L2;
    for (int gbs = 128; gbs <= 2048; gbs *= 16)
        for (int c = 0; c < 3; c++) {
            decide("resnet50", configs[c], gbs, &S, &P, &Q, &L);
            CHECK_MSG(S == 1 && P == 16, "resnet50 on %s at %d: not data parallel", configs[c],
                      gbs);
        }
    decide("resnet50", "a", 128, &S, &P, &Q, &L);
    CHECK_MSG(fabs(L - 36.25e-3) < 0.05e-3, "resnet50 DP on A at 128: %.3f ms", L * 1e3);
    for (int gbs = 128; gbs <= 2048; gbs *= 16) {
        decide("vgg16", "b", gbs, &S, &P, &Q, &L);
        decide("vgg16", "c", gbs, &S2, &P2, &Q2, &L2);
        CHECK(S == S2 && P == P2 && Q == Q2 && L == L2);
    }
    decide("vgg16", "a", 2048, &S, &P, &Q, &L);
    CHECK_MSG(S == 2 && P == 15 && Q == 1, "vgg16 on a at 2048: %d stages %d:%d", S, P, Q);
}

PT_TEST_MAIN({"by_hand", test_by_hand}, {"paper_decisions", test_paper_decisions})

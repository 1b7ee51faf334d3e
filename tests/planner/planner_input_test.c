/* What reaches the planner API is validated: each inconsistency is rejected
 * with PT_EINVAL and a message naming the field, by every planner. */
#include "planner/planner.h"
#include "tests/planner/planner_enum.h"
#include "tests/test.h"

static int run_all(const pt_profile *pr, const pt_topology *t, int gbs, const pt_planner_opts *o,
                   const char *want)
{
    int bad = 0;
    for (int i = 0; i < pt_planner_count(); i++) {
        const pt_planner_info *p = pt_planner_get(i);
        pt_plan *plan = (pt_plan *)1; /* must be reset to NULL */
        pt_error err = {0};
        int rc = pt_planner_run(p->name, pr, t, gbs, o, &plan, NULL, &err);
        if (rc != PT_EINVAL || plan != NULL || !strstr(err.msg, want)) {
            fprintf(stderr, "  %s: rc %d, message '%s' lacks '%s'\n", p->name, rc, err.msg, want);
            bad++;
        }
    }
    return bad;
}

static void test_rejections(void)
{
    pt_profile *pr = en_profile(6, 61);
    pt_topology *t = en_topology(2, 2, 10, 16 * EN_GIB);
    REQUIRE(pr && t);
    pt_planner_opts o;
    pt_planner_opts_default(&o);

    pr->layers[3].fwd_ms = -1;
    CHECK(run_all(pr, t, 16, &o, "layers[3].fwd_ms") == 0);
    pr->layers[3].fwd_ms = 1;
    pr->layers[2].bwd_ms = NAN;
    CHECK(run_all(pr, t, 16, &o, "layers[2].bwd_ms") == 0);
    pr->layers[2].bwd_ms = 1;
    pr->layers[1].act_bytes = -5;
    CHECK(run_all(pr, t, 16, &o, "layers[1].act_bytes") == 0);
    pr->layers[1].act_bytes = 5;

    t->inter.bandwidth = 0;
    CHECK(run_all(pr, t, 16, &o, "inter.bandwidth") == 0);
    t->inter.bandwidth = 1e9;
    t->intra.latency = -1e-6;
    CHECK(run_all(pr, t, 16, &o, "intra.latency") == 0);
    t->intra.latency = 1e-6;
    t->devices[2].memory_bytes = 0;
    CHECK(run_all(pr, t, 16, &o, "devices[2].memory") == 0);
    t->devices[2].memory_bytes = 1 << 30;
    t->devices[1].speed = 0;
    CHECK(run_all(pr, t, 16, &o, "devices[1].speed") == 0);
    t->devices[1].speed = 1;

    o.stages = 7;
    CHECK(run_all(pr, t, 16, &o, "7 stages but the profile has 6 layers") == 0);
    o.stages = 5;
    CHECK(run_all(pr, t, 16, &o, "5 stages but the topology has 4 devices") == 0);
    o.stages = 0;
    o.microbatch_sizes[0] = 3;
    o.microbatch_size_count = 1;
    CHECK(run_all(pr, t, 16, &o, "micro-batch size 3") == 0);
    o.microbatch_size_count = 0;
    CHECK(run_all(pr, t, 0, &o, "global batch") == 0);
    pr->microbatch = 0;
    CHECK(run_all(pr, t, 16, &o, "microbatch") == 0);
    pr->microbatch = 4;

    /* and with everything repaired, every planner succeeds */
    for (int i = 0; i < pt_planner_count(); i++) {
        pt_plan *plan = NULL;
        pt_error err = {0};
        int rc = pt_planner_run(pt_planner_get(i)->name, pr, t, 16, &o, &plan, NULL, &err);
        CHECK_MSG(rc == 0, "%s: %s", pt_planner_get(i)->name, err.msg);
        pt_plan_free(&plan);
    }
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

static void test_registry(void)
{
    const char *names[] = {"dapple", "pipedream", "2bw", "gpipe", "dp", "pipesgd"};
    CHECK(pt_planner_count() == 6);
    for (int i = 0; i < 6; i++) {
        const pt_planner_info *p = pt_planner_find(names[i]);
        CHECK(p && !strcmp(p->name, names[i]) && p->run && p->summary);
    }
    CHECK(pt_planner_find("nope") == NULL);
    CHECK(pt_planner_get(6) == NULL);
    pt_profile *pr = en_profile(4, 62);
    pt_topology *t = en_topology(1, 2, 10, 16 * EN_GIB);
    pt_plan *plan = NULL;
    pt_error err = {0};
    CHECK(pt_planner_run("nope", pr, t, 8, NULL, &plan, NULL, &err) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "dapple");
    pt_topology_free(&t);
    pt_profile_free(&pr);
}

PT_TEST_MAIN({"rejections", test_rejections}, {"registry", test_registry})

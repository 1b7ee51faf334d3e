/* Plan: the example of docs/formats.md, round-trips of every schedule and
 * optimizer, the checks against a model and a topology, the record helpers,
 * and the stage-coverage rule against a reference over all small cases. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/topology.h"
#include "tests/test.h"

static const char *example =
    "{\"v\":1,\"model\":\"fmnist-mlp\",\"layers\":8,\"microbatch\":{\"size\":16,\"count\":8},"
    "\"schedule\":{\"kind\":\"dapple\",\"policy\":\"A\"},"
    "\"optimizer\":{\"kind\":\"sgd\",\"lr\":0.05,\"momentum\":0.9},"
    "\"stages\":[{\"layers\":[0,3],\"replicas\":[0,1],\"recompute\":false},"
    "{\"layers\":[3,8],\"replicas\":[2]}]}";

static int plan_equal(const pt_plan *a, const pt_plan *b)
{
    if (strcmp(a->model, b->model) || a->layer_count != b->layer_count ||
        a->stage_count != b->stage_count || a->microbatch_size != b->microbatch_size ||
        a->microbatch_count != b->microbatch_count || a->schedule != b->schedule ||
        a->policy != b->policy || a->vertical_sync != b->vertical_sync || a->chunks != b->chunks)
        return 0;
    const pt_optim_spec *x = &a->optimizer, *y = &b->optimizer;
    if (x->kind != y->kind || x->lr != y->lr || x->momentum != y->momentum ||
        x->beta1 != y->beta1 || x->beta2 != y->beta2 || x->eps != y->eps ||
        x->weight_decay != y->weight_decay)
        return 0;
    for (int s = 0; s < a->stage_count; s++) {
        const pt_stage *p = &a->stages[s], *q = &b->stages[s];
        if (p->first != q->first || p->last != q->last || p->replica_count != q->replica_count ||
            p->recompute != q->recompute)
            return 0;
        for (int r = 0; r < p->replica_count; r++)
            if (p->replicas[r] != q->replicas[r])
                return 0;
    }
    return 1;
}

static pt_plan *parse_ok(const char *json)
{
    pt_plan *p = NULL;
    pt_error err = {0};
    int rc = pt_plan_parse(json, "plan.json", &p, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return p;
}

static void check_round_trip(const pt_plan *p)
{
    char *json = pt_plan_to_json(p);
    REQUIRE(json != NULL);
    pt_plan *back = parse_ok(json);
    if (back) {
        CHECK(plan_equal(p, back));
        char *again = pt_plan_to_json(back);
        CHECK(again && !strcmp(again, json));
        free(again);
    }
    pt_plan_free(&back);
    free(json);
}

static void test_example(void)
{
    pt_plan *p = parse_ok(example);
    REQUIRE(p != NULL);
    CHECK(!strcmp(p->model, "fmnist-mlp") && p->layer_count == 8);
    CHECK(p->microbatch_size == 16 && p->microbatch_count == 8);
    CHECK(p->schedule == PT_SCHED_DAPPLE && p->policy == 'A' && !p->vertical_sync);
    CHECK(p->optimizer.kind == PT_OPTIM_SGD && p->optimizer.lr == 0.05f &&
          p->optimizer.momentum == 0.9f && p->optimizer.weight_decay == 0.0f);
    REQUIRE(p->stage_count == 2);
    CHECK(p->stages[0].first == 0 && p->stages[0].last == 3 && p->stages[0].replica_count == 2);
    CHECK(p->stages[0].replicas[0] == 0 && p->stages[0].replicas[1] == 1);
    CHECK(p->stages[1].first == 3 && p->stages[1].last == 8 && p->stages[1].replicas[0] == 2);
    CHECK(!p->stages[0].recompute && !p->stages[1].recompute);
    CHECK(pt_plan_device_count(p) == 3);
    check_round_trip(p);
    pt_plan_free(&p);
    CHECK(p == NULL);
}

/* Every schedule kind and both optimizers, with their parameters. */
static void test_round_trip_kinds(void)
{
    for (int k = 0; k < PT_SCHED_BUILTIN_COUNT; k++) {
        /* kinds placing several chunks per device need a plan laid out for them:
         * tests/planner/sched_interleaved_test.c round-trips one */
        if (pt_sched_kind_has(k, PT_SCHED_OPT_CHUNKS))
            continue;
        pt_plan *p = parse_ok(example);
        REQUIRE(p != NULL);
        p->schedule = (pt_sched_kind)k;
        p->policy = k == PT_SCHED_DAPPLE ? 'B' : 'A';
        p->vertical_sync = k == PT_SCHED_PIPEDREAM;
        p->stages[1].recompute = 1;
        if (k % 2) {
            p->optimizer = pt_optim_default(PT_OPTIM_ADAM);
            p->optimizer.lr = 3e-4f;
            p->optimizer.beta2 = 0.98f;
            p->optimizer.weight_decay = 0.01f;
        } else {
            p->optimizer.momentum = 0.0f;
            p->optimizer.lr = 0.1234567f;
        }
        check_round_trip(p);
        pt_sched_kind back;
        CHECK(pt_sched_kind_parse(pt_sched_kind_name((pt_sched_kind)k), &back) == 0 &&
              back == (pt_sched_kind)k);
        pt_plan_free(&p);
    }
    pt_sched_kind out;
    CHECK(pt_sched_kind_parse("zero-bubble", &out) == PT_ENOTFOUND);
    CHECK(pt_sched_kind_name(PT_SCHED_BUILTIN_COUNT) == NULL);
}

static void test_optimizer_defaults(void)
{
    pt_optim_spec s = pt_optim_default(PT_OPTIM_SGD), a = pt_optim_default(PT_OPTIM_ADAM);
    CHECK(s.kind == PT_OPTIM_SGD && s.lr == 0.01f && s.momentum == 0.9f);
    CHECK(a.kind == PT_OPTIM_ADAM && a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f &&
          a.eps == 1e-8f);
    /* no optimizer: sgd defaults; adam with only lr: the other adam defaults */
    const char *none = "{\"v\":1,\"model\":\"m\",\"layers\":1,\"microbatch\":{\"size\":1,"
                       "\"count\":1},\"schedule\":{\"kind\":\"gpipe\"},\"stages\":[{\"layers\":"
                       "[0,1],\"replicas\":[0]}]}";
    pt_plan *p = parse_ok(none);
    REQUIRE(p != NULL);
    CHECK(p->optimizer.kind == PT_OPTIM_SGD && p->optimizer.lr == s.lr);
    CHECK(p->policy == 'A' && p->schedule == PT_SCHED_GPIPE);
    pt_plan_free(&p);
    const char *adam = "{\"v\":1,\"model\":\"m\",\"layers\":1,\"microbatch\":{\"size\":1,"
                       "\"count\":1},\"schedule\":{\"kind\":\"2bw\"},\"optimizer\":{\"kind\":"
                       "\"adam\",\"lr\":0.002},\"stages\":[{\"layers\":[0,1],\"replicas\":[0]}]}";
    p = parse_ok(adam);
    REQUIRE(p != NULL);
    CHECK(p->optimizer.kind == PT_OPTIM_ADAM && p->optimizer.lr == 0.002f &&
          p->optimizer.beta2 == 0.999f);
    pt_plan_free(&p);
}

static void test_check_model_topology(void)
{
    pt_model_spec *m = NULL;
    pt_topology *t = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("fmnist-mlp", &m, &err) == 0);
    REQUIRE(pt_topology_load(pt_test_path("topologies/local-cpu-4.json"), &t, &err) == 0);
    pt_plan *p = parse_ok(example);
    REQUIRE(p != NULL);
    CHECK_MSG(pt_plan_check(p, m, t, "plan.json", &err) == 0, "%s", err.msg);
    CHECK(pt_plan_check(p, NULL, NULL, "plan.json", &err) == 0);

    p->stages[1].replicas[0] = 4; /* local-cpu-4 has devices 0..3 */
    CHECK(pt_plan_check(p, m, t, "plan.json", &err) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "plan.json: stages[1].replicas[0]: device 4 does not exist "
                                "(topology local-cpu-4 has devices 0..3)");
    CHECK(pt_plan_check(p, m, NULL, "plan.json", &err) == 0);
    p->stages[1].replicas[0] = 3;

    p->layer_count = 9;
    p->stages[1].last = 9;
    CHECK(pt_plan_check(p, m, t, "plan.json", &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "plan.json: layers: 9, but model fmnist-mlp has 8 layers");
    p->layer_count = 8;
    p->stages[1].last = 8;

    snprintf(p->model, sizeof p->model, "gpt-tiny");
    CHECK(pt_plan_check(p, m, t, "plan.json", &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "model: plan is for \"gpt-tiny\", not for \"fmnist-mlp\"");
    pt_plan_free(&p);
    pt_topology_free(&t);
    pt_model_spec_free(&m);
}

/* Plans built by hand go through the same checks as parsed ones. */
static void test_check_by_hand(void)
{
    pt_plan *p = pt_plan_new(3);
    REQUIRE(p != NULL);
    CHECK(p->policy == 'A' && p->optimizer.kind == PT_OPTIM_SGD);
    snprintf(p->model, sizeof p->model, "hand");
    p->layer_count = 6;
    p->microbatch_size = 4;
    p->microbatch_count = 2;
    int d0[] = {0}, d1[] = {1, 2}, d2[] = {3};
    CHECK(pt_plan_set_replicas(p, 0, d0, 1) == 0);
    CHECK(pt_plan_set_replicas(p, 1, d1, 2) == 0);
    CHECK(pt_plan_set_replicas(p, 2, d2, 1) == 0);
    CHECK(pt_plan_set_replicas(p, 3, d2, 1) == PT_EINVAL);
    p->stages[0] = (pt_stage){0, 2, p->stages[0].replica_count, p->stages[0].replicas, 0};
    p->stages[1].first = 2;
    p->stages[1].last = 5;
    p->stages[2].first = 5;
    p->stages[2].last = 6;
    pt_error err = {0};
    CHECK_MSG(pt_plan_check(p, NULL, NULL, "hand", &err) == 0, "%s", err.msg);
    CHECK(pt_plan_device_count(p) == 4);

    pt_plan *c = pt_plan_clone(p);
    REQUIRE(c != NULL);
    CHECK(plan_equal(p, c) && c->stages[1].replicas != p->stages[1].replicas);
    check_round_trip(c);

    p->stages[2].replicas[0] = 2; /* already in stage 1 */
    CHECK(pt_plan_check(p, NULL, NULL, "hand", &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "hand: stages[2].replicas[0]: device 2 is used twice (also by "
                                "stages[1].replicas[1])");
    CHECK(plan_equal(c, c) && !plan_equal(p, c)); /* the clone is a deep copy */
    p->stages[2].replicas[0] = 3;
    p->stages[1].last = 4;
    CHECK(pt_plan_check(p, NULL, NULL, "hand", &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "hand: stages[2].layers: [5,6) leaves layers [4,5) not covered");
    p->stages[1].last = 5;
    p->microbatch_size = 1; /* stage 1 has two replicas */
    CHECK(pt_plan_check(p, NULL, NULL, "hand", &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "stages[1].replicas: 2 replicas share a micro-batch of 1");
    p->microbatch_size = 4;
    p->optimizer.momentum = 1.0f;
    CHECK(pt_plan_check(p, NULL, NULL, "hand", &err) == PT_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "optimizer.momentum");
    pt_plan_free(&c);
    pt_plan_free(&p);
    pt_plan_free(&p);
    pt_plan_free(NULL);
}

/* Reference rule for the stage ranges of a plan over n layers: in order,
 * each non-empty, the first starting at 0, each starting where the previous
 * ended, the last ending at n, no more stages than layers. */
static int reference_valid(const int (*r)[2], int stages, int n)
{
    if (stages > n)
        return 0;
    int next = 0;
    for (int s = 0; s < stages; s++) {
        if (r[s][0] != next || r[s][1] <= r[s][0] || r[s][1] > n)
            return 0;
        next = r[s][1];
    }
    return next == n;
}

/* Every assignment of ranges [a,b) with 0 <= a, b <= n+1 to up to 3 stages,
 * for n = 1..4 layers: the parser accepts exactly the reference's plans. */
static void test_coverage_exhaustive(void)
{
    int checked = 0, accepted = 0;
    for (int n = 1; n <= 4; n++)
        for (int stages = 1; stages <= 3; stages++) {
            int vals = n + 2, combos = 1;
            for (int s = 0; s < 2 * stages; s++)
                combos *= vals;
            for (int c = 0; c < combos; c++) {
                int r[3][2], x = c;
                for (int s = 0; s < stages; s++) {
                    r[s][0] = x % vals;
                    x /= vals;
                    r[s][1] = x % vals;
                    x /= vals;
                }
                char json[1024];
                int len = snprintf(json, sizeof json,
                                   "{\"v\":1,\"model\":\"m\",\"layers\":%d,\"microbatch\":"
                                   "{\"size\":4,\"count\":4},\"schedule\":{\"kind\":\"gpipe\"},"
                                   "\"stages\":[",
                                   n);
                for (int s = 0; s < stages; s++)
                    len += snprintf(json + len, sizeof json - (size_t)len,
                                    "%s{\"layers\":[%d,%d],\"replicas\":[%d]}", s ? "," : "",
                                    r[s][0], r[s][1], s);
                snprintf(json + len, sizeof json - (size_t)len, "]}");
                pt_plan *p = NULL;
                pt_error err = {0};
                int ok = pt_plan_parse(json, "x", &p, &err) == 0;
                int want = reference_valid((const int(*)[2])r, stages, n);
                CHECK_MSG(ok == want, "%s -> %s", json, ok ? "accepted" : err.msg);
                CHECK(!ok || p != NULL);
                CHECK(ok || !strncmp(err.msg, "x: stages", 9));
                accepted += ok;
                checked++;
                pt_plan_free(&p);
            }
        }
    /* valid partitions of n layers into s parts: C(n-1, s-1), summed */
    CHECK(accepted == (1) + (1 + 1) + (1 + 2 + 1) + (1 + 3 + 3));
    CHECK(checked > 1000);
}

static void test_save_load(void)
{
    pt_plan *p = parse_ok(example);
    REQUIRE(p != NULL);
    char path[] = "/tmp/pt_plan_test_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    pt_error err = {0};
    CHECK(pt_plan_save(p, path, &err) == 0);
    pt_plan *back = NULL;
    CHECK_MSG(pt_plan_load(path, &back, &err) == 0, "%s", err.msg);
    CHECK(back && plan_equal(p, back));
    pt_plan_free(&back);
    pt_plan_free(&p);
    unlink(path);
}

PT_TEST_MAIN({"example", test_example}, {"round_trip_kinds", test_round_trip_kinds},
             {"optimizer_defaults", test_optimizer_defaults},
             {"check_model_topology", test_check_model_topology},
             {"check_by_hand", test_check_by_hand},
             {"coverage_exhaustive", test_coverage_exhaustive}, {"save_load", test_save_load})

/* Profile: the example of docs/formats.md, defaults, exact round-trips of
 * random records, atomic save and load, and the check against a model. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/model.h"
#include "protocol/profile.h"
#include "tests/test.h"

static const char *example =
    "{\"v\":1,\"model\":\"fmnist-mlp\",\"device\":\"cpu-x86\",\"source\":\"measured\","
    "\"microbatch\":64,\"input_bytes\":200704,\"layers\":["
    "{\"name\":\"linear0\",\"fwd_ms\":0.5,\"bwd_ms\":1.0,\"recompute_ms\":0.25,"
    "\"act_bytes\":262144,\"param_bytes\":3215360,\"saved_bytes\":1024,"
    "\"scratch_bytes\":2048},"
    "{\"name\":\"relu1\",\"fwd_ms\":0.05,\"bwd_ms\":0.07,\"act_bytes\":262144,\"param_bytes\":0}]}";

static int profile_equal(const pt_profile *a, const pt_profile *b)
{
    if (strcmp(a->model, b->model) || strcmp(a->device, b->device) ||
        strcmp(a->source, b->source) || a->microbatch != b->microbatch ||
        a->input_bytes != b->input_bytes || a->layer_count != b->layer_count)
        return 0;
    for (int i = 0; i < a->layer_count; i++) {
        const pt_profile_layer *x = &a->layers[i], *y = &b->layers[i];
        if (strcmp(x->name, y->name) || x->fwd_ms != y->fwd_ms || x->bwd_ms != y->bwd_ms ||
            x->recompute_ms != y->recompute_ms || x->act_bytes != y->act_bytes ||
            x->param_bytes != y->param_bytes || x->saved_bytes != y->saved_bytes ||
            x->scratch_bytes != y->scratch_bytes || x->fixed_share != y->fixed_share)
            return 0;
    }
    return 1;
}

static void test_example(void)
{
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_parse(example, "profile.json", &p, &err) == 0);
    CHECK(!strcmp(p->model, "fmnist-mlp") && !strcmp(p->device, "cpu-x86"));
    CHECK(!strcmp(p->source, "measured") && p->microbatch == 64 && p->input_bytes == 200704);
    REQUIRE(p->layer_count == 2);
    CHECK(p->layers[0].fwd_ms == 0.5 && p->layers[0].bwd_ms == 1.0);
    CHECK(p->layers[0].recompute_ms == 0.25);
    /* recompute_ms defaults to fwd_ms */
    CHECK(p->layers[1].recompute_ms == p->layers[1].fwd_ms);
    CHECK(p->layers[0].param_bytes == 3215360 && p->layers[1].act_bytes == 262144);
    CHECK(p->layers[0].saved_bytes == 1024 && p->layers[0].scratch_bytes == 2048);
    /* files that predate the memory fields read as keeping nothing beyond the output */
    CHECK(p->layers[1].saved_bytes == 0 && p->layers[1].scratch_bytes == 0);
    /* and as linear in rows (no fixed_share) */
    CHECK(p->layers[0].fixed_share == 0 && p->layers[1].fixed_share == 0);
    pt_profile_free(&p);
    CHECK(p == NULL);
}

static void test_defaults(void)
{
    const char *json = "{\"v\":1,\"model\":\"m\",\"device\":\"d\",\"microbatch\":1,"
                       "\"input_bytes\":0,\"layers\":[{\"fwd_ms\":0,\"bwd_ms\":0,"
                       "\"act_bytes\":0,\"param_bytes\":0}]}";
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_parse(json, "p", &p, &err) == 0);
    CHECK(!strcmp(p->source, "measured"));
    CHECK(!strcmp(p->layers[0].name, "layer0"));
    pt_profile_free(&p);
}

static double random_ms(unsigned *seed)
{
    /* Values with long binary expansions, tiny and large, to test exactness. */
    double u = (double)rand_r(seed) / RAND_MAX;
    switch (rand_r(seed) % 4) {
    case 0:
        return u * 1e-9;
    case 1:
        return u * 1e6;
    case 2:
        return 0.0;
    default:
        return u;
    }
}

/* parse(to_json(p)) == p for random profiles, bit for bit. */
static void test_round_trip_random(void)
{
    unsigned seed = 12345;
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + rand_r(&seed) % 40;
        pt_profile *p = pt_profile_new(n);
        REQUIRE(p != NULL);
        snprintf(p->model, sizeof p->model, "model-%d", trial);
        snprintf(p->device, sizeof p->device, "dev \"%d\"\t", trial); /* needs escaping */
        snprintf(p->source, sizeof p->source, "%s", trial % 2 ? "analytic" : "imported");
        p->microbatch = 1 + rand_r(&seed) % 1024;
        if (trial % 3 == 0) { /* measured by another framework (pipetop profile --torch) */
            snprintf(p->origin.kind, sizeof p->origin.kind, "measured");
            snprintf(p->origin.framework, sizeof p->origin.framework, "torch 1.13.%d", trial);
            snprintf(p->origin.module, sizeof p->origin.module, "models:gpt_%d", trial);
        }
        p->input_bytes = ((int64_t)rand_r(&seed) << 22) + rand_r(&seed);
        for (int i = 0; i < n; i++) {
            pt_profile_layer *l = &p->layers[i];
            snprintf(l->name, sizeof l->name, "layer-%d.%d", trial, i);
            l->fwd_ms = random_ms(&seed);
            l->bwd_ms = random_ms(&seed);
            l->recompute_ms = random_ms(&seed);
            l->act_bytes = ((int64_t)rand_r(&seed) << 21) | rand_r(&seed);
            l->param_bytes = i == 0 ? (int64_t)1 << 53 : rand_r(&seed);
            l->saved_bytes = i == 1 ? (int64_t)1 << 53 : ((int64_t)rand_r(&seed) << 20);
            l->scratch_bytes = rand_r(&seed) % 3 ? rand_r(&seed) : 0;
            /* the rows-independent share, in [0, 1); 0 is not written */
            l->fixed_share = rand_r(&seed) % 2 ? rand_r(&seed) / ((double)RAND_MAX + 1) : 0;
        }
        char *json = pt_profile_to_json(p);
        REQUIRE(json != NULL);
        pt_profile *back = NULL;
        pt_error err = {0};
        CHECK_MSG(pt_profile_parse(json, "rt", &back, &err) == 0, "%s", err.msg);
        if (back) {
            CHECK(profile_equal(p, back));
            CHECK(!strcmp(back->origin.framework, p->origin.framework) &&
                  !strcmp(back->origin.module, p->origin.module));
            char *again = pt_profile_to_json(back);
            CHECK(again && !strcmp(again, json));
            free(again);
        }
        pt_profile_free(&back);
        pt_profile_free(&p);
        free(json);
    }
}

static void test_save_load(void)
{
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_parse(example, "profile.json", &p, &err) == 0);
    char path[] = "/tmp/pt_profile_test_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK(pt_profile_save(p, path, &err) == 0);
    pt_profile *back = NULL;
    CHECK_MSG(pt_profile_load(path, &back, &err) == 0, "%s", err.msg);
    CHECK(back && profile_equal(p, back));
    pt_profile_free(&back);
    /* saving into a missing folder fails with the path in the message */
    CHECK(pt_profile_save(p, "/nonexistent/dir/p.json", &err) == PT_EIO);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/dir/p.json");
    pt_profile_free(&p);
    unlink(path);
}

static void test_check_against_model(void)
{
    pt_model_spec *m = NULL;
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("fmnist-mlp", &m, &err) == 0);
    REQUIRE(pt_profile_parse(example, "profile.json", &p, &err) == 0);
    /* the example has 2 layers; the model has 8 */
    CHECK(pt_profile_check(p, m, "profile.json", &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "profile.json: layers: 2 layers, but model fmnist-mlp has 8");
    pt_profile *q = pt_profile_new(8);
    REQUIRE(q != NULL);
    snprintf(q->model, sizeof q->model, "fmnist-mlp");
    CHECK(pt_profile_check(q, m, "q", &err) == 0);
    snprintf(q->model, sizeof q->model, "gpt-tiny");
    CHECK(pt_profile_check(q, m, "q", &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "q: model: profile is for \"gpt-tiny\"");
    pt_profile_free(&q);
    pt_profile_free(&p);
    pt_model_spec_free(&m);
}

static void test_new_free(void)
{
    pt_profile *p = pt_profile_new(3);
    REQUIRE(p != NULL);
    CHECK(p->layer_count == 3 && p->layers[2].fwd_ms == 0.0 && p->layers[2].name[0] == '\0');
    pt_profile_free(&p);
    CHECK(p == NULL);
    pt_profile_free(&p);
    pt_profile_free(NULL);
    CHECK(pt_profile_new(-1) == NULL);
}

/* The rows-independent share through two measurements: t(rows) = t * (f +
 * (1 - f) * rows / full) gives back the part time; out-of-range fits clamp. */
static void test_fit_fixed_share(void)
{
    for (double f = 0; f < 0.9; f += 0.1) {
        double part = 10.0 * (f + (1 - f) * 8 / 16.0);
        CHECK_NEAR(pt_profile_fit_fixed_share(10.0, 16, part, 8), f, 1e-12);
    }
    /* 0.84x for half the rows (fmnist-mlp-deep's 8-row against 16-row op) */
    CHECK_NEAR(pt_profile_fit_fixed_share(1.0, 16, 0.84, 8), 0.68, 1e-12);
    CHECK(pt_profile_fit_fixed_share(1.0, 16, 0.4, 8) == 0); /* superlinear: linear */
    CHECK(pt_profile_fit_fixed_share(1.0, 16, 1.2, 8) == PT_PROFILE_SHARE_MAX);
    CHECK(pt_profile_fit_fixed_share(0, 16, 0.5, 8) == 0);
    CHECK(pt_profile_fit_fixed_share(1.0, 8, 0.5, 8) == 0);
}

PT_TEST_MAIN({"fit_fixed_share", test_fit_fixed_share}, {"example", test_example},
             {"defaults", test_defaults}, {"round_trip_random", test_round_trip_random},
             {"save_load", test_save_load}, {"check_against_model", test_check_against_model},
             {"new_free", test_new_free})

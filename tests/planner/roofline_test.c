/* The roofline floor (planner/roofline.h): no layer of any shipped profile,
 * nor of any analytic profile of a shipped model on a shipped device in any
 * precision it runs, is charged by the cost model less than its roofline
 * bound at any rows the planners can give a replica (every micro-batch size
 * that divides a global batch up to 1024, split over replicas, and large
 * powers of two); the bound is computed here from the profile's own fields,
 * not by the code under test. The floor never lowers a time at the
 * profile's micro-batch, keeps a measured fixed_share, is idempotent, and
 * makes small micro-batches cost what the weights' read costs. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/analytic.h"
#include "planner/cost.h"
#include "planner/roofline.h"
#include "protocol/device.h"
#include "protocol/model.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tests/test.h"

#define ROWS_ALL     1024    /* every rows count up to this */
#define ROWS_POW_MAX 1 << 20 /* then powers of two up to this */
#define REL_TOL      1e-9

/* B_pass(rows) in ms from the profile's fields: the formula of roofline.h
 * written out again. */
static double bound_ms(const pt_profile *p, const pt_profile_layer *l, int pass, double rows)
{
    const pt_profile_roofline *r = &p->roofline;
    double k = pass == PT_ROOFLINE_BWD ? 2 : 1, x = rows / p->microbatch;
    double compute = k * l->flops * x / r->peak_flops;
    double memory = k * ((double)l->weight_bytes + (double)l->bytes * x) / r->mem_bandwidth;
    int kernels = pass == PT_ROOFLINE_BWD && l->param_bytes > 0 ? 2 * l->kernels : l->kernels;
    return 1000 * (compute > memory ? compute : memory) + kernels * r->launch_us / 1000;
}

static double charged_ms(const pt_cost *c, int layer, int pass, int rows)
{
    double s = pass == PT_ROOFLINE_FWD   ? pt_cost_fwd_s(c, layer, layer + 1, rows, -1)
               : pass == PT_ROOFLINE_BWD ? pt_cost_bwd_s(c, layer, layer + 1, rows, -1)
                                         : pt_cost_recompute_s(c, layer, layer + 1, rows, -1);
    return 1000 * s;
}

static pt_topology *one_device(void)
{
    pt_link link = {1e10, 1e-6};
    return pt_topology_uniform(1, 1, 1LL << 40, link, link);
}

/* Every rows count the floor must hold at; returns the next one after r.
 * Under valgrind (scripts/memcheck.sh sets PT_MEMCHECK) every count up to 64,
 * then powers of two: memcheck adds uninitialised bytes and reads outside
 * the profile, which the same code at other counts reaches the same way;
 * every count up to ROWS_ALL is checked natively and under ASan. */
static int next_rows(int r)
{
    static int all = -1;
    if (all < 0)
        all = getenv("PT_MEMCHECK") ? 64 : ROWS_ALL;
    return r < all ? r + 1 : 2 * r;
}

/* Checks every layer, pass and rows of `profile`; returns the layers checked. */
static int check_floor(const pt_profile *profile, const char *what)
{
    pt_topology *topo = one_device();
    pt_cost *c = NULL;
    pt_error err = {0};
    int rc = pt_cost_new(profile, topo, &c, &err);
    CHECK_MSG(rc == 0, "%s: %s", what, err.msg);
    int bad = 0, checked = 0;
    char first[256] = "";
    for (int l = 0; rc == 0 && l < profile->layer_count; l++) {
        const pt_profile_layer *L = &profile->layers[l];
        checked++;
        for (int pass = 0; pass < PT_ROOFLINE_PASSES; pass++) {
            for (int r = 1; r <= ROWS_POW_MAX; r = next_rows(r)) {
                double b = bound_ms(profile, L, pass, r), t = charged_ms(c, l, pass, r);
                /* the code's own bound is the same formula */
                double own = pt_roofline_bound_ms(profile, l, (pt_roofline_pass)pass, r);
                if (t < b * (1 - REL_TOL) || fabs(own - b) > REL_TOL * b) {
                    if (!bad++)
                        snprintf(first, sizeof first,
                                 "layer %d '%s' pass %d rows %d: charged %.9g ms, bound %.9g ms "
                                 "(code's bound %.9g)",
                                 l, L->name, pass, r, t, b, own);
                }
            }
            /* never faster than measured at the profile's micro-batch */
            double measured = pass == PT_ROOFLINE_FWD   ? L->fwd_ms
                              : pass == PT_ROOFLINE_BWD ? L->bwd_ms
                              : L->recompute_ms > 0     ? L->recompute_ms
                                                        : L->fwd_ms;
            if (charged_ms(c, l, pass, profile->microbatch) < measured * (1 - REL_TOL) && !bad++)
                snprintf(first, sizeof first, "layer %d pass %d: below its measured %.9g ms", l,
                         pass, measured);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d violations, first: %s", what, bad, first);
    pt_cost_free(&c);
    pt_topology_free(&topo);
    return checked;
}

/* profiles/<name>.json: PipeDream's imports, floored by their V100 roofline. */
static void test_shipped_profiles(void)
{
    const char *dir = pt_test_path("profiles");
    DIR *d = opendir(dir);
    REQUIRE(d);
    int profiles = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        pt_profile *p = NULL;
        pt_error err = {0};
        REQUIRE(pt_profile_load(path, &p, &err) == 0);
        CHECK_MSG(p->roofline.has, "%s has no roofline", path);
        CHECK(check_floor(p, path) == p->layer_count);
        pt_profile_free(&p);
        profiles++;
    }
    closedir(d);
    CHECK(profiles >= 9);
}

/* models/<name>.json on every shipped GPU in every precision it has a peak for. */
static void test_analytic_profiles(void)
{
    static const char *const models[] = {"fmnist-mlp", "gpt-tiny", "gpt-1.3b", "bert-48", "gpt3"};
    static const char *const devices[] = {"v100-32gb", "a100-80gb", "h100-80gb", "titan-x",
                                          "cpu-local"};
    int made = 0;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        pt_model_spec *spec = NULL;
        pt_error err = {0};
        REQUIRE(pt_model_spec_find(models[m], &spec, &err) == 0);
        for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++) {
            pt_device_desc dev;
            REQUIRE(pt_device_find(devices[d], &dev, &err) == 0);
            for (int prec = 0; prec < PT_PRECISION_COUNT; prec++) {
                if (!(pt_device_peak(&dev, prec) > 0))
                    continue;
                pt_analytic_options opt = {.precision = prec};
                pt_profile *p = NULL;
                int mb = m == 0 ? 32 : 2;
                REQUIRE(pt_analytic_profile(spec, &dev, mb, &opt, &p, &err) == 0);
                char what[256];
                snprintf(what, sizeof what, "%s on %s in %s", models[m], devices[d],
                         pt_precision_name(prec));
                check_floor(p, what);
                pt_profile_free(&p);
                made++;
            }
        }
        pt_model_spec_free(&spec);
    }
    CHECK(made >= 30);
}

/* A small micro-batch is not free: gnmt_large's classifier (132 MB of
 * weights, 5.4 ms backward for 128 samples) costs at one sample at least
 * its weights read and its gradient written at 900 GB/s, where scaling its
 * time by 1/128 would give 0.042 ms. */
static void test_small_microbatch_not_free(void)
{
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_load(pt_test_path("profiles/gnmt_large.json"), &p, &err) == 0);
    int cls = -1;
    for (int l = 0; l < p->layer_count; l++)
        if (!strncmp(p->layers[l].name, "Classifier", 10))
            cls = l;
    REQUIRE(cls >= 0);
    pt_topology *topo = one_device();
    pt_cost *c = NULL;
    REQUIRE(pt_cost_new(p, topo, &c, &err) == 0);
    double W = (double)p->layers[cls].param_bytes, linear = p->layers[cls].bwd_ms / 128;
    CHECK(linear < 0.05);
    CHECK(1000 * pt_cost_bwd_s(c, cls, cls + 1, 1, -1) >= 1000 * 2 * W / 900e9);
    /* and at the profile's micro-batch the measured time stands */
    CHECK_NEAR(1000 * pt_cost_bwd_s(c, cls, cls + 1, 128, -1), p->layers[cls].bwd_ms,
               1e-9 * p->layers[cls].bwd_ms);
    pt_cost_free(&c);
    pt_topology_free(&topo);
    pt_profile_free(&p);
}

/* A measured fixed_share stays (or grows); floored twice is floored once. */
static void test_measured_share_and_idempotence(void)
{
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_load(pt_test_path("tests/data/profile_fixed_share.json"), &p, &err) == 0);
    REQUIRE(!p->roofline.has);
    pt_profile *low = pt_profile_copy(p), *high = pt_profile_copy(p);
    REQUIRE(low && high);
    /* a roofline far below the measurements changes nothing */
    low->roofline = (pt_profile_roofline){1, 1e18, 1e16, 0};
    pt_roofline_floor(low);
    /* one that binds raises shares, never lowers them */
    high->roofline = (pt_profile_roofline){1, 1e9, 1e6, 100};
    for (int l = 0; l < high->layer_count; l++)
        high->layers[l].kernels = 1, high->layers[l].weight_bytes = high->layers[l].param_bytes;
    pt_roofline_floor(high);
    for (int l = 0; l < p->layer_count; l++) {
        const pt_profile_layer *o = &p->layers[l], *a = &low->layers[l], *b = &high->layers[l];
        for (int x = 0; x < PT_PROFILE_PASSES; x++) {
            CHECK(pt_profile_layer_share(a, x) == pt_profile_layer_share(o, x));
            CHECK(pt_profile_layer_share(b, x) >= pt_profile_layer_share(o, x));
        }
        CHECK(a->fwd_ms == o->fwd_ms && a->bwd_ms == o->bwd_ms);
        CHECK(b->fwd_ms >= o->fwd_ms && b->bwd_ms >= o->bwd_ms);
    }
    check_floor(high, "profile_fixed_share.json with a binding roofline");
    pt_profile *twice = pt_profile_copy(high);
    REQUIRE(twice);
    pt_roofline_floor(twice);
    for (int l = 0; l < high->layer_count; l++) {
        const pt_profile_layer *a = &high->layers[l], *b = &twice->layers[l];
        CHECK_NEAR(b->fwd_ms, a->fwd_ms, 1e-12 * a->fwd_ms);
        CHECK_NEAR(b->bwd_ms, a->bwd_ms, 1e-12 * a->bwd_ms);
        for (int x = 0; x < PT_PROFILE_PASSES; x++)
            CHECK_NEAR(pt_profile_layer_share(b, x), pt_profile_layer_share(a, x), 1e-12);
    }
    pt_profile_free(&twice);
    pt_profile_free(&low);
    pt_profile_free(&high);
    pt_profile_free(&p);
}

PT_TEST_MAIN({"shipped_profiles", test_shipped_profiles},
             {"analytic_profiles", test_analytic_profiles},
             {"small_microbatch_not_free", test_small_microbatch_not_free},
             {"measured_share_and_idempotence", test_measured_share_and_idempotence})

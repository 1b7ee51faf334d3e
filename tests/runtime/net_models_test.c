/* The built-in models (models/<name>.json, read with the protocol parser) as
 * nets: the runtime's shape inference and parameter counts agree with the
 * protocol's (which the planner's memory model uses), every 2-stage split
 * of gpt-tiny starts from the same weights and gives the same loss, and a
 * few optimizer steps on a fixed batch lower each model's loss. */
#include <stdint.h>

#include "protocol/model.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "runtime/rng.h"
#include "tests/test.h"

#define BATCH       4
#define TRAIN_STEPS 15

static pt_model_spec *load(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s.json", name);
    pt_model_spec *spec = NULL;
    pt_error err = {0};
    if (pt_model_spec_load(pt_test_path(rel), &spec, &err) < 0)
        fprintf(stderr, "%s: %s\n", rel, err.msg);
    return spec;
}

static void make_data(const pt_model_spec *spec, float *x, int32_t *labels, int64_t in,
                      int64_t nlab)
{
    pt_rng rng = pt_rng_make(77, 0);
    int classes = spec->layers[spec->layer_count - 1].classes;
    for (int64_t i = 0; i < in; i++)
        x[i] = spec->input_kind == PT_INPUT_TOKENS
                   ? (float)pt_rng_below(&rng, (uint64_t)spec->layers[0].vocab)
                   : (float)pt_rng_uniform(&rng);
    for (int64_t i = 0; i < nlab; i++)
        labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)classes);
}

static void check_model(const char *name)
{
    pt_model_spec *spec = load(name);
    REQUIRE(spec);
    int nl = spec->layer_count;
    pt_layer_shape *shapes = calloc((size_t)nl, sizeof *shapes);
    pt_error err = {0};
    REQUIRE(pt_model_spec_shapes(spec, shapes, &err) == 0);
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.max_batch = BATCH;
    pt_net *net = NULL;
    REQUIRE(pt_net_create(spec, &cfg, &net, &err) == 0);
    int64_t total = 0;
    for (int i = 0; i < nl; i++) {
        int64_t off, cnt, in, out;
        REQUIRE(pt_net_layer_range(net, i, &off, &cnt) == 0);
        REQUIRE(pt_net_layer_elems(net, i, &in, &out) == 0);
        CHECK_MSG(cnt == shapes[i].params, "%s layer %d: runtime %lld params, protocol %lld", name,
                  i, (long long)cnt, (long long)shapes[i].params);
        CHECK_MSG(out == shapes[i].out_elems, "%s layer %d: runtime out %lld, protocol %lld", name,
                  i, (long long)out, (long long)shapes[i].out_elems);
        CHECK(off == total);
        total += cnt;
    }
    CHECK(total == pt_net_param_count(net));
    CHECK(pt_net_in_elems(net) == pt_model_spec_input_elems(spec));

    /* a few steps on one fixed batch must lower the loss */
    int64_t in = BATCH * pt_net_in_elems(net), nlab = BATCH * pt_net_label_count(net);
    float *x = malloc((size_t)in * sizeof *x);
    int32_t *labels = malloc((size_t)nlab * sizeof *labels);
    make_data(spec, x, labels, in, nlab);
    pt_optim_spec os = pt_optim_default(PT_OPTIM_ADAM);
    pt_optim *opt = NULL;
    REQUIRE(pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, &err) == 0);
    double first = 0, last = 0;
    for (int s = 0; s < TRAIN_STEPS; s++) {
        pt_net_zero_grads(net);
        REQUIRE(pt_net_forward(net, 0, NULL, x, BATCH, labels, NULL, &last) == 0);
        REQUIRE(pt_net_backward(net, 0, NULL, NULL, NULL, NULL) == 0);
        pt_optim_step(opt, pt_net_params(net), pt_net_grads(net));
        if (s == 0)
            first = last;
    }
    CHECK_MSG(last < 0.8 * first, "%s: loss %.4f -> %.4f after %d steps", name, first, last,
              TRAIN_STEPS);
    pt_optim_destroy(&opt);
    free(x);
    free(labels);
    free(shapes);
    pt_net_destroy(&net);
    pt_model_spec_free(&spec);
}

static void test_fmnist_mlp(void)
{
    check_model("fmnist-mlp");
}

static void test_fmnist_mlp_deep(void)
{
    check_model("fmnist-mlp-deep");
}

static void test_gpt_tiny(void)
{
    check_model("gpt-tiny");
}

/* Every cut of gpt-tiny: the two stages' initial weights are the full
 * model's, and their loss is the full model's, bit for bit. */
static void test_gpt_tiny_splits(void)
{
    pt_model_spec *spec = load("gpt-tiny");
    REQUIRE(spec);
    int nl = spec->layer_count;
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.max_batch = 2;
    pt_net *full = NULL;
    REQUIRE(pt_net_create(spec, &cfg, &full, NULL) == 0);
    int64_t in = 2 * pt_net_in_elems(full), nlab = 2 * pt_net_label_count(full);
    float *x = malloc((size_t)in * sizeof *x);
    int32_t *labels = malloc((size_t)nlab * sizeof *labels);
    make_data(spec, x, labels, in, nlab);
    double loss_full;
    REQUIRE(pt_net_forward(full, 0, NULL, x, 2, labels, NULL, &loss_full) == 0);
    for (int k = 1; k < nl; k++) {
        pt_net *a = NULL, *b = NULL;
        cfg.first = 0;
        cfg.last = k;
        REQUIRE(pt_net_create(spec, &cfg, &a, NULL) == 0);
        cfg.first = k;
        cfg.last = nl;
        REQUIRE(pt_net_create(spec, &cfg, &b, NULL) == 0);
        int64_t off;
        REQUIRE(pt_net_layer_range(full, k, &off, NULL) == 0);
        CHECK(memcmp(pt_net_params(b), pt_net_params(full) + off,
                     (size_t)pt_net_param_count(b) * sizeof(float)) == 0);
        const float *mid;
        double loss;
        REQUIRE(pt_net_forward(a, 0, NULL, x, 2, NULL, &mid, NULL) == 0);
        REQUIRE(pt_net_forward(b, 0, NULL, mid, 2, labels, NULL, &loss) == 0);
        CHECK_MSG(loss == loss_full, "cut %d: loss %.9g vs %.9g", k, loss, loss_full);
        pt_net_destroy(&a);
        pt_net_destroy(&b);
    }
    free(x);
    free(labels);
    pt_net_destroy(&full);
    pt_model_spec_free(&spec);
}

PT_TEST_MAIN({"fmnist_mlp", test_fmnist_mlp}, {"fmnist_mlp_deep", test_fmnist_mlp_deep},
             {"gpt_tiny", test_gpt_tiny}, {"gpt_tiny_splits", test_gpt_tiny_splits})

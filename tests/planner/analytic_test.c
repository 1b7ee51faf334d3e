/* Analytic profiles: hand-computed figures for a small MLP and an embedding,
 * monotone in the batch, faster devices give smaller times, bad arguments
 * refused; and the shipped device descriptions load. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/analytic.h"
#include "protocol/device.h"
#include "protocol/model.h"
#include "protocol/profile.h"
#include "tests/test.h"

#define REL_TOL 1e-12

/* 784 -> linear 100 -> relu -> linear 10 -> softmax_xent 10, built by hand. */
static pt_layer_spec mlp_layers[4];
static pt_model_spec mlp;

static void build_mlp(void)
{
    memset(mlp_layers, 0, sizeof mlp_layers);
    memset(&mlp, 0, sizeof mlp);
    mlp_layers[0] = (pt_layer_spec){.kind = PT_LAYER_LINEAR, .name = "fc1", .out = 100, .bias = 1};
    mlp_layers[1] = (pt_layer_spec){.kind = PT_LAYER_RELU, .name = "relu1"};
    mlp_layers[2] = (pt_layer_spec){.kind = PT_LAYER_LINEAR, .name = "fc2", .out = 10, .bias = 1};
    mlp_layers[3] = (pt_layer_spec){.kind = PT_LAYER_SOFTMAX_XENT, .name = "loss", .classes = 10};
    snprintf(mlp.name, sizeof mlp.name, "tiny-mlp");
    mlp.input_kind = PT_INPUT_FLOAT;
    mlp.input_rank = 1;
    mlp.input[0] = 784;
    mlp.layer_count = 4;
    mlp.layers = mlp_layers;
}

static pt_device_desc test_device(double flops, double bw)
{
    pt_device_desc d = {0};
    snprintf(d.name, sizeof d.name, "test-dev");
    d.peak_flops = flops;
    d.mem_bandwidth = bw;
    d.memory_bytes = 1LL << 30;
    return d;
}

#define CHECK_REL(a, b) CHECK_NEAR((a), (b), REL_TOL *fabs(b))

/* Device 1e12 FLOP/s at efficiency 0.5 (5e11 reached), 1e11 B/s; batch 32.
 *  fc1:  FLOPs 2*784*100*32 = 5,017,600 -> 1.00352e-5 s; bytes
 *        ((784+100)*32 + 78,500 params)*4 = 427,152 -> 4.27152e-6 s: compute-bound,
 *        fwd 0.0100352 ms, bwd 0.0200704 ms.
 *  relu: FLOPs 100*32 = 3,200 -> 6.4e-9 s; bytes (100+100)*32*4 = 25,600 ->
 *        2.56e-7 s: memory-bound, fwd 0.000256 ms, bwd 0.000512 ms.
 *  fc2:  FLOPs 2*100*10*32 = 64,000 -> 1.28e-7 s; bytes ((100+10)*32 + 1,010)*4
 *        = 18,120 -> 1.812e-7 s: fwd 0.0001812 ms, bwd 0.0003624 ms.
 *  loss: FLOPs 5*10*32 = 1,600 -> 3.2e-9 s; bytes (10+10)*32*4 = 2,560 ->
 *        2.56e-8 s: fwd 0.0000256 ms, bwd 0.0000512 ms. */
static void test_mlp_by_hand(void)
{
    build_mlp();
    pt_device_desc dev = test_device(1e12, 1e11);
    pt_profile *p = NULL;
    pt_error err = {0};
    int rc = pt_analytic_profile(&mlp, &dev, 32, NULL, &p, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    REQUIRE(rc == 0);
    REQUIRE(p->layer_count == 4);
    const double fwd[] = {0.0100352, 0.000256, 0.0001812, 0.0000256};
    const double bwd[] = {0.0200704, 0.000512, 0.0003624, 0.0000512};
    const int64_t act[] = {12800, 12800, 1280, 1280};
    const int64_t param[] = {314000, 0, 4040, 0};
    const char *names[] = {"fc1", "relu1", "fc2", "loss"};
    for (int i = 0; i < 4; i++) {
        CHECK_REL(p->layers[i].fwd_ms, fwd[i]);
        CHECK_REL(p->layers[i].bwd_ms, bwd[i]);
        CHECK(p->layers[i].recompute_ms == p->layers[i].fwd_ms);
        CHECK(p->layers[i].act_bytes == act[i]);
        CHECK(p->layers[i].param_bytes == param[i]);
        CHECK(!strcmp(p->layers[i].name, names[i]));
    }
    CHECK(p->input_bytes == 784 * 4 * 32);
    CHECK(p->microbatch == 32);
    CHECK(!strcmp(p->model, "tiny-mlp"));
    CHECK(!strcmp(p->device, "test-dev"));
    CHECK(!strcmp(p->source, "analytic"));
    pt_profile_free(&p);

    /* Efficiency 0.25 doubles the compute-bound fc1 and leaves relu alone. */
    pt_analytic_options opt = {.efficiency = 0.25};
    REQUIRE(pt_analytic_profile(&mlp, &dev, 32, &opt, &p, &err) == 0);
    CHECK_REL(p->layers[0].fwd_ms, 2 * 0.0100352);
    CHECK_REL(p->layers[1].fwd_ms, 0.000256);
    pt_profile_free(&p);
}

/* tokens [8] -> embedding(vocab 1000, dim 16, positional) at batch 2 on the
 * same device: params 1000*16 + 8*16 = 16,128, output 8*16 = 128 floats per
 * sample; it reads only the 256 rows*dims it gathers. FLOPs 128*2 = 256 ->
 * 5.12e-10 s; bytes ((8 + 128)*2 + 256)*4 = 2,112 -> 2.112e-8 s. */
static void test_embedding_by_hand(void)
{
    pt_layer_spec layers[3] = {
        {.kind = PT_LAYER_EMBEDDING, .name = "emb", .vocab = 1000, .dim = 16, .positional = 1},
        {.kind = PT_LAYER_LINEAR, .name = "head", .out = 1000, .bias = 1},
        {.kind = PT_LAYER_SOFTMAX_XENT, .name = "loss", .classes = 1000},
    };
    pt_model_spec spec = {.name = "tiny-lm",
                          .input_kind = PT_INPUT_TOKENS,
                          .input_rank = 1,
                          .input = {8},
                          .layer_count = 3,
                          .layers = layers};
    pt_device_desc dev = test_device(1e12, 1e11);
    pt_profile *p = NULL;
    pt_error err = {0};
    int rc = pt_analytic_profile(&spec, &dev, 2, NULL, &p, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    REQUIRE(rc == 0);
    CHECK_REL(p->layers[0].fwd_ms, 2.112e-5);
    CHECK_REL(p->layers[0].bwd_ms, 4.224e-5);
    CHECK(p->layers[0].param_bytes == 16128 * 4);
    CHECK(p->layers[0].act_bytes == 128 * 4 * 2);
    CHECK(p->input_bytes == 8 * 4 * 2);
    pt_profile_free(&p);
}

static void test_monotone_in_batch(void)
{
    build_mlp();
    pt_device_desc dev = test_device(1e12, 1e11);
    pt_profile *prev = NULL;
    pt_error err = {0};
    for (int b = 1; b <= 256; b *= 2) {
        pt_profile *p = NULL;
        REQUIRE(pt_analytic_profile(&mlp, &dev, b, NULL, &p, &err) == 0);
        if (prev)
            for (int i = 0; i < p->layer_count; i++) {
                CHECK(p->layers[i].fwd_ms > prev->layers[i].fwd_ms);
                CHECK(p->layers[i].bwd_ms > prev->layers[i].bwd_ms);
                CHECK(p->layers[i].act_bytes == 2 * prev->layers[i].act_bytes);
                CHECK(p->layers[i].param_bytes == prev->layers[i].param_bytes);
            }
        pt_profile_free(&prev);
        prev = p;
    }
    pt_profile_free(&prev);
}

static void test_faster_device(void)
{
    build_mlp();
    pt_device_desc v100, h100;
    pt_error err = {0};
    REQUIRE(pt_device_find("v100-32gb", &v100, &err) == 0);
    REQUIRE(pt_device_find("h100-80gb", &h100, &err) == 0);
    REQUIRE(h100.peak_flops > v100.peak_flops && h100.mem_bandwidth > v100.mem_bandwidth);
    for (int b = 1; b <= 1024; b *= 4) {
        pt_profile *slow = NULL, *fast = NULL;
        REQUIRE(pt_analytic_profile(&mlp, &v100, b, NULL, &slow, &err) == 0);
        REQUIRE(pt_analytic_profile(&mlp, &h100, b, NULL, &fast, &err) == 0);
        for (int i = 0; i < slow->layer_count; i++) {
            CHECK(fast->layers[i].fwd_ms < slow->layers[i].fwd_ms);
            CHECK(fast->layers[i].bwd_ms < slow->layers[i].bwd_ms);
            CHECK(fast->layers[i].act_bytes == slow->layers[i].act_bytes);
        }
        pt_profile_free(&slow);
        pt_profile_free(&fast);
    }
}

static void test_bad_arguments(void)
{
    build_mlp();
    pt_device_desc dev = test_device(1e12, 1e11);
    pt_profile *p = NULL;
    pt_error err = {0};
    CHECK(pt_analytic_profile(&mlp, &dev, 0, NULL, &p, &err) == PT_ERANGE && !p);
    CHECK_STR_CONTAINS(err.msg, "batch");
    pt_analytic_options opt = {.efficiency = 1.5};
    CHECK(pt_analytic_profile(&mlp, &dev, 1, &opt, &p, &err) == PT_ERANGE && !p);
    CHECK_STR_CONTAINS(err.msg, "efficiency");
    CHECK(pt_analytic_profile(&mlp, NULL, 1, NULL, &p, &err) == PT_EINVAL && !p);
    CHECK_STR_CONTAINS(err.msg, "device");
    pt_device_desc slow = test_device(0, 1e11);
    CHECK(pt_analytic_profile(&mlp, &slow, 1, NULL, &p, &err) == PT_EINVAL && !p);
    CHECK_STR_CONTAINS(err.msg, "peak_flops");

    /* 2^30 floats per sample at batch 2^22 is 2^54 bytes: past what a
     * profile holds. */
    pt_layer_spec layers[2] = {{.kind = PT_LAYER_LINEAR, .name = "wide", .out = 1 << 10},
                               {.kind = PT_LAYER_SOFTMAX_XENT, .name = "loss", .classes = 1 << 10}};
    pt_model_spec big = {
        .name = "big", .input_rank = 2, .input = {1 << 20, 8}, .layer_count = 2, .layers = layers};
    CHECK(pt_analytic_profile(&big, &dev, 1 << 22, NULL, &p, &err) == PT_ERANGE && !p);
    CHECK_STR_CONTAINS(err.msg, "2^53");
}

/* Every shipped description parses, is named after its file and prints back
 * to an equal record. */
static void test_shipped_devices(void)
{
    const char *dir = pt_test_path("devices");
    DIR *d = opendir(dir);
    REQUIRE(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n - 5), e->d_name);
        pt_device_desc dev, back;
        pt_error err = {0};
        int rc = pt_device_find(name, &dev, &err);
        CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
        if (rc < 0)
            continue;
        CHECK(!strcmp(dev.name, name));
        CHECK(dev.reference[0] != '\0');
        char *json = pt_device_to_json(&dev);
        REQUIRE(json);
        CHECK(pt_device_parse(json, "back", &back, &err) == 0);
        CHECK(!memcmp(&dev, &back, sizeof dev));
        free(json);
        count++;
    }
    closedir(d);
    CHECK(count >= 5);
    const char *required[] = {"cpu-local", "v100-32gb", "a100-40gb", "h100-80gb", "titan-x"};
    for (int i = 0; i < 5; i++) {
        pt_device_desc dev;
        pt_error err = {0};
        CHECK_MSG(pt_device_find(required[i], &dev, &err) == 0, "%s", err.msg);
    }
}

static void test_bad_devices(void)
{
    static const struct {
        const char *json, *expect;
    } cases[] = {
        {"{\"v\":1,\"name\":\"x\",\"peak_flops\":1e12,\"mem_bandwidth\":1e11}", "memory_bytes"},
        {"{\"v\":1,\"name\":\"x\",\"peak_flops\":0,\"mem_bandwidth\":1e11,\"memory_bytes\":1}",
         "peak_flops"},
        {"{\"v\":1,\"name\":\"x\",\"peak_flops\":1e12,\"mem_bandwidth\":-5,\"memory_bytes\":1}",
         "mem_bandwidth"},
        {"{\"v\":1,\"name\":\"x\",\"peak_flops\":1e12,\"mem_bandwidth\":1e11,\"memory_bytes\":0}",
         "memory_bytes"},
        {"{\"v\":1,\"peak_flops\":1e12,\"mem_bandwidth\":1e11,\"memory_bytes\":1}", "name"},
        {"{\"v\":1,\"name\":\"x\",\"peak_flops\":1e12,\"mem_bandwidth\":1e11,\"memory_bytes\":1,"
         "\"tflops\":3}",
         "tflops"},
        {"{\"v\":1,\"name\":\"x\",\"peak_flops\":", "dev.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pt_device_desc d;
        pt_error err = {0};
        CHECK_MSG(pt_device_parse(cases[i].json, "dev.json", &d, &err) < 0, "case %zu", i);
        CHECK_STR_CONTAINS(err.msg, cases[i].expect);
        CHECK_STR_CONTAINS(err.msg, "dev.json");
    }
    pt_device_desc d;
    pt_error err = {0};
    CHECK(pt_device_find("no-such-device", &d, &err) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "no-such-device");
}

PT_TEST_MAIN({"mlp_by_hand", test_mlp_by_hand}, {"embedding_by_hand", test_embedding_by_hand},
             {"monotone_in_batch", test_monotone_in_batch}, {"faster_device", test_faster_device},
             {"bad_arguments", test_bad_arguments}, {"shipped_devices", test_shipped_devices},
             {"bad_devices", test_bad_devices})

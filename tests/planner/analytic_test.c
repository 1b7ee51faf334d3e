/* Analytic profiles: hand-computed figures for a small MLP and an embedding,
 * monotone in the batch, faster devices give smaller times, bad arguments
 * refused; and the shipped device descriptions load. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/analytic.h"
#include "planner/cost.h"
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

/* gpt-1.3b (s 1024, h 2048, a 16, 24 layers) in bf16 on an H100 at
 * micro-batch b = 2: each transformer layer (block<i>.attn, block<i>.mlp)
 * keeps sbh(34 + 5as/h) bytes, Korthikanti et al.'s figure:
 *   sbh = 1024 * 2 * 2048 = 4,194,304; 34 sbh = 142,606,336;
 *   5as^2 b = 5 * 16 * 1024^2 * 2 = 167,772,160; total 310,378,496,
 * and 34 sbh with selective recomputation; with fused attention ("fused":
 * true, nothing recomputed but inside the attention kernel) 34 sbh plus the
 * softmax statistics, fp32 log-sum-exp and max per row and head:
 * 8 asb = 262,144. The cost model's activation figure for the 24 layers is
 * 24 times that, at any rows. */
static void test_korthikanti_gpt13b(void)
{
    const int64_t per_layer = 310378496, selective = 142606336, fused = selective + 262144;
    CHECK(pt_analytic_korthikanti_bytes(1024, 2, 2048, 16, PT_ANALYTIC_RECOMPUTE_NONE) ==
          per_layer);
    CHECK(pt_analytic_korthikanti_bytes(1024, 2, 2048, 16, PT_ANALYTIC_RECOMPUTE_SELECTIVE) ==
          selective);
    CHECK(pt_analytic_korthikanti_bytes(1024, 2, 2048, 16, PT_ANALYTIC_RECOMPUTE_FULL) ==
          2 * 4194304);
    pt_model_spec *spec = NULL;
    pt_device_desc h100;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("gpt-1.3b", &spec, &err) == 0);
    REQUIRE(pt_device_find("h100-80gb", &h100, &err) == 0);
    pt_link link = {1e11, 1e-6};
    pt_topology *topo = pt_topology_uniform(1, 1, 80LL << 30, link, link);
    REQUIRE(topo);
    for (int mode = 0; mode <= 2; mode++) {
        int sel = mode == 1;
        for (int i = 0; mode == 2 && i < spec->layer_count; i++)
            for (int j = 0; j < spec->layers[i].body_count; j++)
                spec->layers[i].body[j].fused = spec->layers[i].body[j].kind == PT_LAYER_ATTENTION;
        pt_analytic_options opt = {.precision = PT_PRECISION_BF16, .selective = sel};
        pt_profile *p = NULL;
        REQUIRE(pt_analytic_profile(spec, &h100, 2, &opt, &p, &err) == 0);
        CHECK(p->precision == PT_PRECISION_BF16);
        int64_t want = mode == 2 ? fused : sel ? selective : per_layer;
        int pairs = 0;
        for (int i = 1; i + 1 < p->layer_count; i += 2) {
            if (strstr(p->layers[i].name, ".attn") == NULL)
                break;
            const pt_profile_layer *a = &p->layers[i], *m = &p->layers[i + 1];
            int64_t kept = a->act_bytes + a->saved_bytes + m->act_bytes + m->saved_bytes;
            CHECK_MSG(kept == want, "%s: %lld bytes, Korthikanti %lld", a->name, (long long)kept,
                      (long long)want);
            pairs++;
        }
        CHECK(pairs == 24);
        pt_cost *c = NULL;
        REQUIRE(pt_cost_new(p, topo, &c, &err) == 0);
        for (int rows = 1; rows <= 8; rows *= 2)
            CHECK(pt_cost_act_bytes(c, 1, 49, rows) + pt_cost_saved_bytes(c, 1, 49, rows) ==
                  24 * want * rows / 2);
        pt_cost_free(&c);
        pt_profile_free(&p);
    }
    pt_topology_free(&topo);
    pt_model_spec_free(&spec);
}

/* Static memory per parameter of a whole-model stage: weights, gradients,
 * optimizer state. Adam: 16 bytes in fp32 (4 + 4 + 8) and in bf16 (2 + 2 +
 * 12: fp32 master weights and moments); sgd with momentum 12 in both (4 + 4
 * + 4; 2 + 2 + 4 + 4). */
static void test_static_bytes_per_parameter(void)
{
    pt_model_spec *spec = NULL;
    pt_device_desc h100;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("gpt-1.3b", &spec, &err) == 0);
    REQUIRE(pt_device_find("h100-80gb", &h100, &err) == 0);
    pt_layer_shape *shapes = calloc((size_t)spec->layer_count, sizeof *shapes);
    REQUIRE(shapes && pt_model_spec_shapes(spec, shapes, &err) == 0);
    int64_t params = 0;
    for (int i = 0; i < spec->layer_count; i++)
        params += shapes[i].params;
    free(shapes);
    CHECK(params > 1400000000LL && params < 1450000000LL);
    pt_link link = {1e11, 1e-6};
    pt_topology *topo = pt_topology_uniform(1, 1, 80LL << 30, link, link);
    const struct {
        int precision;
        pt_optim_kind optim;
        int64_t bytes, weight;
    } cases[] = {{PT_PRECISION_FP32, PT_OPTIM_ADAM, 16, 4},
                 {PT_PRECISION_BF16, PT_OPTIM_ADAM, 16, 2},
                 {PT_PRECISION_FP8, PT_OPTIM_ADAM, 16, 2},
                 {PT_PRECISION_FP32, PT_OPTIM_SGD, 12, 4},
                 {PT_PRECISION_BF16, PT_OPTIM_SGD, 12, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pt_analytic_options opt = {.precision = cases[k].precision};
        pt_profile *p = NULL;
        pt_cost *c = NULL;
        REQUIRE(pt_analytic_profile(spec, &h100, 1, &opt, &p, &err) == 0);
        REQUIRE(pt_cost_new(p, topo, &c, &err) == 0);
        pt_mem_query q = {.kind = PT_SCHED_DAPPLE,
                          .policy = 'A',
                          .optim = cases[k].optim,
                          .stage_count = 1,
                          .first = 0,
                          .last = p->layer_count,
                          .rows = 1,
                          .microbatches = 1};
        pt_mem m;
        pt_cost_stage_memory(c, &q, &m);
        CHECK(m.bytes[PT_MEM_WEIGHTS] == cases[k].weight * params);
        CHECK_MSG(
            m.bytes[PT_MEM_WEIGHTS] + m.bytes[PT_MEM_GRADS] + m.bytes[PT_MEM_OPTIM] ==
                cases[k].bytes * params,
            "case %zu: %lld bytes for %lld parameters", k,
            (long long)(m.bytes[PT_MEM_WEIGHTS] + m.bytes[PT_MEM_GRADS] + m.bytes[PT_MEM_OPTIM]),
            (long long)params);
        pt_cost_free(&c);
        pt_profile_free(&p);
    }
    pt_topology_free(&topo);
    pt_model_spec_free(&spec);
}

/* bf16 on tensor cores beats fp32 on a compute-bound layer by the peaks'
 * ratio and halves the activation and weight bytes; a device without a
 * precision's peak, and selective recomputation in the runtime's layout,
 * are refused with the reason. */
static void test_precisions(void)
{
    pt_model_spec *spec = NULL;
    pt_device_desc h100, titan;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("gpt-1.3b", &spec, &err) == 0);
    REQUIRE(pt_device_find("h100-80gb", &h100, &err) == 0);
    REQUIRE(pt_device_find("titan-x", &titan, &err) == 0);
    pt_analytic_options bf = {.precision = PT_PRECISION_BF16};
    pt_profile *p32 = NULL, *p16 = NULL;
    REQUIRE(pt_analytic_profile(spec, &h100, 4, NULL, &p32, &err) == 0);
    REQUIRE(pt_analytic_profile(spec, &h100, 4, &bf, &p16, &err) == 0);
    const pt_profile_layer *a = &p32->layers[2], *b = &p16->layers[2]; /* block0.mlp */
    double launch = b->kernels * h100.launch_us / 1000;
    CHECK_NEAR((a->fwd_ms - launch) / (b->fwd_ms - launch), 989.4 / 67, 1e-9);
    CHECK(a->act_bytes == 2 * b->act_bytes && a->param_bytes == 2 * b->param_bytes);
    CHECK(p16->roofline.has && p16->roofline.peak_flops == 989.4e12);
    CHECK(p32->roofline.peak_flops == 67e12 && p32->precision == PT_PRECISION_FP32);
    pt_profile *p = NULL;
    CHECK(pt_analytic_profile(spec, &titan, 1, &bf, &p, &err) == PT_EINVAL && !p);
    CHECK_STR_CONTAINS(err.msg, "titan-x: peaks.bf16");
    pt_analytic_options sel = {.selective = 1};
    CHECK(pt_analytic_profile(spec, &h100, 1, &sel, &p, &err) == PT_EINVAL && !p);
    CHECK_STR_CONTAINS(err.msg, "selective");
    pt_profile_free(&p32);
    pt_profile_free(&p16);
    pt_model_spec_free(&spec);
}

PT_TEST_MAIN({"mlp_by_hand", test_mlp_by_hand}, {"embedding_by_hand", test_embedding_by_hand},
             {"monotone_in_batch", test_monotone_in_batch}, {"faster_device", test_faster_device},
             {"bad_arguments", test_bad_arguments}, {"shipped_devices", test_shipped_devices},
             {"bad_devices", test_bad_devices}, {"korthikanti_gpt13b", test_korthikanti_gpt13b},
             {"static_bytes_per_parameter", test_static_bytes_per_parameter},
             {"precisions", test_precisions})

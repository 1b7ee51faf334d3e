/* Device memory: an arena on the CUDA backend accounts bytes by category
 * exactly as on the CPU (the same net and optimizer give the same current,
 * peak and reserved figures per category, and a steady second run allocates
 * nothing), memory really is on the device (the driver's free figure drops
 * by at least what the arena reserved), a limit is enforced, and an
 * allocation larger than the GPU fails cleanly with NULL. */
#include <string.h>

#include "protocol/model.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "tests/gpu/gpu_common.h"

static const char *model =
    "{\"v\":1,\"name\":\"mem\",\"input\":{\"kind\":\"tokens\",\"shape\":[64]},\"layers\":["
    "{\"type\":\"embedding\",\"vocab\":1000,\"dim\":256,\"positional\":true},"
    "{\"type\":\"residual\",\"body\":[{\"type\":\"layernorm\"},{\"type\":\"attention\","
    "\"heads\":4}]},{\"type\":\"linear\",\"out\":1000},{\"type\":\"softmax_xent\","
    "\"classes\":1000}]}";

static void stats_of(const pt_model_spec *spec, const pt_backend *be, pt_mem_stats *st,
                     int64_t *allocs_after_second)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.max_batch = 8;
    cfg.max_slots = 2;
    cfg.backend = be;
    pt_net *net = NULL;
    pt_error err = {0};
    memset(st, 0, sizeof *st);
    REQUIRE(pt_net_create(spec, &cfg, &net, &err) == 0);
    pt_optim_spec os = pt_optim_default(PT_OPTIM_ADAM);
    pt_optim *o = NULL;
    REQUIRE(pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &o, &err) == 0);
    int64_t in = pt_net_in_elems(net) * 8;
    float *x = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_COMM, in);
    float *h = calloc((size_t)in, sizeof *h);
    int32_t *labels = calloc((size_t)(8 * pt_net_label_count(net)), sizeof *labels);
    pt_net_backend(net)->upload(pt_net_backend(net), x, h, (size_t)in * sizeof *h);
    for (int run = 0; run < 2; run++) {
        for (int s = 0; s < 2; s++)
            CHECK(pt_net_forward(net, s, NULL, x, 8, labels, NULL, NULL) == 0);
        for (int s = 1; s >= 0; s--)
            CHECK(pt_net_backward(net, s, NULL, NULL, NULL, NULL) == 0);
        pt_optim_step(o, pt_net_params(net), pt_net_grads(net));
        if (run == 0)
            pt_arena_stats(pt_net_arena(net), st);
    }
    pt_mem_stats again;
    pt_arena_stats(pt_net_arena(net), &again);
    *allocs_after_second = again.backend_allocs;
    free(h);
    free(labels);
    pt_optim_destroy(&o);
    pt_net_destroy(&net);
}

static void test_same_accounting(void)
{
    pt_model_spec *spec = NULL;
    REQUIRE(pt_model_spec_parse(model, "test", &spec, NULL) == 0);
    const pt_backend *gpu = gpu_open(PT_CUDA_FP32);
    REQUIRE(gpu);
    pt_mem_stats c, g;
    int64_t ca = 0, ga = 0;
    stats_of(spec, NULL, &c, &ca);
    stats_of(spec, gpu, &g, &ga);
    int same = 1;
    for (int k = 0; k < PT_MEM_KIND_COUNT; k++) {
        CHECK_MSG(c.current[k] == g.current[k] && c.peak[k] == g.peak[k],
                  "%s: cpu %lld/%lld, gpu %lld/%lld", pt_mem_kind_name(k), (long long)c.current[k],
                  (long long)c.peak[k], (long long)g.current[k], (long long)g.peak[k]);
        same &= c.current[k] == g.current[k] && c.peak[k] == g.peak[k];
    }
    CHECK(c.reserved == g.reserved && c.total_peak == g.total_peak);
    CHECK(c.peak[PT_MEM_OPTIM] == 2 * c.peak[PT_MEM_WEIGHTS]); /* Adam: m and v */
    CHECK_MSG(ga == g.backend_allocs, "second run allocated %lld more blocks",
              (long long)(ga - g.backend_allocs));
    printf(GPU_TAG " memory accounting by category equal to the CPU's (%lld bytes reserved) %s\n",
           (long long)g.reserved, same ? "PASS" : "FAIL");
    gpu_close(&gpu);
    pt_model_spec_free(&spec);
}

static void test_driver_figure(void)
{
    const pt_backend *gpu = gpu_open(PT_CUDA_FP32);
    REQUIRE(gpu);
    int64_t free0 = 0, total = 0, free1 = 0;
    (void)total;
#ifndef PT_GPU_DRY_RUN
    REQUIRE(pt_backend_cuda_mem_info(gpu, &free0, &total) == 0);
    CHECK(total > 0 && free0 <= total);
#endif
    pt_arena *a = NULL;
    REQUIRE(pt_arena_create(gpu, &a) == 0);
    const int64_t chunk = 256ll << 20;
    void *p = pt_arena_alloc(a, PT_MEM_WEIGHTS, (size_t)chunk);
    void *q = pt_arena_alloc(a, PT_MEM_ACTS, (size_t)chunk);
    CHECK(p && q);
    if (p)
        gpu->fill(gpu, chunk / 4, 1.0f, p); /* touch it */
    gpu->synchronize(gpu);
#ifndef PT_GPU_DRY_RUN
    REQUIRE(pt_backend_cuda_mem_info(gpu, &free1, NULL) == 0);
    CHECK_MSG(free0 - free1 >= 2 * chunk, "the driver shows %lld bytes less free, want >= %lld",
              (long long)(free0 - free1), (long long)(2 * chunk));
    /* more than the whole GPU: NULL, nothing counted */
    pt_mem_stats before, after;
    pt_arena_stats(a, &before);
    CHECK(pt_arena_alloc(a, PT_MEM_ACTS, (size_t)(total + chunk)) == NULL);
    pt_arena_stats(a, &after);
    CHECK(after.total_current == before.total_current && after.reserved == before.reserved);
#endif
    pt_arena_set_limit(a, 3 * chunk);
    CHECK(pt_arena_alloc(a, PT_MEM_GRADS, (size_t)(2 * chunk)) == NULL);
    pt_mem_stats st;
    pt_arena_stats(a, &st);
    CHECK(st.current[PT_MEM_WEIGHTS] == chunk && st.current[PT_MEM_ACTS] == chunk);
    printf(GPU_TAG " memory: driver free %lld -> %lld bytes for %lld reserved %s\n",
           (long long)free0, (long long)free1, (long long)st.reserved,
           pt_test_failures_ ? "FAIL" : "PASS");
    pt_arena_destroy(&a);
    gpu_close(&gpu);
}

int main(int argc, char **argv)
{
    gpu_require("memory_gputest");
    static const struct pt_test_case cases[] = {{"same_accounting", test_same_accounting},
                                                {"driver_figure", test_driver_figure}};
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (argc > 1 && !strstr(cases[i].name, argv[1]))
            continue;
        int before = pt_test_failures_;
        cases[i].fn();
        int ok = pt_test_failures_ == before;
        printf("%s %s\n", ok ? "ok  " : "FAIL", cases[i].name);
        failed += !ok;
    }
    return failed || pt_cuda_error_count() ? 1 : 0;
}

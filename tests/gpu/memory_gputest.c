/* Device memory, checked against the driver (cudaMemGetInfo), which knows
 * nothing of pipetop's bookkeeping: building a net with Adam and running two
 * steps takes at least what the arena says it reserved from the driver's free
 * memory (the memory really is on the device) and not much more (the 2 MiB
 * allocation granularity, cuBLAS's workspace); a third step takes nothing
 * (no allocation in steady state, by the driver's count); 512 MiB touched
 * through the arena show in the driver's figure. Beside that, the GPU arena
 * accounts bytes by category as the CPU's does, a limit is enforced, and an
 * allocation larger than the GPU fails cleanly with NULL, counted and
 * reported as a CUDA error (with its cause). In the dry run the stand-in of
 * tests/gpu/cuda_standin.h plays the device and its driver's count. */
#include <string.h>

#include "protocol/model.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "tests/gpu/cuda_standin.h"
#include "tests/gpu/gpu_common.h"

static const char *model =
    "{\"v\":1,\"name\":\"mem\",\"input\":{\"kind\":\"tokens\",\"shape\":[64]},\"layers\":["
    "{\"type\":\"embedding\",\"vocab\":1000,\"dim\":256,\"positional\":true},"
    "{\"type\":\"residual\",\"body\":[{\"type\":\"layernorm\"},{\"type\":\"attention\","
    "\"heads\":4}]},{\"type\":\"linear\",\"out\":1000},{\"type\":\"softmax_xent\","
    "\"classes\":1000}]}";

/* The GPU; in the dry run the stand-in of tests/gpu/cuda_standin.h, whose
 * "driver" counts what its backend hands out. */
static const pt_backend *mem_open(void)
{
#ifdef PT_GPU_DRY_RUN
    return sti_install();
#else
    return gpu_open(PT_CUDA_FP32);
#endif
}

/* Free device memory by the driver, or -1 when it cannot say. */
static int64_t driver_free(const pt_backend *be)
{
    int64_t f = -1;
    if (pt_backend_cuda_mem_info(be, &f, NULL) < 0)
        return -1;
    return f;
}

/* A net with Adam on be, two steps: its arena's figures after the first,
 * and the driver's free memory before it was built, after two steps and
 * after a third. */
typedef struct mem_run {
    pt_mem_stats st;
    int64_t allocs_after_third;
    int64_t free0, free2, free3;
} mem_run;

static void run_steps(pt_net *net, pt_optim *o, const float *x, const int32_t *labels, int n)
{
    for (int run = 0; run < n; run++) {
        for (int s = 0; s < 2; s++)
            CHECK(pt_net_forward(net, s, NULL, x, 8, labels, NULL, NULL) == 0);
        for (int s = 1; s >= 0; s--)
            CHECK(pt_net_backward(net, s, NULL, NULL, NULL, NULL) == 0);
        pt_optim_step(o, pt_net_params(net), pt_net_grads(net));
    }
    pt_net_backend(net)->synchronize(pt_net_backend(net));
}

static void mem_of(const pt_model_spec *spec, const pt_backend *be, mem_run *m)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.max_batch = 8;
    cfg.max_slots = 2;
    cfg.backend = be;
    pt_net *net = NULL;
    pt_error err = {0};
    memset(m, 0, sizeof *m);
    m->free0 = be ? driver_free(be) : -1;
    REQUIRE(pt_net_create(spec, &cfg, &net, &err) == 0);
    pt_optim_spec os = pt_optim_default(PT_OPTIM_ADAM);
    pt_optim *o = NULL;
    REQUIRE(pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &o, &err) == 0);
    int64_t in = pt_net_in_elems(net) * 8;
    float *x = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_COMM, in);
    float *h = calloc((size_t)in, sizeof *h);
    int32_t *labels = calloc((size_t)(8 * pt_net_label_count(net)), sizeof *labels);
    pt_net_backend(net)->upload(pt_net_backend(net), x, h, (size_t)in * sizeof *h);
    run_steps(net, o, x, labels, 1);
    pt_arena_stats(pt_net_arena(net), &m->st);
    run_steps(net, o, x, labels, 1);
    m->free2 = be ? driver_free(be) : -1;
    run_steps(net, o, x, labels, 1);
    m->free3 = be ? driver_free(be) : -1;
    pt_mem_stats again;
    pt_arena_stats(pt_net_arena(net), &again);
    m->allocs_after_third = again.backend_allocs;
    free(h);
    free(labels);
    pt_optim_destroy(&o);
    pt_net_destroy(&net);
}

#define SLACK_BYTES (256ll << 20) /* cuBLAS workspace and context pieces */

static int g_deliberate; /* CUDA errors the test caused on purpose */

static void test_driver_accounting(void)
{
    pt_model_spec *spec = NULL;
    REQUIRE(pt_model_spec_parse(model, "test", &spec, NULL) == 0);
    const pt_backend *gpu = mem_open();
    REQUIRE(gpu);
    mem_run c, g;
    mem_of(spec, NULL, &c);
    mem_of(spec, gpu, &g);
    int before = pt_test_failures_;
    for (int k = 0; k < PT_MEM_KIND_COUNT; k++)
        CHECK_MSG(c.st.current[k] == g.st.current[k] && c.st.peak[k] == g.st.peak[k],
                  "%s: cpu %lld/%lld, gpu %lld/%lld", pt_mem_kind_name(k),
                  (long long)c.st.current[k], (long long)c.st.peak[k], (long long)g.st.current[k],
                  (long long)g.st.peak[k]);
    CHECK(c.st.reserved == g.st.reserved && c.st.total_peak == g.st.total_peak);
    CHECK(c.st.peak[PT_MEM_OPTIM] == 2 * c.st.peak[PT_MEM_WEIGHTS]); /* Adam: m and v */
    CHECK_MSG(g.allocs_after_third == g.st.backend_allocs, "later steps allocated %lld blocks",
              (long long)(g.allocs_after_third - g.st.backend_allocs));
    int64_t reserved = g.st.reserved, drop = g.free0 - g.free2;
    int64_t most = reserved + g.st.backend_allocs * (2ll << 20) + SLACK_BYTES;
    CHECK_MSG(g.free0 >= 0, "no driver figure");
    CHECK_MSG(drop >= reserved && drop <= most,
              "the driver's free memory fell by %lld bytes for %lld reserved (at most %lld)",
              (long long)drop, (long long)reserved, (long long)most);
    CHECK_MSG(g.free3 == g.free2, "the third step took %lld bytes from the driver",
              (long long)(g.free2 - g.free3));
    printf(GPU_TAG " memory driver free fell %lld bytes for %lld reserved (at most %lld), "
                   "third step %lld more %s\n",
           (long long)drop, (long long)reserved, (long long)most, (long long)(g.free2 - g.free3),
           pt_test_failures_ == before ? "PASS" : "FAIL");
    pt_backend_cuda_destroy(&gpu);
    pt_model_spec_free(&spec);
}

static void test_driver_figure(void)
{
    const pt_backend *gpu = mem_open();
    REQUIRE(gpu);
    int64_t free0 = 0, total = 0, free1 = 0;
    REQUIRE(pt_backend_cuda_mem_info(gpu, &free0, &total) == 0);
    CHECK(total > 0 && free0 <= total);
    pt_arena *a = NULL;
    REQUIRE(pt_arena_create(gpu, &a) == 0);
    const int64_t chunk = 256ll << 20;
    void *p = pt_arena_alloc(a, PT_MEM_WEIGHTS, (size_t)chunk);
    void *q = pt_arena_alloc(a, PT_MEM_ACTS, (size_t)chunk);
    CHECK(p && q);
    if (p)
        gpu->fill(gpu, chunk / 4, 1.0f, p); /* touch it */
    gpu->synchronize(gpu);
    REQUIRE(pt_backend_cuda_mem_info(gpu, &free1, NULL) == 0);
    CHECK_MSG(free0 - free1 >= 2 * chunk, "the driver shows %lld bytes less free, want >= %lld",
              (long long)(free0 - free1), (long long)(2 * chunk));
    /* more than the whole GPU: NULL, nothing counted by the arena, one CUDA error */
    pt_mem_stats before, after;
    pt_arena_stats(a, &before);
    int errors = pt_cuda_error_count();
    CHECK(pt_arena_alloc(a, PT_MEM_ACTS, (size_t)(total + chunk)) == NULL);
    g_deliberate++;
    CHECK_MSG(pt_cuda_error_count() == errors + 1, "the failed allocation counted %d times",
              pt_cuda_error_count() - errors);
    pt_arena_stats(a, &after);
    CHECK(after.total_current == before.total_current && after.reserved == before.reserved);
    pt_arena_set_limit(a, 3 * chunk);
    CHECK(pt_arena_alloc(a, PT_MEM_GRADS, (size_t)(2 * chunk)) == NULL);
    pt_mem_stats st;
    pt_arena_stats(a, &st);
    CHECK(st.current[PT_MEM_WEIGHTS] == chunk && st.current[PT_MEM_ACTS] == chunk);
    printf(GPU_TAG " memory 512 MiB touched: driver free %lld -> %lld bytes, %lld reserved, limit "
                   "held %s\n",
           (long long)free0, (long long)free1, (long long)st.reserved,
           pt_test_failures_ ? "FAIL" : "PASS");
    pt_arena_destroy(&a);
    pt_backend_cuda_destroy(&gpu);
}

int main(int argc, char **argv)
{
    gpu_require("memory_gputest");
    static const struct pt_test_case cases[] = {{"driver_accounting", test_driver_accounting},
                                                {"driver_figure", test_driver_figure}};
    int failed = gpu_run_cases(cases, sizeof cases / sizeof cases[0], argc > 1 ? argv[1] : NULL);
    CHECK_MSG(pt_cuda_error_count() == g_deliberate, "%d CUDA errors (see stderr), %d expected",
              pt_cuda_error_count(), g_deliberate);
    return failed || pt_cuda_error_count() != g_deliberate ? 1 : 0;
}

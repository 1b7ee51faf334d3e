/* Every layer kind on the CUDA backend against the CPU backend: the same
 * one-layer net (same seed, so the same initial weights) on the same random
 * input, forward output and, after backward, the parameter gradients and the
 * input gradient, in fp32, TF32 and bf16 matrix products. Relative error
 * (2-norm) below 1e-4, 1e-3 and 1e-2. Then the optimizer kernels (SGD with
 * momentum and weight decay, Adam) over a few steps, and the reductions that
 * return to the host (dot, the loss). Prints one GPU-CHECK line per layer and
 * mode for scripts/gpu-check.sh. */
#include <string.h>

#include "protocol/model.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "runtime/rng.h"
#include "tests/gpu/gpu_common.h"

#define BATCH 6

/* Tokens through a pre-LN GPT block and a head; an MLP with relu and a
 * classifier loss: together every layer kind. */
static const char *const models[] = {
    "{\"v\":1,\"name\":\"gpu-gpt\",\"input\":{\"kind\":\"tokens\",\"shape\":[24]},\"layers\":["
    "{\"type\":\"embedding\",\"vocab\":67,\"dim\":48,\"positional\":true},"
    "{\"type\":\"residual\",\"name\":\"attn\",\"body\":[{\"type\":\"layernorm\"},"
    "{\"type\":\"attention\",\"heads\":4}]},"
    "{\"type\":\"residual\",\"name\":\"mlp\",\"body\":[{\"type\":\"layernorm\"},"
    "{\"type\":\"linear\",\"out\":192},{\"type\":\"gelu\"},{\"type\":\"linear\",\"out\":48}]},"
    "{\"type\":\"layernorm\",\"name\":\"ln_f\"},"
    "{\"type\":\"attention\",\"heads\":3,\"name\":\"attn_bare\"},"
    "{\"type\":\"gelu\",\"name\":\"gelu\"},"
    "{\"type\":\"linear\",\"out\":67,\"name\":\"head\"},"
    "{\"type\":\"softmax_xent\",\"classes\":67}]}",
    "{\"v\":1,\"name\":\"gpu-mlp\",\"input\":[40],\"layers\":["
    "{\"type\":\"linear\",\"out\":72},{\"type\":\"relu\"},"
    "{\"type\":\"linear\",\"out\":72,\"bias\":false},{\"type\":\"relu\"},"
    "{\"type\":\"linear\",\"out\":10},{\"type\":\"softmax_xent\",\"classes\":10}]}"};

typedef struct side {
    const pt_backend *be;
    pt_net *net;
    float *x, *dy, *dx; /* device */
} side;

static int make_side(const pt_model_spec *spec, int layer, const pt_backend *be, side *s)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = layer;
    cfg.last = layer + 1;
    cfg.max_batch = BATCH;
    cfg.seed = 5;
    cfg.backend = be;
    pt_error err = {0};
    memset(s, 0, sizeof *s);
    s->be = be;
    int rc = pt_net_create(spec, &cfg, &s->net, &err);
    CHECK_MSG(rc == 0, "layer %d on %s: %s", layer, be ? be->name : "cpu", err.msg);
    if (rc < 0)
        return rc;
    pt_arena *a = pt_net_arena(s->net);
    s->x = pt_arena_alloc_floats(a, PT_MEM_COMM, BATCH * pt_net_in_elems(s->net));
    s->dy = pt_arena_alloc_floats(a, PT_MEM_COMM, BATCH * pt_net_out_elems(s->net));
    s->dx = pt_arena_alloc_floats(a, PT_MEM_COMM, BATCH * pt_net_in_elems(s->net));
    return s->x && s->dy && s->dx ? 0 : PT_ENOMEM;
}

static float *download(side *s, const float *dev, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    const pt_backend *be = pt_net_backend(s->net);
    if (h && n > 0)
        be->download(be, h, dev, (size_t)n * sizeof *h);
    return h;
}

/* Runs layer `layer` on both backends; returns the worst relative error. */
static double compare_layer(const pt_model_spec *spec, int layer, pt_cuda_math math,
                            const pt_backend *gpu)
{
    side c = {0}, g = {0};
    if (make_side(spec, layer, NULL, &c) < 0 || make_side(spec, layer, gpu, &g) < 0) {
        pt_net_destroy(&c.net);
        pt_net_destroy(&g.net);
        return INFINITY;
    }
    int64_t in = pt_net_in_elems(c.net) * BATCH, out = pt_net_out_elems(c.net) * BATCH;
    int64_t np = pt_net_param_count(c.net), nl = pt_net_label_count(c.net) * BATCH;
    float *x = malloc((size_t)in * sizeof *x), *dy = malloc((size_t)out * sizeof *dy);
    int32_t *labels = nl > 0 ? malloc((size_t)nl * sizeof *labels) : NULL;
    pt_rng rng = pt_rng_make(17, (uint64_t)layer);
    int tokens = layer == 0 && spec->input_kind == PT_INPUT_TOKENS;
    for (int64_t i = 0; i < in; i++)
        x[i] = tokens ? (float)pt_rng_below(&rng, (uint64_t)spec->layers[0].vocab)
                      : (float)pt_rng_uniform_range(&rng, -1, 1);
    for (int64_t i = 0; i < out; i++)
        dy[i] = (float)pt_rng_uniform_range(&rng, -1, 1);
    for (int64_t i = 0; i < nl; i++)
        labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)pt_net_classes(c.net));
    double worst = 0, e_fwd = 0, e_dw = 0, e_dx = 0, loss_c = 0, loss_g = 0;
    side *sides[2] = {&c, &g};
    float *y_h[2] = {0}, *dw_h[2] = {0}, *dx_h[2] = {0};
    for (int k = 0; k < 2; k++) {
        side *s = sides[k];
        const pt_backend *be = pt_net_backend(s->net);
        be->upload(be, s->x, x, (size_t)in * sizeof *x);
        be->upload(be, s->dy, dy, (size_t)out * sizeof *dy);
        const float *y = NULL;
        int rc = pt_net_forward(s->net, 0, NULL, s->x, BATCH, labels, &y, k ? &loss_g : &loss_c);
        CHECK_MSG(rc == 0, "layer %d forward on %s: %d", layer, be->name, rc);
        if (rc < 0)
            goto done;
        y_h[k] = download(s, y, out);
        rc = pt_net_backward(s->net, 0, NULL, NULL, pt_net_has_loss(s->net) ? NULL : s->dy,
                             tokens ? NULL : s->dx);
        CHECK(rc == 0);
        dw_h[k] = download(s, pt_net_grads(s->net), np);
        dx_h[k] = tokens ? NULL : download(s, s->dx, in);
    }
    e_fwd = gpu_rel(y_h[1], y_h[0], out);
    e_dw = np > 0 ? gpu_rel(dw_h[1], dw_h[0], np) : 0;
    e_dx = tokens ? 0 : gpu_rel(dx_h[1], dx_h[0], in);
    worst = fmax(e_fwd, fmax(e_dw, e_dx));
    if (nl > 0) {
        double el = fabs(loss_g - loss_c) / fabs(loss_c);
        worst = fmax(worst, el);
    }
    double tol = gpu_tol(math);
    printf(GPU_TAG " layer %-10s %-13s %s fwd %.2e dw %.2e dx %.2e tol %.0e %s\n", spec->name,
           spec->layers[layer].name, pt_cuda_math_name(math), e_fwd, e_dw, e_dx, tol,
           worst < tol ? "PASS" : "FAIL");
    CHECK_MSG(worst < tol, "%s layer %d (%s) %s: error %.3e >= %.0e", spec->name, layer,
              spec->layers[layer].name, pt_cuda_math_name(math), worst, tol);
done:
    for (int k = 0; k < 2; k++) {
        free(y_h[k]);
        free(dw_h[k]);
        free(dx_h[k]);
    }
    free(x);
    free(dy);
    free(labels);
    pt_net_destroy(&c.net);
    pt_net_destroy(&g.net);
    return worst;
}

static void test_layers(void)
{
    for (int m = PT_CUDA_FP32; m <= PT_CUDA_BF16; m++) {
        const pt_backend *gpu = gpu_open((pt_cuda_math)m);
        REQUIRE(gpu);
        for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
            pt_model_spec *spec = NULL;
            pt_error err = {0};
            REQUIRE(pt_model_spec_parse(models[k], "test", &spec, &err) == 0);
            for (int i = 0; i < spec->layer_count; i++)
                compare_layer(spec, i, (pt_cuda_math)m, gpu);
            pt_model_spec_free(&spec);
        }
        gpu_close(&gpu);
    }
}

/* A bad token id or label is reported, not read out of bounds. */
static void test_range_errors(void)
{
    const pt_backend *gpu = gpu_open(PT_CUDA_FP32);
    REQUIRE(gpu);
    float *ids = gpu->alloc(gpu, 4 * sizeof(float)), *table = gpu->alloc(gpu, 8 * sizeof(float));
    float *y = gpu->alloc(gpu, 16 * sizeof(float));
    float host_ids[4] = {0, 1, 3, 1.5f};
    gpu->upload(gpu, ids, host_ids, sizeof host_ids);
    gpu->fill(gpu, 8, 1.0f, table);
    CHECK(gpu->embedding_fwd(gpu, 1, 3, 2, 4, ids, table, NULL, y) == 0);
    CHECK(gpu->embedding_fwd(gpu, 1, 4, 2, 4, ids, table, NULL, y) == PT_ERANGE); /* 1.5 */
    CHECK(gpu->embedding_fwd(gpu, 1, 3, 2, 3, ids, table, NULL, y) == PT_ERANGE); /* id 3 */
    int32_t *lab = gpu->alloc(gpu, 2 * sizeof(int32_t));
    int32_t host_lab[2] = {1, 4};
    gpu->upload(gpu, lab, host_lab, sizeof host_lab);
    double loss = 0;
    CHECK(gpu->softmax_xent_fwd(gpu, 1, 4, table, lab, y, &loss) == 0);
    CHECK(fabs(loss - log(4.0)) < 1e-6);
    CHECK(gpu->softmax_xent_fwd(gpu, 2, 4, table, lab, y, &loss) == PT_ERANGE);
    /* dot in double */
    CHECK(fabs(gpu->dot(gpu, 8, table, table) - 8.0) < 1e-12);
    gpu->free(gpu, ids);
    gpu->free(gpu, table);
    gpu->free(gpu, y);
    gpu->free(gpu, lab);
    gpu_close(&gpu);
}

static void test_optimizers(void)
{
    const int64_t n = 100003; /* not a multiple of any block */
    const pt_backend *gpu = gpu_open(PT_CUDA_FP32);
    REQUIRE(gpu);
    for (int kind = 0; kind < 2; kind++) {
        pt_optim_spec os = pt_optim_default(kind ? PT_OPTIM_ADAM : PT_OPTIM_SGD);
        os.weight_decay = 0.01;
        pt_arena *ac = NULL, *ag = NULL;
        REQUIRE(pt_arena_create(NULL, &ac) == 0 && pt_arena_create(gpu, &ag) == 0);
        pt_optim *oc = NULL, *og = NULL;
        REQUIRE(pt_optim_create(&os, ac, n, &oc, NULL) == 0);
        REQUIRE(pt_optim_create(&os, ag, n, &og, NULL) == 0);
        float *w = malloc((size_t)n * sizeof *w), *g = malloc((size_t)n * sizeof *g);
        float *wg = malloc((size_t)n * sizeof *wg);
        float *dw = pt_arena_alloc_floats(ag, PT_MEM_WEIGHTS, n);
        float *dg = pt_arena_alloc_floats(ag, PT_MEM_GRADS, n);
        pt_rng rng = pt_rng_make(3, (uint64_t)kind);
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)pt_rng_uniform_range(&rng, -1, 1);
        gpu->upload(gpu, dw, w, (size_t)n * sizeof *w);
        for (int step = 0; step < 5; step++) {
            for (int64_t i = 0; i < n; i++)
                g[i] = (float)pt_rng_uniform_range(&rng, -1, 1);
            gpu->upload(gpu, dg, g, (size_t)n * sizeof *g);
            pt_optim_step(oc, w, g);
            pt_optim_step(og, dw, dg);
        }
        gpu->download(gpu, wg, dw, (size_t)n * sizeof *wg);
        double e = gpu_rel(wg, w, n);
        printf(GPU_TAG " optim %s rel %.2e tol %.0e %s\n", kind ? "adam" : "sgd", e, TOL_FP32,
               e < TOL_FP32 ? "PASS" : "FAIL");
        CHECK_MSG(e < TOL_FP32, "%s: %.3e", kind ? "adam" : "sgd", e);
        free(w);
        free(g);
        free(wg);
        pt_optim_destroy(&oc);
        pt_optim_destroy(&og);
        pt_arena_destroy(&ac);
        pt_arena_destroy(&ag);
    }
    gpu_close(&gpu);
}

int main(int argc, char **argv)
{
    gpu_require("layers_gputest");
    static const struct pt_test_case cases[] = {{"layers", test_layers},
                                                {"range_errors", test_range_errors},
                                                {"optimizers", test_optimizers}};
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
    CHECK_MSG(pt_cuda_error_count() == 0, "%d CUDA/cuBLAS calls failed (see stderr)",
              pt_cuda_error_count());
    return failed || pt_cuda_error_count() ? 1 : 0;
}

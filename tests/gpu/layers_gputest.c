/* Every layer kind on the CUDA backend against the CPU backend: the same
 * one-layer net (same seed, so the same initial weights) on the same random
 * input, forward output and, after backward, the parameter gradients and the
 * input gradient, in fp32, TF32 and bf16 matrix products. Relative error
 * (2-norm) below 1e-4, 1e-3 and 1e-2; in TF32 and bf16 the CPU reference
 * rounds the inputs of its matrix products as tensor cores do (to nearest,
 * or truncating: the GPU is held to the one it matches). Then single ops
 * against the CPU where a layer covers them only in part: beta = 1
 * accumulation of gemm, gemm_batched and col_sum, the two halves of a split
 * layernorm backward, and column reductions over more rows than a grid of
 * 65,535 row blocks covers; the optimizer kernels (SGD with momentum and
 * weight decay, Adam) over a few steps, and the reductions that return to the
 * host (dot, the loss). Fused attention (the tiled kernel, "fused": true)
 * against the unfused layer on the GPU (fp32: 1e-5, bf16: 1e-2) and the CPU
 * (fp32: 1e-4), at one to three tiles of rows and head dims 12 to 128, and
 * the bytes it keeps for backward on the GPU against the planner's figure. Prints one GPU-CHECK
 * line per layer and mode, and per op group, for scripts/gpu-check.sh. */
#include <string.h>

#include "planner/analytic.h"
#include "protocol/model.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "runtime/rng.h"
#include "tests/gpu/gpu_common.h"

#define BATCH 6

/* Tokens through a pre-LN GPT block and a head; fused attention over three
 * tiles of rows (70 > 2 x PT_ATTN_BR) at head dims 32 and 64; an MLP with
 * relu and a classifier loss: together every layer kind. */
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
    "{\"v\":1,\"name\":\"gpu-attn\",\"input\":[70,64],\"layers\":["
    "{\"type\":\"attention\",\"heads\":2,\"fused\":true,\"name\":\"attn_fused2\"},"
    "{\"type\":\"attention\",\"heads\":1,\"fused\":true,\"name\":\"attn_fused1\"},"
    "{\"type\":\"softmax_xent\",\"classes\":64}]}",
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

/* One layer's random inputs, the same for every backend. */
typedef struct layer_in {
    int64_t in, out, np, nl;
    float *x, *dy;
    int32_t *labels;
    int tokens; /* the input is token ids (no input gradient) */
} layer_in;

/* What a backend computed: output, parameter and input gradients, loss. */
typedef struct layer_out {
    float *y, *dw, *dx;
    double loss;
} layer_out;

static void out_free(layer_out *o)
{
    free(o->y);
    free(o->dw);
    free(o->dx);
    memset(o, 0, sizeof *o);
}

/* Runs layer `layer` forward and backward on backend be (NULL: the CPU).
 * Returns 0 or a failed CHECK's code. */
static int run_layer(const pt_model_spec *spec, int layer, const pt_backend *be, const layer_in *li,
                     layer_out *o)
{
    side s = {0};
    memset(o, 0, sizeof *o);
    int rc = make_side(spec, layer, be, &s);
    const pt_backend *nb = s.net ? pt_net_backend(s.net) : NULL;
    if (rc == 0) {
        nb->upload(nb, s.x, li->x, (size_t)li->in * sizeof(float));
        nb->upload(nb, s.dy, li->dy, (size_t)li->out * sizeof(float));
        const float *y = NULL;
        rc = pt_net_forward(s.net, 0, NULL, s.x, BATCH, li->labels, &y, &o->loss);
        CHECK_MSG(rc == 0, "layer %d forward on %s: %d", layer, nb->name, rc);
        if (rc == 0)
            o->y = download(&s, y, li->out);
    }
    if (rc == 0) {
        rc = pt_net_backward(s.net, 0, NULL, NULL, pt_net_has_loss(s.net) ? NULL : s.dy,
                             li->tokens ? NULL : s.dx);
        CHECK_MSG(rc == 0, "layer %d backward on %s: %d", layer, nb->name, rc);
        o->dw = download(&s, pt_net_grads(s.net), li->np);
        o->dx = li->tokens ? NULL : download(&s, s.dx, li->in);
    }
    pt_net_destroy(&s.net);
    return rc;
}

/* Errors of got against want: e[0] forward, e[1] parameter gradients, e[2]
 * input gradient; returns the worst of them and of the loss. */
static double out_err(const layer_out *got, const layer_out *want, const layer_in *li, double e[3])
{
    e[0] = gpu_rel(got->y, want->y, li->out);
    e[1] = li->np > 0 ? gpu_rel(got->dw, want->dw, li->np) : 0;
    e[2] = li->tokens ? 0 : gpu_rel(got->dx, want->dx, li->in);
    double worst = fmax(e[0], fmax(e[1], e[2]));
    if (li->nl > 0)
        worst = fmax(worst, fabs(got->loss - want->loss) / fabs(want->loss));
    return isnan(worst) ? INFINITY : worst;
}

static int make_inputs(const pt_model_spec *spec, int layer, layer_in *li)
{
    side c = {0};
    memset(li, 0, sizeof *li);
    if (make_side(spec, layer, NULL, &c) < 0) {
        pt_net_destroy(&c.net);
        return -1;
    }
    li->in = pt_net_in_elems(c.net) * BATCH;
    li->out = pt_net_out_elems(c.net) * BATCH;
    li->np = pt_net_param_count(c.net);
    li->nl = pt_net_label_count(c.net) * BATCH;
    li->tokens = layer == 0 && spec->input_kind == PT_INPUT_TOKENS;
    li->x = malloc((size_t)li->in * sizeof *li->x);
    li->dy = malloc((size_t)li->out * sizeof *li->dy);
    li->labels = li->nl > 0 ? malloc((size_t)li->nl * sizeof *li->labels) : NULL;
    pt_rng rng = pt_rng_make(17, (uint64_t)layer);
    for (int64_t i = 0; i < li->in; i++)
        li->x[i] = li->tokens ? (float)pt_rng_below(&rng, (uint64_t)spec->layers[0].vocab)
                              : (float)pt_rng_uniform_range(&rng, -1, 1);
    for (int64_t i = 0; i < li->out; i++)
        li->dy[i] = (float)pt_rng_uniform_range(&rng, -1, 1);
    for (int64_t i = 0; i < li->nl; i++)
        li->labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)pt_net_classes(c.net));
    pt_net_destroy(&c.net);
    return 0;
}

/* Layer `layer` on the GPU against the CPU. In tf32 and bf16 the reference
 * rounds the inputs of its products as tensor cores do, to nearest or by
 * truncation, and the error is against the one the GPU matches better (the
 * tolerance stays 1e-3 / 1e-2; against the unrounded CPU the error is
 * printed too). Returns the error. */
static double compare_layer(const pt_model_spec *spec, int layer, pt_cuda_math math,
                            const pt_backend *gpu)
{
    layer_in li;
    if (make_inputs(spec, layer, &li) < 0)
        return INFINITY;
    layer_out g, r;
    double e[3] = {0}, best[3] = {0}, worst = INFINITY, fp32 = INFINITY;
    gpu_rounding matched = GPU_ROUND_NONE;
    if (run_layer(spec, layer, gpu, &li, &g) == 0) {
        for (int k = GPU_ROUND_NONE; k <= (math == PT_CUDA_FP32 ? 0 : GPU_ROUND_TRUNCATE); k++) {
            if (run_layer(spec, layer, gpu_round_backend(math, (gpu_rounding)k), &li, &r) < 0)
                continue;
            double w = out_err(&g, &r, &li, e);
            if (k == GPU_ROUND_NONE)
                fp32 = w;
            if (w < worst || (k == GPU_ROUND_NONE && math == PT_CUDA_FP32)) {
                worst = w;
                matched = (gpu_rounding)k;
                memcpy(best, e, sizeof best);
            }
            out_free(&r);
        }
    }
    double tol = gpu_tol(math);
    printf(GPU_TAG " layer %-10s %-13s %s fwd %.2e dw %.2e dx %.2e vs %-8s tol %.0e %s "
                   "(unrounded %.2e)\n",
           spec->name, spec->layers[layer].name, pt_cuda_math_name(math), best[0], best[1], best[2],
           math == PT_CUDA_FP32 ? "fp32" : gpu_rounding_name(matched), tol,
           worst < tol ? "PASS" : "FAIL", fp32);
    CHECK_MSG(worst < tol, "%s layer %d (%s) %s: error %.3e >= %.0e", spec->name, layer,
              spec->layers[layer].name, pt_cuda_math_name(math), worst, tol);
    out_free(&g);
    free(li.x);
    free(li.dy);
    free(li.labels);
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

/* ---- fused attention against the unfused reference ---------------------- */

#define FUSED_TOL_FP32 1e-5 /* fused vs unfused, both fp32 (issue 28) */

/* A model of one attention layer on [T, D] before a loss, fused or not. */
static pt_model_spec *attn_model(int T, int D, int H, int fused)
{
    char json[320];
    snprintf(json, sizeof json,
             "{\"v\":1,\"name\":\"attn-%s\",\"input\":[%d,%d],\"layers\":[{\"type\":"
             "\"attention\",\"heads\":%d,\"fused\":%s},{\"type\":\"softmax_xent\","
             "\"classes\":%d}]}",
             fused ? "fused" : "unfused", T, D, H, fused ? "true" : "false", D);
    pt_model_spec *spec = NULL;
    pt_error err = {0};
    int rc = pt_model_spec_parse(json, "test", &spec, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return spec;
}

/* What the GPU's fused layer keeps for backward (measured on its arena)
 * against the planner's analytic figure; 0 when equal. */
static int fused_saved_check(const pt_model_spec *spec, const pt_backend *gpu, int64_t *saved,
                             int64_t *predicted)
{
    pt_device_desc dev = {.peak_flops = 1e12, .mem_bandwidth = 1e11};
    pt_profile *ap = NULL;
    pt_error err = {0};
    int64_t scratch = 0;
    *saved = *predicted = -1;
    if (pt_analytic_profile(spec, &dev, BATCH, NULL, &ap, &err) < 0 ||
        pt_net_layer_memory(spec, 0, BATCH, gpu, saved, &scratch, &err) < 0) {
        CHECK_MSG(0, "fused attention memory: %s", err.msg);
        pt_profile_free(&ap);
        return -1;
    }
    *predicted = ap->layers[0].saved_bytes;
    int diff = *saved != *predicted || scratch != ap->layers[0].scratch_bytes;
    pt_profile_free(&ap);
    return diff;
}

/* The fused layer on the GPU against the unfused one on the GPU (the core
 * alone differs: 1e-5 in fp32, 1e-2 in bf16) and, in fp32, on the CPU
 * (1e-4, the layers' tolerance), at one, two and three tiles of rows; and,
 * in fp32, the bytes it keeps for backward as the planner predicts. */
static void check_fused(int T, int D, int H, pt_cuda_math math, const pt_backend *gpu)
{
    pt_model_spec *fs = attn_model(T, D, H, 1), *us = attn_model(T, D, H, 0);
    layer_in li;
    if (!fs || !us || make_inputs(us, 0, &li) < 0) {
        pt_model_spec_free(&fs);
        pt_model_spec_free(&us);
        return;
    }
    layer_out gf, gu, cu;
    double e_gpu[3] = {0}, e_cpu[3] = {0}, w_gpu = INFINITY, w_cpu = INFINITY;
    if (run_layer(fs, 0, gpu, &li, &gf) == 0) {
        if (run_layer(us, 0, gpu, &li, &gu) == 0) {
            w_gpu = out_err(&gf, &gu, &li, e_gpu);
            out_free(&gu);
        }
        if (run_layer(us, 0, NULL, &li, &cu) == 0) {
            w_cpu = out_err(&gf, &cu, &li, e_cpu);
            out_free(&cu);
        }
        out_free(&gf);
    }
    /* in bf16 the unfused core's products round their inputs and the fused
     * kernel's do not: against the unrounded CPU only the figure is shown */
    int fp32 = math == PT_CUDA_FP32;
    double tol_gpu = fp32 ? FUSED_TOL_FP32 : gpu_tol(math);
    int ok = w_gpu < tol_gpu && (!fp32 || w_cpu < TOL_FP32);
    printf(GPU_TAG " op fused attention T %d D %d H %d %s vs unfused: gpu fwd %.2e dw %.2e dx %.2e "
                   "tol %.0e; cpu fp32 fwd %.2e dw %.2e dx %.2e %s %s\n",
           T, D, H, pt_cuda_math_name(math), e_gpu[0], e_gpu[1], e_gpu[2], tol_gpu, e_cpu[0],
           e_cpu[1], e_cpu[2], fp32 ? "tol 1e-04" : "(shown)", ok ? "PASS" : "FAIL");
    CHECK_MSG(ok,
              "fused attention T %d %s: vs the GPU's unfused %.3e (tol %.0e), vs the CPU's %.3e", T,
              pt_cuda_math_name(math), w_gpu, tol_gpu, w_cpu);
    if (math == PT_CUDA_FP32) {
        int64_t saved, predicted;
        int diff = fused_saved_check(fs, gpu, &saved, &predicted);
        printf(GPU_TAG " op fused attention T %d saved bytes %lld, predicted %lld %s\n", T,
               (long long)saved, (long long)predicted, diff == 0 ? "PASS" : "FAIL");
        CHECK_MSG(diff == 0, "fused attention T %d: saved %lld B, predicted %lld B", T,
                  (long long)saved, (long long)predicted);
    }
    free(li.x);
    free(li.dy);
    free(li.labels);
    pt_model_spec_free(&fs);
    pt_model_spec_free(&us);
}

static void test_fused_attention(void)
{
    static const struct {
        int T, D, H;
    } shapes[] = {{24, 48, 4}, {64, 64, 2}, {72, 128, 1}, {96, 256, 2}};
    /* regions of multiples of 64 bytes at BATCH samples: the figure is exact */
    static const pt_cuda_math modes[] = {PT_CUDA_FP32, PT_CUDA_BF16};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        pt_cuda_math m = modes[k];
        const pt_backend *gpu = gpu_open(m);
        REQUIRE(gpu);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            check_fused(shapes[i].T, shapes[i].D, shapes[i].H, m, gpu);
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

/* ---- single ops ------------------------------------------------------- */

static float *rand_host(int64_t n, uint64_t seed, double lo, double hi)
{
    float *h = malloc((size_t)n * sizeof *h);
    pt_rng rng = pt_rng_make(seed, 1);
    for (int64_t i = 0; i < n; i++)
        h[i] = (float)pt_rng_uniform_range(&rng, lo, hi);
    return h;
}

static float *to_dev(const pt_backend *be, const float *h, int64_t n)
{
    float *d = be->alloc(be, (size_t)n * sizeof *d);
    be->upload(be, d, h, (size_t)n * sizeof *d);
    return d;
}

static float *to_host(const pt_backend *be, const float *d, int64_t n)
{
    float *h = malloc((size_t)n * sizeof *h);
    be->download(be, h, d, (size_t)n * sizeof *h);
    return h;
}

/* The relative error of device array d (of be) against host array want. */
static double dev_err(const pt_backend *be, const float *d, const float *want, int64_t n)
{
    float *h = to_host(be, d, n);
    double e = gpu_rel(h, want, n);
    free(h);
    return isnan(e) ? INFINITY : e;
}

/* C = alpha op(A) op(B) + C, every transpose, one and three at a time, on
 * both backends from the same C; with beta = 0 a C of NaNs is overwritten. */
static double check_gemm_beta1(const pt_backend *gpu)
{
    const pt_backend *cpu = pt_backend_cpu();
    const int m = 37, n = 29, k = 53, batch = 3, sz = 64 * 64;
    float *a = rand_host(batch * sz, 1, -1, 1), *b = rand_host(batch * sz, 2, -1, 1);
    float *c0 = rand_host(batch * sz, 3, -1, 1), *nan = malloc(sz * sizeof *nan);
    for (int i = 0; i < sz; i++)
        nan[i] = NAN;
    double worst = 0;
    for (int t = 0; t < 4; t++) {
        pt_trans ta = t & 1 ? PT_TRANS : PT_NO_TRANS, tb = t & 2 ? PT_TRANS : PT_NO_TRANS;
        int lda = ta ? m + 3 : k + 2, ldb = tb ? k + 1 : n + 4, ldc = n + 5;
        float *want = malloc(batch * sz * sizeof *want);
        memcpy(want, c0, batch * sz * sizeof *want);
        cpu->gemm_batched(cpu, ta, tb, m, n, k, 0.7f, a, lda, sz, b, ldb, sz, 1.0f, want, ldc, sz,
                          batch);
        float *da = to_dev(gpu, a, batch * sz), *db = to_dev(gpu, b, batch * sz);
        float *dc = to_dev(gpu, c0, batch * sz);
        gpu->gemm_batched(gpu, ta, tb, m, n, k, 0.7f, da, lda, sz, db, ldb, sz, 1.0f, dc, ldc, sz,
                          batch);
        worst = fmax(worst, dev_err(gpu, dc, want, batch * sz));
        gpu->upload(gpu, dc, c0, sz * sizeof *dc);
        memcpy(want, c0, sz * sizeof *want);
        cpu->gemm(cpu, ta, tb, m, n, k, 1.3f, a, lda, b, ldb, 1.0f, want, ldc);
        gpu->gemm(gpu, ta, tb, m, n, k, 1.3f, da, lda, db, ldb, 1.0f, dc, ldc);
        worst = fmax(worst, dev_err(gpu, dc, want, sz));
        gpu->upload(gpu, dc, nan, sz * sizeof *dc); /* beta 0: NaNs in C are not read */
        memcpy(want, nan, sz * sizeof *want);
        cpu->gemm(cpu, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, want, ldc);
        gpu->gemm(gpu, ta, tb, m, n, k, 1.0f, da, lda, db, ldb, 0.0f, dc, ldc);
        float *got = to_host(gpu, dc, sz);
        for (int r = 0; r < m; r++) /* only C's m x n entries: the rest stay NaN */
            for (int j = 0; j < n; j++)
                if (isnan(got[r * ldc + j]))
                    worst = INFINITY;
        free(got);
        gpu->free(gpu, da);
        gpu->free(gpu, db);
        gpu->free(gpu, dc);
        free(want);
    }
    free(a);
    free(b);
    free(c0);
    free(nan);
    return worst;
}

/* col_sum with beta 0 and 1; a layernorm backward whole and in its halves
 * (dx only, gain and bias gradients only), accumulating onto nonzero
 * gradients, against the CPU and against each other. */
static double check_reductions(const pt_backend *gpu)
{
    const pt_backend *cpu = pt_backend_cpu();
    const int rows = 13, cols = 70, n = rows * cols;
    float *x = rand_host(n, 4, -2, 2), *dy = rand_host(n, 5, -1, 1);
    float *gain = rand_host(cols, 6, 0.5, 1.5), *bias = rand_host(cols, 7, -1, 1);
    float *acc = rand_host(cols, 8, -1, 1), *y = malloc(n * sizeof *y);
    float *mean = malloc(rows * sizeof *mean), *rstd = malloc(rows * sizeof *rstd);
    float *dx = malloc(n * sizeof *dx), *dg = malloc(cols * sizeof *dg);
    float *dbias = malloc(cols * sizeof *dbias), *sum = malloc(cols * sizeof *sum);
    memcpy(sum, acc, cols * sizeof *sum);
    cpu->col_sum(cpu, rows, cols, x, 1.0f, sum);
    cpu->layernorm_fwd(cpu, rows, cols, 1e-5f, x, gain, bias, y, mean, rstd);
    memcpy(dg, acc, cols * sizeof *dg);
    memcpy(dbias, acc, cols * sizeof *dbias);
    cpu->layernorm_bwd(cpu, rows, cols, x, dy, gain, mean, rstd, dx, dg, dbias);
    float *gx = to_dev(gpu, x, n), *gdy = to_dev(gpu, dy, n), *ggain = to_dev(gpu, gain, cols);
    float *gbias = to_dev(gpu, bias, cols), *gy = to_dev(gpu, y, n), *gacc = to_dev(gpu, acc, cols);
    float *gmean = to_dev(gpu, mean, rows), *grstd = to_dev(gpu, rstd, rows);
    float *gdx = to_dev(gpu, y, n), *gdg = to_dev(gpu, acc, cols), *gdb = to_dev(gpu, acc, cols);
    gpu->col_sum(gpu, rows, cols, gx, 1.0f, gacc);
    double worst = dev_err(gpu, gacc, sum, cols);
    cpu->col_sum(cpu, rows, cols, x, 0.0f, sum);
    gpu->col_sum(gpu, rows, cols, gx, 0.0f, gacc);
    worst = fmax(worst, dev_err(gpu, gacc, sum, cols));
    gpu->layernorm_bwd(gpu, rows, cols, gx, gdy, ggain, gmean, grstd, gdx, NULL, NULL);
    worst = fmax(worst, dev_err(gpu, gdx, dx, n));
    gpu->layernorm_bwd(gpu, rows, cols, gx, gdy, ggain, gmean, grstd, NULL, gdg, gdb);
    worst = fmax(worst, fmax(dev_err(gpu, gdg, dg, cols), dev_err(gpu, gdb, dbias, cols)));
    float *all[] = {gx, gdy, ggain, gbias, gy, gacc, gmean, grstd, gdx, gdg, gdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        gpu->free(gpu, all[i]);
    float *host[] = {x, dy, gain, bias, acc, y, mean, rstd, dx, dg, dbias, sum};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    return worst;
}

/* Column sums and layernorm parameter gradients over 4,194,241 rows, one more
 * than 65,535 blocks of 64 rows hold, against sums in double. The entries are
 * 0.5 or 1, so every partial sum, in any order, is exact in float: the only
 * right answer is the exact one, and one chunk of 64 rows missing is off by
 * more than 1e-5. */
static double check_tall_columns(const pt_backend *gpu)
{
    const int rows = 65535 * 64 + 1, cols = 2;
    const int64_t n = (int64_t)rows * cols;
    float *x = rand_host(n, 9, 0.0, 1.0), *ones = malloc(rows * sizeof *ones);
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] < 0.5f ? 0.5f : 1.0f;
    for (int r = 0; r < rows; r++)
        ones[r] = 1.0f;
    double want[2] = {0, 0};
    for (int64_t i = 0; i < n; i++)
        want[i % cols] += x[i];
    float wantf[2] = {(float)want[0], (float)want[1]};
    float *gx = to_dev(gpu, x, n), *gones = to_dev(gpu, ones, rows);
    float *gmean = gpu->alloc(gpu, rows * sizeof(float)),
          *gout = gpu->alloc(gpu, 8 * sizeof(float));
    gpu->fill(gpu, rows, 0.0f, gmean);
    gpu->col_sum(gpu, rows, cols, gx, 0.0f, gout);
    double worst = dev_err(gpu, gout, wantf, cols);
    /* dgain = sum dy * (x - 0) * 1 and dbias = sum dy, with dy = 1: the column sums */
    gpu->fill(gpu, 4, 0.0f, gout);
    gpu->layernorm_bwd(gpu, rows, cols, gx, gx, gones, gmean, gones, NULL, gout, gout + 2);
    float *both = to_host(gpu, gout, 4), sq[2] = {0, 0};
    double wsq[2] = {0, 0};
    for (int64_t i = 0; i < n; i++)
        wsq[i % cols] += (double)x[i] * x[i];
    sq[0] = (float)wsq[0];
    sq[1] = (float)wsq[1];
    worst = fmax(worst, fmax(gpu_rel(both, sq, 2), gpu_rel(both + 2, wantf, 2)));
    free(both);
    gpu->free(gpu, gx);
    gpu->free(gpu, gones);
    gpu->free(gpu, gmean);
    gpu->free(gpu, gout);
    free(x);
    free(ones);
    return isnan(worst) ? INFINITY : worst;
}

static void test_kernels(void)
{
    const pt_backend *gpu = gpu_open(PT_CUDA_FP32);
    REQUIRE(gpu);
    static const struct {
        const char *name;
        double (*check)(const pt_backend *);
        double tol;
    } checks[] = {{"gemm beta=1, beta=0 on NaN", check_gemm_beta1, TOL_FP32},
                  {"col_sum, split layernorm bwd", check_reductions, TOL_FP32},
                  {"4194241-row columns (exact)", check_tall_columns, 1e-6}};
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        int errors = pt_cuda_error_count();
        double e = checks[i].check(gpu);
        int ok = e < checks[i].tol && pt_cuda_error_count() == errors;
        printf(GPU_TAG " op %-30s fp32 rel %.2e tol %.0e %s\n", checks[i].name, e, checks[i].tol,
               ok ? "PASS" : "FAIL");
        CHECK_MSG(ok, "%s: error %.3e, %d CUDA errors", checks[i].name, e,
                  pt_cuda_error_count() - errors);
    }
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
                                                {"fused_attention", test_fused_attention},
                                                {"kernels", test_kernels},
                                                {"range_errors", test_range_errors},
                                                {"optimizers", test_optimizers}};
    int failed = gpu_run_cases(cases, sizeof cases / sizeof cases[0], argc > 1 ? argv[1] : NULL);
    CHECK_MSG(pt_cuda_error_count() == 0, "%d CUDA/cuBLAS calls failed (see stderr)",
              pt_cuda_error_count());
    return failed || pt_cuda_error_count() ? 1 : 0;
}

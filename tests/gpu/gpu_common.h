/* Shared by the GPU tests (tests/gpu/NAME_gputest.c, ctest label "gpu"): the
 * skip when no GPU is usable, the relative error they report, the precision
 * thresholds of issue 11, and the CPU references that round the inputs of
 * every matrix product the way tensor cores do.
 *
 * A test that finds no usable GPU prints one "SKIPPED: no usable GPU: WHY"
 * line, WHY being CUDA's own words (a driver too old for this runtime reads
 * differently from no device), and exits with PT_GPU_SKIP_CODE, which
 * cmake/cuda.cmake declares as the test's SKIP_RETURN_CODE: ctest then
 * reports it as skipped ("Not Run"), never as passed. Lines starting
 * "GPU-CHECK " are the figures scripts/gpu-check.sh collects into its table;
 * each ends in PASS or FAIL.
 *
 * Dry run: built with -DPT_GPU_DRY_RUN (scripts/gpu-check.sh --dry-run, the
 * NAME_gputest_dryrun programs of cmake/cuda.cmake) a test runs its whole
 * logic with a copy of the CPU backend standing in for the GPU, so the test
 * code itself is exercised on a machine without one; in tf32 and bf16 modes
 * the stand-in rounds the inputs of its matrix products as tensor cores may
 * (truncating them unless $PT_GPU_DRY_ROUNDING says "nearest"), so the layer
 * comparison meets the errors a GPU would give. Its figures say nothing about
 * a GPU and its lines are marked DRY-RUN. */
#ifndef PT_TESTS_GPU_COMMON_H
#define PT_TESTS_GPU_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend_cuda.h"
#include "runtime/backend_select.h"
#include "runtime/cuda_module.h"
#include "tests/test.h"

#define PT_GPU_SKIP_CODE 77

#define TOL_FP32 1e-4
#define TOL_TF32 1e-3
#define TOL_BF16 1e-2

static inline double gpu_tol(pt_cuda_math m)
{
    return m == PT_CUDA_BF16 ? TOL_BF16 : m == PT_CUDA_TF32 ? TOL_TF32 : TOL_FP32;
}

#ifdef PT_GPU_DRY_RUN
#define GPU_TAG "DRY-RUN"
static inline void gpu_require(const char *test)
{
    printf("%s: DRY RUN: a copy of the CPU backend stands in for the GPU\n", test);
}
#else
#define GPU_TAG "GPU-CHECK"
/* Exits with the skip code, saying why in CUDA's words, unless a GPU is
 * usable; fails (exit 1) when the build has the CUDA module but it does not
 * load, which no GPU machine should see. */
static inline void gpu_require(const char *test)
{
    pt_error why = {0};
    if (!pt_cuda_module_get(&why) && why.code != PT_EUNSUPP) {
        printf("%s: FAILED: the CUDA backend is built but does not load: %s\n", test, why.msg);
        fflush(stdout);
        exit(1);
    }
    int n = pt_cuda_device_probe(&why);
    if (n > 0)
        return;
    printf("%s: SKIPPED: no usable GPU: %s\n", test,
           n == 0 ? "no GPU visible (cudaGetDeviceCount found none)" : why.msg);
    fflush(stdout);
    exit(PT_GPU_SKIP_CODE);
}
#endif

/* Runs the cases whose names contain `only` (NULL: all), printing "ok" or
 * "FAIL" per case; returns how many failed. */
static inline int gpu_run_cases(const struct pt_test_case *cases, size_t n, const char *only)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (only && !strstr(cases[i].name, only))
            continue;
        int before = pt_test_failures_;
        cases[i].fn();
        int ok = pt_test_failures_ == before;
        printf("%s %s\n", ok ? "ok  " : "FAIL", cases[i].name);
        failed += !ok;
    }
    return failed;
}

/* ||got - want||_2 / ||want||_2 over n floats (0 when both are 0). */
static inline double gpu_rel(const float *got, const float *want, int64_t n)
{
    double d = 0, w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        d += e * e;
        w += (double)want[i] * want[i];
    }
    if (w == 0)
        return d == 0 ? 0 : INFINITY;
    return sqrt(d / w);
}

/* ---- tensor-core input rounding on the CPU ----------------------------- */

/* How a tensor core may turn a float32 input into TF32 (10 stored mantissa
 * bits) or bf16 (7): to nearest, ties to even, or by dropping the low bits. */
typedef enum gpu_rounding { GPU_ROUND_NONE, GPU_ROUND_NEAREST, GPU_ROUND_TRUNCATE } gpu_rounding;

static inline const char *gpu_rounding_name(gpu_rounding r)
{
    return r == GPU_ROUND_NEAREST ? "nearest" : r == GPU_ROUND_TRUNCATE ? "truncate" : "none";
}

/* x with its `drop` low mantissa bits rounded away as r says. */
static inline float gpu_round_bits(float x, int drop, gpu_rounding r)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (!drop || r == GPU_ROUND_NONE || (u & 0x7f800000u) == 0x7f800000u)
        return x; /* fp32, or inf / NaN */
    uint32_t low = (1u << drop) - 1;
    if (r == GPU_ROUND_NEAREST)
        u += (low >> 1) + ((u >> drop) & 1u);
    u &= ~low;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The bits TF32 (13) and bf16 (16) drop of a float32's 23. */
static inline int gpu_drop_bits(pt_cuda_math m)
{
    return m == PT_CUDA_TF32 ? 13 : m == PT_CUDA_BF16 ? 16 : 0;
}

static inline float gpu_round(float x, pt_cuda_math m, gpu_rounding r)
{
    return gpu_round_bits(x, gpu_drop_bits(m), r);
}

/* A CPU backend whose matrix products round both inputs first: a copy of
 * the CPU table with gemm and gemm_batched wrapped; ctx holds the mode. */
typedef struct gpu_round_ctx {
    int drop; /* mantissa bits rounded away */
    gpu_rounding rounding;
} gpu_round_ctx;

/* A rounded copy of the `count` floats from p (malloc'ed). */
static inline float *gpu_rounded(const float *p, int64_t count, const gpu_round_ctx *c)
{
    float *q = malloc((size_t)(count > 0 ? count : 1) * sizeof *q);
    for (int64_t i = 0; i < count; i++)
        q[i] = gpu_round_bits(p[i], c->drop, c->rounding);
    return q;
}

/* Floats a row-major rows x cols operand with leading dimension ld spans. */
static inline int64_t gpu_span(int rows, int cols, int ld)
{
    return rows > 0 && cols > 0 ? (int64_t)(rows - 1) * ld + cols : 0;
}

static inline void gpu_round_gemm_batched(const pt_backend *be, pt_trans ta, pt_trans tb, int m,
                                          int n, int k, float alpha, const float *a, int lda,
                                          int64_t sa, const float *b, int ldb, int64_t sb,
                                          float beta, float *c, int ldc, int64_t sc, int batch)
{
    const gpu_round_ctx *x = be->ctx;
    int64_t na = gpu_span(ta ? k : m, ta ? m : k, lda) + (batch - 1) * sa;
    int64_t nb = gpu_span(tb ? n : k, tb ? k : n, ldb) + (batch - 1) * sb;
    float *ra = gpu_rounded(a, batch > 0 ? na : 0, x), *rb = gpu_rounded(b, batch > 0 ? nb : 0, x);
    pt_backend_cpu()->gemm_batched(pt_backend_cpu(), ta, tb, m, n, k, alpha, ra, lda, sa, rb, ldb,
                                   sb, beta, c, ldc, sc, batch);
    free(ra);
    free(rb);
}

static inline void gpu_round_gemm(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n,
                                  int k, float alpha, const float *a, int lda, const float *b,
                                  int ldb, float beta, float *c, int ldc)
{
    gpu_round_gemm_batched(be, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

/* The CPU backend rounding its products' inputs for math mode m (the plain
 * CPU backend for fp32 or GPU_ROUND_NONE). Static tables: never freed. */
static inline const pt_backend *gpu_round_backend(pt_cuda_math m, gpu_rounding r)
{
    static pt_backend tables[3][3];
    static gpu_round_ctx ctx[3][3];
    if (m == PT_CUDA_FP32 || r == GPU_ROUND_NONE)
        return pt_backend_cpu();
    ctx[m][r] = (gpu_round_ctx){gpu_drop_bits(m), r};
    tables[m][r] = *pt_backend_cpu();
    tables[m][r].name = "cpu-rounding";
    tables[m][r].ctx = &ctx[m][r];
    tables[m][r].gemm = gpu_round_gemm;
    tables[m][r].gemm_batched = gpu_round_gemm_batched;
    return &tables[m][r];
}

#ifdef PT_GPU_DRY_RUN
/* ---- the dry run's stand-in, and the faults it can be given ------------
 * $PT_GPU_DRY_FAULT makes the stand-in a GPU that computes one thing wrong,
 * so that tests/gpu/gpu_dryrun_faults.sh can show each GPU test fail for a
 * wrong GPU result: "gemm_beta" (beta = 1 overwrites instead of adding),
 * "ln_split" (the input half of a split layernorm backward writes nothing),
 * "tall" (a column reduction over more rows than 65,535 blocks of 64 fails
 * to launch, as before issue 30), "coarse" (tf32/bf16 products keep only 5
 * mantissa bits of their inputs), "attn_fused" (the fused attention's
 * backward writes zeros). */
static pt_backend gpu_dry_[3], gpu_dry_under_[3];
static gpu_round_ctx gpu_dry_coarse_ = {18, GPU_ROUND_TRUNCATE};

static inline const pt_backend *gpu_dry_under(const pt_backend *be)
{
    return &gpu_dry_under_[be - gpu_dry_];
}

static inline int gpu_dry_fault(const char *name)
{
    const char *f = getenv("PT_GPU_DRY_FAULT");
    return f && !strcmp(f, name);
}

static inline void gpu_dry_gemm_batched(const pt_backend *be, pt_trans ta, pt_trans tb, int m,
                                        int n, int k, float alpha, const float *a, int lda,
                                        int64_t sa, const float *b, int ldb, int64_t sb, float beta,
                                        float *c, int ldc, int64_t sc, int batch)
{
    const pt_backend *u = gpu_dry_under(be);
    if (gpu_dry_fault("gemm_beta") && beta == 1.0f)
        beta = 0.0f;
    if (gpu_dry_fault("coarse") && u->ctx) {
        pt_backend coarse = *u;
        coarse.ctx = &gpu_dry_coarse_;
        gpu_round_gemm_batched(&coarse, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                               ldc, sc, batch);
        return;
    }
    u->gemm_batched(u, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

static inline void gpu_dry_gemm(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                                float alpha, const float *a, int lda, const float *b, int ldb,
                                float beta, float *c, int ldc)
{
    gpu_dry_gemm_batched(be, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

static inline void gpu_dry_layernorm_bwd(const pt_backend *be, int rows, int cols, const float *x,
                                         const float *dy, const float *gain, const float *mean,
                                         const float *rstd, float *dx, float *dgain, float *dbias)
{
    const pt_backend *u = gpu_dry_under(be);
    if (gpu_dry_fault("ln_split") && !dgain)
        return;
    if (gpu_dry_fault("tall") && rows > 65535 * 64 && dgain) {
        dgain = dbias = NULL; /* the parameter half's launch fails */
        if (!dx)
            return;
    }
    u->layernorm_bwd(u, rows, cols, x, dy, gain, mean, rstd, dx, dgain, dbias);
}

static inline void gpu_dry_col_sum(const pt_backend *be, int rows, int cols, const float *x,
                                   float beta, float *out)
{
    const pt_backend *u = gpu_dry_under(be);
    if (gpu_dry_fault("tall") && rows > 65535 * 64) {
        if (beta == 0.0f)
            u->fill(u, cols, 0.0f, out); /* the memset ran, the launch did not */
        return;
    }
    u->col_sum(u, rows, cols, x, beta, out);
}

static inline void gpu_dry_attention_fused_bwd(const pt_backend *be, int n, int seq, int heads,
                                               int head_dim, float scale, const float *qkv,
                                               const float *ctx, const float *stats,
                                               const float *dctx, float *delta, float *dqkv)
{
    const pt_backend *u = gpu_dry_under(be);
    if (gpu_dry_fault("attn_fused")) {
        u->fill(u, (int64_t)n * seq * 3 * heads * head_dim, 0.0f, dqkv);
        return;
    }
    u->attention_fused_bwd(u, n, seq, heads, head_dim, scale, qkv, ctx, stats, dctx, delta, dqkv);
}
#endif

/* A CUDA backend on device 0 in math mode m (a failed CHECK and NULL when it
 * cannot be made); free with gpu_close. Dry run: the CPU stand-in, rounding
 * its products' inputs in tf32 and bf16 (truncating, or to nearest with
 * $PT_GPU_DRY_ROUNDING=nearest), with $PT_GPU_DRY_FAULT's fault. */
static inline const pt_backend *gpu_open(pt_cuda_math m)
{
#ifdef PT_GPU_DRY_RUN
    const char *r = getenv("PT_GPU_DRY_ROUNDING");
    gpu_dry_under_[m] =
        *gpu_round_backend(m, r && !strcmp(r, "nearest") ? GPU_ROUND_NEAREST : GPU_ROUND_TRUNCATE);
    gpu_dry_[m] = gpu_dry_under_[m];
    gpu_dry_[m].name = "cpu-as-gpu";
    gpu_dry_[m].gemm = gpu_dry_gemm;
    gpu_dry_[m].gemm_batched = gpu_dry_gemm_batched;
    gpu_dry_[m].layernorm_bwd = gpu_dry_layernorm_bwd;
    gpu_dry_[m].col_sum = gpu_dry_col_sum;
    gpu_dry_[m].attention_fused_bwd = gpu_dry_attention_fused_bwd;
    return &gpu_dry_[m];
#else
    const pt_backend *be = NULL;
    pt_error err = {0};
    int rc = pt_backend_cuda_create(0, m, &be, &err);
    CHECK_MSG(rc == 0, "cuda:0:%s: %s", pt_cuda_math_name(m), err.msg);
    return be;
#endif
}

static inline void gpu_close(const pt_backend **be)
{
    pt_backend_cuda_destroy(be); /* ignores the dry run's stand-in */
    *be = NULL;
}

#endif

/* gemm_bare: cuBLAS's own figure for gpt-1.3b's matrix products against the
 * same products through pipetop's CUDA backend (be->gemm / gemm_batched).
 *
 *   gemm_bare [--batch B] [--iters N] [--device D]
 *
 * For micro-batch B (B x 1024 tokens, d = 2048, 16 heads, vocab 50304) every
 * forward product of a block and the head (x W), its weight gradient
 * (x^T dy) and the attention scores (Q K^T per head, batched), in each mode:
 *   fp32  bare: fp32 in/out, CUBLAS_COMPUTE_32F        pipetop: cuda:D
 *   tf32  bare: fp32 in/out, CUBLAS_COMPUTE_32F_FAST_TF32  pipetop: cuda:D:tf32
 *   bf16  bare: bf16 in, fp32 out, CUBLAS_COMPUTE_32F  pipetop: cuda:D:bf16
 *         (pipetop keeps fp32 tensors and lets cuBLAS round them to bf16)
 * and a square 8192^3 bf16 product, the dense bf16 figure MFU is held
 * against. Times are cudaEvent intervals over N back-to-back calls after 3
 * warm-up calls. Prints "GEMM ..." and "PEAK ..." lines (TFLOP/s) that
 * scripts/gpu-check.sh puts in its table. A benchmark: never pass/fail. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend_cuda.h"

#define SEQ     1024
#define DIM     2048
#define HEADS   16
#define VOCAB   50304
#define WARMUP  3
#define SQUARE  8192
#define MAX_ARG 100000

typedef struct shape {
    const char *name;
    int ta, tb; /* row-major op(A), op(B) as pt_trans */
    int m, n, k, batch;
} shape;

static void die_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "gemm_bare: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static void die_blas(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "gemm_bare: %s: %s\n", what, cublasGetStatusString(s));
        exit(1);
    }
}

/* Device buffer of n elements of `bytes` each, filled with values in [-1, 1]
 * (as bf16 when bytes == 2). */
static void *random_buffer(int64_t n, int bytes)
{
    void *h = malloc((size_t)(n * bytes)), *d = NULL;
    if (!h) {
        fprintf(stderr, "gemm_bare: out of host memory\n");
        exit(1);
    }
    uint32_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float f = (float)(s >> 8) / (float)(1 << 24) * 2.0f - 1.0f;
        if (bytes == 2) {
            uint32_t u;
            memcpy(&u, &f, 4);
            ((uint16_t *)h)[i] = (uint16_t)(u >> 16);
        } else {
            ((float *)h)[i] = f;
        }
    }
    die_cuda(cudaMalloc(&d, (size_t)(n * bytes)), "cudaMalloc");
    die_cuda(cudaMemcpy(d, h, (size_t)(n * bytes), cudaMemcpyHostToDevice), "upload");
    free(h);
    return d;
}

/* The bare call: row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T. */
static void bare_call(cublasHandle_t h, const shape *s, int mode, const void *a, const void *b,
                      float *c)
{
    const float one = 1.0f, zero = 0.0f;
    cudaDataType in = mode == 2 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = mode == 1 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t oa = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      ob = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (s->batch > 1)
        die_blas(cublasGemmStridedBatchedEx(
                     h, ob, oa, s->n, s->m, s->k, &one, b, in, ldb, (long long)s->k * s->n, a, in,
                     lda, (long long)s->m * s->k, &zero, c, CUDA_R_32F, s->n,
                     (long long)s->m * s->n, s->batch, ct, CUBLAS_GEMM_DEFAULT),
                 "bare batched gemm");
    else
        die_blas(cublasGemmEx(h, ob, oa, s->n, s->m, s->k, &one, b, in, ldb, a, in, lda, &zero, c,
                              CUDA_R_32F, s->n, ct, CUBLAS_GEMM_DEFAULT),
                 "bare gemm");
}

static void pt_call(const pt_backend *be, const shape *s, const float *a, const float *b, float *c)
{
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (s->batch > 1)
        be->gemm_batched(be, (pt_trans)s->ta, (pt_trans)s->tb, s->m, s->n, s->k, 1.0f, a, lda,
                         (int64_t)s->m * s->k, b, ldb, (int64_t)s->k * s->n, 0.0f, c, s->n,
                         (int64_t)s->m * s->n, s->batch);
    else
        be->gemm(be, (pt_trans)s->ta, (pt_trans)s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f,
                 c, s->n);
}

static double tflops(const shape *s, double ms, int iters)
{
    return 2.0 * s->m * s->n * (double)s->k * s->batch * iters / (ms * 1e-3) / 1e12;
}

/* ms for `iters` calls of the bare (be == NULL) or pipetop path on stream st. */
static double time_calls(cublasHandle_t h, const pt_backend *be, cudaStream_t st, const shape *s,
                         int mode, const void *a, const void *b, float *c, int iters)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = -WARMUP; i < iters; i++) {
        if (i == 0)
            cudaEventRecord(e0, st);
        if (be)
            pt_call(be, s, a, b, c);
        else
            bare_call(h, s, mode, a, b, c);
    }
    cudaEventRecord(e1, st);
    die_cuda(cudaEventSynchronize(e1), "gemm");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms;
}

int main(int argc, char **argv)
{
    int batch = 4, iters = 10, device = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (v < 0 || v > MAX_ARG) {
            fprintf(stderr, "gemm_bare: %s %s: out of range\n", argv[i], argv[i + 1]);
            return 2;
        }
        if (!strcmp(argv[i], "--batch") && v > 0)
            batch = v;
        else if (!strcmp(argv[i], "--iters") && v > 0)
            iters = v;
        else if (!strcmp(argv[i], "--device"))
            device = v;
        else {
            fprintf(stderr, "usage: gemm_bare [--batch B] [--iters N] [--device D]\n");
            return 2;
        }
    }
    if (pt_cuda_device_count() <= device) {
        printf("gemm_bare: SKIPPED: no GPU visible\n");
        return 77;
    }
    die_cuda(cudaSetDevice(device), "cudaSetDevice");
    int R = batch * SEQ, dh = DIM / HEADS;
    const shape shapes[] = {
        {"qkv", 0, 0, R, 3 * DIM, DIM, 1},
        {"qkv.dW", 1, 0, DIM, 3 * DIM, R, 1},
        {"attn.out", 0, 0, R, DIM, DIM, 1},
        {"attn.out.dW", 1, 0, DIM, DIM, R, 1},
        {"mlp.up", 0, 0, R, 4 * DIM, DIM, 1},
        {"mlp.up.dW", 1, 0, DIM, 4 * DIM, R, 1},
        {"mlp.down", 0, 0, R, DIM, 4 * DIM, 1},
        {"mlp.down.dW", 1, 0, 4 * DIM, DIM, R, 1},
        {"head", 0, 0, R, VOCAB, DIM, 1},
        {"head.dW", 1, 0, DIM, VOCAB, R, 1},
        {"attn.scores", 0, 1, SEQ, SEQ, dh, batch * HEADS},
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    int64_t max_a = 0, max_b = 0, max_c = 0;
    for (int i = 0; i < nshapes; i++) {
        const shape *s = &shapes[i];
        int64_t a = (int64_t)s->m * s->k * s->batch, b = (int64_t)s->k * s->n * s->batch,
                c = (int64_t)s->m * s->n * s->batch;
        max_a = a > max_a ? a : max_a;
        max_b = b > max_b ? b : max_b;
        max_c = c > max_c ? c : max_c;
    }
    int64_t sq = (int64_t)SQUARE * SQUARE;
    max_a = max_a > sq ? max_a : sq;
    max_b = max_b > sq ? max_b : sq;
    max_c = max_c > sq ? max_c : sq;
    void *a32 = random_buffer(max_a, 4), *b32 = random_buffer(max_b, 4);
    void *a16 = random_buffer(max_a, 2), *b16 = random_buffer(max_b, 2);
    float *c = NULL;
    die_cuda(cudaMalloc((void **)&c, (size_t)max_c * sizeof(float)), "cudaMalloc");
    /* the uploads ran on the legacy stream, the timed calls run on non-blocking ones */
    die_cuda(cudaDeviceSynchronize(), "upload");
    char name[128] = "";
    pt_cuda_device_name(device, name, sizeof name);
    printf("gemm_bare: %s, micro-batch %d (%d tokens), %d calls per figure\n", name, batch, R,
           iters);
    for (int mode = 0; mode < 3; mode++) {
        const pt_backend *be = NULL;
        pt_error err = {0};
        if (pt_backend_cuda_create(device, (pt_cuda_math)mode, &be, &err) < 0) {
            fprintf(stderr, "gemm_bare: %s\n", err.msg);
            return 1;
        }
        cudaStream_t st = (cudaStream_t)pt_backend_cuda_stream(be);
        cublasHandle_t h;
        die_blas(cublasCreate(&h), "cublasCreate");
        die_blas(cublasSetStream(h, st), "cublasSetStream");
        const void *a = mode == 2 ? a16 : a32, *b = mode == 2 ? b16 : b32;
        for (int i = 0; i < nshapes; i++) {
            const shape *s = &shapes[i];
            double bare = tflops(s, time_calls(h, NULL, st, s, mode, a, b, c, iters), iters);
            double mine = tflops(s, time_calls(h, be, st, s, mode, a32, b32, c, iters), iters);
            printf("GEMM %-12s %-4s m %6d n %6d k %6d batch %3d bare %7.1f pipetop %7.1f TFLOP/s "
                   "ratio %5.1f%%\n",
                   s->name, pt_cuda_math_name(mode), s->m, s->n, s->k, s->batch, bare, mine,
                   100.0 * mine / bare);
        }
        if (mode == 2) {
            shape sqs = {"square", 0, 0, SQUARE, SQUARE, SQUARE, 1};
            double peak = tflops(&sqs, time_calls(h, NULL, st, &sqs, 2, a16, b16, c, iters), iters);
            printf("PEAK bf16 bare cublasGemmEx %dx%dx%d: %.1f TFLOP/s\n", SQUARE, SQUARE, SQUARE,
                   peak);
        }
        cublasDestroy(h);
        pt_backend_cuda_destroy(&be);
    }
    cudaFree(a32);
    cudaFree(b32);
    cudaFree(a16);
    cudaFree(b16);
    cudaFree(c);
    return pt_cuda_error_count() ? 1 : 0;
}

/* CUDA backend: cuBLAS for gemm, small CUDA kernels for the rest, one stream.
 * See runtime/backend_cuda.h for precision and synchronisation.
 *
 * Row-major on a column-major library: a row-major m x n matrix with leading
 * dimension ld is, read column-major, its n x m transpose. C = op(A) op(B)
 * row-major is therefore C^T = op(B)^T op(A)^T column-major, i.e. the same
 * cuBLAS call with A and B (and m and n) swapped and the trans flags kept. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "runtime/attention_tiled.h"
#include "runtime/cuda_module.h"
}

#define THREADS     256 /* threads per block of the elementwise kernels */
#define MAX_BLOCKS  4096
#define WARP        32
#define COL_CHUNK   64   /* rows one thread of a column reduction sums at a stretch */
#define COL_BLOCKS  1024 /* row blocks of a column reduction (grid.y), which stride on */
#define ALIGN_BYTES 256

typedef struct cuda_ctx {
    int device;
    pt_cuda_math math;
    cudaStream_t stream;
    cublasHandle_t blas;
    double *scalar; /* device: one double for dot / loss sums */
    int *flag;      /* device: range-check flag */
    pt_backend table;
} cuda_ctx;

static cuda_ctx *ctx_of(const pt_backend *be)
{
    return (cuda_ctx *)be->ctx;
}

/* A failed CUDA call inside an op cannot be returned through the table's
 * void entries; it is reported once on stderr (a sticky error also fails the
 * next call that returns a status). */
static int g_errors; /* failed calls so far, all backends (cu_error_count) */

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        __sync_fetch_and_add(&g_errors, 1);
        fprintf(stderr, "pipetop: cuda: %s: %s\n", what, cudaGetErrorString(e));
    }
}

/* Every kernel launch goes through LAUNCH. A launch returns nothing: a bad
 * configuration (a grid dimension over the device's limit), a launch from a
 * thread whose current device is another one, or no kernel image for this GPU
 * is reported only through cudaGetLastError, which is read (and cleared)
 * right after it, so the failure is counted and named by its kernel instead
 * of leaving stale output behind. An earlier asynchronous error (sticky) is
 * reported here too, at the first launch after it. */
#define LAUNCH(kernel, grid, block, stream, ...)                                                   \
    do {                                                                                           \
        kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);                                     \
        check(cudaGetLastError(), #kernel " launch");                                              \
    } while (0)

static void check_blas(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS) {
        __sync_fetch_and_add(&g_errors, 1);
        fprintf(stderr, "pipetop: cublas: %s: %s\n", what, cublasGetStatusString(s));
    }
}

static int cu_error_count(void)
{
    return __sync_fetch_and_add(&g_errors, 0);
}

static int blocks_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b < 1)
        b = 1;
    return (int)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- memory ------------------------------------------------------------ */

/* NULL on any failure, which is counted and reported with its cause: out of
 * memory (with the size asked for; not sticky, so it is cleared) reads
 * differently from a device already broken by an earlier error (sticky),
 * which every later call will report too. */
static void *cu_alloc(const pt_backend *be, size_t bytes)
{
    int device = ctx_of(be)->device;
    check(cudaSetDevice(device), "cudaSetDevice");
    void *p = NULL;
    size_t rounded = (bytes + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
    if (rounded == 0)
        rounded = ALIGN_BYTES;
    cudaError_t e = cudaMalloc(&p, rounded);
    if (e != cudaSuccess) {
        if (e == cudaErrorMemoryAllocation)
            cudaGetLastError();
        char what[96];
        snprintf(what, sizeof what, "cudaMalloc of %zu bytes on device %d", rounded, device);
        check(e, what);
        return NULL;
    }
    return p;
}

static void cu_free(const pt_backend *be, void *ptr)
{
    (void)be;
    if (ptr)
        check(cudaFree(ptr), "cudaFree");
}

static void cu_upload(const pt_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_of(be)->stream),
              "upload");
}

static void cu_download(const pt_backend *be, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    cuda_ctx *c = ctx_of(be);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download");
    check(cudaStreamSynchronize(c->stream), "download sync");
}

static void cu_copy(const pt_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_of(be)->stream),
              "copy");
}

static void cu_synchronize(const pt_backend *be)
{
    check(cudaStreamSynchronize(ctx_of(be)->stream), "synchronize");
}

/* ---- BLAS -------------------------------------------------------------- */

static cublasComputeType_t compute_type(const cuda_ctx *c)
{
    switch (c->math) {
    case PT_CUDA_TF32:
        return CUBLAS_COMPUTE_32F_FAST_TF32;
    case PT_CUDA_BF16:
        return CUBLAS_COMPUTE_32F_FAST_16BF;
    default:
        return CUBLAS_COMPUTE_32F;
    }
}

static cublasOperation_t op_of(pt_trans t)
{
    return t == PT_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/* C = beta*C for the k == 0 case (beta == 0 overwrites, NaNs included). */
__global__ void k_scale_matrix(int m, int n, float beta, float *c, int ldc)
{
    GRID_STRIDE(i, (int64_t)m * n)
    {
        float *p = c + (i / n) * ldc + i % n;
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

static void cu_gemm_batched(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                            float alpha, const float *a, int lda, int64_t stride_a, const float *b,
                            int ldb, int64_t stride_b, float beta, float *c, int ldc,
                            int64_t stride_c, int batch)
{
    cuda_ctx *x = ctx_of(be);
    if (m <= 0 || n <= 0 || batch <= 0)
        return;
    if (k <= 0) {
        for (int i = 0; i < batch; i++)
            LAUNCH(k_scale_matrix, blocks_for((int64_t)m * n), THREADS, x->stream, m, n, beta,
                   c + i * stride_c, ldc);
        return;
    }
    check_blas(cublasGemmStridedBatchedEx(x->blas, op_of(tb), op_of(ta), n, m, k, &alpha, b,
                                          CUDA_R_32F, ldb, stride_b, a, CUDA_R_32F, lda, stride_a,
                                          &beta, c, CUDA_R_32F, ldc, stride_c, batch,
                                          compute_type(x), CUBLAS_GEMM_DEFAULT),
               "gemm_batched");
}

static void cu_gemm(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                    float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                    float *c, int ldc)
{
    cuda_ctx *x = ctx_of(be);
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        LAUNCH(k_scale_matrix, blocks_for((int64_t)m * n), THREADS, x->stream, m, n, beta, c, ldc);
        return;
    }
    check_blas(cublasGemmEx(x->blas, op_of(tb), op_of(ta), n, m, k, &alpha, b, CUDA_R_32F, ldb, a,
                            CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc, compute_type(x),
                            CUBLAS_GEMM_DEFAULT),
               "gemm");
}

/* ---- elementwise ------------------------------------------------------- */

__global__ void k_axpy(int64_t n, float alpha, const float *x, float *y)
{
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

__global__ void k_scale(int64_t n, float alpha, float *x)
{
    GRID_STRIDE(i, n) x[i] *= alpha;
}

__global__ void k_fill(int64_t n, float v, float *x)
{
    GRID_STRIDE(i, n) x[i] = v;
}

__global__ void k_add(int64_t n, const float *a, const float *b, float *y)
{
    GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

/* Block sum of a double into shared memory; every thread gets the total. */
__device__ double block_sum(double v)
{
    __shared__ double part[THREADS / WARP];
    for (int o = WARP / 2; o > 0; o /= 2)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < (int)(blockDim.x / WARP); i++)
        t += part[i];
    return t;
}

__device__ float block_max(float v)
{
    __shared__ float part[THREADS / WARP];
    for (int o = WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    float t = part[0];
    for (int i = 1; i < (int)(blockDim.x / WARP); i++)
        t = fmaxf(t, part[i]);
    return t;
}

__global__ void k_dot(int64_t n, const float *x, const float *y, double *out)
{
    double s = 0.0;
    GRID_STRIDE(i, n) s += (double)x[i] * y[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        atomicAdd(out, s);
}

static double read_scalar(cuda_ctx *c)
{
    double v = 0.0;
    check(cudaMemcpyAsync(&v, c->scalar, sizeof v, cudaMemcpyDeviceToHost, c->stream), "scalar");
    check(cudaStreamSynchronize(c->stream), "scalar sync");
    return v;
}

static void cu_axpy(const pt_backend *be, int64_t n, float alpha, const float *x, float *y)
{
    if (n > 0)
        LAUNCH(k_axpy, blocks_for(n), THREADS, ctx_of(be)->stream, n, alpha, x, y);
}

static void cu_scale(const pt_backend *be, int64_t n, float alpha, float *x)
{
    if (n > 0)
        LAUNCH(k_scale, blocks_for(n), THREADS, ctx_of(be)->stream, n, alpha, x);
}

static void cu_fill(const pt_backend *be, int64_t n, float v, float *x)
{
    if (n <= 0)
        return;
    if (v == 0.0f)
        check(cudaMemsetAsync(x, 0, (size_t)n * sizeof *x, ctx_of(be)->stream), "fill");
    else
        LAUNCH(k_fill, blocks_for(n), THREADS, ctx_of(be)->stream, n, v, x);
}

static void cu_add(const pt_backend *be, int64_t n, const float *a, const float *b, float *y)
{
    if (n > 0)
        LAUNCH(k_add, blocks_for(n), THREADS, ctx_of(be)->stream, n, a, b, y);
}

static double cu_dot(const pt_backend *be, int64_t n, const float *x, const float *y)
{
    cuda_ctx *c = ctx_of(be);
    check(cudaMemsetAsync(c->scalar, 0, sizeof(double), c->stream), "dot");
    if (n > 0)
        LAUNCH(k_dot, blocks_for(n), THREADS, c->stream, n, x, y, c->scalar);
    return read_scalar(c);
}

/* ---- broadcasts and column reductions ---------------------------------- */

__global__ void k_add_row_vector(int rows, int cols, const float *v, float *y)
{
    GRID_STRIDE(i, (int64_t)rows * cols) y[i] += v[i % cols];
}

/* Column reductions over a rows x cols matrix: grid.x covers the columns,
 * grid.y (at most COL_BLOCKS, far below CUDA's 65,535) blocks of rows, each
 * thread summing chunks of COL_CHUNK rows of its column and striding on by
 * gridDim.y chunks, so any number of rows is covered by one launch; one
 * atomicAdd per thread. */
static dim3 col_grid(int rows, int cols)
{
    int64_t chunks = ((int64_t)rows + COL_CHUNK - 1) / COL_CHUNK;
    return dim3((unsigned)((cols + THREADS - 1) / THREADS),
                (unsigned)(chunks < COL_BLOCKS ? (chunks > 0 ? chunks : 1) : COL_BLOCKS));
}

#define COL_ROWS(r, rows)                                                                          \
    for (int64_t r0_ = (int64_t)blockIdx.y * COL_CHUNK; r0_ < (rows);                              \
         r0_ += (int64_t)gridDim.y * COL_CHUNK)                                                    \
        for (int64_t r = r0_, r1_ = min((int64_t)(rows), r0_ + COL_CHUNK); r < r1_; r++)

/* out[c] += the sum of column c over this thread's row chunks */
__global__ void k_col_sum(int rows, int cols, const float *x, float *out)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float s = 0.0f;
    COL_ROWS(r, rows)
    {
        s += x[r * cols + c];
    }
    atomicAdd(&out[c], s);
}

static void cu_add_row_vector(const pt_backend *be, int rows, int cols, const float *v, float *y)
{
    int64_t n = (int64_t)rows * cols;
    if (n > 0)
        LAUNCH(k_add_row_vector, blocks_for(n), THREADS, ctx_of(be)->stream, rows, cols, v, y);
}

static void cu_col_sum(const pt_backend *be, int rows, int cols, const float *x, float beta,
                       float *out)
{
    cuda_ctx *c = ctx_of(be);
    if (cols <= 0)
        return;
    if (beta == 0.0f)
        check(cudaMemsetAsync(out, 0, (size_t)cols * sizeof *out, c->stream), "col_sum");
    if (rows > 0)
        LAUNCH(k_col_sum, col_grid(rows, cols), THREADS, c->stream, rows, cols, x, out);
}

/* ---- activations ------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__device__ float sigmoidf_(float z)
{
    float e = __expf(-fabsf(z));
    float r = 1.0f / (1.0f + e);
    return z < 0.0f ? e * r : r;
}

__global__ void k_relu_fwd(int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void k_relu_bwd(int64_t n, const float *y, const float *dy, float *dx)
{
    GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void k_gelu_fwd(int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        y[i] = v * sigmoidf_(2.0f * GELU_K * (v + GELU_C * v * v * v));
    }
}

__global__ void k_gelu_bwd(int64_t n, const float *x, const float *dy, float *dx)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        float s = sigmoidf_(2.0f * GELU_K * (v + GELU_C * v * v * v));
        float d = s + 2.0f * v * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        dx[i] = dy[i] * d;
    }
}

static void cu_relu_fwd(const pt_backend *be, int64_t n, const float *x, float *y)
{
    if (n > 0)
        LAUNCH(k_relu_fwd, blocks_for(n), THREADS, ctx_of(be)->stream, n, x, y);
}

static void cu_relu_bwd(const pt_backend *be, int64_t n, const float *y, const float *dy, float *dx)
{
    if (n > 0)
        LAUNCH(k_relu_bwd, blocks_for(n), THREADS, ctx_of(be)->stream, n, y, dy, dx);
}

static void cu_gelu_fwd(const pt_backend *be, int64_t n, const float *x, float *y)
{
    if (n > 0)
        LAUNCH(k_gelu_fwd, blocks_for(n), THREADS, ctx_of(be)->stream, n, x, y);
}

static void cu_gelu_bwd(const pt_backend *be, int64_t n, const float *x, const float *dy, float *dx)
{
    if (n > 0)
        LAUNCH(k_gelu_bwd, blocks_for(n), THREADS, ctx_of(be)->stream, n, x, dy, dx);
}

/* ---- layernorm: one block per row -------------------------------------- */

__global__ void k_layernorm_fwd(int cols, float eps, const float *x, const float *gain,
                                const float *bias, float *y, float *mean, float *rstd)
{
    int64_t r = blockIdx.x;
    const float *xr = x + r * cols;
    double s = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += xr[c];
    float mu = (float)(block_sum(s) / cols);
    double v = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        double d = xr[c] - mu;
        v += d * d;
    }
    float rs = (float)(1.0 / sqrt(block_sum(v) / cols + eps));
    float *yr = y + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = (xr[c] - mu) * rs * gain[c] + bias[c];
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

__global__ void k_layernorm_dx(int cols, const float *x, const float *dy, const float *gain,
                               const float *mean, const float *rstd, float *dx)
{
    int64_t r = blockIdx.x;
    const float *xr = x + r * cols, *dyr = dy + r * cols;
    float mu = mean[r], rs = rstd[r];
    double sg = 0.0, sgx = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float g = dyr[c] * gain[c];
        sg += g;
        sgx += (double)g * ((xr[c] - mu) * rs);
    }
    float mg = (float)(block_sum(sg) / cols);
    float mgx = (float)(block_sum(sgx) / cols);
    float *dxr = dx + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float xhat = (xr[c] - mu) * rs;
        dxr[c] = rs * (dyr[c] * gain[c] - mg - xhat * mgx);
    }
}

__global__ void k_layernorm_dparams(int rows, int cols, const float *x, const float *dy,
                                    const float *mean, const float *rstd, float *dgain,
                                    float *dbias)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float sg = 0.0f, sb = 0.0f;
    COL_ROWS(r, rows)
    {
        float d = dy[r * cols + c];
        sg += d * ((x[r * cols + c] - mean[r]) * rstd[r]);
        sb += d;
    }
    atomicAdd(&dgain[c], sg);
    atomicAdd(&dbias[c], sb);
}

static void cu_layernorm_fwd(const pt_backend *be, int rows, int cols, float eps, const float *x,
                             const float *gain, const float *bias, float *y, float *mean,
                             float *rstd)
{
    if (rows > 0 && cols > 0)
        LAUNCH(k_layernorm_fwd, rows, THREADS, ctx_of(be)->stream, cols, eps, x, gain, bias, y,
               mean, rstd);
}

static void cu_layernorm_bwd(const pt_backend *be, int rows, int cols, const float *x,
                             const float *dy, const float *gain, const float *mean,
                             const float *rstd, float *dx, float *dgain, float *dbias)
{
    cudaStream_t s = ctx_of(be)->stream;
    if (rows <= 0 || cols <= 0)
        return;
    if (dgain)
        LAUNCH(k_layernorm_dparams, col_grid(rows, cols), THREADS, s, rows, cols, x, dy, mean, rstd,
               dgain, dbias);
    if (dx)
        LAUNCH(k_layernorm_dx, rows, THREADS, s, cols, x, dy, gain, mean, rstd, dx);
}

/* ---- embedding --------------------------------------------------------- */

__global__ void k_embedding_fwd(int64_t tokens, int seq, int dim, int vocab, const float *ids,
                                const float *table, const float *pos, float *y, int *bad)
{
    GRID_STRIDE(i, tokens * dim)
    {
        int64_t t = i / dim;
        int c = (int)(i % dim);
        float f = ids[t];
        if (!(f >= 0.0f && f < (float)vocab) || f != floorf(f)) {
            *bad = 1;
            continue;
        }
        float v = table[(int64_t)f * dim + c];
        if (pos)
            v += pos[(t % seq) * dim + c];
        y[i] = v;
    }
}

__global__ void k_embedding_bwd(int64_t tokens, int seq, int dim, const float *ids, const float *dy,
                                float *dtable, float *dpos)
{
    GRID_STRIDE(i, tokens * dim)
    {
        int64_t t = i / dim;
        int c = (int)(i % dim);
        float g = dy[i];
        atomicAdd(&dtable[(int64_t)ids[t] * dim + c], g);
        if (dpos)
            atomicAdd(&dpos[(t % seq) * dim + c], g);
    }
}

static int read_flag(cuda_ctx *c)
{
    int v = 0;
    check(cudaMemcpyAsync(&v, c->flag, sizeof v, cudaMemcpyDeviceToHost, c->stream), "flag");
    check(cudaStreamSynchronize(c->stream), "flag sync");
    return v;
}

static int cu_embedding_fwd(const pt_backend *be, int n, int seq, int dim, int vocab,
                            const float *ids, const float *table, const float *pos, float *y)
{
    cuda_ctx *c = ctx_of(be);
    int64_t tokens = (int64_t)n * seq;
    check(cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream), "embedding");
    if (tokens * dim > 0)
        LAUNCH(k_embedding_fwd, blocks_for(tokens * dim), THREADS, c->stream, tokens, seq, dim,
               vocab, ids, table, pos, y, c->flag);
    return read_flag(c) ? PT_ERANGE : 0;
}

static void cu_embedding_bwd(const pt_backend *be, int n, int seq, int dim, const float *ids,
                             const float *dy, float *dtable, float *dpos)
{
    int64_t tokens = (int64_t)n * seq;
    if (tokens * dim > 0)
        LAUNCH(k_embedding_bwd, blocks_for(tokens * dim), THREADS, ctx_of(be)->stream, tokens, seq,
               dim, ids, dy, dtable, dpos);
}

/* ---- causal attention softmax: one warp per row ------------------------ */

__device__ float warp_sum(float v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float warp_max(float v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#define ROWS_PER_BLOCK (THREADS / WARP)

__global__ void k_attn_softmax_fwd(int64_t rows, int seq, float *s)
{
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows)
        return;
    float *sr = s + r * seq;
    int t = (int)(r % seq);
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += WARP)
        mx = fmaxf(mx, sr[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += WARP) {
        float e = __expf(sr[j] - mx);
        sr[j] = e;
        sum += e;
    }
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < seq; j += WARP)
        sr[j] = j <= t ? sr[j] * inv : 0.0f;
}

__global__ void k_attn_softmax_bwd(int64_t rows, int seq, const float *p, const float *dp,
                                   float *ds)
{
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows)
        return;
    const float *pr = p + r * seq, *dpr = dp + r * seq;
    float dot = 0.0f;
    for (int j = lane; j < seq; j += WARP)
        dot += pr[j] * dpr[j];
    dot = warp_sum(dot);
    float *dsr = ds + r * seq;
    for (int j = lane; j < seq; j += WARP)
        dsr[j] = pr[j] * (dpr[j] - dot);
}

static unsigned row_blocks(int64_t rows)
{
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

static void cu_attention_softmax_fwd(const pt_backend *be, int64_t rows, int seq, float *s)
{
    if (rows > 0 && seq > 0)
        LAUNCH(k_attn_softmax_fwd, row_blocks(rows), THREADS, ctx_of(be)->stream, rows, seq, s);
}

static void cu_attention_softmax_bwd(const pt_backend *be, int64_t rows, int seq, const float *p,
                                     const float *dp, float *ds)
{
    if (rows > 0 && seq > 0)
        LAUNCH(k_attn_softmax_bwd, row_blocks(rows), THREADS, ctx_of(be)->stream, rows, seq, p, dp,
               ds);
}

/* ---- softmax cross-entropy: one block per row -------------------------- */

__global__ void k_xent_fwd(int classes, const float *logits, const int32_t *labels, float *probs,
                           double *loss, int *bad)
{
    int64_t r = blockIdx.x;
    const float *lr = logits + r * classes;
    float *pr = probs + r * classes;
    int32_t label = labels[r];
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < classes; c += blockDim.x)
        mx = fmaxf(mx, lr[c]);
    mx = block_max(mx);
    double s = 0.0;
    for (int c = threadIdx.x; c < classes; c += blockDim.x) {
        float e = __expf(lr[c] - mx);
        pr[c] = e;
        s += e;
    }
    double sum = block_sum(s);
    float inv = (float)(1.0 / sum);
    for (int c = threadIdx.x; c < classes; c += blockDim.x)
        pr[c] *= inv;
    if (threadIdx.x == 0) {
        if (label < 0 || label >= classes)
            *bad = 1;
        else
            atomicAdd(loss, log(sum) + mx - lr[label]);
    }
}

__global__ void k_xent_bwd(int64_t n, int classes, const float *probs, const int32_t *labels,
                           float scale, float *dlogits)
{
    GRID_STRIDE(i, n)
    {
        int c = (int)(i % classes);
        float v = scale * probs[i];
        dlogits[i] = c == labels[i / classes] ? v - scale : v;
    }
}

static int cu_softmax_xent_fwd(const pt_backend *be, int rows, int classes, const float *logits,
                               const int32_t *labels, float *probs, double *loss_sum)
{
    cuda_ctx *c = ctx_of(be);
    check(cudaMemsetAsync(c->scalar, 0, sizeof(double), c->stream), "xent");
    check(cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream), "xent");
    if (rows > 0)
        LAUNCH(k_xent_fwd, rows, THREADS, c->stream, classes, logits, labels, probs, c->scalar,
               c->flag);
    if (read_flag(c))
        return PT_ERANGE;
    *loss_sum = read_scalar(c);
    return 0;
}

static void cu_softmax_xent_bwd(const pt_backend *be, int rows, int classes, const float *probs,
                                const int32_t *labels, float scale, float *dlogits)
{
    int64_t n = (int64_t)rows * classes;
    if (n > 0)
        LAUNCH(k_xent_bwd, blocks_for(n), THREADS, ctx_of(be)->stream, n, classes, probs, labels,
               scale, dlogits);
}

/* ---- optimizers -------------------------------------------------------- */

__global__ void k_sgd(int64_t n, float lr, float momentum, float wd, const float *w, float *w_out,
                      const float *g, float *v)
{
    GRID_STRIDE(i, n)
    {
        float vi = momentum * v[i] + g[i] + wd * w[i];
        v[i] = vi;
        w_out[i] = w[i] - lr * vi;
    }
}

__global__ void k_adam(int64_t n, float step, float beta1, float beta2, float eps, float wd,
                       float inv_sqrt_bc2, const float *w, float *w_out, const float *g, float *m,
                       float *v)
{
    GRID_STRIDE(i, n)
    {
        float gi = g[i] + wd * w[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w_out[i] = w[i] - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

static void cu_sgd_update(const pt_backend *be, int64_t n, float lr, float momentum, float wd,
                          const float *w, float *w_out, const float *g, float *v)
{
    if (n > 0)
        LAUNCH(k_sgd, blocks_for(n), THREADS, ctx_of(be)->stream, n, lr, momentum, wd, w, w_out, g,
               v);
}

static void cu_adam_update(const pt_backend *be, int64_t n, float lr, float beta1, float beta2,
                           float eps, float wd, float bc1, float bc2, const float *w, float *w_out,
                           const float *g, float *m, float *v)
{
    if (n > 0)
        LAUNCH(k_adam, blocks_for(n), THREADS, ctx_of(be)->stream, n, lr / bc1, beta1, beta2, eps,
               wd, 1.0f / sqrtf(bc2), w, w_out, g, m, v);
}

/* ---- fused causal attention (runtime/attention_tiled.h) -------------------
 * The CPU reference's blocking and loop order: a block per (tile of rows,
 * head, sample), a thread per row of the tile (a query row in the forward and
 * dQ, a key in dK and dV), the other side's tiles in shared memory (2 x 32 x
 * 128 floats, 32 KiB), the thread's own row and sums in registers (local
 * memory past what registers hold). No T x T tensor is written. Kept simple
 * over fast: no tensor cores, one warp per block. */

#define ATTN_DH PT_ATTN_HEAD_DIM_MAX

__device__ float attn_dot(const float *x, const float *y, int n)
{
    float s = 0.0f;
    for (int d = 0; d < n; d++)
        s += x[d] * y[d];
    return s;
}

/* Rows k0.. (cols of them) of the Q, K or V columns at `col` of one head into
 * a shared tile, by all the block's threads. */
__device__ void attn_load(float (*tile)[ATTN_DH], const float *base, int64_t ld, int r0, int rows,
                          int dh)
{
    for (int i = threadIdx.x; i < rows * dh; i += blockDim.x)
        tile[i / dh][i % dh] = base[(int64_t)(r0 + i / dh) * ld + i % dh];
}

__global__ void k_attn_fused_fwd(int T, int H, int dh, float scale, const float *qkv, float *ctx,
                                 float *stats)
{
    __shared__ float ks[PT_ATTN_BC][ATTN_DH], vs[PT_ATTN_BC][ATTN_DH];
    int q0 = blockIdx.x * PT_ATTN_BR, h = blockIdx.y, s = blockIdx.z, t = q0 + threadIdx.x;
    int D = H * dh, end = min(q0 + PT_ATTN_BR, T);
    int64_t ld = 3 * (int64_t)D;
    const float *base = qkv + (int64_t)s * T * ld + (int64_t)h * dh;
    float q[ATTN_DH], o[ATTN_DH], sc[PT_ATTN_BC], m = -INFINITY, l = 0.0f;
    bool live = t < T;
    for (int d = 0; live && d < dh; d++) {
        q[d] = base[(int64_t)t * ld + d];
        o[d] = 0.0f;
    }
    for (int k0 = 0; k0 < end; k0 += PT_ATTN_BC) {
        int cols = min(PT_ATTN_BC, T - k0);
        __syncthreads();
        attn_load(ks, base + D, ld, k0, cols, dh);
        attn_load(vs, base + 2 * D, ld, k0, cols, dh);
        __syncthreads();
        if (!live || k0 > t)
            continue;
        int n = min(cols, t - k0 + 1);
        float mx = m;
        for (int c = 0; c < n; c++) {
            sc[c] = scale * attn_dot(q, ks[c], dh);
            mx = fmaxf(mx, sc[c]);
        }
        float corr = expf(m - mx);
        l *= corr;
        for (int d = 0; d < dh; d++)
            o[d] *= corr;
        for (int c = 0; c < n; c++) {
            float p = expf(sc[c] - mx);
            l += p;
            for (int d = 0; d < dh; d++)
                o[d] += p * vs[c][d];
        }
        m = mx;
    }
    if (!live)
        return;
    float *out = ctx + ((int64_t)s * T + t) * D + (int64_t)h * dh;
    for (int d = 0; d < dh; d++)
        out[d] = o[d] / l;
    int64_t st = ((int64_t)s * H + h) * PT_ATTN_STATS * T;
    stats[st + t] = m + logf(l);
    stats[st + T + t] = m;
}

/* delta = dO . O per (sample, head, query row). */
__global__ void k_attn_fused_delta(int64_t rows, int T, int H, int dh, const float *ctx,
                                   const float *dctx, float *delta)
{
    GRID_STRIDE(i, rows)
    {
        int64_t t = i % T, sh = i / T, s = sh / H, h = sh % H;
        int64_t at = (s * T + t) * H * dh + h * dh;
        float sum = 0.0f;
        for (int d = 0; d < dh; d++)
            sum += dctx[at + d] * ctx[at + d];
        delta[i] = sum;
    }
}

/* dK and dV: a thread per key j of the tile, over the query tiles that reach it. */
__global__ void k_attn_fused_bwd_kv(int T, int H, int dh, float scale, const float *qkv,
                                    const float *stats, const float *dctx, const float *delta,
                                    float *dqkv)
{
    __shared__ float qs[PT_ATTN_BR][ATTN_DH], dos[PT_ATTN_BR][ATTN_DH];
    __shared__ float lse[PT_ATTN_BR], dl[PT_ATTN_BR];
    int k0 = blockIdx.x * PT_ATTN_BC, h = blockIdx.y, s = blockIdx.z, j = k0 + threadIdx.x;
    int D = H * dh;
    int64_t ld = 3 * (int64_t)D, sh = (int64_t)s * H + h;
    const float *base = qkv + (int64_t)s * T * ld + (int64_t)h * dh;
    const float *dbase = dctx + (int64_t)s * T * D + (int64_t)h * dh;
    float k[ATTN_DH], v[ATTN_DH], dk[ATTN_DH], dv[ATTN_DH];
    bool live = j < T;
    for (int d = 0; live && d < dh; d++) {
        k[d] = base[(int64_t)j * ld + D + d];
        v[d] = base[(int64_t)j * ld + 2 * D + d];
        dk[d] = dv[d] = 0.0f;
    }
    for (int q0 = k0 / PT_ATTN_BR * PT_ATTN_BR; q0 < T; q0 += PT_ATTN_BR) {
        int rows = min(PT_ATTN_BR, T - q0);
        __syncthreads();
        attn_load(qs, base, ld, q0, rows, dh);
        attn_load(dos, dbase, D, q0, rows, dh);
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            lse[r] = stats[sh * PT_ATTN_STATS * T + q0 + r];
            dl[r] = delta[sh * T + q0 + r];
        }
        __syncthreads();
        for (int r = 0; live && r < rows; r++) {
            if (q0 + r < j)
                continue;
            float p = expf(scale * attn_dot(qs[r], k, dh) - lse[r]);
            float ds = p * (attn_dot(dos[r], v, dh) - dl[r]);
            for (int d = 0; d < dh; d++) {
                dv[d] += p * dos[r][d];
                dk[d] += scale * ds * qs[r][d];
            }
        }
    }
    if (!live)
        return;
    float *out = dqkv + ((int64_t)s * T + j) * ld + (int64_t)h * dh;
    for (int d = 0; d < dh; d++) {
        out[D + d] = dk[d];
        out[2 * D + d] = dv[d];
    }
}

/* dQ: a thread per query row t of the tile, over the key tiles it reaches. */
__global__ void k_attn_fused_bwd_q(int T, int H, int dh, float scale, const float *qkv,
                                   const float *stats, const float *dctx, const float *delta,
                                   float *dqkv)
{
    __shared__ float ks[PT_ATTN_BC][ATTN_DH], vs[PT_ATTN_BC][ATTN_DH];
    int q0 = blockIdx.x * PT_ATTN_BR, h = blockIdx.y, s = blockIdx.z, t = q0 + threadIdx.x;
    int D = H * dh, end = min(q0 + PT_ATTN_BR, T);
    int64_t ld = 3 * (int64_t)D, sh = (int64_t)s * H + h;
    const float *base = qkv + (int64_t)s * T * ld + (int64_t)h * dh;
    float q[ATTN_DH], dout[ATTN_DH], dq[ATTN_DH], lse = 0.0f, dl = 0.0f;
    bool live = t < T;
    if (live) {
        lse = stats[sh * PT_ATTN_STATS * T + t];
        dl = delta[sh * T + t];
    }
    for (int d = 0; live && d < dh; d++) {
        q[d] = base[(int64_t)t * ld + d];
        dout[d] = dctx[((int64_t)s * T + t) * D + (int64_t)h * dh + d];
        dq[d] = 0.0f;
    }
    for (int k0 = 0; k0 < end; k0 += PT_ATTN_BC) {
        int cols = min(PT_ATTN_BC, T - k0);
        __syncthreads();
        attn_load(ks, base + D, ld, k0, cols, dh);
        attn_load(vs, base + 2 * D, ld, k0, cols, dh);
        __syncthreads();
        for (int c = 0; live && c < cols && k0 + c <= t; c++) {
            float p = expf(scale * attn_dot(q, ks[c], dh) - lse);
            float ds = p * (attn_dot(dout, vs[c], dh) - dl);
            for (int d = 0; d < dh; d++)
                dq[d] += scale * ds * ks[c][d];
        }
    }
    if (!live)
        return;
    float *out = dqkv + ((int64_t)s * T + t) * ld + (int64_t)h * dh;
    for (int d = 0; d < dh; d++)
        out[d] = dq[d];
}

static void cu_attention_fused_fwd(const pt_backend *be, int n, int seq, int heads, int head_dim,
                                   float scale, const float *qkv, float *ctx, float *stats)
{
    if (n <= 0 || seq <= 0)
        return;
    dim3 grid((unsigned)((seq + PT_ATTN_BR - 1) / PT_ATTN_BR), (unsigned)heads, (unsigned)n);
    LAUNCH(k_attn_fused_fwd, grid, PT_ATTN_BR, ctx_of(be)->stream, seq, heads, head_dim, scale, qkv,
           ctx, stats);
}

static void cu_attention_fused_bwd(const pt_backend *be, int n, int seq, int heads, int head_dim,
                                   float scale, const float *qkv, const float *ctx,
                                   const float *stats, const float *dctx, float *delta, float *dqkv)
{
    if (n <= 0 || seq <= 0)
        return;
    cudaStream_t st = ctx_of(be)->stream;
    int64_t rows = (int64_t)n * heads * seq;
    LAUNCH(k_attn_fused_delta, blocks_for(rows), THREADS, st, rows, seq, heads, head_dim, ctx, dctx,
           delta);
    dim3 kv((unsigned)((seq + PT_ATTN_BC - 1) / PT_ATTN_BC), (unsigned)heads, (unsigned)n);
    LAUNCH(k_attn_fused_bwd_kv, kv, PT_ATTN_BC, st, seq, heads, head_dim, scale, qkv, stats, dctx,
           delta, dqkv);
    dim3 q((unsigned)((seq + PT_ATTN_BR - 1) / PT_ATTN_BR), (unsigned)heads, (unsigned)n);
    LAUNCH(k_attn_fused_bwd_q, q, PT_ATTN_BR, st, seq, heads, head_dim, scale, qkv, stats, dctx,
           delta, dqkv);
}

/* ---- the table and its life -------------------------------------------- */

static const pt_backend cuda_template = {
    "cuda",
    NULL,
    cu_alloc,
    cu_free,
    cu_upload,
    cu_download,
    cu_copy,
    cu_synchronize,
    cu_gemm,
    cu_gemm_batched,
    cu_axpy,
    cu_scale,
    cu_fill,
    cu_add,
    cu_dot,
    cu_add_row_vector,
    cu_col_sum,
    cu_relu_fwd,
    cu_relu_bwd,
    cu_gelu_fwd,
    cu_gelu_bwd,
    cu_layernorm_fwd,
    cu_layernorm_bwd,
    cu_embedding_fwd,
    cu_embedding_bwd,
    cu_attention_softmax_fwd,
    cu_attention_softmax_bwd,
    cu_softmax_xent_fwd,
    cu_softmax_xent_bwd,
    cu_sgd_update,
    cu_adam_update,
    cu_attention_fused_fwd,
    cu_attention_fused_bwd,
};

/* The number of visible devices, or PT_EUNSUPP with CUDA's own words when
 * it cannot tell (no driver, a driver too old for this runtime, ...): "no GPU
 * visible" is said only when CUDA found none. */
static int cu_device_probe(pt_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return pt_error_set(err, PT_EUNSUPP, "cuda: cudaGetDeviceCount: %s (%s)",
                            cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return n;
}

static int cu_device_count(void)
{
    int n = cu_device_probe(NULL);
    return n > 0 ? n : 0;
}

static int cu_device_name(int device, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    cudaDeviceProp prop;
    if (device < 0 || device >= cu_device_count() ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess)
        return PT_EUNSUPP;
    snprintf(buf, cap, "%s", prop.name);
    return 0;
}

static void ctx_free(cuda_ctx *c)
{
    cudaSetDevice(c->device);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->scalar)
        cudaFree(c->scalar);
    if (c->flag)
        cudaFree(c->flag);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

/* The context's device, stream and device scalars: cudaSuccess, or the
 * first failure with *what naming the call. */
static cudaError_t ctx_init_cuda(cuda_ctx *c, const char **what)
{
    cudaError_t e;
    *what = "cudaSetDevice";
    if ((e = cudaSetDevice(c->device)) != cudaSuccess)
        return e;
    *what = "cudaStreamCreate";
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        c->stream = NULL;
        return e;
    }
    *what = "cudaMalloc";
    if ((e = cudaMalloc((void **)&c->scalar, sizeof(double))) != cudaSuccess) {
        c->scalar = NULL;
        return e;
    }
    if ((e = cudaMalloc((void **)&c->flag, sizeof(int))) != cudaSuccess)
        c->flag = NULL;
    return e;
}

/* The cuBLAS handle on the context's stream; its status, *what naming the
 * call that failed. */
static cublasStatus_t ctx_init_blas(cuda_ctx *c, const char **what)
{
    *what = "cublasCreate";
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        return s;
    }
    *what = "cublasSetStream";
    return cublasSetStream(c->blas, c->stream);
}

static int cu_backend_create(int device, pt_cuda_math math, const pt_backend **out, pt_error *err)
{
    *out = NULL;
    int count = cu_device_probe(err);
    if (count < 0)
        return count;
    if (count == 0)
        return pt_error_set(err, PT_EUNSUPP,
                            "cuda: no GPU visible (cudaGetDeviceCount found none)");
    if (device < 0 || device >= count)
        return pt_error_set(err, PT_EUNSUPP, "cuda: no device %d (%d visible)", device, count);
    if ((int)math < PT_CUDA_FP32 || (int)math > PT_CUDA_BF16)
        return pt_error_set(err, PT_EINVAL, "cuda: unknown precision %d", (int)math);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return PT_ENOMEM;
    c->device = device;
    c->math = math;
    const char *what = "";
    cudaError_t e = ctx_init_cuda(c, &what);
    if (e != cudaSuccess) {
        cudaGetLastError();
        ctx_free(c);
        return pt_error_set(err, PT_EIO, "cuda: %s on device %d: %s", what, device,
                            cudaGetErrorString(e));
    }
    cublasStatus_t bs = ctx_init_blas(c, &what);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        ctx_free(c);
        return pt_error_set(err, PT_EIO, "cuda: %s on device %d: %s", what, device,
                            cublasGetStatusString(bs));
    }
    c->table = cuda_template;
    c->table.ctx = c;
    *out = &c->table;
    return 0;
}

static int cu_backend_is_cuda(const pt_backend *be)
{
    return be && be->alloc == cu_alloc;
}

static void cu_backend_destroy(const pt_backend **be_p)
{
    if (!be_p || !*be_p || !cu_backend_is_cuda(*be_p))
        return;
    ctx_free(ctx_of(*be_p));
    *be_p = NULL;
}

static int cu_backend_device(const pt_backend *be)
{
    return cu_backend_is_cuda(be) ? ctx_of(be)->device : -1;
}

static void *cu_backend_stream(const pt_backend *be)
{
    return cu_backend_is_cuda(be) ? (void *)ctx_of(be)->stream : NULL;
}

static int cu_device_bus_id(int device, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    if (device < 0 || device >= cu_device_count() || cap > INT32_MAX ||
        cudaDeviceGetPCIBusId(buf, (int)cap, device) != cudaSuccess) {
        cudaGetLastError();
        if (cap)
            buf[0] = '\0';
        return PT_EUNSUPP;
    }
    return 0;
}

static int cu_backend_bind(const pt_backend *be)
{
    if (!cu_backend_is_cuda(be))
        return 0;
    return cudaSetDevice(ctx_of(be)->device) == cudaSuccess ? 0 : PT_EIO;
}

static int cu_backend_mem_info(const pt_backend *be, int64_t *free_bytes, int64_t *total_bytes)
{
    if (!cu_backend_is_cuda(be))
        return PT_EUNSUPP;
    size_t f = 0, t = 0;
    cudaSetDevice(ctx_of(be)->device);
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaGetLastError();
        return PT_EIO;
    }
    if (free_bytes)
        *free_bytes = (int64_t)f;
    if (total_bytes)
        *total_bytes = (int64_t)t;
    return 0;
}

extern "C" void pt_cuda_module_fill_backend(pt_cuda_module *m)
{
    m->device_probe = cu_device_probe;
    m->device_count = cu_device_count;
    m->device_name = cu_device_name;
    m->device_bus_id = cu_device_bus_id;
    m->error_count = cu_error_count;
    m->backend_create = cu_backend_create;
    m->backend_destroy = cu_backend_destroy;
    m->backend_is_cuda = cu_backend_is_cuda;
    m->backend_device = cu_backend_device;
    m->backend_stream = cu_backend_stream;
    m->backend_bind = cu_backend_bind;
    m->backend_mem_info = cu_backend_mem_info;
}

/* CPU backend: OpenBLAS for gemm, plain C loops (vectorised by the compiler)
 * for everything else. Device memory is host memory here. */
#if defined(__GNUC__) && !defined(__clang__)
/* GCC's -O2 vectorises only loops that need no alias check and no epilogue,
 * i.e. none of these; the pointwise and optimizer loops are several times
 * faster vectorised (clang vectorises them at -O2 already). Without
 * no-trapping-math GCC will not if-convert the selects in exp_nonpos and
 * sigmoid; nothing here reads floating-point exception flags. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/error.h"
#include "runtime/attention_tiled.h"
#include "runtime/backend.h"

#define CPU_ALIGN_BYTES 64

static void *cpu_alloc(const pt_backend *be, size_t bytes)
{
    (void)be;
    size_t rounded = (bytes + CPU_ALIGN_BYTES - 1) / CPU_ALIGN_BYTES * CPU_ALIGN_BYTES;
    if (rounded == 0)
        rounded = CPU_ALIGN_BYTES;
    return aligned_alloc(CPU_ALIGN_BYTES, rounded);
}

static void cpu_free(const pt_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static void cpu_copy(const pt_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

static void cpu_synchronize(const pt_backend *be)
{
    (void)be;
}

static void cpu_gemm(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                     float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                     float *c, int ldc)
{
    (void)be;
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(int64_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(int64_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta == PT_TRANS ? CblasTrans : CblasNoTrans,
                tb == PT_TRANS ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
}

static void cpu_gemm_batched(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                             float alpha, const float *a, int lda, int64_t stride_a, const float *b,
                             int ldb, int64_t stride_b, float beta, float *c, int ldc,
                             int64_t stride_c, int batch)
{
    for (int i = 0; i < batch; i++)
        cpu_gemm(be, ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                 c + i * stride_c, ldc);
}

static void cpu_axpy(const pt_backend *be, int64_t n, float alpha, const float *x, float *y)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

static void cpu_scale(const pt_backend *be, int64_t n, float alpha, float *x)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        x[i] *= alpha;
}

static void cpu_fill(const pt_backend *be, int64_t n, float value, float *x)
{
    (void)be;
    if (value == 0.0f) {
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = value;
}

static void cpu_add(const pt_backend *be, int64_t n, const float *a, const float *b, float *y)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

static double cpu_dot(const pt_backend *be, int64_t n, const float *x, const float *y)
{
    (void)be;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * y[i];
    return s;
}

static void cpu_add_row_vector(const pt_backend *be, int rows, int cols, const float *v, float *y)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        float *yr = y + (int64_t)r * cols;
        for (int c = 0; c < cols; c++)
            yr[c] += v[c];
    }
}

static void cpu_col_sum(const pt_backend *be, int rows, int cols, const float *x, float beta,
                        float *out)
{
    (void)be;
    if (beta == 0.0f)
        memset(out, 0, (size_t)cols * sizeof *out);
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * cols;
        for (int c = 0; c < cols; c++)
            out[c] += xr[c];
    }
}

static void cpu_relu_fwd(const pt_backend *be, int64_t n, const float *x, float *y)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void cpu_relu_bwd(const pt_backend *be, int64_t n, const float *y, const float *dy,
                         float *dx)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) {
        float g = dy[i]; /* loaded unconditionally, so the loop vectorises */
        dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
}

/* exp(x) for x <= 0, for the pointwise kernels: Cephes' range reduction and
 * degree-6 polynomial (within a few ulp of expf), written so the compiler can
 * vectorise the loops that call it, which a call to libm's expf prevents.
 * Results below exp(EXP_LO) ~ 1.2e-38 are flushed to 0. The range guards are
 * selects between computed values, not clamps of x: clamping x to a constant
 * lets GCC constant-fold that path into a branch, which blocks vectorisation. */
#define EXP_LO       (-87.3f)
#define EXP_FLOOR_LO (-127.0f) /* keeps the int conversion in range */
static inline float exp_nonpos(float x)
{
    float fx = x * 1.44269504088896341f + 0.5f;
    fx = fx < EXP_FLOOR_LO ? EXP_FLOOR_LO : fx;
    /* floor(fx) by truncation: fx + 128 > 0 after the guard */
    float t = (float)((int32_t)(fx + 128.0f) - 128);
    float r = x - t * 0.693359375f + t * 2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale = {.i = ((int32_t)t + 127) * (1 << 23)};
    float y = p * scale.f;
    return x < EXP_LO ? 0.0f : y;
}

/* sigmoid(z) through exp(-|z|) <= 1, which cannot overflow. */
static inline float sigmoid(float z)
{
    float e = exp_nonpos(-fabsf(z));
    float r = 1.0f / (1.0f + e);
    float er = e * r; /* computed unconditionally, so the select vectorises */
    return z < 0.0f ? er : r;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* GELU's tanh form through 0.5(1 + tanh(u)) = sigmoid(2u): one exp instead
 * of tanhf, which is several times slower in glibc and dominated the GPT
 * step. */
static void cpu_gelu_fwd(const pt_backend *be, int64_t n, const float *x, float *y)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        y[i] = v * sigmoid(2.0f * u);
    }
}

/* d/dx [x s(2u)] = s + 2 x s (1 - s) u'(x), u'(x) = k (1 + 3 c x^2). */
static void cpu_gelu_bwd(const pt_backend *be, int64_t n, const float *x, const float *dy,
                         float *dx)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        float s = sigmoid(2.0f * u);
        float d = s + 2.0f * v * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        dx[i] = dy[i] * d;
    }
}

static void cpu_layernorm_fwd(const pt_backend *be, int rows, int cols, float eps, const float *x,
                              const float *gain, const float *bias, float *y, float *mean,
                              float *rstd)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * cols;
        float *yr = y + (int64_t)r * cols;
        double s = 0.0;
        for (int c = 0; c < cols; c++)
            s += xr[c];
        float mu = (float)(s / cols);
        double v = 0.0;
        for (int c = 0; c < cols; c++) {
            double d = xr[c] - mu;
            v += d * d;
        }
        float rs = (float)(1.0 / sqrt(v / cols + eps));
        for (int c = 0; c < cols; c++)
            yr[c] = (xr[c] - mu) * rs * gain[c] + bias[c];
        mean[r] = mu;
        rstd[r] = rs;
    }
}

static void cpu_layernorm_bwd(const pt_backend *be, int rows, int cols, const float *x,
                              const float *dy, const float *gain, const float *mean,
                              const float *rstd, float *dx, float *dgain, float *dbias)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * cols;
        const float *dyr = dy + (int64_t)r * cols;
        float mu = mean[r], rs = rstd[r];
        double sum_g = 0.0, sum_gx = 0.0; /* sums of dxhat and dxhat*xhat */
        for (int c = 0; c < cols; c++) {
            float xhat = (xr[c] - mu) * rs;
            float g = dyr[c] * gain[c];
            sum_g += g;
            sum_gx += (double)g * xhat;
            if (dgain) {
                dgain[c] += dyr[c] * xhat;
                dbias[c] += dyr[c];
            }
        }
        if (!dx)
            continue;
        float mg = (float)(sum_g / cols), mgx = (float)(sum_gx / cols);
        float *dxr = dx + (int64_t)r * cols;
        for (int c = 0; c < cols; c++) {
            float xhat = (xr[c] - mu) * rs;
            dxr[c] = rs * (dyr[c] * gain[c] - mg - xhat * mgx);
        }
    }
}

static int cpu_embedding_fwd(const pt_backend *be, int n, int seq, int dim, int vocab,
                             const float *ids, const float *table, const float *pos, float *y)
{
    (void)be;
    for (int64_t i = 0; i < (int64_t)n * seq; i++) {
        float f = ids[i];
        if (!(f >= 0.0f && f < (float)vocab) || f != floorf(f))
            return PT_ERANGE;
        const float *row = table + (int64_t)f * dim;
        float *yr = y + i * dim;
        if (pos) {
            const float *p = pos + (i % seq) * dim;
            for (int c = 0; c < dim; c++)
                yr[c] = row[c] + p[c];
        } else {
            memcpy(yr, row, (size_t)dim * sizeof *yr);
        }
    }
    return 0;
}

static void cpu_embedding_bwd(const pt_backend *be, int n, int seq, int dim, const float *ids,
                              const float *dy, float *dtable, float *dpos)
{
    (void)be;
    for (int64_t i = 0; i < (int64_t)n * seq; i++) {
        float *row = dtable + (int64_t)ids[i] * dim;
        const float *g = dy + i * dim;
        for (int c = 0; c < dim; c++)
            row[c] += g[c];
        if (dpos) {
            float *p = dpos + (i % seq) * dim;
            for (int c = 0; c < dim; c++)
                p[c] += g[c];
        }
    }
}

static void cpu_attention_softmax_fwd(const pt_backend *be, int64_t rows, int seq, float *s)
{
    (void)be;
    for (int64_t r = 0; r < rows; r++) {
        float *sr = s + r * seq;
        int t = (int)(r % seq);
        float mx = sr[0];
        for (int j = 1; j <= t; j++)
            mx = sr[j] > mx ? sr[j] : mx;
        /* exps and sum in separate loops: the first vectorises, an in-order
         * float sum does not */
        for (int j = 0; j <= t; j++)
            sr[j] = exp_nonpos(sr[j] - mx);
        float sum = 0.0f;
        for (int j = 0; j <= t; j++)
            sum += sr[j];
        float inv = 1.0f / sum;
        for (int j = 0; j <= t; j++)
            sr[j] *= inv;
        for (int j = t + 1; j < seq; j++)
            sr[j] = 0.0f;
    }
}

static void cpu_attention_softmax_bwd(const pt_backend *be, int64_t rows, int seq, const float *p,
                                      const float *dp, float *ds)
{
    (void)be;
    for (int64_t r = 0; r < rows; r++) {
        const float *pr = p + r * seq, *dpr = dp + r * seq;
        float *dsr = ds + r * seq;
        float dot = 0.0f;
        for (int j = 0; j < seq; j++)
            dot += pr[j] * dpr[j];
        for (int j = 0; j < seq; j++)
            dsr[j] = pr[j] * (dpr[j] - dot);
    }
}

static int cpu_softmax_xent_fwd(const pt_backend *be, int rows, int classes, const float *logits,
                                const int32_t *labels, float *probs, double *loss_sum)
{
    (void)be;
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *lr = logits + (int64_t)r * classes;
        float *pr = probs + (int64_t)r * classes;
        int32_t label = labels[r];
        if (label < 0 || label >= classes)
            return PT_ERANGE;
        float mx = lr[0];
        for (int c = 1; c < classes; c++)
            mx = lr[c] > mx ? lr[c] : mx;
        for (int c = 0; c < classes; c++)
            pr[c] = exp_nonpos(lr[c] - mx);
        double sum = 0.0;
        for (int c = 0; c < classes; c++)
            sum += pr[c];
        float inv = (float)(1.0 / sum);
        for (int c = 0; c < classes; c++)
            pr[c] *= inv;
        total += log(sum) + mx - lr[label];
    }
    *loss_sum = total;
    return 0;
}

static void cpu_softmax_xent_bwd(const pt_backend *be, int rows, int classes, const float *probs,
                                 const int32_t *labels, float scale, float *dlogits)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *pr = probs + (int64_t)r * classes;
        float *dr = dlogits + (int64_t)r * classes;
        for (int c = 0; c < classes; c++)
            dr[c] = scale * pr[c];
        dr[labels[r]] -= scale;
    }
}

static void cpu_sgd_update(const pt_backend *be, int64_t n, float lr, float momentum, float wd,
                           const float *w, float *w_out, const float *g, float *v)
{
    (void)be;
    if (wd == 0.0f) {
        for (int64_t i = 0; i < n; i++) {
            float vi = momentum * v[i] + g[i];
            v[i] = vi;
            w_out[i] = w[i] - lr * vi;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float vi = momentum * v[i] + g[i] + wd * w[i];
        v[i] = vi;
        w_out[i] = w[i] - lr * vi;
    }
}

static void cpu_adam_update(const pt_backend *be, int64_t n, float lr, float beta1, float beta2,
                            float eps, float wd, float bc1, float bc2, const float *w, float *w_out,
                            const float *g, float *m, float *v)
{
    (void)be;
    float step = lr / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w_out[i] = w[i] - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

/* The tiled reference at the blocking a GPU kernel uses. */
static void cpu_attention_fused_fwd(const pt_backend *be, int n, int seq, int heads, int head_dim,
                                    float scale, const float *qkv, float *ctx, float *stats)
{
    (void)be;
    pt_attn_shape a = {n, seq, heads, head_dim, scale, PT_ATTN_BR, PT_ATTN_BC};
    pt_attn_tiled_fwd(&a, NULL, qkv, ctx, stats);
}

static void cpu_attention_fused_bwd(const pt_backend *be, int n, int seq, int heads, int head_dim,
                                    float scale, const float *qkv, const float *ctx,
                                    const float *stats, const float *dctx, float *delta,
                                    float *dqkv)
{
    (void)be;
    pt_attn_shape a = {n, seq, heads, head_dim, scale, PT_ATTN_BR, PT_ATTN_BC};
    pt_attn_tiled_bwd(&a, NULL, qkv, ctx, stats, dctx, delta, dqkv);
}

static const pt_backend cpu_backend = {
    .name = "cpu",
    .ctx = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .gemm = cpu_gemm,
    .gemm_batched = cpu_gemm_batched,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .fill = cpu_fill,
    .add = cpu_add,
    .dot = cpu_dot,
    .add_row_vector = cpu_add_row_vector,
    .col_sum = cpu_col_sum,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .attention_softmax_fwd = cpu_attention_softmax_fwd,
    .attention_softmax_bwd = cpu_attention_softmax_bwd,
    .softmax_xent_fwd = cpu_softmax_xent_fwd,
    .softmax_xent_bwd = cpu_softmax_xent_bwd,
    .sgd_update = cpu_sgd_update,
    .adam_update = cpu_adam_update,
    .attention_fused_fwd = cpu_attention_fused_fwd,
    .attention_fused_bwd = cpu_attention_fused_bwd,
};

const pt_backend *pt_backend_cpu(void)
{
    return &cpu_backend;
}

const pt_backend *pt_backend_default(void)
{
    return &cpu_backend;
}

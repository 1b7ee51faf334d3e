/* A bf16 CPU reference (issue 28, the stand-in for bf16 storage): the CPU
 * backend with every value a bf16 GPU training stores in bf16 rounded to the
 * nearest bf16 (ties to even) as it is written: each op's activation output
 * (products, bias adds, residual sums, GELU/ReLU, layernorm, embedding,
 * attention probabilities and context) and each gradient (input gradients,
 * weight and bias gradients, accumulated in place as a bf16 buffer would be,
 * and the gradient scaling). What stays fp32, as in mixed-precision training:
 * layernorm's per-row statistics, the fused attention's softmax statistics
 * and delta, the loss layer's probabilities (fp32 logits), the optimizer's
 * update (fp32 master weights and moments), dot products. The weights a step
 * computes with are the caller's: a bf16-rounded copy of the fp32 master
 * (bf16_round_array), as a bf16 training keeps one.
 *
 * Storage stays 4 bytes per value: this reproduces bf16's rounding, not its
 * memory. Header-only, for tests. */
#ifndef PT_TESTS_RUNTIME_BF16_REF_H
#define PT_TESTS_RUNTIME_BF16_REF_H

#include <stdint.h>
#include <string.h>

#include "runtime/backend.h"

#define BF16_EXP_MASK 0x7f800000u
#define BF16_KEEP     0xffff0000u
#define BF16_HALF     0x7fffu

/* x to the nearest bf16, ties to even; infinities and NaNs unchanged. */
static inline float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & BF16_EXP_MASK) != BF16_EXP_MASK)
        u += BF16_HALF + ((u >> 16) & 1u);
    u &= BF16_KEEP;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline void bf16_round_array(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = bf16_round(x[i]);
}

/* rows x cols of a matrix with leading dimension ld, `batch` of them at stride. */
static inline void bf16_round_matrix(float *c, int rows, int cols, int ld, int64_t stride,
                                     int batch)
{
    for (int b = 0; b < batch; b++)
        for (int r = 0; r < rows; r++)
            bf16_round_array(c + b * stride + (int64_t)r * ld, cols);
}

static inline const pt_backend *bf16_cpu(void)
{
    return pt_backend_cpu();
}

static inline void bf16_gemm(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                             float alpha, const float *a, int lda, const float *b, int ldb,
                             float beta, float *c, int ldc)
{
    (void)be;
    bf16_cpu()->gemm(bf16_cpu(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    bf16_round_matrix(c, m, n, ldc, 0, 1);
}

static inline void bf16_gemm_batched(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n,
                                     int k, float alpha, const float *a, int lda, int64_t sa,
                                     const float *b, int ldb, int64_t sb, float beta, float *c,
                                     int ldc, int64_t sc, int batch)
{
    (void)be;
    bf16_cpu()->gemm_batched(bf16_cpu(), ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                             ldc, sc, batch);
    bf16_round_matrix(c, m, n, ldc, sc, batch);
}

static inline void bf16_axpy(const pt_backend *be, int64_t n, float alpha, const float *x, float *y)
{
    (void)be;
    bf16_cpu()->axpy(bf16_cpu(), n, alpha, x, y);
    bf16_round_array(y, n);
}

static inline void bf16_scale(const pt_backend *be, int64_t n, float alpha, float *x)
{
    (void)be;
    bf16_cpu()->scale(bf16_cpu(), n, alpha, x);
    bf16_round_array(x, n);
}

static inline void bf16_add(const pt_backend *be, int64_t n, const float *a, const float *b,
                            float *y)
{
    (void)be;
    bf16_cpu()->add(bf16_cpu(), n, a, b, y);
    bf16_round_array(y, n);
}

static inline void bf16_add_row_vector(const pt_backend *be, int rows, int cols, const float *v,
                                       float *y)
{
    (void)be;
    bf16_cpu()->add_row_vector(bf16_cpu(), rows, cols, v, y);
    bf16_round_array(y, (int64_t)rows * cols);
}

static inline void bf16_col_sum(const pt_backend *be, int rows, int cols, const float *x,
                                float beta, float *out)
{
    (void)be;
    bf16_cpu()->col_sum(bf16_cpu(), rows, cols, x, beta, out);
    bf16_round_array(out, cols);
}

static inline void bf16_relu_fwd(const pt_backend *be, int64_t n, const float *x, float *y)
{
    (void)be;
    bf16_cpu()->relu_fwd(bf16_cpu(), n, x, y);
    bf16_round_array(y, n);
}

static inline void bf16_relu_bwd(const pt_backend *be, int64_t n, const float *y, const float *dy,
                                 float *dx)
{
    (void)be;
    bf16_cpu()->relu_bwd(bf16_cpu(), n, y, dy, dx);
    bf16_round_array(dx, n);
}

static inline void bf16_gelu_fwd(const pt_backend *be, int64_t n, const float *x, float *y)
{
    (void)be;
    bf16_cpu()->gelu_fwd(bf16_cpu(), n, x, y);
    bf16_round_array(y, n);
}

static inline void bf16_gelu_bwd(const pt_backend *be, int64_t n, const float *x, const float *dy,
                                 float *dx)
{
    (void)be;
    bf16_cpu()->gelu_bwd(bf16_cpu(), n, x, dy, dx);
    bf16_round_array(dx, n);
}

static inline void bf16_layernorm_fwd(const pt_backend *be, int rows, int cols, float eps,
                                      const float *x, const float *gain, const float *bias,
                                      float *y, float *mean, float *rstd)
{
    (void)be;
    bf16_cpu()->layernorm_fwd(bf16_cpu(), rows, cols, eps, x, gain, bias, y, mean, rstd);
    bf16_round_array(y, (int64_t)rows * cols);
}

static inline void bf16_layernorm_bwd(const pt_backend *be, int rows, int cols, const float *x,
                                      const float *dy, const float *gain, const float *mean,
                                      const float *rstd, float *dx, float *dgain, float *dbias)
{
    (void)be;
    bf16_cpu()->layernorm_bwd(bf16_cpu(), rows, cols, x, dy, gain, mean, rstd, dx, dgain, dbias);
    if (dx)
        bf16_round_array(dx, (int64_t)rows * cols);
    if (dgain)
        bf16_round_array(dgain, cols);
    if (dbias)
        bf16_round_array(dbias, cols);
}

static inline int bf16_embedding_fwd(const pt_backend *be, int n, int seq, int dim, int vocab,
                                     const float *ids, const float *table, const float *pos,
                                     float *y)
{
    (void)be;
    int rc = bf16_cpu()->embedding_fwd(bf16_cpu(), n, seq, dim, vocab, ids, table, pos, y);
    if (rc == 0)
        bf16_round_array(y, (int64_t)n * seq * dim);
    return rc;
}

/* Rounds the table rows the ids touched (the others did not change). */
static inline void bf16_embedding_bwd(const pt_backend *be, int n, int seq, int dim,
                                      const float *ids, const float *dy, float *dtable, float *dpos)
{
    (void)be;
    bf16_cpu()->embedding_bwd(bf16_cpu(), n, seq, dim, ids, dy, dtable, dpos);
    for (int64_t i = 0; i < (int64_t)n * seq; i++)
        bf16_round_array(dtable + (int64_t)ids[i] * dim, dim);
    if (dpos)
        bf16_round_array(dpos, (int64_t)seq * dim);
}

static inline void bf16_attention_softmax_fwd(const pt_backend *be, int64_t rows, int seq, float *s)
{
    (void)be;
    bf16_cpu()->attention_softmax_fwd(bf16_cpu(), rows, seq, s);
    bf16_round_array(s, rows * seq);
}

static inline void bf16_attention_softmax_bwd(const pt_backend *be, int64_t rows, int seq,
                                              const float *p, const float *dp, float *ds)
{
    (void)be;
    bf16_cpu()->attention_softmax_bwd(bf16_cpu(), rows, seq, p, dp, ds);
    bf16_round_array(ds, rows * seq);
}

static inline void bf16_softmax_xent_bwd(const pt_backend *be, int rows, int classes,
                                         const float *probs, const int32_t *labels, float scale,
                                         float *dlogits)
{
    (void)be;
    bf16_cpu()->softmax_xent_bwd(bf16_cpu(), rows, classes, probs, labels, scale, dlogits);
    bf16_round_array(dlogits, (int64_t)rows * classes);
}

static inline void bf16_attention_fused_fwd(const pt_backend *be, int n, int seq, int heads,
                                            int head_dim, float scale, const float *qkv, float *ctx,
                                            float *stats)
{
    (void)be;
    bf16_cpu()->attention_fused_fwd(bf16_cpu(), n, seq, heads, head_dim, scale, qkv, ctx, stats);
    bf16_round_array(ctx, (int64_t)n * seq * heads * head_dim);
}

static inline void bf16_attention_fused_bwd(const pt_backend *be, int n, int seq, int heads,
                                            int head_dim, float scale, const float *qkv,
                                            const float *ctx, const float *stats, const float *dctx,
                                            float *delta, float *dqkv)
{
    (void)be;
    bf16_cpu()->attention_fused_bwd(bf16_cpu(), n, seq, heads, head_dim, scale, qkv, ctx, stats,
                                    dctx, delta, dqkv);
    bf16_round_array(dqkv, (int64_t)n * seq * 3 * heads * head_dim);
}

/* The reference's table: a static copy of the CPU backend's with the
 * entries above. Never freed. */
static inline const pt_backend *bf16_ref_backend(void)
{
    static pt_backend t;
    if (!t.name) {
        t = *bf16_cpu();
        t.gemm = bf16_gemm;
        t.gemm_batched = bf16_gemm_batched;
        t.axpy = bf16_axpy;
        t.scale = bf16_scale;
        t.add = bf16_add;
        t.add_row_vector = bf16_add_row_vector;
        t.col_sum = bf16_col_sum;
        t.relu_fwd = bf16_relu_fwd;
        t.relu_bwd = bf16_relu_bwd;
        t.gelu_fwd = bf16_gelu_fwd;
        t.gelu_bwd = bf16_gelu_bwd;
        t.layernorm_fwd = bf16_layernorm_fwd;
        t.layernorm_bwd = bf16_layernorm_bwd;
        t.embedding_fwd = bf16_embedding_fwd;
        t.embedding_bwd = bf16_embedding_bwd;
        t.attention_softmax_fwd = bf16_attention_softmax_fwd;
        t.attention_softmax_bwd = bf16_attention_softmax_bwd;
        t.softmax_xent_bwd = bf16_softmax_xent_bwd;
        t.attention_fused_fwd = bf16_attention_fused_fwd;
        t.attention_fused_bwd = bf16_attention_fused_bwd;
        t.name = "cpu-bf16-reference";
    }
    return &t;
}

#endif

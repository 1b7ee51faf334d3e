/* Compute backend: memory, BLAS-like and pointwise kernels behind a table of
 * function pointers (DESIGN.md "Runtime").
 *
 * Contract for every user of a backend (layers, nets, optimizers, the stage
 * executor): pointers handed to a backend op are *device pointers* of that
 * backend, obtained from be->alloc (usually through a pt_arena). Code outside
 * the backend never dereferences a device pointer; it moves data between host
 * and device with be->upload / be->download. On the CPU backend device memory
 * is host memory, but nothing may rely on that.
 *
 * Pointwise kernels. Rather than building every layer out of tiny generic
 * elementwise ops, the table has one entry per fused kernel a layer needs
 * (relu_fwd, gelu_fwd, layernorm_fwd, attention_softmax_fwd, softmax_xent_fwd,
 * adam_update, attention_fused_fwd, ...). The CPU backend implements them as plain C loops in
 * backend_cpu.c; a CUDA backend supplies its own kernels for the same entries
 * and cuBLAS for gemm. A new layer that needs a new kernel adds an entry at
 * the end of struct pt_backend and implements it in every backend.
 *
 * Ordering: ops are issued in order on one stream. Ops that return a value to
 * the host (dot, softmax_xent_fwd's loss, embedding_fwd's status) synchronize
 * implicitly; everything else may run asynchronously on a device backend.
 * be->synchronize waits for all issued ops (a no-op on the CPU).
 *
 * Layout: float32, row-major. gemm computes C = alpha*op(A)*op(B) + beta*C
 * with op(A) m x k, op(B) k x n, C m x n and leading dimensions counted in
 * floats between consecutive rows (as cblas_sgemm with CblasRowMajor). With
 * beta == 0, C is overwritten (NaNs in C are not propagated).
 *
 * Sizes are int for matrix dimensions and int64_t for flat element counts.
 * No op fails except where it returns a status; bad dimensions are a caller
 * bug (checked by assertions in debug builds of the CPU backend). */
#ifndef PT_RUNTIME_BACKEND_H
#define PT_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"

typedef enum pt_trans { PT_NO_TRANS = 0, PT_TRANS = 1 } pt_trans;

typedef struct pt_backend pt_backend;

struct pt_backend {
    const char *name; /* "cpu", "cuda" */
    void *ctx;        /* backend-private (device, stream, handles); NULL on the CPU */

    /* ---- memory ---- */
    /* Device memory of `bytes` bytes, aligned to at least 64 bytes, contents
     * undefined; NULL when out of memory (bytes == 0 gives a valid unique
     * pointer). Callers normally go through pt_arena, which accounts it. */
    void *(*alloc)(const pt_backend *be, size_t bytes);
    void (*free)(const pt_backend *be, void *ptr); /* NULL-safe */
    void (*upload)(const pt_backend *be, void *dst_dev, const void *src_host, size_t bytes);
    void (*download)(const pt_backend *be, void *dst_host, const void *src_dev, size_t bytes);
    void (*copy)(const pt_backend *be, void *dst_dev, const void *src_dev, size_t bytes);
    void (*synchronize)(const pt_backend *be);

    /* ---- BLAS-like ---- */
    void (*gemm)(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /* `batch` independent gemms; matrix i uses a + i*stride_a, b + i*stride_b,
     * c + i*stride_c (strides in floats), as cublasSgemmStridedBatched. */
    void (*gemm_batched)(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                         float alpha, const float *a, int lda, int64_t stride_a, const float *b,
                         int ldb, int64_t stride_b, float beta, float *c, int ldc, int64_t stride_c,
                         int batch);
    void (*axpy)(const pt_backend *be, int64_t n, float alpha, const float *x,
                 float *y);                                                /* y += a*x */
    void (*scale)(const pt_backend *be, int64_t n, float alpha, float *x); /* x *= a */
    void (*fill)(const pt_backend *be, int64_t n, float value, float *x);
    void (*add)(const pt_backend *be, int64_t n, const float *a, const float *b,
                float *y); /* y = a + b; y may alias a or b */
    /* Sum of x[i]*y[i] accumulated in double, returned to the host (syncs). */
    double (*dot)(const pt_backend *be, int64_t n, const float *x, const float *y);

    /* ---- row / column broadcasts and reductions on a rows x cols matrix ---- */
    void (*add_row_vector)(const pt_backend *be, int rows, int cols, const float *v,
                           float *y); /* y[r][c] += v[c] */
    /* out[c] = beta*out[c] + sum_r x[r][c]; beta is 0 (overwrite) or 1 (accumulate). */
    void (*col_sum)(const pt_backend *be, int rows, int cols, const float *x, float beta,
                    float *out);

    /* ---- pointwise layer kernels (n = element count) ---- */
    void (*relu_fwd)(const pt_backend *be, int64_t n, const float *x, float *y);
    /* dx = dy where y > 0, else 0 (y is the forward output); dx may alias dy. */
    void (*relu_bwd)(const pt_backend *be, int64_t n, const float *y, const float *dy, float *dx);
    /* GELU, tanh approximation: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))). */
    void (*gelu_fwd)(const pt_backend *be, int64_t n, const float *x, float *y);
    /* dx = dy * gelu'(x); dx may alias dy. */
    void (*gelu_bwd)(const pt_backend *be, int64_t n, const float *x, const float *dy, float *dx);
    /* Per row: y = (x - mean)*rstd*gain + bias, rstd = 1/sqrt(var + eps) with
     * the biased variance; mean[rows] and rstd[rows] are saved for backward. */
    void (*layernorm_fwd)(const pt_backend *be, int rows, int cols, float eps, const float *x,
                          const float *gain, const float *bias, float *y, float *mean, float *rstd);
    /* dx (overwritten; may be NULL when not needed) and, accumulated,
     * dgain[c] += sum_r dy*xhat, dbias[c] += sum_r dy (dgain and dbias both
     * NULL: skipped, the input half of a split backward). */
    void (*layernorm_bwd)(const pt_backend *be, int rows, int cols, const float *x, const float *dy,
                          const float *gain, const float *mean, const float *rstd, float *dx,
                          float *dgain, float *dbias);
    /* Token embedding plus optional positional table (pos NULL: none):
     * y[s][t][:] = table[ids[s*seq+t]][:] + pos[t][:], for s < n, t < seq.
     * Token ids are stored as floats (exact integers). Returns 0, or
     * PT_ERANGE (y undefined) when an id is not an integer in [0, vocab). */
    int (*embedding_fwd)(const pt_backend *be, int n, int seq, int dim, int vocab, const float *ids,
                         const float *table, const float *pos, float *y);
    /* Accumulates dtable[ids[s*seq+t]] += dy[s][t] and dpos[t] += dy[s][t]
     * (dpos NULL: no positional table). ids were checked by embedding_fwd. */
    void (*embedding_bwd)(const pt_backend *be, int n, int seq, int dim, const float *ids,
                          const float *dy, float *dtable, float *dpos);
    /* Causal softmax in place over `rows` rows of length seq; row r is query
     * position t = r % seq: entries j > t become 0, entries j <= t become the
     * softmax of s[r][0..t]. Scaling (1/sqrt(head dim)) is applied by the
     * caller through gemm's alpha. */
    void (*attention_softmax_fwd)(const pt_backend *be, int64_t rows, int seq, float *s);
    /* ds = p * (dp - sum_j p*dp) per row; ds may alias dp. Masked entries
     * (p == 0) get 0. */
    void (*attention_softmax_bwd)(const pt_backend *be, int64_t rows, int seq, const float *p,
                                  const float *dp, float *ds);
    /* probs = softmax(logits) per row; *loss_sum (host) = sum over rows of
     * -log probs[r][labels[r]] in double (syncs). labels are device int32.
     * Returns 0 or PT_ERANGE when a label is outside [0, classes). */
    int (*softmax_xent_fwd)(const pt_backend *be, int rows, int classes, const float *logits,
                            const int32_t *labels, float *probs, double *loss_sum);
    /* dlogits = scale * (probs - onehot(labels)); overwritten. */
    void (*softmax_xent_bwd)(const pt_backend *be, int rows, int classes, const float *probs,
                             const int32_t *labels, float scale, float *dlogits);

    /* ---- optimizer kernels (fused, one pass over the flat arrays) ---- */
    /* PyTorch's SGD: g' = g + wd*w; v = momentum*v + g'; w_out = w - lr*v.
     * w_out is w (in place) or an array of its own that does not overlap it
     * (out of place: w is left as it was, the weight version a stash still
     * reads); the same floats either way. */
    void (*sgd_update)(const pt_backend *be, int64_t n, float lr, float momentum, float wd,
                       const float *w, float *w_out, const float *g, float *v);
    /* PyTorch's Adam (L2 weight decay): g' = g + wd*w; m = b1*m + (1-b1)g';
     * v = b2*v + (1-b2)g'^2; w_out = w - lr * (m/bc1) / (sqrt(v/bc2) + eps),
     * where bc1 = 1-b1^t and bc2 = 1-b2^t are computed by the caller; w_out
     * as for sgd_update. */
    void (*adam_update)(const pt_backend *be, int64_t n, float lr, float beta1, float beta2,
                        float eps, float wd, float bc1, float bc2, const float *w, float *w_out,
                        const float *g, float *m, float *v);

    /* ---- fused causal attention (runtime/attention_tiled.h) ---- */
    /* Flash-attention forward on n samples of seq query rows, `heads` heads
     * of head_dim (1..PT_ATTN_HEAD_DIM_MAX): ctx (n x seq x heads*head_dim)
     * and the softmax statistics (n x heads x 2 x seq) from qkv (n x seq x
     * 3*heads*head_dim, columns Q | K | V), both overwritten, with scores
     * scale Q K^T; the layouts and the blocking are attention_tiled.h's. No
     * seq x seq tensor exists in device memory. */
    void (*attention_fused_fwd)(const pt_backend *be, int n, int seq, int heads, int head_dim,
                                float scale, const float *qkv, float *ctx, float *stats);
    /* Its backward from the forward's qkv, ctx and stats and dctx (the
     * gradient of ctx): dqkv (n x seq x 3*heads*head_dim) overwritten, not
     * overlapping the inputs; delta (n x heads x seq floats) is scratch. The
     * probabilities are recomputed tile by tile from the statistics. */
    void (*attention_fused_bwd)(const pt_backend *be, int n, int seq, int heads, int head_dim,
                                float scale, const float *qkv, const float *ctx, const float *stats,
                                const float *dctx, float *delta, float *dqkv);
};

/* The CPU backend (OpenBLAS for gemm, C loops for the rest). A static,
 * immutable table: never NULL, never freed. Threads: gemm uses OpenBLAS's
 * thread pool (OPENBLAS_NUM_THREADS); the other ops are single-threaded. */
const pt_backend *pt_backend_cpu(void);

/* The backend used when a caller passes NULL: the CPU backend for now. */
const pt_backend *pt_backend_default(void);

#endif

/* Causal multi-head self-attention on [T, D] per sample:
 *   qkv = x Wqkv + bqkv                      (one gemm over n*T rows)
 *   P_h = causal_softmax(Q_h K_h^T / sqrt(dh)) (per head, batched over samples)
 *   ctx_h = P_h V_h;  y = ctx Wo + bo
 * Unfused (the reference): saved per sample qkv [T, 3D], P [H, T, T],
 * ctx [T, D]; scratch dqkv [T, 3D], dP [H, T, T], dctx [T, D].
 * Fused (spec "fused": the backend's attention_fused_fwd/_bwd, the tiled
 * algorithm of runtime/attention_tiled.h): P is never stored; saved qkv,
 * the softmax statistics [H, 2, T] and ctx; scratch dqkv, delta [H, T] and
 * dctx.
 * Split backward: B leaves dqkv over the saved qkv (W reads dqkv, ctx and x,
 * never qkv, P or the statistics), so nothing more is kept than the unsplit
 * backward saves. */
#include <math.h>

#include "runtime/attention_tiled.h"
#include "runtime/layer.h"
#include "runtime/rng.h"

typedef struct dims {
    int T, D, H, dh, fused;
    int64_t qkv, ctx;    /* floats per sample */
    int64_t mid, mid_ws; /* per sample: P or the statistics (saved); dP or delta (scratch) */
} dims;

static dims dims_of(const pt_layer *l)
{
    dims d;
    d.T = l->in_dims[0];
    d.D = l->in_dims[1];
    d.H = l->spec.heads;
    d.dh = d.D / d.H;
    d.fused = l->spec.fused != 0;
    d.qkv = (int64_t)d.T * 3 * d.D;
    d.ctx = (int64_t)d.T * d.D;
    d.mid = d.fused ? (int64_t)d.H * PT_ATTN_STATS * d.T : (int64_t)d.H * d.T * d.T;
    d.mid_ws = d.fused ? (int64_t)d.H * d.T : d.mid;
    return d;
}

/* Regions of a saved (mid = d->mid) or scratch (d->mid_ws) area for n samples. */
static void split(const dims *d, int n, int64_t mid, float *base, float **qkv, float **p,
                  float **ctx)
{
    *qkv = base;
    *p = *qkv + pt_layer_align(n * d->qkv);
    *ctx = *p + pt_layer_align(n * mid);
}

static int attention_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    (void)spec;
    if (l->in_rank != 2)
        return pt_error_set(err, PT_EINVAL, "input: needs shape [T, D], got rank %d", l->in_rank);
    if (l->spec.heads < 1)
        return pt_error_set(err, PT_EINVAL, "heads: %d must be positive", l->spec.heads);
    if (l->in_dims[1] % l->spec.heads != 0)
        return pt_error_set(err, PT_EINVAL, "heads: dim %d is not divisible by heads %d",
                            l->in_dims[1], l->spec.heads);
    pt_layer_same_shape(l);
    dims d = dims_of(l);
    if (d.fused && d.dh > PT_ATTN_HEAD_DIM_MAX)
        return pt_error_set(err, PT_EINVAL,
                            "fused: head dim %d (dim %d / heads %d) is more than the fused "
                            "kernel's %d",
                            d.dh, d.D, d.H, PT_ATTN_HEAD_DIM_MAX);
    l->param_count = 4 * (int64_t)d.D * d.D + 4 * (int64_t)d.D;
    int64_t ends = pt_layer_align(max_batch * d.qkv) + pt_layer_align(max_batch * d.ctx);
    l->act_floats = ends + pt_layer_align(max_batch * d.mid);
    l->ws_floats = ends + pt_layer_align(max_batch * d.mid_ws);
    return 0;
}

/* Xavier uniform per projection (fan_in = fan_out = D): U(-sqrt(3/D), sqrt(3/D));
 * biases 0. */
static void attention_init(const pt_layer *l, float *w)
{
    dims d = dims_of(l);
    pt_rng rng = {l->seed_key, 0};
    double bound = sqrt(3.0 / d.D);
    float *wqkv = w, *bqkv = wqkv + (int64_t)d.D * 3 * d.D;
    float *wo = bqkv + 3 * d.D, *bo = wo + (int64_t)d.D * d.D;
    for (int64_t i = 0; i < (int64_t)d.D * 3 * d.D; i++)
        wqkv[i] = (float)pt_rng_uniform_range(&rng, -bound, bound);
    for (int64_t i = 0; i < (int64_t)d.D * d.D; i++)
        wo[i] = (float)pt_rng_uniform_range(&rng, -bound, bound);
    for (int i = 0; i < 3 * d.D; i++)
        bqkv[i] = 0.0f;
    for (int i = 0; i < d.D; i++)
        bo[i] = 0.0f;
}

/* The unfused core: P = causal_softmax(scale Q K^T) into p, ctx = P V. */
static void core_forward(const pt_backend *be, const dims *d, int n, const float *qkv, float *p,
                         float *ctx)
{
    int D3 = 3 * d->D;
    float scale = 1.0f / sqrtf((float)d->dh);
    for (int h = 0; h < d->H; h++) {
        const float *q = qkv + h * d->dh, *k = qkv + d->D + h * d->dh;
        be->gemm_batched(be, PT_NO_TRANS, PT_TRANS, d->T, d->T, d->dh, scale, q, D3, d->qkv, k, D3,
                         d->qkv, 0.0f, p + (int64_t)h * d->T * d->T, d->T, d->mid, n);
    }
    be->attention_softmax_fwd(be, (int64_t)n * d->H * d->T, d->T, p);
    for (int h = 0; h < d->H; h++) {
        const float *v = qkv + 2 * d->D + h * d->dh;
        be->gemm_batched(be, PT_NO_TRANS, PT_NO_TRANS, d->T, d->dh, d->T, 1.0f,
                         p + (int64_t)h * d->T * d->T, d->T, d->mid, v, D3, d->qkv, 0.0f,
                         ctx + h * d->dh, d->D, d->ctx, n);
    }
}

static int attention_forward(const pt_layer *l, pt_layer_run *r)
{
    const pt_backend *be = r->be;
    dims d = dims_of(l);
    int n = r->n, rows = n * d.T, D3 = 3 * d.D;
    const float *wqkv = r->w, *bqkv = wqkv + (int64_t)d.D * D3;
    const float *wo = bqkv + D3, *bo = wo + (int64_t)d.D * d.D;
    float *qkv, *p, *ctx;
    split(&d, n, d.mid, r->act, &qkv, &p, &ctx);

    be->gemm(be, PT_NO_TRANS, PT_NO_TRANS, rows, D3, d.D, 1.0f, r->x, d.D, wqkv, D3, 0.0f, qkv, D3);
    be->add_row_vector(be, rows, D3, bqkv, qkv);
    if (d.fused)
        be->attention_fused_fwd(be, n, d.T, d.H, d.dh, 1.0f / sqrtf((float)d.dh), qkv, ctx, p);
    else
        core_forward(be, &d, n, qkv, p, ctx);
    be->gemm(be, PT_NO_TRANS, PT_NO_TRANS, rows, d.D, d.D, 1.0f, ctx, d.D, wo, d.D, 0.0f, r->y,
             d.D);
    be->add_row_vector(be, rows, d.D, bo, r->y);
    return 0;
}

/* The unfused core's backward: dP, dV, the softmax's backward, dQ and dK
 * into dqkv, from the saved qkv and P and dctx (dp: scratch for dP). */
static void core_backward(const pt_backend *be, const dims *d, int n, const float *qkv, float *p,
                          const float *dctx, float *dp, float *dqkv)
{
    int D3 = 3 * d->D;
    int64_t tt = (int64_t)d->T * d->T;
    float scale = 1.0f / sqrtf((float)d->dh);
    for (int h = 0; h < d->H; h++) {
        const float *v = qkv + 2 * d->D + h * d->dh;
        const float *dctx_h = dctx + h * d->dh;
        float *p_h = p + h * tt, *dp_h = dp + h * tt;
        be->gemm_batched(be, PT_NO_TRANS, PT_TRANS, d->T, d->T, d->dh, 1.0f, dctx_h, d->D, d->ctx,
                         v, D3, d->qkv, 0.0f, dp_h, d->T, d->mid, n);
        be->gemm_batched(be, PT_TRANS, PT_NO_TRANS, d->T, d->dh, d->T, 1.0f, p_h, d->T, d->mid,
                         dctx_h, d->D, d->ctx, 0.0f, dqkv + 2 * d->D + h * d->dh, D3, d->qkv, n);
    }
    be->attention_softmax_bwd(be, (int64_t)n * d->H * d->T, d->T, p, dp, dp);
    for (int h = 0; h < d->H; h++) {
        const float *q = qkv + h * d->dh, *k = qkv + d->D + h * d->dh;
        const float *ds_h = dp + h * tt;
        be->gemm_batched(be, PT_NO_TRANS, PT_NO_TRANS, d->T, d->dh, d->T, scale, ds_h, d->T, d->mid,
                         k, D3, d->qkv, 0.0f, dqkv + h * d->dh, D3, d->qkv, n);
        be->gemm_batched(be, PT_TRANS, PT_NO_TRANS, d->T, d->dh, d->T, scale, ds_h, d->T, d->mid, q,
                         D3, d->qkv, 0.0f, dqkv + d->D + h * d->dh, D3, d->qkv, n);
    }
}

/* The input gradient: dctx, the core's backward into the scratch's dqkv,
 * then dx = dqkv Wqkv^T. With `keep_dqkv` (B of a split backward) dqkv is
 * then copied over the saved qkv, which only this half reads: W finds it
 * there. */
static void attention_input_grad(const pt_layer *l, pt_layer_run *r, int keep_dqkv)
{
    const pt_backend *be = r->be;
    dims d = dims_of(l);
    int n = r->n, rows = n * d.T, D3 = 3 * d.D;
    const float *wqkv = r->w, *bqkv = wqkv + (int64_t)d.D * D3;
    const float *wo = bqkv + D3;
    float *qkv, *p, *ctx, *dqkv, *dp, *dctx;
    split(&d, n, d.mid, r->act, &qkv, &p, &ctx);
    split(&d, n, d.mid_ws, r->ws, &dqkv, &dp, &dctx);

    be->gemm(be, PT_NO_TRANS, PT_TRANS, rows, d.D, d.D, 1.0f, r->dy, d.D, wo, d.D, 0.0f, dctx, d.D);
    if (d.fused)
        be->attention_fused_bwd(be, n, d.T, d.H, d.dh, 1.0f / sqrtf((float)d.dh), qkv, ctx, p, dctx,
                                dp, dqkv);
    else
        core_backward(be, &d, n, qkv, p, dctx, dp, dqkv);
    if (r->dx)
        be->gemm(be, PT_NO_TRANS, PT_TRANS, rows, d.D, D3, 1.0f, dqkv, D3, wqkv, D3, 0.0f, r->dx,
                 d.D);
    if (keep_dqkv)
        be->copy(be, qkv, dqkv, (size_t)rows * D3 * sizeof(float));
}

/* The weight gradient from dy, the saved ctx and x, and dqkv (in the
 * scratch after the unsplit backward's input half, over the saved qkv after
 * a split B). */
static void attention_weight_grad(const pt_layer *l, pt_layer_run *r, const float *dqkv)
{
    const pt_backend *be = r->be;
    dims d = dims_of(l);
    int n = r->n, rows = n * d.T, D3 = 3 * d.D;
    float *dwqkv = r->dw, *dbqkv = dwqkv + (int64_t)d.D * D3;
    float *dwo = dbqkv + D3, *dbo = dwo + (int64_t)d.D * d.D;
    float *qkv, *p, *ctx;
    split(&d, n, d.mid, r->act, &qkv, &p, &ctx);
    be->gemm(be, PT_TRANS, PT_NO_TRANS, d.D, d.D, rows, 1.0f, ctx, d.D, r->dy, d.D, 1.0f, dwo, d.D);
    be->col_sum(be, rows, d.D, r->dy, 1.0f, dbo);
    be->gemm(be, PT_TRANS, PT_NO_TRANS, d.D, D3, rows, 1.0f, r->x, d.D, dqkv, D3, 1.0f, dwqkv, D3);
    be->col_sum(be, rows, D3, dqkv, 1.0f, dbqkv);
}

static void attention_backward(const pt_layer *l, pt_layer_run *r)
{
    dims d = dims_of(l);
    float *dqkv, *dp, *dctx;
    split(&d, r->n, d.mid_ws, r->ws, &dqkv, &dp, &dctx);
    attention_input_grad(l, r, 0);
    attention_weight_grad(l, r, dqkv);
}

static void attention_backward_input(const pt_layer *l, pt_layer_run *r)
{
    attention_input_grad(l, r, 1);
}

static void attention_backward_weight(const pt_layer *l, pt_layer_run *r)
{
    attention_weight_grad(l, r, r->act); /* dqkv over the saved qkv, at its start */
}

const pt_layer_ops pt_layer_attention_ops = {
    .name = "attention",
    .create = attention_create,
    .init_params = attention_init,
    .forward = attention_forward,
    .backward = attention_backward,
    .backward_input = attention_backward_input,
    .backward_weight = attention_backward_weight,
};

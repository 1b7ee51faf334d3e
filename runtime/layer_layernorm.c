/* LayerNorm over the last dimension with learned gain and bias; saves each
 * row's mean and 1/std for backward. */
#include "runtime/layer.h"

#define LAYERNORM_DEFAULT_EPS 1e-5f

static int rows_per_sample(const pt_layer *l)
{
    return (int)(l->in_elems / l->in_dims[l->in_rank - 1]);
}

static float eps_of(const pt_layer *l)
{
    return l->spec.eps > 0.0f ? l->spec.eps : LAYERNORM_DEFAULT_EPS;
}

static int layernorm_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    (void)spec;
    if (l->spec.eps < 0.0f)
        return pt_error_set(err, PT_EINVAL, "eps: %g must not be negative", (double)l->spec.eps);
    pt_layer_same_shape(l);
    int64_t rows = (int64_t)max_batch * rows_per_sample(l);
    l->param_count = 2 * (int64_t)l->in_dims[l->in_rank - 1];
    l->act_floats = pt_layer_align(rows) * 2; /* mean, rstd */
    return 0;
}

static void layernorm_init(const pt_layer *l, float *w)
{
    int d = l->in_dims[l->in_rank - 1];
    for (int i = 0; i < d; i++) {
        w[i] = 1.0f;
        w[d + i] = 0.0f;
    }
}

static int layernorm_forward(const pt_layer *l, pt_layer_run *r)
{
    int d = l->in_dims[l->in_rank - 1];
    int rows = r->n * rows_per_sample(l);
    float *mean = r->act, *rstd = r->act + pt_layer_align(rows);
    r->be->layernorm_fwd(r->be, rows, d, eps_of(l), r->x, r->w, r->w + d, r->y, mean, rstd);
    return 0;
}

static void layernorm_backward(const pt_layer *l, pt_layer_run *r)
{
    int d = l->in_dims[l->in_rank - 1];
    int rows = r->n * rows_per_sample(l);
    const float *mean = r->act, *rstd = r->act + pt_layer_align(rows);
    r->be->layernorm_bwd(r->be, rows, d, r->x, r->dy, r->w, mean, rstd, r->dx, r->dw, r->dw + d);
}

static void layernorm_backward_input(const pt_layer *l, pt_layer_run *r)
{
    int d = l->in_dims[l->in_rank - 1];
    int rows = r->n * rows_per_sample(l);
    const float *mean = r->act, *rstd = r->act + pt_layer_align(rows);
    if (r->dx)
        r->be->layernorm_bwd(r->be, rows, d, r->x, r->dy, r->w, mean, rstd, r->dx, NULL, NULL);
}

static void layernorm_backward_weight(const pt_layer *l, pt_layer_run *r)
{
    int d = l->in_dims[l->in_rank - 1];
    int rows = r->n * rows_per_sample(l);
    const float *mean = r->act, *rstd = r->act + pt_layer_align(rows);
    r->be->layernorm_bwd(r->be, rows, d, r->x, r->dy, r->w, mean, rstd, NULL, r->dw, r->dw + d);
}

const pt_layer_ops pt_layer_layernorm_ops = {
    .name = "layernorm",
    .create = layernorm_create,
    .init_params = layernorm_init,
    .forward = layernorm_forward,
    .backward = layernorm_backward,
    .backward_input = layernorm_backward_input,
    .backward_weight = layernorm_backward_weight,
};

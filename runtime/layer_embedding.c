/* Embedding: token ids [T] (stored as floats) -> [T, dim] rows of a table
 * [vocab, dim], plus a learned positional table [T, dim] when positional. */
#include "runtime/layer.h"
#include "runtime/rng.h"

#define EMBEDDING_INIT_STD 0.02

static int embedding_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    (void)spec;
    (void)max_batch;
    if (l->in_rank != 1)
        return pt_error_set(err, PT_EINVAL, "input: needs token ids of shape [T], got rank %d",
                            l->in_rank);
    if (l->spec.vocab < 1)
        return pt_error_set(err, PT_EINVAL, "vocab: %d must be positive", l->spec.vocab);
    if (l->spec.dim < 1)
        return pt_error_set(err, PT_EINVAL, "dim: %d must be positive", l->spec.dim);
    int seq = l->in_dims[0];
    l->out_rank = 2;
    l->out_dims[0] = seq;
    l->out_dims[1] = l->spec.dim;
    l->out_elems = (int64_t)seq * l->spec.dim;
    l->param_count = (int64_t)l->spec.vocab * l->spec.dim + (l->spec.positional ? l->out_elems : 0);
    return 0;
}

static void embedding_init(const pt_layer *l, float *w)
{
    pt_rng rng = {l->seed_key, 0};
    for (int64_t i = 0; i < l->param_count; i++)
        w[i] = (float)(EMBEDDING_INIT_STD * pt_rng_normal(&rng));
}

static int embedding_forward(const pt_layer *l, pt_layer_run *r)
{
    int seq = l->in_dims[0], dim = l->spec.dim;
    const float *pos = l->spec.positional ? r->w + (int64_t)l->spec.vocab * dim : NULL;
    return r->be->embedding_fwd(r->be, r->n, seq, dim, l->spec.vocab, r->x, r->w, pos, r->y);
}

static void embedding_backward(const pt_layer *l, pt_layer_run *r)
{
    int seq = l->in_dims[0], dim = l->spec.dim;
    float *dpos = l->spec.positional ? r->dw + (int64_t)l->spec.vocab * dim : NULL;
    r->be->embedding_bwd(r->be, r->n, seq, dim, r->x, r->dy, r->dw, dpos);
    /* Token ids are not differentiable: their gradient is defined as 0. */
    if (r->dx)
        r->be->fill(r->be, r->n * l->in_elems, 0.0f, r->dx);
}

/* Token ids have no gradient (0); the table's is all of the backward. */
static void embedding_backward_input(const pt_layer *l, pt_layer_run *r)
{
    if (r->dx)
        r->be->fill(r->be, r->n * l->in_elems, 0.0f, r->dx);
}

static void embedding_backward_weight(const pt_layer *l, pt_layer_run *r)
{
    int seq = l->in_dims[0], dim = l->spec.dim;
    float *dpos = l->spec.positional ? r->dw + (int64_t)l->spec.vocab * dim : NULL;
    r->be->embedding_bwd(r->be, r->n, seq, dim, r->x, r->dy, r->dw, dpos);
}

const pt_layer_ops pt_layer_embedding_ops = {
    .name = "embedding",
    .create = embedding_create,
    .init_params = embedding_init,
    .forward = embedding_forward,
    .backward = embedding_backward,
    .backward_input = embedding_backward_input,
    .backward_weight = embedding_backward_weight,
};

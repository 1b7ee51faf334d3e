/* Pointwise activations: relu (backward from its output) and gelu (tanh
 * approximation, backward from its input). No parameters, nothing saved:
 * the chain keeps x and y. */
#include "runtime/layer.h"

static int pointwise_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    (void)spec;
    (void)max_batch;
    (void)err;
    pt_layer_same_shape(l);
    return 0;
}

static int relu_forward(const pt_layer *l, pt_layer_run *r)
{
    r->be->relu_fwd(r->be, r->n * l->in_elems, r->x, r->y);
    return 0;
}

static void relu_backward(const pt_layer *l, pt_layer_run *r)
{
    if (r->dx)
        r->be->relu_bwd(r->be, r->n * l->in_elems, r->y, r->dy, r->dx);
}

static int gelu_forward(const pt_layer *l, pt_layer_run *r)
{
    r->be->gelu_fwd(r->be, r->n * l->in_elems, r->x, r->y);
    return 0;
}

static void gelu_backward(const pt_layer *l, pt_layer_run *r)
{
    if (r->dx)
        r->be->gelu_bwd(r->be, r->n * l->in_elems, r->x, r->dy, r->dx);
}

const pt_layer_ops pt_layer_relu_ops = {
    .name = "relu",
    .create = pointwise_create,
    .forward = relu_forward,
    .backward = relu_backward,
};

const pt_layer_ops pt_layer_gelu_ops = {
    .name = "gelu",
    .create = pointwise_create,
    .forward = gelu_forward,
    .backward = gelu_backward,
};

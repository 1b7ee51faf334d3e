/* Softmax cross-entropy over the last dimension (classes). Output: the
 * probabilities. Loss: loss_scale * sum over rows of -log p[label]; its
 * gradient is loss_scale * (p - onehot). One label per row (per sample for a
 * classifier, per token for a token model). */
#include "runtime/layer.h"

static int xent_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    (void)spec;
    (void)max_batch;
    int last = l->in_dims[l->in_rank - 1];
    if (l->spec.classes < 1)
        return pt_error_set(err, PT_EINVAL, "classes: %d must be positive", l->spec.classes);
    if (last != l->spec.classes)
        return pt_error_set(err, PT_EINVAL, "classes: %d does not match its input's last dim %d",
                            l->spec.classes, last);
    pt_layer_same_shape(l);
    return 0;
}

static int xent_forward(const pt_layer *l, pt_layer_run *r)
{
    int classes = l->spec.classes;
    int rows = (int)(r->n * (l->in_elems / classes));
    double sum = 0.0;
    int rc = r->be->softmax_xent_fwd(r->be, rows, classes, r->x, r->labels, r->y, &sum);
    r->loss = r->loss_scale * sum;
    return rc;
}

static void xent_backward(const pt_layer *l, pt_layer_run *r)
{
    int classes = l->spec.classes;
    int rows = (int)(r->n * (l->in_elems / classes));
    if (r->dx)
        r->be->softmax_xent_bwd(r->be, rows, classes, r->y, r->labels, r->loss_scale, r->dx);
}

const pt_layer_ops pt_layer_softmax_xent_ops = {
    .name = "softmax_xent",
    .create = xent_create,
    .forward = xent_forward,
    .backward = xent_backward,
};

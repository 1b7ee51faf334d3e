/* Residual: y = x + body(x), the body a nested chain with the input's shape.
 * Saved area: [body output][body activation block]; scratch: the body's
 * scratch block. Parameters: the body's, in order. */
#include <stdlib.h>

#include "runtime/layer.h"

static int64_t body_out_floats(const pt_layer *l)
{
    return pt_layer_align(l->body->max_batch * l->in_elems);
}

static int residual_forward(const pt_layer *l, pt_layer_run *r)
{
    float *body_y = r->act;
    int rc = pt_chain_forward(l->body, r->be, r->n, r->w, r->x, body_y, r->act + body_out_floats(l),
                              r->ws, NULL, 0.0f, NULL);
    if (rc < 0)
        return rc;
    r->be->add(r->be, r->n * l->in_elems, r->x, body_y, r->y);
    return 0;
}

static void residual_backward(const pt_layer *l, pt_layer_run *r)
{
    float *body_y = r->act;
    pt_chain_backward(l->body, r->be, r->n, r->w, r->dw, r->x, body_y, r->act + body_out_floats(l),
                      r->ws, r->dy, r->dx, NULL, 0.0f);
    if (r->dx)
        r->be->axpy(r->be, r->n * l->in_elems, 1.0f, r->dy, r->dx);
}

static void residual_backward_input(const pt_layer *l, pt_layer_run *r)
{
    float *body_y = r->act;
    pt_chain_backward_input(l->body, r->be, r->n, r->w, r->x, body_y, r->act + body_out_floats(l),
                            r->ws, r->keep, r->dy, r->dx, NULL, 0.0f);
    if (r->dx)
        r->be->axpy(r->be, r->n * l->in_elems, 1.0f, r->dy, r->dx);
}

static void residual_backward_weight(const pt_layer *l, pt_layer_run *r)
{
    float *body_y = r->act;
    pt_chain_backward_weight(l->body, r->be, r->n, r->w, r->dw, r->x, body_y,
                             r->act + body_out_floats(l), r->keep, r->dy, NULL, NULL);
}

/* Gathered W: the body's W of every run at once, layer by layer, so its
 * linear layers stack the runs' rows too. */
static void residual_backward_weight_many(const pt_layer *l, const pt_layer_run *runs, int count,
                                          float *ws, int64_t ws_floats)
{
    pt_chain_wrun u[PT_CHAIN_WRUN_MAX];
    for (int k = 0; k < count && k < PT_CHAIN_WRUN_MAX; k++) {
        const pt_layer_run *r = &runs[k];
        u[k] = (pt_chain_wrun){r->n, r->x, r->act, r->act + body_out_floats(l), r->keep, r->dy};
    }
    pt_chain_backward_weight_many(l->body, runs[0].be, runs[0].w, runs[0].dw, count, u, ws,
                                  ws_floats, NULL, NULL);
}

static void residual_init(const pt_layer *l, float *w)
{
    pt_chain_init_params(l->body, w);
}

static void residual_destroy(pt_layer *l)
{
    pt_chain_destroy(l->body);
    free(l->body);
    l->body = NULL;
}

static int residual_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    if (spec->body_count < 1 || !spec->body)
        return pt_error_set(err, PT_EINVAL, "body: a residual needs at least one layer");
    for (int i = 0; i < spec->body_count; i++)
        if (pt_layer_kind_flags(spec->body[i].kind) & PT_LKF_LOSS)
            return pt_error_set(err, PT_EINVAL, "body[%d]: %s cannot be in a residual", i,
                                pt_layer_kind_name(spec->body[i].kind));
    l->body = calloc(1, sizeof *l->body);
    if (!l->body)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = pt_chain_create(l->body, spec->body, spec->body_count, l->in_rank, l->in_dims,
                             max_batch, l->seed_key, 0, err);
    if (rc < 0) {
        free(l->body);
        l->body = NULL;
        pt_error_prefix(err, "body");
        return rc;
    }
    if (l->body->out_elems != l->in_elems || l->body->out_rank != l->in_rank) {
        residual_destroy(l);
        return pt_error_set(err, PT_EINVAL, "body: output shape differs from the input's");
    }
    for (int i = 0; i < l->in_rank; i++)
        if (l->body->out_dims[i] != l->in_dims[i]) {
            residual_destroy(l);
            return pt_error_set(err, PT_EINVAL, "body: output shape differs from the input's");
        }
    pt_layer_same_shape(l);
    l->param_count = l->body->param_count;
    l->act_floats = body_out_floats(l) + l->body->act_floats;
    l->ws_floats = l->body->ws_floats;
    l->keep_floats = l->body->keep_floats;
    return 0;
}

const pt_layer_ops pt_layer_residual_ops = {
    .name = "residual",
    .create = residual_create,
    .destroy = residual_destroy,
    .init_params = residual_init,
    .forward = residual_forward,
    .backward = residual_backward,
    .backward_input = residual_backward_input,
    .backward_weight = residual_backward_weight,
    .backward_weight_many = residual_backward_weight_many,
};

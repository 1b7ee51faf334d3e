/* The layer registry (generated from protocol/layer_kinds.h) and chains of layers:
 * shape inference, block layout, forward and backward in order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/layer.h"
#include "runtime/rng.h"

static const pt_layer_ops *const layer_table[PT_LAYER_KIND_COUNT] = {
#define PT_LAYER_OPS_ROW_(E, name, flags) [PT_LAYER_##E] = &pt_layer_##name##_ops,
    PT_LAYER_LIST(PT_LAYER_OPS_ROW_)
#undef PT_LAYER_OPS_ROW_
};

const pt_layer_ops *pt_layer_ops_for(pt_layer_kind kind)
{
    if ((int)kind < 0 || kind >= PT_LAYER_KIND_COUNT)
        return NULL;
    return layer_table[kind];
}

void pt_chain_destroy(pt_chain *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->count; i++) {
        pt_layer *l = &c->layers[i];
        if (l->ops && l->ops->destroy)
            l->ops->destroy(l);
    }
    free(c->layers);
    memset(c, 0, sizeof *c);
}

static int64_t elems_of(int rank, const int *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

/* Creates layer i from its spec, given its input shape. */
static int create_layer(pt_layer *l, const pt_layer_spec *spec, int index, int in_rank,
                        const int *in_dims, int max_batch, uint64_t seed_key, pt_error *err)
{
    memset(l, 0, sizeof *l);
    l->ops = pt_layer_ops_for(spec->kind);
    if (!l->ops)
        return pt_error_set(err, PT_EINVAL, "layers[%d]: unknown layer kind %d", index,
                            (int)spec->kind);
    l->spec = *spec;
    l->spec.body = NULL;
    l->spec.body_count = 0;
    l->index = index;
    l->seed_key = pt_rng_key(seed_key, (uint64_t)index);
    l->in_rank = in_rank;
    memcpy(l->in_dims, in_dims, (size_t)in_rank * sizeof *in_dims);
    l->in_elems = elems_of(in_rank, in_dims);
    int rc = l->ops->create(l, spec, max_batch, err);
    if (rc < 0) {
        char where[PT_NAME_MAX + 32];
        snprintf(where, sizeof where, "layers[%d] (%s)", index,
                 spec->name[0] ? spec->name : l->ops->name);
        pt_error_prefix(err, where);
        return rc;
    }
    return 0;
}

int pt_chain_create(pt_chain *c, const pt_layer_spec *specs, int count, int in_rank,
                    const int *in_dims, int max_batch, uint64_t seed_key, int first_index,
                    pt_error *err)
{
    memset(c, 0, sizeof *c);
    if (count < 1 || !specs)
        return pt_error_set(err, PT_EINVAL, "a chain needs at least one layer");
    if (in_rank < 1 || in_rank > PT_SHAPE_MAX || max_batch < 1)
        return pt_error_set(err, PT_EINVAL, "bad chain input rank %d or batch %d", in_rank,
                            max_batch);
    c->layers = calloc((size_t)count, sizeof *c->layers);
    if (!c->layers)
        return pt_error_set(err, PT_ENOMEM, "out of memory for %d layers", count);
    c->max_batch = max_batch;
    c->in_rank = in_rank;
    memcpy(c->in_dims, in_dims, (size_t)in_rank * sizeof *in_dims);
    c->in_elems = elems_of(in_rank, in_dims);

    int rank = in_rank;
    int dims[PT_SHAPE_MAX];
    memcpy(dims, in_dims, (size_t)in_rank * sizeof *in_dims);
    int64_t params = 0, act = 0, dxbuf = 0, scratch = 0, keep = 0;
    for (int i = 0; i < count; i++) {
        pt_layer *l = &c->layers[i];
        int rc = create_layer(l, &specs[i], first_index + i, rank, dims, max_batch, seed_key, err);
        c->count = i + (rc == 0);
        if (rc < 0) {
            pt_chain_destroy(c);
            return rc;
        }
        if ((pt_layer_kind_flags(specs[i].kind) & PT_LKF_LOSS) && i != count - 1) {
            pt_chain_destroy(c);
            return pt_error_set(err, PT_EINVAL, "layers[%d] (%s): %s must be the last layer",
                                first_index + i, specs[i].name, l->ops->name);
        }
        l->param_offset = params;
        params += l->param_count;
        if (i < count - 1) {
            l->out_off = act;
            act += pt_layer_align(max_batch * l->out_elems);
        } else {
            l->out_off = -1;
        }
        l->act_off = act;
        act += pt_layer_align(l->act_floats);
        if (i > 0) {
            l->dx_off = dxbuf;
            dxbuf += pt_layer_align(max_batch * l->in_elems);
        } else {
            l->dx_off = -1;
        }
        if (l->param_count > 0 && i < count - 1) {
            l->dy_keep_off = keep;
            keep += pt_layer_align(max_batch * l->out_elems);
        } else {
            l->dy_keep_off = -1;
        }
        l->keep_off = keep;
        keep += pt_layer_align(l->keep_floats);
        if (l->ws_floats > scratch)
            scratch = pt_layer_align(l->ws_floats);
        rank = l->out_rank;
        memcpy(dims, l->out_dims, sizeof dims);
    }
    /* Every layer's scratch starts after the input-gradient buffers: only
     * one layer runs at a time, and it reads dy and writes dx meanwhile. */
    for (int i = 0; i < count; i++)
        c->layers[i].ws_off = dxbuf;
    c->out_rank = rank;
    memcpy(c->out_dims, dims, sizeof dims);
    c->out_elems = elems_of(rank, dims);
    c->param_count = params;
    c->act_floats = act;
    c->ws_floats = dxbuf + scratch;
    c->keep_floats = keep;
    return 0;
}

void pt_chain_init_params(const pt_chain *c, float *w_host)
{
    for (int i = 0; i < c->count; i++) {
        const pt_layer *l = &c->layers[i];
        if (l->param_count > 0 && l->ops->init_params)
            l->ops->init_params(l, w_host + l->param_offset);
    }
}

int pt_chain_forward(const pt_chain *c, const pt_backend *be, int n, const float *w, const float *x,
                     float *y, float *act, float *ws, const int32_t *labels, float loss_scale,
                     double *loss)
{
    if (loss)
        *loss = 0.0;
    const float *in = x;
    for (int i = 0; i < c->count; i++) {
        const pt_layer *l = &c->layers[i];
        pt_layer_run r = {
            .be = be,
            .n = n,
            .w = l->param_count ? w + l->param_offset : NULL,
            .x = in,
            .y = l->out_off < 0 ? y : act + l->out_off,
            .act = act + l->act_off,
            .ws = ws + l->ws_off,
            .labels = labels,
            .loss_scale = loss_scale,
        };
        int rc = l->ops->forward(l, &r);
        if (rc < 0)
            return rc;
        if (loss && (pt_layer_kind_flags(l->spec.kind) & PT_LKF_LOSS))
            *loss = r.loss;
        in = r.y;
    }
    return 0;
}

void pt_chain_backward(const pt_chain *c, const pt_backend *be, int n, const float *w, float *dw,
                       const float *x, const float *y, float *act, float *ws, const float *dy,
                       float *dx, const int32_t *labels, float loss_scale)
{
    pt_chain_backward_hooked(c, be, n, w, dw, x, y, act, ws, dy, dx, labels, loss_scale, NULL,
                             NULL);
}

void pt_chain_backward_hooked(const pt_chain *c, const pt_backend *be, int n, const float *w,
                              float *dw, const float *x, const float *y, float *act, float *ws,
                              const float *dy, float *dx, const int32_t *labels, float loss_scale,
                              void (*hook)(void *user, int layer), void *user)
{
    for (int i = c->count - 1; i >= 0; i--) {
        const pt_layer *l = &c->layers[i];
        const pt_layer *next = i + 1 < c->count ? &c->layers[i + 1] : NULL;
        pt_layer_run r = {
            .be = be,
            .n = n,
            .w = l->param_count ? w + l->param_offset : NULL,
            .dw = l->param_count ? dw + l->param_offset : NULL,
            .x = i == 0 ? x : act + c->layers[i - 1].out_off,
            .y = l->out_off < 0 ? (float *)y : act + l->out_off,
            .act = act + l->act_off,
            .ws = ws + l->ws_off,
            .dy = next ? ws + next->dx_off : dy,
            .dx = i == 0 ? dx : ws + l->dx_off,
            .labels = labels,
            .loss_scale = loss_scale,
        };
        l->ops->backward(l, &r);
        if (hook)
            hook(user, i);
    }
}

/* Where layer i's output gradient lives during a split backward's B: the
 * chain's dy for the last layer, its keep region when W reads it, else the
 * scratch (as in the unsplit backward). */
static const float *split_dy(const pt_chain *c, int i, float *ws, float *keep, const float *dy)
{
    const pt_layer *l = &c->layers[i];
    if (i == c->count - 1)
        return dy;
    return l->dy_keep_off >= 0 ? keep + l->dy_keep_off : ws + c->layers[i + 1].dx_off;
}

void pt_chain_backward_input(const pt_chain *c, const pt_backend *be, int n, const float *w,
                             const float *x, const float *y, float *act, float *ws, float *keep,
                             const float *dy, float *dx, const int32_t *labels, float loss_scale)
{
    for (int i = c->count - 1; i >= 0; i--) {
        const pt_layer *l = &c->layers[i];
        pt_layer_run r = {
            .be = be,
            .n = n,
            .w = l->param_count ? w + l->param_offset : NULL,
            .x = i == 0 ? x : act + c->layers[i - 1].out_off,
            .y = l->out_off < 0 ? (float *)y : act + l->out_off,
            .act = act + l->act_off,
            .ws = ws + l->ws_off,
            .keep = keep ? keep + l->keep_off : NULL, /* NULL: an empty keep block */
            .dy = split_dy(c, i, ws, keep, dy),
            .dx = i == 0 ? dx : (float *)split_dy(c, i - 1, ws, keep, dy),
            .labels = labels,
            .loss_scale = loss_scale,
        };
        if (l->ops->backward_input)
            l->ops->backward_input(l, &r);
        else
            l->ops->backward(l, &r); /* no parameters: all input gradient */
    }
}

void pt_chain_backward_weight_many(const pt_chain *c, const pt_backend *be, const float *w,
                                   float *dw, int count, const pt_chain_wrun *runs, float *ws,
                                   int64_t ws_floats, void (*hook)(void *user, int layer),
                                   void *user)
{
    pt_layer_run r[PT_CHAIN_WRUN_MAX];
    if (count > PT_CHAIN_WRUN_MAX)
        count = PT_CHAIN_WRUN_MAX;
    for (int i = c->count - 1; i >= 0; i--) {
        const pt_layer *l = &c->layers[i];
        if (l->ops->backward_weight && l->param_count > 0) {
            for (int k = 0; k < count; k++) {
                const pt_chain_wrun *u = &runs[k];
                float *kp = (float *)u->keep; /* layers only read it in W */
                r[k] = (pt_layer_run){
                    .be = be,
                    .n = u->n,
                    .w = w + l->param_offset,
                    .dw = dw + l->param_offset,
                    .x = i == 0 ? u->x : u->act + c->layers[i - 1].out_off,
                    .y = l->out_off < 0 ? (float *)u->y : u->act + l->out_off,
                    .act = u->act + l->act_off,
                    .keep = kp ? kp + l->keep_off : NULL,
                    .dy = i == c->count - 1 ? u->dy : kp + l->dy_keep_off,
                };
            }
            if (count > 1 && l->ops->backward_weight_many && ws)
                l->ops->backward_weight_many(l, r, count, ws, ws_floats);
            else
                for (int k = 0; k < count; k++)
                    l->ops->backward_weight(l, &r[k]);
        }
        if (hook)
            hook(user, i);
    }
}

void pt_chain_backward_weight(const pt_chain *c, const pt_backend *be, int n, const float *w,
                              float *dw, const float *x, const float *y, float *act,
                              const float *keep, const float *dy,
                              void (*hook)(void *user, int layer), void *user)
{
    pt_chain_wrun r = {n, x, y, act, keep, dy};
    pt_chain_backward_weight_many(c, be, w, dw, 1, &r, NULL, 0, hook, user);
}

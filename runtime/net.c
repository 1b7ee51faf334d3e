/* A net: one chain of layers, its flat parameter/gradient arrays, a shared
 * backward scratch block, and micro-batch slots whose activation blocks come
 * from the arena while the micro-batch is in flight. */
#include "runtime/net.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/layer.h"

#define NET_DEFAULT_BATCH 64
#define NET_DEFAULT_SEED  1

typedef struct slot {
    int busy;
    int split; /* a split backward's B ran; its W has not */
    int n;
    void *block;         /* arena block: x | y | act (unless recompute) | labels */
    float *keep;         /* split backward, B to W: the chain's keep block | the output gradient */
    const float *params; /* version its forward used */
    float loss_scale;    /* scale its forward used */
} slot;

struct pt_net {
    pt_chain chain;
    const pt_backend *be;
    pt_arena *arena;
    int own_arena;
    int first, last, max_batch, max_slots, recompute;
    uint64_t seed;
    float *params, *grads;
    float *ws;         /* backward scratch, shared by all slots */
    float *shared_act; /* recompute: the activation block every rerun uses */
    /* slot block layout, in floats from its start */
    int64_t y_off, act_off, labels_off, slot_floats;
    int has_loss, classes;
    int64_t label_count; /* per sample */
    double loss_scale;   /* 0: mean over each micro-batch */
    slot *slots;
    float *host_out;      /* count_correct: max_batch * out_elems */
    int32_t *host_labels; /* count_correct: max_batch * label_count */
    int recomputed_slot;  /* recompute: slot whose forward shared_act holds now, or -1 */
    int split_slot;       /* recompute: slot whose B's state shared_act holds now, or -1 */
    int64_t keep_dy_off;  /* in a keep block: the net's output gradient (-1: not kept) */
    int64_t keep_floats;  /* of a slot's keep block */
};

pt_net_config pt_net_config_default(const pt_model_spec *spec)
{
    pt_net_config cfg = {
        .first = 0,
        .last = spec ? spec->layer_count : 0,
        .max_batch = NET_DEFAULT_BATCH,
        .max_slots = 1,
        .recompute = 0,
        .seed = NET_DEFAULT_SEED,
        .backend = NULL,
        .arena = NULL,
    };
    return cfg;
}

/* Per-sample shape entering layer `first`: the model input pushed through
 * layers [0, first). */
static int input_shape(const pt_model_spec *spec, int first, int *rank, int *dims, pt_error *err)
{
    *rank = spec->input_rank;
    memcpy(dims, spec->input, sizeof spec->input);
    if (first == 0)
        return 0;
    pt_chain prefix;
    int rc =
        pt_chain_create(&prefix, spec->layers, first, spec->input_rank, spec->input, 1, 0, 0, err);
    if (rc < 0)
        return rc;
    *rank = prefix.out_rank;
    memcpy(dims, prefix.out_dims, sizeof prefix.out_dims);
    pt_chain_destroy(&prefix);
    return 0;
}

static int check_config(const pt_model_spec *spec, const pt_net_config *cfg, pt_error *err)
{
    if (!spec || !cfg || !spec->layers)
        return pt_error_set(err, PT_EINVAL, "net: no model spec or config");
    if (spec->input_rank < 1 || spec->input_rank > PT_SHAPE_MAX)
        return pt_error_set(err, PT_EINVAL, "%s: input: rank %d outside 1..%d", spec->name,
                            spec->input_rank, PT_SHAPE_MAX);
    for (int i = 0; i < spec->input_rank; i++)
        if (spec->input[i] < 1)
            return pt_error_set(err, PT_EINVAL, "%s: input[%d]: %d must be positive", spec->name, i,
                                spec->input[i]);
    if (cfg->first < 0 || cfg->last > spec->layer_count || cfg->first >= cfg->last)
        return pt_error_set(err, PT_EINVAL, "%s: layers [%d,%d) is not a non-empty range of 0..%d",
                            spec->name, cfg->first, cfg->last, spec->layer_count);
    if (cfg->max_batch < 1)
        return pt_error_set(err, PT_EINVAL, "net: max_batch %d must be positive", cfg->max_batch);
    if (cfg->max_slots < 1)
        return pt_error_set(err, PT_EINVAL, "net: max_slots %d must be positive", cfg->max_slots);
    return 0;
}

static int alloc_buffers(pt_net *net, pt_error *err)
{
    const pt_chain *c = &net->chain;
    int64_t n = c->param_count;
    net->params = pt_arena_alloc_floats(net->arena, PT_MEM_WEIGHTS, n);
    net->grads = pt_arena_alloc_floats(net->arena, PT_MEM_GRADS, n);
    net->ws = pt_arena_alloc_floats(net->arena, PT_MEM_ACTS, c->ws_floats);
    if (net->recompute)
        net->shared_act = pt_arena_alloc_floats(net->arena, PT_MEM_ACTS, c->act_floats);
    net->slots = calloc((size_t)net->max_slots, sizeof *net->slots);
    if (net->has_loss) {
        net->host_out = malloc((size_t)(net->max_batch * c->out_elems) * sizeof(float));
        net->host_labels = malloc((size_t)(net->max_batch * net->label_count) * sizeof(int32_t));
    }
    if (!net->params || !net->grads || !net->ws || (net->recompute && !net->shared_act) ||
        !net->slots || (net->has_loss && (!net->host_out || !net->host_labels)))
        return pt_error_set(err, PT_ENOMEM,
                            "net: out of memory for layers [%d,%d): %lld weights and as many "
                            "gradients (%.3g GiB), %lld floats of activations",
                            net->first, net->last, (long long)n,
                            2.0 * (double)n * sizeof(float) / (1 << 30), (long long)c->ws_floats);
    return 0;
}

int pt_net_create(const pt_model_spec *spec, const pt_net_config *cfg, pt_net **out, pt_error *err)
{
    *out = NULL;
    int rc = check_config(spec, cfg, err);
    if (rc < 0)
        return rc;
    pt_net *net = calloc(1, sizeof *net);
    if (!net)
        return pt_error_set(err, PT_ENOMEM, "net: out of memory");
    net->be = cfg->backend ? cfg->backend : pt_backend_default();
    net->first = cfg->first;
    net->last = cfg->last;
    net->max_batch = cfg->max_batch;
    net->max_slots = cfg->max_slots;
    net->recompute = cfg->recompute != 0;
    net->seed = cfg->seed;
    net->recomputed_slot = -1;
    net->split_slot = -1;
    if (cfg->arena) {
        net->arena = cfg->arena;
    } else {
        if ((rc = pt_arena_create(net->be, &net->arena)) < 0) {
            free(net);
            return pt_error_set(err, rc, "net: out of memory for its arena");
        }
        net->own_arena = 1;
    }

    int rank, dims[PT_SHAPE_MAX];
    if ((rc = input_shape(spec, cfg->first, &rank, dims, err)) < 0)
        goto fail;
    rc = pt_chain_create(&net->chain, spec->layers + cfg->first, cfg->last - cfg->first, rank, dims,
                         cfg->max_batch, cfg->seed, cfg->first, err);
    if (rc < 0)
        goto fail;
    const pt_chain *c = &net->chain;
    const pt_layer *tail = &c->layers[c->count - 1];
    if (pt_layer_kind_flags(tail->spec.kind) & PT_LKF_LOSS) {
        net->has_loss = 1;
        net->classes = tail->spec.classes;
        net->label_count = tail->in_elems / tail->spec.classes;
    }
    int64_t b = cfg->max_batch;
    net->y_off = pt_layer_align(b * c->in_elems);
    net->act_off = net->y_off + pt_layer_align(b * c->out_elems);
    net->labels_off = net->act_off + (net->recompute ? 0 : c->act_floats);
    /* int32 labels take one float's room each */
    net->slot_floats = net->labels_off + pt_layer_align(b * net->label_count);
    /* W of the last layer reads the output gradient, which the caller may
     * reuse after B: the keep block holds a copy when that layer has
     * parameters */
    net->keep_dy_off = tail->param_count > 0 ? c->keep_floats : -1;
    net->keep_floats =
        c->keep_floats + (net->keep_dy_off >= 0 ? pt_layer_align(b * c->out_elems) : 0);

    if ((rc = alloc_buffers(net, err)) < 0)
        goto fail;
    if ((rc = pt_net_init_params(net, NULL)) < 0) {
        pt_error_set(err, rc, "net: out of memory initialising parameters");
        goto fail;
    }
    pt_net_zero_grads(net);
    *out = net;
    return 0;
fail:
    pt_net_destroy(&net);
    return rc;
}

void pt_net_destroy(pt_net **net_p)
{
    if (!net_p || !*net_p)
        return;
    pt_net *net = *net_p;
    if (net->slots)
        for (int s = 0; s < net->max_slots; s++) {
            pt_arena_free(net->arena, net->slots[s].block);
            pt_arena_free(net->arena, net->slots[s].keep);
        }
    pt_arena_free(net->arena, net->params);
    pt_arena_free(net->arena, net->grads);
    pt_arena_free(net->arena, net->ws);
    pt_arena_free(net->arena, net->shared_act);
    if (net->own_arena)
        pt_arena_destroy(&net->arena);
    pt_chain_destroy(&net->chain);
    free(net->slots);
    free(net->host_out);
    free(net->host_labels);
    free(net);
    *net_p = NULL;
}

int pt_net_first(const pt_net *net)
{
    return net->first;
}
int pt_net_last(const pt_net *net)
{
    return net->last;
}
int pt_net_max_batch(const pt_net *net)
{
    return net->max_batch;
}
int pt_net_max_slots(const pt_net *net)
{
    return net->max_slots;
}
int64_t pt_net_in_elems(const pt_net *net)
{
    return net->chain.in_elems;
}
int64_t pt_net_out_elems(const pt_net *net)
{
    return net->chain.out_elems;
}
int pt_net_has_loss(const pt_net *net)
{
    return net->has_loss;
}
int64_t pt_net_label_count(const pt_net *net)
{
    return net->label_count;
}
int pt_net_classes(const pt_net *net)
{
    return net->classes;
}
int64_t pt_net_param_count(const pt_net *net)
{
    return net->chain.param_count;
}
int64_t pt_net_slot_bytes(const pt_net *net)
{
    return net->slot_floats * (int64_t)sizeof(float);
}
const pt_backend *pt_net_backend(const pt_net *net)
{
    return net->be;
}
pt_arena *pt_net_arena(const pt_net *net)
{
    return net->arena;
}
float *pt_net_params(pt_net *net)
{
    return net->params;
}

float *pt_net_swap_params(pt_net *net, float *params)
{
    float *old = net->params;
    pt_arena_swap_kinds(net->arena, old, params);
    net->params = params;
    return old;
}

float *pt_net_grads(pt_net *net)
{
    return net->grads;
}

int pt_net_layer_range(const pt_net *net, int layer, int64_t *offset, int64_t *count)
{
    if (layer < net->first || layer >= net->last)
        return PT_ERANGE;
    const pt_layer *l = &net->chain.layers[layer - net->first];
    if (offset)
        *offset = l->param_offset;
    if (count)
        *count = l->param_count;
    return 0;
}

int pt_net_layer_elems(const pt_net *net, int layer, int64_t *in_elems, int64_t *out_elems)
{
    if (layer < net->first || layer >= net->last)
        return PT_ERANGE;
    const pt_layer *l = &net->chain.layers[layer - net->first];
    if (in_elems)
        *in_elems = l->in_elems;
    if (out_elems)
        *out_elems = l->out_elems;
    return 0;
}

void pt_net_zero_grads(pt_net *net)
{
    net->be->fill(net->be, net->chain.param_count, 0.0f, net->grads);
}

float *pt_net_version_new(pt_net *net, pt_mem_kind kind, const float *src)
{
    float *v = pt_arena_alloc_floats(net->arena, kind, net->chain.param_count);
    if (v)
        pt_net_version_copy(net, v, src ? src : net->params);
    return v;
}

void pt_net_version_free(pt_net *net, float **array_p)
{
    if (!array_p || !*array_p)
        return;
    pt_arena_free(net->arena, *array_p);
    *array_p = NULL;
}

void pt_net_version_copy(pt_net *net, float *dst, const float *src)
{
    net->be->copy(net->be, dst, src, (size_t)net->chain.param_count * sizeof(float));
}

int pt_net_get_layer(pt_net *net, int layer, const float *array, float *host, int64_t count)
{
    int64_t off, n;
    if (pt_net_layer_range(net, layer, &off, &n) < 0)
        return PT_ERANGE;
    if (count != n)
        return PT_EINVAL;
    net->be->download(net->be, host, (array ? array : net->params) + off,
                      (size_t)n * sizeof(float));
    return 0;
}

int pt_net_set_layer(pt_net *net, int layer, float *array, const float *host, int64_t count)
{
    int64_t off, n;
    if (pt_net_layer_range(net, layer, &off, &n) < 0)
        return PT_ERANGE;
    if (count != n)
        return PT_EINVAL;
    net->be->upload(net->be, (array ? array : net->params) + off, host, (size_t)n * sizeof(float));
    return 0;
}

int pt_net_init_params(pt_net *net, float *array)
{
    int64_t n = net->chain.param_count;
    float *host = malloc((size_t)(n > 0 ? n : 1) * sizeof *host);
    if (!host)
        return PT_ENOMEM;
    pt_chain_init_params(&net->chain, host);
    net->be->upload(net->be, array ? array : net->params, host, (size_t)n * sizeof *host);
    free(host);
    return 0;
}

void pt_net_set_loss_scale(pt_net *net, double loss_scale)
{
    net->loss_scale = loss_scale > 0.0 ? loss_scale : 0.0;
}

double pt_net_loss_scale_for(const pt_net *net, int64_t global_batch)
{
    int64_t rows = global_batch * (net->label_count > 0 ? net->label_count : 1);
    return rows > 0 ? 1.0 / (double)rows : 0.0;
}

/* Pointers into a slot's block. */
static float *slot_x(const slot *s)
{
    return (float *)s->block;
}
static float *slot_y(const pt_net *net, const slot *s)
{
    return (float *)s->block + net->y_off;
}
static float *slot_act(const pt_net *net, const slot *s)
{
    return net->recompute ? net->shared_act : (float *)s->block + net->act_off;
}
static int32_t *slot_labels(const pt_net *net, const slot *s)
{
    return net->has_loss ? (int32_t *)((float *)s->block + net->labels_off) : NULL;
}

static void release(pt_net *net, slot *s)
{
    pt_arena_free(net->arena, s->block);
    pt_arena_free(net->arena, s->keep);
    s->block = NULL;
    s->keep = NULL;
    s->busy = 0;
    s->split = 0;
}

static int run_forward(pt_net *net, slot *s, const float **y, double *loss)
{
    double l = 0.0;
    int rc = pt_chain_forward(&net->chain, net->be, s->n, s->params, slot_x(s), slot_y(net, s),
                              slot_act(net, s), net->ws, slot_labels(net, s), s->loss_scale, &l);
    if (y)
        *y = slot_y(net, s);
    if (loss)
        *loss = l;
    return rc;
}

int pt_net_forward(pt_net *net, int slot_id, const float *params, const float *x, int n,
                   const int32_t *labels, const float **y, double *loss)
{
    if (y)
        *y = NULL;
    if (loss)
        *loss = 0.0;
    if (slot_id < 0 || slot_id >= net->max_slots || n < 1 || n > net->max_batch || !x)
        return PT_EINVAL;
    if ((labels != NULL) != (net->has_loss != 0))
        return PT_EINVAL;
    slot *s = &net->slots[slot_id];
    if (s->busy)
        return PT_ESTATE;
    size_t bytes = (size_t)net->slot_floats * sizeof(float);
    s->block = pt_arena_alloc(net->arena, PT_MEM_ACTS, bytes);
    if (!s->block)
        return PT_ENOMEM;
    s->busy = 1;
    s->n = n;
    s->params = params ? params : net->params;
    s->loss_scale = net->loss_scale > 0.0
                        ? (float)net->loss_scale
                        : (float)(1.0 / ((double)n * (net->label_count ? net->label_count : 1)));
    net->be->copy(net->be, slot_x(s), x, (size_t)(n * net->chain.in_elems) * sizeof(float));
    if (labels)
        net->be->upload(net->be, slot_labels(net, s), labels,
                        (size_t)(n * net->label_count) * sizeof(int32_t));
    if (net->recompute)
        net->recomputed_slot = net->split_slot = -1; /* this forward overwrites the shared block */
    int rc = run_forward(net, s, y, loss);
    if (rc < 0) {
        release(net, s);
        if (y)
            *y = NULL;
        return rc;
    }
    return 0;
}

typedef struct net_hook {
    void (*fn)(void *user, int layer);
    void *user;
    int first;
} net_hook;

static void net_hook_fn(void *u, int i)
{
    net_hook *h = u;
    h->fn(h->user, h->first + i);
}

static int backward(pt_net *net, int slot_id, const float *params, float *grads, const float *dy,
                    float *dx, net_hook *hook);

int pt_net_backward(pt_net *net, int slot_id, const float *params, float *grads, const float *dy,
                    float *dx)
{
    return backward(net, slot_id, params, grads, dy, dx, NULL);
}

int pt_net_backward_hooked(pt_net *net, int slot_id, const float *params, float *grads,
                           const float *dy, float *dx, void (*hook)(void *user, int layer),
                           void *user)
{
    net_hook h = {hook, user, net->first};
    return backward(net, slot_id, params, grads, dy, dx, hook ? &h : NULL);
}

static int backward(pt_net *net, int slot_id, const float *params, float *grads, const float *dy,
                    float *dx, net_hook *hook)
{
    if (slot_id < 0 || slot_id >= net->max_slots)
        return PT_EINVAL;
    slot *s = &net->slots[slot_id];
    if (!s->busy)
        return PT_ESTATE;
    if ((dy == NULL) != (net->has_loss != 0))
        return PT_EINVAL;
    if (s->split)
        return PT_ESTATE; /* its B ran: only its W is left */
    if (params && params != s->params) {
        s->params = params;
        net->recomputed_slot = -1;
    }
    if (net->recompute && net->recomputed_slot != slot_id) {
        int rc = run_forward(net, s, NULL, NULL);
        if (rc < 0) { /* cannot happen: the same data passed its forward */
            release(net, s);
            return rc;
        }
    }
    pt_chain_backward_hooked(&net->chain, net->be, s->n, s->params, grads ? grads : net->grads,
                             slot_x(s), slot_y(net, s), slot_act(net, s), net->ws, dy, dx,
                             slot_labels(net, s), s->loss_scale, hook ? net_hook_fn : NULL, hook);
    if (net->recomputed_slot == slot_id)
        net->recomputed_slot = -1;
    release(net, s);
    return 0;
}

int pt_net_backward_input(pt_net *net, int slot_id, const float *params, const float *dy, float *dx)
{
    if (slot_id < 0 || slot_id >= net->max_slots)
        return PT_EINVAL;
    slot *s = &net->slots[slot_id];
    if (!s->busy || s->split)
        return PT_ESTATE;
    if ((dy == NULL) != (net->has_loss != 0))
        return PT_EINVAL;
    if (params && params != s->params) {
        s->params = params;
        net->recomputed_slot = -1;
    }
    if (net->keep_floats > 0 && !s->keep &&
        !(s->keep = pt_arena_alloc_floats(net->arena, PT_MEM_ACTS, net->keep_floats)))
        return PT_ENOMEM;
    if (net->recompute && net->recomputed_slot != slot_id) {
        int rc = run_forward(net, s, NULL, NULL);
        if (rc < 0) { /* cannot happen: the same data passed its forward */
            release(net, s);
            return rc;
        }
    }
    pt_chain_backward_input(&net->chain, net->be, s->n, s->params, slot_x(s), slot_y(net, s),
                            slot_act(net, s), net->ws, s->keep, dy, dx, slot_labels(net, s),
                            s->loss_scale);
    if (net->keep_dy_off >= 0)
        net->be->copy(net->be, s->keep + net->keep_dy_off, dy,
                      (size_t)(s->n * net->chain.out_elems) * sizeof(float));
    s->split = 1;
    if (net->recompute) {
        /* B may leave in the shared block what W reads instead of the forward */
        net->recomputed_slot = -1;
        net->split_slot = slot_id;
    }
    return 0;
}

int pt_net_backward_weight_hooked(pt_net *net, int slot_id, const float *params, float *grads,
                                  void (*hook)(void *user, int layer), void *user)
{
    (void)params; /* W's layers read the array B used (none reads weights) */
    return pt_net_backward_weight_many(net, &slot_id, 1, grads, hook, user);
}

int pt_net_backward_weight_many(pt_net *net, const int *slot_ids, int count, float *grads,
                                void (*hook)(void *user, int layer), void *user)
{
    if (count < 1 || count > PT_CHAIN_WRUN_MAX || (net->recompute && count > 1))
        return PT_EINVAL;
    pt_chain_wrun runs[PT_CHAIN_WRUN_MAX];
    for (int k = 0; k < count; k++) {
        int id = slot_ids[k];
        if (id < 0 || id >= net->max_slots)
            return PT_EINVAL;
        slot *s = &net->slots[id];
        if (!s->busy || !s->split)
            return PT_ESTATE;
        for (int j = 0; j < k; j++)
            if (slot_ids[j] == id)
                return PT_EINVAL;
        if (net->recompute && net->split_slot != id)
            return PT_ESTATE; /* another forward overwrote the shared block since this B */
        runs[k] = (pt_chain_wrun){
            s->n,           slot_x(s),
            slot_y(net, s), slot_act(net, s),
            s->keep,        net->keep_dy_off >= 0 ? s->keep + net->keep_dy_off : NULL};
    }
    net_hook h = {hook, user, net->first};
    pt_chain_backward_weight_many(
        &net->chain, net->be, net->slots[slot_ids[0]].params, grads ? grads : net->grads, count,
        runs, net->ws, net->chain.ws_floats, hook ? net_hook_fn : NULL, hook ? &h : NULL);
    for (int k = 0; k < count; k++) {
        if (net->split_slot == slot_ids[k])
            net->split_slot = -1;
        release(net, &net->slots[slot_ids[k]]);
    }
    return 0;
}

int pt_net_backward_weight(pt_net *net, int slot_id, const float *params, float *grads)
{
    return pt_net_backward_weight_hooked(net, slot_id, params, grads, NULL, NULL);
}

int pt_net_slot_split(const pt_net *net, int slot_id)
{
    if (slot_id < 0 || slot_id >= net->max_slots)
        return 0;
    return net->slots[slot_id].busy && net->slots[slot_id].split;
}

int pt_net_recompute(pt_net *net, int slot_id, const float *params)
{
    if (slot_id < 0 || slot_id >= net->max_slots)
        return PT_EINVAL;
    slot *s = &net->slots[slot_id];
    if (!s->busy)
        return PT_ESTATE;
    if (!net->recompute)
        return 0;
    if (s->split)
        return PT_ESTATE;
    if (params)
        s->params = params;
    net->recomputed_slot = net->split_slot = -1;
    int rc = run_forward(net, s, NULL, NULL);
    if (rc < 0) { /* cannot happen: the same data passed its forward */
        release(net, s);
        return rc;
    }
    net->recomputed_slot = slot_id;
    return 0;
}

int pt_net_release(pt_net *net, int slot_id)
{
    if (slot_id < 0 || slot_id >= net->max_slots)
        return PT_EINVAL;
    slot *s = &net->slots[slot_id];
    if (s->busy)
        release(net, s);
    return 0;
}

int pt_net_slot_busy(const pt_net *net, int slot_id)
{
    if (slot_id < 0 || slot_id >= net->max_slots)
        return 0;
    return net->slots[slot_id].busy;
}

int pt_net_count_correct(pt_net *net, int slot_id, int64_t *correct, int64_t *rows)
{
    if (!net->has_loss || slot_id < 0 || slot_id >= net->max_slots)
        return PT_EINVAL;
    slot *s = &net->slots[slot_id];
    if (!s->busy)
        return PT_ESTATE;
    int64_t nrows = s->n * net->label_count;
    int classes = net->classes;
    net->be->download(net->be, net->host_out, slot_y(net, s),
                      (size_t)(nrows * classes) * sizeof(float));
    net->be->download(net->be, net->host_labels, slot_labels(net, s),
                      (size_t)nrows * sizeof(int32_t));
    int64_t ok = 0;
    for (int64_t r = 0; r < nrows; r++) {
        const float *p = net->host_out + r * classes;
        int best = 0;
        for (int c = 1; c < classes; c++)
            if (p[c] > p[best])
                best = c;
        ok += best == net->host_labels[r];
    }
    if (correct)
        *correct = ok;
    if (rows)
        *rows = nrows;
    return 0;
}

int pt_net_layer_memory(const pt_model_spec *spec, int layer, int batch, const pt_backend *backend,
                        int64_t *saved, int64_t *scratch, pt_error *err)
{
    if (!spec || !saved || !scratch || layer < 0 || layer >= spec->layer_count || batch < 1)
        return pt_error_set(err, PT_EINVAL, "layer memory: bad model, layer %d or batch %d", layer,
                            batch);
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = layer;
    cfg.last = layer + 1;
    cfg.max_batch = batch;
    cfg.backend = backend;
    pt_net *net = NULL;
    int rc = pt_net_create(spec, &cfg, &net, err);
    if (rc < 0)
        return rc;
    pt_mem_stats before, during;
    /* the input and labels live outside ACTS (COMM, host), so the arena's ACTS
     * holds the backward scratch, then also the slot; zeros are valid token
     * ids and labels */
    int64_t in = pt_net_in_elems(net) * batch, lab = pt_net_label_count(net) * batch;
    float *x = pt_arena_alloc_floats(net->arena, PT_MEM_COMM, in);
    float *host = calloc((size_t)in, sizeof *host);
    int32_t *labels = lab > 0 ? calloc((size_t)lab, sizeof *labels) : NULL;
    if (!x || !host || (lab > 0 && !labels)) {
        rc = pt_error_set(err, PT_ENOMEM, "layer memory: out of memory");
        goto done;
    }
    net->be->upload(net->be, x, host, (size_t)in * sizeof(float));
    pt_arena_stats(net->arena, &before);
    if ((rc = pt_net_forward(net, 0, NULL, x, batch, labels, NULL, NULL)) < 0) {
        rc = pt_error_set(err, rc, "layers[%d] (%s): forward: %s", layer, spec->layers[layer].name,
                          pt_strerror(rc));
        goto done;
    }
    pt_arena_stats(net->arena, &during);
    pt_net_release(net, 0);
    int64_t io = net->act_off * (int64_t)sizeof(float); /* the slot's x and y regions */
    *saved = during.current[PT_MEM_ACTS] - before.current[PT_MEM_ACTS] - io;
    *scratch = before.current[PT_MEM_ACTS];
done:
    free(host);
    free(labels);
    pt_arena_free(net->arena, x);
    pt_net_destroy(&net);
    return rc;
}

int pt_net_layer_keep(const pt_model_spec *spec, int layer, int batch, const pt_backend *backend,
                      int64_t *keep, pt_error *err)
{
    if (!spec || !keep || layer < 0 || layer >= spec->layer_count || batch < 1)
        return pt_error_set(err, PT_EINVAL, "layer keep: bad model, layer %d or batch %d", layer,
                            batch);
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = layer;
    cfg.last = layer + 1;
    cfg.max_batch = batch;
    cfg.backend = backend;
    pt_net *net = NULL;
    int rc = pt_net_create(spec, &cfg, &net, err);
    if (rc < 0)
        return rc;
    /* zeros are valid token ids, labels and gradients; the buffers are COMM
     * (and host), so ACTS grows only by what B allocates */
    int64_t in = pt_net_in_elems(net) * batch, out = pt_net_out_elems(net) * batch;
    int64_t lab = pt_net_label_count(net) * batch;
    float *x = pt_arena_alloc_floats(net->arena, PT_MEM_COMM, in);
    float *dy = pt_arena_alloc_floats(net->arena, PT_MEM_COMM, out);
    float *host = calloc((size_t)(in > out ? in : out), sizeof *host);
    int32_t *labels = lab > 0 ? calloc((size_t)lab, sizeof *labels) : NULL;
    pt_mem_stats before, during;
    if (!x || !dy || !host || (lab > 0 && !labels)) {
        rc = pt_error_set(err, PT_ENOMEM, "layer keep: out of memory");
        goto done;
    }
    net->be->upload(net->be, x, host, (size_t)in * sizeof(float));
    net->be->upload(net->be, dy, host, (size_t)out * sizeof(float));
    if ((rc = pt_net_forward(net, 0, NULL, x, batch, labels, NULL, NULL)) < 0) {
        rc = pt_error_set(err, rc, "layers[%d] (%s): forward: %s", layer, spec->layers[layer].name,
                          pt_strerror(rc));
        goto done;
    }
    pt_arena_stats(net->arena, &before);
    rc = pt_net_backward_input(net, 0, NULL, net->has_loss ? NULL : dy, NULL);
    pt_arena_stats(net->arena, &during);
    pt_net_release(net, 0);
    if (rc < 0) {
        rc = pt_error_set(err, rc, "layers[%d] (%s): backward: %s", layer, spec->layers[layer].name,
                          pt_strerror(rc));
        goto done;
    }
    *keep = during.current[PT_MEM_ACTS] - before.current[PT_MEM_ACTS];
done:
    free(host);
    free(labels);
    pt_arena_free(net->arena, x);
    pt_arena_free(net->arena, dy);
    pt_net_destroy(&net);
    return rc;
}

/* Layers and chains of layers: the compute of a model, below pt_net.
 *
 * Most code uses runtime/net.h; this header is for writing layers. A layer
 * kind is one line of protocol/layer_kinds.h; its compute is the
 * `pt_layer_<name>_ops` its runtime file defines (runtime/layer_<name>.c),
 * its facts (fields, shape, analytic cost, checkpoint tensors) its
 * `pt_layer_<name>_facts` (protocol/layer_kind.h).
 *
 * Data layout. Every activation is a row-major float matrix of n samples
 * times the layer's per-sample element count (in_elems, out_elems); a token
 * sequence [T] or [T, D] is T or T*D floats per sample. A layer's parameters
 * are a contiguous slice of the owning net's flat parameter array, in the
 * order its ops document (for checkpoints, which store them per layer):
 *   linear     W [in, out] (y = x W + b, so W is the transpose of PyTorch's
 *              weight), then b [out] when bias
 *   layernorm  gain [D], then bias [D]
 *   embedding  table [vocab, dim], then pos [seq, dim] when positional
 *   attention  Wqkv [D, 3D] (columns: Q | K | V, head h at h*D/heads), bqkv [3D],
 *              Wo [D, D], bo [D]
 *   residual   its body's layers' parameters, in body order
 *   relu, gelu, softmax_xent: none
 *
 * Memory. A chain is laid out once for a maximum batch: each layer gets a
 * region for its output (except the chain's last layer, whose output the
 * caller supplies) and a region for what it saves for backward, both inside
 * the chain's *activation block*; and a region in the chain's *scratch
 * block* (gradient of its input, and per-layer temporaries) that is shared
 * by all micro-batches. Offsets are relative to the block bases the caller
 * passes, so a residual nests its body's blocks inside its own regions and
 * the net can run a micro-batch on any activation block (one per slot, or
 * one shared block when recomputing). Layers never allocate.
 *
 * Split backward (zero-bubble schedules, Qi et al. ICLR'24). A backward may
 * run as two calls on the same micro-batch: B (pt_chain_backward_input), the
 * input gradient the previous stage waits for, then later W
 * (pt_chain_backward_weight), the parameter gradients. What W reads stays
 * put in between: the activation block (inputs, outputs, saved tensors; B
 * may overwrite saved tensors only W no longer reads with what W does read)
 * and the chain's *keep block*, which holds the gradient of the output of
 * every layer with parameters but the chain's last (whose output gradient
 * the caller passes to W again). Both halves together compute what the
 * backward computes, with the same operations, so the gradients are the
 * same. */
#ifndef PT_RUNTIME_LAYER_H
#define PT_RUNTIME_LAYER_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "runtime/backend.h"

typedef struct pt_layer pt_layer;
typedef struct pt_chain pt_chain;

/* Arguments of one forward or backward call of a layer on n samples. All
 * pointers are device pointers; capacities are for the chain's max batch. */
typedef struct pt_layer_run {
    const pt_backend *be;
    int n;                 /* samples in this micro-batch, 1..max_batch */
    const float *w;        /* the layer's parameter slice (NULL when it has none) */
    float *dw;             /* backward: its gradient slice, ACCUMULATED into */
    const float *x;        /* input, n x in_elems */
    float *y;              /* output, n x out_elems (forward writes; backward reads) */
    float *act;            /* saved-for-backward region, act_floats; kept between F and B */
    float *ws;             /* scratch region, ws_floats; not kept across calls */
    const float *dy;       /* backward: gradient of y (the loss layer ignores it) */
    float *keep;           /* split backward: the layer's keep region, keep_floats, kept from
                              B to W */
    float *dx;             /* backward: gradient of x, OVERWRITTEN; NULL: not needed */
    const int32_t *labels; /* softmax_xent: device int32, n * rows per sample */
    float loss_scale;      /* softmax_xent: loss = loss_scale * sum of -log p[label] */
    double loss;           /* softmax_xent forward: set to the scaled loss */
} pt_layer_run;

typedef struct pt_layer_ops {
    const char *name;
    /* Called with l->spec, l->in_* and l->seed_key set: checks the spec
     * against the input shape and fills out_rank/out_dims/out_elems,
     * param_count, act_floats and ws_floats for max_batch samples (and, for a
     * residual, builds l->body from spec->body). `spec` is the original spec
     * (only valid during the call). Returns 0 or PT_EINVAL with err naming
     * the field and the reason (the chain prefixes the layer). */
    int (*create)(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err);
    void (*destroy)(pt_layer *l); /* frees what create made; may be NULL */
    /* Writes the initial parameters (param_count floats, HOST memory),
     * drawn only from l->seed_key. NULL when the layer has none. */
    void (*init_params)(const pt_layer *l, float *w_host);
    /* Returns 0, or a negative PT_E* code for bad data (an out-of-range
     * token id or label: PT_ERANGE). */
    int (*forward)(const pt_layer *l, pt_layer_run *r);
    void (*backward)(const pt_layer *l, pt_layer_run *r);
    /* The split backward (see the header comment): backward_input writes
     * r->dx (NULL: not needed) and leaves in r->act / r->keep what
     * backward_weight needs; backward_weight, after it on the same data,
     * accumulates r->dw. Both NULL for a layer without parameters (its
     * backward is all input gradient and B runs it); a layer with
     * parameters defines both. */
    void (*backward_input)(const pt_layer *l, pt_layer_run *r);
    void (*backward_weight)(const pt_layer *l, pt_layer_run *r);
    /* Optional, gathered W: backward_weight of runs[0..count) (count >= 2,
     * same w and dw) at once, e.g. one gemm over all their rows stacked in
     * ws, ws_floats floats of scratch nothing else uses during W. The same
     * gradients up to the order of the sums. NULL: backward_weight run by
     * run. */
    void (*backward_weight_many)(const pt_layer *l, const pt_layer_run *runs, int count, float *ws,
                                 int64_t ws_floats);
} pt_layer_ops;

struct pt_layer {
    const pt_layer_ops *ops;
    pt_layer_spec spec; /* copy of the spec's scalars; spec.body is NULL (see body) */
    int index;          /* position in its chain; in a net's top chain, the global model index */
    uint64_t seed_key;  /* rng stream of this layer: pt_rng_key(seed, global index), nested
                           for residual bodies: pt_rng_key(parent key, body index) */
    int in_rank, in_dims[PT_SHAPE_MAX];
    int out_rank, out_dims[PT_SHAPE_MAX];
    int64_t in_elems, out_elems; /* floats per sample */
    int64_t param_count;         /* learnable floats */
    int64_t param_offset;        /* into the chain's parameter slice */
    int64_t act_floats;          /* saved-for-backward floats at max batch (incl. nested) */
    int64_t ws_floats;           /* scratch floats at max batch (incl. nested) */
    int64_t keep_floats;         /* split backward: keep floats at max batch (residual: its
                                    body's keep block); 0 for the others */
    /* Filled by the chain layout (floats, relative to the block bases): */
    int64_t out_off;     /* in the activation block; -1 for the chain's last layer */
    int64_t act_off;     /* in the activation block */
    int64_t dx_off;      /* in the scratch block: this layer's input gradient; -1 for the first */
    int64_t ws_off;      /* in the scratch block */
    int64_t keep_off;    /* in the keep block: the layer's keep region */
    int64_t dy_keep_off; /* in the keep block: the gradient of its output, kept from B to W;
                            -1 when not kept (no parameters, or the chain's last layer) */
    pt_chain *body;      /* residual: owned nested chain; NULL otherwise */
};

struct pt_chain {
    int count;
    pt_layer *layers; /* owned */
    int max_batch;
    int in_rank, in_dims[PT_SHAPE_MAX];
    int64_t in_elems, out_elems; /* floats per sample */
    int out_rank, out_dims[PT_SHAPE_MAX];
    int64_t param_count;
    int64_t act_floats;  /* activation block size, floats */
    int64_t ws_floats;   /* scratch block size, floats */
    int64_t keep_floats; /* keep block size, floats (split backward) */
};

/* The ops of a layer kind, or NULL for an invalid kind. */
const pt_layer_ops *pt_layer_ops_for(pt_layer_kind kind);

/* Builds a chain of `count` layers from specs[] for a per-sample input of
 * in_rank dims, at most max_batch samples. Layer i's index is first_index + i
 * and its seed key pt_rng_key(seed_key, first_index + i). Shape-infers and
 * lays out the blocks; allocates only host bookkeeping. On failure returns
 * PT_EINVAL/PT_ENOMEM with err naming the layer ("layers[3] (attention0):
 * dim 30 is not divisible by heads 4") and leaves *c empty. */
int pt_chain_create(pt_chain *c, const pt_layer_spec *specs, int count, int in_rank,
                    const int *in_dims, int max_batch, uint64_t seed_key, int first_index,
                    pt_error *err);
void pt_chain_destroy(pt_chain *c); /* NULL-safe; leaves *c zeroed */

/* Writes initial parameters of all layers into w_host (param_count floats). */
void pt_chain_init_params(const pt_chain *c, float *w_host);

/* Forward on n samples: x (n x in_elems) -> y (n x out_elems), using the
 * chain's parameter slice w, activation block `act` and scratch block `ws`.
 * labels/loss_scale are passed to a softmax_xent layer; *loss (may be NULL)
 * receives its scaled loss, or 0 when the chain has none. Returns 0 or the
 * first layer's error. */
int pt_chain_forward(const pt_chain *c, const pt_backend *be, int n, const float *w, const float *x,
                     float *y, float *act, float *ws, const int32_t *labels, float loss_scale,
                     double *loss);

/* Backward after a forward with the same n, w, x, y, act and labels:
 * accumulates parameter gradients into dw, writes dx (NULL: skip). dy is the
 * gradient of y (ignored when the last layer is softmax_xent). */
void pt_chain_backward(const pt_chain *c, const pt_backend *be, int n, const float *w, float *dw,
                       const float *x, const float *y, float *act, float *ws, const float *dy,
                       float *dx, const int32_t *labels, float loss_scale);
/* pt_chain_backward calling hook(user, i) after layer i's backward (the
 * layers run from the last down), when hook is not NULL: layer i's parameter
 * gradients are final then (DDP's gradient-ready hook). */
void pt_chain_backward_hooked(const pt_chain *c, const pt_backend *be, int n, const float *w,
                              float *dw, const float *x, const float *y, float *act, float *ws,
                              const float *dy, float *dx, const int32_t *labels, float loss_scale,
                              void (*hook)(void *user, int layer), void *user);

/* The split backward (see the header comment). backward_input: the input
 * gradient dx (NULL: skip) after a forward with the same n, w, x, y, act and
 * labels; it leaves in act and `keep` (the chain's keep block,
 * keep_floats) what backward_weight reads. backward_weight, later, with the
 * same n, w, x, y, act, keep and the same dy (the chain's output gradient;
 * ignored when the last layer is softmax_xent): accumulates the parameter
 * gradients into dw, calling hook(user, i) after layer i's (last layer
 * first; hook may be NULL). B then W computes what pt_chain_backward does. */
void pt_chain_backward_input(const pt_chain *c, const pt_backend *be, int n, const float *w,
                             const float *x, const float *y, float *act, float *ws, float *keep,
                             const float *dy, float *dx, const int32_t *labels, float loss_scale);
void pt_chain_backward_weight(const pt_chain *c, const pt_backend *be, int n, const float *w,
                              float *dw, const float *x, const float *y, float *act,
                              const float *keep, const float *dy,
                              void (*hook)(void *user, int layer), void *user);

/* W of several micro-batches at once (gathered weight gradients): what
 * pt_chain_backward_weight does for each run, layer by layer (last layer
 * first, every run's W of a layer before the next layer's), so a layer's
 * gradient is written while it is in cache rather than once per micro-batch
 * through memory. A layer with backward_weight_many takes all runs in one
 * call with ws (the chain's scratch block, ws_floats floats, free during W)
 * as its scratch, which changes only the order of the sums; the others run
 * one run at a time in the order given. At most PT_CHAIN_WRUN_MAX runs.
 * hook(user, i) runs once per layer, after every run's W of layer i. */
#define PT_CHAIN_WRUN_MAX 64
typedef struct pt_chain_wrun {
    int n;
    const float *x, *y;
    float *act;
    const float *keep, *dy;
} pt_chain_wrun;
void pt_chain_backward_weight_many(const pt_chain *c, const pt_backend *be, const float *w,
                                   float *dw, int count, const pt_chain_wrun *runs, float *ws,
                                   int64_t ws_floats, void (*hook)(void *user, int layer),
                                   void *user);

/* Alignment of every region in a block, floats (64 bytes). */
#define PT_LAYER_ALIGN_FLOATS 16

/* n rounded up to a multiple of PT_LAYER_ALIGN_FLOATS. */
static inline int64_t pt_layer_align(int64_t n)
{
    return (n + PT_LAYER_ALIGN_FLOATS - 1) / PT_LAYER_ALIGN_FLOATS * PT_LAYER_ALIGN_FLOATS;
}

/* Sets l's output shape to its input shape (pointwise layers). */
static inline void pt_layer_same_shape(pt_layer *l)
{
    l->out_rank = l->in_rank;
    for (int i = 0; i < PT_SHAPE_MAX; i++)
        l->out_dims[i] = l->in_dims[i];
    l->out_elems = l->in_elems;
}

/* The layer kinds' ops (runtime/layer_<kind>.c), registered in runtime/layers.c. */
#define PT_LAYER_OPS_DECL_(E, name, flags) extern const pt_layer_ops pt_layer_##name##_ops;
PT_LAYER_LIST(PT_LAYER_OPS_DECL_)
#undef PT_LAYER_OPS_DECL_

#endif

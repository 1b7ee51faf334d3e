/* A net: layers [first, last) of a model spec on one backend — a whole model
 * ([0, layer_count)) or one pipeline stage.
 *
 * Parameters. All parameters of the net live in ONE contiguous float array
 * (pt_net_params) and their gradients in another (pt_net_grads), both
 * pt_net_param_count floats, laid out layer after layer (pt_net_layer_range
 * gives each top-level layer's slice; the order inside a layer is in
 * runtime/layer.h). A weight version (PipeDream stash, 2BW double buffer) is
 * any other array of the same size — pt_net_version_new makes one — and
 * forward/backward take the array to use, so versions are whole-array
 * copies. Initial values depend only on (seed, global layer index): a stage
 * [3,8) starts with exactly the weights of layers 3..7 of the full model.
 *
 * Micro-batch slots. A forward runs micro-batch `slot` (0..max_slots-1) and
 * keeps what its backward needs in that slot's activation block until
 * pt_net_backward (or pt_net_release) on the same slot, so up to max_slots
 * micro-batches can be in flight, forwarded and backwarded in any order
 * (GPipe, 1F1B, PipeDream). A slot's block is allocated from the arena as
 * PT_MEM_ACTS when its forward starts and freed when its backward ends; the
 * arena caches it, so after the first iteration nothing is allocated, and the
 * ACTS figure of the arena is the activation memory of the micro-batches in
 * flight, plus a constant part allocated at create: the backward scratch
 * (input-gradient buffers and layer temporaries for one micro-batch) and,
 * with recompute, the shared activation block. With recompute, a slot keeps only its input (and
 * output and labels); backward reruns the forward into one shared block first.
 *
 * Loss. When the net's last layer is softmax_xent (pt_net_has_loss), forward
 * takes int32 labels (pt_net_label_count per sample: 1 for a classifier,
 * T for a token model) and returns loss_scale * sum over rows of -log p, and
 * its output is the probabilities. With loss_scale = 1/(global batch * rows
 * per sample) (pt_net_set_loss_scale with pt_net_loss_scale_for) the losses
 * and gradients of the micro-batches of a global batch SUM to the mean loss
 * of the global batch and its gradient. The default (0) means "mean over
 * this micro-batch", right for single-device training.
 *
 * Memory ownership: every device buffer of the net comes from its arena
 * (given, or owned by the net). Pointers in and out are device pointers of
 * the net's backend (any host pointer on the CPU backend), except where a
 * function says host.
 *
 * Threads: a net is used by one thread at a time. */
#ifndef PT_RUNTIME_NET_H
#define PT_RUNTIME_NET_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "runtime/backend.h"
#include "runtime/tensor.h"

typedef struct pt_net pt_net;

typedef struct pt_net_config {
    int first, last;           /* top-level layer range [first, last) of the model */
    int max_batch;             /* samples per micro-batch, >= 1 */
    int max_slots;             /* micro-batches in flight, >= 1 */
    int recompute;             /* 1: keep only slot inputs, recompute forward in backward */
    uint64_t seed;             /* initial parameters */
    const pt_backend *backend; /* NULL: pt_backend_default() */
    pt_arena *arena;           /* NULL: the net creates and owns an arena; else borrowed,
                                  must outlive the net */
} pt_net_config;

/* The whole model, max_batch 64, 1 slot, no recompute, seed 1, default
 * backend, own arena. spec may be NULL (then last is 0: set it). */
pt_net_config pt_net_config_default(const pt_model_spec *spec);

/* Builds the net for cfg->first..cfg->last of spec: shape inference from the
 * model input through layer last-1, buffers (params, grads, backward scratch,
 * and the shared recompute block) allocated from the arena, parameters
 * initialised from cfg->seed, gradients zeroed. spec is only read during the
 * call. On success *out owns a new net; on failure *out is NULL, the result
 * is PT_EINVAL (bad range, batch, slots or layer shapes; err names the field
 * or the layer), PT_ENOMEM, or PT_ENOFIT (the arena's limit). */
int pt_net_create(const pt_model_spec *spec, const pt_net_config *cfg, pt_net **out, pt_error *err);

/* Frees the net's buffers back to the arena (and the arena if the net owns
 * it). NULL-safe; sets *net_p = NULL. Arrays from pt_net_version_new are not
 * freed: free them first with pt_net_version_free. */
void pt_net_destroy(pt_net **net_p);

/* ---- shape and layout ---- */
int pt_net_first(const pt_net *net); /* global index of the first layer */
int pt_net_last(const pt_net *net);  /* one past the last */
int pt_net_max_batch(const pt_net *net);
int pt_net_max_slots(const pt_net *net);
int64_t pt_net_in_elems(const pt_net *net);    /* input floats per sample */
int64_t pt_net_out_elems(const pt_net *net);   /* output floats per sample */
int pt_net_has_loss(const pt_net *net);        /* 1 when the last layer is softmax_xent */
int64_t pt_net_label_count(const pt_net *net); /* labels per sample; 0 without loss */
int pt_net_classes(const pt_net *net);         /* softmax_xent classes; 0 without loss */
int64_t pt_net_param_count(const pt_net *net); /* floats in the parameter array */
/* Slice of top-level layer `layer` (GLOBAL index, first <= layer < last) in the
 * parameter/gradient arrays. Returns 0 or PT_ERANGE. count may be 0. */
int pt_net_layer_range(const pt_net *net, int layer, int64_t *offset, int64_t *count);
/* Per-sample float counts entering and leaving top-level layer `layer`
 * (GLOBAL index), e.g. for a profile's activation bytes. 0 or PT_ERANGE. */
int pt_net_layer_elems(const pt_net *net, int layer, int64_t *in_elems, int64_t *out_elems);
/* Activation bytes one in-flight micro-batch holds (the slot block). */
int64_t pt_net_slot_bytes(const pt_net *net);
const pt_backend *pt_net_backend(const pt_net *net);
/* What top-level layer `layer` of spec needs for its backward at micro-batch
 * size `batch`, read off the arena of a net of that layer alone (backend
 * NULL: the default): *saved, the bytes one micro-batch's forward keeps
 * besides its input and output (the slot's growth less those two, 64-byte
 * aligned), and *scratch, the backward scratch the net lays out at create.
 * These are a profile's saved_bytes and scratch_bytes (`pipetop profile`).
 * Returns 0, PT_EINVAL (bad argument), or the net's error (err says which). */
int pt_net_layer_memory(const pt_model_spec *spec, int layer, int batch, const pt_backend *backend,
                        int64_t *saved, int64_t *scratch, pt_error *err);
/* What top-level layer `layer` of spec keeps from the input half of a split
 * backward to its weight half at micro-batch size `batch` (*keep, bytes, a
 * profile's keep_bytes): read off the arena of a net of that layer alone as
 * the ACTS growth of pt_net_backward_input. Returns 0, PT_EINVAL, or the
 * net's error. */
int pt_net_layer_keep(const pt_model_spec *spec, int layer, int batch, const pt_backend *backend,
                      int64_t *keep, pt_error *err);
pt_arena *pt_net_arena(const pt_net *net);

/* ---- parameter and gradient arrays (device) ---- */
float *pt_net_params(pt_net *net); /* the current version; owned by the net */
/* Makes `params` (param_count floats from this net's arena, e.g. a
 * pt_net_version_new array) the current version and returns the array it
 * replaces, which the caller now owns (free it with pt_net_version_free).
 * The arena's categories are exchanged with it: params counts as weights,
 * the old array as whatever params was counted as. */
float *pt_net_swap_params(pt_net *net, float *params);
float *pt_net_grads(pt_net *net);  /* owned by the net */
void pt_net_zero_grads(pt_net *net);

/* A new array of param_count floats from the net's arena under `kind`
 * (PT_MEM_STASH for weight versions), holding a copy of `src` (NULL: the
 * current parameters). NULL on no memory. Free with pt_net_version_free. */
float *pt_net_version_new(pt_net *net, pt_mem_kind kind, const float *src);
void pt_net_version_free(pt_net *net, float **array_p); /* NULL-safe; sets *array_p = NULL */
/* dst = src, whole arrays of param_count floats (device to device). */
void pt_net_version_copy(pt_net *net, float *dst, const float *src);

/* Copies top-level layer `layer`'s slice of `array` (a param, grad or
 * version array of this net; NULL: the current parameters) to host memory
 * `host` of `count` floats / from host memory into it. For checkpoints.
 * Returns 0, PT_ERANGE (layer outside the net) or PT_EINVAL (count differs
 * from the layer's parameter count). */
int pt_net_get_layer(pt_net *net, int layer, const float *array, float *host, int64_t count);
int pt_net_set_layer(pt_net *net, int layer, float *array, const float *host, int64_t count);

/* Writes the initial parameters (from the net's seed) into array (NULL: the
 * current parameters): what pt_net_create did. Returns 0 or PT_ENOMEM (it
 * needs a temporary host buffer of param_count floats). */
int pt_net_init_params(pt_net *net, float *array);

/* ---- running micro-batches ---- */
/* Sets the loss scale (see the header comment); 0 restores the default. */
void pt_net_set_loss_scale(pt_net *net, double loss_scale);
/* 1 / (global_batch * label rows per sample): the scale that makes the
 * micro-batch losses of a global batch of global_batch samples sum to its mean. */
double pt_net_loss_scale_for(const pt_net *net, int64_t global_batch);

/* Forward of micro-batch `slot` on n samples (1..max_batch):
 *   params: parameter array to use (NULL: the current one); the same array
 *           must stay unchanged until this slot's backward (weight stashing);
 *   x:      input, n * in_elems floats (token ids as floats for an embedding
 *           first layer); copied into the slot, so the caller may reuse it;
 *   labels: HOST int32, n * label_count, when pt_net_has_loss; else NULL;
 *           copied into the slot;
 *   *y:     (may be NULL) the output, n * out_elems floats (probabilities at
 *           the loss layer), owned by the slot: valid until the slot's
 *           backward or release;
 *   *loss:  (may be NULL) the scaled loss, 0 without a loss layer.
 * Allocation-free once the slot's block is cached in the arena.
 * Returns 0; PT_EINVAL (slot or n out of range, labels missing or given
 * wrongly); PT_ESTATE (the slot is in flight); PT_ERANGE (a token id or label
 * out of range: the slot is released); PT_ENOMEM/PT_ENOFIT (no memory for
 * the slot's block). */
int pt_net_forward(pt_net *net, int slot, const float *params, const float *x, int n,
                   const int32_t *labels, const float **y, double *loss);

/* Backward of an in-flight slot:
 *   params: NULL: the array its forward used; else the array to use;
 *   grads:  NULL: the net's gradients; gradients are ACCUMULATED into it;
 *   dy:     gradient of the output (n * out_elems), NULL iff pt_net_has_loss;
 *   dx:     where to write the gradient of the input (n * in_elems,
 *           overwritten), or NULL when not needed (stage 0).
 * Recomputes the forward first in recompute mode. Releases the slot.
 * Returns 0, PT_EINVAL (bad slot, dy given/missing wrongly) or PT_ESTATE
 * (slot not in flight). */
/* pt_net_backward calling hook(user, layer) with each top-level layer's GLOBAL
 * index once its backward is done (last layer first): its gradients in grads
 * are final for this micro-batch, so an all-reduce of them may start. */
int pt_net_backward_hooked(pt_net *net, int slot, const float *params, float *grads,
                           const float *dy, float *dx, void (*hook)(void *user, int layer),
                           void *user);
int pt_net_backward(pt_net *net, int slot, const float *params, float *grads, const float *dy,
                    float *dx);

/* The backward split in two (zero-bubble schedules: the ops BWD_INPUT and
 * BWD_WEIGHT). pt_net_backward_input is B: writes dx as pt_net_backward
 * does (same params, dy, dx rules) but accumulates no parameter gradient;
 * the slot stays in flight, holding besides its activation block a keep
 * block (PT_MEM_ACTS, allocated here, cached by the arena) with the
 * gradients W reads, a copy of dy among them, so the caller may reuse dy at
 * once. pt_net_backward_weight is W, later: accumulates into grads (NULL:
 * the net's) exactly what pt_net_backward would have, then releases the
 * slot; params is not read (W uses the array its B used, and no layer's W
 * reads weights), so a step that moved the weights in between is harmless. The _hooked form calls
 * hook as pt_net_backward_hooked does. In recompute mode W must come before any other forward or
 * recompute of this net (B's state is in the shared block): else PT_ESTATE and the slot stays.
 * Return 0; PT_EINVAL (bad slot, dy given/missing wrongly); PT_ESTATE (B: slot not in flight or
 * already split; W: B not run); PT_ENOMEM/PT_ENOFIT (B: no memory for the keep block).
 * pt_net_backward and pt_net_recompute refuse a split slot (PT_ESTATE). */
int pt_net_backward_input(pt_net *net, int slot, const float *params, const float *dy, float *dx);
int pt_net_backward_weight(pt_net *net, int slot, const float *params, float *grads);
int pt_net_backward_weight_hooked(pt_net *net, int slot, const float *params, float *grads,
                                  void (*hook)(void *user, int layer), void *user);
/* W of `count` split slots in one pass (gathered weight gradients,
 * pt_chain_backward_weight_many): the gradients of
 * pt_net_backward_weight_hooked on each slot in the order given (up to the
 * order of the sums where a layer stacks the slots' rows into one gemm), but
 * layer by layer, so each layer's gradient goes through memory once rather
 * than once per slot; hook runs once per layer, after every slot's W of it.
 * Releases every slot. PT_EINVAL: count outside 1..64, a bad or repeated
 * slot, or count > 1 in recompute mode (B's state of one slot only is
 * kept); PT_ESTATE as pt_net_backward_weight; on error no slot is touched. */
int pt_net_backward_weight_many(pt_net *net, const int *slot_ids, int count, float *grads,
                                void (*hook)(void *user, int layer), void *user);
/* 1 when the slot's B ran and its W has not. */
int pt_net_slot_split(const pt_net *net, int slot);

/* Recompute mode: re-runs the forward of in-flight `slot` from its kept
 * input into the shared activation block (params: NULL: the array its
 * forward used; else the array to use from now on), so that the next
 * pt_net_backward of this slot skips its own rerun. This is the schedule's
 * RECOMPUTE op, timed on its own. A forward or recompute of another slot in
 * between overwrites the block; backward then simply reruns it. Without
 * recompute mode a no-op. Returns 0, PT_EINVAL (bad slot) or PT_ESTATE (slot
 * not in flight). */
int pt_net_recompute(pt_net *net, int slot_id, const float *params);

/* Drops an in-flight slot without backward (evaluation). 0, or PT_EINVAL
 * for a bad slot; releasing an idle slot is a no-op. */
int pt_net_release(pt_net *net, int slot);

/* 1 when the slot is in flight (forwarded, not yet backwarded/released). */
int pt_net_slot_busy(const pt_net *net, int slot);

/* For a net with a loss: counts the rows of the in-flight slot whose argmax
 * probability is the label (first maximum wins), and the rows. Host result;
 * syncs. Returns 0, PT_EINVAL (no loss layer, bad slot) or PT_ESTATE. */
int pt_net_count_correct(pt_net *net, int slot, int64_t *correct, int64_t *rows);

#endif

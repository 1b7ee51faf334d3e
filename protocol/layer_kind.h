/* What a layer kind is, below the runtime: its facts (docs/architecture.md,
 * "Layer kinds").
 *
 * Every kind of protocol/layer_kinds.h defines one `pt_layer_<name>_facts`:
 * the fields of its JSON object and how they are read and written, its shape
 * inference (output shape, parameters, forward FLOPs per sample), what the
 * analytic profile charges it in memory beyond its input and output, and the
 * tensors its parameters are saved as in a checkpoint. The model parser,
 * planner/analytic.c and runtime/checkpoint.c read these through the
 * dispatchers below and never switch on a kind; its compute is its
 * `pt_layer_<name>_ops` (runtime/layer.h). The built-in kinds' facts are in
 * protocol/layer_facts.c. */
#ifndef PT_PROTOCOL_LAYER_KIND_H
#define PT_PROTOCOL_LAYER_KIND_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/json_util.h"
#include "protocol/model.h"

/* Layernorm keeps a mean and a 1/std per row; attention keeps Q, K and V. */
#define PT_ANALYTIC_LAYERNORM_STATS 2
#define PT_ANALYTIC_QKV             3
/* A dropout mask keeps one byte per element (Megatron-LM). */
#define PT_ANALYTIC_MASK_BYTES 1
/* A label or a token id is an int32. */
#define PT_ANALYTIC_LABEL_BYTES 4
#define PT_ANALYTIC_TOKEN_BYTES 4
/* Attention's forward kernels: QKV, Q K^T, softmax, P V, output projection;
 * fused: QKV, the tiled core, output projection. */
#define PT_ANALYTIC_ATTENTION_KERNELS       5
#define PT_ANALYTIC_FUSED_ATTENTION_KERNELS 3
/* A fused attention keeps per query row and head its softmax statistics
 * (log-sum-exp and max, fp32, runtime/attention_tiled.h). */
#define PT_ANALYTIC_ATTENTION_STATS 2
#define PT_ANALYTIC_STAT_BYTES      4
/* Its core (what selective recomputation runs again): Q K^T and P V, 2 T^2 D
 * FLOPs each per sample; the scores written, read and written by the
 * softmax, read by P V; three kernels. */
#define PT_ANALYTIC_ATTENTION_CORE_FLOPS   4.0
#define PT_ANALYTIC_ATTENTION_CORE_PASSES  4.0
#define PT_ANALYTIC_ATTENTION_CORE_KERNELS 3

/* Shape inference of a chain, where a kind's `shape` runs: errors go to jr. */
typedef struct pt_layer_shape_ctx {
    pt_jr *jr;
    const pt_model_spec *spec; /* NULL when a single layer is inferred alone */
    int64_t params_total;      /* running sum, checked against PT_MODEL_PARAMS_MAX */
} pt_layer_shape_ctx;

/* The memory layout the analytic profile restates (planner/analytic.h). */
typedef struct pt_layer_layout {
    double e;      /* bytes per activation element */
    int megatron;  /* Megatron-LM's layout (Korthikanti et al.), else the runtime's */
    int selective; /* megatron: selective recomputation of the attention core */
} pt_layer_layout;

/* Per sample, in bytes: what a layer keeps for its backward besides its
 * input and output, its backward scratch, its split-backward hold besides
 * its own output gradient; its forward kernel launches. */
typedef struct pt_layer_mem {
    double saved, scratch, keep;
    int kernels;
} pt_layer_mem;

/* Where a layer's checkpoint tensors go: add(user, name, rank, d0, d1) with
 * name = prefix + the tensor's own name (rank 1: d0 floats; rank 2: d0 x d1). */
#define PT_LAYER_TENSOR_NAME_MAX 128
typedef struct pt_layer_tensors {
    void (*add)(void *user, const char *name, int rank, int64_t d0, int64_t d1);
    void *user;
    char prefix[PT_LAYER_TENSOR_NAME_MAX];
} pt_layer_tensors;

typedef struct pt_layer_facts {
    const char *const *keys; /* every field its JSON object may hold, NULL-terminated */
    /* Reads its own fields of obj (type and name are read already). */
    int (*parse)(pt_jr *jr, const cJSON *obj, const char *path, int depth, pt_layer_spec *l);
    int (*write)(cJSON *obj, const pt_layer_spec *l); /* 0 or PT_ENOMEM */
    /* io holds the per-sample input shape on entry; on return its output
     * shape, params (learnable floats) and fwd_flops (per sample). Checks
     * the spec against the input (errors to c->jr naming path and field). */
    int (*shape)(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                 pt_layer_shape *io);
    /* The analytic memory rules for input shape (rank, dims) into m (zeroed,
     * kernels 1, on entry). NULL: nothing beyond input and output, one kernel. */
    void (*memory)(const pt_layer_layout *x, const pt_layer_spec *l, int rank, const int *dims,
                   pt_layer_mem *m);
    /* What its backward runs of its forward again, under selective
     * recomputation (selective 1) or by its own design (a fused attention,
     * whose backward recomputes the probabilities tile by tile): FLOPs,
     * bytes per sample and kernels, added to the three. NULL: none. */
    void (*core)(const pt_layer_spec *l, int rank, const int *dims, double e, int selective,
                 double *flops, double *bytes, int *kernels);
    /* Its parameters as checkpoint tensors, in the order of its parameter
     * slice (runtime/layer.h), for input shape (rank, dims). 0 or a PT_E*
     * code with err naming why. NULL: none (no parameters). */
    int (*tensors)(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int rank,
                   const int *dims, pt_error *err);
} pt_layer_facts;

#define PT_LAYER_FACTS_DECL_(E, name, flags) extern const pt_layer_facts pt_layer_##name##_facts;
PT_LAYER_LIST(PT_LAYER_FACTS_DECL_)
#undef PT_LAYER_FACTS_DECL_

/* The kind's facts, or NULL for an invalid kind. */
const pt_layer_facts *pt_layer_facts_of(pt_layer_kind kind);

/* ---- dispatchers: what the parser, the analytic profile and checkpoints call ---- */

/* 1 when the layer has parameters (its own, or its body's). */
int pt_layer_has_params(const pt_layer_spec *l);

/* The output shape of a (valid) layer for input (*rank, dims), in place:
 * 0, or PT_EINVAL with err naming why (the layer does not fit the input). */
int pt_layer_out_shape(const pt_layer_spec *l, int depth, int *rank, int *dims, pt_error *err);

/* The analytic memory of a layer for input (*rank, dims) into *m; advances
 * (*rank, dims) to its output shape. */
void pt_layer_memory(const pt_layer_layout *x, const pt_layer_spec *l, int *rank, int *dims,
                     pt_layer_mem *m);

/* Adds what a layer's backward recomputes of its forward (fields of `core`),
 * selective 1 under selective recomputation. */
void pt_layer_core(const pt_layer_spec *l, int rank, const int *dims, double e, int selective,
                   double *flops, double *bytes, int *kernels);

/* Appends a layer's checkpoint tensors to t for input (*rank, dims) and
 * advances the shape to its output. 0 or PT_EINVAL (err says why). */
int pt_layer_tensors_of(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int *rank,
                        int *dims, pt_error *err);

/* ---- for writing a kind's facts ---- */

/* Adds tensor t->prefix + name (a name past PT_LAYER_TENSOR_NAME_MAX is cut;
 * a body's prefix is checked where it is made). */
void pt_layer_tensor_add(pt_layer_tensors *t, const char *name, int rank, int64_t d0, int64_t d1);
/* 0, or PT_ERANGE unless 1 <= v <= PT_MODEL_DIM_MAX (path and key named). */
int pt_layer_check_size(pt_jr *jr, const char *path, const char *key, int v);
/* Floats per sample of a shape, and the shape as "[a,b]". */
int64_t pt_layer_shape_elems(const pt_layer_shape *s);
void pt_layer_shape_str(char *out, size_t cap, const pt_layer_shape *s);
/* A body chain (a residual's): parse n layer objects of arr, write them,
 * infer their shapes (io in, out; each may be NULL), as for the model's chain. */
int pt_layer_parse_chain(pt_jr *jr, const cJSON *arr, int n, const char *path, int depth,
                         pt_layer_spec **out);
cJSON *pt_layer_write_chain(const pt_layer_spec *layers, int n);
int pt_layer_shape_chain(pt_layer_shape_ctx *c, const pt_layer_spec *layers, int n,
                         const char *path, int depth, pt_layer_shape *io, pt_layer_shape *each);

#endif

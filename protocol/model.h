/* Model spec: a chain of layers (DESIGN.md "Formats").
 *
 * The format structs of protocol/ are plain data records, not opaque types:
 * planners and the runtime read them in hot loops and tests build them by
 * hand. Every record is created by a parser (or by hand) and freed by its
 * _free function, which is NULL-safe and releases what the record owns. */
#ifndef PT_PROTOCOL_MODEL_H
#define PT_PROTOCOL_MODEL_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/layer_kinds.h"

struct cJSON;

#define PT_NAME_MAX  64
#define PT_SHAPE_MAX 4

/* Facts of a layer kind (the flags of its line in protocol/layer_kinds.h). */
#define PT_LKF_PARAMS 1u /* has learnable parameters of its own */
#define PT_LKF_BODY                                                                                \
    2u /* holds a body chain (spec body, body_count); its parameters are its body's */
#define PT_LKF_TOKENS                                                                              \
    4u                 /* reads token ids: the first layer of a tokens model, and reads only the   \
                          rows of its table it gathers */
#define PT_LKF_LOSS 8u /* the loss: the model's last layer, reads the labels ("classes") */

typedef enum pt_layer_kind {
#define PT_LAYER_ENUM_(E, name, flags) PT_LAYER_##E,
    PT_LAYER_LIST(PT_LAYER_ENUM_)
#undef PT_LAYER_ENUM_
        PT_LAYER_KIND_COUNT
} pt_layer_kind;

/* Name used in JSON ("linear", "relu", ...), or NULL for an invalid kind. */
const char *pt_layer_kind_name(pt_layer_kind kind);
/* Kind for a JSON name; returns 0 or PT_ENOTFOUND. */
int pt_layer_kind_parse(const char *name, pt_layer_kind *out);
/* The kind's PT_LKF_* flags; 0 for an invalid kind. */
unsigned pt_layer_kind_flags(pt_layer_kind kind);

typedef struct pt_layer_spec {
    pt_layer_kind kind;
    char name[PT_NAME_MAX];     /* from JSON "name", or made up as "<type><index>" ("linear0") */
    int out;                    /* linear: output features */
    int bias;                   /* linear: 1 when the layer has a bias */
    int vocab, dim;             /* embedding */
    int positional;             /* embedding: 1 for a learned positional table of seq_len rows */
    int heads;                  /* attention */
    int fused;                  /* attention: 1 for the tiled kernel that keeps only the softmax
                                   statistics (runtime/attention_tiled.h), not the scores */
    int classes;                /* softmax_xent */
    float eps;                  /* layernorm */
    struct pt_layer_spec *body; /* residual: owned array of body_count layers */
    int body_count;
} pt_layer_spec;

typedef enum pt_input_kind {
    PT_INPUT_FLOAT, /* "float": real-valued features of shape input[] per sample */
    PT_INPUT_TOKENS /* "tokens": input[0] integer token ids per sample; labels are next tokens */
} pt_input_kind;

typedef struct pt_model_spec {
    char name[PT_NAME_MAX];
    pt_input_kind input_kind;
    int input_rank;          /* 1..PT_SHAPE_MAX */
    int input[PT_SHAPE_MAX]; /* per-sample input shape */
    int layer_count;
    pt_layer_spec *layers; /* owned */
} pt_model_spec;

/* Per-layer figures derived from a spec by shape inference: per-sample
 * output shape, parameter count and forward FLOPs per sample. */
typedef struct pt_layer_shape {
    int rank;
    int dims[PT_SHAPE_MAX];
    int64_t out_elems; /* product of dims: floats per sample leaving the layer */
    int64_t params;    /* learnable floats */
    double fwd_flops;  /* per sample; backward is about twice this */
} pt_layer_shape;

/* Limits that keep shape arithmetic exact and inputs from outside bounded. */
#define PT_MODEL_DIM_MAX   (1 << 24)   /* any size: out, vocab, dim, heads, classes, input dims */
#define PT_MODEL_ELEMS_MAX (1LL << 40) /* floats per sample of any activation */
/* Learnable floats of the whole model: 2^42 (4.4e12), above the largest
 * models planned (GPT-3, 1.75e11; trillion-parameter ones), below what
 * no machine could hold (2^48 floats is a petabyte of weights). */
#define PT_MODEL_PARAMS_MAX      (1LL << 42)
#define PT_MODEL_LAYERS_MAX      4096 /* layers of one chain (top level or a body) */
#define PT_MODEL_NESTING_MAX     8    /* residual bodies inside residual bodies */
#define PT_LAYERNORM_EPS_DEFAULT 1e-5f

/* Forward FLOPs per element of the layer's output, for the layers whose cost
 * is elementwise (linear and attention count their matrix products). */
#define PT_FLOPS_RELU_PER_ELEM         1.0
#define PT_FLOPS_GELU_PER_ELEM         8.0 /* x^3, 3 mul/add, tanh, mul, add */
#define PT_FLOPS_LAYERNORM_PER_ELEM    8.0 /* mean, var, normalise, gain, bias */
#define PT_FLOPS_SOFTMAX_XENT_PER_ELEM 5.0 /* max, sub, exp, sum, divide */
#define PT_FLOPS_RESIDUAL_PER_ELEM     1.0 /* the skip addition, on top of the body */

/* Parses a model spec from JSON text. `source` names the text in errors
 * (a file name). On success *out owns a new spec (free with
 * pt_model_spec_free); on failure *out is NULL and err names the field. The
 * spec is validated: known layer types, positive sizes, consistent shapes,
 * a softmax_xent last layer. */
int pt_model_spec_parse(const char *json, const char *source, pt_model_spec **out, pt_error *err);

/* pt_model_spec_parse of a document already parsed (a model embedded in a
 * message: protocol/message.h): root is a cJSON object. */
int pt_model_spec_from_tree(const struct cJSON *root, const char *source, pt_model_spec **out,
                            pt_error *err);

/* Reads and parses a file; errors are prefixed with its path. */
int pt_model_spec_load(const char *path, pt_model_spec **out, pt_error *err);

/* Looks `name` up as a path first, then as <name>.json in the directory
 * $PT_MODELS_DIR, then in <data folder>/models (protocol/datadir.h: the
 * install's share/pipetop, $PIPETOP_DATA, or the source tree for a program
 * in its build tree). The first file that exists
 * is loaded and its parse error, if any, returned; PT_ENOTFOUND when none
 * exists, with err listing where it looked. *out as pt_model_spec_parse. */
int pt_model_spec_find(const char *name, pt_model_spec **out, pt_error *err);

/* Serialises to JSON text (caller frees with free()); NULL on no memory.
 * pt_model_spec_parse of the result gives back an equal spec. */
char *pt_model_spec_to_json(const pt_model_spec *spec);
/* The same as a cJSON tree the caller owns (cJSON_Delete); NULL on no memory. */
struct cJSON *pt_model_spec_to_tree(const pt_model_spec *spec);
/* Deep copy: 0 (*out NULL for a NULL spec) or PT_ENOMEM. */
int pt_model_spec_copy(const pt_model_spec *spec, pt_model_spec **out, pt_error *err);

/* Writes pt_model_spec_to_json atomically (temporary name, fsync, rename). */
int pt_model_spec_save(const pt_model_spec *spec, const char *path, pt_error *err);

/* Shape inference: fills shapes[i] for each top-level layer (caller gives an
 * array of layer_count). Returns 0 or PT_EINVAL with err naming the layer. */
int pt_model_spec_shapes(const pt_model_spec *spec, pt_layer_shape *shapes, pt_error *err);

/* Floats per sample entering layer 0. */
int64_t pt_model_spec_input_elems(const pt_model_spec *spec);

void pt_model_spec_free(pt_model_spec **spec_p);

#endif

/* The checkpoint index formats (docs/formats.md, "Checkpoint" and "Run
 * checkpoints"): index.json, which describes the tensor files of a per-layer
 * checkpoint folder (the same format serves as an agent's stage manifest
 * stage-<s>.json), and a run's `latest` pointer {"v":1,"step":N,"dir":"step-N"}.
 *
 * Reading and writing only: the tensor files, the two-phase commit and the
 * lock are runtime/checkpoint.h's. Both parsers follow the protocol/ contract:
 * every error names the source, the field and the reason. */
#ifndef PT_PROTOCOL_CKPT_INDEX_H
#define PT_PROTOCOL_CKPT_INDEX_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"

#define PT_CKPT_INDEX_FILE  "index.json"
#define PT_CKPT_LATEST_FILE "latest"
/* Longest tensor name or file name in an index, including the NUL. */
#define PT_CKPT_NAME_MAX 128
/* Largest tensor an index may describe: 2^36 floats (256 GiB). */
#define PT_CKPT_TENSOR_FLOATS_MAX (1LL << 36)

typedef struct pt_ckpt_tensor {
    char name[PT_CKPT_NAME_MAX]; /* "weight", "body.1.wqkv", "weight.adam_m" */
    char file[PT_CKPT_NAME_MAX]; /* plain file name inside the checkpoint folder */
    int rank;
    int64_t shape[PT_SHAPE_MAX];
    int64_t count;  /* product of shape */
    uint32_t crc32; /* zlib crc32 of the file's bytes */
} pt_ckpt_tensor;

typedef struct pt_ckpt_layer {
    int index;              /* global layer index in the model */
    char name[PT_NAME_MAX]; /* the model spec's layer name */
    int64_t step;           /* the step this layer was saved at */
    int tensor_count;
    pt_ckpt_tensor *tensors; /* owned */
} pt_ckpt_layer;

typedef struct pt_ckpt_index {
    char model[PT_NAME_MAX];
    int64_t step;            /* optimizer steps taken by the run when saved */
    double epoch;            /* epochs done (fractional within an epoch) */
    int simulated;           /* "simulated": true (optional): written by pipetop-agent --simulate,
                                no tensors behind it (layers empty) */
    int has_optimizer;       /* 1 when "optimizer" is present */
    pt_optim_spec optimizer; /* kind and hyper-parameters */
    int64_t optim_steps;     /* the optimizer's step counter t */
    int layer_count;
    pt_ckpt_layer *layers; /* owned, sorted by index, indices distinct */
} pt_ckpt_index;

/* Parses and validates index.json text: "v" 1, known keys, non-negative
 * step, layers with distinct indices, tensors with plain file names
 * (no '/', not "." or ".."), positive shapes whose product is count. `source`
 * names the text in errors. On success *out owns a new index (free with
 * pt_ckpt_index_free); on failure *out is NULL and err names the field. */
int pt_ckpt_index_parse(const char *json, const char *source, pt_ckpt_index **out, pt_error *err);

/* Reads and parses the file at path (errors start with the path). */
int pt_ckpt_index_read(const char *path, pt_ckpt_index **out, pt_error *err);

/* Reads <dir>/index.json. PT_ENOTFOUND ("DIR: no checkpoint here") when there
 * is none. */
int pt_ckpt_index_load(const char *dir, pt_ckpt_index **out, pt_error *err);

/* JSON text of an index (caller frees); NULL on no memory. Parsing it gives
 * the index back (layers sorted). */
char *pt_ckpt_index_to_json(const pt_ckpt_index *index);

/* Writes pt_ckpt_index_to_json to path atomically (temporary name, fsync,
 * rename). */
int pt_ckpt_index_save(const pt_ckpt_index *index, const char *path, pt_error *err);

/* Sorts the layers by index (the order the parser returns). */
void pt_ckpt_index_sort(pt_ckpt_index *index);

void pt_ckpt_index_free(pt_ckpt_index **index_p);              /* NULL-safe; sets *index_p = NULL */
void pt_ckpt_layers_free(pt_ckpt_layer **layers_p, int count); /* NULL-safe */

/* The entry of global layer `layer`, or NULL. */
const pt_ckpt_layer *pt_ckpt_index_find(const pt_ckpt_index *index, int layer);
/* The tensor called `name` in a layer, or NULL. */
const pt_ckpt_tensor *pt_ckpt_layer_tensor(const pt_ckpt_layer *layer, const char *name);

/* ---- latest: which step folder of a run's checkpoint folder is the newest
 * whole checkpoint. */

/* Parses {"v":1,"step":N,"dir":"step-N"}: a non-negative step, and dir
 * exactly "step-<step>" (a pointer elsewhere would let a resume load a folder
 * the run never committed). On success *step = N. */
int pt_ckpt_latest_parse(const char *json, const char *source, int64_t *step, pt_error *err);
/* Reads <root>/latest. PT_ENOTFOUND when there is none. */
int pt_ckpt_latest_load(const char *root, int64_t *step, pt_error *err);
/* The text of a latest file for step (caller frees); NULL on no memory. */
char *pt_ckpt_latest_to_json(int64_t step);
/* Creates root if needed and replaces <root>/latest atomically. Never
 * moves it back: PT_ESTATE when the current latest names a newer step (and
 * its error when it is there but does not read). */
int pt_ckpt_latest_save(const char *root, int64_t step, pt_error *err);

#endif

/* Per-layer checkpoints: weights and optimizer state, one raw little-endian
 * float32 file per tensor per layer, plus index.json (docs/formats.md,
 * "Checkpoint").
 *
 * Per layer, not per stage: a stage [3,8) writes the files of layers 3..7 and
 * a net built for any other partition loads whichever layers it holds. The
 * tensors of a layer and their shapes follow runtime/layer.h's parameter
 * order ("weight" [in, out] then "bias" [out] for a linear, ...; a residual's
 * body tensors are "body.<i>.<name>"); optimizer state of tensor T is saved
 * as "T.<state>" ("weight.momentum", "weight.adam_m", "weight.adam_v").
 *
 * Crash safety. A save writes every tensor file under a name the current
 * index.json does not reference (the two names of a tensor alternate:
 * "layer003.weight.f32" and "layer003.weight.1.f32"), each through a
 * temporary name, fsync and rename; then index.json is replaced atomically;
 * only then are the files the old index referenced for those layers removed.
 * A crash at any point leaves a loadable checkpoint: the old one, or the new.
 *
 * Several stages can save into one folder in two phases: each stage writes
 * its layers' files (pt_ckpt_write_layers) and one process commits the
 * index for all of them (pt_ckpt_commit). Commits take an exclusive lock on
 * <dir>/index.lock, so one-phase saves (pt_ckpt_save) of disjoint layer
 * ranges from several processes on one machine also merge correctly.
 *
 * Loading checks each layer's name, each tensor's shape, element count,
 * file size and CRC-32 (zlib's), and names the file on a mismatch. */
#ifndef PT_RUNTIME_CHECKPOINT_H
#define PT_RUNTIME_CHECKPOINT_H

#include <stdint.h>

#include "protocol/ckpt_index.h"
#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/net.h"
#include "runtime/optim.h"

#define PT_CKPT_LOCK_FILE "index.lock"

/* The parameter tensors of top-level layer `layer` of spec, in the order of
 * its slice of the flat parameter array: names, ranks and shapes (file and
 * crc32 empty). Writes at most `max` into out and returns how many the layer
 * has (0 for relu...), or PT_EINVAL with err naming the layer. */
int pt_ckpt_layer_tensors(const pt_model_spec *spec, int layer, pt_ckpt_tensor *out, int max,
                          pt_error *err);

/* Reads tensor t of a checkpoint folder into host[0..t->count), checking the
 * file's size and crc32; errors name the file. */
int pt_ckpt_read_tensor(const char *dir, const pt_ckpt_tensor *t, float *host, pt_error *err);

/* Phase 1 of a save: writes the files of the net's layers (weights, and the
 * optimizer state when optim is not NULL) into dir (created if needed), under
 * names the current index does not reference. On success *layers_out owns
 * an array of *count_out entries (net's layers in order), each with `step`,
 * for pt_ckpt_commit; free with pt_ckpt_layers_free. Nothing is visible to
 * loaders until the commit. */
int pt_ckpt_write_layers(const char *dir, const pt_model_spec *spec, pt_net *net, pt_optim *optim,
                         int64_t step, pt_ckpt_layer **layers_out, int *count_out, pt_error *err);

/* Phase 2: under the folder's lock, merges `layers` into the current index
 * (their entries replace those of the same indices; other layers stay),
 * takes model, step, epoch and optimizer from `header` (its layers are
 * ignored), writes index.json atomically, then removes the files the old
 * index held for the replaced layers. `layers` is only read. */
int pt_ckpt_commit(const char *dir, const pt_ckpt_index *header, const pt_ckpt_layer *layers,
                   int count, pt_error *err);

/* Both phases for one process: saves the net's layers and (when optim is not
 * NULL) its state and hyper-parameters at `step` / `epoch`. */
int pt_ckpt_save(const char *dir, const pt_model_spec *spec, pt_net *net, pt_optim *optim,
                 int64_t step, double epoch, pt_error *err);

/* What pt_ckpt_load found. */
typedef struct pt_ckpt_info {
    int64_t step;
    double epoch;
    int optim_loaded;        /* 1 when optimizer state and step count were restored */
    int has_optimizer;       /* the checkpoint names an optimizer ... */
    pt_optim_spec optimizer; /* ... with these hyper-parameters */
} pt_ckpt_info;

/* Loads every layer of the net from dir: each must be in the index under the
 * same name, with the tensors and shapes the net's layer has, all at one
 * step. Optimizer state is loaded (and the optimizer's step count set) when
 * optim is not NULL, the checkpoint's optimizer is of the same kind and
 * every loaded tensor has its state; when no tensor has state it is left as
 * it is (info->optim_loaded = 0); some but not all is an error. info may be
 * NULL. On error the net's parameters may be partly overwritten. */
int pt_ckpt_load(const char *dir, const pt_model_spec *spec, pt_net *net, pt_optim *optim,
                 pt_ckpt_info *info, pt_error *err);

#endif

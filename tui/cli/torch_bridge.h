/* pipetop's side of the PyTorch bridge (bridge/pipetop_torch, docs/torch.md):
 * running the bridge's Python, and the stand-in model spec a PyTorch model
 * gets where a pipetop format requires a model (a run record's plan entry,
 * an assign).
 *
 * The bridge is a Python package shipped in the data folder's bridge/
 * (share/pipetop/bridge after an install, the source tree's bridge/ before)
 * and run with Debian's /usr/bin/python3 (python3-torch), or the interpreter
 * $PIPETOP_PYTHON names. */
#ifndef PT_TUI_CLI_TORCH_BRIDGE_H
#define PT_TUI_CLI_TORCH_BRIDGE_H

#include <stddef.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/profile.h"

#define PT_TORCH_PYTHON_ENV     "PIPETOP_PYTHON"
#define PT_TORCH_PYTHON_DEFAULT "/usr/bin/python3"
#define PT_TORCH_BRIDGE_DIR     "bridge" /* in the data folder */

/* The interpreter: python when not NULL, else $PIPETOP_PYTHON, else
 * PT_TORCH_PYTHON_DEFAULT. */
const char *pt_torch_python(const char *python);

/* The folder holding the pipetop_torch package (<data folder>/bridge) into
 * out. 0, or PT_ENOTFOUND with err saying where it looked. */
int pt_torch_bridge_dir(char *out, size_t cap, pt_error *err);

/* Runs `python -m module args...` (args NULL-terminated) with the bridge
 * folder first on PYTHONPATH, its output on this process's stdout and
 * stderr, and waits for it. 0 when it exited 0; PT_EIO with err naming the
 * interpreter and its exit status or signal otherwise (PT_ENOTFOUND when the
 * interpreter cannot be run). */
int pt_torch_run(const char *python, const char *module, const char *const *args, pt_error *err);

/* The stand-in model spec of a model pipetop cannot build: named like the
 * profile's model, one shape-keeping layer per profile layer under the
 * layer's name (an FQN), the last a 2-class softmax_xent as every model spec
 * ends. It carries the names and the layer count that plans, profiles and
 * run records are checked against, and nothing else: no agent trains it.
 * 0, PT_EINVAL (err names a layer name a model spec cannot hold) or
 * PT_ENOMEM. */
int pt_torch_standin_model(const pt_profile *profile, pt_model_spec **out, pt_error *err);

#endif

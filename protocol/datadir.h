/* Where pipetop's shipped data lives: the folder holding models/, devices/,
 * topologies/, themes/ and profiles/ (share/pipetop of an install, the source
 * tree for programs that run from the build tree). Every lookup of shipped
 * data by name goes through here, so an installed, relocated or build-tree
 * program finds the same files. */
#ifndef PT_PROTOCOL_DATADIR_H
#define PT_PROTOCOL_DATADIR_H

#include <stddef.h>

#include "protocol/error.h"

/* The environment variable naming a data folder (used when the program is not
 * inside an install whose share/pipetop exists). */
#define PT_DATADIR_ENV "PIPETOP_DATA"

/* A buffer that holds any path these functions write. */
#define PT_DATADIR_PATH_MAX 4096

/* The folder of the running program (/proc/self/exe without its last part).
 * Returns 0, or PT_EIO when it cannot be read or does not fit cap. */
int pt_exe_dir(char *out, size_t cap);

/* The build folder the running program was built in (canonical), when the
 * program lies inside it: where programs run from the build tree find what
 * the build made beside them (the CUDA module, runtime/cuda_module.h).
 * Returns 0, or PT_ENOTFOUND for an installed or moved program. */
int pt_exe_build_dir(char *out, size_t cap);

/* The data folder, the first of: <program folder>/../share/pipetop (the
 * install layout, found from /proc/self/exe, so a moved prefix still works)
 * when it holds models/; $PIPETOP_DATA when set; the source tree when the
 * program lies inside the build tree it was built in. Returns 0 with the
 * folder in out, or PT_ENOTFOUND with err saying where it looked. */
int pt_datadir(char *out, size_t cap, pt_error *err);

/* <data folder>/<folder> into out; errors as pt_datadir. */
int pt_datadir_folder(const char *folder, char *out, size_t cap, pt_error *err);

/* A file by name: `name` itself when it contains '/' or exists, otherwise
 * <data folder>/<folder>/<name><ext> when that exists (ext may be "" or NULL).
 * Returns 0 with the path in out, PT_ENOTFOUND with err naming the name and
 * the places looked in, PT_EINVAL on a NULL or empty name. */
int pt_datadir_find(const char *folder, const char *name, const char *ext, char *out, size_t cap,
                    pt_error *err);

/* For options that take a file or a shipped name (--topology dgx1-v100-x8):
 * the path pt_datadir_find gives (written to buf) when it finds one,
 * otherwise `name` itself, so the loader's own error names what was given.
 * Never NULL for a non-NULL name. */
const char *pt_datadir_resolve(const char *folder, const char *name, const char *ext, char *buf,
                               size_t cap);

/* A named input of `what` ("model", "device"): `name` itself when that file
 * exists; else, when name has no '/', $env/<name>.json (env set and not
 * empty), then <data folder>/<folder>/<name>.json. 0 with the path in out;
 * PT_ENOTFOUND with err naming every place looked in; PT_EINVAL for an empty
 * name or a path that does not fit cap. */
int pt_datadir_lookup(const char *what, const char *folder, const char *env, const char *name,
                      char *out, size_t cap, pt_error *err);

#endif

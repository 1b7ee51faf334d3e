/* The CUDA module: the CUDA backend and NCCL communicators, built into their
 * own shared object (libpt_cuda.so, cmake/cuda.cmake) that the core opens
 * with dlopen the first time a CUDA device is asked for. Programs and tests
 * therefore link neither libcudart nor libcublas nor libnccl: a pipetop built
 * with the toolkit starts, and runs CPU plans, on a machine without them, and
 * says what failed to load when a CUDA device is asked for there.
 *
 * This header is the whole interface between the two sides: the core
 * (runtime/backend_cuda_load.c, runtime/comm_nccl.c) calls through one table
 * of function pointers, which the module's single exported function
 * (PT_CUDA_MODULE_ENTRY) returns. The functions behind the table keep the
 * contracts of runtime/backend_cuda.h and runtime/comm_nccl.h; arguments are
 * checked by the core before they reach the module where the header says so.
 *
 * Where the core looks for the module, first found wins:
 *   $PIPETOP_CUDA_MODULE (a path; when set, the only place looked in)
 *   <program folder>/../lib/pipetop/libpt_cuda.so (an install, relocatable)
 *   <build folder>/libpt_cuda.so (a program inside the build tree it was
 *   built in, as protocol/datadir.h finds the source tree) */
#ifndef PT_RUNTIME_CUDA_MODULE_H
#define PT_RUNTIME_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "runtime/backend.h"
#include "runtime/backend_cuda.h"
#ifdef __cplusplus
typedef struct pt_nccl pt_nccl; /* runtime/comm_nccl.h is C only (_Static_assert) */
typedef struct pt_nccl_p2p pt_nccl_p2p;
#else
#include "runtime/comm_nccl.h"
#endif

#define PT_CUDA_MODULE_ENV   "PIPETOP_CUDA_MODULE"
#define PT_CUDA_MODULE_FILE  "libpt_cuda.so"
#define PT_CUDA_MODULE_ENTRY "pt_cuda_module_v1"
/* Raised with every change to struct pt_cuda_module or struct pt_backend, so
 * that a module from another build is refused rather than called wrongly. */
#define PT_CUDA_MODULE_ABI 2

typedef struct pt_cuda_module {
    int abi;             /* PT_CUDA_MODULE_ABI as the module was built */
    size_t size;         /* sizeof(pt_cuda_module) as the module was built */
    size_t backend_size; /* sizeof(pt_backend) as the module was built */

    /* ---- devices and backends (runtime/backend_cuda.h) ---- */
    /* the number of devices, or PT_EUNSUPP with CUDA's words for why none */
    int (*device_probe)(pt_error *err);
    int (*device_count)(void);
    int (*device_name)(int device, char *buf, size_t cap);
    int (*device_bus_id)(int device, char *buf, size_t cap);
    int (*error_count)(void);
    int (*backend_create)(int device, pt_cuda_math math, const pt_backend **out, pt_error *err);
    void (*backend_destroy)(const pt_backend **be_p);
    int (*backend_is_cuda)(const pt_backend *be);
    int (*backend_device)(const pt_backend *be);
    void *(*backend_stream)(const pt_backend *be);
    int (*backend_bind)(const pt_backend *be);
    int (*backend_mem_info)(const pt_backend *be, int64_t *free_bytes, int64_t *total_bytes);

    /* ---- NCCL (runtime/comm_nccl.h); every entry NULL in a module built
     * without NCCL's header. libnccl.so.2 is not linked: the module opens it
     * the first time nccl_load is called ($PIPETOP_NCCL_LIBRARY names another
     * file), so a machine without it still has the CUDA backend. The core
     * calls nccl_load (0, or PT_EUNSUPP naming the library and dlerror()'s
     * words) before any other entry below, and has checked be is a CUDA
     * backend, the ranks, the id, and that peers are ranks of the
     * communicator. ---- */
    int (*nccl_load)(pt_error *err);
    /* id: PT_NCCL_ID_BYTES bytes (ncclUniqueId), written / read */
    int (*nccl_id_new)(unsigned char *id, pt_error *err);
    int (*nccl_create)(const unsigned char *id, int nranks, int rank, int device, void *stream,
                       pt_nccl **out, pt_error *err);
    int (*nccl_split)(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err);
    void (*nccl_destroy)(pt_nccl *self);
    int (*nccl_rank)(const pt_nccl *self);
    int (*nccl_size)(const pt_nccl *self);
    int (*nccl_allreduce)(pt_nccl *self, float *buf, size_t count, pt_error *err);
    /* ops[0..n) as one ncclGroupStart/ncclGroupEnd group */
    int (*nccl_p2p)(pt_nccl *self, const pt_nccl_p2p *ops, int n, pt_error *err);
    int (*nccl_wait)(pt_nccl *self, int timeout_ms, pt_error *err);
} pt_cuda_module;

/* The module's entry point, PT_CUDA_MODULE_ENTRY: a static table, never NULL. */
typedef const pt_cuda_module *(*pt_cuda_module_entry)(void);

/* ---- the core's side (runtime/backend_cuda_load.c) ---- */

/* The module, loaded on the first call (once per process, thread-safe; never
 * unloaded). NULL when it cannot be: err (if not NULL) then has the reason,
 * the same at every call: PT_EUNSUPP "built without the CUDA backend", or
 * PT_ENOTFOUND naming the places looked in, or PT_EIO naming the file and
 * dlerror()'s words (which name a library the module needs and did not
 * find, e.g. libcudart.so.13). */
const pt_cuda_module *pt_cuda_module_get(pt_error *err);

/* The module when an earlier call loaded it, else NULL; never loads it. A
 * CUDA backend or an NCCL communicator exists only once it is loaded. */
const pt_cuda_module *pt_cuda_module_loaded(void);

/* Makes m (static, never freed) the process's module, as if it had been
 * loaded, for stand-ins: tests that drive the executor's NCCL path, or the
 * GPU tests' dry runs, with a table whose backend is the CPU's and whose
 * NCCL records and delivers on the host. It is checked like a loaded module
 * (ABI number and sizes). Returns 0, PT_EINVAL (err: why m is refused) or
 * PT_ESTATE when a module was already loaded or set (it stays). */
int pt_cuda_module_set(const pt_cuda_module *m, pt_error *err);

/* ---- the module's side (runtime/cuda/, built into libpt_cuda.so only) ---- */

/* Fill the backend and the NCCL entries of m. */
void pt_cuda_module_fill_backend(pt_cuda_module *m);
void pt_cuda_module_fill_nccl(pt_cuda_module *m);

#endif

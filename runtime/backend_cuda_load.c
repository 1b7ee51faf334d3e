/* The core's side of the CUDA module (runtime/cuda_module.h): finding and
 * opening libpt_cuda.so the first time a CUDA device is asked for, and the
 * functions of runtime/backend_cuda.h, which call through its table. Until
 * the module is loaded no CUDA backend exists, so the questions asked of
 * every backend (is it CUDA, its device, bind it) never load it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "protocol/datadir.h"
#include "runtime/cuda_module.h"

/* Set by cmake/cuda.cmake for this file: the module's install folder,
 * relative to the programs' folder. */
#ifndef PT_CUDA_MODULE_FROM_BIN
#define PT_CUDA_MODULE_FROM_BIN "../lib/pipetop"
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic(const pt_cuda_module *) g_module; /* set once, by load or pt_cuda_module_set */
static pt_error g_why;                           /* why it is not, written by load */

/* 1 when m is a table of this build (ABI number and sizes). */
static int module_fits(const pt_cuda_module *m)
{
    return m && m->abi == PT_CUDA_MODULE_ABI && m->size == sizeof *m &&
           m->backend_size == sizeof(pt_backend);
}

#ifdef PT_HAVE_CUDA
static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The module's path into path (cap PT_DATADIR_PATH_MAX): $PIPETOP_CUDA_MODULE
 * as given, else the first of the install and build-tree places that holds
 * it. 0, or PT_ENOTFOUND with err naming the places looked in. */
static int find_module(char *path, size_t cap, pt_error *err)
{
    const char *env = getenv(PT_CUDA_MODULE_ENV);
    if (env && *env) {
        if ((size_t)snprintf(path, cap, "%s", env) >= cap)
            return pt_error_set(err, PT_EINVAL, "$%s: path too long", PT_CUDA_MODULE_ENV);
        return 0; /* dlopen says what is wrong with it */
    }
    char dir[PT_DATADIR_PATH_MAX], installed[PT_DATADIR_PATH_MAX] = "";
    if (pt_exe_dir(dir, sizeof dir) == 0 &&
        (size_t)snprintf(installed, sizeof installed, "%s/%s/%s", dir, PT_CUDA_MODULE_FROM_BIN,
                         PT_CUDA_MODULE_FILE) < sizeof installed &&
        is_file(installed)) {
        snprintf(path, cap, "%s", installed);
        return 0;
    }
    int in_build = pt_exe_build_dir(dir, sizeof dir) == 0;
    if (in_build && (size_t)snprintf(path, cap, "%s/%s", dir, PT_CUDA_MODULE_FILE) < cap &&
        is_file(path))
        return 0;
    return pt_error_set(err, PT_ENOTFOUND,
                        "the CUDA module %s is not installed (not in %.300s, %s%.300s, and $%s is "
                        "unset)",
                        PT_CUDA_MODULE_FILE, installed[0] ? installed : PT_CUDA_MODULE_FROM_BIN,
                        in_build ? "nor in " : "the program is not in its build tree",
                        in_build ? path : "", PT_CUDA_MODULE_ENV);
}

static void load(void)
{
    char path[PT_DATADIR_PATH_MAX];
    if (find_module(path, sizeof path, &g_why) < 0)
        return;
    /* Never closed: the CUDA libraries do not support being unloaded. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        pt_error_set(&g_why, PT_EIO, "cannot load the CUDA module %.300s: %s", path,
                     why ? why : "dlopen failed");
        return;
    }
    pt_cuda_module_entry entry = (pt_cuda_module_entry)dlsym(h, PT_CUDA_MODULE_ENTRY);
    if (!entry) {
        const char *why = dlerror();
        pt_error_set(&g_why, PT_EIO, "%.300s is not a pipetop CUDA module: %s", path,
                     why ? why : "no " PT_CUDA_MODULE_ENTRY);
        dlclose(h);
        return;
    }
    const pt_cuda_module *m = entry();
    if (!module_fits(m)) {
        pt_error_set(&g_why, PT_EIO,
                     "%.300s is the CUDA module of another pipetop build (module ABI %d, this "
                     "program's is %d)",
                     path, m ? m->abi : -1, PT_CUDA_MODULE_ABI);
        dlclose(h);
        return;
    }
    const pt_cuda_module *none = NULL;
    if (!atomic_compare_exchange_strong(&g_module, &none, m))
        dlclose(h); /* a stand-in was set meanwhile (pt_cuda_module_set) */
}
#else
static void load(void)
{
    pt_error_set(&g_why, PT_EUNSUPP,
                 "this pipetop was built without the CUDA backend (CMake did not find the CUDA "
                 "toolkit, or -DPT_CUDA=OFF)");
}
#endif

const pt_cuda_module *pt_cuda_module_get(pt_error *err)
{
    const pt_cuda_module *m = atomic_load(&g_module);
    if (m)
        return m; /* loaded, or a stand-in set before the first load */
    pthread_once(&g_once, load);
    m = atomic_load(&g_module);
    if (!m && err)
        *err = g_why;
    return m;
}

int pt_cuda_module_set(const pt_cuda_module *m, pt_error *err)
{
    if (!module_fits(m))
        return pt_error_set(
            err, PT_EINVAL,
            "cuda module stand-in: ABI %d, table of %zu bytes, backend of %zu; this "
            "build has %d, %zu and %zu",
            m ? m->abi : -1, m ? m->size : 0, m ? m->backend_size : 0, PT_CUDA_MODULE_ABI,
            sizeof *m, sizeof(pt_backend));
    const pt_cuda_module *none = NULL;
    int ok = atomic_compare_exchange_strong(&g_module, &none, m);
    return ok ? 0 : pt_error_set(err, PT_ESTATE, "cuda module: one is already loaded");
}

const pt_cuda_module *pt_cuda_module_loaded(void)
{
    return atomic_load(&g_module);
}

const char *pt_cuda_math_name(int math)
{
    static const char *const names[] = {"fp32", "tf32", "bf16"};
    return math >= 0 && math < (int)(sizeof names / sizeof names[0]) ? names[math] : NULL;
}

int pt_cuda_device_count(void)
{
    const pt_cuda_module *m = pt_cuda_module_get(NULL);
    return m ? m->device_count() : 0;
}

int pt_cuda_device_probe(pt_error *err)
{
    pt_error why = {0};
    const pt_cuda_module *m = pt_cuda_module_get(&why);
    if (!m)
        return pt_error_set(err, PT_EUNSUPP, "%s", why.msg);
    return m->device_probe(err);
}

int pt_cuda_error_count(void)
{
    const pt_cuda_module *m = pt_cuda_module_loaded();
    return m ? m->error_count() : 0;
}

int pt_backend_cuda_create(int device, pt_cuda_math math, const pt_backend **out, pt_error *err)
{
    *out = NULL;
    pt_error why = {0};
    const pt_cuda_module *m = pt_cuda_module_get(&why);
    if (!m)
        return pt_error_set(err, PT_EUNSUPP, "cuda:%d: %s", device, why.msg);
    return m->backend_create(device, math, out, err);
}

void pt_backend_cuda_destroy(const pt_backend **be_p)
{
    const pt_cuda_module *m = pt_cuda_module_loaded();
    if (m && be_p && *be_p)
        m->backend_destroy(be_p);
}

int pt_backend_is_cuda(const pt_backend *be)
{
    const pt_cuda_module *m = pt_cuda_module_loaded();
    return m && be && m->backend_is_cuda(be);
}

int pt_backend_cuda_device(const pt_backend *be)
{
    const pt_cuda_module *m = pt_cuda_module_loaded();
    return m ? m->backend_device(be) : -1;
}

void *pt_backend_cuda_stream(const pt_backend *be)
{
    const pt_cuda_module *m = pt_cuda_module_loaded();
    return m ? m->backend_stream(be) : NULL;
}

/* A negative device is no device: answered without loading the module. */
int pt_cuda_device_name(int device, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    const pt_cuda_module *m = device >= 0 ? pt_cuda_module_get(NULL) : NULL;
    return m ? m->device_name(device, buf, cap) : PT_EUNSUPP;
}

int pt_cuda_device_bus_id(int device, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    const pt_cuda_module *m = device >= 0 ? pt_cuda_module_get(NULL) : NULL;
    return m ? m->device_bus_id(device, buf, cap) : PT_EUNSUPP;
}

int pt_backend_cuda_bind(const pt_backend *be)
{
    const pt_cuda_module *m = pt_cuda_module_loaded();
    return m ? m->backend_bind(be) : 0;
}

int pt_backend_cuda_mem_info(const pt_backend *be, int64_t *free_bytes, int64_t *total_bytes)
{
    const pt_cuda_module *m = pt_cuda_module_loaded();
    return m ? m->backend_mem_info(be, free_bytes, total_bytes) : PT_EUNSUPP;
}

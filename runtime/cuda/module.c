/* The CUDA module's one exported symbol (runtime/cuda_module.h): the table of
 * the backend in backend_cuda.cu and, when built with it, of NCCL in
 * comm_nccl_cuda.c. Everything else in libpt_cuda.so is hidden
 * (-fvisibility=hidden), so nothing in it can stand in for the core's own
 * functions of the same name (protocol/error.c is compiled into both). */
#include <pthread.h>

#include "runtime/cuda_module.h"

static pt_cuda_module g_module;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill(void)
{
    g_module.abi = PT_CUDA_MODULE_ABI;
    g_module.size = sizeof g_module;
    g_module.backend_size = sizeof(pt_backend);
    pt_cuda_module_fill_backend(&g_module);
#ifdef PT_HAVE_NCCL
    pt_cuda_module_fill_nccl(&g_module);
#endif
}

__attribute__((visibility("default"))) const pt_cuda_module *pt_cuda_module_v1(void)
{
    pthread_once(&g_once, fill);
    return &g_module;
}

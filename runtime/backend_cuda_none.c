/* The CUDA backend's face in a build without the toolkit: no devices, and
 * every constructor says the backend is not built (runtime/backend_cuda.h). */
#ifndef PT_HAVE_CUDA
#include <stdio.h>

#include "runtime/backend_cuda.h"

const char *pt_cuda_math_name(int math)
{
    static const char *const names[] = {"fp32", "tf32", "bf16"};
    return math >= 0 && math < 3 ? names[math] : NULL;
}

int pt_cuda_device_count(void)
{
    return 0;
}

int pt_cuda_error_count(void)
{
    return 0;
}

int pt_backend_cuda_create(int device, pt_cuda_math math, const pt_backend **out, pt_error *err)
{
    (void)math;
    *out = NULL;
    return pt_error_set(err, PT_EUNSUPP,
                        "cuda:%d: this pipetop was built without the CUDA backend (CMake did not "
                        "find the CUDA toolkit, or -DPT_CUDA=OFF)",
                        device);
}

void pt_backend_cuda_destroy(const pt_backend **be_p)
{
    (void)be_p;
}

int pt_backend_is_cuda(const pt_backend *be)
{
    (void)be;
    return 0;
}

int pt_backend_cuda_device(const pt_backend *be)
{
    (void)be;
    return -1;
}

void *pt_backend_cuda_stream(const pt_backend *be)
{
    (void)be;
    return NULL;
}

int pt_cuda_device_name(int device, char *buf, size_t cap)
{
    (void)device;
    if (cap)
        buf[0] = '\0';
    return PT_EUNSUPP;
}

int pt_cuda_device_bus_id(int device, char *buf, size_t cap)
{
    (void)device;
    if (cap)
        buf[0] = '\0';
    return PT_EUNSUPP;
}

int pt_backend_cuda_bind(const pt_backend *be)
{
    (void)be;
    return 0;
}

int pt_backend_cuda_mem_info(const pt_backend *be, int64_t *free_bytes, int64_t *total_bytes)
{
    (void)be;
    (void)free_bytes;
    (void)total_bytes;
    return PT_EUNSUPP;
}
#else
typedef int pt_backend_cuda_none_unused; /* the real backend is backend_cuda.cu */
#endif

/* The CUDA backend (runtime/cuda/backend_cuda.cu): cuBLAS for the matrix
 * products, CUDA kernels for every other entry of struct pt_backend, all
 * issued in order on one stream per backend.
 *
 * Built only when CMake finds the CUDA toolkit (cmake/cuda.cmake), into the
 * CUDA module libpt_cuda.so, which these functions load with dlopen the first
 * time they need a device (runtime/cuda_module.h says where it is looked
 * for): programs do not link the CUDA libraries. Without the toolkit, or
 * where the module or a library it needs does not load, every function here
 * returns PT_EUNSUPP (or 0 devices) and the constructor's message says
 * which, so callers need no #ifdef. Functions that take a backend never load
 * the module: a CUDA backend exists only once it is loaded.
 *
 * Precision. Tensors stay float32 in device memory (they are the float32
 * master copy). The matrix products run as chosen at create:
 *   PT_CUDA_FP32  cuBLAS's float32 path (no tensor-core down-conversion);
 *   PT_CUDA_TF32  float32 in and out, products on TF32 tensor cores
 *                 (CUBLAS_COMPUTE_32F_FAST_TF32);
 *   PT_CUDA_BF16  float32 in and out, inputs rounded to bf16 for the tensor
 *                 cores, float32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF).
 * Pointwise kernels, reductions and optimizer updates are float32 in every
 * mode. Activations are not stored in bf16 (see docs/gpu.md).
 *
 * Synchronisation follows backend.h: dot, softmax_xent_fwd and
 * embedding_fwd return a host value and wait for the stream; download waits
 * for the stream; upload copies pageable host memory before it returns (the
 * source may be reused at once) and does not wait for the device. */
#ifndef PT_RUNTIME_BACKEND_CUDA_H
#define PT_RUNTIME_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "runtime/backend.h"

typedef enum pt_cuda_math { PT_CUDA_FP32 = 0, PT_CUDA_TF32, PT_CUDA_BF16 } pt_cuda_math;

/* "fp32", "tf32", "bf16"; NULL out of range. */
const char *pt_cuda_math_name(int math);

/* Number of CUDA devices visible to this process; 0 when none is visible,
 * the driver is missing, the module does not load or the backend is not
 * built. Never fails. Loads the module. */
int pt_cuda_device_count(void);

/* The number of CUDA devices visible, like pt_cuda_device_count, or
 * PT_EUNSUPP with err saying why there is none to count: the module's load
 * error, or CUDA's own words (cudaGetDeviceCount's error, e.g. a driver too
 * old for this CUDA runtime). 0 means CUDA answered and found no device.
 * Loads the module. */
int pt_cuda_device_probe(pt_error *err);

/* Creates a backend on device `device` (0-based) with its own stream and
 * cuBLAS handle. On success *out is a new backend (free with
 * pt_backend_cuda_destroy); on failure *out is NULL and the result is
 * PT_EUNSUPP (not built, the module or a library it needs did not load, CUDA
 * cannot count its devices, or no such device: err says which, with
 * dlerror()'s or CUDA's words), PT_ENOMEM or PT_EIO (a CUDA or cuBLAS call
 * failed; err names it and has its status text). Loads the module. */
int pt_backend_cuda_create(int device, pt_cuda_math math, const pt_backend **out, pt_error *err);

/* Synchronises and frees the backend (NULL-safe; sets *be_p = NULL). Memory
 * still allocated from it must be freed first (destroy its arenas). */
void pt_backend_cuda_destroy(const pt_backend **be_p);

/* 1 when be is a CUDA backend from pt_backend_cuda_create. */
int pt_backend_is_cuda(const pt_backend *be);

/* The CUDA device index of a CUDA backend, -1 for any other. */
int pt_backend_cuda_device(const pt_backend *be);

/* The cudaStream_t of a CUDA backend (as void *), NULL for any other. */
void *pt_backend_cuda_stream(const pt_backend *be);

/* The device's name ("NVIDIA H200") into buf (always NUL-terminated).
 * Returns 0 or PT_EUNSUPP. Loads the module unless device < 0 (as does
 * pt_cuda_device_bus_id). */
int pt_cuda_device_name(int device, char *buf, size_t cap);

/* CUDA and cuBLAS calls inside ops that failed so far, kernel launches and
 * failed allocations (out of memory included) among them (the table's void
 * entries cannot return them; each is also reported on stderr with CUDA's or
 * cuBLAS's words). Tests check it stays 0. Always 0 without the backend. */
int pt_cuda_error_count(void);

/* The PCI bus id of the device ("00000000:19:00.0") into buf: what tells
 * two agents of one host whether they share a GPU. 0 or PT_EUNSUPP. */
int pt_cuda_device_bus_id(int device, char *buf, size_t cap);

/* Makes be's device the calling thread's current CUDA device; a thread that
 * did not create the backend calls it before its first op. 0, or PT_EIO.
 * A no-op returning 0 for any other backend. */
int pt_backend_cuda_bind(const pt_backend *be);

/* The driver's own figures for the backend's device (cudaMemGetInfo), bytes.
 * Returns 0, PT_EUNSUPP (not a CUDA backend) or PT_EIO. */
int pt_backend_cuda_mem_info(const pt_backend *be, int64_t *free_bytes, int64_t *total_bytes);

#endif

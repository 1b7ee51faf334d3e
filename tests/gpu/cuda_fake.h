/* A fault-injecting stand-in for the CUDA runtime, cuBLAS and NCCL
 * (tests/gpu/cuda_fake.c, built as libpt_cuda_fake.so), for testing the real
 * CUDA module (libpt_cuda.so) on a machine where CUDA cannot run.
 *
 * How it stands in. A program that links this library has its definitions
 * of cudaMalloc, the kernel-launch entry points nvcc's generated code calls
 * (__cudaPushCallConfiguration, __cudaLaunchKernel, ...), cublasCreate_v2 and
 * the rest in the process's global symbol scope, which the dynamic linker
 * searches before a dlopen'ed module's own libraries: the module, loaded as
 * usual, calls these instead of libcudart and libcublas. Functions not
 * defined here (cudaGetErrorString, cublasGetStatusString) still come from
 * the real libraries, so messages carry CUDA's own words. The module opens
 * NCCL by path ($PIPETOP_NCCL_LIBRARY), which names this library.
 *
 * What it does. One fake device. Device memory is host memory, so copies
 * and memsets happen; kernels and matrix products do not run: a launch is
 * checked against the device limits a real GPU has (block at most 1024
 * threads, 1024 x 1024 x 64; grid.x below 2^31, grid.y and grid.z at most
 * 65,535), recorded, and fails, like CUDA, by setting the calling thread's
 * last error, never by returning to the caller's code. Streams finish at
 * once unless "hung"; a synchronize on a hung stream is counted (a real one
 * would never return). NCCL records send/recv groups and can report an
 * asynchronous error after a number of polls.
 *
 * Not thread-safe apart from the last error: one test thread at a time. */
#ifndef PT_TESTS_GPU_CUDA_FAKE_H
#define PT_TESTS_GPU_CUDA_FAKE_H

/* Back to a healthy device: one device, nothing injected; counters zeroed. */
void fake_reset(void);

/* cudaGetDeviceCount: n devices, or error (a cudaError_t, 0: none). */
void fake_device_count(int n, int error);

/* Every launch fails with error (a cudaError_t; 0: launches succeed unless
 * their configuration is out of the device limits). */
void fake_fail_launches(int error);

/* The next cudaMalloc calls fail with error (0: they succeed). */
void fake_fail_malloc(int error);

/* cublasCreate_v2 and the matrix products return status (0: success). */
void fake_fail_blas_create(int status);
void fake_fail_gemm(int status);

/* Launches so far; those rejected for their configuration. */
int fake_launches(void);
int fake_bad_launches(void);

/* The kernels the module registered (nvcc's __cudaRegisterFunction): count,
 * the i-th one's (mangled) device name, and how often it was launched. */
int fake_kernel_count(void);
const char *fake_kernel_name(int i);
int fake_kernel_launched(int i);

/* 1: every stream is busy for ever (cudaStreamQuery says not ready);
 * cudaStreamSynchronize calls on it are counted by fake_blocking_syncs. */
void fake_hang_streams(int on);
int fake_blocking_syncs(void);

/* NCCL: ncclCommGetAsyncError reports result (an ncclResult_t) from the
 * after-th poll on (0: never). */
void fake_nccl_async_error(int result, int after_polls);
int fake_nccl_aborts(void);
int fake_nccl_polls(void);
/* NCCL calls so far as text, one per line: "start", "send PEER COUNT",
 * "recv PEER COUNT", "end", "allreduce COUNT". */
const char *fake_nccl_log(void);

#endif

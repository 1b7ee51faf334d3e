/* The fault-injecting CUDA runtime, cuBLAS and NCCL stand-in of
 * tests/gpu/cuda_fake.h. Only what libpt_cuda.so calls is defined; the
 * prototypes come from the toolkit's own headers, so a signature that
 * drifts from CUDA's fails to compile here. */
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/cuda_fake.h"

#define MAX_KERNELS 64
#define MAX_CONFIGS 8
#define LOG_MAX     65536

static struct {
    int device_count, device_error;
    int launch_error, malloc_error, blas_create_status, gemm_status;
    int launches, bad_launches;
    int hang, blocking_syncs;
    int nccl_async, nccl_after, nccl_polls, nccl_aborts;
    char nccl_log[LOG_MAX];
} g = {.device_count = 1};

static struct {
    const void *host_fun;
    const char *name;
    int launched;
} g_kernels[MAX_KERNELS];
static int g_kernel_count;

static _Thread_local cudaError_t t_last;
static _Thread_local struct {
    dim3 grid, block;
    size_t shared;
    void *stream;
} t_configs[MAX_CONFIGS];
static _Thread_local int t_config_n;

/* ---- the test's controls ---------------------------------------------- */

void fake_reset(void)
{
    memset(&g, 0, sizeof g);
    g.device_count = 1;
    for (int i = 0; i < g_kernel_count; i++)
        g_kernels[i].launched = 0;
    t_last = cudaSuccess;
}

void fake_device_count(int n, int error)
{
    g.device_count = n;
    g.device_error = error;
}

void fake_fail_launches(int error)
{
    g.launch_error = error;
}

void fake_fail_malloc(int error)
{
    g.malloc_error = error;
}

void fake_fail_blas_create(int status)
{
    g.blas_create_status = status;
}

void fake_fail_gemm(int status)
{
    g.gemm_status = status;
}

int fake_launches(void)
{
    return g.launches;
}

int fake_bad_launches(void)
{
    return g.bad_launches;
}

int fake_kernel_count(void)
{
    return g_kernel_count;
}

const char *fake_kernel_name(int i)
{
    return i >= 0 && i < g_kernel_count ? g_kernels[i].name : NULL;
}

int fake_kernel_launched(int i)
{
    return i >= 0 && i < g_kernel_count ? g_kernels[i].launched : 0;
}

void fake_hang_streams(int on)
{
    g.hang = on;
}

int fake_blocking_syncs(void)
{
    return g.blocking_syncs;
}

void fake_nccl_async_error(int result, int after_polls)
{
    g.nccl_async = result;
    g.nccl_after = after_polls;
}

int fake_nccl_aborts(void)
{
    return g.nccl_aborts;
}

int fake_nccl_polls(void)
{
    return g.nccl_polls;
}

const char *fake_nccl_log(void)
{
    return g.nccl_log;
}

/* ---- what nvcc's generated code calls ---------------------------------- */

void **__cudaRegisterFatBinary(void *fat_cubin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaUnregisterFatBinary(void **handle);
void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                            const char *device_name, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bdim, dim3 *gdim, int *wsize);
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, void *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *host_fun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                               size_t shared, cudaStream_t stream);

void **__cudaRegisterFatBinary(void *fat_cubin)
{
    static void *handle;
    handle = fat_cubin;
    return &handle;
}

void __cudaRegisterFatBinaryEnd(void **handle)
{
    (void)handle;
}

void __cudaUnregisterFatBinary(void **handle)
{
    (void)handle;
}

void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                            const char *device_name, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bdim, dim3 *gdim, int *wsize)
{
    (void)handle, (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)bdim;
    (void)gdim, (void)wsize;
    if (g_kernel_count < MAX_KERNELS) {
        g_kernels[g_kernel_count].host_fun = host_fun;
        g_kernels[g_kernel_count].name = device_name;
        g_kernel_count++;
    }
}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, void *stream)
{
    if (t_config_n == MAX_CONFIGS)
        return 1;
    t_configs[t_config_n].grid = grid;
    t_configs[t_config_n].block = block;
    t_configs[t_config_n].shared = shared;
    t_configs[t_config_n].stream = stream;
    t_config_n++;
    return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream)
{
    if (t_config_n == 0)
        return cudaErrorMissingConfiguration;
    t_config_n--;
    *grid = t_configs[t_config_n].grid;
    *block = t_configs[t_config_n].block;
    *shared = t_configs[t_config_n].shared;
    *(void **)stream = t_configs[t_config_n].stream;
    return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *host_fun)
{
    *kernel = (cudaKernel_t)(uintptr_t)host_fun;
    return cudaSuccess;
}

/* The limits of every GPU since compute capability 3.0 (sm_90 included). */
static int config_ok(dim3 grid, dim3 block)
{
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    return grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 2147483647u && grid.y <= 65535 &&
           grid.z <= 65535 && block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024 &&
           block.y <= 1024 && block.z <= 64 && threads <= 1024;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                               size_t shared, cudaStream_t stream)
{
    (void)args, (void)shared, (void)stream;
    g.launches++;
    int k = 0;
    while (k < g_kernel_count && g_kernels[k].host_fun != (const void *)kernel)
        k++;
    cudaError_t e = cudaSuccess;
    if (k == g_kernel_count) {
        e = cudaErrorInvalidDeviceFunction;
    } else {
        g_kernels[k].launched++;
        if (!config_ok(grid, block)) {
            g.bad_launches++;
            e = cudaErrorInvalidConfiguration;
        } else if (g.launch_error) {
            e = (cudaError_t)g.launch_error;
        }
    }
    if (e != cudaSuccess)
        t_last = e;
    return e;
}

/* ---- the runtime API the module calls ---------------------------------- */

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return t_last;
}

/* A failed call sets the last error too, as CUDA's do. */
static cudaError_t fail(cudaError_t e)
{
    t_last = e;
    return e;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (g.device_error) {
        *count = 0;
        return fail((cudaError_t)g.device_error);
    }
    *count = g.device_count;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device >= 0 && device < g.device_count ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device < 0 || device >= g.device_count)
        return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "pipetop fake GPU %d", device);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device)
{
    if (device < 0 || device >= g.device_count)
        return fail(cudaErrorInvalidDevice);
    snprintf(bus, (size_t)len, "00000000:%02X:00.0", device + 1);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    *free_bytes = (size_t)1 << 30;
    *total = (size_t)2 << 30;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    *ptr = NULL;
    if (g.malloc_error)
        return fail((cudaError_t)g.malloc_error);
    *ptr = calloc(1, size ? size : 1);
    return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)kind, (void)stream;
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    (void)stream;
    memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags)
{
    (void)flags;
    *stream = (cudaStream_t)malloc(16);
    return *stream ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    (void)stream;
    if (g.hang)
        g.blocking_syncs++; /* a real one would not return */
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    (void)stream;
    return g.hang ? cudaErrorNotReady : cudaSuccess;
}

/* ---- cuBLAS --------------------------------------------------------------- */

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (g.blas_create_status)
        return (cublasStatus_t)g.blas_create_status;
    *handle = (cublasHandle_t)malloc(16);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    (void)handle, (void)stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo)
{
    (void)handle, (void)transa, (void)transb, (void)m, (void)n, (void)k, (void)alpha, (void)A;
    (void)Atype, (void)lda, (void)B, (void)Btype, (void)ldb, (void)beta, (void)C, (void)Ctype;
    (void)ldc, (void)computeType, (void)algo;
    return (cublasStatus_t)g.gemm_status;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    (void)handle, (void)transa, (void)transb, (void)m, (void)n, (void)k, (void)alpha, (void)A;
    (void)Atype, (void)lda, (void)strideA, (void)B, (void)Btype, (void)ldb, (void)strideB;
    (void)beta, (void)C, (void)Ctype, (void)ldc, (void)strideC, (void)batchCount;
    (void)computeType, (void)algo;
    return (cublasStatus_t)g.gemm_status;
}

/* ---- NCCL (opened by path through $PIPETOP_NCCL_LIBRARY) ---------------- */

struct ncclComm {
    int rank, size;
};

static void nccl_log(const char *fmt, long a, long b)
{
    size_t used = strlen(g.nccl_log);
    snprintf(g.nccl_log + used, sizeof g.nccl_log - used, fmt, a, b);
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static unsigned char next;
    memset(id, ++next, sizeof *id);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    (void)id;
    *comm = malloc(sizeof **comm);
    (*comm)->rank = rank;
    (*comm)->size = nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out,
                           ncclConfig_t *config)
{
    (void)color, (void)key, (void)config;
    *out = malloc(sizeof **out);
    **out = *comm;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    g.nccl_aborts++;
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    *count = comm->size;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    (void)comm;
    g.nccl_polls++;
    *async =
        g.nccl_async && g.nccl_polls >= g.nccl_after ? (ncclResult_t)g.nccl_async : ncclSuccess;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    static const char *const text[] = {"no error",
                                       "unhandled cuda error",
                                       "unhandled system error",
                                       "internal error",
                                       "invalid argument",
                                       "invalid usage",
                                       "remote process exited or there was a network error",
                                       "NCCL operation in progress"};
    return (unsigned)result < sizeof text / sizeof text[0] ? text[result] : "unknown result code";
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    (void)sendbuff, (void)recvbuff, (void)datatype, (void)op, (void)comm, (void)stream;
    nccl_log("allreduce %ld\n", (long)count, 0);
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)sendbuff, (void)datatype, (void)comm, (void)stream;
    nccl_log("send %ld %ld\n", peer, (long)count);
    return ncclSuccess;
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)recvbuff, (void)datatype, (void)comm, (void)stream;
    nccl_log("recv %ld %ld\n", peer, (long)count);
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    nccl_log("start\n", 0, 0);
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    nccl_log("end\n", 0, 0);
    return ncclSuccess;
}

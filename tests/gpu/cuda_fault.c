/* The real CUDA module (libpt_cuda.so) on a fault-injecting stand-in for the
 * CUDA runtime, cuBLAS and NCCL (tests/gpu/cuda_fake.h), so the module's
 * error handling is tested on a machine where CUDA cannot run:
 *
 *   launch_checks   every kernel launch is checked: with every launch failing,
 *                   each op reports (counts, and names on stderr) exactly as
 *                   many failures as it launched kernels, and every kernel
 *                   the module registers is launched by some op;
 *   tall_columns    col_sum and the layernorm parameter gradients launch
 *                   within the device's grid limits for 4,194,241 rows and
 *                   more (grid.y chunks stopped at 65,535 x 64 rows);
 *   no_gpu_reason   when CUDA cannot count its devices, the error is CUDA's
 *                   own words, not "no GPU visible";
 *   alloc_errors    a failed allocation is counted and says why (out of
 *                   memory, or an earlier error that broke the device);
 *   blas_errors     a failed cublasCreate names the call and cuBLAS's status;
 *   nccl_groups     a group of sends and receives is one ncclGroupStart/End;
 *   nccl_abort      an asynchronous NCCL error, or a stream that never
 *                   finishes, ends pt_nccl_wait with an error and
 *                   ncclCommAbort, never with a synchronize that cannot
 *                   return;
 *   nccl_missing    (run alone, with $PIPETOP_NCCL_LIBRARY naming no file)
 *                   the module and the CUDA backend load without NCCL, and
 *                   NCCL's refusal names the library. */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend_cuda.h"
#include "runtime/comm_nccl.h"
#include "runtime/cuda_module.h"
#include "tests/gpu/cuda_fake.h"
#include "tests/gpu/gpu_common.h"
#include "tests/test.h"

#define N                        4096 /* floats in each scratch buffer */
#define CUDA_ERR_NO_KERNEL_IMAGE 209  /* cudaErrorNoKernelImageForDevice */
#define CUDA_ERR_MEMORY          2    /* cudaErrorMemoryAllocation */
#define CUDA_ERR_ILLEGAL_ADDRESS 700  /* cudaErrorIllegalAddress */
#define CUDA_ERR_NO_DRIVER       35   /* cudaErrorInsufficientDriver */
#define CUDA_ERR_NO_DEVICE       100  /* cudaErrorNoDevice */
#define BLAS_NOT_INITIALIZED     1
#define BLAS_EXECUTION_FAILED    13
#define NCCL_REMOTE_ERROR        6

/* ---- stderr into a buffer ----------------------------------------------- */

static int g_saved_fd = -1;
static char g_capture_path[] = "/tmp/pipetop-cuda-fault.XXXXXX";

static void capture_begin(void)
{
    fflush(stderr);
    int fd = mkstemp(g_capture_path);
    REQUIRE(fd >= 0);
    g_saved_fd = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* What was written to stderr since capture_begin, into buf. */
static void capture_end(char *buf, size_t cap)
{
    fflush(stderr);
    dup2(g_saved_fd, 2);
    close(g_saved_fd);
    FILE *f = fopen(g_capture_path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    unlink(g_capture_path);
    memcpy(g_capture_path + strlen(g_capture_path) - 6, "XXXXXX", 6);
}

/* ---- a backend on the fake device --------------------------------------- */

static const pt_backend *open_backend(void)
{
    fake_reset();
    const pt_backend *be = NULL;
    pt_error err = {0};
    int rc = pt_backend_cuda_create(0, PT_CUDA_FP32, &be, &err);
    CHECK_MSG(rc == 0, "cuda:0 on the fake: %s", err.msg);
    return be;
}

typedef struct bufs {
    float *a, *b, *c, *d, *e, *f;
    int32_t *labels;
} bufs;

static void bufs_alloc(const pt_backend *be, bufs *x)
{
    float **all[] = {&x->a, &x->b, &x->c, &x->d, &x->e, &x->f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        *all[i] = be->alloc(be, N * sizeof(float));
    x->labels = be->alloc(be, N * sizeof(int32_t));
}

static void bufs_free(const pt_backend *be, bufs *x)
{
    float *all[] = {x->a, x->b, x->c, x->d, x->e, x->f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        be->free(be, all[i]);
    be->free(be, x->labels);
}

/* Every op of the table that launches a kernel, on small valid shapes. */
static void op_gemm0(const pt_backend *be, bufs *x)
{
    be->gemm(be, PT_NO_TRANS, PT_NO_TRANS, 4, 5, 0, 1.0f, x->a, 1, x->b, 5, 0.0f, x->c, 5);
}
static void op_gemm_batched0(const pt_backend *be, bufs *x)
{
    be->gemm_batched(be, PT_NO_TRANS, PT_TRANS, 4, 5, 0, 1.0f, x->a, 1, 0, x->b, 1, 0, 1.0f, x->c,
                     5, 20, 2);
}
static void op_axpy(const pt_backend *be, bufs *x)
{
    be->axpy(be, 100, 2.0f, x->a, x->b);
}
static void op_scale(const pt_backend *be, bufs *x)
{
    be->scale(be, 100, 2.0f, x->a);
}
static void op_fill(const pt_backend *be, bufs *x)
{
    be->fill(be, 100, 3.0f, x->a);
}
static void op_add(const pt_backend *be, bufs *x)
{
    be->add(be, 100, x->a, x->b, x->c);
}
static void op_dot(const pt_backend *be, bufs *x)
{
    (void)be->dot(be, 100, x->a, x->b);
}
static void op_add_row_vector(const pt_backend *be, bufs *x)
{
    be->add_row_vector(be, 10, 8, x->a, x->b);
}
static void op_col_sum(const pt_backend *be, bufs *x)
{
    be->col_sum(be, 10, 8, x->a, 1.0f, x->b);
}
static void op_relu(const pt_backend *be, bufs *x)
{
    be->relu_fwd(be, 100, x->a, x->b);
    be->relu_bwd(be, 100, x->b, x->c, x->d);
}
static void op_gelu(const pt_backend *be, bufs *x)
{
    be->gelu_fwd(be, 100, x->a, x->b);
    be->gelu_bwd(be, 100, x->a, x->c, x->d);
}
static void op_layernorm(const pt_backend *be, bufs *x)
{
    be->layernorm_fwd(be, 6, 16, 1e-5f, x->a, x->b, x->c, x->d, x->e, x->f);
    be->layernorm_bwd(be, 6, 16, x->a, x->d, x->b, x->e, x->f, x->c, x->b + 64, x->b + 128);
}
static void op_embedding(const pt_backend *be, bufs *x)
{
    (void)be->embedding_fwd(be, 2, 3, 4, 5, x->a, x->b, x->c, x->d);
    be->embedding_bwd(be, 2, 3, 4, x->a, x->d, x->e, x->f);
}
static void op_attention(const pt_backend *be, bufs *x)
{
    be->attention_softmax_fwd(be, 12, 6, x->a);
    be->attention_softmax_bwd(be, 12, 6, x->a, x->b, x->c);
}
static void op_attention_fused(const pt_backend *be, bufs *x)
{
    /* 2 samples of 6 rows, 2 heads of 4: qkv 144 floats, ctx 96, stats 48 */
    be->attention_fused_fwd(be, 2, 6, 2, 4, 0.5f, x->a, x->b, x->c);
    be->attention_fused_bwd(be, 2, 6, 2, 4, 0.5f, x->a, x->b, x->c, x->d, x->e, x->f);
}
static void op_xent(const pt_backend *be, bufs *x)
{
    double loss = 0;
    (void)be->softmax_xent_fwd(be, 4, 7, x->a, x->labels, x->b, &loss);
    be->softmax_xent_bwd(be, 4, 7, x->b, x->labels, 0.25f, x->c);
}
static void op_optim(const pt_backend *be, bufs *x)
{
    be->sgd_update(be, 100, 0.1f, 0.9f, 0.0f, x->a, x->a, x->b, x->c);
    be->adam_update(be, 100, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f, x->a, x->a, x->b, x->c,
                    x->d);
}

static const struct {
    const char *name;
    void (*run)(const pt_backend *be, bufs *x);
} g_ops[] = {{"gemm k=0", op_gemm0},
             {"gemm_batched k=0", op_gemm_batched0},
             {"axpy", op_axpy},
             {"scale", op_scale},
             {"fill", op_fill},
             {"add", op_add},
             {"dot", op_dot},
             {"add_row_vector", op_add_row_vector},
             {"col_sum", op_col_sum},
             {"relu", op_relu},
             {"gelu", op_gelu},
             {"layernorm", op_layernorm},
             {"embedding", op_embedding},
             {"attention_softmax", op_attention},
             {"attention_fused", op_attention_fused},
             {"softmax_xent", op_xent},
             {"sgd/adam", op_optim}};

/* The name ("k_axpy") of a mangled device name ("_Z6k_axpylfPKfPf"). */
static void short_name(const char *mangled, char *out, size_t cap)
{
    char *name = NULL;
    long n = strncmp(mangled, "_Z", 2) ? 0 : strtol(mangled + 2, &name, 10);
    if (n <= 0 || (size_t)n >= cap) {
        snprintf(out, cap, "%s", mangled);
        return;
    }
    memcpy(out, name, (size_t)n);
    out[n] = '\0';
}

static void test_launch_checks(void)
{
    const pt_backend *be = open_backend();
    REQUIRE(be);
    bufs x;
    bufs_alloc(be, &x);
    fake_fail_launches(CUDA_ERR_NO_KERNEL_IMAGE);
    static char log[1 << 16];
    for (size_t i = 0; i < sizeof g_ops / sizeof g_ops[0]; i++) {
        int errors0 = pt_cuda_error_count(), launches0 = fake_launches();
        capture_begin();
        g_ops[i].run(be, &x);
        capture_end(log, sizeof log);
        int errors = pt_cuda_error_count() - errors0, launches = fake_launches() - launches0;
        CHECK_MSG(launches >= 1, "%s launched no kernel", g_ops[i].name);
        CHECK_MSG(errors == launches, "%s: %d failed launches, %d reported", g_ops[i].name,
                  launches, errors);
        CHECK_MSG(strstr(log, "no kernel image is available"), "%s: stderr lacks CUDA's words: %s",
                  g_ops[i].name, log);
    }
    fake_fail_launches(0);
    /* every kernel the module registered was launched, and its failure named */
    int kernels = fake_kernel_count();
    CHECK_MSG(kernels >= 20, "only %d kernels registered", kernels);
    for (int k = 0; k < kernels; k++)
        CHECK_MSG(fake_kernel_launched(k) > 0, "kernel %s was never launched by any op",
                  fake_kernel_name(k));
    /* named: one launch of each kernel again, stderr read per kernel */
    fake_fail_launches(CUDA_ERR_NO_KERNEL_IMAGE);
    capture_begin();
    for (size_t i = 0; i < sizeof g_ops / sizeof g_ops[0]; i++)
        g_ops[i].run(be, &x);
    capture_end(log, sizeof log);
    fake_fail_launches(0);
    for (int k = 0; k < kernels; k++) {
        char name[64], want[96];
        short_name(fake_kernel_name(k), name, sizeof name);
        snprintf(want, sizeof want, "pipetop: cuda: %s launch: ", name);
        CHECK_MSG(strstr(log, want), "no \"%s\" on stderr", want);
    }
    bufs_free(be, &x);
    pt_backend_cuda_destroy(&be);
}

static void test_tall_columns(void)
{
    const pt_backend *be = open_backend();
    REQUIRE(be);
    bufs x;
    bufs_alloc(be, &x);
    /* 65,535 chunks of 64 rows is the most grid.y could cover; one more row,
     * and far more. The fake runs no kernel, so x is never read. */
    static const int rows[] = {4194240, 4194241, 50000000, 2147483647};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int errors0 = pt_cuda_error_count(), bad0 = fake_bad_launches();
        be->col_sum(be, rows[i], 3, x.a, 0.0f, x.b);
        be->layernorm_bwd(be, rows[i], 3, x.a, x.a, x.c, x.d, x.e, NULL, x.f, x.f + 8);
        CHECK_MSG(fake_bad_launches() == bad0, "%d rows: launched beyond the grid limits", rows[i]);
        CHECK_MSG(pt_cuda_error_count() == errors0, "%d rows: %d errors", rows[i],
                  pt_cuda_error_count() - errors0);
    }
    bufs_free(be, &x);
    pt_backend_cuda_destroy(&be);
}

static void test_no_gpu_reason(void)
{
    static const struct {
        int count, error;
        const char *want;
    } cases[] = {
        {0, CUDA_ERR_NO_DRIVER,
         "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA "
         "runtime version (cudaErrorInsufficientDriver)"},
        {0, CUDA_ERR_NO_DEVICE, "cudaGetDeviceCount: no CUDA-capable device is detected"},
        {0, 0, "no GPU visible"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fake_reset();
        fake_device_count(cases[i].count, cases[i].error);
        const pt_backend *be = NULL;
        pt_error err = {0};
        CHECK(pt_backend_cuda_create(0, PT_CUDA_FP32, &be, &err) == PT_EUNSUPP && !be);
        CHECK_STR_CONTAINS(err.msg, cases[i].want);
        if (cases[i].error) {
            CHECK_MSG(!strstr(err.msg, "no GPU visible"), "%s", err.msg);
            pt_error why = {0};
            CHECK(pt_cuda_device_probe(&why) == PT_EUNSUPP);
            CHECK_STR_CONTAINS(why.msg, cases[i].want);
        } else {
            CHECK(pt_cuda_device_probe(NULL) == 0);
        }
        CHECK(pt_cuda_device_count() == 0);
    }
    fake_reset();
    CHECK(pt_cuda_device_probe(NULL) == 1 && pt_cuda_device_count() == 1);
}

static void test_alloc_errors(void)
{
    const pt_backend *be = open_backend();
    REQUIRE(be);
    static const struct {
        int error;
        const char *want;
    } cases[] = {{CUDA_ERR_MEMORY, "cudaMalloc of 1048576 bytes on device 0: out of memory"},
                 {CUDA_ERR_ILLEGAL_ADDRESS,
                  "cudaMalloc of 1048576 bytes on device 0: an illegal memory access"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char log[1024];
        int errors0 = pt_cuda_error_count();
        fake_fail_malloc(cases[i].error);
        capture_begin();
        void *p = be->alloc(be, 1 << 20);
        capture_end(log, sizeof log);
        fake_fail_malloc(0);
        CHECK(p == NULL);
        CHECK_MSG(pt_cuda_error_count() == errors0 + 1, "a failed allocation counted %d times",
                  pt_cuda_error_count() - errors0);
        CHECK_STR_CONTAINS(log, cases[i].want);
    }
    void *p = be->alloc(be, 100);
    CHECK(p != NULL);
    be->free(be, p);
    pt_backend_cuda_destroy(&be);
}

static void test_blas_errors(void)
{
    fake_reset();
    fake_fail_blas_create(BLAS_NOT_INITIALIZED);
    const pt_backend *be = NULL;
    pt_error err = {0};
    CHECK(pt_backend_cuda_create(0, PT_CUDA_TF32, &be, &err) == PT_EIO && !be);
    CHECK_STR_CONTAINS(err.msg, "cuda: cublasCreate on device 0: ");
    CHECK_STR_CONTAINS(err.msg, "not initialized");
    be = open_backend();
    REQUIRE(be);
    bufs x;
    bufs_alloc(be, &x);
    fake_fail_gemm(BLAS_EXECUTION_FAILED);
    char log[1024];
    int errors0 = pt_cuda_error_count();
    capture_begin();
    be->gemm(be, PT_NO_TRANS, PT_NO_TRANS, 4, 5, 6, 1.0f, x.a, 6, x.b, 5, 0.0f, x.c, 5);
    capture_end(log, sizeof log);
    fake_fail_gemm(0);
    CHECK(pt_cuda_error_count() == errors0 + 1);
    CHECK_STR_CONTAINS(log, "pipetop: cublas: gemm: ");
    bufs_free(be, &x);
    pt_backend_cuda_destroy(&be);
}

/* A communicator of 2 ranks on the fake (rank 0 only: nothing crosses). */
static pt_nccl *open_comm(const pt_backend *be)
{
    char id[PT_NCCL_ID_HEX];
    pt_error err = {0};
    pt_nccl *c = NULL;
    int rc = pt_nccl_id_new(id, sizeof id, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0)
        CHECK_MSG(pt_nccl_create(id, 2, 0, be, &c, &err) == 0, "%s", err.msg);
    return c;
}

static void test_nccl_groups(void)
{
    const pt_backend *be = open_backend();
    REQUIRE(be);
    REQUIRE(pt_nccl_built());
    pt_nccl *c = open_comm(be);
    REQUIRE(c);
    float *a = be->alloc(be, 64), *b = be->alloc(be, 64);
    pt_nccl_p2p ops[2] = {{1, 1, a, 10}, {0, 1, b, 12}};
    pt_error err = {0};
    CHECK(pt_nccl_p2p_group(c, ops, 2, &err) == 0);
    CHECK(pt_nccl_send(c, 1, a, 3, &err) == 0);
    CHECK_MSG(!strcmp(fake_nccl_log(), "start\nsend 1 10\nrecv 1 12\nend\nstart\nsend 1 3\nend\n"),
              "NCCL calls: %s", fake_nccl_log());
    /* a bad peer anywhere in the group: nothing enqueued */
    ops[1].peer = 2;
    CHECK(pt_nccl_p2p_group(c, ops, 2, &err) == PT_EINVAL);
    CHECK(pt_nccl_p2p_group(c, ops, 0, &err) == PT_EINVAL);
    CHECK(!strstr(fake_nccl_log() + 40, "send 1 10"));
    CHECK(pt_nccl_wait(c, 1000, &err) == 0);
    be->free(be, a);
    be->free(be, b);
    pt_nccl_destroy(&c);
    CHECK(c == NULL && fake_nccl_aborts() == 0);
    pt_backend_cuda_destroy(&be);
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void test_nccl_abort(void)
{
    const pt_backend *be = open_backend();
    REQUIRE(be);
    pt_error err = {0};
    float *a = be->alloc(be, 64);
    /* a peer fails: NCCL reports it asynchronously while the stream never finishes */
    pt_nccl *c = open_comm(be);
    REQUIRE(c);
    CHECK(pt_nccl_send(c, 1, a, 16, &err) == 0);
    fake_hang_streams(1);
    fake_nccl_async_error(NCCL_REMOTE_ERROR, 5);
    CHECK(pt_nccl_wait(c, 60000, &err) == PT_EIO);
    CHECK_STR_CONTAINS(err.msg, "remote process exited or there was a network error");
    CHECK_STR_CONTAINS(err.msg, "communicator aborted");
    CHECK(fake_nccl_aborts() == 1 && fake_nccl_polls() >= 5);
    CHECK(pt_nccl_send(c, 1, a, 16, &err) == PT_EIO); /* aborted: refused, not enqueued */
    CHECK_STR_CONTAINS(err.msg, "aborted");
    pt_nccl_destroy(&c);
    CHECK(fake_nccl_aborts() == 1);
    /* a peer that never calls: the wait ends at its timeout */
    fake_nccl_async_error(0, 0);
    c = open_comm(be);
    REQUIRE(c);
    CHECK(pt_nccl_recv(c, 1, a, 16, &err) == 0);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(pt_nccl_wait(c, 300, &err) == PT_ETIMEOUT);
    double waited = seconds_since(&t0);
    CHECK_MSG(waited >= 0.29 && waited < 30, "waited %.3f s for a 300 ms timeout", waited);
    CHECK_STR_CONTAINS(err.msg, "did not finish in 300 ms");
    CHECK(fake_nccl_aborts() == 2);
    pt_nccl_destroy(&c);
    CHECK_MSG(fake_blocking_syncs() == 0,
              "%d synchronize calls on a stream that never finishes (each a hang on a GPU)",
              fake_blocking_syncs());
    fake_hang_streams(0);
    be->free(be, a);
    pt_backend_cuda_destroy(&be);
}

/* $PIPETOP_NCCL_LIBRARY names no file: no NCCL, but the CUDA backend works. */
static void test_nccl_missing(void)
{
    const char *lib = getenv("PIPETOP_NCCL_LIBRARY");
    REQUIRE(lib && access(lib, F_OK) != 0);
    const pt_backend *be = open_backend();
    CHECK_MSG(be != NULL, "the CUDA backend needs NCCL");
    CHECK(!pt_nccl_built());
    char id[PT_NCCL_ID_HEX];
    pt_error err = {0};
    CHECK(pt_nccl_id_new(id, sizeof id, &err) == PT_EUNSUPP);
    CHECK_STR_CONTAINS(err.msg, "nccl: cannot load ");
    CHECK_STR_CONTAINS(err.msg, lib);
    CHECK_STR_CONTAINS(err.msg, "cannot open shared object file");
    pt_nccl *c = NULL;
    CHECK(pt_nccl_create(id, 1, 0, be, &c, &err) == PT_EUNSUPP && !c);
    pt_backend_cuda_destroy(&be);
}

int main(int argc, char **argv)
{
    static const struct pt_test_case cases[] = {
        {"launch_checks", test_launch_checks}, {"tall_columns", test_tall_columns},
        {"no_gpu_reason", test_no_gpu_reason}, {"alloc_errors", test_alloc_errors},
        {"blas_errors", test_blas_errors},     {"nccl_groups", test_nccl_groups},
        {"nccl_abort", test_nccl_abort}};
    static const struct pt_test_case missing[] = {{"nccl_missing", test_nccl_missing}};
    pt_error why = {0};
    if (!pt_cuda_module_get(&why)) {
        printf("FAIL: the CUDA module does not load: %s\n", why.msg);
        return 1;
    }
    /* nccl_missing needs a process whose NCCL never loaded: it runs alone */
    int failed = argc > 1 && !strcmp(argv[1], "nccl_missing")
                     ? gpu_run_cases(missing, 1, NULL)
                     : gpu_run_cases(cases, sizeof cases / sizeof cases[0], NULL);
    return failed ? 1 : 0;
}

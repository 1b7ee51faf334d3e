/* NCCL on the GPUs of this machine. With one GPU: a one-rank communicator
 * from a console-made id, its all-reduce (the sum over one rank is the data),
 * a send/recv to itself (the data arrives), the split into a replica group,
 * and the executor refusing an NCCL rank that is not its own. With N >= 2
 * GPUs (one thread per GPU): the all-reduce of rank-dependent data equals the
 * sum, and a ring shift of send/recv delivers each rank's data to the next.
 * The multi-GPU part says plainly when it is not run. */
#include <pthread.h>
#include <string.h>

#include "runtime/comm_nccl.h"
#include "tests/gpu/gpu_common.h"

#define COUNT 1000003 /* floats: not a multiple of anything NCCL chunks by */

static int check_buffer(const pt_backend *be, const float *dev, float want_base, float want_step,
                        const char *what)
{
    float *h = malloc((size_t)COUNT * sizeof *h);
    be->download(be, h, dev, (size_t)COUNT * sizeof *h);
    int bad = 0;
    for (int64_t i = 0; i < COUNT && !bad; i++)
        bad = h[i] != want_base + want_step * (float)(i % 97);
    CHECK_MSG(!bad, "%s: wrong data", what);
    free(h);
    return !bad;
}

static void fill_pattern(const pt_backend *be, float *dev, float base, float step)
{
    float *h = malloc((size_t)COUNT * sizeof *h);
    for (int64_t i = 0; i < COUNT; i++)
        h[i] = base + step * (float)(i % 97);
    be->upload(be, dev, h, (size_t)COUNT * sizeof *h);
    be->synchronize(be);
    free(h);
}

static void test_one_rank(void)
{
    const pt_backend *be = gpu_open(PT_CUDA_FP32);
    REQUIRE(be);
    char id[PT_NCCL_ID_HEX];
    pt_error err = {0};
    REQUIRE(pt_nccl_id_new(id, sizeof id, &err) == 0);
    pt_nccl *c = NULL, *g = NULL;
    int rc = pt_nccl_create(id, 1, 0, be, &c, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK(pt_nccl_rank(c) == 0 && pt_nccl_size(c) == 1);
        float *a = be->alloc(be, COUNT * sizeof(float)), *b = be->alloc(be, COUNT * sizeof(float));
        fill_pattern(be, a, 1.0f, 0.5f);
        CHECK(pt_nccl_allreduce(c, a, COUNT, &err) == 0);
        CHECK(pt_nccl_wait(c, &err) == 0);
        int ok = check_buffer(be, a, 1.0f, 0.5f, "one-rank all-reduce");
        be->fill(be, COUNT, -7.0f, b);
        CHECK(pt_nccl_exchange(c, 0, a, 0, b, COUNT, &err) == 0);
        CHECK(pt_nccl_wait(c, &err) == 0);
        ok &= check_buffer(be, b, 1.0f, 0.5f, "send/recv to itself");
        CHECK(pt_nccl_send(c, 1, a, COUNT, &err) == PT_EINVAL); /* no rank 1 */
        CHECK(pt_nccl_split(c, 0, 0, &g, &err) == 0);
        CHECK(pt_nccl_size(g) == 1);
        printf(GPU_TAG " nccl one-rank all-reduce + send/recv %s\n", ok ? "PASS" : "FAIL");
        be->free(be, a);
        be->free(be, b);
    }
    pt_nccl_destroy(&g);
    pt_nccl_destroy(&c);
    CHECK(pt_nccl_create("zz", 1, 0, be, &c, &err) == PT_EINVAL && c == NULL);
    gpu_close(&be);
}

typedef struct rank_arg {
    int rank, size;
    const char *id;
    int ok;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    const pt_backend *be = NULL;
    pt_error err = {0};
    a->ok = 0;
    if (pt_backend_cuda_create(a->rank, PT_CUDA_FP32, &be, &err) < 0)
        return NULL;
    pt_backend_cuda_bind(be);
    pt_nccl *c = NULL;
    if (pt_nccl_create(a->id, a->size, a->rank, be, &c, &err) == 0) {
        float *x = be->alloc(be, COUNT * sizeof(float)), *y = be->alloc(be, COUNT * sizeof(float));
        fill_pattern(be, x, (float)a->rank, 1.0f);
        int ok = pt_nccl_allreduce(c, x, COUNT, &err) == 0 && pt_nccl_wait(c, &err) == 0;
        /* sum over ranks r of r + (i % 97) */
        float base = (float)(a->size * (a->size - 1) / 2), step = (float)a->size;
        ok = ok && check_buffer(be, x, base, step, "all-reduce");
        fill_pattern(be, x, (float)a->rank, 1.0f);
        int next = (a->rank + 1) % a->size, prev = (a->rank + a->size - 1) % a->size;
        ok = ok && pt_nccl_exchange(c, next, x, prev, y, COUNT, &err) == 0 &&
             pt_nccl_wait(c, &err) == 0 && check_buffer(be, y, (float)prev, 1.0f, "ring shift");
        a->ok = ok;
        be->free(be, x);
        be->free(be, y);
    }
    pt_nccl_destroy(&c);
    pt_backend_cuda_destroy(&be);
    return NULL;
}

static void test_multi_gpu(void)
{
    int n = pt_cuda_device_count();
    if (n < 2) {
        printf(GPU_TAG
               " nccl multi-GPU all-reduce and send/recv: NOT RUN (%d GPU visible, needs 2)\n",
               n);
        return;
    }
    char id[PT_NCCL_ID_HEX];
    REQUIRE(pt_nccl_id_new(id, sizeof id, NULL) == 0);
    pthread_t th[16];
    rank_arg args[16];
    if (n > 16)
        n = 16;
    for (int r = 0; r < n; r++) {
        args[r] = (rank_arg){r, n, id, 0};
        REQUIRE(pthread_create(&th[r], NULL, rank_main, &args[r]) == 0);
    }
    int ok = 1;
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        CHECK_MSG(args[r].ok, "rank %d of %d failed", r, n);
        ok &= args[r].ok;
    }
    printf(GPU_TAG " nccl %d-GPU all-reduce + ring send/recv %s\n", n, ok ? "PASS" : "FAIL");
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
#ifdef PT_GPU_DRY_RUN
    printf("nccl_gputest: DRY RUN: nothing to stand in for NCCL; only the id is made\n");
    (void)test_one_rank;
    (void)test_multi_gpu;
    char id[PT_NCCL_ID_HEX];
    int rc = pt_nccl_id_new(id, sizeof id, NULL);
    printf("%s\n", rc == 0 ? "ok   id" : "FAIL id");
    return rc == 0 ? 0 : 1;
#else
    gpu_require("nccl_gputest");
    if (!pt_nccl_built()) {
        printf("nccl_gputest: SKIPPED: this build has no NCCL\n");
        return PT_GPU_SKIP_CODE;
    }
    test_one_rank();
    printf("%s one_rank\n", pt_test_failures_ ? "FAIL" : "ok  ");
    int before = pt_test_failures_;
    test_multi_gpu();
    printf("%s multi_gpu\n", pt_test_failures_ != before ? "FAIL" : "ok  ");
    return pt_test_failures_ || pt_cuda_error_count() ? 1 : 0;
#endif
}

/* NCCL on the GPUs of this machine. With one GPU: a one-rank communicator
 * from a console-made id, its all-reduce (the sum over one rank is the data),
 * a send/recv to itself in one group (the data arrives), a bad peer refused
 * before anything is enqueued, the split into a replica group, and the
 * executor refusing an NCCL communicator whose rank is not its worker's (a
 * 2-stage pipeline on the GPU: worker 1 given rank 0 is refused, worker 0
 * accepts it). With N >= 2 GPUs (one thread per GPU): the all-reduce of
 * rank-dependent data equals the sum, and a ring shift of send/recv delivers
 * each rank's data to the next. The multi-GPU part says plainly when it is
 * not run. Every wait is bounded (pt_nccl_wait polls and aborts).
 *
 * Dry run: the recording stand-in of tests/gpu/cuda_standin.h plays NCCL and
 * the GPU, so the same logic runs (the multi-GPU part with two ranks on
 * threads); it checks the test, not NCCL. */
#include <pthread.h>
#include <string.h>

#include "runtime/comm_nccl.h"
#include "tests/gpu/cuda_standin.h"
#include "tests/gpu/gpu_common.h"
#include "tests/runtime/exec_common.h"

#define COUNT   1000003 /* floats: not a multiple of anything NCCL chunks by */
#define WAIT_MS 60000

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

/* The backend NCCL runs on: the GPU, or in the dry run the stand-in's. */
static const pt_backend *nccl_backend(void)
{
#ifdef PT_GPU_DRY_RUN
    return sti_install();
#else
    return gpu_open(PT_CUDA_FP32);
#endif
}

static void test_one_rank(void)
{
    const pt_backend *be = nccl_backend();
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
        CHECK_MSG(pt_nccl_wait(c, WAIT_MS, &err) == 0, "%s", err.msg);
        int ok = check_buffer(be, a, 1.0f, 0.5f, "one-rank all-reduce");
        be->fill(be, COUNT, -7.0f, b);
        CHECK(pt_nccl_exchange(c, 0, a, 0, b, COUNT, &err) == 0);
        CHECK_MSG(pt_nccl_wait(c, WAIT_MS, &err) == 0, "%s", err.msg);
        ok &= check_buffer(be, b, 1.0f, 0.5f, "send/recv to itself");
        CHECK(pt_nccl_send(c, 1, a, COUNT, &err) == PT_EINVAL); /* no rank 1 */
        pt_nccl_p2p bad[2] = {{1, 0, a, COUNT}, {0, 3, b, COUNT}};
        CHECK(pt_nccl_p2p_group(c, bad, 2, &err) == PT_EINVAL); /* nothing enqueued */
        CHECK_MSG(pt_nccl_wait(c, WAIT_MS, &err) == 0, "%s", err.msg);
        CHECK(pt_nccl_split(c, 0, 0, &g, &err) == 0);
        CHECK(pt_nccl_size(g) == 1);
        printf(GPU_TAG " nccl one-rank all-reduce + send/recv group + split %s\n",
               ok && pt_test_failures_ == 0 ? "PASS" : "FAIL");
        be->free(be, a);
        be->free(be, b);
    }
    pt_nccl_destroy(&g);
    pt_nccl_destroy(&c);
    CHECK(pt_nccl_create("zz", 1, 0, be, &c, &err) == PT_EINVAL && c == NULL);
#ifndef PT_GPU_DRY_RUN
    gpu_close(&be);
#endif
}

/* A 2-stage pipeline on the GPU; its executors take NCCL communicators only
 * of their own rank. */
static void test_wrong_rank(void)
{
    static const int cuts2[] = {0, 4, 8};
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = {.name = "1f1b-flush S=2",
                 .kind = PT_SCHED_1F1B_FLUSH,
                 .stages = 2,
                 .cuts = cuts2,
                 .mb_size = 2,
                 .mb_count = 4,
                 .optim = PT_OPTIM_SGD};
    pt_program prog;
    memset(&prog, 0, sizeof prog);
    REQUIRE(ec_program_spec(&c, &spec, &prog) == 0);
    static const pt_device_spec gpu0 = {1, 0, PT_CUDA_FP32};
    pt_pipeline_config pc = {.spec = &spec,
                             .prog = &prog,
                             .optim = ec_optim(c.optim),
                             .init_seed = INIT_SEED,
                             .data = ds,
                             .data_seed = DATA_SEED};
#ifdef PT_GPU_DRY_RUN
    pc.backend = sti_install();
    (void)gpu0;
#else
    pc.device = &gpu0;
#endif
    pt_pipeline *pp = NULL;
    pt_error err = {0};
    int rc = pt_pipeline_create(&pc, &pp, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    const pt_backend *be = pp ? pt_net_backend(pt_pipeline_net(pp, 1)) : NULL;
    char id[PT_NCCL_ID_HEX];
    pt_nccl *r0 = NULL;
    if (rc == 0 && pt_nccl_id_new(id, sizeof id, &err) == 0 &&
        pt_nccl_create(id, 1, 0, be, &r0, &err) == 0) {
        int refused = pt_exec_set_nccl(pt_pipeline_exec(pp, 1), r0, NULL, &err) == PT_EINVAL;
        CHECK(refused);
        CHECK_STR_CONTAINS(err.msg, "the NCCL rank is 0, not 1");
        int taken = pt_exec_set_nccl(pt_pipeline_exec(pp, 0), r0, NULL, &err) == 0;
        CHECK_MSG(taken, "worker 0 refused rank 0: %s", err.msg);
        CHECK(pt_exec_set_nccl(pt_pipeline_exec(pp, 0), NULL, NULL, &err) == 0);
        printf(GPU_TAG " nccl executor refuses rank 0 for worker 1, takes it for worker 0 %s\n",
               refused && taken ? "PASS" : "FAIL");
    } else {
        CHECK_MSG(0, "no communicator: %s", err.msg);
    }
    pt_nccl_destroy(&r0);
    pt_pipeline_destroy(&pp);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
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
        int ok = pt_nccl_allreduce(c, x, COUNT, &err) == 0 && pt_nccl_wait(c, WAIT_MS, &err) == 0;
        /* sum over ranks r of r + (i % 97) */
        float base = (float)(a->size * (a->size - 1) / 2), step = (float)a->size;
        ok = ok && check_buffer(be, x, base, step, "all-reduce");
        fill_pattern(be, x, (float)a->rank, 1.0f);
        int next = (a->rank + 1) % a->size, prev = (a->rank + a->size - 1) % a->size;
        ok = ok && pt_nccl_exchange(c, next, x, prev, y, COUNT, &err) == 0 &&
             pt_nccl_wait(c, WAIT_MS, &err) == 0 &&
             check_buffer(be, y, (float)prev, 1.0f, "ring shift");
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
#ifdef PT_GPU_DRY_RUN
    n = 2; /* two ranks on the stand-in */
#endif
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
    printf(GPU_TAG " nccl %d-rank all-reduce + ring send/recv %s\n", n, ok ? "PASS" : "FAIL");
}

int main(int argc, char **argv)
{
    gpu_require("nccl_gputest");
#ifdef PT_GPU_DRY_RUN
    if (!sti_install()) /* before anything loads the real module */
        return 1;
#endif
    if (!pt_nccl_built()) {
        pt_error why = {0};
        char id[PT_NCCL_ID_HEX];
        pt_nccl_id_new(id, sizeof id, &why);
        printf("nccl_gputest: SKIPPED: no NCCL: %s\n", why.msg);
        return PT_GPU_SKIP_CODE;
    }
    static const struct pt_test_case cases[] = {{"one_rank", test_one_rank},
                                                {"wrong_rank", test_wrong_rank},
                                                {"multi_gpu", test_multi_gpu}};
    int failed = gpu_run_cases(cases, sizeof cases / sizeof cases[0], argc > 1 ? argv[1] : NULL);
    CHECK_MSG(pt_cuda_error_count() == 0, "%d CUDA/cuBLAS calls failed (see stderr)",
              pt_cuda_error_count());
    return failed || pt_cuda_error_count() ? 1 : 0;
}

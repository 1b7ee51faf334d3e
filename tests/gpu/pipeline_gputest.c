/* 2- and 4-stage pipelines on the one GPU (every stage its own CUDA backend,
 * stream and cuBLAS handle on device 0, tensors between stages through host
 * copies over ZeroMQ) under gpipe, dapple and 1f1b-flush equal single-device
 * training on the same global batches within 1e-5 (fp32 matrix products):
 * the reference is the CPU's (tests/runtime/exec_common.h), so this also
 * checks the GPU's arithmetic end to end. The reference one step short is far
 * outside the tolerance. A replicated middle stage (two workers on the GPU,
 * all-reduce on host copies) and the GPT-style model are included. Prints a
 * GPU-CHECK line per case with the error and the measured iteration time. */
#include "tests/gpu/gpu_common.h"
#include "tests/runtime/exec_common.h"

#define ITERS 3

/* prints the table row gpu-check.sh collects: errors and the slowest worker's time */
static void report(const ec_case *c, const ec_run *r, const ec_weights *want, int before)
{
    double wall = 0;
    for (int w = 0; w < r->prog.worker_count; w++) {
        pt_exec_result res = pt_pipeline_result(r->pp, w);
        if (res.wall_ns / 1e6 > wall)
            wall = res.wall_ns / 1e6;
    }
    printf(GPU_TAG " pipeline %-36s rel %.2e maxrel %.2e tol %.0e iter %.3f ms %s\n", c->name,
           ec_rel(r->w.w, want->w, want->count), ec_maxrel(r->w.w, want->w, want->count), EQ_TOL,
           wall, pt_test_failures_ == before ? "PASS" : "FAIL");
}

static void run_case(const ec_case *c)
{
    ec_check_sync(c, ITERS, report);
}

static void test_stages(void)
{
    static const int cuts1[] = {0, 8}, cuts2[] = {0, 4, 8}, cuts4[] = {0, 2, 4, 6, 8};
    static const int gpt1[] = {0, 6}, gpt2[] = {0, 3, 6}, gpt4[] = {0, 1, 2, 3, 6};
    static const struct {
        pt_sched_kind kind;
        const char *name;
    } kinds[] = {{PT_SCHED_GPIPE, "gpipe"},
                 {PT_SCHED_DAPPLE, "dapple"},
                 {PT_SCHED_1F1B_FLUSH, "1f1b-flush"}};
    for (int gpt = 0; gpt < 2; gpt++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            for (int S = 1; S <= 4; S *= 2) {
                char name[80];
                snprintf(name, sizeof name, "%s %s S=%d", kinds[k].name, gpt ? "gpt" : "mlp", S);
                ec_case c = {.name = name,
                             .kind = kinds[k].kind,
                             .policy = 'A',
                             .stages = S,
                             .cuts = gpt ? (S == 1   ? gpt1
                                            : S == 2 ? gpt2
                                                     : gpt4)
                                         : (S == 1   ? cuts1
                                            : S == 2 ? cuts2
                                                     : cuts4),
                             .mb_size = 3,
                             .mb_count = 4,
                             /* Adam on the MLP only: see executor_sync_test's
                              * test_gpt for why not on the GPT */
                             .optim = gpt ? PT_OPTIM_SGD : PT_OPTIM_ADAM,
                             .gpt = gpt};
                if (S == 1 && k > 0)
                    continue; /* one stage: the kinds are the same program */
                run_case(&c);
            }
}

static void test_replicated(void)
{
    static const int cuts3[] = {0, 2, 5, 8};
    ec_case c = {.name = "dapple mlp S=3 middle x2",
                 .kind = PT_SCHED_DAPPLE,
                 .policy = 'A',
                 .stages = 3,
                 .cuts = cuts3,
                 .replicas = (const int[]){1, 2, 1},
                 .mb_size = 4,
                 .mb_count = 4,
                 .optim = PT_OPTIM_SGD};
    run_case(&c);
}

int main(int argc, char **argv)
{
    gpu_require("pipeline_gputest");
#ifdef PT_GPU_DRY_RUN
    ec_backend = gpu_open(PT_CUDA_FP32);
#else
    static const pt_device_spec gpu0 = {1, 0, PT_CUDA_FP32};
    ec_device = &gpu0;
#endif
    static const struct pt_test_case cases[] = {{"stages", test_stages},
                                                {"replicated", test_replicated}};
    int failed = gpu_run_cases(cases, sizeof cases / sizeof cases[0], argc > 1 ? argv[1] : NULL);
    CHECK_MSG(pt_cuda_error_count() == 0, "%d CUDA/cuBLAS calls failed (see stderr)",
              pt_cuda_error_count());
    return failed || pt_cuda_error_count() ? 1 : 0;
}

/* Shared by the GPU tests (tests/gpu/NAME_gputest.c, ctest label "gpu"): the
 * skip when no GPU is visible, the relative error they report, and the
 * precision thresholds of issue 11.
 *
 * A test that finds no GPU prints one "no GPU visible" line and exits with
 * PT_GPU_SKIP_CODE, which cmake/cuda.cmake declares as the test's
 * SKIP_RETURN_CODE: ctest then reports it as skipped ("Not Run"), never as
 * passed. Lines starting "GPU-CHECK " are the figures scripts/gpu-check.sh
 * collects into its table.
 *
 * Dry run: built with -DPT_GPU_DRY_RUN (scripts/gpu-check.sh --dry-run, the
 * NAME_gputest_dryrun programs of cmake/cuda.cmake) a test runs its whole
 * logic with a copy of the CPU backend standing in for the GPU, so the test
 * code itself is exercised on a machine without one; its figures say nothing
 * about a GPU and its lines are marked DRY-RUN. */
#ifndef PT_TESTS_GPU_COMMON_H
#define PT_TESTS_GPU_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/backend_cuda.h"
#include "runtime/backend_select.h"
#include "runtime/cuda_module.h"
#include "tests/test.h"

#define PT_GPU_SKIP_CODE 77

#define TOL_FP32 1e-4
#define TOL_TF32 1e-3
#define TOL_BF16 1e-2

static inline double gpu_tol(pt_cuda_math m)
{
    return m == PT_CUDA_BF16 ? TOL_BF16 : m == PT_CUDA_TF32 ? TOL_TF32 : TOL_FP32;
}

#ifdef PT_GPU_DRY_RUN
#define GPU_TAG "DRY-RUN"
static inline void gpu_require(const char *test)
{
    printf("%s: DRY RUN: a copy of the CPU backend stands in for the GPU\n", test);
}
#else
#define GPU_TAG "GPU-CHECK"
/* Exits with the skip code, saying why, unless a GPU is visible; fails
 * (exit 1) when the build has the CUDA module but it does not load, which
 * no GPU machine should see. */
static inline void gpu_require(const char *test)
{
    pt_error why = {0};
    if (!pt_cuda_module_get(&why) && why.code != PT_EUNSUPP) {
        printf("%s: FAILED: the CUDA backend is built but does not load: %s\n", test, why.msg);
        fflush(stdout);
        exit(1);
    }
    if (pt_cuda_device_count() > 0)
        return;
    printf("%s: SKIPPED: no GPU visible (%s)\n", test,
           why.code ? why.msg : "CUDA backend built, no device");
    fflush(stdout);
    exit(PT_GPU_SKIP_CODE);
}
#endif

/* ||got - want||_2 / ||want||_2 over n floats (0 when both are 0). */
static inline double gpu_rel(const float *got, const float *want, int64_t n)
{
    double d = 0, w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        d += e * e;
        w += (double)want[i] * want[i];
    }
    if (w == 0)
        return d == 0 ? 0 : INFINITY;
    return sqrt(d / w);
}

/* A CUDA backend on device 0 in math mode m (a failed CHECK and NULL when it
 * cannot be made); free with gpu_close. */
static inline const pt_backend *gpu_open(pt_cuda_math m)
{
#ifdef PT_GPU_DRY_RUN
    static pt_backend stand_in[3];
    stand_in[m] = *pt_backend_cpu();
    stand_in[m].name = "cpu-as-gpu";
    return &stand_in[m];
#else
    const pt_backend *be = NULL;
    pt_error err = {0};
    int rc = pt_backend_cuda_create(0, m, &be, &err);
    CHECK_MSG(rc == 0, "cuda:0:%s: %s", pt_cuda_math_name(m), err.msg);
    return be;
#endif
}

static inline void gpu_close(const pt_backend **be)
{
    pt_backend_cuda_destroy(be); /* ignores the dry run's stand-in */
    *be = NULL;
}

#endif

#include "runtime/blas_core.h"

#include <cblas.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

const char *pt_blas_core_name(void)
{
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

const char *pt_blas_better_core(void)
{
    if (getenv("OPENBLAS_CORETYPE") || getenv(PT_BLAS_FIXUP_OFF_ENV))
        return NULL;
    if (strcasecmp(pt_blas_core_name(), "prescott") != 0)
        return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

int pt_blas_fixup_core(char **argv)
{
    const char *core = pt_blas_better_core();
    if (!core)
        return 0;
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return -1;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE");
    return -1;
}

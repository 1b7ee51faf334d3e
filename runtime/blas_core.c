#include "runtime/blas_core.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Longest command line re-executed; a longer one is left alone. */
#define CMDLINE_MAX_BYTES 65536

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

/* The process's arguments from /proc/self/cmdline (NUL-separated), as a
 * NULL-terminated array in one allocation; NULL on failure. */
static char **own_cmdline(void)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f)
        return NULL;
    char buf[CMDLINE_MAX_BYTES];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int complete = feof(f);
    fclose(f);
    if (n == 0 || !complete)
        return NULL;
    buf[n] = '\0';
    size_t argc = 0;
    for (size_t i = 0; i < n; i++)
        argc += buf[i] == '\0';
    if (buf[n - 1] != '\0')
        argc++;
    char **argv = malloc((argc + 1) * sizeof(char *) + n + 1);
    if (!argv)
        return NULL;
    char *text = (char *)(argv + argc + 1);
    memcpy(text, buf, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n && k < argc; i += strlen(text + i) + 1)
        argv[k++] = text + i;
    argv[k] = NULL;
    return argv;
}

int pt_blas_fixup_core(char **argv)
{
    const char *core = pt_blas_better_core();
    if (!core)
        return 0;
    char **own = argv ? NULL : own_cmdline();
    if (!argv && !own)
        return -1;
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) {
        free(own);
        return -1;
    }
    fflush(NULL);
    execv("/proc/self/exe", argv ? argv : own);
    unsetenv("OPENBLAS_CORETYPE");
    free(own);
    return -1;
}

/* OpenBLAS picks its kernels from the CPU model at load time. A CPU newer
 * than the installed OpenBLAS (Debian 12 ships 0.3.21, which predates
 * Sapphire/Emerald Rapids) falls back to the SSE3 "Prescott" kernels, about
 * 4x slower at sgemm than the AVX-512 ones the CPU can run. The choice can
 * only be overridden through OPENBLAS_CORETYPE before the library loads, so
 * a program fixes it by setting that variable and re-executing itself. */
#ifndef PT_RUNTIME_BLAS_CORE_H
#define PT_RUNTIME_BLAS_CORE_H

/* Environment variable that turns the fix-up off (any value). */
#define PT_BLAS_FIXUP_OFF_ENV "PT_NO_BLAS_FIXUP"

/* The OpenBLAS core type this CPU should use when OpenBLAS fell back to
 * Prescott: "SkylakeX" (AVX-512), "Haswell" (AVX2 + FMA), or NULL when
 * OpenBLAS's own choice stands (it recognised the CPU, OPENBLAS_CORETYPE is
 * already set, the fix-up is off, or the CPU has neither). */
const char *pt_blas_better_core(void);

/* When pt_blas_better_core() is not NULL, sets OPENBLAS_CORETYPE and
 * re-executes the whole process (/proc/self/exe) with argv, or with the
 * process's own command line from /proc/self/cmdline when argv is NULL (for
 * sub-commands that no longer hold main's argv). Never returns on success:
 * the program starts again from main with the same arguments. Returns 0 when
 * nothing needed doing, or -1 when the exec failed (the program goes on with
 * the slow kernels). Call before any thread starts and before any output. */
int pt_blas_fixup_core(char **argv);

/* The core OpenBLAS is using ("SkylakeX", "Prescott", ...); never NULL. */
const char *pt_blas_core_name(void);

#endif

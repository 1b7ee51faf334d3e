/* A stand-in for the CUDA module of another pipetop build, for
 * tests/cuda_module_test.sh: its table carries the wrong ABI number, so the
 * core must refuse it with a message; and loading it creates the file named
 * by $PT_TEST_MODULE_MARK, so the test can tell whether a program loaded
 * the module at all (a CPU run must not). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/cuda_module.h"

__attribute__((constructor)) static void mark_loaded(void)
{
    const char *mark = getenv("PT_TEST_MODULE_MARK");
    int fd = mark && *mark ? open(mark, O_WRONLY | O_CREAT, 0600) : -1;
    if (fd >= 0)
        close(fd);
}

const pt_cuda_module *pt_cuda_module_v1(void)
{
    static const pt_cuda_module stale = {
        .abi = PT_CUDA_MODULE_ABI + 1, .size = sizeof stale, .backend_size = sizeof(pt_backend)};
    return &stale;
}

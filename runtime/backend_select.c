/* Device names to backends (runtime/backend_select.h). */
#include "runtime/backend_select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_math(const char *text, const char *s, pt_cuda_math *out, pt_error *err)
{
    for (int m = 0; pt_cuda_math_name(m); m++)
        if (!strcmp(s, pt_cuda_math_name(m))) {
            *out = (pt_cuda_math)m;
            return 0;
        }
    return pt_error_set(err, PT_EINVAL, "device \"%s\": precision \"%s\" is not fp32, tf32 or bf16",
                        text, s);
}

int pt_device_spec_parse(const char *text, pt_device_spec *out, pt_error *err)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return pt_error_set(err, PT_EINVAL, "device: empty (want cpu or cuda:N)");
    if (!strcmp(text, "cpu"))
        return 0;
    if (strncmp(text, "cuda", 4) != 0 || (text[4] != '\0' && text[4] != ':'))
        return pt_error_set(err, PT_EINVAL, "device \"%s\": want cpu, cuda, cuda:N or cuda:N:PREC",
                            text);
    out->cuda = 1;
    if (text[4] == '\0')
        return 0;
    const char *p = text + 5;
    if (*p < '0' || *p > '9')
        return pt_error_set(err, PT_EINVAL, "device \"%s\": device index must be a number 0..%d",
                            text, PT_DEVICE_INDEX_MAX);
    long v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
        if (v > PT_DEVICE_INDEX_MAX)
            return pt_error_set(err, PT_EINVAL, "device \"%s\": device index above %d", text,
                                PT_DEVICE_INDEX_MAX);
    }
    out->index = (int)v;
    if (*p == '\0')
        return 0;
    if (*p != ':' || p[1] == '\0')
        return pt_error_set(err, PT_EINVAL, "device \"%s\": want cuda:N or cuda:N:PREC", text);
    return parse_math(text, p + 1, &out->math, err);
}

int pt_device_spec_format(const pt_device_spec *d, char *buf, size_t cap)
{
    int n;
    if (!d->cuda)
        n = snprintf(buf, cap, "cpu");
    else if (d->math == PT_CUDA_FP32)
        n = snprintf(buf, cap, "cuda:%d", d->index);
    else
        n = snprintf(buf, cap, "cuda:%d:%s", d->index, pt_cuda_math_name(d->math));
    return n < 0 || (size_t)n >= cap ? PT_ERANGE : n;
}

int pt_device_open(const pt_device_spec *d, const pt_backend **out, pt_error *err)
{
    *out = NULL;
    if (!d->cuda) {
        *out = pt_backend_cpu();
        return 0;
    }
    return pt_backend_cuda_create(d->index, d->math, out, err);
}

void pt_device_close(const pt_backend **be_p)
{
    if (be_p && *be_p && pt_backend_is_cuda(*be_p))
        pt_backend_cuda_destroy(be_p);
    if (be_p)
        *be_p = NULL;
}

void pt_device_describe(const pt_backend *be, char *buf, size_t cap)
{
    if (!cap)
        return;
    buf[0] = '\0';
    if (!pt_backend_is_cuda(be)) {
        snprintf(buf, cap, "cpu");
        return;
    }
    char name[128];
    if (pt_cuda_device_name(pt_backend_cuda_device(be), name, sizeof name) < 0)
        snprintf(name, sizeof name, "cuda:%d", pt_backend_cuda_device(be));
    snprintf(buf, cap, "%s", name);
}

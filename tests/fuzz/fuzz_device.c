/* Fuzz harness for the device description parser (libFuzzer, or
 * replay_main.c over the corpus); the shared properties are in
 * fuzz_format.h, adapted to a record parsed into the caller's struct. */
#include <stdlib.h>

#include "protocol/device.h"
#include "tests/fuzz/fuzz_format.h"

/* pt_device_parse fills a struct; the shared macro wants a parser that
 * allocates, so these wrap it in one. */
static int parse_alloc(const char *json, const char *source, pt_device_desc **out, pt_error *err)
{
    *out = NULL;
    pt_device_desc *d = malloc(sizeof *d);
    if (!d)
        return PT_ENOMEM;
    int rc = pt_device_parse(json, source, d, err);
    if (rc < 0) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

static void free_device(pt_device_desc **d)
{
    free(*d);
    *d = NULL;
}

static const char *check(const pt_device_desc *d)
{
    if (!(d->peak_flops > 0) || d->peaks[PT_PRECISION_FP32] != d->peak_flops)
        return "an accepted device has no fp32 peak equal to peak_flops";
    if (!(d->mem_bandwidth > 0) || d->memory_bytes < 1 || !(d->launch_us >= 0))
        return "an accepted device has a non-positive bandwidth or memory or a negative launch";
    return NULL;
}

PT_FUZZ_FORMAT("device", pt_device_desc, parse_alloc, pt_device_to_json, free_device, check)

/* Device descriptions (docs/formats.md, "Device description"). */
#include "protocol/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/datadir.h"
#include "protocol/fileio.h"
#include "protocol/json_util.h"

static const char *const device_keys[] = {
    "v",     "name",      "description",   "reference",    "peak_flops",
    "peaks", "launch_us", "mem_bandwidth", "memory_bytes", NULL};

static const pt_jr_range FLOPS = {PT_DEVICE_FLOPS_MIN, PT_DEVICE_FLOPS_MAX, 0, 0};

double pt_device_peak(const pt_device_desc *d, int precision)
{
    if (!d || precision < 0 || precision >= PT_PRECISION_COUNT)
        return 0;
    if (precision == PT_PRECISION_FP32 && !(d->peaks[precision] > 0))
        return d->peak_flops;
    return d->peaks[precision];
}

/* "peaks": {"bf16": 989e12, ...}: the tensor precisions; fp32 is peak_flops. */
static int parse_peaks(pt_jr *jr, const cJSON *root, pt_device_desc *d)
{
    const cJSON *o = NULL;
    int rc = pt_jr_object(jr, root, "", "peaks", PT_JR_OPTIONAL, &o);
    if (rc < 0 || !o)
        return rc;
    for (const cJSON *e = o->child; e; e = e->next) {
        if (e->string && e->string[0] == '_')
            continue;
        int p = pt_precision_parse(e->string);
        if (p < 0)
            return pt_jr_fail(jr, PT_EINVAL, "peaks", e->string, "unknown precision (%s)",
                              pt_precision_names());
        if (p == PT_PRECISION_FP32)
            return pt_jr_fail(jr, PT_EINVAL, "peaks", e->string,
                              "the fp32 peak is peak_flops, not an entry of peaks");
    }
    if ((rc = pt_jr_keys(jr, o, "peaks",
                         (const char *const[]){"tf32", "bf16", "fp16", "fp8", NULL})) < 0)
        return rc;
    for (int p = PT_PRECISION_FP32 + 1; p < PT_PRECISION_COUNT; p++)
        if ((rc = pt_jr_num(jr, o, "peaks", pt_precision_name(p), PT_JR_OPTIONAL, 0, FLOPS,
                            &d->peaks[p])) < 0)
            return rc;
    return 0;
}

int pt_device_parse(const char *json, const char *source, pt_device_desc *out, pt_error *err)
{
    if (!source)
        source = "device";
    if (!json || !out)
        return pt_error_set(err, PT_EINVAL, "%s: no text to parse", source);
    memset(out, 0, sizeof *out);
    pt_jr jr = {source, err};
    cJSON *root;
    int rc = pt_jr_parse(&jr, json, &root);
    if (rc < 0)
        return rc;
    const pt_jr_range bandwidth = {PT_DEVICE_BANDWIDTH_MIN, PT_DEVICE_BANDWIDTH_MAX, 0, 0};
    const pt_jr_range launch = {0, PT_DEVICE_LAUNCH_US_MAX, 0, 0};
    pt_device_desc d = {0};

    if ((rc = pt_jr_keys(&jr, root, "", device_keys)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "name", PT_JR_REQUIRED, NULL, d.name, sizeof d.name)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "description", PT_JR_OPTIONAL, NULL, d.description,
                        sizeof d.description)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "reference", PT_JR_OPTIONAL, NULL, d.reference,
                        sizeof d.reference)) < 0 ||
        (rc = pt_jr_num(&jr, root, "", "peak_flops", PT_JR_REQUIRED, 0, FLOPS, &d.peak_flops)) <
            0 ||
        (rc = parse_peaks(&jr, root, &d)) < 0 ||
        (rc = pt_jr_num(&jr, root, "", "launch_us", PT_JR_OPTIONAL, 0, launch, &d.launch_us)) < 0 ||
        (rc = pt_jr_num(&jr, root, "", "mem_bandwidth", PT_JR_REQUIRED, 0, bandwidth,
                        &d.mem_bandwidth)) < 0 ||
        (rc = pt_jr_int64(&jr, root, "", "memory_bytes", PT_JR_REQUIRED, 0, 1, PT_JSON_INT_MAX,
                          &d.memory_bytes)) < 0) {
        cJSON_Delete(root);
        return rc;
    }
    cJSON_Delete(root);
    d.peaks[PT_PRECISION_FP32] = d.peak_flops;
    *out = d;
    return 0;
}

int pt_device_load(const char *path, pt_device_desc *out, pt_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!path || !out)
        return pt_error_set(err, PT_EINVAL, "device: no path given");
    char *text = NULL;
    size_t len = 0;
    int rc = pt_file_read(path, &text, &len, err);
    if (rc < 0)
        return rc;
    rc = pt_device_parse(text, path, out, err);
    free(text);
    return rc;
}

int pt_device_find(const char *name, pt_device_desc *out, pt_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!out)
        return pt_error_set(err, PT_EINVAL, "device: no output");
    char path[PT_DATADIR_PATH_MAX];
    int rc = pt_datadir_lookup("device", "devices", "PT_DEVICES_DIR", name, path, sizeof path, err);
    return rc < 0 ? rc : pt_device_load(path, out, err);
}

char *pt_device_to_json(const pt_device_desc *d)
{
    if (!d)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    if (!cJSON_AddNumberToObject(root, "v", PT_FORMAT_VERSION) ||
        !cJSON_AddStringToObject(root, "name", d->name) ||
        (d->description[0] && !cJSON_AddStringToObject(root, "description", d->description)) ||
        (d->reference[0] && !cJSON_AddStringToObject(root, "reference", d->reference)) ||
        !cJSON_AddNumberToObject(root, "peak_flops", d->peak_flops) ||
        !cJSON_AddNumberToObject(root, "mem_bandwidth", d->mem_bandwidth) ||
        !cJSON_AddNumberToObject(root, "memory_bytes", (double)d->memory_bytes) ||
        (d->launch_us > 0 && !pt_jr_add_number(root, "launch_us", d->launch_us))) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON *peaks = NULL;
    for (int p = PT_PRECISION_FP32 + 1; p < PT_PRECISION_COUNT; p++) {
        if (!(d->peaks[p] > 0))
            continue;
        if ((!peaks && !(peaks = cJSON_AddObjectToObject(root, "peaks"))) ||
            !pt_jr_add_number(peaks, pt_precision_name(p), d->peaks[p])) {
            cJSON_Delete(root);
            return NULL;
        }
    }
    return pt_jr_print_and_delete(root);
}

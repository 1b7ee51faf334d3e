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
    "v", "name", "description", "reference", "peak_flops", "mem_bandwidth", "memory_bytes", NULL};

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
    const pt_jr_range flops = {PT_DEVICE_FLOPS_MIN, PT_DEVICE_FLOPS_MAX, 0, 0};
    const pt_jr_range bandwidth = {PT_DEVICE_BANDWIDTH_MIN, PT_DEVICE_BANDWIDTH_MAX, 0, 0};
    pt_device_desc d = {0};
    if ((rc = pt_jr_keys(&jr, root, "", device_keys)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "name", PT_JR_REQUIRED, NULL, d.name, sizeof d.name)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "description", PT_JR_OPTIONAL, NULL, d.description,
                        sizeof d.description)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "reference", PT_JR_OPTIONAL, NULL, d.reference,
                        sizeof d.reference)) < 0 ||
        (rc = pt_jr_num(&jr, root, "", "peak_flops", PT_JR_REQUIRED, 0, flops, &d.peak_flops)) <
            0 ||
        (rc = pt_jr_num(&jr, root, "", "mem_bandwidth", PT_JR_REQUIRED, 0, bandwidth,
                        &d.mem_bandwidth)) < 0 ||
        (rc = pt_jr_int64(&jr, root, "", "memory_bytes", PT_JR_REQUIRED, 0, 1, PT_JSON_INT_MAX,
                          &d.memory_bytes)) < 0) {
        cJSON_Delete(root);
        return rc;
    }
    cJSON_Delete(root);
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
        !cJSON_AddNumberToObject(root, "memory_bytes", (double)d->memory_bytes)) {
        cJSON_Delete(root);
        return NULL;
    }
    return pt_jr_print_and_delete(root);
}

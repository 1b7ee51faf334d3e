/* Device description: what an analytic profile needs to know about a device
 * that is not at hand (docs/formats.md, "Device description").
 *
 *   {"v": 1, "name": "a100-40gb", "description": "...", "peak_flops": 19.5e12,
 *    "peaks": {"tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
 *    "mem_bandwidth": 1.555e12, "launch_us": 4, "memory_bytes": 42949672960,
 *    "reference": "..."}
 *
 * peak_flops is the dense fp32 (non-tensor) peak; "peaks" adds the dense
 * tensor-core peaks of the other precisions the device runs (protocol/
 * precision.h; a precision it lacks has no entry); launch_us is the least
 * time one kernel occupies the device (0 for a CPU: measured profiles carry
 * their own fixed share). Files from before these fields read as fp32-only
 * with no launch cost.
 *
 * Shipped descriptions live in devices/<name>.json. The record is plain data
 * with no owned memory: parse into a caller's struct, nothing to free. */
#ifndef PT_PROTOCOL_DEVICE_H
#define PT_PROTOCOL_DEVICE_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/precision.h"

#define PT_DEVICE_TEXT_MAX 512
/* Bounds that catch unit mistakes (GFLOP/s typed as FLOP/s and the like). */
#define PT_DEVICE_FLOPS_MIN     1e6  /* FLOP/s */
#define PT_DEVICE_FLOPS_MAX     1e18 /* FLOP/s */
#define PT_DEVICE_BANDWIDTH_MIN 1e6  /* bytes/s */
#define PT_DEVICE_BANDWIDTH_MAX 1e16 /* bytes/s */
#define PT_DEVICE_LAUNCH_US_MAX 1e3  /* µs: a millisecond per kernel is a unit slip */

typedef struct pt_device_desc {
    char name[PT_NAME_MAX];
    char description[PT_DEVICE_TEXT_MAX]; /* "" when not given */
    char reference[PT_DEVICE_TEXT_MAX];   /* where the figures come from; "" when not given */
    double peak_flops;                    /* dense fp32 FLOP/s, > 0 */
    double mem_bandwidth;                 /* device memory bandwidth, bytes/s, > 0 */
    int64_t memory_bytes;                 /* device memory, bytes, > 0 */
    /* dense peak FLOP/s per precision (pt_precision); [PT_PRECISION_FP32] ==
     * peak_flops after parsing; 0: the device does not run that precision */
    double peaks[PT_PRECISION_COUNT];
    double launch_us; /* least time one kernel takes on the device, µs, >= 0 */
} pt_device_desc;

/* The device's dense peak for a precision (FLOP/s); 0 when it has none (a
 * hand-filled record with peaks[] unset falls back to peak_flops for fp32). */
double pt_device_peak(const pt_device_desc *device, int precision);

/* Parses and validates a description from JSON text; `source` names the text
 * in errors. On success fills *out; on failure *out is zeroed and err names
 * the field and the reason. Returns 0 or a negative PT_E* code; PT_EINVAL when
 * json or out is NULL. */
int pt_device_parse(const char *json, const char *source, pt_device_desc *out, pt_error *err);

/* Reads and parses a file; errors name its path. */
int pt_device_load(const char *path, pt_device_desc *out, pt_error *err);

/* Looks `name` up as a path first, then as <dir>/<name>.json in
 * $PT_DEVICES_DIR and <data folder>/devices (protocol/datadir.h).
 * PT_ENOTFOUND (with the places looked in) when none holds it. */
int pt_device_find(const char *name, pt_device_desc *out, pt_error *err);

/* Serialises to JSON text (caller frees with free()); NULL on no memory or a
 * NULL device. pt_device_parse of the result gives back an equal record. */
char *pt_device_to_json(const pt_device_desc *device);

#endif

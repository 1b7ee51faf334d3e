/* Picking a compute backend from a device name given by the user: "cpu",
 * "cuda" (device 0), "cuda:N", optionally with the matrix-product precision
 * of the CUDA backend after a second colon: "cuda:0:tf32", "cuda:1:bf16"
 * (default fp32; see runtime/backend_cuda.h). The same text is accepted by
 * pipetop-agent --device, pipetop profile --device and pipetop train --device. */
#ifndef PT_RUNTIME_BACKEND_SELECT_H
#define PT_RUNTIME_BACKEND_SELECT_H

#include <stddef.h>

#include "protocol/error.h"
#include "runtime/backend.h"
#include "runtime/backend_cuda.h"

#define PT_DEVICE_INDEX_MAX 4095 /* highest cuda:N accepted */

typedef struct pt_device_spec {
    int cuda;          /* 0: the CPU backend; 1: CUDA device `index` */
    int index;         /* CUDA device, 0..PT_DEVICE_INDEX_MAX; 0 for the CPU */
    pt_cuda_math math; /* CUDA only */
} pt_device_spec;

/* Parses `text` into *out. Returns 0, or PT_EINVAL with err naming the text
 * and what is wrong ("cuda:x: device index must be a number 0..4095").
 * Nothing is opened: a CUDA spec parses in a build without CUDA. */
int pt_device_spec_parse(const char *text, pt_device_spec *out, pt_error *err);

/* Writes the canonical text of *d ("cpu", "cuda:0", "cuda:1:bf16") into buf.
 * Returns the length, or PT_ERANGE when it does not fit. */
int pt_device_spec_format(const pt_device_spec *d, char *buf, size_t cap);

/* Opens the backend *d names: the static CPU backend, or a new CUDA backend.
 * On success *out is the backend (release with pt_device_close); on failure
 * *out is NULL and the result is pt_backend_cuda_create's. */
int pt_device_open(const pt_device_spec *d, const pt_backend **out, pt_error *err);

/* Releases a backend from pt_device_open (NULL-safe; sets *be_p = NULL). */
void pt_device_close(const pt_backend **be_p);

/* A human name of the device behind be: "cpu", or the GPU's name as the
 * driver reports it ("NVIDIA H200"). Always NUL-terminates buf. */
void pt_device_describe(const pt_backend *be, char *buf, size_t cap);

#endif

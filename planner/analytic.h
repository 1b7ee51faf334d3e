/* Analytic profiles: per-layer costs derived from a model spec's FLOPs and
 * bytes and a device description, for devices that are not at hand
 * (`pipetop profile --analytic`, docs/formats.md "Device description").
 *
 * For layer i at micro-batch size B, with F_i its forward FLOPs per sample,
 * in_i / out_i the floats per sample entering / leaving it and P_i its
 * parameter count (from pt_model_spec_shapes):
 *
 *   fwd bytes   = (in_i + out_i) * 4 * B + weights read * 4
 *   fwd_ms      = 1000 * max(F_i * B / (peak_flops * efficiency), fwd bytes / mem_bandwidth)
 *   bwd_ms      = 1000 * max(2 F_i * B / (peak_flops * efficiency), 2 fwd bytes / mem_bandwidth)
 *   recompute_ms = fwd_ms
 *   act_bytes   = out_i * 4 * B,   param_bytes = P_i * 4,   input_bytes = in_0 * 4 * B
 *
 * where "weights read" is P_i, except for an embedding, which reads only the
 * rows it gathers: min(P_i, out_i * B).
 *
 *   saved_bytes   = saved_i * 4 * B,   scratch_bytes = scratch_i * 4 * B
 *
 * restate the runtime's layouts (runtime/layer_*.c), floats per sample for
 * an input of shape [.., d] with r = in_i / d rows:
 *   layernorm  saved r * 2 (mean and 1/std per row)
 *   attention  [T, D], H heads: saved = scratch = 3TD (Q, K, V) + H T^2
 *              (probabilities) + TD (context)
 *   softmax_xent  saved r (its labels, one int32 per row)
 *   residual   saved = its body's output (in_i) + the body's inner layers'
 *              outputs + the body layers' saved; scratch = the input
 *              gradients of its body layers but the first + their largest
 *              scratch
 *   linear, relu, gelu, embedding: 0 (the chain keeps inputs and outputs).
 *
 *   keep_bytes = keep_i * 4 * B: a split backward's output gradients, kept
 *   from B to W: out_i for a layer with parameters, and for a residual
 *   also the outputs of its body's layers with parameters but the last. */
#ifndef PT_PLANNER_ANALYTIC_H
#define PT_PLANNER_ANALYTIC_H

#include "protocol/device.h"
#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/profile.h"

/* Fraction of the device's peak FLOP/s a layer reaches. Large fp32 GEMMs
 * reach 60-80% of peak on recent GPUs and elementwise layers far less (they
 * are memory-bound, which the bandwidth term covers); 0.5 is a deliberately
 * round middle figure. Override with pt_analytic_options.efficiency. */
#define PT_ANALYTIC_COMPUTE_EFFICIENCY 0.5
/* Backward work relative to forward: an input gradient and a weight gradient. */
#define PT_ANALYTIC_BWD_FACTOR 2.0
/* Layernorm keeps a mean and a 1/std per row; attention keeps Q, K and V. */
#define PT_ANALYTIC_LAYERNORM_STATS 2
#define PT_ANALYTIC_QKV             3
/* Every tensor is fp32. */
#define PT_ANALYTIC_BYTES_PER_FLOAT 4
#define PT_ANALYTIC_MS_PER_S        1000.0
/* Largest byte count a profile holds exactly (2^53, integers in JSON). */
#define PT_ANALYTIC_BYTES_MAX 9007199254740992.0

typedef struct pt_analytic_options {
    double efficiency; /* in (0, 1]; 0 means PT_ANALYTIC_COMPUTE_EFFICIENCY */
} pt_analytic_options;

/* Derives a profile of `spec` on `device` at micro-batch size `microbatch`
 * (1..PT_PROFILE_BATCH_MAX). opt may be NULL. On success *out owns a new
 * profile (pt_profile_free) with source "analytic", the spec's name and the
 * device's name; on failure *out is NULL and err says why (PT_EINVAL for a
 * bad argument or a spec whose shapes do not infer, PT_ERANGE when a size
 * passes 2^53 bytes). */
int pt_analytic_profile(const pt_model_spec *spec, const pt_device_desc *device, int microbatch,
                        const pt_analytic_options *opt, pt_profile **out, pt_error *err);

#endif

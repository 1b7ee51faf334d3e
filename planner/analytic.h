/* Analytic profiles: per-layer costs derived from a model spec's FLOPs and
 * bytes and a device description, for devices that are not at hand
 * (`pipetop profile --analytic`, docs/formats.md "Device description",
 * docs/planners.md "Cost model and precision").
 *
 * In a precision P (protocol/precision.h; fp32 unless the options say) with
 * e bytes per activation element and w per weight, for layer i at
 * micro-batch size B, with F_i its forward FLOPs per sample, in_i / out_i the
 * elements per sample entering / leaving it, P_i its parameter count (from
 * pt_model_spec_shapes) and k_i its forward kernels (below):
 *
 *   fwd bytes   = (in_i + out_i) * e * B + weights read * w
 *   fwd_ms      = 1000 * max(F_i * B / (peak_P * efficiency), fwd bytes / mem_bandwidth)
 *                 + k_i * launch
 *   bwd_ms      = 1000 * max(2 F_i * B / (peak_P * efficiency), 2 fwd bytes / mem_bandwidth)
 *                 + (2 k_i with parameters, else k_i) * launch
 *                 (+ the attention core's forward again under selective recomputation,
 *                 and always for a fused attention, whose backward recomputes it)
 *   recompute_ms = fwd_ms
 *   act_bytes   = out_i * e * B,   param_bytes = P_i * w,
 *   input_bytes = in_0 * B * (4 for token ids, else e)
 *
 * where peak_P is the device's dense peak for P (pt_device_peak), launch its
 * launch_us, and "weights read" is P_i, except for an embedding, which reads
 * only the rows it gathers: min(P_i, out_i * B).
 *
 * Kernels per forward: 1 per linear, relu, gelu, layernorm, softmax_xent; an
 * embedding 1, 2 with a positional table; attention 5 (QKV, Q K^T, softmax,
 * P V, output projection), 6 in Megatron's layout (the probabilities'
 * dropout), 3 fused (QKV, the tiled core, output projection); a residual its
 * body's plus 1 (the addition).
 *
 * The profile records its precision and a roofline (peak_P, the bandwidth,
 * the launch cost) with each layer's forward flops, activation bytes,
 * weight bytes (0 for an embedding) and kernels, so the cost model floors
 * its times at any micro-batch (planner/roofline.h); its fixed_share is the
 * forward's intercept at B: the launches, plus the weights' read when the
 * layer is memory-bound there.
 *
 * Memory layout (saved_bytes, scratch_bytes per micro-batch: per-sample
 * bytes * B). Two layouts:
 *
 * - runtime (the default for fp32 and tf32): restates pipetop's runtime
 *   (runtime/layer_*.c), for an input of shape [.., d] with r = in_i / d rows:
 *     layernorm  saved r * 2 * e (mean and 1/std per row)
 *     attention  [T, D], H heads: saved = scratch = (3TD (Q, K, V) + H T^2
 *                (probabilities) + TD (context)) * e
 *     fused attention ("fused": true, runtime/attention_tiled.h), in both
 *                layouts: saved 4TD * e + 2HT * 4 (each query row's
 *                log-sum-exp and max, fp32), scratch 4TD * e + HT * 4 (the
 *                backward's delta per row): no T^2 term
 *     softmax_xent  saved r * 4 (its labels, one int32 per row)
 *     residual   saved = its body's output (in_i * e) + the body's inner
 *                layers' outputs + the body layers' saved; scratch = the
 *                input gradients of its body layers but the first + their
 *                largest scratch
 *     linear, relu, gelu, embedding: 0 (the chain keeps inputs and outputs).
 *
 * - megatron (the default for bf16, fp16, fp8, which pipetop's runtime does
 *   not train): Megatron-LM's, as Korthikanti et al. ("Reducing Activation
 *   Recomputation in Large Transformer Models", MLSys 2023, §4) count it,
 *   with attention and hidden dropout (one-byte masks) and no layernorm
 *   statistics:
 *     attention  saved (4TD) * e (Q, K, V, context) + H T^2 (2e + 1)
 *                (softmax output, dropout mask, dropout output; 0 under
 *                selective recomputation); scratch as the runtime's
 *     residual   saved = the body's inner outputs + their saved + in_i (the
 *                dropout mask before the addition, one byte each)
 *     embedding  saved = out_i (its dropout mask); softmax_xent saved
 *                r * 4 + in_i * 4 (the labels and the fp32 logits)
 *     layernorm, linear, relu, gelu: 0.
 *   A pre-LN transformer layer (a residual [layernorm, attention] and a
 *   residual [layernorm, linear 4h, gelu, linear h]) then keeps, in
 *   act_bytes + saved_bytes, exactly sbh (34 + 5as/h) bytes without
 *   recomputation and 34 sbh with selective recomputation
 *   (pt_analytic_korthikanti_bytes; tests/planner/analytic_test.c); with
 *   fused attention, 34 sbh + 8 asb (the statistics) without recomputing
 *   anything.
 *
 *   keep_bytes = (out_i * e for a layer with parameters + keep_i) * B: a
 *   split backward's output gradients, kept from B to W; for a residual
 *   also the outputs of its body's layers with parameters but the last. */
#ifndef PT_PLANNER_ANALYTIC_H
#define PT_PLANNER_ANALYTIC_H

#include <stdint.h>

#include "planner/roofline.h"
#include "protocol/device.h"
#include "protocol/error.h"
#include "protocol/layer_kind.h"
#include "protocol/model.h"
#include "protocol/profile.h"

/* Fraction of the device's peak FLOP/s a layer reaches. Large GEMMs reach
 * 60-80% of peak on recent GPUs and elementwise layers far less (they are
 * memory-bound, which the bandwidth term covers); 0.5 is a deliberately
 * round middle figure. Override with pt_analytic_options.efficiency. */
#define PT_ANALYTIC_COMPUTE_EFFICIENCY 0.5
/* Backward work relative to forward: an input gradient and a weight
 * gradient; the roofline floor's figure, so the two cannot differ. */
#define PT_ANALYTIC_BWD_FACTOR PT_ROOFLINE_BWD_FACTOR
/* The per-kind layout figures (PT_ANALYTIC_QKV, _MASK_BYTES, _LABEL_BYTES,
 * _ATTENTION_*, ...) are with the layer kinds' facts, protocol/layer_kind.h. */
#define PT_ANALYTIC_MS_PER_S  1000.0
#define PT_ANALYTIC_US_PER_MS 1000.0
/* Largest byte count a profile holds exactly (2^53, integers in JSON). */
#define PT_ANALYTIC_BYTES_MAX 9007199254740992.0

/* Which memory layout the saved bytes restate (above). */
typedef enum pt_analytic_layout {
    PT_ANALYTIC_LAYOUT_AUTO,     /* runtime for fp32/tf32, megatron for mixed precision */
    PT_ANALYTIC_LAYOUT_RUNTIME,  /* pipetop's runtime */
    PT_ANALYTIC_LAYOUT_MEGATRON, /* Megatron-LM, Korthikanti et al. */
} pt_analytic_layout;

/* Korthikanti et al.'s activation recomputation modes. */
typedef enum pt_analytic_recompute {
    PT_ANALYTIC_RECOMPUTE_NONE,
    PT_ANALYTIC_RECOMPUTE_SELECTIVE, /* the attention core is recomputed */
    PT_ANALYTIC_RECOMPUTE_FULL,      /* only each transformer layer's input is kept */
} pt_analytic_recompute;

/* All zero: the defaults. */
typedef struct pt_analytic_options {
    double efficiency; /* in (0, 1]; 0 means PT_ANALYTIC_COMPUTE_EFFICIENCY */
    int precision;     /* pt_precision; 0 is fp32 */
    pt_analytic_layout layout;
    int selective; /* 1: selective recomputation (megatron layout only) */
} pt_analytic_options;

/* Derives a profile of `spec` on `device` at micro-batch size `microbatch`
 * (1..PT_PROFILE_BATCH_MAX). opt may be NULL. On success *out owns a new
 * profile (pt_profile_free) with source "analytic", the spec's name, the
 * device's name, the precision and a roofline; on failure *out is NULL and
 * err says why (PT_EINVAL for a bad argument, a device without a peak for
 * the precision, selective recomputation without Megatron's layout or a spec
 * whose shapes do not infer, PT_ERANGE when a size passes 2^53 bytes). */
int pt_analytic_profile(const pt_model_spec *spec, const pt_device_desc *device, int microbatch,
                        const pt_analytic_options *opt, pt_profile **out, pt_error *err);

/* Korthikanti et al.'s activation bytes of one transformer layer (16-bit
 * activations, no tensor or sequence parallelism): s sequence length, b
 * micro-batch, h width, a heads. None: sbh(34 + 5as/h); selective: 34 sbh;
 * full (each layer's input kept): 2 sbh. */
int64_t pt_analytic_korthikanti_bytes(int64_t s, int64_t b, int64_t h, int64_t a,
                                      pt_analytic_recompute mode);

#endif

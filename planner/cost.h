/* Cost model and memory model: how long each op takes and how much memory a
 * stage replica holds, from a profile and a topology.
 *
 * Time (seconds):
 * - FWD/BWD/RECOMPUTE/BWD_INPUT/BWD_WEIGHT of layers [first,last) on `rows`
 *   samples on device d (the backward's halves: pt_cost_split_bwd):
 *   sum of the profile's per-layer ms / 1000 * rows / profile->microbatch /
 *   speed(d), for the share of each layer's time that scales with rows; the
 *   profile's fixed_share of it is charged whatever the rows
 *   (pt_cost_rows_ms): t(rows) = t * (f + (1 - f) * rows / microbatch).
 *   With no fixed share (files without the field and without a roofline)
 *   linear in rows, so a stage of r replicas is r times faster.
 * - the roofline floor (planner/roofline.h): a profile with a roofline (every
 *   analytic profile, imports given a device description) has each layer's
 *   times and fixed share raised, once, at pt_cost_new, so that no rows >= 1
 *   is charged less than max(FLOPs / peak, bytes moved / memory bandwidth)
 *   plus the layer's kernel launches. The figures below are of that floored
 *   profile, which pt_cost_profile returns.
 * - point-to-point: latency + bytes / bandwidth of the link between the two
 *   devices (intra-node or inter-node); 0 on the same device.
 * - ring all-reduce of n bytes over p replicas: 2(p-1)·α + 2(p-1)/p · n/β,
 *   with α the largest latency and β the smallest bandwidth among the ring's
 *   neighbouring pairs (ring in the order given); 0 for p = 1.
 * - OPT_STEP: streams weights, gradients and optimizer state through device
 *   memory: bytes touched = param_bytes * PT_COST_OPT_BASE_PASSES +
 *   PT_COST_OPT_STATE_PASSES * pt_cost_optim_state_bytes(param_bytes) (for an
 *   fp32 profile param_bytes * (3 + 2 * state_factor)), at
 *   PT_COST_OPT_MEM_BW_BPS * speed (or the profile's opt_bytes_per_s, which
 *   calibration fits, else its roofline's memory bandwidth: the step is a
 *   stream through device memory).
 * - no weight copies: a stashing FWD holds on to the array it read and an
 *   OPT_STEP steps out of place while the old version is still read
 *   (runtime/executor.c), so nothing beyond the ops above is charged.
 * - per-op overhead: the profile's op_overhead_ms (fitted by calibration,
 *   0 otherwise) of worker time before each op it issues: the dispatch,
 *   messaging and telemetry the runtime spends between two ops.
 * - sends: on the worker's comm lane beside its compute, unless the profile
 *   says runtime.sends_hold (calibrated from a runtime whose sends run on
 *   the worker's thread): then the worker waits for its send to end.
 * - receives: a receive waiting on its message returns the profile's
 *   recv_wake_ms (fitted by calibration, 0 otherwise) after the send ended:
 *   the receiver's wake-up, which on cores shared by more runnable agents
 *   than cores is mostly its wait for a core (about 1 ms with 3-4 agents on
 *   2 cores, 0.1 ms with 2).
 *
 * Memory (bytes, per stage replica, by category), for rows = the replica's
 * share of a micro-batch, in_b = activation entering the stage for rows,
 * out_b = activation leaving it, act_b = outputs of all its layers for rows,
 * saved_b = what its layers keep for their backward besides inputs and
 * outputs (the profile's saved_bytes), loss_b = the saved bytes of the
 * model's last layer (its labels) when the stage holds it, scratch_b = the
 * backward scratch: the input gradients of all its layers but the first
 * (act_b - out_b) plus the largest scratch_bytes of its layers (a profile
 * with no saved or scratch bytes at all, as PipeDream's and files from
 * before these fields, has no scratch_b: it describes layers, not
 * pipetop's runtime), P = its
 * parameter bytes, K = micro-batches in flight (pt_cost_inflight: forward
 * done, backward not complete; a split backward completes with its
 * BWD_WEIGHT, which still reads the saved activations), V = weight
 * versions held (pt_cost_weight_versions):
 *   weights = P; stash = (V - 1) * P;
 *   grads = P, or 2P for kinds with PT_SCHED_OVERLAP_ALLREDUCE (pipesgd: one
 *           gradient being all-reduced while the next accumulates);
 *   optimizer state = pt_cost_optim_state_bytes(P): the moments (sgd with
 *           momentum 1, adam 2) in fp32 plus, in mixed precision (bf16,
 *           fp16, fp8: protocol/precision.h), the fp32 master weights; so
 *           weights + grads + state = 16 bytes per parameter with Adam in
 *           fp32 (4 + 4 + 8) and in bf16 (2 + 2 + 12);
 *   activations = scratch_b + K * (in_b + act_b + saved_b) + J * keep_b
 *                 (J: micro-batches between BWD_INPUT and BWD_WEIGHT at the
 *                 peak, keep_b: pt_cost_keep_bytes; J = 0 unsplit), or with
 *                 recomputation scratch_b + K * (in_b + out_b + loss_b) +
 *                 (act_b - out_b + saved_b - loss_b): every micro-batch in
 *                 flight keeps the stage's input, its output (the runtime's
 *                 slot holds it until the backward) and its labels, which
 *                 cannot be recomputed; the inner layers' outputs and saved
 *                 bytes exist for one micro-batch at a time;
 *   buffers = in_b for received activations and in_b for the input gradient
 *             waiting to be sent (if not the first stage) + out_b for the
 *             received output gradient (if not the last).
 * The simulator tracks the same quantities event by event; its peaks equal
 * this model's figures (tests/planner/cost_test.c). With a profile measured
 * by `pipetop profile` (which reads saved_bytes and scratch_bytes off the
 * arena), the runtime's arenas measure these figures, up to the 64-byte
 * alignment of each region (tests/runtime/memory_predict_test.c). */
#ifndef PT_PLANNER_COST_H
#define PT_PLANNER_COST_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/memory.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

/* The affine rows scaling every per-layer time goes through: fixed_ms (the
 * rows-independent part) plus per_mb_ms (the part measured at profile_mb
 * rows) scaled to rows. Planners with closed forms use it too. */
double pt_cost_rows_ms(double fixed_ms, double per_mb_ms, int rows, int profile_mb);

/* Device-memory bandwidth an optimizer step streams at on a speed-1.0 device
 * when the profile names none (no calibrated rate, no roofline). */
#define PT_COST_OPT_MEM_BW_BPS 500e9
/* Passes over param_bytes an optimizer step makes regardless of the optimizer:
 * read weights, read gradients, write weights. */
#define PT_COST_OPT_BASE_PASSES 3
/* Passes per unit of optimizer state (read and write it). */
#define PT_COST_OPT_STATE_PASSES 2

/* Bytes by memory category (protocol/memory.h, the categories the runtime's
 * arenas measure, so predicted and measured figures compare index by index). */
typedef struct pt_mem {
    int64_t bytes[PT_MEM_KIND_COUNT];
    int64_t total; /* analytic: sum of bytes[]; simulated: peak of the running sum */
} pt_mem;

/* Opaque: prefix sums over the profile's layers plus the topology. Built once,
 * then every query below is O(1) (all-reduce and boundary: O(replicas)). */
typedef struct pt_cost pt_cost;

/* Builds a cost model. The profile and topology are borrowed and must outlive
 * it. Returns 0; PT_EINVAL (err names the field) when the profile has no
 * layers or a non-positive micro-batch, or a link a non-positive bandwidth;
 * PT_ENOMEM. On failure *out is NULL. */
int pt_cost_new(const pt_profile *profile, const pt_topology *topo, pt_cost **out, pt_error *err);
/* NULL-safe; sets *cost_p = NULL. */
void pt_cost_free(pt_cost **cost_p);

/* Replaces PT_COST_OPT_MEM_BW_BPS for this model; bytes_per_s <= 0 makes
 * optimizer steps free (useful for closed-form tests). */
void pt_cost_set_opt_bandwidth(pt_cost *cost, double bytes_per_s);

/* Seconds of worker time the simulator charges before every op (from the
 * profile's op_overhead_ms; 0 when it has none). The setter replaces it;
 * a negative value is 0. */
double pt_cost_op_overhead_s(const pt_cost *cost);
void pt_cost_set_op_overhead(pt_cost *cost, double seconds);
/* 1 when a send holds its worker until the transfer ends (the profile's
 * runtime.sends_hold: the CPU runtime's sends copy and queue on the
 * worker's thread), 0 when it runs on the comm lane beside the worker. */
int pt_cost_sends_hold(const pt_cost *cost);
/* Seconds between a send's end and the return of a receive that waited on
 * it (the profile's runtime.recv_wake_ms, fitted by calibration; 0 when it
 * has none): the receiver's wake-up, which on cores shared by more runnable
 * agents than cores is mostly its wait for one. */
double pt_cost_recv_wake_s(const pt_cost *cost);

/* The profile the model charges: the one given to pt_cost_new, or, when it
 * has a roofline, a copy with the floor folded into its layers' times and
 * fixed shares (planner/roofline.h); same layers, bytes and names. Planners
 * that keep their own prefix sums read the layers from here. */
const pt_profile *pt_cost_profile(const pt_cost *cost);
const pt_topology *pt_cost_topology(const pt_cost *cost);

/* Compute time in seconds of layers [first,last) for `rows` samples on device
 * `device` (an out-of-range device counts as speed 1). */
/* The rows-independent part of FWD + BWD of layers [first, last) on device
 * d (seconds): what pt_cost_fwd_s + pt_cost_bwd_s charge whatever the rows;
 * 0 when the profile has no fixed_share. */
double pt_cost_fixed_s(const pt_cost *cost, int first, int last, int device);
/* 1 when some layer of the profile has a fixed_share. */
int pt_cost_has_fixed(const pt_cost *cost);
double pt_cost_fwd_s(const pt_cost *cost, int first, int last, int rows, int device);
double pt_cost_bwd_s(const pt_cost *cost, int first, int last, int rows, int device);
double pt_cost_recompute_s(const pt_cost *cost, int first, int last, int rows, int device);
/* The two halves of a split backward (BWD_INPUT, BWD_WEIGHT), same units. */
double pt_cost_bwd_input_s(const pt_cost *cost, int first, int last, int rows, int device);
double pt_cost_bwd_weight_s(const pt_cost *cost, int first, int last, int rows, int device);
/* A layer's backward split into input gradient and weight gradient (ms): the
 * profiled halves when the profile has them (pt_profile_layer.split); else
 * the analytic rule: a layer with parameters spends half its backward on
 * each (a linear layer's dX = dY·Wᵀ and dW = Xᵀ·dY are GEMMs of the same
 * size), a layer without parameters spends it all on the input gradient.
 * The two halves of the analytic split add up to bwd_ms. */
void pt_cost_split_bwd(const pt_profile_layer *layer, double *input_ms, double *weight_ms);

/* Parameter bytes of layers [first,last). */
int64_t pt_cost_param_bytes(const pt_cost *cost, int first, int last);
/* Bytes of the activation entering layer `boundary` (0: the model input,
 * layer_count: the model output) for `rows` samples. */
int64_t pt_cost_boundary_bytes(const pt_cost *cost, int boundary, int rows);
/* Bytes of the outputs of layers [first,last) for `rows` samples. */
int64_t pt_cost_act_bytes(const pt_cost *cost, int first, int last, int rows);

/* Bytes layers [first,last) keep for their backward besides their inputs and
 * outputs (the profile's saved_bytes), for `rows` samples. */
int64_t pt_cost_saved_bytes(const pt_cost *cost, int first, int last, int rows);
/* What a split backward (BWD_INPUT to BWD_WEIGHT) holds besides the
 * micro-batch's activations, for layers [first,last) on `rows` samples: the
 * gradient of the output of every part with parameters, which its W reads
 * (the profile's keep_bytes; where a layer has none, its act_bytes when it
 * has parameters, which misses a block's inner gradients). */
int64_t pt_cost_keep_bytes(const pt_cost *cost, int first, int last, int rows);
/* The backward scratch of a stage of layers [first,last) for `rows` samples:
 * the input gradients of every layer but the first plus the largest
 * scratch_bytes among them (one layer runs at a time); 0 for a profile
 * without any saved or scratch bytes. */
int64_t pt_cost_scratch_bytes(const pt_cost *cost, int first, int last, int rows);
/* The saved bytes of the model's last layer (a loss layer's labels) when
 * [first,last) holds it, else 0; they stay in flight under recompute. */
int64_t pt_cost_loss_saved_bytes(const pt_cost *cost, int first, int last, int rows);

/* latency + bytes / bandwidth (0 when bytes is 0). */
double pt_cost_link_s(pt_link link, int64_t bytes);
/* Transfer time between two devices; 0 on the same device. */
double pt_cost_p2p_s(const pt_cost *cost, int dev_a, int dev_b, int64_t bytes);
/* The ring formula alone: 2(p-1)·latency + 2(p-1)/p · bytes/bandwidth; 0 for p <= 1. */
double pt_cost_ring_allreduce_s(int p, int64_t bytes, double latency, double bandwidth);
/* Ring all-reduce among devices[0..p) over their slowest neighbouring link. */
double pt_cost_allreduce_s(const pt_cost *cost, const int *devices, int p, int64_t bytes);
/* Gradient all-reduce overlapping the backward (the schedule programs' default,
 * schedule.h "gradient buckets"): the stage of layers [first,last) replicated
 * on devices[0..p) runs the backward that completes its gradients, `rows`
 * samples on device `dev` (the slowest replica's); bucket k (pt_sched_bucket_lo
 * with cap, last layer first) is ready once the backward has run its layers
 * and all-reduces after bucket k-1:
 *   ready_k = bwd_s(lo_k, last), end_k = max(ready_k, end_{k-1}) + allreduce(bytes_k).
 * Returns the time from the start of that backward until both it and the last
 * bucket's all-reduce have ended: max(bwd_s(first,last), end_last). cap < 0:
 * one all-reduce after the backward, bwd_s + allreduce(all bytes); cap 0:
 * PT_SCHED_BUCKET_BYTES. p <= 1: bwd_s. This is what the simulator charges. */
double pt_cost_overlapped_bwd_allreduce_s(const pt_cost *cost, const int *devices, int p, int first,
                                          int last, int rows, int dev, int64_t cap);
/* The same with the ring's latency and bandwidth given (as
 * pt_cost_ring_allreduce_s). */
double pt_cost_overlapped_bwd_ring_s(const pt_cost *cost, int p, double latency, double bandwidth,
                                     int first, int last, int rows, int dev, int64_t cap);

/* Split-concat transfer of one micro-batch of mb_rows samples across a stage
 * boundary whose activation is mb_bytes per profile micro-batch: each source
 * replica sends its overlap with each destination replica in turn; the result
 * is the slowest source replica's total. Equal to what the simulator charges. */
double pt_cost_boundary_s(const pt_cost *cost, const int *src_devices, int src_r,
                          const int *dst_devices, int dst_r, int mb_rows, int64_t mb_bytes);
/* Optimizer step over param_bytes on device. */
double pt_cost_opt_step_s(const pt_cost *cost, int64_t param_bytes, pt_optim_kind optim,
                          int device);

/* Optimizer moments per parameter: sgd (momentum) 1, adam 2; also the
 * optimizer state per parameter byte of an fp32 profile. For any profile
 * use pt_cost_optim_state_bytes. */
int pt_cost_optim_state_factor(pt_optim_kind optim);
/* Bytes of optimizer state for param_bytes of the profile's weights: the
 * fp32 moments plus, in mixed precision, the fp32 master copy (cost may be
 * NULL: fp32). INT64_MAX when that overflows. */
int64_t pt_cost_optim_state_bytes(const pt_cost *cost, int64_t param_bytes, pt_optim_kind optim);
/* The largest pt_cost_optim_state_bytes per parameter byte of any precision
 * (Adam in 16-bit mixed precision: (4 + 2 * 4) / 2), for bounds. */
#define PT_COST_OPTIM_STATE_MAX 6
/* Micro-batches whose activations stage i of S keeps at once under a kind:
 * its table entry's in-flight formula (protocol/sched_kind.h; gpipe M,
 * dapple A / 1f1b-flush / 2bw / pipesgd min(S-i, M), pipedream S-i as its
 * run is unbounded, dapple B min(2(S-i)-1, M)). */
int pt_cost_inflight(pt_sched_kind kind, char policy, int S, int i, int M);
/* Weight versions stage i holds at once (live + stashed): the table entry's
 * formula (pipedream S-i, with vertical sync S on every stage;
 * 2bw 2; others 1; see pt_sched_kind_versions_stash). Assumes the run has
 * at least S micro-batches. */
int pt_cost_weight_versions(pt_sched_kind kind, int vertical_sync, int S, int i);

/* What the analytic memory model needs about one stage replica. */
typedef struct pt_mem_query {
    pt_sched_kind kind;
    char policy;       /* dapple */
    int vertical_sync; /* pipedream */
    pt_optim_kind optim;
    int stage_count;  /* S */
    int stage;        /* i */
    int first, last;  /* layers [first,last) */
    int rows;         /* samples of each micro-batch this replica handles */
    int microbatches; /* M per window */
    int recompute;
    int chunks; /* interleaved: model chunks per device (stage_count counts the S·v chunk
                   stages); 0 or 1 otherwise */
} pt_mem_query;

/* pt_cost_inflight for a stage that may recompute (zb-h1 keeps fewer in
 * flight there). */
int pt_cost_stage_inflight(const pt_mem_query *q);

/* Fills out with the replica's peak memory by category (and total = their
 * sum). O(1): meant for planners' inner loops. */
void pt_cost_stage_memory(const pt_cost *cost, const pt_mem_query *q, pt_mem *out);

/* pt_cost_stage_memory for replica r of stage s of a plan (its rows of each
 * micro-batch from pt_sched_rows). The plan must be valid (s, r in range). */
void pt_cost_replica_memory(const pt_cost *cost, const pt_plan *plan, int s, int r, pt_mem *out);

/* Checks every replica of every stage of plan against its device's memory
 * (an interleaved plan: the sum of the chunks a device holds).
 * Returns 0, PT_ENOFIT with err naming the first stage, replica, device,
 * the need (with its largest categories) and the limit, or PT_EINVAL when the
 * plan does not match the cost model (layer or device out of range, or a
 * stated precision that is not the profile's). */
int pt_cost_plan_memory(const pt_cost *cost, const pt_plan *plan, pt_error *err);

/* Same as pt_cost_plan_memory with a cost model built and freed inside. */
int pt_cost_check_memory(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                         pt_error *err);

#endif

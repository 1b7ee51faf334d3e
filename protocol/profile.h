/* Profile: per-layer cost of a model at one micro-batch size on one device. */
#ifndef PT_PROTOCOL_PROFILE_H
#define PT_PROTOCOL_PROFILE_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/precision.h"

/* The largest layer time a profile may state (ms): a day. */
#define PT_PROFILE_LAYER_MS_MAX 86400000.0

typedef struct pt_profile_layer {
    char name[PT_NAME_MAX];
    double fwd_ms;       /* forward time of one micro-batch, >= 0 */
    double bwd_ms;       /* backward time of one micro-batch, >= 0 */
    double recompute_ms; /* cost of recomputing the forward for backward; defaults to fwd_ms */
    int64_t act_bytes;   /* output activation of one micro-batch, bytes */
    int64_t param_bytes; /* parameters, bytes */
    /* What one micro-batch's forward keeps for its backward besides the
     * layer's input and output (attention probabilities, layernorm
     * statistics, a residual body's inner activations, the loss layer's
     * labels), bytes; 0 when the file does not say. */
    int64_t saved_bytes;
    /* Working memory the layer's forward or backward uses for one
     * micro-batch at a time and frees after (gradient temporaries), bytes,
     * besides the gradients of its input and output; 0 when not given. */
    int64_t scratch_bytes;
    /* The backward split in two (zero-bubble schedules): input gradient (B)
     * and weight gradient (W) of one micro-batch, measured; both or neither
     * are in a file. split 0: not measured, the cost model splits bwd_ms
     * (planner/cost.h). */
    int split;
    double bwd_input_ms, bwd_weight_ms; /* >= 0 when split */
    /* What a split backward (zero-bubble schedules) keeps for one
     * micro-batch from its input half (B) to its weight half (W) besides the
     * saved activations: the gradients of the outputs of the layer's parts
     * with parameters, which W reads, bytes; 0 when not given (the cost
     * model then takes act_bytes for a layer with parameters). */
    int64_t keep_bytes;
    /* Share of each of the layer's times at the profile's micro-batch that
     * does not scale with rows (per-op dispatch, kernel launches, weight
     * reads), in [0, 1): the cost model charges t(rows) = t * (fixed_share +
     * (1 - fixed_share) * rows / microbatch). 0 when the file does not say
     * (linear in rows). `pipetop profile` measures it from two row counts.
     * With pass_shares, it is the forward's alone and the backward (with
     * its split halves) and the recomputed forward have their own
     * (bwd_fixed_share, recompute_fixed_share, same range): the roofline
     * floor (planner/roofline.h) gives each pass its own. Read them with
     * pt_profile_layer_share. */
    double fixed_share;
    int pass_shares;
    double bwd_fixed_share, recompute_fixed_share;
    /* What the roofline floor of the cost model (planner/cost.h) knows about
     * the layer's forward at the profile's micro-batch; read only when the
     * profile has a roofline. The backward is taken as twice each. */
    double flops;         /* FLOPs, >= 0; 0: not known (no compute floor) */
    int64_t bytes;        /* activation bytes read and written, which scale with rows, >= 0 */
    int64_t weight_bytes; /* bytes read once whatever the rows (weights), >= 0; a file
                             without the field: param_bytes */
    int kernels;          /* kernel launches, >= 0; a file without the field: 1 when
                             the layer has any forward time, else 0 */
} pt_profile_layer;

/* A layer's passes, for pt_profile_layer_share. */
typedef enum pt_profile_pass {
    PT_PROFILE_PASS_FWD,
    PT_PROFILE_PASS_BWD, /* and its split halves */
    PT_PROFILE_PASS_RECOMPUTE,
    PT_PROFILE_PASSES
} pt_profile_pass;

/* The share of a pass's time that does not scale with rows: fixed_share,
 * or the pass's own with pass_shares; a value outside [0, 1) reads as 0. */
double pt_profile_layer_share(const pt_profile_layer *layer, pt_profile_pass pass);

/* The device limits a profile's layers are floored by (the "roofline"
 * object; has 0 when the file has none: no floor). */
typedef struct pt_profile_roofline {
    int has;
    double peak_flops;    /* FLOP/s at the profile's precision, > 0 */
    double mem_bandwidth; /* bytes/s, > 0 */
    double launch_us;     /* least time per kernel, µs, >= 0 */
} pt_profile_roofline;

#define PT_PROFILE_TEXT_MAX 256 /* origin.run, origin.base, NUL included */

/* What a profile was made from (the optional "origin" object; kind "" when
 * the file has none). A calibrated profile names the run it was fitted to. */
typedef struct pt_profile_origin {
    char kind[16];                  /* "measured", "analytic", "imported", "calibrated" */
    char run[PT_PROFILE_TEXT_MAX];  /* calibrated: the run folder; "" none */
    char base[PT_PROFILE_TEXT_MAX]; /* calibrated: the profile giving the layers' weights */
    char date[32];                  /* UTC, ISO 8601 ("2026-12-01T08:30:00Z"); "" none */
    int64_t gen;                    /* calibrated: the plan generation fitted; -1 none */
    /* measured by another framework (pipetop profile --torch): its name and
     * version ("torch 2.4.0") and what it measured ("torchvision.models:
     * resnet50"); "" none */
    char framework[64];
    char module[PT_PROFILE_TEXT_MAX];
} pt_profile_origin;

typedef struct pt_profile {
    char model[PT_NAME_MAX];
    char device[PT_NAME_MAX]; /* what it was measured on or derived for */
    char source[16];          /* "measured", "analytic", "imported" or "calibrated" */
    pt_profile_origin origin;
    /* The precision the times are for and the bytes are in (pt_precision;
     * "fp32" when the file does not say): the cost model charges the
     * optimizer state and its master copy by it. */
    int precision;
    pt_profile_roofline roofline;
    /* Fitted by calibration from a run's ops (0: not known; the cost model
     * then charges no overhead and its default optimizer bandwidth). */
    double op_overhead_ms;  /* worker time spent between two consecutive ops, >= 0 */
    double opt_bytes_per_s; /* bytes an optimizer step streams per second, >= 0 */
    /* the all-reduce among devices of one node, fitted from the run's
     * collectives (0: the topology's intra-node link) */
    double ar_bytes_per_s; /* ring all-reduce bandwidth, bytes/s, >= 0 */
    double ar_latency_s;   /* its per-step latency, s, >= 0 */
    int sends_hold;        /* 1: a send holds its worker until it ends (the CPU runtime copies and
                              queues on the worker's thread); 0: sends run beside the worker */
    double recv_wake_ms;   /* a receive that waits returns this long after its send ended (the
                              receiver's wake-up; on shared cores mostly its wait for a core), >= 0 */
    int microbatch;        /* micro-batch size the times are for, > 0 */
    int64_t input_bytes;   /* activation entering layer 0 for one micro-batch */
    int layer_count;
    pt_profile_layer *layers; /* owned */
} pt_profile;

#define PT_PROFILE_LAYERS_MAX (1 << 16) /* layers of one profile */
#define PT_PROFILE_BATCH_MAX  (1 << 24) /* micro-batch size */

/* Parses and validates a profile (non-negative times, non-negative bytes, at
 * least one layer, positive micro-batch). Same contract as the model spec. */
int pt_profile_parse(const char *json, const char *source, pt_profile **out, pt_error *err);
/* Reads and parses a file; errors are prefixed with its path. */
int pt_profile_load(const char *path, pt_profile **out, pt_error *err);
/* Serialises to JSON text (caller frees with free()); NULL on no memory.
 * pt_profile_parse of the result gives back an equal profile (a layer with an
 * empty name reads back as "layer<i>"). */
char *pt_profile_to_json(const pt_profile *profile);
/* Checks the profile against a model: same model name and layer count.
 * `source` prefixes messages; returns 0 or PT_EINVAL. */
int pt_profile_check(const pt_profile *profile, const pt_model_spec *model, const char *source,
                     pt_error *err);
/* Writes JSON atomically (temporary name, fsync, rename). */
int pt_profile_save(const pt_profile *profile, const char *path, pt_error *err);
/* The fixed_share that makes t(rows) = t_full * (f + (1 - f) * rows /
 * full_rows) pass through two measurements: t_full ms at full_rows and
 * t_part ms at part_rows < full_rows; clamped to [0, PT_PROFILE_SHARE_MAX]
 * (0 when the times are not positive or the rows do not differ). */
#define PT_PROFILE_SHARE_MAX 0.95
double pt_profile_fit_fixed_share(double t_full, int full_rows, double t_part, int part_rows);
/* Allocates a zeroed profile with layer_count layers (origin.gen -1,
 * precision fp32, no roofline); NULL on no memory. */
pt_profile *pt_profile_new(int layer_count);
/* A deep copy (free with pt_profile_free); NULL on no memory or NULL. */
pt_profile *pt_profile_copy(const pt_profile *profile);
void pt_profile_free(pt_profile **profile_p);

#endif

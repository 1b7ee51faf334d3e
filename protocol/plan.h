/* Plan: stages (layer ranges, replica devices, recompute), micro-batching,
 * schedule kind and its parameters, optimizer. */
#ifndef PT_PROTOCOL_PLAN_H
#define PT_PROTOCOL_PLAN_H

#include <stdint.h>

#include "protocol/error.h"

struct cJSON;
#include "protocol/model.h"
#include "protocol/sched_kind.h"
#include "protocol/topology.h"

typedef enum pt_optim_kind { PT_OPTIM_SGD, PT_OPTIM_ADAM } pt_optim_kind;

typedef struct pt_optim_spec {
    pt_optim_kind kind; /* "sgd" (with momentum) or "adam" */
    float lr;           /* > 0 */
    float momentum;     /* sgd, [0,1) */
    float beta1, beta2; /* adam, [0,1) */
    float eps;          /* adam, > 0 */
    float weight_decay; /* >= 0 */
} pt_optim_spec;

/* Defaults: sgd lr PT_OPTIM_SGD_LR momentum 0.9; adam lr PT_OPTIM_ADAM_LR
 * betas 0.9/0.999 eps 1e-8. SGD's 0.01: at 0.02 fmnist-mlp-deep (34 layers,
 * no normalisation) on synthetic data drives its loss to ~1e-3 and then
 * diverges (NaN at iteration 334 of a 4-stage gpipe run); at 0.01 it trains
 * 2,000 steps with a falling loss, and so does the demo on Fashion-MNIST
 * (docs/reliability.md, "Training that diverges"). */
#define PT_OPTIM_SGD_LR  0.01f
#define PT_OPTIM_ADAM_LR 1e-3f
pt_optim_spec pt_optim_default(pt_optim_kind kind);

/* How the replicas of a stage share the micro-batches. */
typedef enum pt_replication {
    /* DAPPLE's split-concat: every micro-batch is split over the stage's
     * replicas in contiguous row ranges (pt_sched_rows); every replica runs
     * every micro-batch. Every kind. */
    PT_REPL_SPLIT_CONCAT = 0,
    /* PipeDream's runtime: replica j of a stage of r takes whole micro-batches
     * j, j+r, j+2r, ...; the replicas synchronise (all-reduce, step) once per
     * round of r micro-batches, averaging their gradients. Kinds with
     * PT_SCHED_OPT_ROUND_ROBIN (pipedream), where it is the default. */
    PT_REPL_ROUND_ROBIN = 1,
} pt_replication;

typedef struct pt_stage {
    int first, last;   /* layers [first, last) of the model */
    int replica_count; /* >= 1 */
    int *replicas;     /* owned: device index of each replica in the topology */
    int recompute;     /* 1: keep only the stage input, recompute the forward for backward */
} pt_stage;

typedef struct pt_plan {
    char model[PT_NAME_MAX]; /* model spec name the plan is for */
    int layer_count;         /* of the model; every layer covered once, in order */
    int stage_count;
    pt_stage *stages;       /* owned */
    int microbatch_size;    /* samples per micro-batch (split across a stage's replicas) */
    int microbatch_count;   /* M: micro-batches per iteration; global batch = size * count */
    pt_sched_kind schedule; /* protocol/sched_kind.h */
    char policy;            /* kinds with PT_SCHED_OPT_POLICY (dapple): 'A' or 'B' */
    int vertical_sync;      /* kinds with PT_SCHED_OPT_VSYNC (pipedream) */
    int chunks;             /* kinds with PT_SCHED_OPT_CHUNKS (interleaved): v >= 2 model chunks per
                               device; stages then holds the S·v chunks in model order, chunk c of
                               pipeline rank d being stages[d + c·S], whose replicas are stages[d]'s
                               devices; 1 for every other kind */
    pt_replication replication; /* kinds with PT_SCHED_OPT_ROUND_ROBIN (pipedream); files default
                                   to round-robin there; pt_plan_new to split-concat */
    pt_optim_spec optimizer;
    /* The precision the plan trains in (a name of protocol/precision.h); ""
     * when the plan does not say, which means its profile's. A stated one
     * must be the profile's (pt_cost_plan_memory checks). */
    char precision[8];
} pt_plan;

#define PT_PLAN_LAYERS_MAX     (1 << 16) /* layers of the model a plan is for */
#define PT_PLAN_DEVICE_MAX     (1 << 20) /* device indices are below this */
#define PT_PLAN_MB_SIZE_MAX    (1 << 24) /* samples per micro-batch */
#define PT_PLAN_MB_COUNT_MAX   (1 << 20) /* micro-batches per iteration */
#define PT_PLAN_CHUNKS_MAX     64        /* model chunks per device (interleaved) */
#define PT_PLAN_CHUNKS_DEFAULT 2         /* when an interleaved plan names none */

/* Parses and validates the plan on its own: stages contiguous from layer 0
 * to layer_count, each non-empty, replicas >= 1 and no device used twice,
 * positive micro-batching, a known schedule. Same contract as the model spec. */
int pt_plan_parse(const char *json, const char *source, pt_plan **out, pt_error *err);
/* pt_plan_parse of a document already parsed (a plan embedded in a message:
 * protocol/message.h): root is a cJSON object. */
int pt_plan_from_tree(const struct cJSON *root, const char *source, pt_plan **out, pt_error *err);
/* Reads and parses a file; errors are prefixed with its path. */
int pt_plan_load(const char *path, pt_plan **out, pt_error *err);
/* Serialises to JSON text (caller frees with free()); NULL on no memory.
 * pt_plan_parse of the result gives back an equal plan. */
char *pt_plan_to_json(const pt_plan *plan);
/* The same as a cJSON tree the caller owns (cJSON_Delete); NULL on no memory. */
struct cJSON *pt_plan_to_tree(const pt_plan *plan);
/* Writes pt_plan_to_json atomically (temporary name, fsync, rename). */
int pt_plan_save(const pt_plan *plan, const char *path, pt_error *err);

/* Checks the plan against a model (name and layer count) and a topology
 * (devices exist); either may be NULL to skip it. `source` prefixes
 * messages. Runs the same structural checks as pt_plan_parse first, so a
 * plan built by hand (pt_plan_new) is validated by
 * pt_plan_check(plan, NULL, NULL, ...). Returns 0 or a negative PT_E* code.
 * Memory fit needs the cost model: see planner/ (pt_cost_check_memory). */
int pt_plan_check(const pt_plan *plan, const pt_model_spec *model, const pt_topology *topo,
                  const char *source, pt_error *err);

/* Allocates a plan with stage_count zeroed stages (no replicas), schedule
 * gpipe, policy 'A' and the default sgd optimizer; NULL on no memory. */
pt_plan *pt_plan_new(int stage_count);
/* Sets stage s's replicas (copies devices[0..count), replacing any it had);
 * 0, PT_EINVAL (bad s or count) or PT_ENOMEM (stage unchanged). */
int pt_plan_set_replicas(pt_plan *plan, int s, const int *devices, int count);
/* Deep copy; NULL on no memory. */
pt_plan *pt_plan_clone(const pt_plan *plan);
/* The same with a status: 0 (*out NULL for a NULL plan) or PT_ENOMEM. */
int pt_plan_copy(const pt_plan *plan, pt_plan **out, pt_error *err);
/* Stage replicas of the plan, the workers of its program (an interleaved plan's
 * chunks each count: its devices are pt_plan_rank_count's stages' replicas). */
int pt_plan_device_count(const pt_plan *plan);
/* Pipeline ranks S: stage_count / chunks (stage_count when chunks <= 1). */
int pt_plan_rank_count(const pt_plan *plan);
/* Agents the plan runs on, one per device: the replicas of its first
 * pt_plan_rank_count stages (an interleaved plan's agent holds every chunk
 * of its device); pt_plan_device_count for any other plan. */
int pt_plan_agent_count(const pt_plan *plan);
/* 1 when the plan's replicated stages take whole micro-batches round-robin:
 * its kind reads "replication" (PT_SCHED_OPT_ROUND_ROBIN) and it is
 * round-robin; 0 for split-concat (every other plan). */
int pt_plan_round_robin(const pt_plan *plan);
/* Micro-batches a replica of stage s holds in flight in an asynchronous
 * round-robin pipeline: ceil(R_s / r_s), R_s the replicas of stages s..S-1
 * and r_s its own (PipeDream's runtime admits (R_s - 1) / r_s warm-up
 * micro-batches per replica before its first backward, plus the one in
 * flight; S - s for a straight pipeline). The plan must be valid. */
int pt_plan_rr_inflight(const pt_plan *plan, int s);
/* "split-concat" or "round-robin" (NULL for another value). */
const char *pt_replication_name(pt_replication replication);

/* NULL-safe; frees the plan and its stages and sets *plan_p = NULL. */
void pt_plan_free(pt_plan **plan_p);

#endif

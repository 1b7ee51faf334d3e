/* Plan: stages (layer ranges, replica devices, recompute), micro-batching,
 * schedule kind and its parameters, optimizer. */
#ifndef PT_PROTOCOL_PLAN_H
#define PT_PROTOCOL_PLAN_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/topology.h"

typedef enum pt_sched_kind {
    PT_SCHED_GPIPE,      /* "gpipe" */
    PT_SCHED_DAPPLE,     /* "dapple" */
    PT_SCHED_1F1B_FLUSH, /* "1f1b-flush" */
    PT_SCHED_PIPEDREAM,  /* "pipedream" */
    PT_SCHED_2BW,        /* "2bw" */
    PT_SCHED_PIPESGD,    /* "pipesgd" */
    PT_SCHED_KIND_COUNT
} pt_sched_kind;

const char *pt_sched_kind_name(pt_sched_kind kind);
int pt_sched_kind_parse(const char *name, pt_sched_kind *out);

typedef enum pt_optim_kind { PT_OPTIM_SGD, PT_OPTIM_ADAM } pt_optim_kind;

typedef struct pt_optim_spec {
    pt_optim_kind kind; /* "sgd" (with momentum) or "adam" */
    float lr;           /* > 0 */
    float momentum;     /* sgd, [0,1) */
    float beta1, beta2; /* adam, [0,1) */
    float eps;          /* adam, > 0 */
    float weight_decay; /* >= 0 */
} pt_optim_spec;

/* Defaults: sgd lr 0.05 momentum 0.9; adam lr 1e-3 betas 0.9/0.999 eps 1e-8. */
pt_optim_spec pt_optim_default(pt_optim_kind kind);

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
    pt_stage *stages;        /* owned */
    int microbatch_size;     /* samples per micro-batch (split across a stage's replicas) */
    int microbatch_count;    /* M: micro-batches per iteration; global batch = size * count */
    pt_sched_kind schedule;
    char policy;             /* dapple: 'A' (K_i = min(S-i, M)) or 'B' (K_i = min(2(S-i)-1, M)) */
    int vertical_sync;       /* pipedream */
    pt_optim_spec optimizer;
} pt_plan;

/* Parses and validates the plan on its own: stages contiguous from layer 0
 * to layer_count, each non-empty, replicas >= 1 and no device used twice,
 * positive micro-batching, a known schedule. Same contract as the model spec. */
int pt_plan_parse(const char *json, const char *source, pt_plan **out, pt_error *err);
int pt_plan_load(const char *path, pt_plan **out, pt_error *err);
char *pt_plan_to_json(const pt_plan *plan);
int pt_plan_save(const pt_plan *plan, const char *path, pt_error *err);

/* Checks the plan against a model (layer count) and a topology (devices
 * exist); either may be NULL to skip it. `source` prefixes messages.
 * Memory fit needs the cost model: see planner/ (pt_cost_check_memory). */
int pt_plan_check(const pt_plan *plan, const pt_model_spec *model, const pt_topology *topo,
                  const char *source, pt_error *err);

/* Allocates a plan with stage_count zeroed stages; NULL on no memory. */
pt_plan *pt_plan_new(int stage_count);
/* Sets stage s's replicas (copies devices[0..count)); 0 or PT_ENOMEM. */
int pt_plan_set_replicas(pt_plan *plan, int s, const int *devices, int count);
/* Deep copy; NULL on no memory. */
pt_plan *pt_plan_clone(const pt_plan *plan);
/* Total devices used by the plan. */
int pt_plan_device_count(const pt_plan *plan);
void pt_plan_free(pt_plan **plan_p);

#endif

/* Internal to the stage executor (runtime/executor.c, runtime/exec_plan.c):
 * the dry run of a worker's ops that assigns every buffer an index before the
 * first run, so a run only follows precomputed indices. Not for other use. */
#ifndef PT_RUNTIME_EXEC_INTERNAL_H
#define PT_RUNTIME_EXEC_INTERNAL_H

#include "runtime/executor.h"

/* Per op of the worker (local index i = global index - op_begin). -1: unused. */
typedef struct pt_xop {
    int32_t slot;         /* FWD/RECOMPUTE/BWD/SEND_ACT: the net slot of the micro-batch */
    int32_t buf;          /* RECV_ACT/FWD: input buffer; RECV_GRAD/BWD: output-gradient
                             buffer; SEND_GRAD: input-gradient buffer */
    int32_t buf2;         /* BWD: input-gradient buffer it writes */
    int32_t gbuf;         /* BWD/ALLREDUCE/OPT_STEP: gradient buffer */
    int32_t trivial;      /* ALLREDUCE/AR_WAIT on a stage of one replica: nothing to do */
    int64_t step_samples; /* FWD: samples the covering optimizer step applies (loss scale) */
} pt_xop;

/* What the dry run hands the executor; arrays owned (free with
 * pt_exec_plan_free). */
typedef struct pt_exec_plan {
    pt_exec_needs needs;
    int op_count;       /* the worker's ops */
    pt_xop *xop;        /* [op_count] */
    int32_t *last_read; /* [needs.max_version+1]: local index of the last op reading each
                           version from the version store (FWD; RECOMPUTE/BWD without
                           stash), -1 if none */
    int32_t *end_zero;  /* gradient buffers to zero at the end of a run (groups no step
                           applies) */
    int end_zero_count;
    int fifo_peak; /* asynchronous all-reduces outstanding at once */
} pt_exec_plan;

/* Dry-runs worker w of prog into *plan (zeroed on entry by the callee).
 * Returns 0, PT_EINVAL (err names the op) or PT_ENOMEM. */
int pt_exec_plan_build(const pt_program *prog, int w, pt_exec_plan *plan, pt_error *err);
void pt_exec_plan_free(pt_exec_plan *plan);

#endif

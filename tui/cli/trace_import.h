/* A real run's profiler traces as a pipetop run record (`pipetop
 * import-trace`, docs/torch.md): one trace per pipeline rank, read by
 * tui/cli/torch_trace.h, put on one clock, and written as the telemetry the
 * ranks' agents would have sent (an events message per rank and iteration,
 * a metrics message per stage and iteration) through protocol/record.h, so
 * replay, status, export and calibrate read it as any run. */
#ifndef PT_TUI_CLI_TRACE_IMPORT_H
#define PT_TUI_CLI_TRACE_IMPORT_H

#include <stdint.h>
#include <stdio.h>

#include "protocol/error.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "tui/cli/torch_trace.h"

/* The traces of one run, rank r being traces[r] after pt_ti_gather. */
typedef struct pt_ti_run {
    pt_tt_trace *traces; /* borrowed, one per rank, in rank order */
    const char **names;  /* their files, for messages */
    int ranks;
    int stages, microbatches; /* S and M the labels name */
    int64_t steps;            /* iterations (the most any trace has) */
    int *owner;               /* [stages]: the rank each stage runs on (owned) */
    double *offset_us;        /* [ranks]: added to a rank's times to put them on rank 0's clock */
    double *lo_us, *hi_us;    /* [ranks]: the interval the hand-offs allow (NAN: none) */
    int split;                /* the backward is split (I and W ops) */
} pt_ti_run;

/* Orders the traces by rank (each rank once, 0..n-1), numbers their
 * iterations and finds S, M and which rank runs each stage (a stage on two
 * ranks is refused, naming both files). run->traces is reordered in place. */
int pt_ti_gather(pt_ti_run *run, pt_tt_trace *traces, const char **names, int n, pt_error *err);
void pt_ti_release(pt_ti_run *run);

/* Puts every rank on rank 0's clock (run->offset_us). Between the ranks of
 * stages s and s+1, a forward of s+1 starts after the same micro-batch's
 * forward of s ended, and a backward of s starts after that of s+1 ended:
 * the offsets those allow form an interval; the middle of it is taken,
 * unless both traces are Kineto's (the host's clock) and 0 lies inside. */
void pt_ti_align(pt_ti_run *run);

/* The plan the labels describe when none is given: one layer per stage (a
 * profile's layer s is stage s), the stage-to-rank mapping seen (S > ranks:
 * interleaved, stage s on rank s mod P), the kind: zb-h1 when the backward
 * is split, gpipe when the first stage runs every forward of its first
 * iteration before a backward, else 1f1b-flush. why names it. */
int pt_ti_infer_plan(const pt_ti_run *run, const char *model, int mb_size, pt_plan **out, char *why,
                     size_t cap, pt_error *err);
/* 0 when plan describes the run (stages, micro-batches, one replica per
 * stage, stage s on rank s mod P), else PT_EINVAL naming the plan's field. */
int pt_ti_check_plan(const pt_ti_run *run, const pt_plan *plan, const char *source, pt_error *err);
/* A profile from the ops' medians, one layer per stage ("stage<s>"):
 * forward, backward (or its halves) of one micro-batch of mb_size samples. */
int pt_ti_profile(const pt_ti_run *run, const pt_plan *plan, pt_profile **out, pt_error *err);

/* Writes RUN_DIR/run.ndjson. 0 or PT_E* with err naming the file. */
int pt_ti_write_record(const pt_ti_run *run, const pt_plan *plan, const pt_profile *profile,
                       const char *path, pt_error *err);

/* Compute time of stage s (microseconds), and its op count; from the
 * traces, for the summary. */
double pt_ti_busy_us(const pt_ti_run *run, int stage, int64_t *ops);

#endif

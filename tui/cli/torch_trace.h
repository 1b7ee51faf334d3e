/* PyTorch profiler traces (Chrome trace-event JSON) read for `pipetop
 * import-trace` (docs/torch.md, docs/formats.md "PyTorch profiler traces").
 *
 * Both forms torch writes: Kineto's object {"traceEvents": [...],
 * "distributedInfo": {"rank": R, ...}, ...} and the bare array of events the
 * autograd profiler of builds without Kineto writes (Debian's torch 1.13).
 * Only complete events ("ph": "X", "ts" and "dur" in microseconds) are read;
 * a pipeline op is an X event named by a label:
 *   PP:<stage><kind><mb>   torch.distributed.pipelining's record_function
 *                          names, kind F, B, I, W (compute) or SEND_F,
 *                          RECV_F, SEND_B, RECV_B (the activation and
 *                          gradient transfers);
 *   Forward <mb>, Backward <mb>   scopes of the trace's own rank as stage;
 *   or, given a POSIX extended regular expression, its 1st, 2nd and 3rd
 *   subexpressions: stage, kind (one of the above) and micro-batch.
 * "ProfilerStep#<n>" events mark iterations.
 *
 * Nothing in a trace is trusted: every field read is checked (an X event
 * without a numeric ts, a negative dur, a stage or micro-batch out of range
 * is an error naming the file and the event), files are read whole up to
 * pt_file_read's bound. */
#ifndef PT_TUI_CLI_TORCH_TRACE_H
#define PT_TUI_CLI_TORCH_TRACE_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"

#define PT_TT_STAGE_MAX 4096      /* stages a trace may name: [0, this) */
#define PT_TT_MB_MAX    (1 << 20) /* micro-batches: [0, this) */
#define PT_TT_OPS_MAX   (1 << 24) /* labelled ops of one trace */

/* The labels recognised (pt_tt_labels_init). */
typedef struct pt_tt_labels {
    int custom; /* 1: re holds the user's pattern */
    regex_t re;
} pt_tt_labels;

/* One labelled op. */
typedef struct pt_tt_op {
    int stage, mb;
    int kind;       /* pt_op_kind: FWD, BWD, BWD_INPUT, BWD_WEIGHT, SEND_ACT, ... */
    int64_t step;   /* iteration (pt_tt_assign_steps); -1 before */
    double ts, dur; /* microseconds on the trace's clock */
} pt_tt_op;

typedef struct pt_tt_trace {
    int rank;   /* distributedInfo.rank, or the rank given; -1 unknown */
    int kineto; /* 1: the object form (its clock is the host's); 0: a bare array */
    pt_tt_op *ops;
    int op_count, op_cap;
    /* ProfilerStep#<n> spans */
    struct pt_tt_step {
        int64_t n;
        double ts, end;
    } * steps;
    int step_count, step_cap;
    int64_t events; /* X events read (labelled or not) */
} pt_tt_trace;

/* regex NULL: the built-in labels; else the user's pattern, which must have
 * three subexpressions. 0, or PT_EINVAL with err saying why. */
int pt_tt_labels_init(pt_tt_labels *l, const char *regex, pt_error *err);
void pt_tt_labels_free(pt_tt_labels *l);

/* Parses trace text (len bytes) named `source`. rank: the trace's rank when
 * given (>= 0; it wins over distributedInfo.rank), else -1. Ops are sorted by
 * start. On failure *out is empty and err reads "SOURCE: FIELD: REASON". */
int pt_tt_parse(const char *text, size_t len, const char *source, const pt_tt_labels *labels,
                int rank, pt_tt_trace *out, pt_error *err);
void pt_tt_trace_free(pt_tt_trace *t); /* NULL-safe; zeroes it */

/* Numbers the ops' iterations: by the ProfilerStep#<n> span an op starts in
 * (ops in none are dropped), else by counting: the k-th op of one (stage,
 * kind, micro-batch) in time order belongs to iteration k, so an iteration
 * begins with the first stage's first forward. Returns the iterations. */
int64_t pt_tt_assign_steps(pt_tt_trace *t);

#endif

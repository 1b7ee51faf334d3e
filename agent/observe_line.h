/* The lines a PyTorch process's pipetop_torch.Monitor writes to its
 * pipetop-agent --observe (bridge/pipetop_torch/monitor.py; docs/protocol.md,
 * "Observed runs"), one per op and per iteration, on a Unix socket in a
 * 0700 folder:
 *
 *   pipetop-observe 1                          the first line
 *   op STEP STAGE KIND MB START_NS END_NS      KIND: F B I W SEND_F RECV_F SEND_B RECV_B
 *   step STEP LOSS SAMPLES END_NS              LOSS: a number or "-"
 *
 * Times are CLOCK_MONOTONIC nanoseconds (the host's, the agent's too). The
 * parser trusts nothing: one space between fields, integers in range, a
 * loss that is finite, END_NS >= START_NS; an error names the field. */
#ifndef PT_AGENT_OBSERVE_LINE_H
#define PT_AGENT_OBSERVE_LINE_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"

#define PT_OBS_LINE_MAX    256 /* bytes of one line, the newline included */
#define PT_OBS_HELLO       "pipetop-observe 1"
#define PT_OBS_STAGE_MAX   4096
#define PT_OBS_MB_MAX      (1 << 20)
#define PT_OBS_SAMPLES_MAX (1LL << 40)

typedef enum pt_obs_type { PT_OBS_HELLO_LINE, PT_OBS_OP, PT_OBS_STEP } pt_obs_type;

typedef struct pt_obs_line {
    pt_obs_type type;
    int64_t step;
    int stage, mb;
    int op;                   /* pt_op_kind (op lines) */
    int64_t start_ns, end_ns; /* op: both; step: end_ns */
    double loss;              /* step: NAN when "-" */
    int64_t samples;          /* step */
} pt_obs_line;

/* Parses one line (len bytes, no newline). 0, or PT_EINVAL with err saying
 * which field is wrong and why ("op: MB: 1048576 is not below 1048576"). */
int pt_obs_parse(const char *line, size_t len, pt_obs_line *out, pt_error *err);

#endif

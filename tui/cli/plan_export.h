/* A pipetop plan in the terms of a PyTorch pipeline framework
 * (`pipetop export-plan`, docs/torch.md):
 *
 * - torch (torch.distributed.pipelining): split points by FQN and the per-rank
 *   schedule CSV that PipelineScheduleMulti._load_csv reads (format
 *   "compute_only": one row per pipeline rank, a cell per time step, each an
 *   action <stage><F|B|I|W><micro-batch> or empty);
 * - torchtitan: module_fqns_per_model_part and the same CSV;
 * - deepspeed: PipelineModule's `parts` (S+1 layer boundaries) and the
 *   subclass that sets them;
 * - megatron: Megatron-Core's --pipeline-model-parallel-layout.
 *
 * What a framework cannot express is refused, naming the plan's field and
 * the framework's limit, or with `flatten` changed into what it can, every
 * change said (pt_fw_fit). */
#ifndef PT_TUI_CLI_PLAN_EXPORT_H
#define PT_TUI_CLI_PLAN_EXPORT_H

#include <stdio.h>

#include "protocol/error.h"
#include "protocol/plan.h"
#include "protocol/profile.h"

typedef enum pt_fw { PT_FW_TORCH, PT_FW_TORCHTITAN, PT_FW_DEEPSPEED, PT_FW_MEGATRON } pt_fw;
#define PT_FW_COUNT 4

/* The framework called name ("torch", ...): 0, or PT_ENOTFOUND with err
 * listing the names. */
int pt_fw_parse(const char *name, pt_fw *out, pt_error *err);
/* Its name, and 1 when its export names layers by FQN (needs the profile's
 * layer names). */
const char *pt_fw_name(pt_fw fw);
int pt_fw_needs_names(pt_fw fw);

#define PT_FW_CHANGES_MAX 16
#define PT_FW_CHANGE_MAX  320
typedef struct pt_fw_changes {
    int count;
    char line[PT_FW_CHANGES_MAX][PT_FW_CHANGE_MAX];
} pt_fw_changes;

/* The plan as fw can run it. Without flatten: a copy of plan when fw
 * expresses all of it, else PT_EINVAL with err "FIELD: what the plan asks;
 * the framework's limit (--flatten: what it would become)". With flatten:
 * the plan changed until fw expresses it, each change a line of *changes
 * ("FIELD: from -> to: why"); PT_EINVAL still for what no change fixes.
 * profile (may be NULL unless fw needs names) gives layer names and costs
 * (re-cutting an interleaved plan into one chunk per device). *out is NULL
 * on error. */
int pt_fw_fit(pt_fw fw, const pt_plan *plan, const pt_profile *profile, int flatten, pt_plan **out,
              pt_fw_changes *changes, pt_error *err);

/* The per-rank schedule CSV of a plan pt_fw_fit accepted for torch or
 * torchtitan: row r is pipeline rank r's compute actions (replica 0 of each
 * stage) in its program order, laid out on time steps so that an action
 * comes after what it needs from another rank (a forward after the previous
 * stage's forward of its micro-batch, a backward or input-backward after the
 * next stage's), one step later at least: the order torch's lock-step
 * runtime runs. Every row has the same number of cells. *text is the
 * caller's to free. */
int pt_fw_schedule_csv(const pt_plan *plan, char **text, pt_error *err);

/* Writes the framework's file for a fitted plan to out: torch, a JSON object
 * (split_spec, stages' FQNs, stage_to_rank, micro-batching, the CSV's
 * name); torchtitan, a TOML [parallelism] table; deepspeed, a Python module
 * (PARTS and the PipelineModule subclass); megatron, the command-line
 * arguments with the layout. csv_name: the CSV's path as the file should
 * name it (torch, torchtitan). 0, or PT_EINVAL with err naming a layer the
 * framework cannot place (megatron). */
int pt_fw_write(pt_fw fw, const pt_plan *plan, const pt_profile *profile, const char *csv_name,
                FILE *out, pt_error *err);

#endif

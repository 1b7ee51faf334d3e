/* Checkpoints of distributed runs (docs/formats.md, "Run checkpoints"):
 *
 *   <dir>/latest            {"v":1,"step":N,"dir":"step-N"}, replaced atomically
 *                           after step N's index is written
 *   <dir>/step-N/           a per-layer checkpoint (runtime/checkpoint.h):
 *       layerNNN.*.f32      written by the stages' agents
 *       stage-<s>.json      each stage's manifest: the index entries of its layers
 *       index.json          written last, by the console, from the manifests
 *
 * Used by the run controller (tui/control/run.h: the commit hook of its session)
 * and `pipetop run` (--resume).
 * Like `pipetop train`, this command-side helper uses runtime/checkpoint.h. */
#ifndef PT_TUI_RUN_CKPT_H
#define PT_TUI_RUN_CKPT_H

#include <stdint.h>

#include "protocol/error.h"

/* The session's commit hook (pt_session_commit_fn): merges the manifests
 * stage-0.json .. stage-(stage_count-1).json of step_dir, checks that each
 * is for `step`, and writes step_dir/index.json atomically. user unused. */
int pt_run_ckpt_commit(void *user, const char *step_dir, int64_t step, int stage_count,
                       pt_error *err);

/* Finds what `--resume path` names: a run's checkpoint folder (with
 * `latest`) or one step folder (with index.json). Fills root (the folder
 * holding step-N; cap bytes) and *step. PT_ENOTFOUND / PT_EPARSE with err
 * naming the file. The step's index is loaded and checked. */
int pt_run_ckpt_find(const char *path, char *root, int cap, int64_t *step, pt_error *err);

/* Makes <dst_root>/step-N hold the checkpoint <src_root>/step-N (hard links,
 * or copies across file systems), so a resumed run that checkpoints into a
 * new folder finds its starting point there. No-op when both are the same
 * folder. */
int pt_run_ckpt_import(const char *src_root, const char *dst_root, int64_t step, pt_error *err);

/* After a run ended: removes the step folders of checkpoint_dir that were
 * never committed (every step-N above the step `latest` names, or every
 * step-N when there is no `latest`; plain files only, as agents write
 * them), so a failed save leaves no partial folder behind. Returns how many
 * it removed. Call it only when no agent writes there any more. */
int pt_run_ckpt_sweep(const char *checkpoint_dir);

/* 0 when a run may resume step `step` and checkpoint into dst_root: its
 * `latest` (if any) names no newer step, so `latest` never moves back;
 * else PT_ESTATE with err saying so and what to do. */
int pt_run_ckpt_check_target(const char *dst_root, int64_t step, pt_error *err);

#endif

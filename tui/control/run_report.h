/* Measured figures of a distributed run, from the telemetry the session
 * receives, set next to the simulator's prediction for the same plan
 * (`pipetop run`'s summary).
 *
 * Per worker (stage replica) and step: busy time (events of compute ops,
 * pt_op_is_compute), iteration time (metrics iter_ms), loss and memory peaks
 * (metrics); per step its span (earliest start to latest end of any
 * worker's event). The figures cover the steps every worker reported metrics
 * for, leaving out the first of them when there are at least two (it pays
 * for first-touch allocation and connection set-up, which the simulator
 * does not model):
 *   iteration time of the pipeline = protocol/figures.h's measured
 *   iteration time (the median of the newest steps' slowest worker's
 *   iteration time); busy and bubble of a worker as protocol/op.h
 *   defines them (its compute time / the time the steps' spans occupy),
 *   which is what the console's stats view shows for the same steps. */
#ifndef PT_TUI_RUN_REPORT_H
#define PT_TUI_RUN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "planner/simulate.h"
#include "protocol/message.h"
#include "protocol/plan.h"

typedef struct pt_run_report pt_run_report;

/* A report for the workers of plan (stage by stage, replica by replica)
 * over steps [first_step, first_step + steps). NULL on no memory. */
pt_run_report *pt_run_report_new(const pt_plan *plan, int64_t first_step, int64_t steps);
void pt_run_report_free(pt_run_report **r_p); /* NULL-safe */

/* Telemetry of worker w (events of other steps or workers are ignored). */
void pt_run_report_events(pt_run_report *r, int w, const pt_msg_events *ev);
void pt_run_report_metrics(pt_run_report *r, int w, const pt_msg_metrics *m);

/* The loss of a step over the whole global batch (the last stage's
 * replicas' losses weighted by their rows) and the slowest worker's
 * samples/s: 1 once every last-stage replica reported it, else 0. */
int pt_run_report_step(const pt_run_report *r, int64_t step, double *loss, double *samples_per_s);

/* 1 when the step's loss can no longer complete: a last-stage replica has
 * sent metrics of a later step but none of this one (telemetry is lossy: a
 * frame published before the console's subscription reached the agent, or
 * past a full queue, is dropped; an agent's frames arrive in order). 0
 * otherwise. Who prints steps in order skips such a step instead of waiting
 * for it for ever. */
int pt_run_report_step_lost(const pt_run_report *r, int64_t step);

typedef struct pt_run_worker_figures {
    int stage, replica;
    int steps;           /* steps measured */
    double iter_ms;      /* mean iteration time */
    double busy, bubble; /* fractions */
    int64_t peak[PT_MSG_MEM_COUNT];
    int64_t peak_total;
} pt_run_worker_figures;

typedef struct pt_run_figures {
    int steps_measured;
    double iteration_ms;      /* protocol/figures.h's measured iteration time; 0 when none */
    double mean_iteration_ms; /* the mean of the same steps (a loaded host's bursts move it) */
    int worker_count;
    pt_run_worker_figures *workers; /* owned by the report */
} pt_run_figures;

/* Computes the measured figures (valid until the next call or free). */
const pt_run_figures *pt_run_report_figures(pt_run_report *r);

/* The summary next to the prediction (pred_label, when not NULL, says what
 * the prediction stands on: tui/record/figures.h): a table (human) or one JSON object
 * (caller frees; NULL on no memory) with measured_iteration_ms,
 * predicted_iteration_ms, relative_error and per stage replica busy,
 * bubble, peak_memory (bytes by category and total) and the predicted
 * figures. extra_json, when not NULL, is an object text whose members are
 * added, replacing any the report has (run directory, checkpoint, counts,
 * the headline prediction's labels). */
void pt_run_report_print(pt_run_report *r, const pt_sim_result *pred, const char *pred_label,
                         FILE *out);
char *pt_run_report_json(pt_run_report *r, const pt_sim_result *pred, const char *extra_json);

#endif

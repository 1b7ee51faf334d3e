/* The headline figures of a run, computed once for every consumer: the
 * definitions are protocol/figures.h's; this module applies them to what the
 * console knows of a run (a pt_store) and to a run folder (its calibration
 * files). `pipetop run`'s summary, `status`, `replay`, `export` and the
 * console's header, plan view, timeline footer and stats view all go
 * through it, so one run shows one predicted and one measured iteration time
 * wherever it is looked at, with one label.
 *
 * Predicted: the simulator on the plan with the run's newest calibration up
 * to the plan's generation (RUN/calibrated-gen-K.json and
 * RUN/calibrated-gen-K-topology.json, K <= the generation: what the live
 * console had fitted by then) when the folder holds one, else with the
 * profile the run was predicted with. Labelled "calibrated" (with K) or
 * "analytic" (the simulator on an uncalibrated profile), and the profile's
 * origin ("measured", "analytic", "imported", "calibrated from RUN"). */
#ifndef PT_TUI_FIGURES_H
#define PT_TUI_FIGURES_H

#include <stdint.h>

#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/error.h"
#include "protocol/figures.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tui/record/store.h"

/* A prediction and what it stands on. */
typedef struct pt_fig_pred {
    double iter_ms;                /* the simulator's time per iteration */
    double bubble_frac;            /* its mean bubble */
    double throughput;             /* samples/s */
    int calibrated;                /* 1: the profile was fitted to a run's ops */
    int64_t cal_gen;               /* the run folder's calibrated-gen-K.json used; -1: none */
    char kind[16];                 /* "calibrated" or "analytic" */
    char origin[PT_FIG_LABEL_MAX]; /* the profile's origin */
    char label[PT_FIG_LABEL_MAX];  /* "calibrated g2", "analytic, measured profile" */
    char brief[32];                /* the label in a few columns: "calibrated g2", "analytic" */
} pt_fig_pred;

/* The measured figure of one generation (protocol/figures.h). */
typedef struct pt_fig_meas {
    double iter_ms; /* 0 when no complete step */
    int steps;      /* the steps it is the median of */
    int64_t gen;
    int64_t last_step;            /* the newest step counted; -1 none */
    char label[PT_FIG_LABEL_MAX]; /* "median of last 20 steps" */
} pt_fig_meas;

/* Fills out's labels for a prediction made on profile p (NULL: unknown)
 * with the run's calibration of generation cal_gen (-1: none); leaves the
 * numbers as they are. */
void pt_fig_pred_label(const pt_profile *p, int64_t cal_gen, pt_fig_pred *out);

/* The simulator's run of plan on (profile, topo): *prog and *res; res's
 * arrays belong to *sim, a new simulator the caller frees (pt_sim_free);
 * the caller releases *prog. Both are to be released on failure too. */
int pt_fig_simulate(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                    pt_sim **sim, pt_program *prog, pt_sim_result *res, pt_error *err);

/* The prediction of plan on (profile, topo) labelled with cal_gen (as
 * pt_fig_pred_label): 0, or the simulator's error. */
int pt_fig_predict(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                   int64_t cal_gen, pt_fig_pred *out, pt_error *err);

/* Fills *out from a simulation already made (res of plan's program). */
void pt_fig_pred_from(const pt_sim_result *res, const pt_profile *profile, int64_t cal_gen,
                      pt_fig_pred *out);

/* The run folder's newest calibration fitted on a generation <= gen that
 * loads and fits a plan of layer_count layers: 0 with *profile and *topo
 * (the caller's) and *cal_gen; PT_ENOTFOUND when there is none (outputs
 * NULL and -1). A calibration that does not load is passed over. */
int pt_fig_calibration_load(const char *run_dir, int64_t gen, int layer_count, pt_profile **profile,
                            pt_topology **topo, int64_t *cal_gen);

/* The measured figure of the store's current generation over its first
 * `upto` steps (upto < 0: all; a paused display passes the steps it froze
 * at): a step counts once every stage replica of the current plan reported
 * its metrics. 0 with *out set (iter_ms 0 and steps 0 when no step counts). */
int pt_fig_measure_store(const pt_store *s, int64_t upto, pt_fig_meas *out);

/* The figures as JSON members of o, the one encoding `status --json`,
 * `run`'s summary and the trace's "otherData" share (docs/formats.md):
 * measured_iteration_ms, steps_measured, measured_label (m not NULL, with a
 * step); predicted_iteration_ms, predicted_bubble_frac, predicted_kind,
 * predicted_label, profile_origin, calibration_generation (p not NULL); and
 * relative_error with both. A member o already has is replaced. */
struct cJSON;
void pt_fig_json(struct cJSON *o, const pt_fig_meas *m, const pt_fig_pred *p);

/* Stage replicas that report metrics for one step of plan (each chunk of
 * an interleaved plan is one). */
int pt_fig_reporters(const pt_plan *plan);

#endif

/* What a command runs on: the model, the plan, the topology and the profile,
 * found or made in one order, for `pipetop run`, the console, the demo,
 * replay, status, export and calibrate alike. One local topology (the
 * machine the agents share) is defined here, with its constants, once.
 *
 * Order (pt_inputs_resolve): the model (and the caller's check of it); the plan file, when given;
 * the topology (a file or a name in topologies/, else the local one); the profile (a file or a name
 * in profiles/, else the caller's `profile` hook makes one, for the plan when there is one); the
 * plan, when not given, by the caller's `plan` hook; the profile again, by the hook, when it was
 * made before the plan existed; then the plan is checked against the model and the topology. */
#ifndef PT_TUI_CLI_INPUTS_H
#define PT_TUI_CLI_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"
#include "tui/record/figures.h"

/* The local topology: one node whose devices share this machine's memory
 * (split evenly) and cores, linked as pipetop charges ZeroMQ over loopback. */
#define PT_LOCAL_LINK_BPS     2e9         /* bytes/s */
#define PT_LOCAL_LINK_LATENCY 50e-6       /* seconds */
#define PT_LOCAL_MEMORY_GUESS (1LL << 30) /* per device, when the machine's is unknown */
/* The device an analytic profile is made for when none is named. */
#define PT_INPUTS_DEVICE "cpu-local"
/* Smallest micro-batch pt_inputs_plan_with lets a planner choose: the
 * analytic cost model has no per-op overhead, so left alone it picks
 * micro-batches of one sample, which real CPU agents run far slower than
 * predicted and which no timeline can label. */
#define PT_INPUTS_MB_MIN 8

typedef struct pt_inputs {
    pt_model_spec *spec;
    pt_plan *plan;
    pt_topology *topo;
    pt_profile *profile;
} pt_inputs;

typedef struct pt_inputs_opts {
    const char *model;    /* a path or a name in models/ (required) */
    const char *plan;     /* a plan file; NULL: planned by the `plan` hook */
    const char *topology; /* a path or a name in topologies/; NULL: the local topology */
    int local_devices;    /* devices of the local topology; 0: the plan's (at least 1) */
    const char *profile;  /* a path or a name in profiles/; NULL: made by the `profile` hook */
    /* What the caller checks against the model before anything slow (a data
     * set's shape); NULL: nothing. */
    int (*check_model)(void *user, pt_inputs *in, pt_error *err);
    /* Makes in->profile (freeing one it replaces) for in->spec on in->topo:
     * for in->plan when it is set, else for a first plan. Called once before
     * the plan exists (when none is given) and once after. */
    int (*make_profile)(void *user, pt_inputs *in, pt_error *err);
    /* Makes in->plan from in->profile and in->topo. */
    int (*make_plan)(void *user, pt_inputs *in, pt_error *err);
    void *user;
} pt_inputs_opts;

/* Resolves *in (zeroed first) in the order above. 0, or a negative PT_E*
 * code with err naming the input at fault; what was resolved stays in *in
 * (release it in either case). */
int pt_inputs_resolve(const pt_inputs_opts *o, pt_inputs *in, pt_error *err);
/* Frees what *in holds and zeroes it. NULL-safe. */
void pt_inputs_release(pt_inputs *in);

/* The local topology of `devices` devices; NULL on no memory. */
pt_topology *pt_inputs_local_topology(int devices);
/* Devices a plan uses (the highest index + 1); 1 for NULL or none. */
int pt_inputs_plan_devices(const pt_plan *plan);
/* An analytic profile of spec on devices/PT_INPUTS_DEVICE at micro-batch mb. */
int pt_inputs_analytic_profile(const pt_model_spec *spec, int mb, pt_profile **out, pt_error *err);
/* Runs planner on (prof, topo) at a global batch, with micro-batches of at
 * least PT_INPUTS_MB_MIN samples when the global batch allows; the plan
 * names the profile's model. */
int pt_inputs_plan_with(const char *planner, const pt_profile *prof, const pt_topology *topo,
                        int global, pt_plan **out, pt_error *err);

/* The simulator's prediction of in->plan on in->profile and in->topo:
 * *prog and *res. res's arrays (workers, events) belong to *sim, a new
 * simulator the caller frees (pt_sim_free) once it is done with them; the
 * caller releases *prog. Both are to be released on failure too. */
int pt_inputs_simulate(const pt_inputs *in, pt_sim **sim, pt_program *prog, pt_sim_result *res,
                       pt_error *err);

/* RUN as commands take it (a run.ndjson or a folder holding one): the
 * record's path and its folder, each into cap bytes. */
void pt_inputs_run_paths(const char *run, char *record, char *dir, size_t cap);

/* What a recorded run ran on: the plan of generation gen (gen < 0: the
 * first; past the last: the last) and the model recorded with it; the run
 * folder dir's profile.json when it fits the model, else an analytic one;
 * its topology.json when the plan fits it, else the local topology of the
 * plan's devices. A record without a plan leaves in->plan NULL and returns 0. */
int pt_inputs_from_record(const pt_record *rec, const char *dir, int64_t gen, pt_inputs *in,
                          pt_error *err);

/* What a recorded run's generation is predicted with (tui/record/figures.h,
 * the one definition): pt_inputs_from_record, then the run folder's newest
 * calibration fitted on a generation up to the plan's, in place of the
 * profile and topology, when one loads and the plan fits its devices.
 * *plan_gen: the plan's generation (-1: no plan); *cal_gen: the
 * calibration's (-1: none, the run's own profile stands). */
int pt_inputs_from_run(const pt_record *rec, const char *dir, int64_t gen, pt_inputs *in,
                       int64_t *plan_gen, int64_t *cal_gen, pt_error *err);

/* The headline figures of a recorded run (tui/record/figures.h) as of the
 * end of generation gen (< 0: the newest): measured from its metrics,
 * predicted as pt_inputs_from_run makes it (*have_pred 0 when the record
 * has no plan or it does not simulate). 0 or PT_ENOMEM. */
int pt_inputs_run_figures(pt_record *rec, const char *dir, int64_t gen, pt_fig_meas *meas,
                          pt_fig_pred *pred, int *have_pred);
/* The same from st, a store the record's entries other than op events were
 * applied to up to its end (pt_record_apply), as `status` has one: the
 * record is not applied a second time. */
void pt_inputs_store_figures(pt_record *rec, const char *dir, const pt_store *st, pt_fig_meas *meas,
                             pt_fig_pred *pred, int *have_pred);

#endif

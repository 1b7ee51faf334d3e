/* Model -> plan -> topology -> profile, resolved once (see inputs.h). */
#include "tui/cli/inputs.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "planner/analytic.h"
#include "planner/cost.h"
#include "planner/planner.h"
#include "protocol/datadir.h"
#include "protocol/device.h"
#include "tui/record/figures.h"
#include "tui/record/replay.h"

pt_topology *pt_inputs_local_topology(int devices)
{
    if (devices < 1)
        devices = 1;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t mem = pages > 0 && page > 0 ? (int64_t)pages * page / devices : PT_LOCAL_MEMORY_GUESS;
    pt_link link = {PT_LOCAL_LINK_BPS, PT_LOCAL_LINK_LATENCY};
    pt_topology *t = pt_topology_uniform(1, devices, mem, link, link);
    if (!t)
        return NULL;
    snprintf(t->name, sizeof t->name, "local");
    /* the agents share this machine's cores: the simulator slows their
     * compute when there are more agents than cores (docs/formats.md,
     * "Shared cores") */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (int d = 0; d < devices; d++)
        t->devices[d].node_cores = cpus > 0 ? (int)cpus : 0;
    return t;
}

int pt_inputs_plan_devices(const pt_plan *plan)
{
    int n = 1;
    for (int s = 0; plan && s < plan->stage_count; s++)
        for (int r = 0; r < plan->stages[s].replica_count; r++)
            if (plan->stages[s].replicas[r] + 1 > n)
                n = plan->stages[s].replicas[r] + 1;
    return n;
}

int pt_inputs_analytic_profile(const pt_model_spec *spec, int mb, pt_profile **out, pt_error *err)
{
    pt_device_desc dev;
    int rc = pt_device_find(PT_INPUTS_DEVICE, &dev, err);
    if (rc < 0)
        return rc;
    return pt_analytic_profile(spec, &dev, mb, NULL, out, err);
}

int pt_inputs_plan_with(const char *planner, const pt_profile *prof, const pt_topology *topo,
                        int global, pt_plan **out, pt_error *err)
{
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    for (int mb = PT_INPUTS_MB_MIN;
         mb <= global && o.microbatch_size_count < PT_PLANNER_MB_CHOICES_MAX; mb++)
        if (global % mb == 0)
            o.microbatch_sizes[o.microbatch_size_count++] = mb;
    pt_planner_report rep;
    int rc = pt_planner_run(planner, prof, topo, global, &o, out, &rep, err);
    if (rc == 0)
        snprintf((*out)->model, sizeof(*out)->model, "%s", prof->model);
    return rc;
}

void pt_inputs_release(pt_inputs *in)
{
    if (!in)
        return;
    pt_model_spec_free(&in->spec);
    pt_plan_free(&in->plan);
    pt_topology_free(&in->topo);
    pt_profile_free(&in->profile);
}

static int load_topology(const pt_inputs_opts *o, pt_inputs *in, pt_error *err)
{
    if (!o->topology) {
        int n = o->local_devices > 0 ? o->local_devices : pt_inputs_plan_devices(in->plan);
        if (!(in->topo = pt_inputs_local_topology(n)))
            return pt_error_set(err, PT_ENOMEM, "local topology of %d devices: out of memory", n);
        return 0;
    }
    char path[PT_DATADIR_PATH_MAX];
    int rc = pt_datadir_find("topologies", o->topology, ".json", path, sizeof path, err);
    return rc < 0 ? rc : pt_topology_load(path, &in->topo, err);
}

static int load_profile(const pt_inputs_opts *o, pt_inputs *in, pt_error *err)
{
    char path[PT_DATADIR_PATH_MAX];
    int rc = pt_datadir_find("profiles", o->profile, ".json", path, sizeof path, err);
    return rc < 0 ? rc : pt_profile_load(path, &in->profile, err);
}

int pt_inputs_resolve(const pt_inputs_opts *o, pt_inputs *in, pt_error *err)
{
    memset(in, 0, sizeof *in);
    int rc;
    if ((rc = pt_model_spec_find(o->model, &in->spec, err)) < 0 ||
        (o->check_model && (rc = o->check_model(o->user, in, err)) < 0) ||
        (o->plan && (rc = pt_plan_load(o->plan, &in->plan, err)) < 0) ||
        (rc = load_topology(o, in, err)) < 0)
        return rc;
    rc = o->profile ? load_profile(o, in, err) : o->make_profile(o->user, in, err);
    if (rc < 0 || (rc = pt_profile_check(in->profile, in->spec, "profile", err)) < 0)
        return rc;
    if (!in->plan) {
        if ((rc = o->make_plan(o->user, in, err)) < 0)
            return rc;
        /* the profile was made for a plan not yet chosen: now for this one */
        if (!o->profile && ((rc = o->make_profile(o->user, in, err)) < 0 ||
                            (rc = pt_profile_check(in->profile, in->spec, "profile", err)) < 0))
            return rc;
    }
    return pt_plan_check(in->plan, in->spec, in->topo, o->plan ? o->plan : "plan", err);
}

int pt_inputs_simulate(const pt_inputs *in, pt_sim **sim, pt_program *prog, pt_sim_result *res,
                       pt_error *err)
{
    return pt_fig_simulate(in->plan, in->profile, in->topo, sim, prog, res, err);
}

void pt_inputs_run_paths(const char *run, char *record, char *dir, size_t cap)
{
    struct stat st;
    if (stat(run, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(record, cap, "%s/%s", run, PT_RECORD_FILE);
        snprintf(dir, cap, "%s", run);
        return;
    }
    snprintf(record, cap, "%s", run);
    snprintf(dir, cap, "%s", run);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, cap, ".");
}

/* The plan entry of generation gen (see pt_inputs_from_record); NULL when
 * the record has none. */
static const pt_record_entry *plan_entry(const pt_record *rec, int64_t gen)
{
    const pt_record_entry *found = NULL;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind != PT_RECORD_PLAN || !e->plan)
            continue;
        found = e;
        if (gen < 0 || e->gen >= gen)
            break;
    }
    return found;
}

int pt_inputs_from_record(const pt_record *rec, const char *dir, int64_t gen, pt_inputs *in,
                          pt_error *err)
{
    memset(in, 0, sizeof *in);
    const pt_record_entry *e = plan_entry(rec, gen);
    if (!e)
        return 0; /* a record without a plan: the console shows data only */
    if (!(in->plan = pt_plan_clone(e->plan)))
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    if (!e->model_json)
        return 0;
    int rc = pt_model_spec_parse(e->model_json, "record model", &in->spec, err);
    if (rc < 0)
        return rc;
    char path[PT_DATADIR_PATH_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "%.4000s/profile.json", dir);
    /* the profile the run was predicted with, unless it does not fit the model */
    int mb = in->plan->microbatch_size;
    rc = stat(path, &st) == 0 ? pt_profile_load(path, &in->profile, err)
                              : pt_inputs_analytic_profile(in->spec, mb, &in->profile, err);
    if (rc < 0)
        return rc;
    if (pt_profile_check(in->profile, in->spec, "profile", NULL) < 0 ||
        in->profile->layer_count != in->plan->layer_count) {
        pt_profile_free(&in->profile);
        if ((rc = pt_inputs_analytic_profile(in->spec, mb, &in->profile, err)) < 0)
            return rc;
    }
    snprintf(path, sizeof path, "%.4000s/topology.json", dir);
    if (stat(path, &st) == 0 && pt_topology_load(path, &in->topo, NULL) == 0 &&
        pt_plan_check(in->plan, NULL, in->topo, "plan", NULL) == 0)
        return 0;
    pt_topology_free(&in->topo);
    in->topo = pt_inputs_local_topology(pt_inputs_plan_devices(in->plan));
    return in->topo ? 0 : pt_error_set(err, PT_ENOMEM, "out of memory");
}

int pt_inputs_from_run(const pt_record *rec, const char *dir, int64_t gen, pt_inputs *in,
                       int64_t *plan_gen, int64_t *cal_gen, pt_error *err)
{
    *cal_gen = -1;
    *plan_gen = -1;
    int rc = pt_inputs_from_record(rec, dir, gen, in, err);
    if (rc < 0 || !in->plan)
        return rc;
    *plan_gen = plan_entry(rec, gen)->gen;
    pt_profile *p = NULL;
    pt_topology *t = NULL;
    if (pt_fig_calibration_load(dir, *plan_gen, in->plan->layer_count, &p, &t, cal_gen) < 0)
        return 0;
    if (pt_plan_check(in->plan, NULL, t, "plan", NULL) < 0) {
        /* fitted on another set of devices: the run's own inputs stand */
        pt_profile_free(&p);
        pt_topology_free(&t);
        *cal_gen = -1;
        return 0;
    }
    pt_profile_free(&in->profile);
    pt_topology_free(&in->topo);
    in->profile = p;
    in->topo = t;
    return 0;
}

int pt_inputs_run_figures(pt_record *rec, const char *dir, int64_t gen, pt_fig_meas *meas,
                          pt_fig_pred *pred, int *have_pred)
{
    *have_pred = 0;
    pt_store *st = NULL;
    if (pt_store_new(1, &st) < 0)
        return PT_ENOMEM;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (gen >= 0 && e->kind == PT_RECORD_PLAN && e->gen > gen)
            break;
        if (!(e->kind == PT_RECORD_RECV && e->msg_type == PT_MSG_EVENTS))
            pt_record_apply(rec, i, st);
    }
    pt_inputs_store_figures(rec, dir, st, meas, pred, have_pred);
    pt_store_free(&st);
    return 0;
}

void pt_inputs_store_figures(pt_record *rec, const char *dir, const pt_store *st, pt_fig_meas *meas,
                             pt_fig_pred *pred, int *have_pred)
{
    *have_pred = 0;
    pt_fig_measure_store(st, -1, meas);
    pt_inputs in = {0};
    int64_t plan_gen, cal_gen;
    if (pt_store_plan(st) &&
        pt_inputs_from_run(rec, dir, pt_store_generation(st), &in, &plan_gen, &cal_gen, NULL) ==
            0 &&
        in.plan && in.profile && in.topo &&
        pt_fig_predict(in.plan, in.profile, in.topo, cal_gen, pred, NULL) == 0)
        *have_pred = 1;
    pt_inputs_release(&in);
}

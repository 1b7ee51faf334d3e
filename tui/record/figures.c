/* The headline figures of a run (see figures.h). */
#include "tui/record/figures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "planner/cost.h"

#define PATH_CAP 4096

void pt_fig_pred_label(const pt_profile *p, int64_t cal_gen, pt_fig_pred *out)
{
    const char *kind = p ? (p->origin.kind[0] ? p->origin.kind : p->source) : "";
    out->cal_gen = cal_gen;
    out->calibrated = cal_gen >= 0 || !strcmp(kind, "calibrated");
    snprintf(out->kind, sizeof out->kind, "%s", out->calibrated ? "calibrated" : "analytic");
    if (p && !strcmp(kind, "calibrated") && p->origin.run[0])
        snprintf(out->origin, sizeof out->origin, "calibrated from %.70s", p->origin.run);
    else
        snprintf(out->origin, sizeof out->origin, "%s", kind[0] ? kind : "unknown");
    if (cal_gen >= 0) {
        snprintf(out->label, sizeof out->label, "calibrated g%lld", (long long)cal_gen);
        snprintf(out->brief, sizeof out->brief, "calibrated g%lld", (long long)cal_gen);
    } else if (out->calibrated) {
        snprintf(out->label, sizeof out->label, "%.90s", out->origin);
        snprintf(out->brief, sizeof out->brief, "calibrated");
    } else {
        snprintf(out->label, sizeof out->label, "analytic, %.60s profile", out->origin);
        snprintf(out->brief, sizeof out->brief, "analytic");
    }
}

int pt_fig_simulate(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                    pt_sim **sim, pt_program *prog, pt_sim_result *res, pt_error *err)
{
    *sim = NULL;
    if (profile->layer_count != plan->layer_count)
        return pt_error_set(err, PT_EINVAL, "the profile has %d layers, the plan %d",
                            profile->layer_count, plan->layer_count);
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc == 0 && (rc = pt_sim_new(sim)) < 0)
        pt_error_set(err, rc, "out of memory");
    if (rc == 0)
        rc = pt_sim_plan(*sim, plan, cost, NULL, prog, res, err);
    pt_cost_free(&cost);
    return rc;
}

void pt_fig_pred_from(const pt_sim_result *res, const pt_profile *profile, int64_t cal_gen,
                      pt_fig_pred *out)
{
    memset(out, 0, sizeof *out);
    /* an asynchronous program's iter_s is already per iteration (per window) */
    out->iter_ms = res->iter_s * 1e3;
    out->bubble_frac = res->bubble_frac;
    out->throughput = res->throughput;
    pt_fig_pred_label(profile, cal_gen, out);
}

int pt_fig_predict(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                   int64_t cal_gen, pt_fig_pred *out, pt_error *err)
{
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    memset(&res, 0, sizeof res);
    int rc = pt_fig_simulate(plan, profile, topo, &sim, &prog, &res, err);
    if (rc == 0)
        pt_fig_pred_from(&res, profile, cal_gen, out);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    return rc;
}

/* Loads RUN/calibrated-gen-K{,-topology}.json when both exist and fit. */
static int load_one(const char *dir, int64_t k, int layer_count, pt_profile **p, pt_topology **t)
{
    char path[PATH_CAP + 64];
    struct stat st;
    snprintf(path, sizeof path, "%.4000s/calibrated-gen-%lld.json", dir, (long long)k);
    if (stat(path, &st) < 0 || pt_profile_load(path, p, NULL) < 0)
        return PT_ENOTFOUND;
    snprintf(path, sizeof path, "%.4000s/calibrated-gen-%lld-topology.json", dir, (long long)k);
    if ((*p)->layer_count != layer_count || pt_topology_load(path, t, NULL) < 0) {
        pt_profile_free(p);
        return PT_ENOTFOUND;
    }
    return 0;
}

int pt_fig_calibration_load(const char *run_dir, int64_t gen, int layer_count, pt_profile **profile,
                            pt_topology **topo, int64_t *cal_gen)
{
    *profile = NULL;
    *topo = NULL;
    *cal_gen = -1;
    if (!run_dir || !run_dir[0] || gen < 1)
        return PT_ENOTFOUND;
    /* generations are numbered from 1; a record with more than a few
     * thousand is not one a person applied by hand */
    for (int64_t k = gen; k >= 1 && gen - k < 100000; k--)
        if (load_one(run_dir, k, layer_count, profile, topo) == 0) {
            *cal_gen = k;
            return 0;
        }
    return PT_ENOTFOUND;
}

int pt_fig_reporters(const pt_plan *plan)
{
    return plan ? pt_plan_device_count(plan) : 0;
}

typedef struct step_ms {
    int64_t step;
    double ms;
} step_ms;

static int cmp_step(const void *a, const void *b)
{
    const step_ms *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

int pt_fig_measure_store(const pt_store *s, int64_t upto, pt_fig_meas *out)
{
    memset(out, 0, sizeof *out);
    out->gen = pt_store_generation(s);
    out->last_step = -1;
    int64_t n = pt_store_step_count(s);
    if (upto >= 0 && upto < n)
        n = upto;
    int need = pt_fig_reporters(pt_store_plan(s));
    /* the newest complete steps of the generation, one more than the
     * window: pt_fig_iter_ms leaves out the oldest, which is the
     * generation's first step exactly when the walk reached its start */
    step_ms v[PT_FIG_WINDOW_STEPS + 1];
    int k = 0;
    for (int64_t i = n - 1; i >= 0 && k < PT_FIG_WINDOW_STEPS + 1; i--) {
        const pt_store_step *st = pt_store_step_at(s, i);
        if (st->gen != out->gen)
            break;
        if (need > 0 && st->reports >= need)
            v[k++] = (step_ms){st->step, st->iter_ms};
    }
    qsort(v, (size_t)k, sizeof *v, cmp_step);
    double ms[PT_FIG_WINDOW_STEPS + 1];
    for (int i = 0; i < k; i++)
        ms[i] = v[i].ms;
    out->iter_ms = pt_fig_iter_ms(ms, k, &out->steps);
    out->last_step = k ? v[k - 1].step : -1;
    pt_fig_iter_label(out->steps, out->label, sizeof out->label);
    return 0;
}

static void put_number(cJSON *o, const char *k, double v)
{
    if (cJSON_GetObjectItemCaseSensitive(o, k))
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, cJSON_CreateNumber(v));
    else
        cJSON_AddNumberToObject(o, k, v);
}

static void put_string(cJSON *o, const char *k, const char *v)
{
    if (cJSON_GetObjectItemCaseSensitive(o, k))
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, cJSON_CreateString(v));
    else
        cJSON_AddStringToObject(o, k, v);
}

void pt_fig_json(cJSON *o, const pt_fig_meas *m, const pt_fig_pred *p)
{
    if (m && m->steps > 0) {
        put_number(o, "measured_iteration_ms", m->iter_ms);
        put_number(o, "steps_measured", m->steps);
        put_string(o, "measured_label", m->label);
    }
    if (p) {
        put_number(o, "predicted_iteration_ms", p->iter_ms);
        put_number(o, "predicted_bubble_frac", p->bubble_frac);
        put_string(o, "predicted_kind", p->kind);
        put_string(o, "predicted_label", p->label);
        put_string(o, "profile_origin", p->origin);
        if (p->cal_gen >= 0)
            put_number(o, "calibration_generation", (double)p->cal_gen);
    }
    if (m && m->steps > 0 && p && p->iter_ms > 0)
        put_number(o, "relative_error", m->iter_ms / p->iter_ms - 1);
}

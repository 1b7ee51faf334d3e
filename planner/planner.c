/* The planner registry, input validation and the common entry point. */
#include "planner/planner.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/plan_compose.h"
#include "planner/plan_util.h"

/* One line per planner; a new planner is a file and a line here. */
static const pt_planner_info planners[] = {
    {"dapple", "DAPPLE: partition, replication and placement minimising synchronous latency",
     pt_planner_dapple, PT_OBJECTIVE_DAPPLE, NULL, 1},
    {"pipedream", "PipeDream: hierarchical DP minimising the slowest stage (asynchronous)",
     pt_planner_pipedream, PT_OBJECTIVE_PIPEDREAM, pc_pipedream_fallback, 1},
    {"2bw", "PipeDream-2BW: depth x width, micro-batch and recomputation under memory",
     pt_planner_2bw, PT_OBJECTIVE_DEFAULT, NULL, 1},
    {"gpipe", "GPipe: balanced contiguous partition into --stages stages", pt_planner_gpipe,
     PT_OBJECTIVE_DEFAULT, NULL, 1},
    {"dp", "data parallelism: one stage on every device, all-reduce overlapping the backward",
     pt_planner_dp, PT_OBJECTIVE_DEFAULT, NULL, 0},
    {"pipesgd", "Pipe-SGD: data parallelism with the all-reduce overlapped (width two)",
     pt_planner_pipesgd, PT_OBJECTIVE_DEFAULT, NULL, 0},
};

#define PLANNER_COUNT ((int)(sizeof planners / sizeof planners[0]))

const pt_planner_info *pt_planner_get(int index)
{
    return index >= 0 && index < PLANNER_COUNT ? &planners[index] : NULL;
}

int pt_planner_count(void)
{
    return PLANNER_COUNT;
}

const pt_planner_info *pt_planner_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < PLANNER_COUNT; i++)
        if (!strcmp(planners[i].name, name))
            return &planners[i];
    return NULL;
}

static const char *const objective_names[PT_OBJECTIVE_COUNT] = {"default", "pipedream", "dapple"};

const char *pt_planner_objective_name(pt_planner_objective objective)
{
    return (int)objective >= 0 && objective < PT_OBJECTIVE_COUNT ? objective_names[objective]
                                                                 : NULL;
}

int pt_planner_objective_parse(const char *name, pt_planner_objective *out)
{
    for (int k = 0; name && k < PT_OBJECTIVE_COUNT; k++)
        if (!strcmp(objective_names[k], name)) {
            *out = (pt_planner_objective)k;
            return 0;
        }
    return PT_ENOTFOUND;
}

void pt_planner_opts_default(pt_planner_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
    opts->optim = PT_OPTIM_SGD;
}

static int bad_time(double t)
{
    return !isfinite(t) || t < 0;
}

static int check_link(const char *name, pt_link l, pt_error *err)
{
    if (!isfinite(l.bandwidth) || !(l.bandwidth > 0))
        return pt_error_set(err, PT_EINVAL, "topology: links.%s.bandwidth: %g is not positive",
                            name, l.bandwidth);
    if (bad_time(l.latency))
        return pt_error_set(err, PT_EINVAL, "topology: links.%s.latency: %g is negative", name,
                            l.latency);
    return 0;
}

int pt_planner_check_input(const pt_profile *profile, const pt_topology *topo, int global_batch,
                           const pt_planner_opts *opts, pt_error *err)
{
    if (!profile)
        return pt_error_set(err, PT_EINVAL, "planner: no profile");
    if (!topo)
        return pt_error_set(err, PT_EINVAL, "planner: no topology");
    if (profile->layer_count < 1 || !profile->layers)
        return pt_error_set(err, PT_EINVAL, "profile: layers: the profile has no layers");
    if (profile->microbatch < 1)
        return pt_error_set(err, PT_EINVAL, "profile: microbatch: %d is not positive",
                            profile->microbatch);
    if (profile->input_bytes < 0)
        return pt_error_set(err, PT_EINVAL, "profile: input_bytes: %lld is negative",
                            (long long)profile->input_bytes);
    for (int l = 0; l < profile->layer_count; l++) {
        const pt_profile_layer *L = &profile->layers[l];
        const char *f = NULL;
        double v = 0;
        if (bad_time(L->fwd_ms))
            f = "fwd_ms", v = L->fwd_ms;
        else if (bad_time(L->bwd_ms))
            f = "bwd_ms", v = L->bwd_ms;
        else if (bad_time(L->recompute_ms))
            f = "recompute_ms", v = L->recompute_ms;
        if (f)
            return pt_error_set(err, PT_EINVAL, "profile: layers[%d].%s: %g is %s", l, f, v,
                                isfinite(v) ? "negative" : "not a finite number");
        if (L->act_bytes < 0)
            return pt_error_set(err, PT_EINVAL, "profile: layers[%d].act_bytes: %lld is negative",
                                l, (long long)L->act_bytes);
        if (L->param_bytes < 0)
            return pt_error_set(err, PT_EINVAL, "profile: layers[%d].param_bytes: %lld is negative",
                                l, (long long)L->param_bytes);
    }
    if (topo->node_count < 1)
        return pt_error_set(err, PT_EINVAL, "topology: nodes: none");
    if (topo->device_count < 1 || !topo->devices)
        return pt_error_set(err, PT_EINVAL, "topology: devices: none");
    for (int d = 0; d < topo->device_count; d++) {
        const pt_device *dv = &topo->devices[d];
        if (dv->node < 0 || dv->node >= topo->node_count)
            return pt_error_set(err, PT_EINVAL, "topology: devices[%d].node: %d is not a node", d,
                                dv->node);
        if (dv->memory_bytes <= 0)
            return pt_error_set(err, PT_EINVAL,
                                "topology: devices[%d].memory: %lld bytes; a device needs memory",
                                d, (long long)dv->memory_bytes);
        if (!isfinite(dv->speed) || !(dv->speed > 0))
            return pt_error_set(err, PT_EINVAL, "topology: devices[%d].speed: %g is not positive",
                                d, dv->speed);
        if (d > 0 && dv->node < topo->devices[d - 1].node)
            return pt_error_set(err, PT_EINVAL,
                                "topology: devices[%d].node: devices must be numbered node by node",
                                d);
    }
    int rc = check_link("intra", topo->intra, err);
    if (rc < 0)
        return rc;
    if ((rc = check_link("inter", topo->inter, err)) < 0)
        return rc;
    if (global_batch < 1)
        return pt_error_set(err, PT_EINVAL, "planner: global batch: %d is not positive",
                            global_batch);
    if (!opts)
        return 0;
    if (opts->memory_limit_bytes < 0)
        return pt_error_set(err, PT_EINVAL, "planner: memory limit: %lld is negative",
                            (long long)opts->memory_limit_bytes);
    if (opts->stages < 0)
        return pt_error_set(err, PT_EINVAL, "planner: stages: %d is negative", opts->stages);
    if (opts->stages > profile->layer_count)
        return pt_error_set(err, PT_EINVAL,
                            "planner: stages: %d stages but the profile has %d layers",
                            opts->stages, profile->layer_count);
    if (opts->stages > topo->device_count)
        return pt_error_set(err, PT_EINVAL,
                            "planner: stages: %d stages but the topology has %d devices",
                            opts->stages, topo->device_count);
    if (opts->microbatch_size_count < 0 || opts->microbatch_size_count > PT_PLANNER_MB_CHOICES_MAX)
        return pt_error_set(err, PT_EINVAL, "planner: micro-batch sizes: %d given, at most %d",
                            opts->microbatch_size_count, PT_PLANNER_MB_CHOICES_MAX);
    for (int i = 0; i < opts->microbatch_size_count; i++) {
        int b = opts->microbatch_sizes[i];
        if (b < 1 || global_batch % b)
            return pt_error_set(err, PT_EINVAL,
                                "planner: micro-batch size %d: must be positive and divide the "
                                "global batch %d",
                                b, global_batch);
    }
    if (opts->optim != PT_OPTIM_SGD && opts->optim != PT_OPTIM_ADAM)
        return pt_error_set(err, PT_EINVAL, "planner: optimizer: unknown kind %d",
                            (int)opts->optim);
    return 0;
}

int pt_planner_run(const char *name, const pt_profile *profile, const pt_topology *topo,
                   int global_batch, const pt_planner_opts *opts, pt_plan **out,
                   pt_planner_report *report, pt_error *err)
{
    if (out)
        *out = NULL;
    if (!out)
        return pt_error_set(err, PT_EINVAL, "planner: no place for the plan");
    const pt_planner_info *info = pt_planner_find(name);
    if (!info) {
        char names[256] = "";
        for (int i = 0; i < PLANNER_COUNT; i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, planners[i].name, sizeof names - strlen(names) - 1);
        }
        return pt_error_set(err, PT_ENOTFOUND, "planner: '%s' is not a planner (known: %s)",
                            name ? name : "(null)", names);
    }
    pt_planner_opts def;
    if (!opts) {
        pt_planner_opts_default(&def);
        opts = &def;
    }
    int rc = pt_planner_check_input(profile, topo, global_batch, opts, err);
    if (rc < 0)
        return rc;
    if (opts->objective != PT_OBJECTIVE_DEFAULT && opts->objective != info->paper) {
        const char *on = pt_planner_objective_name(opts->objective);
        if (info->paper != PT_OBJECTIVE_DEFAULT)
            return pt_error_set(err, PT_EINVAL,
                                "planner: %s: objective '%s' is not its own (default or %s)",
                                info->name, on ? on : "?", pt_planner_objective_name(info->paper));
        return pt_error_set(err, PT_EINVAL,
                            "planner: %s: objective '%s' is not its own (it has only the default)",
                            info->name, on ? on : "?");
    }
    pt_topology *limited = NULL;
    if (opts->memory_limit_bytes > 0) {
        limited = pu_topology_with_memory(topo, opts->memory_limit_bytes);
        if (!limited)
            return pt_error_set(err, PT_ENOMEM, "planner: out of memory");
        topo = limited;
    }
    pt_planner_report local;
    if (!report)
        report = &local;
    rc = info->run(profile, topo, global_batch, opts, out, report, err);
    if (rc == PT_ENOFIT && info->fallback && opts->objective == PT_OBJECTIVE_DEFAULT &&
        !opts->no_fallback)
        rc = info->fallback(profile, topo, global_batch, opts, out, report, err);
    if (info->dp_floor && !opts->no_dp_floor && opts->objective == PT_OBJECTIVE_DEFAULT &&
        (rc == 0 || rc == PT_ENOFIT))
        rc = pc_dp_floor(profile, topo, global_batch, opts, rc, out, report, err);
    pt_topology_free(&limited);
    return rc;
}

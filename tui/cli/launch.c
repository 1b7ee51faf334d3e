/* The console from the command line (see launch.h). */
#include "tui/cli/launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "planner/analytic.h"
#include "protocol/datadir.h"
#include "protocol/device.h"
#include "protocol/precision.h"
#include "tui/cli/inputs.h"
#include "tui/cli/torch_bridge.h"
#include "tui/console/console.h"
#include "tui/record/live.h"
#include "tui/record/source.h"

#define PATH_CAP 4096

int pt_console_check_view(const char *cmd, const char *name)
{
    if (pt_console_has_view(name))
        return 0;
    fprintf(stderr, "pipetop %s: --view: unknown view \"%s\"\n", cmd, name);
    return -1;
}

int pt_console_launch_cmd(const char *cmd, pt_console_launch_opts *lo)
{
    if (pt_console_check_view(cmd, lo->view) < 0)
        return 2;
    pt_error err = {0};
    int rc = pt_console_launch(lo, &err);
    if (rc < 0) {
        fprintf(stderr, "pipetop %s: %s\n", cmd, err.msg[0] ? err.msg : pt_strerror(rc));
        return 1;
    }
    return 0;
}

/* An analytic profile of spec at micro-batch mb on o->device in
 * o->precision (NULL: tui/cli/inputs.h's device, fp32). */
static int analytic_on(const pt_console_launch_opts *o, const pt_model_spec *spec, int mb,
                       pt_profile **out, pt_error *err)
{
    if (!o->device && !o->precision)
        return pt_inputs_analytic_profile(spec, mb, out, err);
    pt_analytic_options ao = {0};
    if (o->precision && (ao.precision = pt_precision_parse(o->precision)) < 0)
        return pt_error_set(err, PT_EINVAL, "--precision %s: not one of %s", o->precision,
                            pt_precision_names());
    pt_device_desc dev;
    int rc = pt_device_find(o->device ? o->device : PT_INPUTS_DEVICE, &dev, err);
    if (rc < 0)
        return pt_error_prefix(err, "--device");
    return pt_analytic_profile(spec, &dev, mb, &ao, out, err);
}

/* The console's profile when none is given: analytic, at the plan's
 * micro-batch (before there is a plan, at the unit the planner plans with). */
static int analytic(void *user, pt_inputs *in, pt_error *err)
{
    const pt_console_launch_opts *o = user;
    int mb = in->plan ? in->plan->microbatch_size : o->unit_mb;
    if (in->profile && in->profile->microbatch == mb)
        return 0;
    pt_profile_free(&in->profile);
    return analytic_on(o, in->spec, mb, &in->profile, err);
}

static int plan(void *user, pt_inputs *in, pt_error *err)
{
    const pt_console_launch_opts *o = user;
    return pt_inputs_plan_with(o->planner, in->profile, in->topo, o->global, &in->plan, err);
}

/* Saves the inputs beside the live run's record, so pipetop replay predicts
 * with what the run used. Best effort: the run goes on without them. */
static void save_beside_record(const pt_source *src, const pt_profile *prof,
                               const pt_topology *topo)
{
    char path[PATH_CAP + 32];
    snprintf(path, sizeof path, "%.4000s/profile.json", pt_source_live_run_dir(src));
    pt_profile_save(prof, path, NULL);
    snprintf(path, sizeof path, "%.4000s/topology.json", pt_source_live_run_dir(src));
    pt_topology_save(topo, path, NULL);
}

/* An observed PyTorch run's inputs: the plan it runs and the profile that
 * names its layers, a stand-in model of those names (torch_bridge.h), the
 * topology given or a local one of the plan's devices. */
static int observe_inputs(const pt_console_launch_opts *o, pt_inputs *in, pt_error *err)
{
    memset(in, 0, sizeof *in);
    if (!o->plan || !o->profile)
        return pt_error_set(err, PT_EINVAL,
                            "--observe needs --plan (the plan the run runs: pipetop export-plan's) "
                            "and --profile (its profile: pipetop profile --torch's)");
    char path[PT_DATADIR_PATH_MAX];
    int rc = pt_plan_load(o->plan, &in->plan, err);
    if (rc == 0)
        rc = pt_profile_load(pt_datadir_resolve("profiles", o->profile, ".json", path, sizeof path),
                             &in->profile, err);
    if (rc == 0 && o->local_devices <= 0 && o->topology)
        rc = pt_topology_load(
            pt_datadir_resolve("topologies", o->topology, ".json", path, sizeof path), &in->topo,
            err);
    else if (rc == 0 && !(in->topo = pt_inputs_local_topology(pt_inputs_plan_devices(in->plan))))
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = pt_torch_standin_model(in->profile, &in->spec, err);
    if (rc == 0)
        rc = pt_profile_check(in->profile, in->spec, o->profile, err);
    return rc == 0 ? pt_plan_check(in->plan, in->spec, in->topo, o->plan, err) : rc;
}

/* --observe DIR, made mode 0700 when missing; an existing one must be this
 * user's folder of mode 0700 (its sockets are the run's way in). The
 * absolute path into out. */
static int observe_dir(const char *dir, char *out, size_t cap, pt_error *err)
{
    struct stat st;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return pt_error_set(err, PT_EIO, "--observe %s: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
        (st.st_mode & 0777) != 0700)
        return pt_error_set(err, PT_EINVAL,
                            "--observe %s: not a folder of yours with mode 0700 (no one else may "
                            "reach the sockets in it)",
                            dir);
    char *abs = realpath(dir, NULL);
    if (!abs || strlen(abs) >= cap) {
        free(abs);
        return pt_error_set(err, PT_EINVAL, "--observe %s: path too long", dir);
    }
    snprintf(out, cap, "%s", abs);
    free(abs);
    return 0;
}

/* --straggler "K:PCT:STEP" for n simulated agents, checked here so that a
 * bad one is refused before the console opens (the agents' process checks
 * the same, agent/sim_main.c, but its refusal would end the run). */
static int check_straggler(const char *spec, int n, pt_error *err)
{
    int k = -1;
    double pct = 0;
    long long step = -1;
    char tail = 0;
    if (sscanf(spec, "%d:%lf:%lld%c", &k, &pct, &step, &tail) != 3 || k < 0 || k >= n ||
        !(pct > 0 && pct <= 10000) || step < 0)
        return pt_error_set(err, PT_EINVAL,
                            "--straggler \"%s\": K:PCT:STEP with K a device of the plan (0 <= K "
                            "< %d), 0 < PCT <= 10000, STEP >= 0",
                            spec, n);
    return 0;
}

/* --fail "K:STEP" for n simulated agents, checked here as --straggler is. */
static int check_fail(const char *spec, int n, pt_error *err)
{
    int k = -1;
    long long step = -1;
    char tail = 0;
    if (sscanf(spec, "%d:%lld%c", &k, &step, &tail) != 2 || k < 0 || k >= n || step < 0)
        return pt_error_set(err, PT_EINVAL,
                            "--fail \"%s\": K:STEP with K a device of the plan (0 <= K < %d), "
                            "STEP >= 0",
                            spec, n);
    return 0;
}

/* The live source: agents spawned here or awaited. */
static int live_source(const pt_console_launch_opts *o, pt_inputs *in, pt_source **src,
                       pt_error *err)
{
    if (o->spawn && !o->simulate) {
        /* the agents it spawns run on this machine: the topology's devices
         * share its cores (the simulator's shared-core stretch, docs/formats.md);
         * simulated agents compute nothing and keep the topology's own devices */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        for (int d = 0; d < in->topo->device_count && cpus > 0; d++)
            if (in->topo->devices[d].node_cores <= 0)
                in->topo->devices[d].node_cores = (int)cpus;
    }
    pt_live_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.plan = in->plan;
    lo.model = in->spec;
    lo.data = o->data;
    lo.listen = o->listen;
    lo.spawn = o->spawn;
    lo.run_dir = o->run_dir;
    lo.steps = o->steps;
    lo.cal_steps = o->calibrate_after > 0 ? o->calibrate_after : -1;
    lo.profile = in->profile;
    lo.topology = in->topo;
    lo.expect_agents = o->agents > 0 ? o->agents : pt_plan_agent_count(in->plan);
    /* simulated agent k registers device k: one for each device up to the
     * plan's last (a planner may leave devices between them unused; their
     * agents stay registered and idle) */
    if (o->simulate && o->agents <= 0)
        lo.expect_agents = pt_inputs_plan_devices(in->plan);
    if (o->spawn && lo.expect_agents > in->topo->device_count)
        lo.expect_agents = in->topo->device_count;
    char dir[PATH_CAP];
    int rc = o->observe ? observe_dir(o->observe, dir, sizeof dir, err) : 0;
    if (rc == 0 && o->simulate && o->sim_straggler)
        rc = check_straggler(o->sim_straggler, lo.expect_agents, err);
    if (rc == 0 && o->simulate && o->sim_fail)
        rc = check_fail(o->sim_fail, lo.expect_agents, err);
    lo.observe_dir = o->observe ? dir : NULL;
    lo.simulate = o->simulate;
    lo.sim_straggler = o->sim_straggler;
    lo.sim_fail = o->sim_fail;
    if (rc == 0)
        rc = pt_source_live_new(&lo, src, err);
    if (rc == 0)
        save_beside_record(*src, in->profile, in->topo);
    return rc;
}

int pt_console_launch(const pt_console_launch_opts *o, pt_error *err)
{
    pt_inputs in;
    pt_source *src = NULL;
    pt_inputs_opts io = {.model = o->model,
                         .plan = o->plan,
                         .topology = o->local_devices > 0 ? NULL : o->topology,
                         .local_devices = o->local_devices,
                         .profile = o->profile,
                         .make_profile = analytic,
                         .make_plan = plan,
                         .user = (void *)o};
    int rc = o->observe ? observe_inputs(o, &in, err) : pt_inputs_resolve(&io, &in, err);
    if (rc == 0 && o->agents > 0 && pt_plan_agent_count(in.plan) > o->agents)
        rc = pt_error_set(err, PT_EINVAL, "the plan uses %d devices but --agents is %d",
                          pt_plan_agent_count(in.plan), o->agents);
    if (rc == 0 && o->live)
        rc = live_source(o, &in, &src, err);
    else if (rc == 0 && (rc = pt_source_sim_new(&src)) < 0)
        pt_error_set(err, rc, "out of memory");
    if (rc == 0) {
        pt_console_opts co = {.plan = in.plan,
                              .profile = in.profile,
                              .topology = in.topo,
                              .model_name = in.spec->name,
                              .source = src,
                              .start_view = o->view,
                              .theme = o->theme,
                              .no_mouse = o->no_mouse,
                              .exit_after_s = o->exit_after,
                              .readonly = o->readonly || o->observe,
                              .readonly_why = o->observe ? PT_LIVE_OBSERVED_WHY : NULL,
                              .run_dir = src ? pt_source_live_run_dir(src) : NULL};
        src = NULL; /* the console owns it now */
        rc = pt_console_run(&co, err);
    }
    pt_source_close(&src);
    pt_inputs_release(&in);
    return rc < 0 ? rc : 0;
}

/* The console's commands:
 *   pipetop [console] [options]   the console on a plan (simulation only), or
 *                                 waiting for agents (--agents N / --listen)
 *   pipetop replay RUN            the console on a recorded run
 *   pipetop demo                  plans, spawns 4 local agents, trains, shows it
 *   pipetop status [--json] [RUN] one snapshot of a run, for scripts */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "planner/analytic.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "protocol/datadir.h"
#include "protocol/device.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "tui/cli/cmd_console.h"
#include "protocol/opts.h"
#include "tui/cli/cli_error.h"
#include "tui/cli/commands.h"
#include "tui/console/console.h"
#include "tui/record/live.h"
#include "tui/record/replay.h"
#include "tui/record/source.h"

#define PATH_CAP           4096
#define DEFAULT_MODEL      "fmnist-mlp-deep"
#define DEFAULT_TOPOLOGY   "local-cpu-4"
#define DEFAULT_DEVICE     "cpu-local"
#define DEFAULT_PLANNER    "dapple"
#define DEFAULT_GLOBAL     64
#define DEFAULT_MB         16
#define GLOBAL_MAX         (1 << 20)
#define RUNS_DIR           "runs"
#define STATUS_LIVE_S      10    /* a record written to this recently belongs to a running run */
#define LOCAL_LINK_BPS     2e9   /* as pipetop run charges loopback ZeroMQ */
#define LOCAL_LINK_LATENCY 50e-6 /* seconds */
#define SPEED_MIN          0.01
#define SPEED_MAX          1000.0

int pt_console_parse_view(const char *name, const char **out)
{
    if (!pt_console_has_view(name))
        return -1;
    *out = name;
    return 0;
}

int pt_console_analytic_profile(const pt_model_spec *spec, int mb, pt_profile **out, pt_error *err)
{
    pt_device_desc dev;
    int rc = pt_device_find(DEFAULT_DEVICE, &dev, err);
    if (rc < 0)
        return rc;
    return pt_analytic_profile(spec, &dev, mb, NULL, out, err);
}

pt_topology *pt_console_local_topology(int devices)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t mem = pages > 0 && page > 0 ? (int64_t)pages * page / devices : (1LL << 30);
    pt_link link = {LOCAL_LINK_BPS, LOCAL_LINK_LATENCY};
    pt_topology *t = pt_topology_uniform(1, devices, mem, link, link);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (t) {
        snprintf(t->name, sizeof t->name, "local");
        /* the agents share this machine's cores (docs/formats.md, "Shared cores") */
        for (int d = 0; d < devices; d++)
            t->devices[d].node_cores = cpus > 0 ? (int)cpus : 0;
    }
    return t;
}

int pt_console_plan_with(const char *planner, const pt_profile *prof, const pt_topology *topo,
                         int global, pt_plan **out, pt_error *err)
{
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    for (int mb = PT_CONSOLE_MB_MIN;
         mb <= global && o.microbatch_size_count < PT_PLANNER_MB_CHOICES_MAX; mb++)
        if (global % mb == 0)
            o.microbatch_sizes[o.microbatch_size_count++] = mb;
    pt_planner_report rep;
    int rc = pt_planner_run(planner, prof, topo, global, &o, out, &rep, err);
    if (rc == 0)
        snprintf((*out)->model, sizeof(*out)->model, "%s", prof->model);
    return rc;
}

static const char console_usage[] =
    "usage: pipetop [console] [--model M] [--topology T] [--profile P] [--plan P]\n"
    "               [--planner NAME] [--global-batch N] [--agents N | --listen EP]\n"
    "               [--theme NAME] [--view plan|timeline|stats|agents] [--no-mouse]\n"
    "The console: edit a plan and watch the simulator's prediction update as you\n"
    "edit (plan view), see its timeline, and with --agents/--listen watch agents\n"
    "started elsewhere (pipetop-agent --console EP). Defaults: model " DEFAULT_MODEL ",\n"
    "topology " DEFAULT_TOPOLOGY ", an analytic profile on " DEFAULT_DEVICE
    ", planned with " DEFAULT_PLANNER "\n"
    "at a global batch of " PT_OPTS_STR(DEFAULT_GLOBAL) ". Press ? in the console for every key.\n";

int pt_cmd_console(int argc, char **argv)
{
    const char *model = DEFAULT_MODEL, *topology = DEFAULT_TOPOLOGY, *profile = NULL,
               *plan_path = NULL, *planner = DEFAULT_PLANNER, *theme = NULL, *view = "plan",
               *listen = NULL, *data = "fashion-mnist";
    int global = DEFAULT_GLOBAL, no_mouse = 0, agents = 0, readonly = 0;
    double exit_after = 0;
    pt_opt opts[] = {
        {"model", PT_OPT_STRING, &model, 0, 0, 0, "M",
         "model spec: a path or a name in models/ (default " DEFAULT_MODEL ")"},
        {"topology", PT_OPT_STRING, &topology, 0, 0, 0, "T",
         "topology JSON, or a name in topologies/ (default " DEFAULT_TOPOLOGY ")"},
        {"profile", PT_OPT_STRING, &profile, 0, 0, 0, "P",
         "profile JSON (default: analytic, on " DEFAULT_DEVICE ")"},
        {"plan", PT_OPT_STRING, &plan_path, 0, 0, 0, "P",
         "start from this plan JSON instead of planning"},
        {"planner", PT_OPT_STRING, &planner, 0, 0, 0, "NAME",
         "planner for the first plan (default " DEFAULT_PLANNER ")"},
        {"global-batch", PT_OPT_INT, &global, 1, GLOBAL_MAX, 0, "N",
         "global batch size to plan for (default " PT_OPTS_STR(DEFAULT_GLOBAL) ")"},
        {"theme", PT_OPT_STRING, &theme, 0, 0, 0, "NAME",
         "colour theme (a file or a name in themes/)"},
        {"view", PT_OPT_STRING, &view, 0, 0, 0, "V",
         "view to start in: plan (default), timeline, stats or agents"},
        {"no-mouse", PT_OPT_FLAG, &no_mouse, 0, 0, 0, NULL, "ignore the mouse"},
        {"agents", PT_OPT_INT, &agents, 1, 4096, 0, "N",
         "wait for N agents to register, then run the plan on them"},
        {"listen", PT_OPT_STRING, &listen, 0, 0, 0, "EP",
         "control endpoint to bind (default tcp://127.0.0.1:*)"},
        {"data", PT_OPT_STRING, &data, 0, 0, 0, "D",
         "with --agents: data set (default fashion-mnist)"},
        {"exit-after", PT_OPT_DOUBLE, &exit_after, 0, 86400, 0, "X",
         "quit after X seconds (scripted runs; 0: never)"},
        {"readonly", PT_OPT_FLAG, &readonly, 0, 0, 0, NULL,
         "monitoring only: no plan edits, no apply & restart (q still quits)"},
    };
    int rc = pt_opts_command("console", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             console_usage, NULL);
    if (rc >= 0)
        return rc;
    pt_console_launch_opts lo = {0};
    lo.model = model;
    lo.topology = topology;
    lo.local_devices =
        agents > 0 && !pt_opts_find(opts, (int)(sizeof opts / sizeof opts[0]), "topology")->seen
            ? agents
            : 0;
    lo.profile = profile;
    lo.plan = plan_path;
    lo.planner = planner;
    lo.global = global;
    lo.unit_mb = DEFAULT_MB;
    lo.live = agents > 0 || listen;
    lo.agents = agents;
    lo.listen = listen;
    lo.data = data;
    lo.theme = theme;
    lo.no_mouse = no_mouse;
    lo.exit_after = exit_after;
    lo.readonly = readonly;
    return pt_console_launch_cmd("console", view, &lo);
}

int pt_console_launch_cmd(const char *cmd, const char *view, pt_console_launch_opts *lo)
{
    if (pt_console_parse_view(view, &lo->view) < 0) {
        fprintf(stderr, "pipetop %s: --view: unknown view \"%s\"\n", cmd, view);
        return 2;
    }
    pt_error err = {0};
    int rc = pt_console_launch(lo, &err);
    if (rc < 0) {
        fprintf(stderr, "pipetop %s: %s\n", cmd, err.msg[0] ? err.msg : pt_strerror(rc));
        return 1;
    }
    return 0;
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

int pt_console_launch(const pt_console_launch_opts *o, pt_error *err)
{
    pt_model_spec *spec = NULL;
    pt_topology *topo = NULL;
    pt_profile *prof = NULL;
    pt_plan *plan = NULL;
    pt_source *src = NULL;
    char path[PATH_CAP];
    int rc;
    if ((rc = pt_model_spec_find(o->model, &spec, err)) < 0)
        goto out;
    if (o->local_devices > 0) {
        /* agents started elsewhere on this machine: one local device each */
        if (!(topo = pt_console_local_topology(o->local_devices))) {
            rc = pt_error_set(err, PT_ENOMEM, "out of memory");
            goto out;
        }
    } else if ((rc = pt_datadir_find("topologies", o->topology, ".json", path, sizeof path, err)) <
                   0 ||
               (rc = pt_topology_load(path, &topo, err)) < 0)
        goto out;
    if (o->plan && (rc = pt_plan_load(o->plan, &plan, err)) < 0)
        goto out;
    if (o->profile)
        rc = pt_profile_load(o->profile, &prof, err);
    else
        rc = pt_console_analytic_profile(spec, plan ? plan->microbatch_size : o->unit_mb, &prof,
                                         err);
    if (rc < 0 || (rc = pt_profile_check(prof, spec, "profile", err)) < 0)
        goto out;
    if (!plan && (rc = pt_console_plan_with(o->planner, prof, topo, o->global, &plan, err)) < 0)
        goto out;
    /* a derived profile is only a unit: re-derive it at the plan's micro-batch,
     * so the bars shown are for the micro-batches that run */
    if (!o->profile && plan->microbatch_size != prof->microbatch) {
        pt_profile_free(&prof);
        if ((rc = pt_console_analytic_profile(spec, plan->microbatch_size, &prof, err)) < 0)
            goto out;
    }
    if ((rc = pt_plan_check(plan, spec, topo, o->plan ? o->plan : "plan", err)) < 0)
        goto out;
    if (o->agents > 0 && pt_plan_agent_count(plan) > o->agents) {
        rc = pt_error_set(err, PT_EINVAL, "the plan uses %d devices but --agents is %d",
                          pt_plan_agent_count(plan), o->agents);
        goto out;
    }
    if (o->live && o->spawn) {
        /* the agents it spawns run on this machine: the topology's devices
         * share its cores (the simulator's shared-core stretch, docs/formats.md) */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        for (int d = 0; d < topo->device_count && cpus > 0; d++)
            if (topo->devices[d].node_cores <= 0)
                topo->devices[d].node_cores = (int)cpus;
    }
    if (o->live) {
        pt_live_opts lo;
        memset(&lo, 0, sizeof lo);
        lo.plan = plan;
        lo.model = spec;
        lo.data = o->data;
        lo.listen = o->listen;
        lo.spawn = o->spawn;
        lo.run_dir = o->run_dir;
        lo.steps = o->steps;
        lo.profile = prof;
        lo.topology = topo;
        lo.expect_agents = o->agents > 0 ? o->agents : pt_plan_agent_count(plan);
        if (o->spawn && lo.expect_agents > topo->device_count)
            lo.expect_agents = topo->device_count;
        if ((rc = pt_source_live_new(&lo, &src, err)) < 0)
            goto out;
        save_beside_record(src, prof, topo);
    } else if ((rc = pt_source_sim_new(&src)) < 0) {
        pt_error_set(err, rc, "out of memory");
        goto out;
    }
    pt_console_opts co = {plan,     prof, topo,        spec->name,    src,        o->view,
                          o->theme, NULL, o->no_mouse, o->exit_after, o->readonly};
    src = NULL; /* the console owns it now */
    rc = pt_console_run(&co, err);
out:
    pt_source_close(&src);
    pt_plan_free(&plan);
    pt_profile_free(&prof);
    pt_topology_free(&topo);
    pt_model_spec_free(&spec);
    return rc < 0 ? rc : 0;
}

/* ---- replay ------------------------------------------------------------------------------- */

/* RUN: a run.ndjson or a folder holding one; dir receives its folder. */
static void run_paths(const char *run, char *record, char *dir, size_t cap)
{
    struct stat st;
    if (stat(run, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(record, cap, "%s/run.ndjson", run);
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

int pt_console_record_inputs(pt_record *rec, const char *dir, int64_t gen, pt_plan **plan,
                             pt_model_spec **spec, pt_profile **prof, pt_topology **topo,
                             pt_error *err)
{
    pt_store *tmp = NULL;
    if (pt_store_new(16, &tmp) < 0)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int64_t i = 0;
    for (; i < pt_record_count(rec) &&
           !(pt_store_plan(tmp) && (gen < 0 || pt_store_generation(tmp) >= gen));
         i++)
        if (!strcmp(pt_record_kind(rec, i), "plan"))
            pt_record_apply(rec, i, tmp);
    int rc = 0;
    if (!pt_store_plan(tmp)) {
        pt_store_free(&tmp);
        return 0; /* a record without a plan: the console shows data only */
    }
    *plan = pt_plan_clone(pt_store_plan(tmp));
    pt_store_free(&tmp);
    const char *mj = pt_record_model_json(rec, i);
    if (!*plan || !mj)
        return *plan ? 0 : pt_error_set(err, PT_ENOMEM, "out of memory");
    if ((rc = pt_model_spec_parse(mj, "record model", spec, err)) < 0)
        return rc;
    char path[PATH_CAP + 16];
    snprintf(path, sizeof path, "%s/profile.json", dir);
    struct stat st;
    if (stat(path, &st) == 0)
        rc = pt_profile_load(path, prof, err);
    else
        rc = pt_console_analytic_profile(*spec, (*plan)->microbatch_size, prof, err);
    if (rc < 0)
        return rc;
    if (pt_profile_check(*prof, *spec, "profile", NULL) < 0 ||
        (*prof)->layer_count != (*plan)->layer_count) {
        pt_profile_free(prof);
        if ((rc = pt_console_analytic_profile(*spec, (*plan)->microbatch_size, prof, err)) < 0)
            return rc;
    }
    snprintf(path, sizeof path, "%s/topology.json", dir);
    if (stat(path, &st) == 0 && pt_topology_load(path, topo, NULL) == 0 &&
        pt_plan_check(*plan, NULL, *topo, "plan", NULL) == 0)
        return 0;
    pt_topology_free(topo);
    int devices = 0;
    for (int s = 0; s < (*plan)->stage_count; s++)
        for (int r = 0; r < (*plan)->stages[s].replica_count; r++)
            if ((*plan)->stages[s].replicas[r] + 1 > devices)
                devices = (*plan)->stages[s].replicas[r] + 1;
    *topo = pt_console_local_topology(devices > 0 ? devices : 1);
    return *topo ? 0 : pt_error_set(err, PT_ENOMEM, "out of memory");
}

int pt_cmd_replay(int argc, char **argv)
{
    static const char usage[] =
        "usage: pipetop replay RUN [--speed X] [--paused] [--end] [--theme NAME]\n"
        "                          [--view plan|timeline|stats|agents] [--no-mouse]\n"
        "Plays a recorded run (RUN: a run.ndjson, or a run folder holding one) in the\n"
        "console at X times real speed (default 1): the measured timeline, the loss and\n"
        "throughput graphs, the agents; next to the simulator's prediction of its plan.\n"
        "Keys: space pause, n next step, > < faster / slower, e jump to the end.\n";
    const char *run = NULL;
    double speed = 1.0, exit_after = 0;
    int paused = 0, to_end = 0, no_mouse = 0;
    const char *theme = NULL, *view = "timeline";
    pt_opt opts[] = {
        {"RUN", PT_OPT_ARG, &run, 1, 1, 0, NULL, "a run.ndjson, or a run folder holding one"},
        {"speed", PT_OPT_DOUBLE, &speed, SPEED_MIN, SPEED_MAX, 0, "X",
         "play at X times real speed (default 1)"},
        {"paused", PT_OPT_FLAG, &paused, 0, 0, 0, NULL, "start paused (n steps)"},
        {"end", PT_OPT_FLAG, &to_end, 0, 0, 0, NULL, "show the whole record at once"},
        {"theme", PT_OPT_STRING, &theme, 0, 0, 0, "NAME",
         "colour theme (a file or a name in themes/)"},
        {"view", PT_OPT_STRING, &view, 0, 0, 0, "V",
         "view to start in: plan, timeline (default), stats or agents"},
        {"no-mouse", PT_OPT_FLAG, &no_mouse, 0, 0, 0, NULL, "ignore the mouse"},
        {"exit-after", PT_OPT_DOUBLE, &exit_after, 0, 86400, 0, "X",
         "quit after X seconds (scripted runs; 0: never)"},
    };
    int rc = pt_opts_command("replay", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), usage,
                             NULL);
    if (rc >= 0)
        return rc;
    const char *start;
    if (pt_console_parse_view(view, &start) < 0) {
        fprintf(stderr, "pipetop replay: --view: unknown view \"%s\"\n", view);
        return 2;
    }
    char record[PATH_CAP], dir[PATH_CAP];
    run_paths(run, record, dir, sizeof record);
    pt_error err = {0};
    pt_record *rec = NULL;
    pt_plan *plan = NULL;
    pt_model_spec *spec = NULL;
    pt_profile *prof = NULL;
    pt_topology *topo = NULL;
    pt_source *src = NULL;
    if ((rc = pt_replay_load(record, &rec, &err)) < 0 ||
        (rc = pt_console_record_inputs(rec, dir, -1, &plan, &spec, &prof, &topo, &err)) < 0) {
        fprintf(stderr, "pipetop replay: %s\n", err.msg);
        pt_record_free(&rec);
        pt_plan_free(&plan);
        pt_model_spec_free(&spec);
        pt_profile_free(&prof);
        pt_topology_free(&topo);
        return 1;
    }
    if (pt_source_replay_new(rec, speed, paused, to_end, &src) < 0) {
        fprintf(stderr, "pipetop replay: out of memory\n");
        pt_record_free(&rec);
        return 1;
    }
    pt_console_opts co = {plan,     prof,       topo,  spec ? spec->name : NULL,
                          src,      start,      theme, NULL,
                          no_mouse, exit_after, 0};
    rc = pt_console_run(&co, &err);
    if (rc < 0)
        fprintf(stderr, "pipetop replay: %s\n", err.msg);
    pt_plan_free(&plan);
    pt_model_spec_free(&spec);
    pt_profile_free(&prof);
    pt_topology_free(&topo);
    return rc < 0 ? 1 : 0;
}

/* ---- status ------------------------------------------------------------------------------- */

/* The newest runs/<name>/run.ndjson (names are timestamps, so the largest). */
static int newest_run(char *out, size_t cap)
{
    DIR *d = opendir(RUNS_DIR);
    if (!d)
        return -1;
    char best[256] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[PATH_CAP];
        struct stat st;
        snprintf(p, sizeof p, "%s/%.255s/run.ndjson", RUNS_DIR, e->d_name);
        if (stat(p, &st) == 0 && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof best, "%.255s", e->d_name);
    }
    closedir(d);
    if (!best[0])
        return -1;
    snprintf(out, cap, "%s/%s/run.ndjson", RUNS_DIR, best);
    return 0;
}

/* The prediction of a run's current plan (its newest generation's, as
 * replay finds it with the profile and topology of its folder): 0 and *iter_ms,
 * *bubble set, or a negative code (no plan in the record, or it does not
 * simulate). */
static int predict_current(pt_record *rec, const char *dir, const pt_plan *current, double *iter_ms,
                           double *bubble)
{
    pt_plan *first = NULL;
    pt_model_spec *spec = NULL;
    pt_profile *prof = NULL;
    pt_topology *topo = NULL;
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    int rc = pt_console_record_inputs(rec, dir, INT64_MAX, &first, &spec, &prof, &topo, NULL);
    if (rc == 0 && (!current || !first || !prof || !topo))
        rc = PT_ENOTFOUND;
    if (rc == 0 && prof->layer_count != first->layer_count)
        rc = PT_EINVAL;
    if (rc == 0 && (rc = pt_cost_new(prof, topo, &cost, NULL)) == 0 && (rc = pt_sim_new(&sim)) == 0)
        rc = pt_sim_plan(sim, first, cost, NULL, &prog, &res, NULL);
    if (rc == 0) {
        *iter_ms = res.iter_s * 1e3;
        *bubble = res.bubble_frac;
    }
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
    pt_model_spec_free(&spec);
    pt_plan_free(&first);
    return rc;
}

/* Where a recorded run stands: "failed" (a failed entry), "finished" (a
 * summary), "running" (the record grew in the last STATUS_LIVE_S seconds),
 * else "stopped" (it ended without a summary: a console quit, a crash). */
static const char *run_state(const pt_record *rec, const char *record)
{
    int failed = 0, summary = 0;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const char *k = pt_record_kind(rec, i);
        failed |= !strcmp(k, "failed");
        summary |= !strcmp(k, "summary");
    }
    if (failed)
        return "failed";
    if (summary)
        return "finished";
    struct stat st;
    if (stat(record, &st) == 0 && time(NULL) - st.st_mtime <= STATUS_LIVE_S)
        return "running";
    return "stopped";
}

static void add_number_or_null(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

int pt_cmd_status(int argc, char **argv)
{
    static const char usage[] =
        "usage: pipetop status [--json] [RUN]\n"
        "One snapshot of a run from its record (RUN: a run.ndjson or a run folder;\n"
        "default: the newest under runs/): plan, step, loss, throughput, agents.\n";
    int json = 0;
    const char *run = NULL;
    pt_opt opts[] = {
        {"RUN", PT_OPT_ARG, &run, 0, 1, 0, NULL,
         "a run.ndjson or a run folder (default: the newest)"},
        {"json", PT_OPT_FLAG, &json, 0, 0, 0, NULL, "one JSON object instead of text"},
    };
    int rc = pt_opts_command("status", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), usage,
                             NULL);
    if (rc >= 0)
        return rc;
    char record[PATH_CAP], dir[PATH_CAP];
    if (run) {
        run_paths(run, record, dir, sizeof record);
    } else if (newest_run(record, sizeof record) < 0) {
        pt_cli_error("status", json, PT_ENOTFOUND, "no run under %s/ (give RUN)", RUNS_DIR);
        return 1;
    }
    pt_error err = {0};
    pt_record *rec = NULL;
    pt_store *store = NULL;
    if (pt_replay_load(record, &rec, &err) < 0) {
        pt_cli_error("status", json, err.code ? err.code : PT_EIO, "%s", err.msg);
        return 1;
    }
    if (pt_store_new(0, &store) < 0) {
        pt_record_free(&rec);
        pt_cli_error("status", json, PT_ENOMEM, "out of memory");
        return 1;
    }
    /* op events are counted by the summary; the snapshot needs only the
     * plans, agents and metrics, so the events are not decoded */
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (!(e->kind == PT_RECORD_RECV && e->msg_type == PT_MSG_EVENTS))
            pt_record_apply(rec, i, store);
    }
    pt_record_summary sum;
    pt_record_summarize(rec, &sum);
    int64_t n = pt_store_step_count(store);
    const pt_store_step *last = n ? pt_store_step_at(store, n - 1) : NULL;
    const pt_plan *plan = pt_store_plan(store);
    double pred_ms = NAN, pred_bubble = NAN;
    int have_pred = predict_current(rec, dir, plan, &pred_ms, &pred_bubble) == 0;
    const char *state = run_state(rec, record);
    int running = 0;
    for (int i = 0; i < pt_store_agent_count(store); i++)
        running += !strcmp(pt_store_agent_at(store, i)->state, "running");
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "run", record);
        cJSON_AddStringToObject(o, "state", state);
        cJSON_AddNumberToObject(o, "generation", (double)pt_store_generation(store));
        cJSON_AddNumberToObject(o, "steps", (double)n);
        if (last) {
            cJSON_AddNumberToObject(o, "last_step", (double)last->step);
            add_number_or_null(o, "loss", last->loss);
            cJSON_AddNumberToObject(o, "samples_per_s", last->samples_per_s);
            cJSON_AddNumberToObject(o, "measured_iteration_ms", last->iter_ms);
        }
        if (have_pred) {
            cJSON_AddNumberToObject(o, "predicted_iteration_ms", pred_ms);
            cJSON_AddNumberToObject(o, "predicted_bubble_frac", pred_bubble);
            if (last && pred_ms > 0)
                cJSON_AddNumberToObject(o, "relative_error", last->iter_ms / pred_ms - 1);
        }
        if (plan) {
            cJSON *p = cJSON_AddObjectToObject(o, "plan");
            cJSON_AddStringToObject(p, "model", plan->model);
            cJSON_AddNumberToObject(p, "stages", plan->stage_count);
            cJSON_AddNumberToObject(p, "devices", pt_plan_device_count(plan));
            cJSON_AddStringToObject(p, "schedule", pt_sched_kind_name(plan->schedule));
            cJSON_AddNumberToObject(p, "microbatch_size", plan->microbatch_size);
            cJSON_AddNumberToObject(p, "microbatch_count", plan->microbatch_count);
            cJSON_AddNumberToObject(p, "global_batch",
                                    plan->microbatch_size * plan->microbatch_count);
        }
        cJSON_AddNumberToObject(o, "events", (double)sum.events);
        cJSON_AddNumberToObject(o, "rejected", (double)sum.rejected);
        cJSON_AddNumberToObject(o, "agents_running", running);
        cJSON *arr = cJSON_AddArrayToObject(o, "agents");
        for (int i = 0; i < pt_store_agent_count(store); i++) {
            const pt_store_agent *ag = pt_store_agent_at(store, i);
            cJSON *x = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, x);
            cJSON_AddStringToObject(x, "id", ag->id);
            cJSON_AddStringToObject(x, "host", ag->host);
            cJSON_AddNumberToObject(x, "pid", (double)ag->pid);
            cJSON_AddStringToObject(x, "device", ag->device);
            cJSON_AddNumberToObject(x, "stage", ag->stage);
            cJSON_AddNumberToObject(x, "replica", ag->replica);
            cJSON_AddStringToObject(x, "state", ag->state);
            cJSON_AddNumberToObject(x, "step", (double)ag->step);
            cJSON_AddNumberToObject(x, "dropped", (double)ag->dropped);
            cJSON_AddStringToObject(x, "last_error", ag->last_error);
        }
        char *t = cJSON_PrintUnformatted(o);
        if (t)
            printf("%s\n", t);
        free(t);
        cJSON_Delete(o);
    } else {
        printf("run %s (%s)\n", record, state);
        if (plan)
            printf("plan %s: %d stages on %d devices, %s, %d x %d samples (generation %lld)\n",
                   plan->model, plan->stage_count, pt_plan_device_count(plan),
                   pt_sched_kind_name(plan->schedule), plan->microbatch_count,
                   plan->microbatch_size, (long long)pt_store_generation(store));
        if (last)
            printf("step %lld  loss %.4f  %.1f samples/s  %.3f ms/iteration\n",
                   (long long)last->step, last->loss, last->samples_per_s, last->iter_ms);
        if (have_pred)
            printf("predicted %.3f ms/iteration, bubble %.1f %%\n", pred_ms, pred_bubble * 100);
        for (int i = 0; i < pt_store_agent_count(store); i++) {
            const pt_store_agent *a = pt_store_agent_at(store, i);
            printf("agent %-8s %-10s pid %-7lld s%dr%d %-9s step %lld dropped %llu %s\n", a->id,
                   a->host, (long long)a->pid, a->stage, a->replica, a->state, (long long)a->step,
                   (unsigned long long)a->dropped, a->last_error);
        }
    }
    pt_store_free(&store);
    pt_record_free(&rec);
    return 0;
}

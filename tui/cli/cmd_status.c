/* pipetop status [--json] [RUN]: one snapshot of a run, for scripts. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/fileio.h"
#include "protocol/opts.h"
#include "tui/cli/cli_error.h"
#include "tui/cli/commands.h"
#include "tui/cli/inputs.h"
#include "tui/record/figures.h"
#include "tui/record/replay.h"
#include "tui/record/store.h"

#define PATH_CAP 4096
#define RUNS_DIR "runs"

/* The newest runs/<name>/run.ndjson (names are timestamps, so the largest)
 * and its folder. */
static int newest_run(char *out, char *dir, size_t cap)
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
    snprintf(dir, cap, "%s/%s", RUNS_DIR, best);
    return 0;
}

/* Where a recorded run stands: "failed" (a failed entry, whose reason goes
 * to *why), "finished" (a summary), "running" (a process holds the run
 * folder's lock), else "ended without a closing line" (a console killed, a
 * crash). */
static const char *run_state(const pt_record *rec, const char *record, const char **why)
{
    int failed = 0, summary = 0;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const char *k = pt_record_kind(rec, i);
        if (!strcmp(k, "failed") && !failed)
            *why = pt_record_at(rec, i)->reason;
        failed |= !strcmp(k, "failed");
        summary |= !strcmp(k, "summary");
    }
    if (failed)
        return "failed";
    if (summary)
        return "finished";
    /* a live run holds its folder's lock (pt_run_dir_make) */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", record);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    if (pt_dir_lock_holder(dir, NULL))
        return "running";
    return "ended without a closing line";
}

static void add_number_or_null(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

/* One snapshot of a recorded run. */
typedef struct snapshot {
    char record[PATH_CAP], dir[PATH_CAP];
    pt_record *rec;
    pt_store *store;
    pt_record_summary sum;
    const pt_store_step *last;
    int64_t steps;
    pt_fig_meas meas;
    pt_fig_pred pred;
    int have_pred, running;
    const char *state;
    const char *failure; /* the failed entry's reason, NULL: none */
} snapshot;

/* Reads the record into a store: the plans, agents and metrics (op events
 * are counted by the summary, not decoded). */
static int take(snapshot *s, pt_error *err)
{
    int rc = pt_replay_load(s->record, &s->rec, err);
    if (rc < 0)
        return rc;
    if (pt_store_new(0, &s->store) < 0)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int64_t i = 0; i < pt_record_count(s->rec); i++) {
        const pt_record_entry *e = pt_record_at(s->rec, i);
        if (!(e->kind == PT_RECORD_RECV && e->msg_type == PT_MSG_EVENTS))
            pt_record_apply(s->rec, i, s->store);
    }
    pt_record_summarize(s->rec, &s->sum);
    s->steps = pt_store_step_count(s->store);
    s->last = s->steps ? pt_store_step_at(s->store, s->steps - 1) : NULL;
    pt_inputs_store_figures(s->rec, s->dir, s->store, &s->meas, &s->pred, &s->have_pred);
    s->state = run_state(s->rec, s->record, &s->failure);
    for (int i = 0; i < pt_store_agent_count(s->store); i++)
        s->running += !strcmp(pt_store_agent_at(s->store, i)->state, "running");
    return 0;
}

static void json_plan(cJSON *o, const pt_plan *plan)
{
    cJSON *p = cJSON_AddObjectToObject(o, "plan");
    cJSON_AddStringToObject(p, "model", plan->model);
    cJSON_AddNumberToObject(p, "stages", plan->stage_count);
    cJSON_AddNumberToObject(p, "devices", pt_plan_device_count(plan));
    cJSON_AddStringToObject(p, "schedule", pt_sched_kind_name(plan->schedule));
    cJSON_AddNumberToObject(p, "microbatch_size", plan->microbatch_size);
    cJSON_AddNumberToObject(p, "microbatch_count", plan->microbatch_count);
    cJSON_AddNumberToObject(p, "global_batch", plan->microbatch_size * plan->microbatch_count);
}

static void json_agents(cJSON *o, const pt_store *store)
{
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
}

static void print_json(const snapshot *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", s->record);
    cJSON_AddStringToObject(o, "state", s->state);
    if (s->failure)
        cJSON_AddStringToObject(o, "failure", s->failure);
    cJSON_AddNumberToObject(o, "generation", (double)pt_store_generation(s->store));
    cJSON_AddNumberToObject(o, "steps", (double)s->steps);
    if (s->last) {
        cJSON_AddNumberToObject(o, "last_step", (double)s->last->step);
        add_number_or_null(o, "loss", s->last->loss);
        cJSON_AddNumberToObject(o, "samples_per_s", s->last->samples_per_s);
    }
    pt_fig_json(o, &s->meas, s->have_pred ? &s->pred : NULL);
    if (pt_store_plan(s->store))
        json_plan(o, pt_store_plan(s->store));
    cJSON_AddNumberToObject(o, "events", (double)s->sum.events);
    cJSON_AddNumberToObject(o, "rejected", (double)s->sum.rejected);
    cJSON_AddNumberToObject(o, "agents_running", s->running);
    json_agents(o, s->store);
    char *t = cJSON_PrintUnformatted(o);
    if (t)
        printf("%s\n", t);
    free(t);
    cJSON_Delete(o);
}

static void print_text(const snapshot *s)
{
    const pt_plan *plan = pt_store_plan(s->store);
    printf("run %s (%s)\n", s->record, s->state);
    if (s->failure)
        printf("failure: %s\n", s->failure);
    if (plan)
        printf("plan %s: %d stages on %d devices, %s, %d x %d samples (generation %lld)\n",
               plan->model, plan->stage_count, pt_plan_device_count(plan),
               pt_sched_kind_name(plan->schedule), plan->microbatch_count, plan->microbatch_size,
               (long long)pt_store_generation(s->store));
    if (s->last)
        printf("step %lld  loss %.4f  %.1f samples/s\n", (long long)s->last->step, s->last->loss,
               s->last->samples_per_s);
    if (s->meas.steps > 0)
        printf("measured %.3f ms/iteration (%s)\n", s->meas.iter_ms, s->meas.label);
    if (s->have_pred)
        printf("predicted %.3f ms/iteration (%s), bubble %.1f %%\n", s->pred.iter_ms, s->pred.label,
               s->pred.bubble_frac * 100);
    int simulated = pt_store_simulated_agents(s->store);
    if (simulated)
        printf("simulated: %d of %d agents (pipetop-agent --simulate: the simulator's timings, "
               "nothing trained)\n",
               simulated, pt_store_agent_count(s->store));
    for (int i = 0; i < pt_store_agent_count(s->store); i++) {
        const pt_store_agent *a = pt_store_agent_at(s->store, i);
        printf("agent %-8s %-10s pid %-7lld s%dr%d %-9s step %lld dropped %llu %s\n", a->id,
               a->host, (long long)a->pid, a->stage, a->replica, a->state, (long long)a->step,
               (unsigned long long)a->dropped, a->last_error);
    }
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
    snapshot s = {0};
    if (run) {
        pt_inputs_run_paths(run, s.record, s.dir, sizeof s.record);
    } else if (newest_run(s.record, s.dir, sizeof s.record) < 0) {
        pt_cli_error("status", json, PT_ENOTFOUND, "no run under %s/ (give RUN)", RUNS_DIR);
        return 1;
    }
    pt_error err = {0};
    if ((rc = take(&s, &err)) < 0)
        pt_cli_error("status", json, rc, "%s", err.msg);
    else if (json)
        print_json(&s);
    else
        print_text(&s);
    pt_store_free(&s.store);
    pt_record_free(&s.rec);
    return rc < 0 ? 1 : 0;
}

/* pipetop sim --plan P --profile P --topology T: compiles the plan's
 * schedule program, simulates it on the cost model and prints the predicted
 * iteration time, throughput, bubbles, per-worker busy time and peak memory
 * against each device's limit, and an ASCII timeline of one iteration. With
 * --compare-schedules it prints one row per synchronous kind for the plan's
 * partition instead. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/interleave.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/datadir.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "protocol/opts.h"
#include "tui/cli/cli_error.h"
#include "tui/cli/commands.h"
#include "tui/export/timeline_ascii.h"

#define MS_PER_S 1000.0

#define GIB            (1024.0 * 1024.0 * 1024.0)
#define MAX_WINDOWS    1000
#define COMPARE_CHUNKS 2 /* v of the interleaved rows of --compare-schedules */
#define KINDS_HELP_MAX (PT_SCHED_KIND_MAX * 256) /* bytes of the kinds list in --help */

static const char usage_text[] =
    "usage: pipetop sim --plan PLAN.json --profile PROFILE.json --topology TOPO.json\n"
    "                   [--json] [--events] [--width N] [--microbatches M] [--windows W]\n"
    "                   [--compare-schedules]\n"
    "Simulates one iteration of the plan's schedule on the cost model (compute and\n"
    "communication on separate lanes per worker) and prints the predicted iteration\n"
    "time, throughput, bubble fraction, per-worker busy time, peak memory against the\n"
    "device limit and an ASCII timeline. Asynchronous schedules (marked below) are\n"
    "run for several windows of M micro-batches; their figures are the steady state\n"
    "and the timeline shows one steady window. --compare-schedules keeps the plan's\n"
    "stages, replicas and micro-batches and prints one row per synchronous kind:\n"
    "iteration time, bubble and peak memory of every stage (its largest replica).\n";

/* The schedule table as the tail of --help: every kind, its summary, what it
 * reads. Written into buf (cut short when cap is too small); returns buf. */
static const char *kinds_help(char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap,
                                "\nschedule kinds (the plan's \"schedule\": {\"kind\": ...}):\n");
    for (int k = 0; k < pt_sched_kind_count() && n < cap; k++) {
        const pt_sched_kind_info *in = pt_sched_kind_info_of(k);
        int w = snprintf(buf + n, cap - n, "  %-11s %s%s%s%s\n", in->name, in->summary,
                         in->flags & PT_SCHED_SYNCHRONOUS ? "" : " [asynchronous]",
                         in->flags & PT_SCHED_OPT_POLICY ? " [\"policy\": \"A\"|\"B\"]" : "",
                         in->flags & PT_SCHED_OPT_VSYNC ? " [\"vertical_sync\": true|false]" : "");
        n = w < 0 ? cap : n + (size_t)w;
    }
    return buf;
}

static const char *human(double bytes, char *buf, size_t cap)
{
    if (bytes >= GIB)
        snprintf(buf, cap, "%.2f GiB", bytes / GIB);
    else if (bytes >= 1024.0 * 1024.0)
        snprintf(buf, cap, "%.1f MiB", bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, cap, "%.1f KiB", bytes / 1024.0);
    return buf;
}

static void print_text(const pt_plan *plan, const pt_topology *topo, const pt_program *prog,
                       const pt_sim_result *res, int width)
{
    const pt_sched_info *info = pt_sched_info_of(prog->kind);
    printf("schedule      %s%s%s, %d stages, %d workers, %d micro-batches of %d samples%s\n",
           info->facts.name,
           info->facts.flags & PT_SCHED_OPT_POLICY
               ? (prog->policy == 'B' ? " policy B" : " policy A")
               : "",
           prog->vertical_sync && (info->facts.flags & PT_SCHED_OPT_VSYNC) ? " vertical-sync" : "",
           prog->stage_count, prog->worker_count, prog->mb_per_window, prog->mb_size,
           prog->synchronous ? "" : " per window");
    printf("iteration     %.3f ms%s\n", res->iter_s * 1e3,
           prog->synchronous ? "" : " (steady state)");
    printf("throughput    %.1f samples/s\n", res->throughput);
    printf("bubble        %.1f%%\n", res->bubble_frac * 100);
    printf("memory        %s\n", res->fits ? "fits every device" : "DOES NOT FIT (see below)");
    printf("\nstage replica device         layers      busy  bubble   comm   peak memory / limit"
           "      acts    stash  inflight versions\n");
    for (int w = 0; w < prog->worker_count; w++) {
        const pt_worker *x = &prog->workers[w];
        const pt_sim_worker *sw = &res->workers[w];
        char pk[32], lim[32], acts[32], stash[32], layers[32], dev[96];
        snprintf(layers, sizeof layers, "[%d,%d)", x->first, x->last);
        snprintf(dev, sizeof dev, "%d:%s", x->device, topo->devices[x->device].name);
        printf("%5d %7d %-14.14s %-10s %5.1f%% %5.1f%% %6.2fms %9s / %-9s %9s %8s %8d %8d%s\n",
               x->stage, x->replica, dev, layers, sw->busy_frac * 100, sw->bubble_frac * 100,
               sw->comm_s * 1e3, human((double)sw->peak.total, pk, sizeof pk),
               human((double)sw->limit, lim, sizeof lim),
               human((double)sw->peak.bytes[PT_MEM_ACTS], acts, sizeof acts),
               human((double)sw->peak.bytes[PT_MEM_STASH], stash, sizeof stash), sw->peak_inflight,
               sw->peak_versions, sw->peak.total > sw->limit ? "  OVER" : "");
    }
    pt_timeline_opts o = {width, 0, 0, 1, 1};
    if (!prog->synchronous) {
        o.t0 = res->measure_lo;
        o.t1 = res->measure_lo + res->iter_s;
    }
    pt_tline tl = {0};
    if (pt_tline_from_sim(&tl, prog, res) < 0)
        return;
    size_t need = pt_timeline_ascii(&tl, &o, NULL, 0);
    char *text = malloc(need + 1);
    if (text)
        pt_timeline_ascii(&tl, &o, text, need + 1);
    pt_tline_release(&tl);
    if (!text)
        return;
    printf("\ntimeline (%s)\n%s", prog->synchronous ? "one iteration" : "one steady window", text);
    free(text);
    (void)plan;
}

static int print_json(const pt_program *prog, const pt_topology *topo, const pt_sim_result *res,
                      int events)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return -1;
    cJSON_AddNumberToObject(root, "v", 1);
    cJSON_AddStringToObject(root, "schedule", pt_sched_info_of(prog->kind)->facts.name);
    cJSON_AddBoolToObject(root, "synchronous", prog->synchronous);
    cJSON_AddNumberToObject(root, "stages", prog->stage_count);
    cJSON_AddNumberToObject(root, "microbatches", prog->mb_per_window);
    cJSON_AddNumberToObject(root, "microbatch_size", prog->mb_size);
    cJSON_AddNumberToObject(root, "windows", prog->window_count);
    cJSON_AddNumberToObject(root, "iteration_ms", res->iter_s * MS_PER_S);
    cJSON_AddNumberToObject(root, "makespan_ms", res->makespan_s * MS_PER_S);
    cJSON_AddNumberToObject(root, "samples_per_s", res->throughput);
    cJSON_AddNumberToObject(root, "bubble_frac", res->bubble_frac);
    cJSON_AddBoolToObject(root, "fits", res->fits);
    cJSON *ws = cJSON_AddArrayToObject(root, "workers");
    for (int w = 0; ws && w < prog->worker_count; w++) {
        const pt_worker *x = &prog->workers[w];
        const pt_sim_worker *sw = &res->workers[w];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddItemToArray(ws, o);
        cJSON_AddNumberToObject(o, "stage", x->stage);
        cJSON_AddNumberToObject(o, "replica", x->replica);
        cJSON_AddNumberToObject(o, "device", x->device);
        cJSON_AddStringToObject(o, "device_name", topo->devices[x->device].name);
        cJSON *l = cJSON_AddArrayToObject(o, "layers");
        if (l) {
            cJSON_AddItemToArray(l, cJSON_CreateNumber(x->first));
            cJSON_AddItemToArray(l, cJSON_CreateNumber(x->last));
        }
        cJSON_AddNumberToObject(o, "busy_frac", sw->busy_frac);
        cJSON_AddNumberToObject(o, "bubble_frac", sw->bubble_frac);
        cJSON_AddNumberToObject(o, "comm_ms", sw->comm_s * MS_PER_S);
        cJSON_AddNumberToObject(o, "peak_inflight", sw->peak_inflight);
        cJSON_AddNumberToObject(o, "peak_versions", sw->peak_versions);
        cJSON_AddNumberToObject(o, "memory_limit_bytes", (double)sw->limit);
        cJSON *m = cJSON_AddObjectToObject(o, "peak_memory_bytes");
        for (int k = 0; m && k < PT_MEM_KIND_COUNT; k++)
            cJSON_AddNumberToObject(m, pt_mem_kind_name(k), (double)sw->peak.bytes[k]);
        if (m)
            cJSON_AddNumberToObject(m, "total", (double)sw->peak.total);
    }
    if (events) {
        cJSON *ev = cJSON_AddArrayToObject(root, "events");
        for (int i = 0; ev && i < res->event_count; i++) {
            const pt_op *op = &prog->ops[i];
            cJSON *o = cJSON_CreateObject();
            if (!o)
                break;
            cJSON_AddItemToArray(ev, o);
            cJSON_AddNumberToObject(o, "worker", res->events[i].worker);
            cJSON_AddStringToObject(o, "op", pt_op_name(op->kind));
            cJSON_AddNumberToObject(o, "mb", op->mb);
            cJSON_AddNumberToObject(o, "version", op->version);
            cJSON_AddNumberToObject(o, "start_ms", res->events[i].start * MS_PER_S);
            cJSON_AddNumberToObject(o, "end_ms", res->events[i].end * MS_PER_S);
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        return -1;
    puts(text);
    cJSON_free(text);
    return 0;
}

/* The plan compare_schedules simulates for kind k: the plan itself when it
 * suits k, else its devices with the layers cut afresh (planner/interleave.h):
 * into v = 2 chunks per device for a kind with chunks, into one stage per
 * device for the others when the plan is interleaved. *tmp owns a new plan. */
static int plan_for_kind(pt_plan *plan, const pt_cost *cost, int k, pt_plan **tmp, pt_error *e)
{
    int chunked = pt_sched_kind_has(k, PT_SCHED_OPT_CHUNKS);
    *tmp = NULL;
    if (chunked == (plan->chunks > 1))
        return 0;
    return pt_plan_rechunk(plan, cost, (pt_sched_kind)k, chunked ? COMPARE_CHUNKS : 1, tmp, e);
}

/* Peak memory per pipeline rank (the largest replica): per stage for a plain
 * program, per device (all its chunks, hosts) for an interleaved one. */
static void print_peaks(const pt_program *prog, const pt_sim_result *res)
{
    for (int d = 0; d < prog->rank_count; d++) {
        int64_t peak = 0;
        for (int w = prog->stage_worker[d]; w < prog->stage_worker[d + 1]; w++) {
            int64_t t = prog->host_count > 0 ? res->hosts[prog->worker_host[w]].peak_total
                                             : res->workers[w].peak.total;
            peak = t > peak ? t : peak;
        }
        char hb[32];
        printf(" %s%s", human((double)peak, hb, sizeof hb), d + 1 < prog->rank_count ? "," : "");
    }
}

/* One row per synchronous kind for the plan's partition (interleaved: its
 * devices, v = 2 chunks each). A kind that refuses the plan (its generator's
 * reason) gets a row saying so; the plan's own kind is marked. Returns 0, or
 * PT_E* when a simulation fails for another reason. */
static int compare_schedules(pt_plan *plan, pt_sim *sim, const pt_cost *cost,
                             const pt_sched_opts *so, pt_program *prog, pt_error *err)
{
    pt_sched_kind own = plan->schedule;
    printf("%-16s %12s %8s  %s\n", "schedule", "iteration", "bubble",
           "peak memory per device rank (largest replica; all its chunks)");
    int rc = 0;
    for (int k = 0; k < pt_sched_kind_count() && rc == 0; k++) {
        if (!pt_sched_kind_has(k, PT_SCHED_SYNCHRONOUS) || !pt_sched_info_of((pt_sched_kind)k))
            continue;
        pt_plan *tmp = NULL;
        pt_sim_result res;
        pt_error e = {0};
        char name[PT_SCHED_NAME_MAX + 16];
        int r = plan_for_kind(plan, cost, k, &tmp, &e);
        pt_plan *use = tmp ? tmp : plan;
        use->schedule = (pt_sched_kind)k;
        if (pt_sched_kind_has(k, PT_SCHED_OPT_CHUNKS))
            snprintf(name, sizeof name, "%s v=%d%s", pt_sched_kind_name(k), use->chunks,
                     k == (int)own ? "*" : "");
        else
            snprintf(name, sizeof name, "%s%s", pt_sched_kind_name(k), k == (int)own ? "*" : "");
        if (r == 0)
            r = pt_sim_plan(sim, use, cost, so, prog, &res, &e);
        if (r == PT_EINVAL) {
            printf("%-16s refused: %s\n", name, e.msg);
        } else if (r < 0) {
            *err = e;
            rc = r;
        } else {
            printf("%-16s %9.3f ms %7.1f%% ", name, res.iter_s * 1e3, res.bubble_frac * 100);
            print_peaks(prog, &res);
            printf("%s\n", res.fits ? "" : "  DOES NOT FIT");
        }
        pt_plan_free(&tmp);
    }
    plan->schedule = own;
    if (rc == 0)
        printf("(* the plan's own kind; interleaved rows re-cut the layers into %d chunks per "
               "device of the same devices)\n",
               COMPARE_CHUNKS);
    return rc;
}

int pt_cmd_sim(int argc, char **argv)
{
    const char *plan_path = NULL, *profile_path = NULL, *topo_path = NULL;
    int json = 0, events = 0, width = PT_TIMELINE_DEFAULT_WIDTH, mbs = 0, windows = 0, compare = 0;
    pt_opt opts[] = {
        {"plan", PT_OPT_STRING, &plan_path, 0, 0, 0, "PLAN.json", "the plan (pipetop plan --out)"},
        {"profile", PT_OPT_STRING, &profile_path, 0, 0, 0, "P",
         "profile JSON, or a name in profiles/"},
        {"topology", PT_OPT_STRING, &topo_path, 0, 0, 0, "T",
         "topology JSON, or a name in topologies/"},
        {"json", PT_OPT_FLAG, &json, 0, 0, 0, NULL, "machine-readable output instead of text"},
        {"events", PT_OPT_FLAG, &events, 0, 0, 0, NULL,
         "with --json: every op's start and end (large)"},
        {"width", PT_OPT_INT, &width, PT_TIMELINE_MIN_WIDTH, PT_TIMELINE_MAX_WIDTH, 0, "N",
         "timeline cells (default 100)"},
        {"microbatches", PT_OPT_INT, &mbs, 1, 1 << 20, 0, "M",
         "override the plan's micro-batch count"},
        {"windows", PT_OPT_INT, &windows, 1, MAX_WINDOWS, 0, "W",
         "asynchronous schedules: windows to simulate"},
        {"compare-schedules", PT_OPT_FLAG, &compare, 0, 0, 0, NULL,
         "one row per synchronous kind for the plan's partition"},
    };
    char kinds[KINDS_HELP_MAX];
    int rc = pt_opts_command("sim", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, kinds_help(kinds, sizeof kinds));
    if (rc >= 0)
        return rc;
    if (!plan_path || !profile_path || !topo_path) {
        pt_cli_error("sim", json, PT_CLI_USAGE,
                     "--plan, --profile and --topology are required (see pipetop sim --help)");
        return 2;
    }
    pt_error err = {0};
    pt_plan *plan = NULL;
    pt_profile *profile = NULL;
    pt_topology *topo = NULL;
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    int status = 1;
    char prof_buf[PT_DATADIR_PATH_MAX], topo_buf[PT_DATADIR_PATH_MAX];
    profile_path = pt_datadir_resolve("profiles", profile_path, ".json", prof_buf, sizeof prof_buf);
    topo_path = pt_datadir_resolve("topologies", topo_path, ".json", topo_buf, sizeof topo_buf);
    if (pt_plan_load(plan_path, &plan, &err) < 0 ||
        pt_profile_load(profile_path, &profile, &err) < 0 ||
        pt_topology_load(topo_path, &topo, &err) < 0 ||
        pt_plan_check(plan, NULL, topo, plan_path, &err) < 0)
        goto out;
    if (profile->layer_count != plan->layer_count) {
        pt_error_set(&err, PT_EINVAL, "%s: layers: the plan has %d layers but %s has %d", plan_path,
                     plan->layer_count, profile_path, profile->layer_count);
        goto out;
    }
    if (pt_cost_new(profile, topo, &cost, &err) < 0 || pt_sim_new(&sim) < 0)
        goto out;
    pt_sched_opts so = {.microbatches = mbs, .windows = windows};
    if (compare) {
        if (json || events || windows) {
            pt_error_set(&err, PT_EINVAL,
                         "--compare-schedules prints a table; it takes no --json, --events or "
                         "--windows");
            goto out;
        }
        if (compare_schedules(plan, sim, cost, &so, &prog, &err) < 0)
            goto out;
        status = 0;
        goto out;
    }
    if (pt_sim_plan(sim, plan, cost, &so, &prog, &res, &err) < 0)
        goto out;
    if (json) {
        if (print_json(&prog, topo, &res, events) < 0) {
            pt_error_set(&err, PT_ENOMEM, "out of memory writing JSON");
            goto out;
        }
    } else {
        print_text(plan, topo, &prog, &res, width);
    }
    status = 0;
out:
    if (status)
        pt_cli_error("sim", json, err.code ? err.code : PT_EINVAL, "%s",
                     err.msg[0] ? err.msg : pt_strerror(err.code));
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&profile);
    pt_plan_free(&plan);
    return status;
}

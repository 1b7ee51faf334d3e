/* pipetop plan: runs a planner (planner/planner.h) on a profile and a
 * topology, prints the plan, its predicted and simulated iteration time and
 * why; --compare runs every planner on the same input and prints a table. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "protocol/datadir.h"
#include "protocol/pipedream_profile.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "protocol/opts.h"
#include "tui/cli/cli_error.h"
#include "tui/cli/commands.h"

#define PLAN_GIB         1073741824.0
#define PLAN_MS_PER_S    1000.0
#define PLAN_BATCH_MAX   (1 << 24)
#define PLAN_MEM_GIB_MAX 1048576.0
/* Stages listed one per line in the table of --compare before "(+N)". */
#define PLAN_COMPARE_STAGES_SHOWN 8

static const char usage_text[] =
    "usage: pipetop plan --planner NAME --profile P --topology T --batch GBS\n"
    "                    [--stages S] [--memory-limit GiB] [--microbatch N[,N...]]\n"
    "                    [--optimizer sgd|adam] [--precision P] [--objective NAME]\n"
    "                    [--kinds LIST]\n"
    "                    [--no-fallback]\n"
    "                    [--out PLAN.json] [--json]\n"
    "       pipetop plan --compare --profile P --topology T --batch GBS [same options]\n"
    "Plans how to split the model over the devices and prints the plan: stages, layer\n"
    "ranges, replicas and devices, schedule, micro-batching, the planner's predicted\n"
    "iteration time and the simulator's, memory per stage, and why.\n";

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

static int load_profile(const char *path, pt_profile **out, pt_error *err)
{
    if (ends_with(path, ".txt"))
        return pt_pipedream_load(path, NULL, out, NULL, err);
    return pt_profile_load(path, out, err);
}

/* "2,4,8" into opts; 0 or -1 (message printed). */
static int parse_mb_list(const char *s, pt_planner_opts *o, int json)
{
    o->microbatch_size_count = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > PLAN_BATCH_MAX ||
            o->microbatch_size_count == PT_PLANNER_MB_CHOICES_MAX) {
            pt_cli_error("plan", json, PT_CLI_USAGE,
                         "--microbatch: '%s' is not a list of at most %d sizes in 1..%d", s,
                         PT_PLANNER_MB_CHOICES_MAX, PLAN_BATCH_MAX);
            return -1;
        }
        o->microbatch_sizes[o->microbatch_size_count++] = (int)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s) {
            pt_cli_error("plan", json, PT_CLI_USAGE, "--microbatch: unexpected '%s'", s);
            return -1;
        }
    }
    return 0;
}

/* "own", "sync" or "dapple,zb-h1" into o->kinds; 0 or -1 (message printed). */
static int parse_kinds(const char *s, pt_planner_opts *o)
{
    if (!strcmp(s, "own")) {
        o->kinds = 0;
        return 0;
    }
    if (!strcmp(s, "sync")) {
        o->kinds = PT_PLANNER_KINDS_SYNC;
        return 0;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->kinds = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        pt_sched_kind k;
        if (pt_sched_kind_parse(t, &k) < 0 || !pt_sched_kind_has(k, PT_SCHED_SYNCHRONOUS) ||
            k >= 32) {
            char names[256];
            pt_sched_kind_list(PT_SCHED_SYNCHRONOUS, names, sizeof names);
            fprintf(stderr,
                    "pipetop plan: --kinds: '%s' is not a synchronous schedule kind (own, sync, "
                    "or of: %s)\n",
                    t, names);
            return -1;
        }
        o->kinds |= 1u << k;
    }
    return 0;
}

static void kind_name(const pt_planner_kind_row *r, char *buf, size_t cap)
{
    char v[16] = "";
    if (r->chunks > 1)
        snprintf(v, sizeof v, " v=%d", r->chunks);
    snprintf(buf, cap, "%s%s%.1s%s", pt_sched_kind_name(r->kind), r->policy ? "/" : "",
             r->policy ? &r->policy : "", v);
}

static cJSON *kinds_json(const pt_planner_report *rep)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < rep->kind_count; i++) {
        const pt_planner_kind_row *r = &rep->kinds[i];
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "kind", pt_sched_kind_name(r->kind));
        if (r->policy) {
            char pol[2] = {r->policy, 0};
            cJSON_AddStringToObject(k, "policy", pol);
        }
        if (r->chunks > 1)
            cJSON_AddNumberToObject(k, "chunks", r->chunks);
        cJSON_AddBoolToObject(k, "allowed", r->allowed);
        cJSON_AddBoolToObject(k, "chosen", i == rep->chosen_kind);
        if (r->refused) {
            cJSON_AddStringToObject(k, "refused", r->note);
        } else {
            if (isfinite(r->iter_s))
                cJSON_AddNumberToObject(k, "iteration_ms", r->iter_s * 1e3);
            cJSON_AddNumberToObject(k, "peak_memory_bytes", (double)r->peak_memory_bytes);
            cJSON_AddBoolToObject(k, "fits", r->fits);
        }
        cJSON_AddItemToArray(arr, k);
    }
    return arr;
}

static void print_kinds(const pt_planner_report *rep)
{
    if (rep->kind_count < 1)
        return;
    printf("  schedule kinds on this partition (simulated):\n");
    for (int i = 0; i < rep->kind_count; i++) {
        const pt_planner_kind_row *r = &rep->kinds[i];
        char name[PT_SCHED_NAME_MAX + 4];
        kind_name(r, name, sizeof name);
        if (r->refused) {
            printf("    %-16s refused: %s\n", name, r->note);
            continue;
        }
        if (!isfinite(r->iter_s)) {
            printf("    %-16s %15s  peak %8.2f GiB  does not fit (not simulated)%s\n", name, "-",
                   (double)r->peak_memory_bytes / PLAN_GIB,
                   r->allowed ? "" : "  (not allowed: --kinds)");
            continue;
        }
        printf("    %-16s %12.3f ms  peak %8.2f GiB%s%s%s\n", name, r->iter_s * PLAN_MS_PER_S,
               (double)r->peak_memory_bytes / PLAN_GIB, r->fits ? "" : "  does not fit",
               r->allowed ? "" : "  (not allowed: --kinds)",
               i == rep->chosen_kind ? "  <- chosen" : "");
    }
}

/* Simulates plan under its own schedule; fills per-stage peaks (max over
 * replicas) when peaks is not NULL. Returns the iteration time or NAN. */
static double simulate(const pt_plan *plan, const pt_cost *cost, int64_t *peaks, char *msg,
                       size_t cap)
{
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    double t = NAN;
    if (pt_sim_new(&sim) == 0 && pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err) == 0) {
        t = res.iter_s;
        if (peaks) {
            for (int s = 0; s < plan->stage_count; s++)
                peaks[s] = 0;
            for (int w = 0; w < res.worker_count; w++) {
                int s = prog.workers[w].stage;
                if (res.workers[w].peak.total > peaks[s])
                    peaks[s] = res.workers[w].peak.total;
            }
        }
    } else if (msg) {
        snprintf(msg, cap, "%s", err.msg);
    }
    pt_program_release(&prog);
    pt_sim_free(&sim);
    return t;
}

static void print_devices(const pt_stage *st, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int r = 0; r < st->replica_count && n + 16 < cap; r++) {
        /* collapse runs a..b */
        int a = st->replicas[r], b = a;
        while (r + 1 < st->replica_count && st->replicas[r + 1] == b + 1)
            b = st->replicas[++r];
        n += (size_t)snprintf(buf + n, cap - n, a == b ? "%s%d" : "%s%d-%d", n ? "," : "", a, b);
    }
}

/* pipedream's fallback: why, and each memory-lean candidate as simulated. */
static cJSON *fallback_json(const pt_planner_report *rep)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "stash_needed_bytes", (double)rep->stash_need_bytes);
    cJSON_AddBoolToObject(o, "stash_needed_is_bound", rep->stash_need_proven);
    cJSON_AddNumberToObject(o, "device_memory_bytes", (double)rep->device_memory_bytes);
    if (rep->fallback_chosen >= 0)
        cJSON_AddStringToObject(o, "chosen",
                                pt_sched_kind_name(rep->fallback[rep->fallback_chosen].kind));
    cJSON *arr = cJSON_AddArrayToObject(o, "candidates");
    for (int i = 0; i < rep->fallback_count; i++) {
        const pt_planner_kind_row *r = &rep->fallback[i];
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "kind", pt_sched_kind_name(r->kind));
        cJSON_AddBoolToObject(k, "planned", !r->refused);
        cJSON_AddBoolToObject(k, "fits", r->fits);
        if (isfinite(r->iter_s))
            cJSON_AddNumberToObject(k, "simulated_iteration_ms", r->iter_s * PLAN_MS_PER_S);
        cJSON_AddNumberToObject(k, "peak_memory_bytes", (double)r->peak_memory_bytes);
        cJSON_AddStringToObject(k, "note", r->note);
        cJSON_AddItemToArray(arr, k);
    }
    return o;
}

static void print_fallback(const pt_planner_report *rep)
{
    if (rep->fallback_count <= 0 || rep->fallback_chosen < 0)
        return;
    printf("  fallback: weight stashing needs %s%.1f GiB per device (devices have %.1f GiB), "
           "so it planned %s instead\n",
           rep->stash_need_proven ? ">= " : "", (double)rep->stash_need_bytes / PLAN_GIB,
           (double)rep->device_memory_bytes / PLAN_GIB,
           pt_sched_kind_name(rep->fallback[rep->fallback_chosen].kind));
    for (int i = 0; i < rep->fallback_count; i++) {
        const pt_planner_kind_row *r = &rep->fallback[i];
        if (r->refused)
            printf("    %-11s no plan: %s\n", pt_sched_kind_name(r->kind), r->note);
        else
            printf("    %-11s simulated %12.3f ms  peak %7.2f GiB  %s%s\n",
                   pt_sched_kind_name(r->kind), r->iter_s * PLAN_MS_PER_S,
                   (double)r->peak_memory_bytes / PLAN_GIB, r->fits ? "fits" : "does not fit",
                   i == rep->fallback_chosen ? "  (chosen)" : "");
    }
}

static cJSON *report_json(const pt_planner_report *rep, double sim_s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "planner", rep->planner);
    cJSON_AddStringToObject(o, "objective", rep->objective);
    cJSON_AddNumberToObject(o, "objective_ms", rep->objective_s * PLAN_MS_PER_S);
    cJSON_AddNumberToObject(o, "predicted_iteration_ms", rep->iter_s * PLAN_MS_PER_S);
    if (isfinite(sim_s))
        cJSON_AddNumberToObject(o, "simulated_iteration_ms", sim_s * PLAN_MS_PER_S);
    cJSON_AddNumberToObject(o, "peak_memory_bytes", (double)rep->peak_memory_bytes);
    cJSON_AddNumberToObject(o, "search_ms", rep->search_s * PLAN_MS_PER_S);
    cJSON_AddNumberToObject(o, "evaluated", (double)rep->evaluated);
    cJSON_AddStringToObject(o, "why", rep->why);
    if (rep->bound_s > 0)
        cJSON_AddNumberToObject(o, "search_bound_ms", rep->bound_s * 1e3);
    if (rep->kind_count > 0)
        cJSON_AddItemToObject(o, "kinds", kinds_json(rep));
    if (rep->fallback_count > 0)
        cJSON_AddItemToObject(o, "fallback", fallback_json(rep));
    return o;
}

static int plan_one(const char *name, const pt_profile *pr, const pt_topology *topo, int gbs,
                    const pt_planner_opts *o, const char *out_path, int json)
{
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    int rc = pt_planner_run(name, pr, topo, gbs, o, &plan, &rep, &err);
    if (rc < 0) {
        pt_cli_error("plan", json, rc, "%s", err.msg);
        return 1;
    }
    /* the plan says the precision it trains in: its profile's */
    snprintf(plan->precision, sizeof plan->precision, "%s", pt_precision_name(pr->precision));
    pt_cost *cost = NULL;
    const pt_topology *t = topo;
    if (pt_cost_new(pr, t, &cost, &err) < 0) {
        pt_cli_error("plan", json, err.code ? err.code : PT_EINVAL, "%s", err.msg);
        pt_plan_free(&plan);
        return 1;
    }
    int64_t *peaks = calloc((size_t)plan->stage_count, sizeof *peaks);
    char simmsg[PT_ERROR_MAX] = "";
    double sim_s = simulate(plan, cost, peaks, simmsg, sizeof simmsg);
    int status = 0;
    if (out_path && pt_plan_save(plan, out_path, &err) < 0) {
        pt_cli_error("plan", json, err.code ? err.code : PT_EINVAL, "%s", err.msg);
        status = 1;
    }
    if (json) {
        cJSON *j = report_json(&rep, sim_s);
        char *pj = pt_plan_to_json(plan);
        cJSON *pc = pj ? cJSON_Parse(pj) : NULL;
        free(pj);
        if (pc)
            cJSON_AddItemToObject(j, "plan", pc);
        cJSON *mem = cJSON_AddArrayToObject(j, "stage_peak_memory_bytes");
        for (int s = 0; s < plan->stage_count && peaks; s++)
            cJSON_AddItemToArray(mem, cJSON_CreateNumber((double)peaks[s]));
        char *txt = cJSON_Print(j);
        if (txt)
            puts(txt);
        free(txt);
        cJSON_Delete(j);
    } else {
        printf("plan: %s for '%s' on '%s', global batch %d\n", name, pr->model, topo->name, gbs);
        printf("  schedule %s", pt_sched_kind_name(plan->schedule));
        if (pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_POLICY))
            printf(" (policy %c)", plan->policy);
        printf(", %d micro-batches of %d samples, optimizer %s\n", plan->microbatch_count,
               plan->microbatch_size, plan->optimizer.kind == PT_OPTIM_ADAM ? "adam" : "sgd");
        printf("  %-5s  %-13s  %-8s  %-22s  %s\n", "stage", "layers", "replicas", "devices",
               "peak memory (simulated)");
        for (int s = 0; s < plan->stage_count; s++) {
            const pt_stage *st = &plan->stages[s];
            char range[32], devs[64];
            snprintf(range, sizeof range, "[%d,%d)", st->first, st->last);
            print_devices(st, devs, sizeof devs);
            printf("  %-5d  %-13s  %-8d  %-22s  %.2f GiB%s\n", s, range, st->replica_count, devs,
                   peaks ? (double)peaks[s] / PLAN_GIB : 0.0, st->recompute ? "  recompute" : "");
        }
        printf("  predicted: %.3f ms per iteration (%s: %.3f ms)\n", rep.iter_s * PLAN_MS_PER_S,
               rep.objective, rep.objective_s * PLAN_MS_PER_S);
        if (isfinite(sim_s))
            printf("  simulated: %.3f ms per iteration, %.1f samples/s\n", sim_s * PLAN_MS_PER_S,
                   gbs / sim_s);
        else
            printf("  simulated: not available (%s)\n", simmsg);
        printf("  why: %s\n", rep.why);
        print_kinds(&rep);
        print_fallback(&rep);
        printf("  search: %.3f s, %lld candidates\n", rep.search_s, rep.evaluated);
        if (out_path && !status)
            printf("  wrote %s\n", out_path);
    }
    free(peaks);
    pt_cost_free(&cost);
    pt_plan_free(&plan);
    return status;
}

typedef struct row {
    const char *name;
    int ok;
    char shape[64];
    double predicted, simulated;
    int64_t *peaks;
    int stages;
    char error[PT_ERROR_MAX];
} row;

static int compare(const pt_profile *pr, const pt_topology *topo, int gbs, const pt_planner_opts *o,
                   int json)
{
    int n = pt_planner_count();
    row *rows = calloc((size_t)n, sizeof *rows);
    pt_cost *cost = NULL;
    pt_error err = {0};
    if (!rows || pt_cost_new(pr, topo, &cost, &err) < 0) {
        pt_cli_error("plan", json, rows ? err.code : PT_ENOMEM, "%s",
                     rows ? err.msg : "out of memory");
        free(rows);
        return 1;
    }
    double dp_time = NAN;
    for (int i = 0; i < n; i++) {
        row *r = &rows[i];
        r->name = pt_planner_get(i)->name;
        pt_plan *plan = NULL;
        pt_planner_report rep;
        pt_error e = {0};
        if (pt_planner_run(r->name, pr, topo, gbs, o, &plan, &rep, &e) < 0) {
            snprintf(r->error, sizeof r->error, "%s", e.msg);
            continue;
        }
        r->ok = 1;
        r->stages = plan->stage_count;
        r->predicted = rep.iter_s;
        r->peaks = calloc((size_t)plan->stage_count, sizeof *r->peaks);
        r->simulated = simulate(plan, cost, r->peaks, r->error, sizeof r->error);
        size_t k = (size_t)snprintf(r->shape, sizeof r->shape, "%d (", plan->stage_count);
        for (int s = 0; s < plan->stage_count && k + 8 < sizeof r->shape; s++)
            k += (size_t)snprintf(r->shape + k, sizeof r->shape - k, "%s%d", s ? ":" : "",
                                  plan->stages[s].replica_count);
        if (k + 2 < sizeof r->shape)
            snprintf(r->shape + k, sizeof r->shape - k, ")");
        else
            snprintf(r->shape + sizeof r->shape - 5, 5, "..)");
        if (!strcmp(r->name, "dp"))
            dp_time = r->simulated;
        pt_plan_free(&plan);
    }
    if (json) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < n; i++) {
            row *r = &rows[i];
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "planner", r->name);
            if (!r->ok) {
                cJSON_AddStringToObject(j, "error", r->error);
            } else {
                cJSON_AddStringToObject(j, "shape", r->shape);
                cJSON_AddNumberToObject(j, "predicted_iteration_ms", r->predicted * PLAN_MS_PER_S);
                if (isfinite(r->simulated))
                    cJSON_AddNumberToObject(j, "simulated_iteration_ms",
                                            r->simulated * PLAN_MS_PER_S);
                if (isfinite(r->simulated) && isfinite(dp_time))
                    cJSON_AddNumberToObject(j, "speedup_over_dp", dp_time / r->simulated);
                cJSON *m = cJSON_AddArrayToObject(j, "stage_peak_memory_bytes");
                for (int s = 0; s < r->stages; s++)
                    cJSON_AddItemToArray(m, cJSON_CreateNumber((double)r->peaks[s]));
            }
            cJSON_AddItemToArray(arr, j);
        }
        char *txt = cJSON_Print(arr);
        if (txt)
            puts(txt);
        free(txt);
        cJSON_Delete(arr);
    } else {
        printf("plans for '%s' on '%s', global batch %d (times per iteration; simulated under "
               "each plan's own schedule)\n",
               pr->model, topo->name, gbs);
        printf("  %-10s %-22s %12s %12s %8s  %s\n", "planner", "stages (replicas)", "predicted",
               "simulated", "vs dp", "peak memory per stage (GiB)");
        for (int i = 0; i < n; i++) {
            row *r = &rows[i];
            if (!r->ok) {
                printf("  %-10s %s\n", r->name, r->error);
                continue;
            }
            char speed[16] = "-";
            if (isfinite(r->simulated) && isfinite(dp_time))
                snprintf(speed, sizeof speed, "%.2fx", dp_time / r->simulated);
            char sim[24] = "-";
            if (isfinite(r->simulated))
                snprintf(sim, sizeof sim, "%.3f ms", r->simulated * PLAN_MS_PER_S);
            printf("  %-10s %-22s %9.3f ms %12s %8s  ", r->name, r->shape,
                   r->predicted * PLAN_MS_PER_S, sim, speed);
            for (int s = 0; s < r->stages && s < PLAN_COMPARE_STAGES_SHOWN; s++)
                printf("%s%.2f", s ? " " : "", (double)r->peaks[s] / PLAN_GIB);
            if (r->stages > PLAN_COMPARE_STAGES_SHOWN)
                printf(" (+%d)", r->stages - PLAN_COMPARE_STAGES_SHOWN);
            printf("\n");
        }
    }
    for (int i = 0; i < n; i++)
        free(rows[i].peaks);
    free(rows);
    pt_cost_free(&cost);
    return 0;
}

/* The flags of pt_cmd_plan that become planner options. */
typedef struct plan_flags {
    const char *mb, *optim, *objective, *kinds;
    int stages, no_fallback;
    double mem_gib;
} plan_flags;

/* The usage errors of pt_cmd_plan's arguments: 0, or 2 after saying which. */
static int check_plan_args(const char *planner, const char *profile_path, const char *topo_path,
                           int batch, int cmp, const char *out, int json)
{
    if (!profile_path || !topo_path || !batch || (!planner && !cmp)) {
        pt_cli_error("plan", json, PT_CLI_USAGE, "%s (see pipetop plan --help)",
                     !profile_path ? "--profile is required"
                     : !topo_path  ? "--topology is required"
                     : !batch      ? "--batch is required"
                                   : "--planner or --compare is required");
        return 2;
    }
    if (planner && cmp) {
        pt_cli_error("plan", json, PT_CLI_USAGE, "give --planner or --compare, not both");
        return 2;
    }
    if (cmp && out) {
        pt_cli_error("plan", json, PT_CLI_USAGE, "--out needs --planner (one plan)");
        return 2;
    }
    if (planner && !pt_planner_find(planner)) {
        char names[256] = "";
        for (int i = 0; i < pt_planner_count(); i++) {
            size_t k = strlen(names);
            snprintf(names + k, sizeof names - k, " %s", pt_planner_get(i)->name);
        }
        pt_cli_error("plan", json, PT_CLI_USAGE, "--planner: '%s' is not one of%s", planner, names);
        return 2;
    }
    return 0;
}

/* The planner options of pt_cmd_plan's flags into *o: 0, or 2 after saying
 * which flag is wrong. */
static int plan_opts_of(const plan_flags *f, int cmp, int json, pt_planner_opts *o)
{
    pt_planner_opts_default(o);
    o->stages = f->stages;
    o->no_fallback = f->no_fallback;
    if (f->mem_gib > 0)
        o->memory_limit_bytes = (int64_t)(f->mem_gib * PLAN_GIB);
    if (f->mb && parse_mb_list(f->mb, o, json) < 0)
        return 2;
    if (f->optim) {
        if (!strcmp(f->optim, "adam"))
            o->optim = PT_OPTIM_ADAM;
        else if (strcmp(f->optim, "sgd")) {
            pt_cli_error("plan", json, PT_CLI_USAGE, "--optimizer: '%s' is not sgd or adam",
                         f->optim);
            return 2;
        }
    }
    if (f->kinds && parse_kinds(f->kinds, o) < 0)
        return 2;
    if (f->objective) {
        if (pt_planner_objective_parse(f->objective, &o->objective) < 0) {
            pt_cli_error("plan", json, PT_CLI_USAGE,
                         "--objective: '%s' is not default, pipedream or dapple", f->objective);
            return 2;
        }
        if (cmp && o->objective != PT_OBJECTIVE_DEFAULT) {
            pt_cli_error("plan", json, PT_CLI_USAGE, "--objective %s needs --planner (one planner)",
                         f->objective);
            return 2;
        }
    }
    return 0;
}

int pt_cmd_plan(int argc, char **argv)
{
    const char *planner = NULL, *profile_path = NULL, *topo_path = NULL, *out = NULL;
    const char *mb = NULL, *optim = NULL, *objective = NULL, *kinds = NULL, *precision = NULL;
    int batch = 0, stages = 0, json = 0, cmp = 0, no_fallback = 0;
    double mem_gib = 0;
    pt_opt opts[] = {
        {"planner", PT_OPT_STRING, &planner, 0, 0, 0, "NAME",
         "dapple, pipedream, 2bw, gpipe, dp or pipesgd"},
        {"profile", PT_OPT_STRING, &profile_path, 0, 0, 0, "P",
         "profile JSON (pipetop profile / import-profile), a PipeDream\n"
         "graph.txt, or a name in profiles/"},
        {"topology", PT_OPT_STRING, &topo_path, 0, 0, 0, "T",
         "topology JSON, or a name in topologies/"},
        {"batch", PT_OPT_INT, &batch, 1, PLAN_BATCH_MAX, 0, "GBS",
         "global batch size (samples per iteration)"},
        {"stages", PT_OPT_INT, &stages, 1, 1 << 20, 0, "S",
         "gpipe: number of stages (default: min(layers, devices))"},
        {"memory-limit", PT_OPT_DOUBLE, &mem_gib, 1e-9, PLAN_MEM_GIB_MAX, 0, "G",
         "take every device to have G GiB"},
        {"microbatch", PT_OPT_STRING, &mb, 0, 0, 0, "LIST",
         "micro-batch sizes to consider (each divides GBS)"},
        {"precision", PT_OPT_STRING, &precision, 0, 0, 0, "P",
         "the precision to train in: the profile's must be P (make one\n"
         "with pipetop profile --analytic --precision P)"},
        {"optimizer", PT_OPT_STRING, &optim, 0, 0, 0, "K",
         "sgd (default) or adam: optimizer state and step cost"},
        {"objective", PT_OPT_STRING, &objective, 0, 0, 0, "NAME",
         "default (what the simulator charges), or the planner's paper's\n"
         "own formulas: pipedream (--planner pipedream), dapple (--planner\n"
         "dapple); see docs/planners.md"},
        {"kinds", PT_OPT_STRING, &kinds, 0, 0, 0, "LIST",
         "dapple, gpipe: the schedule kinds they may choose among by\n"
         "simulated time and memory: own (default: the planner's own),\n"
         "sync (every synchronous kind) or names, e.g. dapple,zb-h1"},
        {"no-fallback", PT_OPT_FLAG, &no_fallback, 0, 0, 0, NULL,
         "pipedream: fail when no weight-stashing plan fits memory\n"
         "(default: plan PipeDream-2BW or PipeDream-Flush instead,\n"
         "kind 2bw or 1f1b-flush, whichever simulates faster)"},
        {"out", PT_OPT_STRING, &out, 0, 0, 0, "FILE", "write the plan there"},
        {"json", PT_OPT_FLAG, &json, 0, 0, 0, NULL, "machine-readable output"},
        {"compare", PT_OPT_FLAG, &cmp, 0, 0, 0, NULL,
         "every planner on the same input: stages, predicted time (via\n"
         "the simulator), speed-up over data parallelism, memory per stage"},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    int prc = pt_opts_command("plan", argc, argv, opts, n, usage_text, NULL);
    if (prc >= 0)
        return prc;
    if (check_plan_args(planner, profile_path, topo_path, batch, cmp, out, json))
        return 2;
    pt_planner_opts o;
    plan_flags f = {mb, optim, objective, kinds, stages, no_fallback, mem_gib};
    if (plan_opts_of(&f, cmp, json, &o))
        return 2;
    char prof_buf[PT_DATADIR_PATH_MAX], topo_buf[PT_DATADIR_PATH_MAX];
    profile_path = pt_datadir_resolve("profiles", profile_path, ".json", prof_buf, sizeof prof_buf);
    topo_path = pt_datadir_resolve("topologies", topo_path, ".json", topo_buf, sizeof topo_buf);
    pt_profile *pr = NULL;
    pt_topology *topo = NULL;
    pt_error err = {0};
    if (load_profile(profile_path, &pr, &err) < 0 || pt_topology_load(topo_path, &topo, &err) < 0) {
        pt_cli_error("plan", json, err.code ? err.code : PT_EINVAL, "%s", err.msg);
        pt_profile_free(&pr);
        return 1;
    }
    if (precision && pt_precision_parse(precision) != pr->precision) {
        pt_cli_error("plan", json, PT_EINVAL,
                     "--precision %s: the profile of '%s' is %s (make a %s one with pipetop "
                     "profile --analytic --precision %s)",
                     precision, pr->model, pt_precision_name(pr->precision), precision, precision);
        pt_profile_free(&pr);
        pt_topology_free(&topo);
        return 2;
    }
    int rc = cmp ? compare(pr, topo, batch, &o, json)
                 : plan_one(planner, pr, topo, batch, &o, out, json);
    pt_profile_free(&pr);
    pt_topology_free(&topo);
    return rc;
}

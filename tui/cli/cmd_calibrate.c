/* pipetop calibrate RUN --out profile.json: fit the cost model to what a run
 * measured (planner/calibrate.h) and write the calibrated profile, and with
 * --topology-out the topology with the fitted links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "planner/calibrate.h"
#include "protocol/opts.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"
#include "tui/cli/commands.h"
#include "tui/cli/inputs.h"

#define CAL_PATH_MAX 4096

static const char usage_text[] =
    "usage: pipetop calibrate RUN --out PROFILE.json [--profile BASE] [--topology T]\n"
    "                         [--topology-out T.json] [--gen G] [--skip N]\n"
    "Fits the cost model to a run's measured ops: each stage's forward, backward and\n"
    "recompute times (the base profile gives the layers' relative weights inside a\n"
    "stage), the optimizer step, a per-op overhead, and the point-to-point and\n"
    "all-reduce links. Writes a profile whose origin says it was calibrated from RUN;\n"
    "the fitted links go to --topology-out (docs/formats.md, \"Calibrated profiles\").\n"
    "Predict another plan with: pipetop sim --profile PROFILE.json --topology T.json\n";

static void utc_now(char *buf, size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else
        snprintf(buf, cap, "%s", "");
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Devices the record's plans use: enough for a local topology. */
static int plan_devices(const pt_record *rec)
{
    int need = 1;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind == PT_RECORD_PLAN && e->plan && pt_inputs_plan_devices(e->plan) > need)
            need = pt_inputs_plan_devices(e->plan);
    }
    return need;
}

static void print_link(const char *name, const pt_cal_link *l)
{
    if (l->how == PT_CAL_LINK_NONE) {
        printf("  %-10s no ops measured (the topology's link kept)\n", name);
        return;
    }
    printf("  %-10s %s over %d ops: %.3f GB/s, latency %.1f us (rms residual %.1f us)\n", name,
           pt_cal_link_how_name(l->how), l->ops, l->link.bandwidth / 1e9, l->link.latency * 1e6,
           l->rms_s * 1e6);
}

static void print_fit(const pt_cal_fit *f)
{
    printf("generation %lld, %lld steps in %lld..%lld (the middle half after the warm-up), %lld "
           "op events\n",
           (long long)f->gen, (long long)f->steps_used, (long long)f->first_step,
           (long long)f->last_step, (long long)f->events);
    printf("  stage layers   reps  fwd ms (base, x)          bwd ms (base, x)          opt ms\n");
    for (int s = 0; s < f->stage_count; s++) {
        const pt_cal_stage *c = &f->stages[s];
        printf("  %5d [%d,%d)%*s %4d  %7.3f (%7.3f, %5.2fx)  %7.3f (%7.3f, %5.2fx)  %6.3f\n", s,
               c->first, c->last, c->last >= 10 ? 0 : 1, "", c->replicas, c->fwd_ms, c->fwd_base_ms,
               c->fwd_scale, c->bwd_ms, c->bwd_base_ms, c->bwd_scale, c->opt_ms);
    }
    printf("  per-op overhead %.4f ms over %lld ops\n", f->op_overhead_ms, (long long)f->gaps);
    printf("  sends %s\n",
           f->sends_hold ? "hold their worker until they end" : "run beside the worker");
    printf("  receiver wake-up %.4f ms after the send, over %lld receives that waited\n",
           f->recv_wake_ms, (long long)f->recv_waits);
    if (f->opt_bytes_per_s > 0)
        printf("  optimizer step  %.3f GB/s streamed\n", f->opt_bytes_per_s / 1e9);
    print_link("intra-node", &f->intra);
    print_link("inter-node", &f->inter);
    print_link("all-reduce", &f->allreduce);
}

int pt_cmd_calibrate(int argc, char **argv)
{
    const char *run = NULL, *out = NULL, *base_path = NULL, *topo_path = NULL, *topo_out = NULL;
    int64_t gen = -1;
    int skip = -1;
    pt_opt opts[] = {
        {"RUN", PT_OPT_ARG, &run, 1, 1, 0, NULL, "a run folder, or its run.ndjson"},
        {"out", PT_OPT_STRING, &out, 0, 0, 0, "PROFILE.json", "where to write the profile"},
        {"profile", PT_OPT_STRING, &base_path, 0, 0, 0, "BASE",
         "base profile: the layers' relative weights\n(default: the run's RUN/profile.json)"},
        {"topology", PT_OPT_STRING, &topo_path, 0, 0, 0, "T",
         "the run's topology (default: RUN/topology.json, else\nthe local one `pipetop run` "
         "uses)"},
        {"topology-out", PT_OPT_STRING, &topo_out, 0, 0, 0, "T.json",
         "write the topology with the fitted links"},
        {"gen", PT_OPT_INT64, &gen, 0, 9007199254740991.0, 0, "G",
         "plan generation to fit (default: the newest with ops)"},
        {"skip", PT_OPT_INT, &skip, 0, 1 << 20, 0, "N",
         "warm-up steps left out (default " PT_OPTS_STR(PT_CAL_SKIP_STEPS_DEFAULT) ")"},
    };
    int rc = pt_opts_command("calibrate", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    if (!out) {
        fprintf(stderr, "pipetop calibrate: give --out PROFILE.json\n");
        return 2;
    }
    char dir[CAL_PATH_MAX], rec_path[CAL_PATH_MAX], path[CAL_PATH_MAX + 32];
    pt_inputs_run_paths(run, rec_path, dir, sizeof dir);
    pt_error err = {0};
    pt_record *rec = NULL;
    pt_profile *base = NULL, *cal = NULL;
    pt_topology *topo = NULL, *ctopo = NULL;
    pt_cal_fit fit = {0};
    int status = 1;
    if (pt_record_load(rec_path, &rec, &err) < 0)
        goto fail;
    if (!base_path) {
        snprintf(path, sizeof path, "%s/profile.json", dir);
        if (!exists(path)) {
            fprintf(stderr,
                    "pipetop calibrate: %s: no base profile (the run was given one: pass it "
                    "with --profile)\n",
                    path);
            goto done;
        }
        base_path = path;
    }
    if (pt_profile_load(base_path, &base, &err) < 0)
        goto fail;
    char tpath[CAL_PATH_MAX + 32];
    snprintf(tpath, sizeof tpath, "%s/topology.json", dir);
    if (!topo_path && exists(tpath))
        topo_path = tpath;
    if (topo_path) {
        if (pt_topology_load(topo_path, &topo, &err) < 0)
            goto fail;
    } else if (!(topo = pt_inputs_local_topology(plan_devices(rec)))) {
        fprintf(stderr, "pipetop calibrate: out of memory\n");
        goto done;
    }
    char date[32];
    utc_now(date, sizeof date);
    pt_cal_opts o = {gen, skip, dir, base_path, date};
    if (pt_calibrate(rec, base, topo, &o, &cal, &fit, &err) < 0)
        goto fail;
    print_fit(&fit);
    if (pt_profile_save(cal, out, &err) < 0)
        goto fail;
    printf("wrote %s (calibrated from %s, generation %lld)\n", out, dir, (long long)fit.gen);
    if (topo_out) {
        if (pt_cal_topology(&fit, topo, &ctopo, &err) < 0 ||
            pt_topology_save(ctopo, topo_out, &err) < 0)
            goto fail;
        printf("wrote %s (links fitted)\n", topo_out);
    }
    status = 0;
    goto done;
fail:
    fprintf(stderr, "pipetop calibrate: %s\n", err.msg);
done:
    pt_cal_fit_clear(&fit);
    pt_topology_free(&ctopo);
    pt_topology_free(&topo);
    pt_profile_free(&cal);
    pt_profile_free(&base);
    pt_record_free(&rec);
    return status;
}

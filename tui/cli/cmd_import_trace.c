/* pipetop import-trace TRACE... --out RUN_DIR: a real PyTorch run's profiler
 * traces, one per pipeline rank, as a pipetop run folder (run record, plan,
 * profile), which replay, status, export and calibrate read as any run
 * (tui/cli/torch_trace.h, trace_import.h; docs/torch.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "protocol/datadir.h"
#include "protocol/fileio.h"
#include "protocol/opts.h"
#include "protocol/record.h"
#include "protocol/topology.h"
#include "tui/cli/commands.h"
#include "tui/cli/trace_import.h"

#define IMPORT_TRACES_MAX 4096
#define IMPORT_PATH_CAP   4096
#define IMPORT_WHY_CAP    256

static const char usage_text[] =
    "usage: pipetop import-trace TRACE... --out RUN_DIR [--rank N,...] [--label REGEX]\n"
    "                            [--plan PLAN] [--profile P] [--topology T] [--model NAME]\n"
    "                            [--microbatch N]\n"
    "Reads a PyTorch pipeline run's profiler traces (torch.profiler's Chrome traces, one\n"
    "per pipeline rank, Kineto's object form or the bare array) and writes a pipetop\n"
    "run folder: the ops labelled PP:<stage><F|B|I|W><mb> (torch.distributed.pipelining),\n"
    "Forward <mb> / Backward <mb>, or --label's, as the ranks' telemetry, iterations\n"
    "from ProfilerStep#n or by counting, the ranks put on one clock by the pipeline's\n"
    "hand-offs. Then pipetop replay, status, export and calibrate read RUN_DIR.\n"
    "Without --plan the plan is inferred (one layer per stage); see docs/torch.md.\n\n";

typedef struct import_args {
    const char *files[IMPORT_TRACES_MAX];
    int nfiles;
    const char *out, *ranks, *label, *plan, *profile, *topology, *model;
    int microbatch;
} import_args;

/* Positional arguments after the first go straight to a->files: the option
 * parser takes one per table entry. argv2 gets the rest. */
static int split_args(int argc, char **argv, const pt_opt *opts, int n, import_args *a,
                      char **argv2)
{
    int k = 0, first = 0;
    argv2[k++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') {
            argv2[k++] = argv[i];
            const char *name = argv[i] + (argv[i][1] == '-' ? 2 : 1);
            const pt_opt *o = strchr(name, '=') ? NULL : pt_opts_find(opts, n, name);
            if (o && o->type != PT_OPT_FLAG && i + 1 < argc)
                argv2[k++] = argv[++i];
        } else if (!first) {
            argv2[k++] = argv[i];
            first = 1;
        } else if (a->nfiles + 1 < IMPORT_TRACES_MAX) {
            a->files[1 + a->nfiles++] = argv[i];
        } else {
            fprintf(stderr, "pipetop import-trace: more than %d traces\n", IMPORT_TRACES_MAX);
            return -1;
        }
    }
    return k;
}

static int parse(int argc, char **argv, import_args *a)
{
    pt_opt opts[] = {
        {"TRACE...", PT_OPT_ARG, &a->files[0], 1, 1, 0, NULL,
         "profiler traces, one per pipeline rank (torch.profiler's\nexport_chrome_trace)"},
        {"out", PT_OPT_STRING, &a->out, 0, 0, 0, "RUN_DIR", "the run folder to write (new)"},
        {"rank", PT_OPT_STRING, &a->ranks, 0, 0, 0, "N,...",
         "the traces' ranks, in order (default: each trace's\ndistributedInfo.rank)"},
        {"label", PT_OPT_STRING, &a->label, 0, 0, 0, "REGEX",
         "ops are the events this extended regular expression matches;\nsubexpressions 1-3: "
         "stage, kind (F, B, I, W, SEND_F, ...), micro-batch"},
        {"plan", PT_OPT_STRING, &a->plan, 0, 0, 0, "PLAN",
         "the plan the run ran (pipetop export-plan's); default: inferred"},
        {"profile", PT_OPT_STRING, &a->profile, 0, 0, 0, "P",
         "the plan's profile (pipetop profile --torch); default: from\nthe traces, one layer "
         "per stage"},
        {"topology", PT_OPT_STRING, &a->topology, 0, 0, 0, "T",
         "the machines it ran on (default: a local topology)"},
        {"model", PT_OPT_STRING, &a->model, 0, 0, 0, "NAME",
         "the model's name without --plan (default torch)"},
        {"microbatch", PT_OPT_INT, &a->microbatch, 1, PT_PROFILE_BATCH_MAX, 0, "N",
         "samples per micro-batch without --plan (default 1)"},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    char *argv2[2 * IMPORT_TRACES_MAX];
    int argc2 = argc < IMPORT_TRACES_MAX ? split_args(argc, argv, opts, n, a, argv2) : -1;
    if (argc2 < 0)
        return 2;
    int rc = pt_opts_command("import-trace", argc2, argv2, opts, n, usage_text, NULL);
    if (rc >= 0)
        return rc;
    a->nfiles++;
    if (!a->out) {
        fprintf(stderr, "pipetop import-trace: --out RUN_DIR is required\n");
        return 2;
    }
    return -1;
}

/* --rank "0,1,..." into ranks[0..nfiles) (-1 each without it); -1 after
 * saying why. */
static int parse_ranks(const import_args *a, int *ranks)
{
    for (int i = 0; i < a->nfiles; i++)
        ranks[i] = -1;
    if (!a->ranks)
        return 0;
    const char *s = a->ranks;
    int n = 0;
    for (;;) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= IMPORT_TRACES_MAX || (*end && *end != ',') ||
            n == a->nfiles) {
            fprintf(stderr,
                    "pipetop import-trace: --rank %s: one integer in [0, %d) per trace (%d "
                    "traces)\n",
                    a->ranks, IMPORT_TRACES_MAX, a->nfiles);
            return -1;
        }
        ranks[n++] = (int)v;
        if (!*end)
            break;
        s = end + 1;
    }
    if (n != a->nfiles) {
        fprintf(stderr, "pipetop import-trace: --rank %s names %d ranks for %d traces\n", a->ranks,
                n, a->nfiles);
        return -1;
    }
    return 0;
}

static int read_traces(const import_args *a, const pt_tt_labels *lab, pt_tt_trace *t, pt_error *err)
{
    int ranks[IMPORT_TRACES_MAX];
    if (parse_ranks(a, ranks) < 0)
        return pt_error_set(err, PT_EINVAL, "--rank: see above");
    for (int i = 0; i < a->nfiles; i++) {
        char *text = NULL;
        size_t len = 0;
        int rc = pt_file_read(a->files[i], &text, &len, err);
        if (rc == 0)
            rc = pt_tt_parse(text, len, a->files[i], lab, ranks[i], &t[i], err);
        free(text);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The plan and profile: given (and checked against the traces), or made
 * from them. */
static int plan_and_profile(const import_args *a, const pt_ti_run *run, pt_plan **plan,
                            pt_profile **prof, pt_error *err)
{
    char why[IMPORT_WHY_CAP];
    int rc = 0;
    if (a->plan) {
        if ((rc = pt_plan_load(a->plan, plan, err)) == 0)
            rc = pt_ti_check_plan(run, *plan, a->plan, err);
    } else if ((rc = pt_ti_infer_plan(run, a->model ? a->model : "torch",
                                      a->microbatch > 0 ? a->microbatch : 1, plan, why, sizeof why,
                                      err)) == 0) {
        printf("plan inferred from the labels: %s (give --plan for the plan the run ran)\n", why);
    }
    if (rc == 0 && a->profile) {
        if ((rc = pt_profile_load(a->profile, prof, err)) == 0 &&
            ((*prof)->layer_count != (*plan)->layer_count ||
             strcmp((*prof)->model, (*plan)->model)))
            rc = pt_error_set(err, PT_EINVAL,
                              "%s: a profile of %s (%d layers), the plan is of %s (%d)", a->profile,
                              (*prof)->model, (*prof)->layer_count, (*plan)->model,
                              (*plan)->layer_count);
    } else if (rc == 0) {
        rc = pt_ti_profile(run, *plan, prof, err);
    }
    return rc;
}

/* RUN_DIR: plan.json, profile.json, topology.json (when given), run.ndjson. */
static int write_run(const import_args *a, const pt_ti_run *run, const pt_plan *plan,
                     const pt_profile *prof, pt_error *err)
{
    char path[IMPORT_PATH_CAP + 32];
    struct stat st;
    snprintf(path, sizeof path, "%.4000s/%s", a->out, PT_RECORD_FILE);
    if (stat(path, &st) == 0)
        return pt_error_set(err, PT_EINVAL, "%s exists: import into a new folder", path);
    int rc = pt_mkdir_p(a->out, err);
    pt_topology *topo = NULL;
    if (rc == 0 && a->topology) {
        char tp[PT_DATADIR_PATH_MAX];
        rc = pt_topology_load(pt_datadir_resolve("topologies", a->topology, ".json", tp, sizeof tp),
                              &topo, err);
        if (rc == 0)
            rc = pt_plan_check(plan, NULL, topo, "plan", err);
        snprintf(path, sizeof path, "%.4000s/topology.json", a->out);
        if (rc == 0)
            rc = pt_topology_save(topo, path, err);
        pt_topology_free(&topo);
    }
    snprintf(path, sizeof path, "%.4000s/plan.json", a->out);
    if (rc == 0)
        rc = pt_plan_save(plan, path, err);
    snprintf(path, sizeof path, "%.4000s/profile.json", a->out);
    if (rc == 0)
        rc = pt_profile_save(prof, path, err);
    snprintf(path, sizeof path, "%.4000s/%s", a->out, PT_RECORD_FILE);
    return rc == 0 ? pt_ti_write_record(run, plan, prof, path, err) : rc;
}

static void print_summary(const import_args *a, const pt_ti_run *run)
{
    for (int r = 0; r < run->ranks; r++)
        printf("rank %d: %s: %lld events, %d labelled ops, %s clock%s, offset %+.1f us "
               "(hand-offs allow [%.1f, %.1f])\n",
               r, run->names[r], (long long)run->traces[r].events, run->traces[r].op_count,
               run->traces[r].kineto ? "Kineto" : "autograd profiler",
               run->traces[r].step_count ? ", ProfilerStep iterations" : "", run->offset_us[r],
               run->lo_us[r], run->hi_us[r]);
    for (int s = 0; s < run->stages; s++) {
        int64_t ops = 0;
        double busy = pt_ti_busy_us(run, s, &ops);
        printf("stage %d on rank %d: %lld ops, busy %.3f ms\n", s, run->owner[s], (long long)ops,
               busy / 1e3);
    }
    printf("wrote %s: %lld iterations of %d stages on %d ranks\n", a->out, (long long)run->steps,
           run->stages, run->ranks);
}

int pt_cmd_import_trace(int argc, char **argv)
{
    import_args a;
    memset(&a, 0, sizeof a);
    int st = parse(argc, argv, &a);
    if (st >= 0)
        return st;
    pt_error err = {0};
    pt_tt_labels lab;
    pt_tt_trace *t = calloc((size_t)a.nfiles, sizeof *t);
    pt_ti_run run;
    memset(&run, 0, sizeof run);
    pt_plan *plan = NULL;
    pt_profile *prof = NULL;
    int rc =
        t ? pt_tt_labels_init(&lab, a.label, &err) : pt_error_set(&err, PT_ENOMEM, "no memory");
    int labels = rc == 0;
    if (rc == 0)
        rc = read_traces(&a, &lab, t, &err);
    if (rc == 0 && (rc = pt_ti_gather(&run, t, a.files, a.nfiles, &err)) == 0)
        pt_ti_align(&run);
    if (rc == 0)
        rc = plan_and_profile(&a, &run, &plan, &prof, &err);
    if (rc == 0)
        rc = write_run(&a, &run, plan, prof, &err);
    if (rc == 0)
        print_summary(&a, &run);
    else
        fprintf(stderr, "pipetop import-trace: %s\n", err.msg);
    pt_plan_free(&plan);
    pt_profile_free(&prof);
    pt_ti_release(&run);
    for (int i = 0; t && i < a.nfiles; i++)
        pt_tt_trace_free(&t[i]);
    free(t);
    if (labels)
        pt_tt_labels_free(&lab);
    return rc < 0 ? 1 : 0;
}

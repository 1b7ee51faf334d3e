/* pipetop export-plan PLAN --to torch|torchtitan|deepspeed|megatron: a plan
 * in a PyTorch framework's terms (tui/cli/plan_export.h, docs/torch.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/opts.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "tui/cli/commands.h"
#include "tui/cli/plan_export.h"

#define EXPORT_PATH_CAP 4096

static const char usage_text[] =
    "usage: pipetop export-plan PLAN --to torch|torchtitan|deepspeed|megatron\n"
    "                           [--profile P] [--out FILE] [--csv FILE] [--flatten]\n"
    "Writes a plan in the terms of a PyTorch pipeline framework: split points by\n"
    "fully qualified module name and the per-rank schedule CSV (torch: a JSON file;\n"
    "torchtitan: a TOML [parallelism] table), PipelineModule's parts and the subclass\n"
    "that sets them (deepspeed: a Python file), or the pipeline layout (megatron:\n"
    "command-line arguments). What the framework cannot express is refused, naming\n"
    "the plan's field and the framework's limit; --flatten changes the plan until it\n"
    "can and says each change. The layers' names come from the profile of\n"
    "pipetop profile --torch. See docs/torch.md.\n\n";

typedef struct export_args {
    const char *plan, *to, *profile, *out, *csv;
    int flatten;
} export_args;

/* The CSV's path: --csv, else --out with its extension replaced by .csv. */
static int csv_path(const export_args *a, char *out, size_t cap)
{
    if (a->csv) {
        snprintf(out, cap, "%s", a->csv);
        return 0;
    }
    if (!a->out)
        return -1;
    snprintf(out, cap, "%s", a->out);
    char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    if (dot && (!slash || dot > slash))
        *dot = '\0';
    strncat(out, ".csv", cap - strlen(out) - 1);
    return 0;
}

static int write_main(pt_fw fw, const pt_plan *p, const pt_profile *prof, const char *csv,
                      const char *path, pt_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = pt_fw_write(fw, p, prof, csv, f, err);
    fclose(f);
    if (rc == 0 && path)
        rc = pt_file_write_atomic(path, buf, len, err);
    else if (rc == 0)
        fputs(buf, stdout);
    free(buf);
    return rc;
}

static int run(const export_args *a, pt_fw fw, pt_error *err)
{
    pt_plan *plan = NULL, *fit = NULL;
    pt_profile *prof = NULL;
    pt_fw_changes ch;
    char csv[EXPORT_PATH_CAP + 8] = "";
    char *csv_text = NULL;
    int torchy = fw == PT_FW_TORCH || fw == PT_FW_TORCHTITAN;
    int rc = pt_plan_load(a->plan, &plan, err);
    if (rc == 0 && a->profile)
        rc = pt_profile_load(a->profile, &prof, err);
    if (rc == 0)
        rc = pt_fw_fit(fw, plan, prof, a->flatten, &fit, &ch, err);
    if (rc == 0 && torchy && csv_path(a, csv, sizeof csv) < 0)
        rc = pt_error_set(err, PT_EINVAL,
                          "--to %s writes a schedule CSV beside its file: give --out FILE (the "
                          "CSV goes to FILE.csv) or --csv FILE",
                          pt_fw_name(fw));
    if (rc == 0 && torchy && (rc = pt_fw_schedule_csv(fit, &csv_text, err)) == 0)
        rc = pt_file_write_atomic(csv, csv_text, strlen(csv_text), err);
    if (rc == 0)
        rc = write_main(fw, fit, prof, csv, a->out, err);
    FILE *say = a->out ? stdout : stderr;
    for (int i = 0; rc == 0 && i < ch.count; i++)
        fprintf(say, "--flatten: %s\n", ch.line[i]);
    if (rc == 0 && a->out)
        printf("wrote %s%s%s: %d stages on %d pipeline ranks, %s, %d micro-batches of %d\n", a->out,
               csv[0] ? " and " : "", csv, fit->stage_count, pt_plan_rank_count(fit),
               pt_sched_kind_name(fit->schedule), fit->microbatch_count, fit->microbatch_size);
    free(csv_text);
    pt_plan_free(&fit);
    pt_plan_free(&plan);
    pt_profile_free(&prof);
    return rc;
}

int pt_cmd_export_plan(int argc, char **argv)
{
    export_args a = {0};
    pt_opt opts[] = {
        {"PLAN", PT_OPT_ARG, &a.plan, 1, 1, 0, NULL, "the plan (pipetop plan --out)"},
        {"to", PT_OPT_STRING, &a.to, 0, 0, 0, "FW", "torch, torchtitan, deepspeed or megatron"},
        {"profile", PT_OPT_STRING, &a.profile, 0, 0, 0, "P",
         "the profile the plan was made from (layer names; needed by\ntorch, torchtitan and "
         "megatron)"},
        {"out", PT_OPT_STRING, &a.out, 0, 0, 0, "FILE", "write the framework's file here"},
        {"csv", PT_OPT_STRING, &a.csv, 0, 0, 0, "FILE",
         "torch, torchtitan: the schedule CSV (default FILE.csv of --out)"},
        {"flatten", PT_OPT_FLAG, &a.flatten, 0, 0, 0, NULL,
         "change what the framework cannot express into what it can,\nsaying each change"},
    };
    int st = pt_opts_command("export-plan", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (st >= 0)
        return st;
    pt_error err = {0};
    pt_fw fw;
    if (!a.to) {
        fprintf(stderr, "pipetop export-plan: --to FW is required (torch, torchtitan, deepspeed, "
                        "megatron)\n");
        return 2;
    }
    if (pt_fw_parse(a.to, &fw, &err) < 0) {
        fprintf(stderr, "pipetop export-plan: %s\n", err.msg);
        return 2;
    }
    if (run(&a, fw, &err) < 0) {
        fprintf(stderr, "pipetop export-plan: %s: %s\n", a.plan, err.msg);
        return 1;
    }
    return 0;
}

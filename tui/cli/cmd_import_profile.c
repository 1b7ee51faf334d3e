/* pipetop import-profile GRAPH.txt: converts a PipeDream profile (graph.txt)
 * into pipetop's JSON profile, linearising its DAG (protocol/pipedream_profile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/pipedream_profile.h"
#include "protocol/profile.h"
#include "protocol/opts.h"
#include "tui/cli/commands.h"

static const char usage_text[] =
    "usage: pipetop import-profile GRAPH.txt [--microbatch N] [--model NAME] [--device NAME]\n"
    "                              [--out PROFILE.json]\n"
    "Reads a profile in PipeDream's graph.txt format (the one PipeDream's and DAPPLE's\n"
    "planners read), orders its nodes topologically and writes a pipetop profile: one\n"
    "layer per node, Input nodes folded into input_bytes, and each layer's act_bytes the\n"
    "bytes that cross a stage boundary after it. Without --out the JSON goes to stdout.\n";

int pt_cmd_import_profile(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    pt_pipedream_options opt = {0};
    pt_opt opts[] = {
        {"GRAPH.txt", PT_OPT_ARG, &in, 1, 1, 0, NULL, "the PipeDream profile to convert"},
        {"microbatch", PT_OPT_INT, &opt.microbatch, 1, PT_PROFILE_BATCH_MAX, 0, "N",
         "samples the times were measured for (graph.txt does not say;\ndefault 1)"},
        {"model", PT_OPT_STRING, &opt.model, 0, 0, 0, "NAME",
         "model name (default: the file name without .graph.txt)"},
        {"device", PT_OPT_STRING, &opt.device, 0, 0, 0, "NAME",
         "device the times are from (default: unknown)"},
        {"out", PT_OPT_STRING, &out, 0, 0, 0, "FILE",
         "write the profile there and print a summary"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int status = pt_opts_command("import-profile", argc, argv, opts, n, usage_text, NULL);
    if (status >= 0)
        return status;
    int given_mb = pt_opts_find(opts, n, "microbatch")->seen;
    pt_profile *p = NULL;
    pt_pipedream_stats st = {0};
    pt_error err = {0};
    if (pt_pipedream_load(in, &opt, &p, &st, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (!given_mb)
        fprintf(stderr,
                "pipetop import-profile: note: %s does not say its batch size; assuming "
                "--microbatch %d\n",
                in, p->microbatch);
    int rc = 0;
    if (out) {
        if (pt_profile_save(p, out, &err) < 0) {
            fprintf(stderr, "%s\n", err.msg);
            rc = 1;
        } else {
            printf("%s: %d nodes (%d inputs), %d edges -> %d layers at micro-batch %d; wrote %s\n",
                   in, st.nodes, st.inputs, st.edges, p->layer_count, p->microbatch, out);
        }
    } else {
        char *json = pt_profile_to_json(p);
        if (!json) {
            fprintf(stderr, "pipetop import-profile: out of memory\n");
            rc = 1;
        } else {
            fputs(json, stdout);
            free(json);
        }
    }
    pt_profile_free(&p);
    return rc;
}

/* pipetop import-profile GRAPH.txt: converts a PipeDream profile (graph.txt)
 * into pipetop's JSON profile, linearising its DAG (protocol/pipedream_profile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/pipedream_profile.h"
#include "protocol/profile.h"
#include "tui/commands.h"

static const char usage_text[] =
    "usage: pipetop import-profile GRAPH.txt [--microbatch N] [--model NAME] [--device NAME]\n"
    "                              [--out PROFILE.json]\n"
    "Reads a profile in PipeDream's graph.txt format (the one PipeDream's and DAPPLE's\n"
    "planners read), orders its nodes topologically and writes a pipetop profile: one\n"
    "layer per node, Input nodes folded into input_bytes, and each layer's act_bytes the\n"
    "bytes that cross a stage boundary after it. Without --out the JSON goes to stdout.\n"
    "  --microbatch N  samples the times were measured for (graph.txt does not say;\n"
    "                  default 1)\n"
    "  --model NAME    model name (default: the file name without .graph.txt)\n"
    "  --device NAME   device the times are from (default: unknown)\n"
    "  --out FILE      write the profile there and print a summary\n";

/* Takes "--name VALUE" or "--name=VALUE" at argv[*i]; NULL when argv[*i] is
 * not that option. */
static const char *option(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n))
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n])
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int pt_cmd_import_profile(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *v;
    pt_pipedream_options opt = {0};
    int given_mb = 0;
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if ((v = option(argc, argv, &i, "--microbatch", &missing))) {
            char *end;
            long mb = strtol(v, &end, 10);
            if (*end || end == v || mb < 1 || mb > PT_PROFILE_BATCH_MAX) {
                fprintf(stderr, "pipetop import-profile: --microbatch: '%s' is not in 1..%d\n", v,
                        PT_PROFILE_BATCH_MAX);
                return 2;
            }
            opt.microbatch = (int)mb;
            given_mb = 1;
        } else if ((v = option(argc, argv, &i, "--model", &missing))) {
            opt.model = v;
        } else if ((v = option(argc, argv, &i, "--device", &missing))) {
            opt.device = v;
        } else if ((v = option(argc, argv, &i, "--out", &missing))) {
            out = v;
        } else if (missing) {
            fprintf(stderr, "pipetop import-profile: %s needs a value\n", argv[i]);
            return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "pipetop import-profile: unknown option '%s'\n%s", argv[i], usage_text);
            return 2;
        } else if (!in) {
            in = argv[i];
        } else {
            fprintf(stderr, "pipetop import-profile: more than one input file\n%s", usage_text);
            return 2;
        }
    }
    if (!in) {
        fputs(usage_text, stderr);
        return 2;
    }
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

/* pipetop export-profile PROFILE.json: writes a pipetop profile in PipeDream's
 * graph.txt format, as a chain, so PipeDream's and DAPPLE's planners can read
 * the same input (protocol/pipedream_profile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/pipedream_profile.h"
#include "protocol/profile.h"
#include "tui/commands.h"

static const char usage_text[] =
    "usage: pipetop export-profile PROFILE.json [--out GRAPH.txt]\n"
    "Writes the profile in PipeDream's graph.txt format: an Input node holding\n"
    "input_bytes, then one node per layer, each with an edge to the next. The\n"
    "micro-batch size, model and device names and recompute_ms are not part of that\n"
    "format. Without --out the text goes to stdout.\n";

int pt_cmd_export_profile(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strncmp(argv[i], "--out=", 6)) {
            out = argv[i] + 6;
        } else if (!strcmp(argv[i], "--out")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "pipetop export-profile: --out needs a value\n");
                return 2;
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "pipetop export-profile: unknown option '%s'\n%s", argv[i], usage_text);
            return 2;
        } else if (!in) {
            in = argv[i];
        } else {
            fprintf(stderr, "pipetop export-profile: more than one input file\n%s", usage_text);
            return 2;
        }
    }
    if (!in) {
        fputs(usage_text, stderr);
        return 2;
    }
    pt_profile *p = NULL;
    pt_error err = {0};
    if (pt_profile_load(in, &p, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < p->layer_count; i++)
        if (p->layers[i].recompute_ms != p->layers[i].fwd_ms) {
            fprintf(stderr,
                    "pipetop export-profile: note: graph.txt has no recompute time; "
                    "recompute_ms of %s (and others) is dropped\n",
                    p->layers[i].name);
            break;
        }
    int rc = 0;
    if (out) {
        if (pt_pipedream_save(p, out, &err) < 0) {
            fprintf(stderr, "%s\n", err.msg);
            rc = 1;
        }
    } else {
        char *text = pt_pipedream_to_text(p);
        if (!text) {
            fprintf(stderr, "pipetop export-profile: out of memory\n");
            rc = 1;
        } else {
            fputs(text, stdout);
            free(text);
        }
    }
    pt_profile_free(&p);
    return rc;
}

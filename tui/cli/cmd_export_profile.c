/* pipetop export-profile PROFILE.json: writes a pipetop profile in PipeDream's
 * graph.txt format, as a chain, so PipeDream's and DAPPLE's planners can read
 * the same input (protocol/pipedream_profile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/pipedream_profile.h"
#include "protocol/profile.h"
#include "protocol/opts.h"
#include "tui/cli/commands.h"

static const char usage_text[] =
    "usage: pipetop export-profile PROFILE.json [--out GRAPH.txt]\n"
    "Writes the profile in PipeDream's graph.txt format: an Input node holding\n"
    "input_bytes, then one node per layer, each with an edge to the next. The\n"
    "micro-batch size, model and device names and recompute_ms are not part of that\n"
    "format. Without --out the text goes to stdout.\n";

int pt_cmd_export_profile(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    pt_opt opts[] = {
        {"PROFILE.json", PT_OPT_ARG, &in, 1, 1, 0, NULL, "the profile to convert"},
        {"out", PT_OPT_STRING, &out, 0, 0, 0, "GRAPH.txt", "write the graph there"},
    };
    int st = pt_opts_command("export-profile", argc, argv, opts,
                             (int)(sizeof opts / sizeof opts[0]), usage_text, NULL);
    if (st >= 0)
        return st;
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

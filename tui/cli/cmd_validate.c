/* pipetop validate KIND FILE: checks a format file and prints the error a
 * user would get, so formats can be checked before a long run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "protocol/opts.h"
#include "tui/cli/commands.h"

int pt_cmd_validate(int argc, char **argv)
{
    const char *kind = NULL, *path = NULL;
    pt_opt opts[] = {
        {"KIND", PT_OPT_ARG, &kind, 1, 1, 0, NULL, "model, profile, topology or plan"},
        {"FILE", PT_OPT_ARG, &path, 1, 1, 0, NULL, "the file to check"},
    };
    int rc = pt_opts_command("validate", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             "usage: pipetop validate model|profile|topology|plan FILE\n"
                             "Checks FILE against its format and prints what is wrong with it.\n",
                             NULL);
    if (rc >= 0)
        return rc;
    pt_error err = {0};
    if (!strcmp(kind, "model")) {
        pt_model_spec *m = NULL;
        rc = pt_model_spec_load(path, &m, &err);
        pt_model_spec_free(&m);
    } else if (!strcmp(kind, "profile")) {
        pt_profile *p = NULL;
        rc = pt_profile_load(path, &p, &err);
        pt_profile_free(&p);
    } else if (!strcmp(kind, "topology")) {
        pt_topology *t = NULL;
        rc = pt_topology_load(path, &t, &err);
        pt_topology_free(&t);
    } else if (!strcmp(kind, "plan")) {
        pt_plan *p = NULL;
        rc = pt_plan_load(path, &p, &err);
        pt_plan_free(&p);
    } else {
        fprintf(stderr, "pipetop validate: unknown kind '%s' (model, profile, topology, plan)\n",
                kind);
        return 2;
    }
    if (rc < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("%s: ok\n", path);
    return 0;
}

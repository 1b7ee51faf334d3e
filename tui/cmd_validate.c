/* pipetop validate KIND FILE: checks a format file and prints the error a
 * user would get, so formats can be checked before a long run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tui/commands.h"

int pt_cmd_validate(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: pipetop validate model|profile|topology|plan FILE\n"
               "Checks FILE against its format and prints what is wrong with it.\n");
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: pipetop validate model|profile|topology|plan FILE\n");
        return 2;
    }
    pt_error err = {0};
    int rc;
    const char *kind = argv[1], *path = argv[2];
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

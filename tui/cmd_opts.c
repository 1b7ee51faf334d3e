#include "tui/cmd_opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const pt_opt *pt_opts_find(const pt_opt *opts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(opts[i].name, name))
            return &opts[i];
    return NULL;
}

static int set_value(const char *cmd, pt_opt *o, const char *v, FILE *err)
{
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case PT_OPT_STRING:
        if (!*v) {
            fprintf(err, "pipetop %s: --%s needs a non-empty value\n", cmd, o->name);
            return PT_OPTS_USAGE;
        }
        *(const char **)o->out = v;
        return PT_OPTS_OK;
    case PT_OPT_INT:
    case PT_OPT_INT64: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) {
            fprintf(err, "pipetop %s: --%s needs an integer, got '%s'\n", cmd, o->name, v);
            return PT_OPTS_USAGE;
        }
        if ((double)x < o->min || (double)x > o->max) {
            fprintf(err, "pipetop %s: --%s must be in [%.0f, %.0f], got %lld\n", cmd, o->name,
                    o->min, o->max, x);
            return PT_OPTS_USAGE;
        }
        if (o->type == PT_OPT_INT)
            *(int *)o->out = (int)x;
        else
            *(int64_t *)o->out = (int64_t)x;
        return PT_OPTS_OK;
    }
    case PT_OPT_DOUBLE: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) {
            fprintf(err, "pipetop %s: --%s needs a number, got '%s'\n", cmd, o->name, v);
            return PT_OPTS_USAGE;
        }
        if (x < o->min || x > o->max) {
            fprintf(err, "pipetop %s: --%s must be in [%g, %g], got %g\n", cmd, o->name, o->min,
                    o->max, x);
            return PT_OPTS_USAGE;
        }
        *(double *)o->out = x;
        return PT_OPTS_OK;
    }
    case PT_OPT_FLAG:
        break;
    }
    return PT_OPTS_USAGE;
}

int pt_opts_parse(const char *cmd, int argc, char **argv, pt_opt *opts, int n, FILE *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return PT_OPTS_HELP;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) || !a[2]) {
            fprintf(err, "pipetop %s: unexpected argument '%s' (see pipetop %s --help)\n", cmd, a,
                    cmd);
            return PT_OPTS_USAGE;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        pt_opt *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len))
                o = &opts[k];
        if (!o) {
            fprintf(err, "pipetop %s: unknown option '--%.*s' (see pipetop %s --help)\n", cmd,
                    (int)len, name, cmd);
            return PT_OPTS_USAGE;
        }
        if (o->seen) {
            fprintf(err, "pipetop %s: --%s given twice\n", cmd, o->name);
            return PT_OPTS_USAGE;
        }
        o->seen = 1;
        if (o->type == PT_OPT_FLAG) {
            if (eq) {
                fprintf(err, "pipetop %s: --%s takes no value\n", cmd, o->name);
                return PT_OPTS_USAGE;
            }
            *(int *)o->out = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(err, "pipetop %s: --%s needs a value\n", cmd, o->name);
                return PT_OPTS_USAGE;
            }
            v = argv[++i];
        }
        int rc = set_value(cmd, o, v, err);
        if (rc != PT_OPTS_OK)
            return rc;
    }
    return PT_OPTS_OK;
}

#include "protocol/opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* The widest "--name ARG" that still aligns the help column. */
#define HELP_COLUMN_MAX 24
#define PROG_MAX        128

static pt_opts_observer g_observer;
static void *g_observer_ctx;

void pt_opts_observe(pt_opts_observer fn, void *ctx)
{
    g_observer = fn;
    g_observer_ctx = ctx;
}

const pt_opt *pt_opts_find(const pt_opt *opts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(opts[i].name, name))
            return &opts[i];
    return NULL;
}

static int set_value(const char *prog, pt_opt *o, const char *v, FILE *err)
{
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case PT_OPT_STRING:
        if (!*v) {
            fprintf(err, "%s: --%s needs a non-empty value\n", prog, o->name);
            return PT_OPTS_USAGE;
        }
        *(const char **)o->out = v;
        return PT_OPTS_OK;
    case PT_OPT_INT:
    case PT_OPT_INT64: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) {
            fprintf(err, "%s: --%s needs an integer, got '%s'\n", prog, o->name, v);
            return PT_OPTS_USAGE;
        }
        if ((double)x < o->min || (double)x > o->max) {
            fprintf(err, "%s: --%s must be in [%.0f, %.0f], got %lld\n", prog, o->name, o->min,
                    o->max, x);
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
            fprintf(err, "%s: --%s needs a number, got '%s'\n", prog, o->name, v);
            return PT_OPTS_USAGE;
        }
        if (x < o->min || x > o->max) {
            fprintf(err, "%s: --%s must be in [%g, %g], got %g\n", prog, o->name, o->min, o->max,
                    x);
            return PT_OPTS_USAGE;
        }
        *(double *)o->out = x;
        return PT_OPTS_OK;
    }
    case PT_OPT_FLAG:
    case PT_OPT_ARG:
        break;
    }
    return PT_OPTS_USAGE;
}

static int is_option(const char *a)
{
    return a[0] == '-' && a[1];
}

int pt_opts_parse_program(const char *prog, int argc, char **argv, pt_opt *opts, int n, FILE *err)
{
    if (g_observer)
        g_observer(prog, opts, n, g_observer_ctx);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return PT_OPTS_HELP;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!is_option(a)) {
            pt_opt *slot = NULL;
            for (int k = 0; k < n && !slot; k++)
                if (opts[k].type == PT_OPT_ARG && !opts[k].seen)
                    slot = &opts[k];
            if (!slot) {
                fprintf(err, "%s: unexpected argument '%s' (see %s --help)\n", prog, a, prog);
                return PT_OPTS_USAGE;
            }
            slot->seen = 1;
            *(const char **)slot->out = a;
            continue;
        }
        if (strncmp(a, "--", 2) || !a[2]) {
            fprintf(err, "%s: unexpected argument '%s' (see %s --help)\n", prog, a, prog);
            return PT_OPTS_USAGE;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        pt_opt *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (opts[k].type != PT_OPT_ARG && strlen(opts[k].name) == len &&
                !strncmp(opts[k].name, name, len))
                o = &opts[k];
        if (!o) {
            fprintf(err, "%s: unknown option '--%.*s' (see %s --help)\n", prog, (int)len, name,
                    prog);
            return PT_OPTS_USAGE;
        }
        if (o->seen) {
            fprintf(err, "%s: --%s given twice\n", prog, o->name);
            return PT_OPTS_USAGE;
        }
        o->seen = 1;
        if (o->type == PT_OPT_FLAG) {
            if (eq) {
                fprintf(err, "%s: --%s takes no value\n", prog, o->name);
                return PT_OPTS_USAGE;
            }
            *(int *)o->out = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(err, "%s: --%s needs a value\n", prog, o->name);
                return PT_OPTS_USAGE;
            }
            v = argv[++i];
        }
        int rc = set_value(prog, o, v, err);
        if (rc != PT_OPTS_OK)
            return rc;
    }
    for (int k = 0; k < n; k++)
        if (opts[k].type == PT_OPT_ARG && opts[k].min >= 1 && !opts[k].seen) {
            fprintf(err, "%s: %s is required (see %s --help)\n", prog, opts[k].name, prog);
            return PT_OPTS_USAGE;
        }
    return PT_OPTS_OK;
}

int pt_opts_parse(const char *cmd, int argc, char **argv, pt_opt *opts, int n, FILE *err)
{
    char prog[PROG_MAX];
    snprintf(prog, sizeof prog, "pipetop %s", cmd);
    return pt_opts_parse_program(prog, argc, argv, opts, n, err);
}

static const char *arg_name(const pt_opt *o)
{
    if (o->arg)
        return o->arg;
    switch (o->type) {
    case PT_OPT_INT:
    case PT_OPT_INT64:
        return "N";
    case PT_OPT_DOUBLE:
        return "X";
    case PT_OPT_STRING:
        return "S";
    case PT_OPT_FLAG:
    case PT_OPT_ARG:
        break;
    }
    return "";
}

/* "--name ARG" (or the positional's name) into buf; its length. */
static int left_part(const pt_opt *o, char *buf, size_t cap)
{
    int w;
    if (o->type == PT_OPT_ARG)
        w = snprintf(buf, cap, "%s", o->name);
    else if (o->type == PT_OPT_FLAG)
        w = snprintf(buf, cap, "--%s", o->name);
    else
        w = snprintf(buf, cap, "--%s %s", o->name, arg_name(o));
    return w < 0 ? 0 : w;
}

void pt_opts_help(FILE *out, const char *usage, const pt_opt *opts, int n, const char *tail)
{
    if (usage)
        fputs(usage, out);
    char left[PROG_MAX];
    int col = 0;
    for (int k = 0; k < n; k++) {
        int w = opts[k].help ? left_part(&opts[k], left, sizeof left) : 0;
        if (w <= HELP_COLUMN_MAX && w > col)
            col = w;
    }
    for (int k = 0; k < n; k++) {
        if (!opts[k].help)
            continue;
        int w = left_part(&opts[k], left, sizeof left);
        fprintf(out, "  %s%*s", left, w < col ? col - w + 2 : 2, "");
        for (const char *h = opts[k].help; *h;) {
            const char *nl = strchr(h, '\n');
            int len = nl ? (int)(nl - h) : (int)strlen(h);
            fprintf(out, "%.*s\n", len, h);
            if (!nl)
                break;
            h = nl + 1;
            if (*h)
                fprintf(out, "  %*s", col + 2, "");
        }
    }
    if (tail)
        fputs(tail, out);
}

/* A usage error of a command run with --json: {"error":"usage",...} on one
 * line, the reason without the "pipetop CMD: " prefix text output has. */
static void usage_error_json(const char *cmd, const char *text)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "pipetop %s: ", cmd);
    if (!strncmp(text, prefix, strlen(prefix)))
        text += strlen(prefix);
    cJSON *o = cJSON_CreateObject();
    char *msg = strdup(text);
    if (msg) {
        size_t len = strlen(msg);
        while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
            msg[--len] = 0;
        for (char *c = msg; *c; c++)
            if (*c == '\n')
                *c = ' ';
    }
    cJSON_AddStringToObject(o, "error", "usage");
    cJSON_AddStringToObject(o, "command", cmd);
    cJSON_AddStringToObject(o, "message", msg ? msg : "usage error");
    char *t = cJSON_PrintUnformatted(o);
    if (t)
        fprintf(stderr, "%s\n", t);
    free(t);
    free(msg);
    cJSON_Delete(o);
}

int pt_opts_command(const char *cmd, int argc, char **argv, pt_opt *opts, int n, const char *usage,
                    const char *tail)
{
    int json = 0;
    for (int i = 1; i < argc; i++)
        json |= !strcmp(argv[i], "--json");
    if (json) {
        char *buf = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&buf, &len);
        int rc = mem ? pt_opts_parse(cmd, argc, argv, opts, n, mem) : PT_OPTS_USAGE;
        if (mem)
            fclose(mem);
        if (rc == PT_OPTS_USAGE)
            usage_error_json(cmd, buf ? buf : "");
        free(buf);
        if (rc == PT_OPTS_HELP) {
            pt_opts_help(stdout, usage, opts, n, tail);
            return 0;
        }
        return rc == PT_OPTS_OK ? -1 : 2;
    }
    int rc = pt_opts_parse(cmd, argc, argv, opts, n, stderr);
    if (rc == PT_OPTS_HELP) {
        pt_opts_help(stdout, usage, opts, n, tail);
        return 0;
    }
    return rc == PT_OPTS_OK ? -1 : 2;
}

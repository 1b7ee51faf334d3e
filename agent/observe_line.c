/* The Monitor's lines (see observe_line.h). */
#include "agent/observe_line.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/op.h"

#define FIELDS_MAX 8
#define INT_DIGITS 19 /* the most an int64 has */

static const struct {
    const char *name;
    int op;
} kinds[] = {
    {"F", PT_OP_FWD},
    {"B", PT_OP_BWD},
    {"I", PT_OP_BWD_INPUT},
    {"W", PT_OP_BWD_WEIGHT},
    {"SEND_F", PT_OP_SEND_ACT},
    {"RECV_F", PT_OP_RECV_ACT},
    {"SEND_B", PT_OP_SEND_GRAD},
    {"RECV_B", PT_OP_RECV_GRAD},
};

/* Splits buf (a NUL-terminated copy) at single spaces. -1 on an empty
 * field (two spaces, a leading or trailing one). */
static int split(char *buf, char **f, int cap)
{
    int n = 0;
    for (char *p = buf;;) {
        if (n == cap)
            return cap + 1;
        f[n++] = p;
        char *sp = strchr(p, ' ');
        if (sp == p || (sp && sp[1] == '\0') || *p == '\0')
            return -1;
        if (!sp)
            return n;
        *sp = '\0';
        p = sp + 1;
    }
}

static int integer(const char *s, int64_t max, const char *what, const char *field, int64_t *out,
                   pt_error *err)
{
    size_t n = strlen(s);
    int ok = n > 0 && n <= INT_DIGITS;
    for (size_t i = 0; ok && i < n; i++)
        ok = s[i] >= '0' && s[i] <= '9';
    errno = 0;
    long long v = ok ? strtoll(s, NULL, 10) : 0;
    if (!ok || errno)
        return pt_error_set(err, PT_EINVAL, "%s: %s: \"%.32s\" is not a non-negative integer", what,
                            field, s);
    if (v >= max)
        return pt_error_set(err, PT_EINVAL, "%s: %s: %lld is not below %lld", what, field, v,
                            (long long)max);
    *out = v;
    return 0;
}

static int parse_op(char **f, int n, pt_obs_line *o, pt_error *err)
{
    if (n != 7)
        return pt_error_set(err, PT_EINVAL,
                            "op: %d fields; op STEP STAGE KIND MB START_NS END_NS has 7", n);
    int64_t stage, mb;
    int rc;
    if ((rc = integer(f[1], INT64_MAX, "op", "STEP", &o->step, err)) < 0 ||
        (rc = integer(f[2], PT_OBS_STAGE_MAX, "op", "STAGE", &stage, err)) < 0 ||
        (rc = integer(f[4], PT_OBS_MB_MAX, "op", "MB", &mb, err)) < 0 ||
        (rc = integer(f[5], INT64_MAX, "op", "START_NS", &o->start_ns, err)) < 0 ||
        (rc = integer(f[6], INT64_MAX, "op", "END_NS", &o->end_ns, err)) < 0)
        return rc;
    o->op = -1;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (!strcmp(f[3], kinds[k].name))
            o->op = kinds[k].op;
    if (o->op < 0)
        return pt_error_set(err, PT_EINVAL,
                            "op: KIND: \"%.16s\" is none of F, B, I, W, SEND_F, RECV_F, SEND_B, "
                            "RECV_B",
                            f[3]);
    if (o->end_ns < o->start_ns)
        return pt_error_set(err, PT_EINVAL, "op: END_NS: %lld is before START_NS %lld",
                            (long long)o->end_ns, (long long)o->start_ns);
    o->type = PT_OBS_OP;
    o->stage = (int)stage;
    o->mb = (int)mb;
    return 0;
}

static int parse_step(char **f, int n, pt_obs_line *o, pt_error *err)
{
    if (n != 5)
        return pt_error_set(err, PT_EINVAL, "step: %d fields; step STEP LOSS SAMPLES END_NS has 5",
                            n);
    int rc;
    if ((rc = integer(f[1], INT64_MAX, "step", "STEP", &o->step, err)) < 0 ||
        (rc = integer(f[3], PT_OBS_SAMPLES_MAX, "step", "SAMPLES", &o->samples, err)) < 0 ||
        (rc = integer(f[4], INT64_MAX, "step", "END_NS", &o->end_ns, err)) < 0)
        return rc;
    o->loss = NAN;
    if (strcmp(f[2], "-")) {
        char *end = NULL;
        o->loss = strtod(f[2], &end);
        if (end == f[2] || *end || !isfinite(o->loss))
            return pt_error_set(err, PT_EINVAL, "step: LOSS: \"%.32s\" is not a finite number or -",
                                f[2]);
    }
    o->type = PT_OBS_STEP;
    return 0;
}

int pt_obs_parse(const char *line, size_t len, pt_obs_line *out, pt_error *err)
{
    memset(out, 0, sizeof *out);
    char buf[PT_OBS_LINE_MAX];
    if (len >= sizeof buf)
        return pt_error_set(err, PT_EINVAL, "a line of %zu bytes (at most %d)", len,
                            PT_OBS_LINE_MAX - 1);
    if (memchr(line, '\0', len))
        return pt_error_set(err, PT_EINVAL, "a line holds a NUL byte");
    memcpy(buf, line, len);
    buf[len] = '\0';
    if (!strcmp(buf, PT_OBS_HELLO)) {
        out->type = PT_OBS_HELLO_LINE;
        return 0;
    }
    char *f[FIELDS_MAX];
    int n = split(buf, f, FIELDS_MAX);
    if (n < 0)
        return pt_error_set(err, PT_EINVAL, "fields are separated by one space, none empty");
    if (n > FIELDS_MAX)
        return pt_error_set(err, PT_EINVAL, "more than %d fields", FIELDS_MAX);
    if (!strcmp(f[0], "op"))
        return parse_op(f, n, out, err);
    if (!strcmp(f[0], "step"))
        return parse_step(f, n, out, err);
    return pt_error_set(err, PT_EINVAL, "unknown line \"%.16s\" (op, step, or the hello \"%s\")",
                        f[0], PT_OBS_HELLO);
}

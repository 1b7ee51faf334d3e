/* PyTorch profiler traces (see torch_trace.h). */
#include "tui/cli/torch_trace.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/op.h"

#define DIGITS_MAX   9 /* a stage or micro-batch in a label: at most this many digits */
#define US_MAX       9.007199254740992e15 /* 2^53 */
#define LABEL_GROUPS 4                    /* the whole match and three subexpressions */
#define NAME_CAP     256                  /* label text copied for the user's pattern */

static const struct {
    const char *name;
    int kind;
} kinds[] = {
    /* longer names first: "SEND_F" before "F" is tried as a prefix */
    {"SEND_F", PT_OP_SEND_ACT},  {"RECV_F", PT_OP_RECV_ACT}, {"SEND_B", PT_OP_SEND_GRAD},
    {"RECV_B", PT_OP_RECV_GRAD}, {"F", PT_OP_FWD},           {"B", PT_OP_BWD},
    {"I", PT_OP_BWD_INPUT},      {"W", PT_OP_BWD_WEIGHT},
};
#define KIND_COUNT ((int)(sizeof kinds / sizeof kinds[0]))

int pt_tt_labels_init(pt_tt_labels *l, const char *regex, pt_error *err)
{
    memset(l, 0, sizeof *l);
    if (!regex)
        return 0;
    int rc = regcomp(&l->re, regex, REG_EXTENDED);
    if (rc != 0) {
        char why[128];
        regerror(rc, &l->re, why, sizeof why);
        return pt_error_set(err, PT_EINVAL, "--label \"%s\": %s", regex, why);
    }
    if (l->re.re_nsub != LABEL_GROUPS - 1) {
        regfree(&l->re);
        return pt_error_set(err, PT_EINVAL,
                            "--label \"%s\": %zu subexpressions; it needs 3: stage, kind "
                            "(F, B, I, W, SEND_F, ...), micro-batch",
                            regex, l->re.re_nsub);
    }
    l->custom = 1;
    return 0;
}

void pt_tt_labels_free(pt_tt_labels *l)
{
    if (l && l->custom)
        regfree(&l->re);
    if (l)
        l->custom = 0;
}

void pt_tt_trace_free(pt_tt_trace *t)
{
    if (!t)
        return;
    free(t->ops);
    free(t->steps);
    memset(t, 0, sizeof *t);
}

/* A number of 1..DIGITS_MAX digits at s[0..n) below max; -1 otherwise. */
static int64_t number(const char *s, size_t n, int64_t max)
{
    if (n == 0 || n > DIGITS_MAX)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v < max ? v : -1;
}

static int kind_of(const char *s, size_t n)
{
    for (int k = 0; k < KIND_COUNT; k++)
        if (strlen(kinds[k].name) == n && !strncmp(s, kinds[k].name, n))
            return kinds[k].kind;
    return -1;
}

/* "PP:<stage><kind><mb>": 1 and the op, else 0. */
static int label_pp(const char *name, pt_tt_op *op)
{
    if (strncmp(name, "PP:", 3))
        return 0;
    const char *s = name + 3, *k = s;
    while (*k >= '0' && *k <= '9')
        k++;
    int64_t stage = number(s, (size_t)(k - s), PT_TT_STAGE_MAX);
    for (int i = 0; stage >= 0 && i < KIND_COUNT; i++) {
        size_t n = strlen(kinds[i].name);
        if (strncmp(k, kinds[i].name, n))
            continue;
        int64_t mb = number(k + n, strlen(k + n), PT_TT_MB_MAX);
        if (mb < 0)
            continue;
        *op = (pt_tt_op){(int)stage, (int)mb, kinds[i].kind, -1, 0, 0};
        return 1;
    }
    return 0;
}

/* "Forward <mb>" / "Backward <mb>" of the trace's rank as stage. */
static int label_scope(const char *name, int rank, pt_tt_op *op)
{
    static const struct {
        const char *prefix;
        int kind;
    } scopes[] = {{"Forward ", PT_OP_FWD}, {"Backward ", PT_OP_BWD}};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(scopes[i].prefix);
        if (strncmp(name, scopes[i].prefix, n))
            continue;
        int64_t mb = number(name + n, strlen(name + n), PT_TT_MB_MAX);
        if (mb < 0 || rank < 0)
            return 0;
        *op = (pt_tt_op){rank, (int)mb, scopes[i].kind, -1, 0, 0};
        return 1;
    }
    return 0;
}

static int label_custom(const regex_t *re, const char *name, pt_tt_op *op)
{
    regmatch_t m[LABEL_GROUPS];
    if (regexec(re, name, LABEL_GROUPS, m, 0) != 0)
        return 0;
    for (int g = 1; g < LABEL_GROUPS; g++)
        if (m[g].rm_so < 0)
            return 0;
    int64_t stage = number(name + m[1].rm_so, (size_t)(m[1].rm_eo - m[1].rm_so), PT_TT_STAGE_MAX);
    int kind = kind_of(name + m[2].rm_so, (size_t)(m[2].rm_eo - m[2].rm_so));
    int64_t mb = number(name + m[3].rm_so, (size_t)(m[3].rm_eo - m[3].rm_so), PT_TT_MB_MAX);
    if (stage < 0 || kind < 0 || mb < 0)
        return 0;
    *op = (pt_tt_op){(int)stage, (int)mb, kind, -1, 0, 0};
    return 1;
}

static int push_op(pt_tt_trace *t, const pt_tt_op *op)
{
    if (t->op_count == PT_TT_OPS_MAX)
        return PT_ERANGE;
    if (t->op_count == t->op_cap) {
        int cap = t->op_cap ? 2 * t->op_cap : 256;
        pt_tt_op *o = realloc(t->ops, (size_t)cap * sizeof *o);
        if (!o)
            return PT_ENOMEM;
        t->ops = o;
        t->op_cap = cap;
    }
    t->ops[t->op_count++] = *op;
    return 0;
}

static int push_step(pt_tt_trace *t, int64_t n, double ts, double end)
{
    if (t->step_count == t->step_cap) {
        int cap = t->step_cap ? 2 * t->step_cap : 64;
        struct pt_tt_step *st = realloc(t->steps, (size_t)cap * sizeof *st);
        if (!st)
            return PT_ENOMEM;
        t->steps = st;
        t->step_cap = cap;
    }
    t->steps[t->step_count++] = (struct pt_tt_step){n, ts, end};
    return 0;
}

/* A number field of event i in [0, US_MAX]. */
static int time_field(const cJSON *ev, const char *key, int64_t i, const char *src, double *out,
                      pt_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ev, key);
    if (!cJSON_IsNumber(v))
        return pt_error_set(err, PT_EINVAL, "%s: traceEvents[%lld].%s: %s", src, (long long)i, key,
                            v ? "must be a number" : "missing (an X event has ts and dur)");
    if (!isfinite(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > US_MAX)
        return pt_error_set(err, PT_ERANGE,
                            "%s: traceEvents[%lld].%s: must be in [0, 2^53] (got %g)", src,
                            (long long)i, key, v->valuedouble);
    *out = v->valuedouble;
    return 0;
}

/* One event of the list; a labelled X event becomes an op. */
static int read_event(const cJSON *ev, int64_t i, const char *src, const pt_tt_labels *lab,
                      pt_tt_trace *t, pt_error *err)
{
    if (!cJSON_IsObject(ev))
        return pt_error_set(err, PT_EINVAL, "%s: traceEvents[%lld]: not an object", src,
                            (long long)i);
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X"))
        return 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name");
    if (!cJSON_IsString(name))
        return pt_error_set(err, PT_EINVAL, "%s: traceEvents[%lld].name: %s", src, (long long)i,
                            name ? "must be a string" : "missing");
    double ts, dur;
    int rc;
    if ((rc = time_field(ev, "ts", i, src, &ts, err)) < 0 ||
        (rc = time_field(ev, "dur", i, src, &dur, err)) < 0)
        return rc;
    t->events++;
    const char *s = name->valuestring;
    if (!strncmp(s, "ProfilerStep#", 13)) {
        int64_t n = number(s + 13, strlen(s + 13), INT64_MAX);
        return n >= 0 && push_step(t, n, ts, ts + dur) < 0
                   ? pt_error_set(err, PT_ENOMEM, "%s: out of memory", src)
                   : 0;
    }
    pt_tt_op op;
    int hit = lab->custom ? label_custom(&lab->re, s, &op)
                          : label_pp(s, &op) || label_scope(s, t->rank, &op);
    if (!hit)
        return 0;
    op.ts = ts;
    op.dur = dur;
    rc = push_op(t, &op);
    return rc == PT_ERANGE
               ? pt_error_set(err, rc, "%s: more than %d labelled ops", src, PT_TT_OPS_MAX)
           : rc < 0 ? pt_error_set(err, rc, "%s: out of memory", src)
                    : 0;
}

/* The object form's rank: distributedInfo.rank, an integer in [0, 4096). */
static int read_rank(const cJSON *root, const char *src, int *rank, pt_error *err)
{
    const cJSON *di = cJSON_GetObjectItemCaseSensitive(root, "distributedInfo");
    if (!di)
        return 0;
    const cJSON *r = cJSON_IsObject(di) ? cJSON_GetObjectItemCaseSensitive(di, "rank") : NULL;
    if (!cJSON_IsObject(di) || !cJSON_IsNumber(r) || r->valuedouble != floor(r->valuedouble) ||
        r->valuedouble < 0 || r->valuedouble >= PT_TT_STAGE_MAX)
        return pt_error_set(err, PT_EINVAL,
                            "%s: distributedInfo.rank: must be an integer in [0, %d)", src,
                            PT_TT_STAGE_MAX);
    if (*rank < 0)
        *rank = (int)r->valuedouble;
    return 0;
}

static int cmp_op(const void *a, const void *b)
{
    const pt_tt_op *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return (x->stage > y->stage) - (x->stage < y->stage);
}

int pt_tt_parse(const char *text, size_t len, const char *source, const pt_tt_labels *labels,
                int rank, pt_tt_trace *out, pt_error *err)
{
    memset(out, 0, sizeof *out);
    out->rank = rank;
    const char *end = text;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        int line = 1;
        for (const char *p = text; end && p < end && p < text + len; p++)
            line += *p == '\n';
        return pt_error_set(err, PT_EPARSE, "%s: not valid JSON near line %d", source, line);
    }
    const cJSON *list = root;
    int rc = 0;
    if (cJSON_IsObject(root)) {
        out->kineto = 1;
        list = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
        rc = read_rank(root, source, &out->rank, err);
    }
    if (rc == 0 && !cJSON_IsArray(list))
        rc = pt_error_set(err, PT_EINVAL, "%s: %s", source,
                          out->kineto ? "traceEvents: missing or not an array"
                                      : "neither an array of events nor an object with "
                                        "traceEvents");
    int64_t i = 0;
    for (const cJSON *ev = rc == 0 ? list->child : NULL; ev && rc == 0; ev = ev->next, i++)
        rc = read_event(ev, i, source, labels, out, err);
    cJSON_Delete(root);
    if (rc < 0) {
        pt_tt_trace_free(out);
        return rc;
    }
    if (out->op_count > 0)
        qsort(out->ops, (size_t)out->op_count, sizeof *out->ops, cmp_op);
    return 0;
}

/* ---- iterations ------------------------------------------------------------------------ */

static int cmp_step(const void *a, const void *b)
{
    const struct pt_tt_step *x = a, *y = b;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

/* Ops by the ProfilerStep span they start in (both in time order: one walk),
 * numbered from the first step that holds an op; ops in none dropped. */
static int64_t steps_marked(pt_tt_trace *t)
{
    qsort(t->steps, (size_t)t->step_count, sizeof *t->steps, cmp_step);
    int64_t first = INT64_MAX, last = -1;
    int kept = 0, k = 0;
    for (int i = 0; i < t->op_count; i++) {
        pt_tt_op o = t->ops[i];
        while (k + 1 < t->step_count && t->steps[k + 1].ts <= o.ts)
            k++;
        if (o.ts < t->steps[k].ts || o.ts >= t->steps[k].end)
            continue;
        o.step = t->steps[k].n;
        first = o.step < first ? o.step : first;
        last = o.step > last ? o.step : last;
        t->ops[kept++] = o;
    }
    t->op_count = kept;
    for (int i = 0; i < kept; i++) /* iterations count from 0 */
        t->ops[i].step -= first;
    return last >= first ? last - first + 1 : 0;
}

typedef struct keyed {
    int64_t key;
    int index; /* into ops, which are in time order */
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The k-th op of one (stage, kind, mb) in time order is iteration k: the ops
 * sorted by that key, then by time, numbered within each key. -1 on no
 * memory. */
static int64_t steps_counted(pt_tt_trace *t)
{
    int n = t->op_count;
    keyed *k = malloc((size_t)(n > 0 ? n : 1) * sizeof *k);
    if (!k)
        return -1;
    for (int i = 0; i < n; i++)
        k[i] = (keyed){((int64_t)t->ops[i].stage * PT_TT_MB_MAX + t->ops[i].mb) * PT_OP_KIND_COUNT +
                           t->ops[i].kind,
                       i};
    qsort(k, (size_t)n, sizeof *k, cmp_keyed);
    int64_t most = 0, run = 0;
    for (int i = 0; i < n; i++) {
        run = i > 0 && k[i].key == k[i - 1].key ? run + 1 : 0;
        t->ops[k[i].index].step = run;
        most = run + 1 > most ? run + 1 : most;
    }
    free(k);
    return most;
}

int64_t pt_tt_assign_steps(pt_tt_trace *t)
{
    return t->step_count > 0 ? steps_marked(t) : steps_counted(t);
}

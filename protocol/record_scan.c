/* The reader's fast way through the two kinds of line that make nearly all
 * of a long record: a received metrics frame and a fold line, in exactly
 * the compact shape this build's writer gives them (pt_msg_encode,
 * protocol/record_fold.c). An hour of the 4-agent demo is 252,628 of each;
 * building a cJSON tree for every one of them was most of a load.
 *
 * A scanner accepts a line only when every byte is where the writer puts
 * it and every check the general reader makes holds; it fills its output
 * as the general reader would. Anything else (another member order,
 * whitespace, an escape, a number written another way, a value out of
 * range) is left to the general reader, which accepts or refuses it and
 * names the field and reason. So a scanner never refuses and never says
 * why: it only saves work (see record_scan_test.c, which reads records
 * both ways and compares). See protocol/record_internal.h. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/json_util.h"
#include "protocol/record_internal.h"

#define DIGITS_MAX  15 /* below 2^53: every such integer is exact as a JSON number */
#define NUMBER_MAX  63 /* cJSON reads at most this many characters of a number */
#define OP_NAME_MAX 32
#define BIG         (PT_JSON_INT_MAX - 1)  /* the reader's bound on record integers */
#define IDX_MAX     (PT_MSG_MAX_INDEX - 1) /* stage and replica of a message */

typedef struct cursor {
    const char *p, *end;
} cursor;

static int lit_n(cursor *c, const char *s, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
        return 0;
    c->p += n;
    return 1;
}
#define LIT(c, s) lit_n((c), (s), sizeof(s) - 1)

/* An integer >= 0 of 1..DIGITS_MAX digits without a leading zero. */
static int uint_at(cursor *c, int64_t *out)
{
    const char *q = c->p;
    int64_t v = 0;
    while (q < c->end && *q >= '0' && *q <= '9' && q - c->p <= DIGITS_MAX)
        v = v * 10 + (*q++ - '0');
    size_t n = (size_t)(q - c->p);
    if (n == 0 || n > DIGITS_MAX || (n > 1 && *c->p == '0'))
        return 0;
    c->p = q;
    *out = v;
    return 1;
}

static int int_at(cursor *c, int64_t *out)
{
    int neg = c->p < c->end && *c->p == '-';
    cursor d = {c->p + neg, c->end};
    int64_t v;
    if (!uint_at(&d, &v))
        return 0;
    c->p = d.p;
    *out = neg ? -v : v;
    return 1;
}

static int uint_max(cursor *c, int64_t max, int64_t *out)
{
    return uint_at(c, out) && *out <= max;
}

static int index_at(cursor *c, int max, int *out)
{
    int64_t v;
    if (!uint_max(c, max, &v))
        return 0;
    *out = (int)v;
    return 1;
}

static int digits(const char **q, const char *end)
{
    const char *s = *q;
    while (*q < end && **q >= '0' && **q <= '9')
        (*q)++;
    return *q > s;
}

/* A finite number in JSON's grammar, read by strtod as cJSON reads it (a
 * locale whose decimal point is not '.' leaves it to the general way). */
static int number_at(cursor *c, double *out)
{
    const char *q = c->p;
    if (q < c->end && *q == '-')
        q++;
    if (q < c->end && *q == '0')
        q++;
    else if (!digits(&q, c->end))
        return 0;
    if (q < c->end && *q == '.' && (q++, !digits(&q, c->end)))
        return 0;
    if (q < c->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < c->end && (*q == '+' || *q == '-'))
            q++;
        if (!digits(&q, c->end))
            return 0;
    }
    size_t n = (size_t)(q - c->p);
    char buf[NUMBER_MAX + 1], *stop = NULL;
    if (n > NUMBER_MAX)
        return 0;
    memcpy(buf, c->p, n);
    buf[n] = '\0';
    double d = strtod(buf, &stop);
    if (stop != buf + n || !isfinite(d))
        return 0;
    c->p = q;
    *out = d;
    return 1;
}

/* A string of 1..cap-1 printable ASCII characters without escapes (agent
 * ids: letters, digits and "._:@-" only), copied NUL-terminated. */
static int string_at(cursor *c, int id_only, char *out, size_t cap)
{
    if (!LIT(c, "\""))
        return 0;
    const char *s = c->p;
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        int ok = id_only ? (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                               (ch >= '0' && ch <= '9') || (ch && strchr("._:@-", ch))
                         : ch >= 0x20 && ch < 0x7f && ch != '\\';
        if (!ok)
            return 0;
        c->p++;
    }
    size_t n = (size_t)(c->p - s);
    if (c->p == c->end || n == 0 || n >= cap)
        return 0;
    memcpy(out, s, n);
    out[n] = '\0';
    c->p++;
    return 1;
}

/* "memory":{"weights":{"cur":C,"peak":P},...,"total":{...}}: every
 * category, in the encoder's order, peak >= cur. */
static int memory_at(cursor *c, pt_msg_metrics *x)
{
    if (!LIT(c, ",\"memory\":{"))
        return 0;
    for (int k = 0; k <= PT_MSG_MEM_COUNT; k++) {
        const char *name = k < PT_MSG_MEM_COUNT ? pt_msg_mem_name(k) : "total";
        int64_t *cur = k < PT_MSG_MEM_COUNT ? &x->mem_cur[k] : &x->total_cur;
        int64_t *peak = k < PT_MSG_MEM_COUNT ? &x->mem_peak[k] : &x->total_peak;
        if ((k && !LIT(c, ",")) || !LIT(c, "\"") || !lit_n(c, name, strlen(name)) ||
            !LIT(c, "\":{\"cur\":") || !uint_at(c, cur) || !LIT(c, ",\"peak\":") ||
            !uint_at(c, peak) || *peak < *cur || !LIT(c, "}"))
            return 0;
    }
    return LIT(c, "}");
}

int pt_record_scan_metrics(const char *text, size_t len, pt_msg *m)
{
    cursor c = {text, text + len};
    pt_msg_metrics *x = &m->u.metrics;
    if (len > PT_MSG_MAX_BYTES || !LIT(&c, "{\"v\":1,\"type\":\"metrics\",\"agent\":"))
        return 0;
    memset(m, 0, offsetof(pt_msg, u) + sizeof m->u.metrics);
    m->type = PT_MSG_METRICS;
    if (!string_at(&c, 1, m->agent, sizeof m->agent) || !LIT(&c, ",\"seq\":") ||
        !uint_at(&c, &m->seq) || !LIT(&c, ",\"gen\":") || !uint_at(&c, &m->gen) ||
        !LIT(&c, ",\"stage\":") || !index_at(&c, IDX_MAX, &x->stage) || !LIT(&c, ",\"replica\":") ||
        !index_at(&c, IDX_MAX, &x->replica) || !LIT(&c, ",\"step\":") || !uint_at(&c, &x->step) ||
        !LIT(&c, ",\"loss\":"))
        return 0;
    if (LIT(&c, "null"))
        x->loss = NAN;
    else if (!number_at(&c, &x->loss))
        return 0;
    if (!LIT(&c, ",\"samples_per_s\":") || !number_at(&c, &x->samples_per_s) ||
        !(x->samples_per_s >= 0) || !LIT(&c, ",\"iter_ms\":") || !number_at(&c, &x->iter_ms) ||
        !(x->iter_ms >= 0) || !memory_at(&c, x))
        return 0;
    if (LIT(&c, ",\"device\":{\"free\":") &&
        (!uint_at(&c, &x->device_free) || !LIT(&c, ",\"total\":") ||
         !uint_at(&c, &x->device_total) || x->device_free > x->device_total || !LIT(&c, "}")))
        return 0;
    if (!LIT(&c, "}") || c.p != c.end)
        return 0;
    x->steps = 1; /* "steps" absent: one step, its loss the only one */
    x->losses[0] = x->loss;
    return 1;
}

/* "NAME":[count,total_ns,min_ns,max_ns], checked as the general reader
 * checks a fold's op. */
static int fold_op_at(cursor *c, pt_record_fold *f)
{
    char name[OP_NAME_MAX];
    pt_op_kind k;
    if (!string_at(c, 0, name, sizeof name) || pt_op_parse(name, &k) < 0 || f->ops[k].count ||
        !LIT(c, ":["))
        return 0;
    pt_record_fold_op *op = &f->ops[k];
    if (!uint_at(c, &op->count) || !LIT(c, ",") || !uint_at(c, &op->total_ns) || !LIT(c, ",") ||
        !uint_at(c, &op->min_ns) || !LIT(c, ",") || !uint_at(c, &op->max_ns) || !LIT(c, "]"))
        return 0;
    if (op->count < 1 || op->min_ns > op->max_ns || op->total_ns < op->max_ns ||
        (double)op->total_ns > (double)op->count * (double)op->max_ns)
        return 0;
    f->events += op->count;
    return 1;
}

int pt_record_scan_fold(const char *line, size_t len, pt_record_scanned_fold *s)
{
    cursor c = {line, line + len};
    pt_record_fold *f = &s->fold;
    if (!LIT(&c, "{\"t\":") || !uint_at(&c, &s->t) || !LIT(&c, ",\"kind\":\"fold\",\"gen\":"))
        return 0;
    memset(f, 0, sizeof *f);
    s->nseq = 0;
    if (!uint_at(&c, &s->gen) || !LIT(&c, ",\"agent\":") ||
        !string_at(&c, 0, s->agent, sizeof s->agent) || !LIT(&c, ",\"stage\":") ||
        !index_at(&c, PT_MSG_MAX_INDEX, &f->stage) || !LIT(&c, ",\"replica\":") ||
        !index_at(&c, PT_MSG_MAX_INDEX, &f->replica) || !LIT(&c, ",\"step\":") ||
        !uint_at(&c, &s->step) || !LIT(&c, ",\"start_ns\":") || !int_at(&c, &f->start_ns) ||
        !LIT(&c, ",\"end_ns\":") || !int_at(&c, &f->end_ns) || f->end_ns < f->start_ns ||
        !LIT(&c, ",\"busy_ns\":") || !uint_at(&c, &f->busy_ns) || !LIT(&c, ",\"seqs\":["))
        return 0;
    do {
        if (s->nseq == PT_RECORD_SCAN_SEQS || !uint_max(&c, INT32_MAX, &s->seqs[s->nseq++]))
            return 0;
    } while (LIT(&c, ","));
    if (!LIT(&c, "],\"ops\":{"))
        return 0;
    do
        if (!fold_op_at(&c, f))
            return 0;
    while (LIT(&c, ","));
    if (!LIT(&c, "}}") || c.p != c.end)
        return 0;
    f->frames = s->nseq;
    return 1;
}

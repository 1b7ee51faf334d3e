/* The events scanner and pt_telemetry_decode; see telemetry_scan.h. Every
 * reader here returns 1 when it read what pt_msg_decode would accept and 0
 * to decline; a decline is never an error of its own, the frame goes to
 * pt_msg_decode, which says what (if anything) is wrong. */
#include "protocol/telemetry_scan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/op.h"

/* The bounds pt_msg_decode checks (protocol/message.c). */
#define INT_MAX_EXACT PT_MSG_INT_MAX
#define INDEX_MAX     (PT_MSG_MAX_INDEX - 1)
#define MB_MAX        2147483647
/* Digits of the longest integer the scanner reads: 2^53 - 1 has 16. */
#define DIGITS_MAX 16
/* Fewer bytes than the shortest event text, so remaining text / this is at
 * least the events it can hold ({"stage":0,...,"end_ns":0} is 72). */
#define EVENT_TEXT_MIN 64

typedef struct scan {
    const char *p, *end;
} scan;

static void skip_ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

/* The character c, after white space. */
static int lit(scan *s, char c)
{
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

/* A string of printable ASCII without escapes: *b, *n its bytes (no quotes). */
static int str(scan *s, const char **b, size_t *n)
{
    if (!lit(s, '"'))
        return 0;
    for (const char *p = s->p; p < s->end; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            *b = s->p;
            *n = (size_t)(p - s->p);
            s->p = p + 1;
            return 1;
        }
        if (c < 0x20 || c > 0x7e || c == '\\')
            return 0;
    }
    return 0;
}

/* An integer in [min, max] (min -1 or 0, max at most 2^53 - 1) spelt -1, 0
 * or [1-9][0-9]*, and not followed by what would make it another number. */
static int integer(scan *s, int64_t min, int64_t max, int64_t *out)
{
    skip_ws(s);
    const char *p = s->p, *e = s->end;
    int neg = p < e && *p == '-';
    p += neg;
    if (p >= e || *p < '0' || *p > '9')
        return 0;
    int64_t v = 0;
    if (*p == '0')
        p++;
    else
        for (const char *d0 = p; p < e && *p >= '0' && *p <= '9' && p - d0 < DIGITS_MAX; p++)
            v = v * 10 + (*p - '0');
    if (p < e &&
        ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-'))
        return 0;
    if (neg) {
        if (v != 1) /* "-0" reads as 0 there; leave it to pt_msg_decode */
            return 0;
        v = -1;
    }
    if (v < min || v > max)
        return 0;
    s->p = p;
    *out = v;
    return 1;
}

static int int_field(scan *s, int min, int max, int *out)
{
    int64_t v;
    if (!integer(s, min, max, &v))
        return 0;
    *out = (int)v;
    return 1;
}

/* The op names with their lengths, from the list op.c's table is made of. */
static const struct {
    const char *name;
    size_t len;
} op_names[PT_OP_KIND_COUNT] = {
#define OP_NAME_(kind, lane, paint, glyph, facts) [PT_OP_##kind] = {#kind, sizeof #kind - 1},
    PT_OP_LIST(OP_NAME_)
#undef OP_NAME_
};

/* An op name of protocol/op.h, exactly. */
static int op_field(scan *s, pt_op_kind *out)
{
    const char *b;
    size_t n;
    if (!str(s, &b, &n))
        return 0;
    for (int k = 0; k < PT_OP_KIND_COUNT; k++)
        if (op_names[k].len == n && op_names[k].name[0] == b[0] &&
            !memcmp(op_names[k].name, b, n)) {
            *out = (pt_op_kind)k;
            return 1;
        }
    return 0;
}

/* ---- one event --------------------------------------------------------------- */

enum {
    F_STAGE = 1 << 0,
    F_REPLICA = 1 << 1,
    F_STEP = 1 << 2,
    F_MB = 1 << 3,
    F_OP = 1 << 4,
    F_VERSION = 1 << 5,
    F_START = 1 << 6,
    F_END = 1 << 7,
    F_BYTES = 1 << 8,
    F_REQUIRED = F_STAGE | F_REPLICA | F_STEP | F_MB | F_OP | F_START | F_END
};

/* The field bit of an event key, 0 for none (a switch on the length, so
 * each compare is of a constant size). */
static unsigned event_key(const char *k, size_t n)
{
#define IS(lit) (!memcmp(k, lit, sizeof lit - 1))
    switch (n) {
    case 2:
        return IS("mb") ? F_MB : IS("op") ? F_OP : 0;
    case 4:
        return IS("step") ? F_STEP : 0;
    case 5:
        return IS("stage") ? F_STAGE : IS("bytes") ? F_BYTES : 0;
    case 6:
        return IS("end_ns") ? F_END : 0;
    case 7:
        return IS("replica") ? F_REPLICA : IS("version") ? F_VERSION : 0;
    case 8:
        return IS("start_ns") ? F_START : 0;
    default:
        return 0;
    }
#undef IS
}

static int event_value(scan *s, unsigned f, pt_msg_event *v)
{
    switch (f) {
    case F_STAGE:
        return int_field(s, 0, INDEX_MAX, &v->stage);
    case F_REPLICA:
        return int_field(s, 0, INDEX_MAX, &v->replica);
    case F_STEP:
        return integer(s, 0, INT_MAX_EXACT, &v->step);
    case F_MB:
        return int_field(s, -1, MB_MAX, &v->mb);
    case F_OP:
        return op_field(s, &v->op);
    case F_VERSION:
        return integer(s, -1, INT_MAX_EXACT, &v->version);
    case F_START:
        return integer(s, 0, INT_MAX_EXACT, &v->start_ns);
    case F_END:
        return integer(s, 0, INT_MAX_EXACT, &v->end_ns);
    case F_BYTES:
        return integer(s, 0, INT_MAX_EXACT, &v->bytes);
    default:
        return 0;
    }
}

static int event(scan *s, pt_msg_event *v)
{
    if (!lit(s, '{'))
        return 0;
    v->version = -1;
    v->bytes = 0;
    unsigned seen = 0;
    do {
        const char *k;
        size_t n;
        if (!str(s, &k, &n) || !lit(s, ':'))
            return 0;
        unsigned f = event_key(k, n);
        if (!f || (seen & f) || !event_value(s, f, v))
            return 0;
        seen |= f;
    } while (lit(s, ','));
    return lit(s, '}') && (seen & F_REQUIRED) == F_REQUIRED && v->end_ns >= v->start_ns;
}

/* The events array, into e (e->events, once set, is the caller's to free). */
static int events_array(scan *s, pt_msg_events *e)
{
    if (!lit(s, '['))
        return 0;
    size_t cap = (size_t)(s->end - s->p) / EVENT_TEXT_MIN + 1;
    if (cap > PT_MSG_MAX_EVENTS)
        cap = PT_MSG_MAX_EVENTS;
    if (!(e->events = malloc(cap * sizeof *e->events)))
        return 0;
    int n = 0;
    do {
        if ((size_t)n == cap || !event(s, &e->events[n]))
            return 0;
        n++;
    } while (lit(s, ','));
    e->count = n;
    return lit(s, ']');
}

/* ---- the message ------------------------------------------------------------- */

enum { K_V = 1, K_TYPE = 2, K_AGENT = 4, K_SEQ = 8, K_GEN = 16, K_EVENTS = 32, K_ALL = 63 };

static unsigned top_key(const char *k, size_t n)
{
    static const struct {
        const char *name;
        unsigned len, bit;
    } keys[] = {{"v", 1, K_V},     {"type", 4, K_TYPE}, {"agent", 5, K_AGENT},
                {"seq", 3, K_SEQ}, {"gen", 3, K_GEN},   {"events", 6, K_EVENTS}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (n == keys[i].len && !memcmp(k, keys[i].name, n))
            return keys[i].bit;
    return 0;
}

/* An agent id: 1..PT_MSG_ID_MAX-1 of [A-Za-z0-9._:@-]. */
static int agent_field(scan *s, char *out)
{
    const char *b;
    size_t n;
    if (!str(s, &b, &n) || n == 0 || n >= PT_MSG_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '@' || c == '-'))
            return 0;
    }
    memcpy(out, b, n);
    return 1;
}

static int top_value(scan *s, unsigned k, pt_msg *m)
{
    int64_t v;
    const char *b;
    size_t n;
    switch (k) {
    case K_V:
        return integer(s, PT_MSG_VERSION, PT_MSG_VERSION, &v);
    case K_TYPE:
        return str(s, &b, &n) && n == 6 && !memcmp(b, "events", 6);
    case K_AGENT:
        return agent_field(s, m->agent);
    case K_SEQ:
        return integer(s, 0, INT_MAX_EXACT, &m->seq);
    case K_GEN:
        return integer(s, 0, INT_MAX_EXACT, &m->gen);
    case K_EVENTS:
        return events_array(s, &m->u.events);
    default:
        return 0;
    }
}

int pt_telemetry_scan_events(const char *data, size_t len, pt_msg *out)
{
    if (!out)
        return 0;
    memset(out, 0, sizeof *out);
    if (!data || len > PT_MSG_MAX_BYTES)
        return 0;
    scan s = {data, data + len};
    pt_msg m;
    memset(&m, 0, sizeof m);
    m.type = PT_MSG_EVENTS;
    unsigned seen = 0;
    if (!lit(&s, '{'))
        return 0;
    do {
        const char *k;
        size_t n;
        if (!str(&s, &k, &n) || !lit(&s, ':'))
            goto decline;
        unsigned f = top_key(k, n);
        if (!f || (seen & f) || !top_value(&s, f, &m))
            goto decline;
        seen |= f;
    } while (lit(&s, ','));
    if (!lit(&s, '}') || seen != K_ALL)
        goto decline;
    skip_ws(&s);
    if (s.p != s.end)
        goto decline;
    *out = m;
    return 1;
decline:
    free(m.u.events.events);
    return 0;
}

int pt_telemetry_decode(const char *data, size_t len, const char *source, pt_msg *out,
                        pt_error *err)
{
    if (pt_telemetry_scan_events(data, len, out))
        return 0;
    return pt_msg_decode(data, len, source, out, err);
}

/* protocol/telemetry_scan.h against its reference, pt_msg_decode: on
 * generated and mutated events messages (valid, truncated, wrong types,
 * missing and repeated fields, huge numbers, other spellings of numbers,
 * escapes, comments, NaN text, stray bytes), whatever the scanner takes
 * pt_msg_decode takes with the same values, and pt_telemetry_decode gives
 * pt_msg_decode's result and error words for every text. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/telemetry_scan.h"
#include "tests/test.h"

#define TEXT_MAX 8192
/* An agent id of 64 characters: one too many (PT_MSG_ID_MAX holds 63 and the NUL). */
#define LONG_ID "0123456789012345678901234567890123456789012345678901234567890123"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static const char *pick(const char *const *v, int n)
{
    return v[rnd((unsigned)n)];
}

typedef struct text {
    char s[TEXT_MAX];
    size_t n;
} text;

static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        t->n += (size_t)k < sizeof t->s - t->n ? (size_t)k : sizeof t->s - t->n - 1;
}

/* White space, mostly none; now and then a byte the scanner declines. */
static void ws(text *t, int odd)
{
    static const char *const w[] = {"", "", "", "", " ", "\n", "\t", "\r\n  ", "\x0b", "\x01"};
    put(t, "%s", w[odd && rnd(150) == 0 ? 8 + rnd(2) : rnd(8)]);
}

/* A value for an integer field in [lo, hi]: mostly plain and in range, else
 * another spelling, out of range or of another type. */
static void int_value(text *t, long long lo, long long hi, int odd)
{
    static const char *const other[] = {"1.0",
                                        "1e2",
                                        "1E0",
                                        "01",
                                        "-0",
                                        "+1",
                                        "0.5",
                                        "-1.0",
                                        "1e400",
                                        "-1",
                                        "-2",
                                        "NaN",
                                        "null",
                                        "true",
                                        "\"1\"",
                                        "[1]",
                                        "{}",
                                        "4096",
                                        "4095",
                                        "-1e0",
                                        "9007199254740991",
                                        "9007199254740992",
                                        "9007199254740993",
                                        "12345678901234567890",
                                        "2147483647",
                                        "2147483648",
                                        "0e0",
                                        "1.",
                                        "-",
                                        "00"};
    if (odd && rnd(40) == 0) {
        put(t, "%s", pick(other, (int)(sizeof other / sizeof other[0])));
        return;
    }
    long long span = hi - lo + 1, v;
    switch (rnd(4)) {
    case 0:
        v = lo;
        break;
    case 1:
        v = hi;
        break;
    default:
        v = lo + (long long)(rnd(1000000) % (unsigned long long)(span > 0 ? span : 1));
    }
    put(t, "%lld", v);
}

static void key(text *t, const char *k, int odd)
{
    ws(t, odd);
    if (odd && rnd(150) == 0 && k[0]) /* the same key, escaped: still the same key */
        put(t, "\"\\u%04x%s\"", (unsigned)k[0], k + 1);
    else
        put(t, "\"%s\"", k);
    ws(t, odd);
    put(t, ":");
    ws(t, odd);
}

static const char *const ops[] = {"FWD", "BWD", "SEND_ACT", "RECV_GRAD", "ALLREDUCE", "OPT_STEP"};
static const char *const bad_ops[] = {"fwd",       "F\\u0057D", "FW\\\"D",          "",
                                      "NOT_AN_OP", "FWD_",      "ABCDEFGHIJKLMNOP", "F D",
                                      "\xc3\xa9",  "BWD\\n"};

static void event(text *t, int odd)
{
    const char *k[] = {"stage",   "replica",  "step",   "mb",   "op",
                       "version", "start_ns", "end_ns", "bytes"};
    int order[9];
    for (int i = 0; i < 9; i++)
        order[i] = i;
    for (int i = 8; i > 0 && rnd(2); i--) {
        int j = (int)rnd((unsigned)i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    long long start = rnd(1000000);
    put(t, "{");
    int first = 1;
    for (int i = 0; i < 9; i++) {
        int f = order[i];
        if ((f == 5 || f == 8) && rnd(3) == 0) /* optional fields */
            continue;
        if (odd && rnd(150) == 0) /* a required one missing */
            continue;
        int reps = odd && rnd(150) == 0 ? 2 : 1;
        for (int r = 0; r < reps; r++) {
            put(t, first ? "" : ",");
            first = 0;
            key(t, k[f], odd);
            switch (f) {
            case 0:
            case 1:
                int_value(t, 0, 4095, odd);
                break;
            case 2:
                int_value(t, 0, 1000, odd);
                break;
            case 3:
            case 5:
                int_value(t, -1, 64, odd);
                break;
            case 4:
                put(t, "\"%s\"", odd && rnd(40) == 0 ? pick(bad_ops, 10) : pick(ops, 6));
                break;
            case 6:
                put(t, "%lld", start);
                break;
            case 7:
                put(t, "%lld", odd && rnd(60) == 0 ? start - 1 : start + rnd(5000));
                break;
            default:
                int_value(t, 0, 1 << 20, odd);
            }
            ws(t, odd);
        }
    }
    if (odd && rnd(30) == 0)
        put(t, "%s\"%s\":1", first ? "" : ",", rnd(2) ? "_comment" : "extra");
    put(t, "}");
}

static void message(text *t, int odd)
{
    static const char *const agents[] = {"a0", "host1-gpu0", "n@x:1_2.3-4", "bad agent",
                                         "",   "\\u0061",    "a\\/b",       LONG_ID};
    t->n = 0;
    ws(t, odd);
    put(t, "{");
    int parts[6] = {0, 1, 2, 3, 4, 5};
    for (int i = 5; i > 0 && odd && rnd(2); i--) {
        int j = (int)rnd((unsigned)i + 1), x = parts[i];
        parts[i] = parts[j];
        parts[j] = x;
    }
    for (int i = 0; i < 6; i++) {
        if (odd && rnd(40) == 0)
            continue;
        put(t, i ? "," : "");
        switch (parts[i]) {
        case 0:
            key(t, "v", odd);
            put(t, "%s",
                odd && rnd(10) == 0 ? pick((const char *const[]){"2", "1.0", "\"1\""}, 3) : "1");
            break;
        case 1:
            key(t, "type", odd);
            put(t, "\"%s\"", odd && rnd(20) == 0 ? "metrics" : "events");
            break;
        case 2:
            key(t, "agent", odd);
            put(t, "\"%s\"", odd && rnd(8) == 0 ? pick(agents, 8) : pick(agents, 3));
            break;
        case 3:
        case 4:
            key(t, parts[i] == 3 ? "seq" : "gen", odd);
            int_value(t, 0, 9007199254740991LL, odd);
            break;
        default: {
            key(t, "events", odd);
            put(t, "[");
            int n = odd && rnd(20) == 0 ? 0 : 1 + (int)rnd(4);
            for (int e = 0; e < n; e++) {
                put(t, e ? "," : "");
                ws(t, odd);
                event(t, odd);
            }
            put(t, "]");
        }
        }
        ws(t, odd);
    }
    if (odd && rnd(30) == 0)
        put(t, ",\"req\":1");
    put(t, "}");
    ws(t, odd);
    if (odd && rnd(30) == 0)
        put(t, "%s", rnd(2) ? "x" : "}");
}

/* One byte changed, dropped, added, or the text cut. */
static void mutate(text *t)
{
    static const char bytes[] = "{}[]:,\"\\-+.eE0123456789 \t\nnulltrueNaN_x\x7f\x80\xff";
    if (t->n == 0)
        return;
    size_t at = rnd((unsigned)t->n);
    switch (rnd(4)) {
    case 0:
        t->s[at] = bytes[rnd(sizeof bytes - 1)];
        break;
    case 1:
        memmove(t->s + at, t->s + at + 1, t->n - at);
        t->n--;
        break;
    case 2:
        if (t->n + 1 < sizeof t->s) {
            memmove(t->s + at + 1, t->s + at, t->n - at + 1);
            t->s[at] = bytes[rnd(sizeof bytes - 1)];
            t->n++;
        }
        break;
    default:
        t->n = at;
    }
    t->s[t->n] = '\0';
}

static int same_msg(const pt_msg *a, const pt_msg *b)
{
    if (a->type != b->type || memcmp(a->agent, b->agent, sizeof a->agent) || a->seq != b->seq ||
        a->gen != b->gen || a->req != b->req)
        return 0;
    if (a->type != PT_MSG_EVENTS) /* both decoded by pt_msg_decode; an assign owns pointers */
        return a->type == PT_MSG_ASSIGN || !memcmp(&a->u, &b->u, sizeof a->u);
    if (a->u.events.count != b->u.events.count)
        return 0;
    for (int i = 0; i < a->u.events.count; i++) {
        const pt_msg_event *x = &a->u.events.events[i], *y = &b->u.events.events[i];
        if (x->stage != y->stage || x->replica != y->replica || x->step != y->step ||
            x->mb != y->mb || x->op != y->op || x->version != y->version ||
            x->start_ns != y->start_ns || x->end_ns != y->end_ns || x->bytes != y->bytes)
            return 0;
    }
    return 1;
}

static int is_zero(const pt_msg *m)
{
    static const pt_msg zero;
    return !memcmp(m, &zero, sizeof *m);
}

typedef struct tally {
    int scanned, fell_back_ok, refused;
} tally;

/* The property, for one text. */
static void compare(const char *s, size_t n, tally *y)
{
    pt_msg ref, fast, both;
    pt_error eref = {0}, eboth = {0};
    int rc = pt_msg_decode(s, n, "t", &ref, &eref);
    int took = pt_telemetry_scan_events(s, n, &fast);
    if (took) {
        CHECK_MSG(rc == 0, "scanner took what pt_msg_decode refuses (%s): %.*s", eref.msg, (int)n,
                  s);
        CHECK_MSG(rc < 0 || same_msg(&ref, &fast), "scanner and pt_msg_decode differ: %.*s", (int)n,
                  s);
    } else {
        CHECK_MSG(is_zero(&fast), "a declined text left a message: %.*s", (int)n, s);
    }
    int rc2 = pt_telemetry_decode(s, n, "t", &both, &eboth);
    CHECK_MSG(rc2 == rc, "pt_telemetry_decode %d, pt_msg_decode %d: %.*s", rc2, rc, (int)n, s);
    if (rc < 0 && rc2 < 0) {
        CHECK_MSG(!strcmp(eboth.msg, eref.msg) && eboth.code == eref.code,
                  "errors differ: \"%s\" / \"%s\"", eboth.msg, eref.msg);
        CHECK(is_zero(&both));
    } else if (rc == 0 && rc2 == 0) {
        CHECK_MSG(same_msg(&both, &ref), "pt_telemetry_decode differs: %.*s", (int)n, s);
    }
    y->scanned += took;
    y->fell_back_ok += !took && rc == 0;
    y->refused += rc < 0;
    pt_msg_clear(&ref);
    pt_msg_clear(&fast);
    pt_msg_clear(&both);
}

static void test_generated(void)
{
    tally y = {0};
    text t;
    /* under valgrind (scripts/memcheck.sh sets PT_MEMCHECK) a tenth of the
     * messages: memcheck adds uninitialised bytes and reads past the text,
     * which the same generator's shapes reach in fewer draws; all of them
     * natively and under ASan */
    int tenth = getenv("PT_MEMCHECK") != NULL, plain = tenth ? 500 : 5000;
    for (int i = 0; i < plain; i++) {
        message(&t, 0);
        pt_msg m;
        /* the plain spelling (an agent's) is always the scanner's */
        CHECK_MSG(pt_telemetry_scan_events(t.s, t.n, &m) == 1, "declined: %s", t.s);
        pt_msg_clear(&m);
        compare(t.s, t.n, &y);
    }
    for (int i = 0; i < (tenth ? 2500 : 25000); i++) {
        message(&t, 1);
        if (rnd(3) == 0)
            mutate(&t);
        compare(t.s, t.n, &y);
    }
    printf("scanned %d, decoded by cJSON after a decline %d, refused %d\n", y.scanned,
           y.fell_back_ok, y.refused);
    /* the generator reaches all three outcomes */
    CHECK(y.scanned > plain && y.fell_back_ok > (tenth ? 10 : 100) &&
          y.refused > (tenth ? 100 : 1000));
}

/* What pt_msg_encode writes for an agent, the scanner takes. */
static void test_encoder_output(void)
{
    /* under valgrind a tenth, as test_generated */
    for (int i = 0, n = getenv("PT_MEMCHECK") ? 50 : 500; i < n; i++) {
        pt_msg m;
        pt_msg_init(&m, PT_MSG_EVENTS, i % 2 ? "host1-gpu0" : "a1");
        m.seq = (int64_t)rnd(1u << 30) * (i % 3 ? 1 : 8388608);
        m.gen = rnd(10);
        m.u.events.count = 1 + (int)rnd(300);
        m.u.events.events = calloc((size_t)m.u.events.count, sizeof *m.u.events.events);
        REQUIRE(m.u.events.events);
        for (int k = 0; k < m.u.events.count; k++) {
            pt_msg_event *e = &m.u.events.events[k];
            e->stage = (int)rnd(PT_MSG_MAX_INDEX);
            e->replica = (int)rnd(PT_MSG_MAX_INDEX);
            e->step = (int64_t)rnd(1u << 31) * 4096;
            e->mb = (int)rnd(64) - 1;
            e->op = (pt_op_kind)rnd(PT_OP_KIND_COUNT);
            e->version = (int64_t)rnd(100) - 1;
            e->start_ns = (int64_t)rnd(1u << 31) * 1000;
            e->end_ns = e->start_ns + rnd(1000000);
            e->bytes = rnd(2) ? 0 : (int64_t)rnd(1u << 30);
        }
        char *s = NULL;
        size_t n = 0;
        pt_error err = {0};
        REQUIRE(pt_msg_encode(&m, &s, &n, &err) == 0);
        pt_msg got;
        CHECK_MSG(pt_telemetry_scan_events(s, n, &got) == 1, "declined the encoder's: %.200s", s);
        CHECK(same_msg(&got, &m));
        pt_msg_clear(&got);
        free(s);
        pt_msg_clear(&m);
    }
}

/* The corpus: the examples and the bad messages (each with its .expect). */
static void test_corpus(void)
{
    static const char *const dirs[] = {"tests/data/message", "tests/data/bad/message"};
    tally y = {0};
    for (int d = 0; d < 2; d++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", pt_test_path(dirs[d]));
        DIR *dp = opendir(dir);
        REQUIRE(dp != NULL);
        struct dirent *e;
        while ((e = readdir(dp))) {
            size_t nl = strlen(e->d_name);
            if (nl < 5 || strcmp(e->d_name + nl - 5, ".json"))
                continue;
            char path[1400];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            char *s = NULL;
            size_t len = 0;
            REQUIRE(pt_file_read(path, &s, &len, NULL) == 0);
            compare(s, len, &y);
            free(s);
        }
        closedir(dp);
    }
    CHECK(y.refused > 10 && y.scanned >= 1);
}

PT_TEST_MAIN({"generated", test_generated}, {"encoder_output", test_encoder_output},
             {"corpus", test_corpus})

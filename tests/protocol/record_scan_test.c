/* protocol/record_scan.c: the reader's fast way through metrics frames and
 * fold lines gives what the general reader gives. The same records are read
 * both ways (pt_record_internal_parse, fast on and off) and compared entry
 * by entry: records of the writer's shape, every line of them taken the fast
 * way (the scanners are called directly to show it), and the same lines cut
 * and changed byte by byte, where both ways must accept the same lines and
 * refuse the others with the same error. Bad lines of the writer's shape are
 * refused naming the file, the line and the reason. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/record.h"
#include "protocol/record_internal.h"
#include "tests/test.h"

#define SESSION                                                                                    \
    "{\"t\":1,\"kind\":\"session\",\"v\":3,\"unix_s\":1796208812,\"control\":\"tcp://"             \
    "127.0.0.1:1\",\"telemetry\":\"tcp://127.0.0.1:2\",\"heartbeat_ms\":250,"                      \
    "\"missed_heartbeats\":12}\n"
#define TEXT_CAP (1 << 20)
#define FRAMES   300

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double unit(void)
{
    return (double)(next() >> 11) * (1.0 / 9007199254740992.0);
}

static int same_num(double a, double b)
{
    return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a);
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static int same_fold(const pt_record_fold *a, const pt_record_fold *b)
{
    if (!a || !b)
        return a == b;
    if (a->stage != b->stage || a->replica != b->replica || a->start_ns != b->start_ns ||
        a->end_ns != b->end_ns || a->busy_ns != b->busy_ns || a->events != b->events ||
        a->frames != b->frames)
        return 0;
    for (int k = 0; k < PT_OP_KIND_COUNT; k++)
        if (a->ops[k].count != b->ops[k].count || a->ops[k].total_ns != b->ops[k].total_ns ||
            a->ops[k].min_ns != b->ops[k].min_ns || a->ops[k].max_ns != b->ops[k].max_ns)
            return 0;
    return 1;
}

/* Every member of two entries, strings by content. */
static int same_entry(const pt_record_entry *a, const pt_record_entry *b)
{
    return a->t == b->t && a->line == b->line && a->kind == b->kind &&
           same_str(a->channel, b->channel) && a->offset_ns == b->offset_ns &&
           a->frame_len == b->frame_len &&
           (!a->frame_len || !memcmp(a->frame, b->frame, a->frame_len)) &&
           a->msg_type == b->msg_type && a->dropped == b->dropped && same_str(a->agent, b->agent) &&
           same_str(a->state, b->state) && same_str(a->reason, b->reason) &&
           same_str(a->dir, b->dir) && a->step == b->step && a->step_last == b->step_last &&
           same_num(a->commit_ms, b->commit_ms) && a->gen == b->gen && !a->plan == !b->plan &&
           same_str(a->model_json, b->model_json) && same_str(a->data, b->data) &&
           same_str(a->checkpoint_dir, b->checkpoint_dir) && a->seed == b->seed &&
           a->checkpoint_every == b->checkpoint_every && a->resume_step == b->resume_step &&
           a->worker_count == b->worker_count && a->version == b->version &&
           a->unix_s == b->unix_s && same_str(a->control, b->control) &&
           same_str(a->telemetry, b->telemetry) && a->heartbeat_ms == b->heartbeat_ms &&
           a->missed_heartbeats == b->missed_heartbeats && same_str(a->json, b->json) &&
           a->tail == b->tail && same_fold(a->fold, b->fold);
}

static int same_summary(const pt_record_summary *a, const pt_record_summary *b)
{
    return a->entries == b->entries && a->event_msgs == b->event_msgs && a->events == b->events &&
           a->metrics == b->metrics && a->plans == b->plans &&
           a->first_start_ns == b->first_start_ns && a->last_end_ns == b->last_end_ns &&
           a->first_step == b->first_step && a->last_step == b->last_step &&
           a->rejected == b->rejected;
}

/* Reads text both ways (strict or lenient): 1 when they agree on the
 * outcome, the error, every entry and the summary. */
static int both_ways_agree(const char *text, size_t len, int lenient, int *accepted)
{
    pt_record *fast = NULL, *slow = NULL;
    pt_error ef = {0}, es = {0};
    int rf = pt_record_internal_parse(text, len, "test", 1, lenient, &fast, &ef);
    int rs = pt_record_internal_parse(text, len, "test", 0, lenient, &slow, &es);
    int same = rf == rs && (rf == 0 || !strcmp(ef.msg, es.msg));
    if (same && rf == 0) {
        pt_record_summary sf, ss;
        pt_record_summarize(fast, &sf);
        pt_record_summarize(slow, &ss);
        pt_error ff = {0}, fs = {0};
        same = pt_record_count(fast) == pt_record_count(slow) && same_summary(&sf, &ss) &&
               pt_record_skipped(fast, &ff) == pt_record_skipped(slow, &fs) &&
               !strcmp(ff.msg, fs.msg);
        for (int64_t i = 0; same && i < pt_record_count(fast); i++)
            same = same_entry(pt_record_at(fast, i), pt_record_at(slow, i));
    }
    if (!same)
        fprintf(stderr, "both ways differ: fast %d \"%s\", general %d \"%s\"\n", rf, ef.msg, rs,
                es.msg);
    if (accepted)
        *accepted = rf == 0 && pt_record_skipped(fast, NULL) == 0;
    pt_record_free(&fast);
    pt_record_free(&slow);
    return same;
}

/* A metrics message with the values a run sends, and the edges of each. */
static void random_metrics(pt_msg *m, int i)
{
    char agent[16];
    snprintf(agent, sizeof agent, i % 7 ? "w%d" : "host-%d.a:b@c_d", i % 5);
    pt_msg_init(m, PT_MSG_METRICS, agent);
    pt_msg_metrics *x = &m->u.metrics;
    m->seq = i % 11 ? (int64_t)(next() % 1000000) : 999999999999999;
    m->gen = (int64_t)(next() % 3);
    x->stage = i % 13 ? (int)(next() % 8) : PT_MSG_MAX_INDEX - 1;
    x->replica = (int)(next() % 4);
    x->step = i % 17 ? (int64_t)(next() % 100000) : 0;
    static const double edges[] = {0, 1e-300, 1e300, -2.5, 5e-324, 123456789.125, 1e21};
    x->loss = i % 3 == 0 ? NAN : i % 5 == 0 ? edges[i % 7] : unit() * 3;
    x->samples_per_s = i % 19 ? unit() * 2000 : 0;
    x->iter_ms = i % 23 ? 50 + unit() * 10 : edges[(i / 23) % 7] < 0 ? 0 : edges[(i / 23) % 7];
    for (int k = 0; k < PT_MSG_MEM_COUNT; k++) {
        x->mem_cur[k] = (int64_t)(next() % 100000000);
        x->mem_peak[k] = x->mem_cur[k] + (int64_t)(next() % 3) * 4096;
    }
    x->total_cur = i % 29 ? 16034232 : 0;
    /* 16 digits: exact, but past the fast way's 15 (the general way reads it) */
    x->total_peak = i % 31 ? x->total_cur + 197312 : 1234567890123456;
    if (i % 4 == 1) {
        x->device_total = (int64_t)(next() % 80000000000LL) + 1;
        x->device_free = i % 8 == 1 ? x->device_total : x->device_total / 3;
    }
    if (i % 37 == 36) { /* a fold of steps: the general way */
        x->steps = 3;
        x->step += 3;
        for (int k = 0; k < 3; k++)
            x->losses[k] = k == 1 ? NAN : unit();
    }
}

static int same_metrics(const pt_msg *a, const pt_msg *b)
{
    const pt_msg_metrics *x = &a->u.metrics, *y = &b->u.metrics;
    int same = a->type == b->type && !strcmp(a->agent, b->agent) && a->seq == b->seq &&
               a->gen == b->gen && a->req == b->req && x->stage == y->stage &&
               x->replica == y->replica && x->step == y->step && same_num(x->loss, y->loss) &&
               x->steps == y->steps && same_num(x->samples_per_s, y->samples_per_s) &&
               same_num(x->iter_ms, y->iter_ms) && x->total_cur == y->total_cur &&
               x->total_peak == y->total_peak && x->device_free == y->device_free &&
               x->device_total == y->device_total;
    for (int k = 0; same && k < PT_MSG_FOLD_MAX; k++)
        same = same_num(x->losses[k], y->losses[k]);
    for (int k = 0; same && k < PT_MSG_MEM_COUNT; k++)
        same = x->mem_cur[k] == y->mem_cur[k] && x->mem_peak[k] == y->mem_peak[k];
    return same;
}

/* A fold line in the shape protocol/record_fold.c writes. */
static size_t random_fold(char *out, size_t cap, int i)
{
    int64_t start = (int64_t)(next() % 100000000000LL) - (i % 9 ? 0 : 200000000000LL);
    size_t n =
        (size_t)snprintf(out, cap,
                         "{\"t\":%d,\"kind\":\"fold\",\"gen\":%d,\"agent\":\"w%d\",\"stage\":%d,"
                         "\"replica\":%d,\"step\":%d,\"start_ns\":%lld,\"end_ns\":%lld,"
                         "\"busy_ns\":%d,\"seqs\":[",
                         1000 + i, i % 3, i % 4, i % 11 ? i % 4 : PT_MSG_MAX_INDEX, i % 2, i,
                         (long long)start, (long long)(start + (i % 5) * 1000003), i * 7);
    int nseq = 1 + i % 3;
    for (int s = 0; s < nseq; s++)
        n += (size_t)snprintf(out + n, cap - n, "%s%d", s ? "," : "",
                              i % 13 ? 2 * i + s : INT32_MAX - s);
    n += (size_t)snprintf(out + n, cap - n, "],\"ops\":{");
    int first = 1;
    for (int k = 0; k < PT_OP_KIND_COUNT; k++) {
        if (k != i % PT_OP_KIND_COUNT && next() % 3)
            continue;
        int64_t count = 1 + (int64_t)(next() % 8), lo = (int64_t)(next() % 100000),
                hi = lo + (int64_t)(next() % 1000);
        int64_t total = count == 1 ? hi : lo * (count - 1) + hi;
        n += (size_t)snprintf(out + n, cap - n, "%s\"%s\":[%lld,%lld,%lld,%lld]", first ? "" : ",",
                              pt_op_name(k), (long long)count, (long long)total,
                              (long long)(count == 1 ? hi : lo), (long long)hi);
        first = 0;
    }
    n += (size_t)snprintf(out + n, cap - n, "}}");
    return n;
}

/* A recv line of frame (the writer's header). */
static size_t recv_line(char *out, size_t cap, int64_t t, const char *frame, size_t len)
{
    return (size_t)snprintf(out, cap,
                            "{\"t\":%lld,\"kind\":\"recv\",\"channel\":\"telemetry\",\"offset_ns\":"
                            "%lld,\"len\":%zu,\"msg\":%s}",
                            (long long)t, (long long)(t % 3 ? -t : t), len, frame);
}

/* Metrics frames and fold lines of the writer's shape: the scanners take
 * every one a writer of this build gives them (the few they leave to the
 * general way are those named above), and a record of them reads the same
 * both ways. */
static void test_writer_shape_both_ways(void)
{
    char *text = malloc(TEXT_CAP);
    REQUIRE(text);
    size_t n = (size_t)snprintf(text, TEXT_CAP, "%s", SESSION);
    int scanned = 0, general = 0, folds = 0;
    for (int i = 0; i < FRAMES; i++) {
        pt_msg m, dec, fast;
        random_metrics(&m, i);
        char *frame = NULL;
        size_t flen = 0;
        pt_error err = {0};
        REQUIRE(pt_msg_encode(&m, &frame, &flen, &err) == 0);
        REQUIRE(pt_msg_decode(frame, flen, "frame", &dec, &err) == 0);
        int wide = m.u.metrics.steps > 1 || m.u.metrics.total_peak > 999999999999999;
        if (pt_record_scan_metrics(frame, flen, &fast)) {
            scanned++;
            CHECK_MSG(same_metrics(&fast, &dec), "frame %d: %s", i, frame);
        } else {
            general++;
            CHECK_MSG(wide, "frame %d left to the general way: %s", i, frame);
        }
        n += recv_line(text + n, TEXT_CAP - n, 2000 + i, frame, flen);
        text[n++] = '\n';
        free(frame);
        pt_msg_clear(&dec);
        char fold[2048];
        size_t fl = random_fold(fold, sizeof fold, i);
        pt_record_scanned_fold sf;
        folds += pt_record_scan_fold(fold, fl, &sf);
        memcpy(text + n, fold, fl);
        n += fl;
        text[n++] = '\n';
    }
    CHECK(scanned > FRAMES * 3 / 4 && general > 0 && folds == FRAMES);
    int accepted = 0;
    CHECK(both_ways_agree(text, n, 0, &accepted));
    CHECK(accepted);
    free(text);
}

/* A record written by the real writer (folding on): every fold line and
 * every metrics frame of it takes the fast way, and it reads the same. */
static void test_written_record_both_ways(void)
{
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    REQUIRE(pt_file_read(pt_test_path("tests/data/record-v3/folded.ndjson"), &text, &len, &err) ==
            0);
    int folds = 0, metrics = 0;
    for (char *line = text, *nl; (nl = memchr(line, '\n', len - (size_t)(line - text)));
         line = nl + 1) {
        pt_record_scanned_fold sf;
        if (strstr(line, "\"kind\":\"fold\"") && strstr(line, "\"kind\":\"fold\"") < nl) {
            folds++;
            CHECK_MSG(pt_record_scan_fold(line, (size_t)(nl - line), &sf), "line %.80s", line);
        }
        const char *f = strstr(line, ",\"msg\":{\"v\":1,\"type\":\"metrics\"");
        if (f && f < nl) {
            pt_msg m;
            metrics++;
            f += strlen(",\"msg\":");
            CHECK_MSG(pt_record_scan_metrics(f, (size_t)(nl - 1 - f), &m), "line %.80s", line);
        }
    }
    CHECK(folds > 0 && metrics > 0);
    CHECK(both_ways_agree(text, len, 0, NULL));
    free(text);
}

/* Lines of the writer's shape with one byte cut, changed or added, at every
 * place: both ways accept the same ones (the same entry) and refuse the
 * others with the same words. */
static void mutate_each_byte(const char *line)
{
    static const char repl[] = "09-1.e\" ,}{[]x\\";
    char text[4096];
    size_t head = strlen(SESSION), len = strlen(line);
    memcpy(text, SESSION, head);
    int cases = 0, accepted = 0, differ = 0;
    for (size_t i = 0; i < len; i++) {
        for (size_t r = 0; r <= sizeof repl - 1 + 2; r++) {
            char *p = text + head;
            size_t n;
            if (r == sizeof repl - 1) { /* cut */
                memcpy(p, line, i);
                memcpy(p + i, line + i + 1, len - i - 1);
                n = len - 1;
            } else if (r == sizeof repl) { /* a digit added */
                memcpy(p, line, i);
                p[i] = '7';
                memcpy(p + i + 1, line + i, len - i);
                n = len + 1;
            } else if (r == sizeof repl + 1) { /* the line ends here */
                memcpy(p, line, i);
                n = i;
            } else {
                if (line[i] == repl[r])
                    continue;
                memcpy(p, line, len);
                p[i] = repl[r];
                n = len;
            }
            p[n++] = '\n';
            int ok = 0;
            cases++;
            if (!both_ways_agree(text, head + n, 0, &ok)) {
                if (differ++ < 5)
                    fprintf(stderr, "  at byte %zu: %.*s", i, (int)n, p);
            }
            accepted += ok;
        }
    }
    CHECK_MSG(differ == 0, "%d of %d changed lines read differently", differ, cases);
    CHECK(accepted > 0 && accepted < cases);
}

static void test_changed_lines_both_ways(void)
{
    pt_msg m;
    char *frame = NULL, line[4096];
    size_t flen = 0;
    random_metrics(&m, 1); /* with "device" */
    m.u.metrics.loss = 0.75;
    REQUIRE(pt_msg_encode(&m, &frame, &flen, NULL) == 0);
    recv_line(line, sizeof line, 12345, frame, flen);
    free(frame);
    mutate_each_byte(line);
    random_fold(line, sizeof line, 4);
    mutate_each_byte(line);
}

/* One bad line after the session: refused naming the file, the line and
 * the reason, by the strict reader and the lenient load alike. */
static void check_bad(const char *line, const char *reason)
{
    char text[4096];
    snprintf(text, sizeof text, "%s%s\n", SESSION, line);
    pt_record *r = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_record_parse(text, strlen(text), "test", &r, &err) < 0, "accepted: %s", line);
    CHECK(r == NULL);
    CHECK_STR_CONTAINS(err.msg, "test:2: ");
    CHECK_STR_CONTAINS(err.msg, reason);
    CHECK(both_ways_agree(text, strlen(text), 0, NULL));
    pt_error skipped = {0};
    CHECK(pt_record_internal_parse(text, strlen(text), "test", 1, 1, &r, &err) == 0);
    CHECK(pt_record_skipped(r, &skipped) == 1);
    CHECK_STR_CONTAINS(skipped.msg, reason);
    pt_record_free(&r);
}

#define METRICS(agent, stage, loss, rate, acts_peak, device)                                       \
    "{\"v\":1,\"type\":\"metrics\",\"agent\":\"" agent "\",\"seq\":1,\"gen\":1,\"stage\":" stage   \
    ",\"replica\":0,\"step\":3,\"loss\":" loss ",\"samples_per_s\":" rate ",\"iter_ms\":5,"        \
    "\"memory\":{\"weights\":{\"cur\":1,\"peak\":1},\"grads\":{\"cur\":1,\"peak\":1},\"optim\":{"  \
    "\"cur\":1,\"peak\":1},\"acts\":{\"cur\":6,\"peak\":" acts_peak "},\"stash\":{\"cur\":1,"      \
    "\"peak\":1},\"comm\":{\"cur\":1,\"peak\":1},\"total\":{\"cur\":11,\"peak\":11}}" device "}"
#define FOLD(stage, start, end, seqs, ops)                                                         \
    "{\"t\":9,\"kind\":\"fold\",\"gen\":1,\"agent\":\"w0\",\"stage\":" stage ",\"replica\":0,"     \
    "\"step\":4,\"start_ns\":" start ",\"end_ns\":" end ",\"busy_ns\":5,\"seqs\":[" seqs "],"      \
    "\"ops\":{" ops "}}"

/* A recv line of frame, its "len" right (a wrong one is an error of its own). */
static void check_bad_metrics(const char *frame, const char *reason)
{
    char line[4096];
    snprintf(line, sizeof line,
             "{\"t\":5,\"kind\":\"recv\",\"channel\":\"telemetry\",\"offset_ns\":0,\"len\":%zu,"
             "\"msg\":%s}",
             strlen(frame), frame);
    check_bad(line, reason);
}

static void test_bad_lines_named(void)
{
    /* the good ones, for contrast: accepted, the fast way */
    char text[8192];
    const char *good_m =
        METRICS("w0", "0", "null", "1.5", "6", ",\"device\":{\"free\":1,\"total\":2}");
    const char *good_f = FOLD("0", "10", "20", "1", "\"FWD\":[2,30,10,20]");
    pt_msg m;
    pt_record_scanned_fold sf;
    CHECK(pt_record_scan_metrics(good_m, strlen(good_m), &m));
    CHECK(pt_record_scan_fold(good_f, strlen(good_f), &sf));
    pt_record *r = NULL;
    pt_error err = {0};
    char line[4096];
    snprintf(line, sizeof line,
             "{\"t\":5,\"kind\":\"recv\",\"channel\":\"telemetry\",\"offset_ns\":0,\"len\":%zu,"
             "\"msg\":%s}",
             strlen(good_m), good_m);
    snprintf(text, sizeof text, "%s%s\n%s\n", SESSION, line, good_f);
    CHECK_MSG(pt_record_parse(text, strlen(text), "test", &r, &err) == 0, "%s", err.msg);
    pt_record_free(&r);

    check_bad_metrics(METRICS("w0", "0", "null", "-1", "6", ""), "samples_per_s: must be >= 0");
    check_bad_metrics(METRICS("w0", "0", "null", "1", "5", ""),
                      "memory.acts.peak: 5 is below cur 6");
    check_bad_metrics(METRICS("w0", "4096", "null", "1", "6", ""), "stage: must be <= 4095");
    check_bad_metrics(METRICS("w 0", "0", "null", "1", "6", ""), "agent: character 0x20");
    check_bad_metrics(METRICS("w0", "0", "1e999", "1", "6", ""), "loss: must be a finite number");
    check_bad_metrics(METRICS("w0", "0", "\"x\"", "1", "6", ""), "loss: must be a number");
    check_bad_metrics(METRICS("w0", "0", "null", "1", "6", ",\"device\":{\"free\":3,\"total\":2}"),
                      "device.free: must be <= 2");
    check_bad_metrics(METRICS("w0", "0", "null", "1", "6", ",\"cpu\":1"), "cpu: unknown field");

    check_bad(FOLD("0", "10", "20", "1", "\"FWD\":[2,900,200,300]"),
              "ops.FWD: count 2, total 900, min 200, max 300 do not agree");
    check_bad(FOLD("0", "30", "20", "1", "\"FWD\":[1,5,5,5]"), "end_ns: must be >= 30");
    check_bad(FOLD("0", "10", "20", "1", "\"FLY\":[1,5,5,5]"), "ops.FLY: not an op kind");
    check_bad(FOLD("0", "10", "20", "1", "\"FWD\":[1,5,5,5],\"FWD\":[1,5,5,5]"),
              "ops.FWD: given twice");
    check_bad(FOLD("0", "10", "20", "1", ""), "ops: empty");
    check_bad(FOLD("0", "10", "20", "2147483648", "\"FWD\":[1,5,5,5]"), "seqs[0]");
    check_bad(FOLD("0", "10", "20", "", "\"FWD\":[1,5,5,5]"), "seqs: must not be empty");
    check_bad(FOLD("4097", "10", "20", "1", "\"FWD\":[1,5,5,5]"), "stage: must be <= 4096");
    check_bad(FOLD("0", "10", "20", "1", "\"FWD\":[1,5,5]"), "ops.FWD: must be [count");
}

PT_TEST_MAIN({"writer_shape_both_ways", test_writer_shape_both_ways},
             {"written_record_both_ways", test_written_record_both_ways},
             {"changed_lines_both_ways", test_changed_lines_both_ways},
             {"bad_lines_named", test_bad_lines_named})

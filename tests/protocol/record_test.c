/* protocol/record.h: what the writer writes, the reader reads back, frames
 * byte for byte; the writer refuses what the reader would refuse; records of
 * version 1 (earlier builds) still read. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "protocol/record.h"
#include "tests/test.h"

#define DIR "record_test.d"

/* A metrics frame written by hand, with blanks a re-encoding would drop. */
static const char frame_spaced[] =
    "{ \"v\":1, \"type\":\"metrics\", \"agent\":\"w0\", \"seq\":3, \"gen\":1, \"stage\":0, "
    "\"replica\":0, \"step\":7, \"loss\":0.5, \"samples_per_s\":10 }";
/* The same kind of frame with a line break in it: stored as a string. */
static const char frame_broken[] = "{\"v\":1,\"type\":\"metrics\",\"agent\":\"w1\",\"seq\":0,\n"
                                   "\"gen\":1,\"stage\":1,\"replica\":0,\"step\":8,\"loss\":null,"
                                   "\"samples_per_s\":0}\r\n";

static pt_plan *two_stage_plan(void)
{
    pt_plan *p = pt_plan_new(2);
    snprintf(p->model, sizeof p->model, "m");
    p->layer_count = 2;
    p->stages[0].first = 0;
    p->stages[0].last = 1;
    p->stages[1].first = 1;
    p->stages[1].last = 2;
    int d0 = 0, d1 = 1;
    pt_plan_set_replicas(p, 0, &d0, 1);
    pt_plan_set_replicas(p, 1, &d1, 1);
    p->microbatch_size = 4;
    p->microbatch_count = 2;
    return p;
}

static pt_model_spec *tiny_model(void)
{
    pt_model_spec *m = NULL; /* a test then fails on the NULL it returns */
    const char *text = "{\"v\":1,\"name\":\"m\",\"input\":{\"kind\":\"float\",\"shape\":[4]},"
                       "\"layers\":[{\"type\":\"linear\",\"out\":2},"
                       "{\"type\":\"softmax_xent\",\"classes\":2}]}";
    CHECK(pt_model_spec_parse(text, "model", &m, NULL) == 0);
    return m;
}

static void test_round_trip(void)
{
    const char *path = DIR "/a/run.ndjson";
    pt_record_writer *w = NULL;
    pt_error err = {0};
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    REQUIRE(pt_record_writer_open(path, &ses, &w, &err) == 0);
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    REQUIRE(model != NULL);
    pt_record_worker workers[2] = {{0, "w0", 0, 0, 100}, {1, "w1", 1, 0, 101}};
    pt_record_plan rp = {1, plan, model, "synthetic", 9, "", 0, 0, 2, workers};
    CHECK(pt_record_write_plan(w, &rp) == 0);
    CHECK(pt_record_write_frame(w, PT_RECORD_RECV, "telemetry", -42, frame_spaced,
                                strlen(frame_spaced)) == 0);
    CHECK(pt_record_write_frame(w, PT_RECORD_RECV, "telemetry", 5, frame_broken,
                                strlen(frame_broken)) == 0);
    CHECK(pt_record_write_agent(w, "w0", "running", 3) == 0);
    CHECK(pt_record_write_rejected(w, "telemetry", NULL, "not JSON") == 0);
    CHECK(pt_record_write_dead(w, "w1", "missed 12 heartbeats") == 0);
    CHECK(pt_record_write_checkpoint(w, 4, "ck/step-4", 1.25) == 0);
    CHECK(pt_record_write_checkpoint_failed(w, 6, "ck/step-6", "disk full") == 0);
    CHECK(pt_record_write_json(w, "summary", "{\"measured_iteration_ms\":2.5,\"stages\":2}") == 0);
    CHECK(pt_record_write_json(w, "failed", "{\"reason\":\"w1 died\"}") == 0);
    pt_record_writer_close(&w);
    CHECK(w == NULL);

    pt_record *r = NULL;
    REQUIRE(pt_record_load(path, &r, &err) == 0);
    CHECK(pt_record_version(r) == PT_RECORD_VERSION);
    static const pt_record_line_kind want[] = {
        PT_RECORD_SESSION, PT_RECORD_PLAN,       PT_RECORD_RECV,
        PT_RECORD_RECV,    PT_RECORD_AGENT,      PT_RECORD_REJECTED,
        PT_RECORD_DEAD,    PT_RECORD_CHECKPOINT, PT_RECORD_CHECKPOINT_FAILED,
        PT_RECORD_SUMMARY, PT_RECORD_FAILED};
    REQUIRE(pt_record_count(r) == (int64_t)(sizeof want / sizeof want[0]));
    for (int64_t i = 0; i < pt_record_count(r); i++) {
        CHECK_MSG(pt_record_at(r, i)->kind == want[i], "entry %lld", (long long)i);
        CHECK(pt_record_at(r, i)->line == i + 1);
        CHECK(i == 0 || pt_record_t_ns(r, i) >= pt_record_t_ns(r, i - 1));
    }
    const pt_record_entry *e = pt_record_at(r, 0);
    CHECK(!strcmp(e->control, "tcp://127.0.0.1:1") && e->heartbeat_ms == 250 &&
          e->missed_heartbeats == 12);
    e = pt_record_at(r, 1);
    REQUIRE(e->plan != NULL);
    CHECK(e->gen == 1 && e->plan->stage_count == 2 && e->seed == 9 && e->worker_count == 2);
    CHECK(!strcmp(e->workers[1].agent, "w1") && e->workers[1].stage == 1 &&
          e->workers[1].pid == 101);
    CHECK_STR_CONTAINS(pt_record_model_json(r, -1), "\"softmax_xent\"");
    /* the frames are the bytes given, blanks and line breaks included */
    e = pt_record_at(r, 2);
    CHECK(e->frame_len == strlen(frame_spaced) && !memcmp(e->frame, frame_spaced, e->frame_len));
    CHECK(e->offset_ns == -42 && e->msg_type == PT_MSG_METRICS && e->step == 7);
    e = pt_record_at(r, 3);
    CHECK(e->frame_len == strlen(frame_broken) && !memcmp(e->frame, frame_broken, e->frame_len));
    pt_msg m;
    REQUIRE(pt_record_msg(r, 3, &m, &err) == 0);
    CHECK(m.type == PT_MSG_METRICS && m.u.metrics.step == 8 && !strcmp(m.agent, "w1"));
    pt_msg_clear(&m);
    CHECK(pt_record_msg(r, 4, &m, &err) == PT_EINVAL); /* an agent line holds no frame */
    e = pt_record_at(r, 4);
    CHECK(!strcmp(e->agent, "w0") && !strcmp(e->state, "running") && e->step == 3);
    e = pt_record_at(r, 5);
    CHECK(e->agent == NULL && !strcmp(e->reason, "not JSON"));
    e = pt_record_at(r, 7);
    CHECK(e->step == 4 && !strcmp(e->dir, "ck/step-4") && e->commit_ms == 1.25);
    CHECK_STR_CONTAINS(pt_record_at(r, 9)->json, "\"measured_iteration_ms\":2.5");
    CHECK(!strcmp(pt_record_at(r, 10)->reason, "w1 died"));
    pt_record_summary sum;
    pt_record_summarize(r, &sum);
    CHECK(sum.entries == 11 && sum.plans == 1 && sum.metrics == 2 && sum.rejected == 1);
    CHECK(sum.first_step == 7 && sum.last_step == 8);
    pt_record_free(&r);
    CHECK(r == NULL);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
}

/* What the reader would refuse is not written, and the record stays whole. */
static void test_writer_refuses(void)
{
    const char *path = DIR "/b/run.ndjson";
    pt_record_writer *w = NULL;
    pt_record_session ses = {"tcp://c", "tcp://t", 100, 6};
    REQUIRE(pt_record_writer_open(path, &ses, &w, NULL) == 0);
    CHECK(pt_record_write_agent(w, "w0", "", 3) == PT_EINVAL);          /* empty state */
    CHECK(pt_record_write_rejected(w, "data", "w0", "x") == PT_EINVAL); /* no such channel */
    CHECK(pt_record_write_json(w, "plan", "{}") == PT_EINVAL);          /* plans are typed */
    CHECK(pt_record_write_json(w, "failed", "{\"why\":\"x\"}") == PT_EINVAL);
    CHECK(pt_record_write_json(w, "summary", "[1]") == PT_EINVAL);
    CHECK(pt_record_write_frame(w, PT_RECORD_AGENT, "control", 0, "{}", 2) == PT_EINVAL);
    CHECK(pt_record_write_frame(w, PT_RECORD_SENT, "data", 0, "{}", 2) == PT_EINVAL);
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    pt_record_worker one[1] = {{0, "w0", 0, 0, 1}};
    pt_record_plan rp = {1, plan, model, "synthetic", 1, NULL, 0, 0, 1, one}; /* 2 replicas */
    CHECK(pt_record_write_plan(w, &rp) == PT_EINVAL);
    CHECK(pt_record_write_agent(w, "w0", "idle", 4) == 0);
    pt_record_writer_close(&w);
    pt_record *r = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_load(path, &r, &err) == 0);
    CHECK(pt_record_count(r) == 2);
    pt_record_free(&r);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
}

/* A record of an earlier build (version 1: re-encoded messages, no "len"). */
static void test_version_one(void)
{
    pt_record *r = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_load(pt_test_path("tests/data/run-dapple4/run.ndjson"), &r, &err) == 0);
    CHECK(pt_record_version(r) == 1);
    int64_t n[PT_RECORD_KIND_COUNT] = {0};
    for (int64_t i = 0; i < pt_record_count(r); i++)
        n[pt_record_at(r, i)->kind]++;
    CHECK(n[PT_RECORD_SESSION] == 1 && n[PT_RECORD_PLAN] == 1 && n[PT_RECORD_RECV] == 56 &&
          n[PT_RECORD_SENT] == 12 && n[PT_RECORD_AGENT] == 16 && n[PT_RECORD_SUMMARY] == 1);
    pt_record_summary sum;
    pt_record_summarize(r, &sum);
    CHECK(sum.events == 420 && sum.first_step >= 0 && sum.last_step > sum.first_step);
    pt_record_free(&r);
    /* the same line with "len" and the wrong count is refused under v2 only */
    const char *v1 = "{\"t\":1,\"kind\":\"session\",\"v\":1,\"unix_s\":0,\"control\":\"c\","
                     "\"telemetry\":\"t\",\"heartbeat_ms\":1,\"missed_heartbeats\":1}\n"
                     "{\"t\":2,\"kind\":\"sent\",\"channel\":\"control\",\"offset_ns\":0,"
                     "\"msg\":{\"v\":1,\"type\":\"bye\",\"agent\":\"a\",\"seq\":0,\"gen\":0}}\n";
    REQUIRE(pt_record_parse(v1, strlen(v1), "v1", &r, &err) == 0);
    CHECK(pt_record_at(r, 1)->msg_type == PT_MSG_BYE);
    pt_record_free(&r);
    char v2[1024];
    snprintf(v2, sizeof v2, "%s", v1);
    memcpy(strstr(v2, "\"v\":1,\"unix"), "\"v\":2", 5);
    CHECK(pt_record_parse(v2, strlen(v2), "v2", &r, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "v2:2: len: missing");
}

static void setup(void)
{
    pt_mkdir_p(DIR, NULL);
}

/* A write that fails (the file system full, a file size limit) is
 * remembered with the file and the error, and every later write fails too,
 * so nothing is appended after the cut (issue 13). */
static void test_write_failure_sticky(void)
{
    const char *path = DIR "/limited.ndjson";
    pt_record_session ses = {"tcp://c", "tcp://t", 100, 6};
    pt_record_writer *w = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_writer_open(path, &ses, &w, &err) == 0);
    /* RLIMIT_FSIZE stands in for a full disk without root: writes past it
     * fail with EFBIG (SIGXFSZ ignored) */
    struct rlimit old, lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 64 * 1024;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    char frame[1024];
    memset(frame, 'x', sizeof frame);
    memcpy(frame, "{\"v\":1,\"s\":\"", 13);
    memcpy(frame + sizeof frame - 2, "\"}", 2);
    int rc = 0, n = 0;
    for (; n < 1000 && rc == 0; n++)
        if ((rc = pt_record_write_frame(w, PT_RECORD_RECV, "control", 0, frame, sizeof frame)) == 0)
            rc = pt_record_flush(w);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CHECK(rc == PT_EIO);
    CHECK_MSG(n > 10 && n < 1000, "failed after %d frames", n);
    CHECK(pt_record_writer_failed(w, &err) == 1);
    CHECK_STR_CONTAINS(err.msg, "run record " DIR "/limited.ndjson: write failed: File too large");
    /* sticky: below the limit again, nothing more is written */
    long before = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        fseek(f, 0, SEEK_END);
        before = ftell(f);
        fclose(f);
    }
    CHECK(pt_record_write_frame(w, PT_RECORD_RECV, "control", 0, "{}", 2) == PT_EIO);
    CHECK(pt_record_write_json(w, "failed", "{\"reason\":\"x\"}") == PT_EIO);
    CHECK(pt_record_flush(w) == PT_EIO);
    pt_record_writer_close(&w);
    f = fopen(path, "r");
    long after = -1;
    if (f) {
        fseek(f, 0, SEEK_END);
        after = ftell(f);
        fclose(f);
    }
    CHECK_MSG(after == before, "%ld bytes after the cut, %ld before", after, before);
    /* a record that cannot take even its first line names the reason */
    CHECK(pt_record_writer_open("/dev/full", &ses, &w, &err) == PT_EIO);
    CHECK_STR_CONTAINS(err.msg, "run record /dev/full: cannot write the session line (No space");
}

/* One damaged line does not make a record unreadable (issue 25, item 9):
 * the tools' read passes over it, counts it and keeps its error; the lines
 * around it are read; the strict parser still refuses the file. */
static void test_bad_line_skipped(void)
{
    const char *path = DIR "/damaged.ndjson";
    pt_record_session ses = {"tcp://c", "tcp://t", 100, 6};
    pt_record_writer *w = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_writer_open(path, &ses, &w, &err) == 0);
    REQUIRE(pt_record_write_agent(w, "a1", "running", 3) == 0);
    REQUIRE(pt_record_write_agent(w, "a2", "running", 4) == 0);
    REQUIRE(pt_record_write_agent(w, "a3", "stopped", 5) == 0);
    pt_record_writer_close(&w);
    char *text = NULL;
    size_t len = 0;
    REQUIRE(pt_file_read(path, &text, &len, NULL) == 0);
    char *second = strstr(text, "\"a2\"");
    REQUIRE(second);
    memcpy(second, "\x01\x02", 2); /* the a2 line is no longer JSON */
    REQUIRE(pt_file_write_atomic(path, text, len, NULL) == 0);
    pt_record *r = NULL;
    CHECK(pt_record_parse(text, len, path, &r, &err) == PT_EPARSE);
    free(text);
    pt_error first = {0};
    REQUIRE(pt_record_load(path, &r, &err) == 0);
    CHECK(pt_record_skipped(r, &first) == 1);
    CHECK_STR_CONTAINS(first.msg, DIR "/damaged.ndjson:3:");
    CHECK(pt_record_count(r) == 3); /* session, a1, a3 */
    const pt_record_entry *e = pt_record_at(r, 2);
    REQUIRE(e);
    CHECK(e->kind == PT_RECORD_AGENT && !strcmp(e->agent, "a3") && e->line == 4);
    pt_record_free(&r);
}

/* An events frame of agent w0 (stage 0) at step, written as the session
 * writes a received one. */
static void put_events(pt_record_writer *w, int64_t *seq, int64_t gen, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_EVENTS, "w0");
    m.seq = (*seq)++;
    m.gen = gen;
    pt_msg_event ev = {.step = step, .op = PT_OP_FWD, .mb = 0, .version = -1};
    ev.start_ns = step * 1000000;
    ev.end_ns = ev.start_ns + 1000;
    m.u.events.count = 1;
    m.u.events.events = &ev;
    char *text = NULL;
    size_t len = 0;
    CHECK(pt_msg_encode(&m, &text, &len, NULL) == 0);
    if (text)
        CHECK(pt_record_write_telemetry(w, 0, text, len, &m) == 0);
    free(text);
}

/* A frame of generation 1 that arrives after generation 2's plan (late
 * telemetry, docs/protocol.md) is written whole, and generation 2's folding
 * goes on as if it had not come: before, the writer took it for a new
 * generation, ended generation 2's folds and, at generation 2's next frame,
 * began its head window again (steps 6-9 written whole, not folded). */
static void test_late_frame_keeps_folding(void)
{
    const char *path = DIR "/late/run.ndjson";
    pt_record_writer *w = NULL;
    pt_error err = {0};
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    REQUIRE(pt_record_writer_open(path, &ses, &w, &err) == 0);
    const pt_record_fold_opts fold = {4, 2, 0, 0, 0}; /* detail: 0-3 and the last 2 steps */
    CHECK(pt_record_writer_set_fold(w, &fold, 0) == 0);
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    REQUIRE(model != NULL);
    pt_record_worker workers[2] = {{0, "w0", 0, 0, 100}, {1, "w1", 1, 0, 101}};
    pt_record_plan rp = {1, plan, model, "synthetic", 9, "", 0, 0, 2, workers};
    CHECK(pt_record_write_plan(w, &rp) == 0);
    int64_t seq = 0;
    for (int64_t st = 0; st < 10; st++)
        put_events(w, &seq, 1, st);
    rp.gen = 2;
    CHECK(pt_record_write_plan(w, &rp) == 0);
    for (int64_t st = 0; st < 6; st++)
        put_events(w, &seq, 2, st);
    put_events(w, &seq, 1, 10); /* generation 1's last step, read late */
    for (int64_t st = 6; st < 12; st++)
        put_events(w, &seq, 2, st);
    pt_record_writer_close(&w);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);

    pt_record *r = NULL;
    REQUIRE(pt_record_load(path, &r, &err) == 0);
    int plan2 = 0, late = 0, whole_folded_step = 0, folds2 = 0;
    for (int64_t i = 0; i < pt_record_count(r); i++) {
        const pt_record_entry *e = pt_record_at(r, i);
        plan2 |= e->kind == PT_RECORD_PLAN && e->gen == 2;
        if (!plan2)
            continue;
        if (e->kind == PT_RECORD_RECV && e->gen == 1 && e->step == 10 && !e->tail)
            late++;
        if (e->kind == PT_RECORD_RECV && e->gen == 2 && !e->tail && e->step >= 4 && e->step < 10)
            whole_folded_step++;
        folds2 += e->kind == PT_RECORD_FOLD && e->gen == 2;
    }
    CHECK_MSG(late == 1, "generation 1's late frame written %d times after generation 2's plan",
              late);
    CHECK_MSG(whole_folded_step == 0,
              "%d frames of generation 2's steps 4-9 written whole (outside its detail window)",
              whole_folded_step);
    CHECK_MSG(folds2 == 8, "%d fold lines of generation 2 (want steps 4-11)", folds2);
    pt_record_free(&r);
}

PT_TEST_MAIN({"setup", setup}, {"round_trip", test_round_trip},
             {"bad_line_skipped", test_bad_line_skipped}, {"writer_refuses", test_writer_refuses},
             {"version_one", test_version_one}, {"write_failure_sticky", test_write_failure_sticky},
             {"late_frame_keeps_folding", test_late_frame_keeps_folding})

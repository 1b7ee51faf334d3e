/* protocol/message and protocol/telemetry: every type survives encode ->
 * decode -> encode unchanged, the documented examples decode, every bad
 * message is refused naming the field, generations and senders are
 * enforced, sequence counting matches an independent model, and the clock
 * offset formula recovers a known offset. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>

#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/telemetry.h"
#include "tests/test.h"

static const char *const plan_text =
    "{\"v\":1,\"model\":\"m\",\"layers\":2,\"microbatch\":{\"size\":8,\"count\":2},"
    "\"schedule\":{\"kind\":\"gpipe\"},\"optimizer\":{\"kind\":\"sgd\",\"lr\":0.05,"
    "\"momentum\":0.9},\"stages\":[{\"layers\":[0,2],\"replicas\":[0]}]}";
static const char *const model_text =
    "{\"v\":1,\"name\":\"m\",\"input\":{\"kind\":\"float\",\"shape\":[4]},"
    "\"layers\":[{\"type\":\"linear\",\"out\":2},{\"type\":\"softmax_xent\",\"classes\":2}]}";

/* A message of each type with every field set away from its default. */
static void make_message(pt_msg_type t, pt_msg *m)
{
    pt_msg_init(m, t, "host-1.gpu:0@x");
    m->seq = 123456789012345LL;
    m->gen = 7;
    if (pt_msg_type_is_request(t) || t == PT_MSG_ACK || t == PT_MSG_CHECKPOINT_ACK ||
        t == PT_MSG_ERROR)
        m->req = 99;
    switch (t) {
    case PT_MSG_REGISTER: {
        pt_msg_register *r = &m->u.reg;
        snprintf(r->host, sizeof r->host, "node-7 \"quoted\" \\ \xc3\xa9");
        r->pid = 31337;
        r->device = 3;
        snprintf(r->device_name, sizeof r->device_name, "NVIDIA H200");
        snprintf(r->backend, sizeof r->backend, "cuda");
        r->memory_bytes = 150323855360LL;
        r->cap_count = 2;
        snprintf(r->caps[0], sizeof r->caps[0], "nccl");
        snprintf(r->caps[1], sizeof r->caps[1], "zmq");
        snprintf(r->data_endpoint, sizeof r->data_endpoint, "ipc:///tmp/x/r3");
        snprintf(r->gpu_bus_id, sizeof r->gpu_bus_id, "00000000:19:00.0");
        break;
    }
    case PT_MSG_ASSIGN: {
        pt_msg_assign *a = &m->u.assign;
        CHECK(pt_plan_parse(plan_text, "plan", &a->plan, NULL) == 0);
        CHECK(pt_model_spec_parse(model_text, "model", &a->model, NULL) == 0);
        a->stage = 1;
        a->replica = 2;
        a->rank = 5;
        a->chunks = 3;
        a->peer_count = 3;
        a->peers = calloc(3, sizeof *a->peers);
        for (int i = 0; i < 3; i++) {
            a->peers[i].rank = 4 + i;
            a->peers[i].stage = 1;
            a->peers[i].replica = 1 + i;
            snprintf(a->peers[i].endpoint, sizeof a->peers[i].endpoint, "tcp://127.0.0.1:%d",
                     5000 + i);
        }
        snprintf(a->data, sizeof a->data, "fashion-mnist");
        a->seed = 42;
        snprintf(a->checkpoint_dir, sizeof a->checkpoint_dir, "runs/r1/ckpt");
        a->checkpoint_every = 10;
        a->resume_step = 30;
        snprintf(a->telemetry, sizeof a->telemetry, "tcp://127.0.0.1:4000");
        snprintf(a->nccl_id, sizeof a->nccl_id, "00ff10ab");
        break;
    }
    case PT_MSG_ACK:
        m->u.ack.of = PT_MSG_STOP;
        m->u.ack.step = 7;
        break;
    case PT_MSG_START:
        m->u.start.steps = 1000;
        break;
    case PT_MSG_STOP:
        snprintf(m->u.stop.reason, sizeof m->u.stop.reason, "new plan");
        m->u.stop.at_step = 41;
        break;
    case PT_MSG_CHECKPOINT:
        m->u.checkpoint.step = 0;
        break;
    case PT_MSG_CHECKPOINT_ACK:
        m->u.checkpoint_ack.step = 12;
        snprintf(m->u.checkpoint_ack.dir, sizeof m->u.checkpoint_ack.dir, "/tmp/ckpt/12");
        break;
    case PT_MSG_HEARTBEAT: {
        pt_msg_heartbeat *h = &m->u.heartbeat;
        h->hb = 4;
        h->t_send = 9007199254740991LL; /* the largest exact integer */
        h->has_echo = 1;
        h->echo_hb = 3;
        h->echo_t_orig = 1;
        h->echo_t_recv = 900;
        snprintf(h->state, sizeof h->state, "running");
        h->step = 0;
        break;
    }
    case PT_MSG_ERROR:
        m->u.error.stage = 0;
        m->u.error.replica = 4095;
        m->u.error.code = PT_ETIMEOUT;
        snprintf(m->u.error.reason, sizeof m->u.error.reason, "line1\nline2\ttab");
        break;
    case PT_MSG_BYE:
        snprintf(m->u.bye.reason, sizeof m->u.bye.reason, "bye");
        break;
    case PT_MSG_EVENTS: {
        pt_msg_events *e = &m->u.events;
        e->count = 3;
        e->events = calloc(3, sizeof *e->events);
        for (int i = 0; i < 3; i++) {
            pt_msg_event *v = &e->events[i];
            v->stage = 2;
            v->replica = i;
            v->step = 17;
            v->mb = i - 1;
            v->op = i == 0 ? PT_OP_OPT_STEP : i == 1 ? PT_OP_FWD : PT_OP_SEND_ACT;
            v->version = i == 2 ? -1 : 5;
            v->start_ns = 1000000000000LL + i;
            v->end_ns = v->start_ns + 10 * i;
            v->bytes = i * 65536;
        }
        break;
    }
    case PT_MSG_METRICS: {
        pt_msg_metrics *x = &m->u.metrics;
        x->stage = 1;
        x->replica = 0;
        x->step = 77;
        x->loss = 0.1 + 0.2; /* not a short decimal: must survive exactly */
        x->samples_per_s = 1234.5;
        x->iter_ms = 1.0 / 3.0;
        for (int k = 0; k < PT_MSG_MEM_COUNT; k++) {
            x->mem_cur[k] = 1000 * (k + 1);
            x->mem_peak[k] = 3000 * (k + 1);
        }
        x->total_cur = 21000;
        x->total_peak = 50000;
        x->device_free = 120000000000LL;
        x->device_total = 150323855360LL;
        break;
    }
    default:
        break;
    }
}

/* Field-by-field equality (doubles bit for bit, NaN equal to NaN). */
static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* Two texts equal (both freed; NULL never equal). */
static int same_json(char *a, char *b)
{
    int same = a && b && !strcmp(a, b);
    free(a);
    free(b);
    return same;
}

static int msg_equal(const pt_msg *a, const pt_msg *b)
{
    if (a->type != b->type || strcmp(a->agent, b->agent) || a->seq != b->seq || a->gen != b->gen ||
        a->req != b->req)
        return 0;
    switch (a->type) {
    case PT_MSG_ASSIGN: {
        const pt_msg_assign *x = &a->u.assign, *y = &b->u.assign;
        if (!same_json(pt_plan_to_json(x->plan), pt_plan_to_json(y->plan)) ||
            !same_json(pt_model_spec_to_json(x->model), pt_model_spec_to_json(y->model)) ||
            x->stage != y->stage || x->replica != y->replica || x->rank != y->rank ||
            x->chunks != y->chunks || x->peer_count != y->peer_count || strcmp(x->data, y->data) ||
            x->seed != y->seed || strcmp(x->checkpoint_dir, y->checkpoint_dir) ||
            x->checkpoint_every != y->checkpoint_every || x->resume_step != y->resume_step ||
            strcmp(x->telemetry, y->telemetry) || strcmp(x->nccl_id, y->nccl_id))
            return 0;
        for (int i = 0; i < x->peer_count; i++)
            if (memcmp(&x->peers[i], &y->peers[i], sizeof x->peers[i]))
                return 0;
        return 1;
    }
    case PT_MSG_EVENTS:
        return a->u.events.count == b->u.events.count &&
               !memcmp(a->u.events.events, b->u.events.events,
                       (size_t)a->u.events.count * sizeof(pt_msg_event));
    case PT_MSG_METRICS: {
        const pt_msg_metrics *x = &a->u.metrics, *y = &b->u.metrics;
        return x->stage == y->stage && x->replica == y->replica && x->step == y->step &&
               same_double(x->loss, y->loss) && same_double(x->samples_per_s, y->samples_per_s) &&
               same_double(x->iter_ms, y->iter_ms) &&
               !memcmp(x->mem_cur, y->mem_cur, sizeof x->mem_cur) &&
               !memcmp(x->mem_peak, y->mem_peak, sizeof x->mem_peak) &&
               x->total_cur == y->total_cur && x->total_peak == y->total_peak &&
               x->device_free == y->device_free && x->device_total == y->device_total;
    }
    default:
        /* Plain structs of fixed arrays, zeroed by pt_msg_init on both sides
         * (snprintf leaves the tail of each array zero). */
        return !memcmp(&a->u, &b->u, sizeof a->u);
    }
}

static void test_round_trip_every_type(void)
{
    for (int t = 0; t < PT_MSG_TYPE_COUNT; t++) {
        pt_msg m, back;
        make_message((pt_msg_type)t, &m);
        char *text = NULL, *again = NULL;
        size_t len = 0;
        pt_error err = {0};
        int rc = pt_msg_encode(&m, &text, &len, &err);
        CHECK_MSG(rc == 0, "%s: %s", pt_msg_type_name((pt_msg_type)t), err.msg);
        if (rc != 0) {
            pt_msg_clear(&m);
            continue;
        }
        CHECK(len == strlen(text));
        rc = pt_msg_decode(text, len, "rt", &back, &err);
        CHECK_MSG(rc == 0, "%s: %s\n%s", pt_msg_type_name((pt_msg_type)t), err.msg, text);
        if (rc == 0) {
            CHECK_MSG(msg_equal(&m, &back), "%s differs after a round trip:\n%s",
                      pt_msg_type_name((pt_msg_type)t), text);
            CHECK(pt_msg_encode(&back, &again, NULL, &err) == 0);
            CHECK(again && strcmp(text, again) == 0);
        }
        free(text);
        free(again);
        pt_msg_clear(&back);
        pt_msg_clear(&m);
        CHECK(m.u.assign.peers == NULL && m.agent[0] == '\0');
    }
}

/* Every op kind travels as its name and comes back as the same kind; a
 * name that is not one of them is refused with the field named. */
static void test_op_kinds_on_the_wire(void)
{
    for (int k = 0; k < PT_OP_KIND_COUNT; k++) {
        pt_msg m;
        pt_msg_init(&m, PT_MSG_EVENTS, "a");
        pt_msg_event ev = {
            .op = (pt_op_kind)k, .mb = -1, .version = -1, .start_ns = 1, .end_ns = 2};
        m.u.events.count = 1;
        m.u.events.events = &ev;
        char *text = NULL;
        pt_error err = {0};
        REQUIRE(pt_msg_encode(&m, &text, NULL, &err) == 0);
        char want[64];
        snprintf(want, sizeof want, "\"op\":\"%s\"", pt_op_name(k));
        CHECK_STR_CONTAINS(text, want);
        pt_msg back;
        REQUIRE(pt_msg_decode(text, strlen(text), NULL, &back, &err) == 0);
        CHECK(back.u.events.count == 1 && back.u.events.events[0].op == (pt_op_kind)k);
        pt_msg_clear(&back);
        free(text);
    }
    static const char *const bad[] = {"JUMP", "fwd", "FWD_", "OPT"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "{\"v\":1,\"type\":\"events\",\"agent\":\"a\",\"seq\":0,\"gen\":0,"
                 "\"events\":[{\"stage\":0,\"replica\":0,\"step\":0,\"mb\":0,"
                 "\"op\":\"%s\",\"start_ns\":1,\"end_ns\":2}]}",
                 bad[i]);
        pt_msg m;
        pt_error err = {0};
        CHECK(pt_msg_decode(text, strlen(text), "t", &m, &err) == PT_EINVAL);
        char want[64];
        snprintf(want, sizeof want, "events[0].op: unknown op kind \"%s\"", bad[i]);
        CHECK_STR_CONTAINS(err.msg, want);
        CHECK_STR_CONTAINS(err.msg, pt_op_name(PT_OP_OPT_STEP)); /* the names it knows */
    }
}

static void test_round_trip_defaults(void)
{
    /* Absent optional fields come back as their defaults: NaN loss (null on
     * the wire), checkpoint at the current step, error without a stage. */
    pt_msg m, back;
    pt_msg_init(&m, PT_MSG_METRICS, "a");
    m.u.metrics.samples_per_s = 5;
    char *text = NULL;
    REQUIRE(pt_msg_encode(&m, &text, NULL, NULL) == 0);
    CHECK_STR_CONTAINS(text, "\"loss\":null");
    REQUIRE(pt_msg_decode(text, strlen(text), NULL, &back, NULL) == 0);
    CHECK(isnan(back.u.metrics.loss));
    CHECK(msg_equal(&m, &back));
    /* a CPU agent's metrics carry no driver figures: none on the wire, 0 back */
    CHECK(!strstr(text, "\"device\""));
    CHECK(back.u.metrics.device_free == 0 && back.u.metrics.device_total == 0);
    free(text);
    pt_msg_clear(&back);

    pt_msg_init(&m, PT_MSG_CHECKPOINT, "a");
    m.req = 1;
    REQUIRE(pt_msg_encode(&m, &text, NULL, NULL) == 0);
    CHECK(strstr(text, "\"step\"") == NULL);
    REQUIRE(pt_msg_decode(text, strlen(text), NULL, &back, NULL) == 0);
    CHECK(back.u.checkpoint.step == -1);
    free(text);

    const char *e =
        "{\"v\":1,\"type\":\"error\",\"agent\":\"a\",\"seq\":0,\"gen\":0,\"reason\":\"x\"}";
    REQUIRE(pt_msg_decode(e, strlen(e), NULL, &back, NULL) == 0);
    CHECK(back.u.error.stage == -1 && back.u.error.replica == -1 && back.req == 0);
    /* Not NUL-terminated: only len bytes are read. */
    char buf[128];
    size_t n = strlen(e);
    memcpy(buf, e, n);
    memset(buf + n, '}', sizeof buf - n);
    CHECK(pt_msg_decode(buf, n, NULL, &back, NULL) == 0);
    pt_msg_clear(&back);
}

/* Reads a file into a string (test helper; NULL on error). */
static char *slurp(const char *path)
{
    char *text = NULL;
    size_t len;
    if (pt_file_read(path, &text, &len, NULL) < 0)
        return NULL;
    return text;
}

static void test_documented_examples(void)
{
    char *doc = slurp(pt_test_path("docs/protocol.md"));
    REQUIRE(doc != NULL);
    int seen[PT_MSG_TYPE_COUNT] = {0}, blocks = 0;
    const char *p = doc;
    while ((p = strstr(p, "```json\n")) != NULL && blocks < 100) {
        p += 8;
        const char *end = strstr(p, "```");
        REQUIRE(end != NULL);
        pt_msg m;
        pt_error err = {0};
        int rc = pt_msg_decode(p, (size_t)(end - p), "docs/protocol.md", &m, &err);
        CHECK_MSG(rc == 0, "example %d: %s", blocks, err.msg);
        if (rc == 0)
            seen[m.type]++;
        pt_msg_clear(&m);
        blocks++;
        p = end + 3;
    }
    for (int t = 0; t < PT_MSG_TYPE_COUNT; t++)
        CHECK_MSG(seen[t] >= 1, "docs/protocol.md has no example of %s",
                  pt_msg_type_name((pt_msg_type)t));
    free(doc);

    /* The same examples as files (the fuzz corpus's good inputs). */
    for (int t = 0; t < PT_MSG_TYPE_COUNT; t++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/message/%s.json", pt_msg_type_name((pt_msg_type)t));
        char *text = slurp(pt_test_path(rel));
        CHECK_MSG(text != NULL, "%s missing", rel);
        if (!text)
            continue;
        pt_msg m;
        pt_error err = {0};
        CHECK_MSG(pt_msg_decode(text, strlen(text), rel, &m, &err) == 0, "%s", err.msg);
        CHECK(m.type == (pt_msg_type)t);
        pt_msg_clear(&m);
        free(text);
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_bad_messages(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", pt_test_path("tests/data/bad/message"));
    DIR *d = opendir(dir);
    REQUIRE(d != NULL);
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    CHECK_MSG(n >= 20, "only %d bad messages", n);
    for (int i = 0; i < n; i++) {
        char path[1200], expect_path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(expect_path, sizeof expect_path, "%.*s.expect", (int)strlen(path) - 5, path);
        char *text = NULL, *expect = slurp(expect_path);
        size_t len = 0;
        CHECK_MSG(expect != NULL, "%s: no .expect", names[i]);
        CHECK(pt_file_read(path, &text, &len, NULL) == 0);
        if (expect && text) {
            size_t el = strlen(expect);
            while (el && (expect[el - 1] == '\n' || expect[el - 1] == '\r'))
                expect[--el] = '\0';
            pt_msg m;
            memset(&m, 0x5a, sizeof m);
            pt_error err = {0};
            int rc = pt_msg_decode(text, len, path, &m, &err);
            CHECK_MSG(rc < 0, "%s was accepted", names[i]);
            CHECK_MSG(rc == err.code, "%s: rc %d, err.code %d", names[i], rc, err.code);
            CHECK_MSG(strncmp(err.msg, path, strlen(path)) == 0,
                      "%s: \"%s\" does not start with "
                      "the path",
                      names[i], err.msg);
            CHECK_MSG(strstr(err.msg, expect) != NULL, "%s: \"%s\" does not contain \"%s\"",
                      names[i], err.msg, expect);
            static const pt_msg zero;
            CHECK_MSG(memcmp(&m, &zero, sizeof m) == 0, "%s: message not zeroed", names[i]);
        }
        free(text);
        free(expect);
        free(names[i]);
    }

    /* Inputs a file cannot hold well. */
    pt_msg m;
    pt_error err = {0};
    const char nul[] = "{\"v\":1,\0\"type\":\"bye\"}";
    CHECK(pt_msg_decode(nul, sizeof nul - 1, NULL, &m, &err) == PT_EPARSE);
    CHECK_STR_CONTAINS(err.msg, "NUL byte");
    CHECK(pt_msg_decode("{}", (size_t)PT_MSG_MAX_BYTES + 1, NULL, &m, &err) == PT_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "longer than");
    CHECK(pt_msg_decode(NULL, 0, NULL, &m, &err) == PT_EINVAL);
    /* Deep nesting is refused, not recursed into without bound. */
    enum { DEPTH = 5000 };
    char *deep = malloc(2 * DEPTH + 64);
    REQUIRE(deep != NULL);
    size_t k = (size_t)sprintf(deep, "{\"v\":1,\"type\":\"bye\",\"agent\":\"a\",\"x\":");
    for (int i = 0; i < DEPTH; i++)
        deep[k++] = '[';
    for (int i = 0; i < DEPTH; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    CHECK(pt_msg_decode(deep, k, NULL, &m, &err) < 0);
    free(deep);
}

static void test_encode_refuses_what_decode_refuses(void)
{
    pt_msg m;
    char *text = (char *)1;
    pt_error err = {0};

    pt_msg_init(&m, PT_MSG_EVENTS, "a");
    pt_msg_event ev = {
        .stage = 0, .replica = 0, .step = 1, .mb = 0, .op = PT_OP_FWD, .start_ns = 10, .end_ns = 5};
    m.u.events.count = 1;
    m.u.events.events = &ev;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK(text == NULL);
    CHECK_STR_CONTAINS(err.msg, "events[0].end_ns: 5 is before start_ns 10");
    ev.end_ns = 10;
    ev.op = PT_OP_KIND_COUNT;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    char want[64];
    snprintf(want, sizeof want, "events[0].op: %d is not an op kind", (int)PT_OP_KIND_COUNT);
    CHECK_STR_CONTAINS(err.msg, want);
    ev.op = (pt_op_kind)-1;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "events[0].op: -1 is not an op kind");
    m.u.events.count = 0;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL); /* an empty batch */

    pt_msg_init(&m, PT_MSG_ERROR, "a");
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "reason: must not be empty");

    pt_msg_init(&m, PT_MSG_START, "bad agent");
    m.req = 1;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "agent: character 0x20");
    pt_msg_init(&m, PT_MSG_START, "a");
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_ERANGE); /* a request needs req >= 1 */
    CHECK_STR_CONTAINS(err.msg, "req: must be > 0");
    m.req = 1;
    m.seq = PT_MSG_INT_MAX + 1; /* 2^53: no longer exact */
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "seq: must be <=");

    pt_msg_init(&m, PT_MSG_ASSIGN, "a");
    m.req = 1;
    m.u.assign.plan_json = "not json";
    m.u.assign.model_json = "{}";
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "plan: not a JSON object");

    pt_msg_init(&m, PT_MSG_METRICS, "a");
    m.u.metrics.samples_per_s = INFINITY;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "samples_per_s");
    m.type = PT_MSG_TYPE_COUNT;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);

    /* stop: hold and at_step exclude each other; at_step >= 0 or absent (-1) */
    pt_msg_init(&m, PT_MSG_STOP, "a");
    m.req = 1;
    m.u.stop.hold = 1;
    m.u.stop.at_step = 3;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "at_step: a stop either holds or names a step");
    m.u.stop.hold = 0;
    m.u.stop.at_step = -2;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "at_step");
    /* ack: a step only on an ack of stop */
    pt_msg_init(&m, PT_MSG_ACK, "a");
    m.req = 1;
    m.u.ack.of = PT_MSG_START;
    m.u.ack.step = 2;
    CHECK(pt_msg_encode(&m, &text, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "step: only an ack of stop");
}

static void test_stop_forms(void)
{
    /* The three forms of stop survive a round trip with their defaults:
     * neither field (-1 / 0), hold alone, at_step alone (0 included). */
    const int holds[3] = {0, 1, 0};
    const int64_t steps[3] = {-1, -1, 0};
    for (int k = 0; k < 3; k++) {
        pt_msg m, back;
        pt_msg_init(&m, PT_MSG_STOP, "a");
        CHECK(m.u.stop.at_step == -1 && m.u.stop.hold == 0);
        m.req = 2;
        m.u.stop.hold = holds[k];
        m.u.stop.at_step = steps[k];
        char *text = NULL;
        REQUIRE(pt_msg_encode(&m, &text, NULL, NULL) == 0);
        CHECK((strstr(text, "\"hold\":true") != NULL) == holds[k]);
        CHECK((strstr(text, "\"at_step\"") != NULL) == (steps[k] >= 0));
        REQUIRE(pt_msg_decode(text, strlen(text), NULL, &back, NULL) == 0);
        CHECK(back.u.stop.hold == holds[k] && back.u.stop.at_step == steps[k]);
        free(text);
        pt_msg_clear(&back);
    }
    pt_msg m;
    pt_msg_init(&m, PT_MSG_ACK, "a");
    CHECK(m.u.ack.step == -1);
    const char *a = "{\"v\":1,\"type\":\"ack\",\"agent\":\"a\",\"seq\":0,\"gen\":1,\"req\":1,"
                    "\"of\":\"stop\",\"step\":0}";
    REQUIRE(pt_msg_decode(a, strlen(a), NULL, &m, NULL) == 0);
    CHECK(m.u.ack.of == PT_MSG_STOP && m.u.ack.step == 0);
}

static void test_accept_direction_and_generation(void)
{
    pt_msg m;
    pt_error err = {0};
    pt_msg_init(&m, PT_MSG_START, "a");
    m.req = 1;
    m.gen = 3;
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 3, &err) == 0);
    CHECK(pt_msg_accept(&m, PT_MSG_AT_CONSOLE, 3, &err) == PT_EINVAL); /* agents never send start */
    CHECK_STR_CONTAINS(err.msg, "only the console sends start");
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 4, &err) == PT_ESTATE);
    CHECK_STR_CONTAINS(err.msg, "stale: plan generation 3 is older than the current 4");
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 2, &err) == PT_ESTATE); /* no assign for gen 3 */
    m.type = PT_MSG_ASSIGN;
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 2, &err) == 0); /* an assign brings a new gen */
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 4, &err) == PT_ESTATE);
    m.type = PT_MSG_EVENTS;
    CHECK(pt_msg_accept(&m, PT_MSG_AT_CONSOLE, 3, &err) == 0);
    CHECK(pt_msg_accept(&m, PT_MSG_AT_CONSOLE, 5, &err) == PT_ESTATE);
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 3, &err) == PT_EINVAL);
    m.type = PT_MSG_HEARTBEAT; /* not bound to a generation, sent both ways */
    CHECK(pt_msg_accept(&m, PT_MSG_AT_CONSOLE, 9, &err) == 0);
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 0, &err) == 0);
    m.type = PT_MSG_REGISTER;
    CHECK(pt_msg_accept(&m, PT_MSG_AT_CONSOLE, 9, &err) == 0);
    CHECK(pt_msg_accept(&m, PT_MSG_AT_AGENT, 9, &err) == PT_EINVAL);
    for (int t = 0; t < PT_MSG_TYPE_COUNT; t++) {
        CHECK(pt_msg_type_parse(pt_msg_type_name((pt_msg_type)t)) == (pt_msg_type)t);
        CHECK(pt_msg_type_senders((pt_msg_type)t) != 0);
    }
    CHECK(pt_msg_type_parse("nope") == PT_MSG_TYPE_COUNT);
    CHECK(pt_msg_type_name(PT_MSG_TYPE_COUNT) == NULL);
    CHECK(strcmp(pt_msg_mem_name(PT_MSG_MEM_STASH), "stash") == 0);
}

/* ---- telemetry receiver ---------------------------------------------------- */

static char *frame(const char *agent, int64_t seq, int64_t gen)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_METRICS, agent);
    m.seq = seq;
    m.gen = gen;
    m.u.metrics.step = seq;
    m.u.metrics.samples_per_s = 1;
    char *text = NULL;
    pt_msg_encode(&m, &text, NULL, NULL);
    return text;
}

static int feed(pt_telemetry_rx *rx, const char *agent, int64_t seq, int64_t gen)
{
    char *text = frame(agent, seq, gen);
    pt_msg m;
    int rc = pt_telemetry_rx_feed(rx, text, strlen(text), NULL, &m, NULL);
    if (rc == 0 && (m.seq != seq || strcmp(m.agent, agent)))
        rc = -100;
    pt_msg_clear(&m);
    free(text);
    return rc;
}

static void test_rx_hand_cases(void)
{
    pt_telemetry_rx *rx = NULL;
    REQUIRE(pt_telemetry_rx_create(0, &rx) == 0);
    pt_rx_counts c;
    CHECK(feed(rx, "a", 0, 0) == 0);
    CHECK(feed(rx, "a", 1, 0) == 0);
    CHECK(feed(rx, "a", 2, 0) == 0);
    CHECK(feed(rx, "a", 5, 0) == 0); /* 3 and 4 missing */
    pt_telemetry_rx_agent_counts(rx, "a", &c);
    CHECK(c.received == 4 && c.dropped == 2 && c.reordered == 0);
    CHECK(feed(rx, "a", 3, 0) == 0); /* late: fills a gap */
    pt_telemetry_rx_agent_counts(rx, "a", &c);
    CHECK(c.received == 5 && c.dropped == 1 && c.reordered == 1);
    CHECK(feed(rx, "a", 3, 0) == PT_ESTATE); /* twice */
    CHECK(feed(rx, "a", 0, 0) == PT_ESTATE);
    CHECK(feed(rx, "a", 5, 0) == PT_ESTATE);
    pt_telemetry_rx_agent_counts(rx, "a", &c);
    CHECK(c.duplicates == 3 && c.received == 5 && c.dropped == 1);
    /* A second agent is tracked on its own, counted from 0. */
    CHECK(feed(rx, "b", 2, 0) == 0);
    pt_telemetry_rx_agent_counts(rx, "b", &c);
    CHECK(c.dropped == 2 && c.received == 1);
    /* Older than the window: can no longer be told from a duplicate. */
    CHECK(feed(rx, "a", 5 + PT_RX_WINDOW + 10, 0) == 0);
    CHECK(feed(rx, "a", 4, 0) == PT_ESTATE);
    pt_telemetry_rx_agent_counts(rx, "a", &c);
    CHECK(c.stale == 1 && c.dropped == 1 + PT_RX_WINDOW + 9);
    /* After a new generation, telemetry of the older one is taken and
     * counted late: it was measured before the next plan was applied and
     * read after (docs/protocol.md); nothing acts on it. Its seq is used up
     * as any other's. (It used to be refused as stale, and the
     * old plan's last steps never reached the record.) */
    pt_telemetry_rx_set_generation(rx, 2);
    CHECK(feed(rx, "b", 3, 1) == 0);
    CHECK(feed(rx, "b", 3, 2) == PT_ESTATE); /* seq 3 was consumed */
    CHECK(feed(rx, "b", 4, 2) == 0);
    pt_telemetry_rx_agent_counts(rx, "b", &c);
    CHECK(c.stale == 0 && c.late == 1 && c.duplicates == 1 && c.received == 3 && c.dropped == 2);
    /* Malformed: blamed on a known agent when its id is readable. */
    pt_msg m;
    const char *bad_known = "{\"v\":1,\"type\":\"metrics\",\"agent\":\"b\",\"seq\":\"x\"}";
    CHECK(pt_telemetry_rx_feed(rx, bad_known, strlen(bad_known), NULL, &m, NULL) == PT_EINVAL);
    CHECK(pt_telemetry_rx_feed(rx, "garbage", 7, NULL, &m, NULL) == PT_EPARSE);
    pt_telemetry_rx_agent_counts(rx, "b", &c);
    CHECK(c.malformed == 1);
    pt_telemetry_rx_totals(rx, &c);
    CHECK(c.malformed == 2);
    CHECK(pt_telemetry_rx_agent_count(rx) == 2);
    CHECK(strcmp(pt_telemetry_rx_agent_id(rx, 1), "b") == 0);
    CHECK(pt_telemetry_rx_agent_counts(rx, "zz", &c) == PT_ENOTFOUND);
    /* A restarted agent numbers from 0 again. */
    CHECK(feed(rx, "b", 4, 2) == PT_ESTATE);
    CHECK(pt_telemetry_rx_reset_agent(rx, "b") == 0);
    CHECK(feed(rx, "b", 0, 2) == 0);
    CHECK(feed(rx, "b", 1, 2) == 0);
    pt_telemetry_rx_agent_counts(rx, "b", &c);
    CHECK(c.duplicates == 2 && c.dropped == 2); /* counts survive the reset */
    pt_telemetry_rx_destroy(&rx);
    CHECK(rx == NULL);

    REQUIRE(pt_telemetry_rx_create(PT_RX_FROM_FIRST, &rx) == 0);
    CHECK(feed(rx, "late", 100, 0) == 0);
    CHECK(feed(rx, "late", 102, 0) == 0);
    CHECK(feed(rx, "late", 99, 0) == 0); /* before the first: reordered, never counted dropped */
    pt_telemetry_rx_agent_counts(rx, "late", &c);
    CHECK(c.dropped == 1 && c.reordered == 1 && c.received == 3);
    pt_telemetry_rx_destroy(&rx);
}

/* An events frame of one event at `step`, from agent, with seq and gen. */
static char *events_frame(const char *agent, int64_t seq, int64_t gen, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_EVENTS, agent);
    m.seq = seq;
    m.gen = gen;
    pt_msg_event ev = {.op = PT_OP_FWD, .step = step, .mb = 0, .version = -1, .end_ns = 1};
    m.u.events.count = 1;
    m.u.events.events = &ev;
    char *text = NULL;
    pt_msg_encode(&m, &text, NULL, NULL);
    return text;
}

/* Feeds text (freed here); the result, and *gen the accepted frame's gen. */
static int feed_text(pt_telemetry_rx *rx, char *text, int64_t *gen)
{
    pt_msg m;
    int rc = text ? pt_telemetry_rx_feed(rx, text, strlen(text), NULL, &m, NULL) : -100;
    if (rc == 0) {
        *gen = m.gen;
        pt_msg_clear(&m);
    }
    free(text);
    return rc;
}

/* Telemetry of generation g still queued when the console applied g + 1
 * (the console's telemetry lags its control channel): events and metrics
 * are taken, handed over with their own gen and counted late, after the
 * same sequence checks as any frame (a duplicate is still a duplicate, one
 * older than the window still stale). A frame of a generation no plan was
 * sent for (g + 2) is refused as stale, and another type of an older
 * generation too: only measurement is taken late. */
static void test_rx_late_generation(void)
{
    const int64_t g = 3;
    pt_telemetry_rx *rx = NULL;
    REQUIRE(pt_telemetry_rx_create(0, &rx) == 0);
    pt_telemetry_rx_set_generation(rx, g);
    int64_t got = -1;
    pt_rx_counts c;
    CHECK(feed_text(rx, events_frame("w", 0, g, 10), &got) == 0);
    CHECK(feed_text(rx, frame("w", 1, g), &got) == 0);
    pt_telemetry_rx_set_generation(rx, g + 1);
    CHECK(feed_text(rx, events_frame("w", 2, g, 11), &got) == 0 && got == g);
    CHECK(feed_text(rx, frame("w", 3, g), &got) == 0 && got == g);
    pt_telemetry_rx_agent_counts(rx, "w", &c);
    CHECK_MSG(c.late == 2 && c.received == 4 && c.stale == 0,
              "late %llu received %llu stale %llu (want 2, 4, 0)", (unsigned long long)c.late,
              (unsigned long long)c.received, (unsigned long long)c.stale);
    /* a duplicate of a late frame: refused as a duplicate, not late again */
    CHECK(feed_text(rx, frame("w", 3, g), &got) == PT_ESTATE);
    pt_telemetry_rx_agent_counts(rx, "w", &c);
    CHECK(c.duplicates == 1 && c.late == 2 && c.received == 4);
    /* newer than the current generation: refused, counted stale */
    CHECK(feed_text(rx, events_frame("w", 4, g + 2, 12), &got) == PT_ESTATE);
    CHECK(feed_text(rx, frame("w", 5, g + 2), &got) == PT_ESTATE);
    pt_telemetry_rx_agent_counts(rx, "w", &c);
    CHECK(c.stale == 2 && c.late == 2 && c.received == 4);
    CHECK(feed_text(rx, frame("w", 6, g + 1), &got) == 0 && got == g + 1);
    /* older than the window: stale whatever its generation */
    CHECK(feed_text(rx, frame("w", 6 + PT_RX_WINDOW + 1, g + 1), &got) == 0);
    CHECK(feed_text(rx, frame("w", 5, g), &got) == PT_ESTATE);
    pt_telemetry_rx_agent_counts(rx, "w", &c);
    CHECK(c.stale == 3 && c.late == 2);
    /* a type bound to a generation that is not telemetry: an older one is
     * stale, as pt_msg_accept has it on control */
    pt_msg ackm;
    pt_msg_init(&ackm, PT_MSG_ACK, "w");
    ackm.seq = 6 + PT_RX_WINDOW + 2;
    ackm.gen = g;
    ackm.u.ack.of = PT_MSG_START;
    CHECK(pt_telemetry_rx_observe(rx, &ackm, NULL) == PT_ESTATE);
    pt_telemetry_rx_agent_counts(rx, "w", &c);
    CHECK(c.stale == 4 && c.late == 2);
    pt_telemetry_rx_totals(rx, &c);
    CHECK(c.late == 2);
    CHECK(c.received + c.duplicates + c.stale + c.malformed == 11); /* frames fed */
    pt_telemetry_rx_destroy(&rx);

    /* no plan yet (gen 0): a console picking a run up hears the agents of
     * the generation it is about to adopt, and takes what they send */
    REQUIRE(pt_telemetry_rx_create(0, &rx) == 0);
    CHECK(feed_text(rx, frame("w", 0, 7), &got) == 0 && got == 7);
    pt_telemetry_rx_agent_counts(rx, "w", &c);
    CHECK(c.received == 1 && c.late == 0 && c.stale == 0);
    pt_telemetry_rx_destroy(&rx);
}

/* An independent model of the counts: sets instead of a bit window. */
typedef struct model {
    unsigned char seen[4096];
    int64_t next;
    pt_rx_counts c;
} model;

static void model_feed(model *md, int64_t s)
{
    if (s >= md->next) {
        for (int64_t q = md->next; q < s; q++)
            md->c.dropped++;
        md->next = s + 1;
        md->seen[s] = 1;
        md->c.received++;
    } else if (md->seen[s]) {
        md->c.duplicates++;
    } else {
        md->seen[s] = 1;
        md->c.dropped--;
        md->c.reordered++;
        md->c.received++;
    }
}

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

/* A forged jump (issue 13: seq near 2^53 made every later genuine message
 * "too old"): refused and counted stale, the window does not move, and the
 * agent's next genuine messages are taken. The first message of an agent
 * still sets where it counts from (a console joining a long run). */
static void test_rx_jump_refused(void)
{
    pt_telemetry_rx *rx = NULL;
    REQUIRE(pt_telemetry_rx_create(0, &rx) == 0);
    CHECK(feed(rx, "a", 0, 0) == 0);
    CHECK(feed(rx, "a", (1LL << 53) - 1, 0) == PT_ESTATE);
    CHECK(feed(rx, "a", 1 + PT_RX_JUMP_MAX + 1, 0) == PT_ESTATE);
    CHECK(feed(rx, "a", 1, 0) == 0);
    CHECK(feed(rx, "a", 2 + PT_RX_JUMP_MAX, 0) == 0); /* at the bound: taken */
    pt_rx_counts c;
    pt_telemetry_rx_agent_counts(rx, "a", &c);
    CHECK(c.stale == 2 && c.received == 3);
    CHECK(feed(rx, "late", 1LL << 40, 0) == 0); /* first message of an agent */
    CHECK(feed(rx, "late", (1LL << 40) + 1, 0) == 0);
    pt_telemetry_rx_destroy(&rx);
}

static void test_rx_against_model(void)
{
    for (int trial = 0; trial < 20; trial++) {
        pt_telemetry_rx *rx = NULL;
        REQUIRE(pt_telemetry_rx_create(0, &rx) == 0);
        model md;
        memset(&md, 0, sizeof md);
        /* 0..1999, then: drop 10%, duplicate 5%, swap neighbours 10% (all
         * within the window, so the model needs no window). */
        int64_t seqs[4000];
        int n = 0;
        for (int64_t s = 0; s < 2000; s++) {
            uint32_t r = rnd() % 100;
            if (r < 10)
                continue;
            seqs[n++] = s;
            if (r < 15)
                seqs[n++] = s;
        }
        for (int i = 0; i + 1 < n; i++)
            if (rnd() % 10 == 0) {
                int j = i + 1 + (int)(rnd() % 20);
                if (j < n) {
                    int64_t t = seqs[i];
                    seqs[i] = seqs[j];
                    seqs[j] = t;
                }
            }
        for (int i = 0; i < n; i++) {
            int rc = feed(rx, "x", seqs[i], 0);
            model_feed(&md, seqs[i]);
            if (rc != 0 && rc != PT_ESTATE)
                CHECK_MSG(0, "feed returned %d", rc);
        }
        pt_rx_counts c;
        pt_telemetry_rx_agent_counts(rx, "x", &c);
        CHECK_MSG(c.received == md.c.received && c.dropped == md.c.dropped &&
                      c.duplicates == md.c.duplicates && c.reordered == md.c.reordered &&
                      c.stale == 0,
                  "trial %d: got r%llu d%llu dup%llu re%llu, model r%llu d%llu dup%llu re%llu",
                  trial, (unsigned long long)c.received, (unsigned long long)c.dropped,
                  (unsigned long long)c.duplicates, (unsigned long long)c.reordered,
                  (unsigned long long)md.c.received, (unsigned long long)md.c.dropped,
                  (unsigned long long)md.c.duplicates, (unsigned long long)md.c.reordered);
        /* Every frame lands in exactly one bucket. */
        CHECK(c.received + c.duplicates + c.stale + c.malformed == (uint64_t)n);
        pt_telemetry_rx_destroy(&rx);
    }
}

/* ---- clock offset ------------------------------------------------------------ */

static void test_clock_offset(void)
{
    int64_t off, delay;
    /* B = A + 5 s; 1 ms each way; B holds it 0.3 ms: exact. */
    int64_t theta = 5000000000LL, t1 = 1000000;
    int64_t t2 = t1 + 1000000 + theta, t3 = t2 + 300000, t4 = t3 - theta + 1000000;
    REQUIRE(pt_clock_offset(t1, t2, t3, t4, &off, &delay) == 0);
    CHECK(off == theta);
    CHECK(delay == 2000000);
    /* Asymmetric paths: the error is (d1 - d2) / 2, within delay / 2. */
    for (int i = 0; i < 100; i++) {
        int64_t d1 = rnd() % 1000000, d2 = rnd() % 1000000, h = rnd() % 100000;
        int64_t th = (int64_t)(rnd() % 2000000000) - 1000000000;
        int64_t a1 = 3000000000LL + rnd() % 1000;
        int64_t a2 = a1 + d1 + th, a3 = a2 + h, a4 = a3 - th + d2;
        REQUIRE(pt_clock_offset(a1, a2, a3, a4, &off, &delay) == 0);
        CHECK(delay == d1 + d2);
        CHECK(llabs(off - th) <= delay / 2 + 1);
        CHECK(llabs(off - (th + (d1 - d2) / 2)) <= 1);
    }
    CHECK(pt_clock_offset(10, 5, 4, 20, &off, &delay) == PT_EINVAL); /* t3 < t2 */
    CHECK(pt_clock_offset(10, 5, 6, 9, &off, &delay) == PT_EINVAL);  /* t4 < t1 */

    /* The filter trusts the least-delayed sample. */
    pt_clock_filter f;
    pt_clock_filter_init(&f);
    CHECK(pt_clock_filter_get(&f, &off, &delay) == PT_ENOTFOUND);
    CHECK(pt_clock_filter_add(&f, 0, 100 + 400, 100 + 400, 1000) == 0); /* queued on the way */
    CHECK(pt_clock_filter_add(&f, 2000, 2000 + 100 + 10, 2000 + 100 + 10, 2020) == 0);
    CHECK(pt_clock_filter_add(&f, 10, 5, 4, 20) == PT_EINVAL);
    REQUIRE(pt_clock_filter_get(&f, &off, &delay) == 0);
    CHECK(delay == 20 && off == 100);

    /* Through real heartbeat messages: console C (clock = A), agent (A + 7 ms). */
    int64_t skew = 7000000;
    pt_msg q, a, got;
    pt_msg_init(&q, PT_MSG_HEARTBEAT, "agent-1");
    q.u.heartbeat.hb = 1;
    q.u.heartbeat.t_send = 50000000; /* console clock */
    char *text = NULL;
    REQUIRE(pt_msg_encode(&q, &text, NULL, NULL) == 0);
    REQUIRE(pt_msg_decode(text, strlen(text), NULL, &got, NULL) == 0);
    free(text);
    int64_t arrived = got.u.heartbeat.t_send + 200000 + skew; /* agent clock */
    pt_msg_init(&a, PT_MSG_HEARTBEAT, "agent-1");
    a.u.heartbeat.hb = 1;
    a.u.heartbeat.has_echo = 1;
    a.u.heartbeat.echo_hb = got.u.heartbeat.hb;
    a.u.heartbeat.echo_t_orig = got.u.heartbeat.t_send;
    a.u.heartbeat.echo_t_recv = arrived;
    a.u.heartbeat.t_send = arrived + 50000;
    REQUIRE(pt_msg_encode(&a, &text, NULL, NULL) == 0);
    REQUIRE(pt_msg_decode(text, strlen(text), NULL, &got, NULL) == 0);
    free(text);
    int64_t t4c = got.u.heartbeat.t_send - skew + 200000; /* console clock */
    REQUIRE(pt_clock_offset(got.u.heartbeat.echo_t_orig, got.u.heartbeat.echo_t_recv,
                            got.u.heartbeat.t_send, t4c, &off, &delay) == 0);
    CHECK(off == skew);
    CHECK(delay == 400000);
}

static void test_now_ns(void)
{
    int64_t a = pt_msg_now_ns(), b = pt_msg_now_ns();
    CHECK(a >= 1 && b >= a);
    CHECK(b < PT_MSG_INT_MAX);
}

/* A metrics fold (docs/protocol.md, "Telemetry thinning"): steps and their
 * losses travel, each step's own; a fold that does not add up is refused. */
static void test_metrics_fold(void)
{
    pt_msg m, back;
    pt_msg_init(&m, PT_MSG_METRICS, "a");
    m.u.metrics.step = 9;
    m.u.metrics.steps = 3;
    m.u.metrics.losses[0] = 1.5;
    m.u.metrics.losses[1] = NAN;
    m.u.metrics.losses[2] = 0.25;
    m.u.metrics.loss = 0.25;
    m.u.metrics.samples_per_s = 5;
    char *text = NULL;
    REQUIRE(pt_msg_encode(&m, &text, NULL, NULL) == 0);
    CHECK_STR_CONTAINS(text, "\"steps\":3,\"losses\":[1.5,null,0.25]");
    REQUIRE(pt_msg_decode(text, strlen(text), NULL, &back, NULL) == 0);
    CHECK(back.u.metrics.steps == 3 && back.u.metrics.step == 9);
    CHECK(back.u.metrics.losses[0] == 1.5 && isnan(back.u.metrics.losses[1]) &&
          back.u.metrics.losses[2] == 0.25);
    free(text);
    /* one step: no fold on the wire, steps 1 and its loss back */
    m.u.metrics.steps = 1;
    REQUIRE(pt_msg_encode(&m, &text, NULL, NULL) == 0);
    CHECK(!strstr(text, "\"steps\"") && !strstr(text, "\"losses\""));
    REQUIRE(pt_msg_decode(text, strlen(text), NULL, &back, NULL) == 0);
    CHECK(back.u.metrics.steps == 1 && back.u.metrics.losses[0] == 0.25);
    free(text);
    static const struct {
        const char *fold, *why;
    } bad[] = {
        {"\"step\":9,\"steps\":3,\"losses\":[1,2]", "2 losses for 3 steps"},
        {"\"step\":9,\"steps\":3", "losses"},
        {"\"step\":1,\"steps\":3,\"losses\":[1,2,3]", "before step 0"},
        {"\"step\":900,\"steps\":257,\"losses\":[1]", "steps"},
        {"\"step\":9,\"steps\":2,\"losses\":[1,\"x\"]", "element 1 is not a number or null"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "{\"v\":1,\"type\":\"metrics\",\"agent\":\"a\",\"seq\":0,\"gen\":1,\"stage\":0,"
                 "\"replica\":0,%s,\"loss\":1,\"samples_per_s\":1}",
                 bad[k].fold);
        pt_error err = {0};
        int rc = pt_msg_decode(msg, strlen(msg), "t", &back, &err);
        CHECK_MSG(rc == PT_EINVAL || rc == PT_ERANGE, "%s: %d", bad[k].fold, rc);
        CHECK_STR_CONTAINS(err.msg, bad[k].why);
    }
}

/* A generation's plan crosses the wire as one text: pt_msg_assign_texts
 * makes it once (compact, exact), and each worker's assign embeds those
 * bytes verbatim (a text spaced unlike cJSON's printer stays spaced as
 * given, so nothing parsed and printed it again); the agent's decoder
 * gives back the plan and the model. */
static void test_plan_text_once(void)
{
    pt_plan *plan = NULL;
    pt_model_spec *model = NULL;
    REQUIRE(pt_plan_parse(plan_text, "plan", &plan, NULL) == 0);
    REQUIRE(pt_model_spec_parse(model_text, "model", &model, NULL) == 0);
    char *pj = NULL, *mj = NULL;
    pt_error err = {0};
    REQUIRE(pt_msg_assign_texts(plan, model, &pj, &mj, &err) == 0);
    CHECK(strchr(pj, '\n') == NULL && strchr(mj, '\n') == NULL); /* compact: one record line */
    /* the same plan, spaced as cJSON never prints it */
    char spaced[4096];
    size_t k = 0;
    for (const char *c = pj; *c && k + 2 < sizeof spaced; c++) {
        spaced[k++] = *c;
        if (*c == ',')
            spaced[k++] = ' ';
    }
    spaced[k] = '\0';
    for (int w = 0; w < 2; w++) {
        pt_msg m, back;
        make_message(PT_MSG_ASSIGN, &m);
        pt_plan_free(&m.u.assign.plan);
        pt_model_spec_free(&m.u.assign.model);
        m.u.assign.plan_json = w ? spaced : pj;
        m.u.assign.model_json = mj;
        char *text = NULL;
        REQUIRE(pt_msg_encode(&m, &text, NULL, &err) == 0);
        CHECK_STR_CONTAINS(text, w ? spaced : pj);
        REQUIRE(pt_msg_decode(text, strlen(text), "wire", &back, &err) == 0);
        CHECK(back.u.assign.plan_json == NULL && back.u.assign.plan && back.u.assign.model);
        CHECK(same_json(pt_plan_to_json(back.u.assign.plan), pt_plan_to_json(plan)));
        CHECK(same_json(pt_model_spec_to_json(back.u.assign.model), pt_model_spec_to_json(model)));
        pt_msg_clear(&back);
        pt_msg_clear(&m);
        free(text);
    }
    free(pj);
    free(mj);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
}

/* The peers list crosses the wire as one text too (pt_msg_assign_peers_text,
 * checked as the decoder checks it, once): an assign carrying it is the same
 * bytes as one writing its peers itself; a list the decoder would refuse is
 * refused when the text is made; each assign still checks its own entry. */
static void test_peers_text_once(void)
{
    pt_msg m;
    make_message(PT_MSG_ASSIGN, &m);
    pt_error err = {0};
    char *plain = NULL, *pj = NULL, *shared = NULL;
    REQUIRE(pt_msg_encode(&m, &plain, NULL, &err) == 0);
    REQUIRE(pt_msg_assign_peers_text(m.u.assign.peers, m.u.assign.peer_count, &pj, &err) == 0);
    m.u.assign.peers_json = pj;
    REQUIRE(pt_msg_encode(&m, &shared, NULL, &err) == 0);
    CHECK(!strcmp(plain, shared));
    free(shared);
    shared = NULL;
    /* its own entry: another stage than the assign's, or a rank not listed */
    m.u.assign.stage = 2;
    CHECK(pt_msg_encode(&m, &shared, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "own entry says stage 1 replica 2, the assign says stage 2");
    m.u.assign.stage = 1;
    m.u.assign.rank = 9;
    CHECK(pt_msg_encode(&m, &shared, NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "9 is not among peers[].rank");
    m.u.assign.rank = 5;
    /* what the decoder refuses in a list: a repeated rank, an endpoint, a key */
    pt_msg_peer *q = m.u.assign.peers;
    char *bad = NULL;
    q[2].rank = 4;
    CHECK(pt_msg_assign_peers_text(q, 3, &bad, &err) == PT_EINVAL && !bad);
    CHECK_STR_CONTAINS(err.msg, "peers[2].rank: 4 is also the rank of peers[0]");
    q[2].rank = 6;
    snprintf(q[1].endpoint, sizeof q[1].endpoint, "http://x");
    CHECK(pt_msg_assign_peers_text(q, 3, &bad, &err) == PT_EINVAL && !bad);
    CHECK_STR_CONTAINS(err.msg, "peers[1].endpoint");
    snprintf(q[1].endpoint, sizeof q[1].endpoint, "tcp://127.0.0.1:5001");
    snprintf(q[0].key, sizeof q[0].key, "short");
    CHECK(pt_msg_assign_peers_text(q, 3, &bad, &err) == PT_EINVAL && !bad);
    CHECK_STR_CONTAINS(err.msg, "peers[0].key: not 40 characters of Z85");
    CHECK(pt_msg_assign_peers_text(q, 0, &bad, &err) == PT_ERANGE && !bad);
    m.u.assign.peers_json = NULL;
    free(pj);
    free(plain);
    pt_msg_clear(&m);
}

/* A simulated agent's assign lists only its own peer entry (docs/protocol.md,
 * "Simulated agents"): such an assign encodes and decodes with that one
 * entry; a single entry that is not the agent's own is refused (by the
 * checker the decoder runs). */
static void test_own_peer_only(void)
{
    pt_msg m, back;
    make_message(PT_MSG_ASSIGN, &m);
    pt_error err = {0};
    pt_msg_peer *all = m.u.assign.peers;
    m.u.assign.peers = &all[1]; /* rank 5, stage 1, replica 2: the assign's own */
    m.u.assign.peer_count = 1;
    char *text = NULL;
    size_t len = 0;
    REQUIRE(pt_msg_encode(&m, &text, &len, &err) == 0);
    CHECK_MSG(pt_msg_decode(text, len, "test", &back, &err) == 0, "%s", err.msg);
    CHECK(back.u.assign.peer_count == 1 && back.u.assign.peers[0].rank == 5 &&
          !strcmp(back.u.assign.peers[0].endpoint, "tcp://127.0.0.1:5001"));
    pt_msg_clear(&back);
    free(text);
    text = NULL;
    m.u.assign.peers = &all[0]; /* rank 4: another worker's entry only */
    CHECK(pt_msg_encode(&m, &text, &len, &err) == PT_EINVAL && !text);
    CHECK_STR_CONTAINS(err.msg, "5 is not among peers[].rank");
    m.u.assign.peers = all;
    m.u.assign.peer_count = 3;
    pt_msg_clear(&m);
    /* the documented example (docs/protocol.md, "Simulated agents"), also
     * in the fuzz corpus */
    char *doc = slurp(pt_test_path("tests/data/message/assign_simulated.json"));
    REQUIRE(doc != NULL);
    CHECK_MSG(pt_msg_decode(doc, strlen(doc), "assign_simulated.json", &back, &err) == 0, "%s",
              err.msg);
    CHECK(back.u.assign.peer_count == 1 && back.u.assign.peers[0].rank == back.u.assign.rank);
    pt_msg_clear(&back);
    free(doc);
}

PT_TEST_MAIN({"own_peer_only", test_own_peer_only}, {"plan_text_once", test_plan_text_once},
             {"peers_text_once", test_peers_text_once},
             {"round_trip_every_type", test_round_trip_every_type}, {"stop_forms", test_stop_forms},
             {"round_trip_defaults", test_round_trip_defaults},
             {"op_kinds_on_the_wire", test_op_kinds_on_the_wire},
             {"documented_examples", test_documented_examples}, {"bad_messages", test_bad_messages},
             {"encode_refuses_what_decode_refuses", test_encode_refuses_what_decode_refuses},
             {"accept_direction_and_generation", test_accept_direction_and_generation},
             {"rx_hand_cases", test_rx_hand_cases}, {"rx_jump_refused", test_rx_jump_refused},
             {"rx_late_generation", test_rx_late_generation},
             {"rx_against_model", test_rx_against_model}, {"clock_offset", test_clock_offset},
             {"now_ns", test_now_ns}, {"metrics_fold", test_metrics_fold})

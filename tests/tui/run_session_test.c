/* The console-side session (tui/control/session.h) against fake agents made of a
 * DEALER and a PUB socket in this process: registration and the agent
 * table, clock offsets from heartbeats, rejection and counting of malformed,
 * misaddressed, out-of-order and stale control messages and telemetry,
 * death after missed heartbeats, assign/ack bookkeeping, checkpoint commits
 * and the run record. Every wait is for an event (a count reached, a state
 * entered, a subscription arrived), bounded only against a hang, so a slow
 * or loaded machine makes it slower, never wrong. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/plan.h"
#include "protocol/record.h"
#include "runtime/comm_nccl.h"
#include "tests/test.h"
#include "tui/control/run.h"
#include "tui/control/session.h"

#define NS_PER_MS   1000000LL
#define FAST_HB_MS  100
#define FAST_MISSED 6
/* Bound on waiting for an event. Every wait below ends as soon as what it
 * waits for has happened (milliseconds on a quiet machine); the bound only
 * turns a hang into a failure, so it is generous for a loaded one. */
#define WAIT_MS 20000

typedef struct fake {
    char id[PT_MSG_ID_MAX];
    void *dealer, *pub;
    int64_t seq, tseq, gen;
    int64_t clock_shift_ns; /* this fake agent's clock runs ahead by this much */
    int64_t last_console_hb, last_console_tsend, last_console_trecv;
    int have_console_hb;
} fake;

static void *g_ctx;
/* Sockets still open when a test stops early are closed by teardown(), so
 * zmq_ctx_term does not wait forever. */
#define OPEN_MAX 96 /* test_many_agents: two sockets for each of MANY_AGENTS */
static void *g_open[OPEN_MAX];

static void track(void *sock, int open)
{
    for (int i = 0; i < OPEN_MAX; i++)
        if (open ? !g_open[i] : g_open[i] == sock) {
            g_open[i] = open ? sock : NULL;
            return;
        }
}

/* Fake agents that heartbeat on their own while the test pumps the session. */
static fake *g_beating[OPEN_MAX];
static int64_t g_next_beat;
static void fake_heartbeat(fake *f, const char *state, int64_t step);

static void beat(fake *f, int on)
{
    for (int i = 0; i < OPEN_MAX; i++)
        if (on ? !g_beating[i] : g_beating[i] == f) {
            g_beating[i] = on ? f : NULL;
            return;
        }
}

static void beat_all(void)
{
    if (pt_msg_now_ns() < g_next_beat)
        return;
    g_next_beat = pt_msg_now_ns() + FAST_HB_MS * NS_PER_MS;
    for (int i = 0; i < OPEN_MAX; i++)
        if (g_beating[i])
            fake_heartbeat(g_beating[i], NULL, -1);
}

static int64_t fclock(const fake *f)
{
    return pt_msg_now_ns() + f->clock_shift_ns;
}

static void fake_open(fake *f, const char *id, pt_session *s, int64_t shift)
{
    memset(f, 0, sizeof *f);
    snprintf(f->id, sizeof f->id, "%s", id);
    f->clock_shift_ns = shift;
    f->dealer = zmq_socket(g_ctx, ZMQ_DEALER);
    /* XPUB: a PUB that also hands over the subscriber's subscription, so a
     * test can wait for the console to be listening (PT_SUBSCRIBED) instead
     * of sleeping through the PUB/SUB join */
    f->pub = zmq_socket(g_ctx, ZMQ_XPUB);
    int linger = 0, unbounded = 0; /* test_telemetry_backlog queues thousands */
    zmq_setsockopt(f->dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(f->pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(f->pub, ZMQ_SNDHWM, &unbounded, sizeof unbounded);
    zmq_setsockopt(f->dealer, ZMQ_ROUTING_ID, id, strlen(id));
    zmq_connect(f->dealer, pt_session_control_endpoint(s));
    zmq_connect(f->pub, pt_session_telemetry_endpoint(s));
    track(f->dealer, 1);
    track(f->pub, 1);
}

static void fake_close(fake *f)
{
    beat(f, 0);
    track(f->dealer, 0);
    track(f->pub, 0);
    zmq_close(f->dealer);
    zmq_close(f->pub);
}

static void send_text(void *sock, const char *text)
{
    zmq_send(sock, text, strlen(text), 0);
}

/* Sends m on control (pub = 0) or telemetry (pub = 1) with the next seq. */
static void fake_send(fake *f, pt_msg *m, int pub)
{
    snprintf(m->agent, sizeof m->agent, "%s", f->id);
    m->seq = pub ? f->tseq++ : f->seq++;
    char *text = NULL;
    pt_error err = {0};
    int rc = pt_msg_encode(m, &text, NULL, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0)
        send_text(pub ? f->pub : f->dealer, text);
    free(text);
}

/* device: its index in the topology (-1: none); gpu: NULL registers a CPU
 * agent, else a CUDA agent with the "nccl" capability on the GPU of that
 * PCI bus id. */
static void fake_register_on(fake *f, const char *endpoint, int device, const char *gpu)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_REGISTER, f->id);
    snprintf(m.u.reg.host, sizeof m.u.reg.host, "testhost");
    m.u.reg.pid = 1000 + f->id[strlen(f->id) - 1];
    m.u.reg.device = device;
    snprintf(m.u.reg.backend, sizeof m.u.reg.backend, "%s", gpu ? "cuda" : "cpu");
    snprintf(m.u.reg.data_endpoint, sizeof m.u.reg.data_endpoint, "%s", endpoint);
    if (gpu) {
        snprintf(m.u.reg.gpu_bus_id, sizeof m.u.reg.gpu_bus_id, "%s", gpu);
        m.u.reg.cap_count = 1;
        snprintf(m.u.reg.caps[0], sizeof m.u.reg.caps[0], "nccl");
    }
    fake_send(f, &m, 0);
}

static void fake_register(fake *f, const char *endpoint)
{
    fake_register_on(f, endpoint, 0, NULL);
}

/* Receives console messages for up to ms; returns 1 with *out when one of
 * `type` arrived (heartbeats are remembered for the echo on the way). */
static int fake_expect(fake *f, pt_session *s, pt_msg_type type, int ms, pt_msg *out)
{
    int64_t end = pt_msg_now_ns() + ms * NS_PER_MS;
    while (pt_msg_now_ns() < end) {
        beat_all();
        pt_session_poll(s, 5, NULL);
        char buf[1 << 16];
        int n;
        while ((n = zmq_recv(f->dealer, buf, sizeof buf, ZMQ_DONTWAIT)) >= 0) {
            pt_msg m;
            pt_error err = {0};
            if (n >= (int)sizeof buf) {
                CHECK(n < (int)sizeof buf);
                continue;
            }
            if (pt_msg_decode(buf, (size_t)n, "console", &m, &err) < 0) {
                CHECK_MSG(0, "the console sent something that does not decode: %s", err.msg);
                continue;
            }
            CHECK_STR_CONTAINS(m.agent, f->id);
            if (m.type == PT_MSG_HEARTBEAT) {
                f->have_console_hb = 1;
                f->last_console_hb = m.u.heartbeat.hb;
                f->last_console_tsend = m.u.heartbeat.t_send;
                f->last_console_trecv = fclock(f);
            }
            if (m.type == type) {
                *out = m;
                return 1;
            }
            pt_msg_clear(&m);
        }
    }
    return 0;
}

static void fake_heartbeat(fake *f, const char *state, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_HEARTBEAT, f->id);
    m.gen = f->gen;
    m.u.heartbeat.hb = f->seq;
    m.u.heartbeat.t_send = fclock(f);
    if (f->have_console_hb) {
        m.u.heartbeat.has_echo = 1;
        m.u.heartbeat.echo_hb = f->last_console_hb;
        m.u.heartbeat.echo_t_orig = f->last_console_tsend;
        m.u.heartbeat.echo_t_recv = f->last_console_trecv;
    }
    snprintf(m.u.heartbeat.state, sizeof m.u.heartbeat.state, "%s", state ? state : "");
    m.u.heartbeat.step = step;
    fake_send(f, &m, 0);
}

/* pt_session_wait while the beating fake agents go on heartbeating. */
static int wait_beating(pt_session *s, int ms, pt_error *err)
{
    int64_t end = pt_msg_now_ns() + ms * NS_PER_MS;
    for (;;) {
        beat_all();
        int rc = pt_session_wait(s, 10, err);
        if (rc != PT_ETIMEOUT || pt_msg_now_ns() >= end)
            return rc;
    }
}

/* One turn: the beating fake agents beat, the session handles what came. */
static void pump_once(pt_session *s)
{
    beat_all();
    pt_session_poll(s, 5, NULL);
}

/* Pumps until cond holds (or WAIT_MS passed: the CHECK after it fails). */
#define PUMP_UNTIL(s, cond)                                                                        \
    do {                                                                                           \
        int64_t pump_end_ = pt_msg_now_ns() + WAIT_MS * NS_PER_MS;                                 \
        while (!(cond) && pt_msg_now_ns() < pump_end_)                                             \
            pump_once(s);                                                                          \
    } while (0)

/* Pumps until the console's SUB has subscribed at f's XPUB: from then on
 * everything f publishes reaches the console. 1 when it has. */
static int subscribed(fake *f, pt_session *s)
{
    int64_t end = pt_msg_now_ns() + WAIT_MS * NS_PER_MS;
    while (pt_msg_now_ns() < end) {
        char buf[64];
        int n = zmq_recv(f->pub, buf, sizeof buf, ZMQ_DONTWAIT);
        if (n >= 1 && buf[0] == 1)
            return 1;
        pump_once(s);
    }
    return 0;
}

static uint64_t control_rejected(const pt_session *s)
{
    pt_session_counts k;
    pt_session_counts_get(s, &k);
    return k.control_rejected;
}

typedef struct seen {
    int rejected, dead, metrics, events, checkpoints, commits;
    int64_t commit_step;
    int commit_stages;
    char commit_dir[512];
    char dead_text[512];
    int64_t first_event_start;
} seen;

static void listener(void *user, const pt_session_note *n)
{
    seen *x = user;
    switch (n->kind) {
    case PT_NOTE_REJECTED:
        x->rejected++;
        break;
    case PT_NOTE_DEAD:
        x->dead++;
        snprintf(x->dead_text, sizeof x->dead_text, "%s", n->text);
        break;
    case PT_NOTE_METRICS:
        x->metrics++;
        break;
    case PT_NOTE_EVENTS:
        x->events++;
        x->first_event_start = n->msg->u.events.events[0].start_ns;
        break;
    case PT_NOTE_CHECKPOINT:
        x->checkpoints++;
        break;
    default:
        break;
    }
}

static int commit_hook(void *user, const char *dir, int64_t step, int stages, pt_error *err)
{
    (void)err;
    seen *x = user;
    x->commits++;
    x->commit_step = step;
    x->commit_stages = stages;
    snprintf(x->commit_dir, sizeof x->commit_dir, "%s", dir);
    return 0;
}

static pt_session *open_session(const char *record, seen *x, int fast)
{
    pt_session_config cfg = {.record_path = record,
                             .heartbeat_ms = fast ? FAST_HB_MS : 0,
                             .missed_heartbeats = fast ? FAST_MISSED : 0};
    pt_session *s = NULL;
    pt_error err = {0};
    int rc = pt_session_create(&cfg, &s, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (s) {
        pt_session_set_listener(s, listener, x);
        pt_session_set_commit(s, commit_hook, x);
        CHECK(!strncmp(pt_session_control_endpoint(s), "tcp://127.0.0.1:", 16));
        CHECK(!strncmp(pt_session_telemetry_endpoint(s), "tcp://127.0.0.1:", 16));
    }
    return s;
}

static void test_register_and_clock(void)
{
    seen x = {0};
    pt_session *s = open_session(NULL, &x, 1);
    REQUIRE(s);
    fake a;
    const int64_t shift = 5000 * NS_PER_MS; /* the fake agent's clock is 5 s ahead */
    fake_open(&a, "agent-a", s, shift);
    int64_t registered = pt_msg_now_ns();
    fake_register(&a, "tcp://127.0.0.1:41001");
    pt_msg m;
    REQUIRE(fake_expect(&a, s, PT_MSG_HEARTBEAT, WAIT_MS, &m)); /* sent at once on register */
    pt_msg_clear(&m);
    REQUIRE(pt_session_agent_count(s) == 1);
    const pt_session_agent *ag = pt_session_agent_at(s, 0);
    CHECK(!strcmp(ag->id, "agent-a"));
    CHECK(!strcmp(ag->host, "testhost"));
    CHECK(!strcmp(ag->data_endpoint, "tcp://127.0.0.1:41001"));
    CHECK(ag->state == PT_AGENT_REGISTERED);
    CHECK(ag->stage == -1 && ag->worker == -1);
    CHECK(!ag->clock_known);
    int64_t sent = pt_msg_now_ns();
    fake_heartbeat(&a, "waiting", -1); /* echoes the console's heartbeat */
    PUMP_UNTIL(s, pt_session_agent_at(s, 0)->clock_known);
    ag = pt_session_agent_at(s, 0);
    CHECK(ag->clock_known);
    /* |error| <= delay / 2, and the delay of a loopback round trip is small */
    CHECK_MSG(llabs(ag->clock_offset_ns - shift) <= ag->clock_delay_ns / 2 + 1,
              "offset %lld, delay %lld", (long long)ag->clock_offset_ns,
              (long long)ag->clock_delay_ns);
    /* the round trip began with the console's answer to the register */
    CHECK(ag->clock_delay_ns >= 0 && ag->clock_delay_ns <= pt_msg_now_ns() - registered);
    /* heard at the latest when the echo arrived, so no longer ago than it was sent */
    int64_t age_ms = pt_session_heartbeat_age_ms(s, 0);
    CHECK_MSG(age_ms >= 0 && age_ms <= (pt_msg_now_ns() - sent) / NS_PER_MS + 1, "age %lld ms",
              (long long)age_ms);
    CHECK(!strcmp(ag->reported, "waiting"));

    /* telemetry times are moved onto the console's clock */
    REQUIRE(subscribed(&a, s));
    pt_msg e;
    pt_msg_init(&e, PT_MSG_EVENTS, "agent-a");
    pt_msg_event ev = {0, 0, 0, 0, PT_OP_FWD, 0, 0, 0, 0};
    int64_t t = fclock(&a);
    ev.start_ns = t;
    ev.end_ns = t + 1000;
    e.u.events.count = 1;
    e.u.events.events = &ev;
    fake_send(&a, &e, 1);
    PUMP_UNTIL(s, x.events >= 1);
    CHECK(x.events == 1);
    CHECK_MSG(llabs(x.first_event_start - (t - ag->clock_offset_ns)) <= 1,
              "start %lld, expected %lld", (long long)x.first_event_start,
              (long long)(t - ag->clock_offset_ns));
    CHECK(llabs(x.first_event_start - (t - shift)) <= ag->clock_delay_ns / 2 + 1);
    fake_close(&a);
    pt_session_destroy(&s);
    CHECK(s == NULL);
}

/* The agent table past several growths of its index by id: every agent is
 * found under its own id; a name never registered, one longer than an id
 * can be, NULL and a NULL session are not. */
#define MANY_AGENTS 40
static void test_many_agents(void)
{
    seen x = {0};
    pt_session *s = open_session(NULL, &x, 0);
    REQUIRE(s);
    static fake f[MANY_AGENTS];
    for (int k = 0; k < MANY_AGENTS; k++) {
        char id[32], ep[64];
        snprintf(id, sizeof id, "agent-%02d", k);
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", 42000 + k);
        fake_open(&f[k], id, s, 0);
        fake_register(&f[k], ep);
    }
    PUMP_UNTIL(s, pt_session_agent_count(s) == MANY_AGENTS);
    CHECK_MSG(pt_session_agent_count(s) == MANY_AGENTS, "%d of %d agents registered",
              pt_session_agent_count(s), MANY_AGENTS);
    int found = 0;
    for (int k = 0; k < MANY_AGENTS; k++) {
        int i = pt_session_find_agent(s, f[k].id);
        const pt_session_agent *a = pt_session_agent_at(s, i);
        CHECK_MSG(a && !strcmp(a->id, f[k].id), "%s: index %d", f[k].id, i);
        found += a != NULL;
    }
    CHECK(found == pt_session_agent_count(s));
    char longer[PT_MSG_ID_MAX + 8]; /* agent-00 and then more than an id holds */
    memset(longer, '0', sizeof longer - 1);
    memcpy(longer, f[0].id, strlen(f[0].id));
    longer[sizeof longer - 1] = '\0';
    CHECK(pt_session_find_agent(s, longer) == -1);
    CHECK(pt_session_find_agent(s, "agent-99") == -1);
    CHECK(pt_session_find_agent(s, NULL) == -1);
    CHECK(pt_session_find_agent(NULL, f[0].id) == -1);
    for (int k = 0; k < MANY_AGENTS; k++)
        fake_close(&f[k]);
    pt_session_destroy(&s);
}

/* A console far behind on telemetry (a backlog of big events messages,
 * seconds of decoding on a slow machine) still reads its agents' heartbeats
 * in time: none is taken for dead, and every message arrives. */
#define BACKLOG_MSGS  2000
#define BACKLOG_BATCH 256
static void test_telemetry_backlog(void)
{
    seen x = {0};
    pt_session *s = open_session(NULL, &x, 1);
    REQUIRE(s);
    fake a;
    fake_open(&a, "agent-a", s, 0);
    fake_register(&a, "tcp://127.0.0.1:41001");
    PUMP_UNTIL(s, pt_session_agent_count(s) == 1);
    REQUIRE(pt_session_agent_count(s) == 1);
    beat(&a, 1);
    REQUIRE(subscribed(&a, s));
    static pt_msg_event ev[BACKLOG_BATCH];
    for (int k = 0; k < BACKLOG_BATCH; k++)
        ev[k] = (pt_msg_event){0, 0, 1, k % 8, PT_OP_FWD, 1, 1000 * k, 1000 * k + 800, 0};
    pt_msg e;
    pt_msg_init(&e, PT_MSG_EVENTS, "agent-a");
    e.u.events.count = BACKLOG_BATCH;
    e.u.events.events = ev;
    for (int k = 0; k < BACKLOG_MSGS; k++) {
        beat_all(); /* queued for the console's next read, as a live agent's are */
        fake_send(&a, &e, 1);
    }
    PUMP_UNTIL(s, x.events == BACKLOG_MSGS || x.dead > 0);
    CHECK_MSG(x.dead == 0, "taken for dead after %d of %d messages: %s", x.events, BACKLOG_MSGS,
              x.dead_text);
    CHECK_MSG(x.events == BACKLOG_MSGS, "%d of %d messages", x.events, BACKLOG_MSGS);
    fake_close(&a);
    pt_session_destroy(&s);
}

static void test_rejects(void)
{
    const char *rec = "run_session_test.d/rejects/run.ndjson";
    seen x = {0};
    pt_session *s = open_session(rec, &x, 0); /* nobody heartbeats here: default bound */
    REQUIRE(s);
    fake a, b;
    fake_open(&a, "agent-a", s, 0);
    fake_open(&b, "agent-b", s, 0);
    fake_register(&a, "tcp://127.0.0.1:41001");
    PUMP_UNTIL(s, pt_session_agent_count(s) >= 1);
    REQUIRE(pt_session_agent_count(s) == 1);

    /* 1: not JSON; 2: JSON but not a message; 3: a message naming another
     * agent than its routing id; 4: from an unregistered agent; 5: a
     * console-only type; 6: an ack of nothing; 7: out of order (seq 0 again);
     * 8: a stale generation */
    send_text(a.dealer, "\x01\x02 garbage {");
    send_text(a.dealer, "{\"v\":1,\"type\":\"launch\"}");
    pt_msg m;
    pt_msg_init(&m, PT_MSG_HEARTBEAT, NULL);
    m.u.heartbeat.t_send = 1;
    fake f = a;
    snprintf(f.id, sizeof f.id, "agent-zz");
    fake_send(&f, &m, 0); /* routing id agent-a, "agent": agent-zz */
    pt_msg_init(&m, PT_MSG_HEARTBEAT, NULL);
    m.u.heartbeat.t_send = 1;
    fake_send(&b, &m, 0);
    pt_msg_init(&m, PT_MSG_START, NULL);
    m.req = 7;
    m.u.start.steps = 1;
    fake_send(&a, &m, 0);
    pt_msg_init(&m, PT_MSG_ACK, NULL);
    m.req = 99;
    m.u.ack.of = PT_MSG_START;
    fake_send(&a, &m, 0);
    int64_t keep = a.seq;
    a.seq = 0;
    pt_msg_init(&m, PT_MSG_HEARTBEAT, NULL);
    m.u.heartbeat.t_send = 1;
    fake_send(&a, &m, 0);
    a.seq = keep;
    pt_msg_init(&m, PT_MSG_ERROR, NULL);
    m.gen = 3; /* no plan of generation 3 exists yet */
    snprintf(m.u.error.reason, sizeof m.u.error.reason, "from the future");
    fake_send(&a, &m, 0);
    /* a multi-frame message */
    zmq_send(a.dealer, "{}", 2, ZMQ_SNDMORE);
    zmq_send(a.dealer, "{}", 2, 0);
    PUMP_UNTIL(s, control_rejected(s) >= 9);
    pt_session_counts k;
    pt_session_counts_get(s, &k);
    CHECK_MSG(k.control_rejected == 9, "control_rejected %llu",
              (unsigned long long)k.control_rejected);
    CHECK(x.rejected >= 9);
    const pt_session_agent *ag = pt_session_agent_at(s, 0);
    CHECK_MSG(ag->control_rejected == 8, "agent-a rejected %llu",
              (unsigned long long)ag->control_rejected); /* all but agent-b's */
    CHECK(ag->state == PT_AGENT_REGISTERED);
    CHECK(pt_session_agent_count(s) == 1); /* agent-b never registered */

    /* telemetry: garbage, a control type, an unknown agent, then a gap */
    REQUIRE(subscribed(&a, s));
    REQUIRE(subscribed(&b, s));
    send_text(a.pub, "not json at all");
    send_text(a.pub, "{\"v\":1,\"type\":\"metrics\",\"agent\":\"agent-a\",\"seq\":0}");
    pt_msg_init(&m, PT_MSG_HEARTBEAT, NULL);
    m.u.heartbeat.t_send = 1;
    fake_send(&a, &m, 1); /* a heartbeat on the telemetry channel */
    pt_msg_init(&m, PT_MSG_METRICS, NULL);
    m.u.metrics.step = 0;
    fake_send(&b, &m, 1); /* agent-b is not registered */
    a.tseq += 3;          /* three messages lost */
    pt_msg_init(&m, PT_MSG_METRICS, NULL);
    m.u.metrics.step = 0;
    m.u.metrics.loss = 2.5;
    fake_send(&a, &m, 1);
    PUMP_UNTIL(s, (pt_session_counts_get(s, &k),
                   k.telemetry.malformed >= 2 && k.telemetry_rejected >= 2 && x.metrics >= 1));
    pt_session_counts_get(s, &k);
    CHECK_MSG(k.telemetry.malformed == 2, "malformed %llu",
              (unsigned long long)k.telemetry.malformed);
    CHECK(k.telemetry_rejected == 2);
    CHECK(k.telemetry.dropped == 3);
    CHECK(x.metrics == 1);
    pt_rx_counts rc;
    pt_session_agent_telemetry(s, 0, &rc);
    CHECK(rc.dropped == 3);
    ag = pt_session_agent_at(s, 0);
    CHECK(ag->has_metrics && ag->metrics.loss == 2.5);

    /* still serving: a new agent registers */
    fake_register(&b, "tcp://127.0.0.1:41002");
    PUMP_UNTIL(s, pt_session_agent_count(s) >= 2);
    CHECK(pt_session_agent_count(s) == 2);
    fake_close(&a);
    fake_close(&b);
    pt_session_destroy(&s);

    /* the record: one JSON object per line, with the rejections in it */
    char *text = NULL;
    REQUIRE(pt_file_read(rec, &text, NULL, NULL) == 0);
    int lines = 0, rejected = 0, bad = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j || !cJSON_IsObject(j) || !cJSON_IsNumber(cJSON_GetObjectItem(j, "t")))
            bad++;
        const cJSON *kind = j ? cJSON_GetObjectItem(j, "kind") : NULL;
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "rejected"))
            rejected++;
        cJSON_Delete(j);
        lines++;
    }
    free(text);
    CHECK(bad == 0);
    CHECK_MSG(rejected == 9 + 4, "rejected lines %d", rejected); /* 2 malformed telemetry too */
    CHECK(lines > rejected);
}

/* A 2-stage plan whose workers are agents a and b. */
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
    pt_model_spec *m = NULL;
    pt_model_spec_parse("{\"v\":1,\"name\":\"m\",\"input\":{\"kind\":\"float\",\"shape\":[4]},"
                        "\"layers\":[{\"type\":\"linear\",\"out\":3},{\"type\":\"softmax_xent\","
                        "\"classes\":3}]}",
                        "model", &m, NULL);
    return m;
}

static void ack(fake *f, const pt_msg *req, pt_msg_type of)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_ACK, NULL);
    m.gen = req->gen;
    m.req = req->req;
    m.u.ack.of = of;
    fake_send(f, &m, 0);
}

static void ckpt_ack(fake *f, int64_t req, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_CHECKPOINT_ACK, NULL);
    m.gen = f->gen;
    m.req = req;
    m.u.checkpoint_ack.step = step;
    snprintf(m.u.checkpoint_ack.dir, sizeof m.u.checkpoint_ack.dir, "x");
    fake_send(f, &m, 0);
}

/* Fake agents a ("agent-a", data port 41001) and b ("agent-b", 41002),
 * registered and heartbeating. 1 once the session has both. */
static int two_fakes(pt_session *s, fake *a, fake *b)
{
    fake_open(a, "agent-a", s, 0);
    fake_open(b, "agent-b", s, 0);
    fake_register(a, "tcp://127.0.0.1:41001");
    fake_register(b, "tcp://127.0.0.1:41002");
    beat(a, 1);
    beat(b, 1);
    PUMP_UNTIL(s, pt_session_agent_count(s) >= 2);
    return pt_session_agent_count(s) == 2;
}

static void test_plan_flow(void)
{
    seen x = {0};
    const char *rec = "run_session_test.d/flow/run.ndjson";
    /* a checkpoint folder of an earlier run of this test would name a later step */
    if (system("rm -rf run_session_test.d/flow") != 0)
        fprintf(stderr, "cannot remove run_session_test.d/flow\n");
    pt_mkdir_p("run_session_test.d/flow", NULL);
    pt_session *s = open_session(rec, &x, 1);
    REQUIRE(s);
    fake a, b;
    REQUIRE(two_fakes(s, &a, &b));
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    REQUIRE(plan && model);
    /* agent b runs stage 0, agent a stage 1 */
    int ib = pt_session_find_agent(s, "agent-b"), ia = pt_session_find_agent(s, "agent-a");
    int agents[2] = {ib, ia};
    pt_error err = {0};
    pt_session_plan sp = {plan, model, agents, "synthetic", 7, "run_session_test.d/flow/ck", 2, 0};
    REQUIRE(pt_session_assign(s, &sp, &err) == 0);
    CHECK(pt_session_generation(s) == 1);
    CHECK(pt_session_pending(s) == 2);
    /* the same agent twice is refused */
    int twice[2] = {ia, ia};
    pt_session_plan bad = sp;
    bad.agents = twice;
    CHECK(pt_session_assign(s, &bad, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "agent-a");
    CHECK(pt_session_generation(s) == 1);

    pt_msg asg_a, asg_b;
    REQUIRE(fake_expect(&a, s, PT_MSG_ASSIGN, WAIT_MS, &asg_a));
    REQUIRE(fake_expect(&b, s, PT_MSG_ASSIGN, WAIT_MS, &asg_b));
    CHECK(asg_b.u.assign.stage == 0 && asg_b.u.assign.rank == 0);
    CHECK(asg_a.u.assign.stage == 1 && asg_a.u.assign.rank == 1);
    CHECK(asg_a.u.assign.peer_count == 2);
    CHECK(!strcmp(asg_a.u.assign.peers[0].endpoint, "tcp://127.0.0.1:41002"));
    CHECK(!strcmp(asg_a.u.assign.peers[1].endpoint, "tcp://127.0.0.1:41001"));
    CHECK(!strcmp(asg_a.u.assign.telemetry, pt_session_telemetry_endpoint(s)));
    CHECK(asg_a.u.assign.seed == 7 && asg_a.u.assign.checkpoint_every == 2);
    CHECK(asg_a.gen == 1 && asg_a.req != asg_b.req);
    CHECK(!asg_a.u.assign.nccl_id[0] && !asg_b.u.assign.nccl_id[0]); /* CPU agents: ZeroMQ */
    a.gen = b.gen = 1;
    ack(&a, &asg_a, PT_MSG_ASSIGN);
    /* the wait times out naming the agent still awaited */
    CHECK(wait_beating(s, 100, &err) == PT_ETIMEOUT);
    CHECK_STR_CONTAINS(err.msg, "agent-b");
    ack(&b, &asg_b, PT_MSG_ASSIGN);
    CHECK(wait_beating(s, WAIT_MS, &err) == 0);
    CHECK(pt_session_agent_at(s, ia)->state == PT_AGENT_ASSIGNED);
    CHECK(pt_session_agent_at(s, ib)->stage == 0);

    REQUIRE(pt_session_start(s, 4, &err) == 0);
    pt_msg st_a, st_b;
    REQUIRE(fake_expect(&a, s, PT_MSG_START, WAIT_MS, &st_a));
    REQUIRE(fake_expect(&b, s, PT_MSG_START, WAIT_MS, &st_b));
    CHECK(st_a.u.start.steps == 4);
    ack(&a, &st_a, PT_MSG_START);
    ack(&b, &st_b, PT_MSG_START);
    CHECK(wait_beating(s, WAIT_MS, &err) == 0);
    CHECK(pt_session_agent_at(s, ia)->state == PT_AGENT_RUNNING);

    /* a checkpoint is committed once every worker acknowledged the step */
    ckpt_ack(&a, st_a.req, 2);
    PUMP_UNTIL(s, pt_session_agent_at(s, ia)->ckpt_step >= 2); /* a's ack is in */
    CHECK(pt_session_agent_at(s, ia)->ckpt_step == 2);
    CHECK(x.commits == 0);
    ckpt_ack(&b, st_b.req, 2);
    PUMP_UNTIL(s, x.commits >= 1);
    CHECK(x.commits == 1 && x.commit_step == 2 && x.commit_stages == 2);
    CHECK_STR_CONTAINS(x.commit_dir, "flow/ck/step-2");
    CHECK(pt_session_committed_step(s) == 2);
    char *latest = NULL;
    REQUIRE(pt_file_read("run_session_test.d/flow/ck/latest", &latest, NULL, NULL) == 0);
    CHECK_STR_CONTAINS(latest, "\"step\":2");
    free(latest);

    /* a step only a wrote (b's acknowledgement never came) is gone at the
     * next commit past it, and the record says so; a step ahead stays */
    REQUIRE(mkdir("run_session_test.d/flow/ck/step-3", 0755) == 0);
    REQUIRE(mkdir("run_session_test.d/flow/ck/step-5", 0755) == 0);
    REQUIRE(pt_file_write_atomic("run_session_test.d/flow/ck/step-3/stage-0.json", "{}", 2, NULL) ==
            0);
    ckpt_ack(&a, st_a.req, 4);
    ckpt_ack(&b, st_b.req, 4);
    PUMP_UNTIL(s, x.commits >= 2);
    CHECK(x.commits == 2 && x.commit_step == 4);
    CHECK(access("run_session_test.d/flow/ck/step-3", F_OK) != 0);
    CHECK(access("run_session_test.d/flow/ck/step-5", F_OK) == 0);
    char *said = NULL;
    REQUIRE(pt_file_read(rec, &said, NULL, NULL) == 0);
    CHECK_STR_CONTAINS(said, "\"kind\":\"checkpoint_failed\",\"step\":3,");
    CHECK_STR_CONTAINS(said, "never complete (not every worker acknowledged it) when step 4 was "
                             "committed: its folder was removed");
    free(said);

    /* finished steps come from heartbeats; "idle" ends the run */
    fake_heartbeat(&a, "idle", 3);
    fake_heartbeat(&b, "running", 2);
    PUMP_UNTIL(s, pt_session_agent_at(s, ia)->state == PT_AGENT_IDLE &&
                      pt_session_agent_at(s, ib)->step >= 2);
    CHECK(pt_session_min_step(s) == 2);
    CHECK(pt_session_agent_at(s, ia)->state == PT_AGENT_IDLE);
    CHECK(!pt_session_failure(s, NULL));

    /* b stops talking: dead within the heartbeat bound, and the failure
     * names it and its stage */
    beat(&b, 0);
    fake_heartbeat(&b, "running", 2);
    int64_t t0 = pt_msg_now_ns(), turn = t0, lag_ns = 0;
    while (pt_session_agent_at(s, ib)->state != PT_AGENT_DEAD &&
           pt_msg_now_ns() - t0 < WAIT_MS * NS_PER_MS) {
        pump_once(s);
        /* the longest this test went without a turn: a loaded machine's
         * scheduling delay, which the session cannot see past either */
        int64_t now = pt_msg_now_ns();
        if (now - turn > lag_ns)
            lag_ns = now - turn;
        turn = now;
    }
    double waited_ms = (double)(pt_msg_now_ns() - t0) / 1e6;
    CHECK(pt_session_agent_at(s, ib)->state == PT_AGENT_DEAD);
    CHECK(pt_session_agent_at(s, ia)->state == PT_AGENT_IDLE);
    /* within the heartbeat bound, give or take one heartbeat period and the
     * longest gap between two turns of this loop */
    CHECK_MSG(waited_ms < (FAST_MISSED + 2) * FAST_HB_MS + 2.0 * (double)lag_ns / 1e6,
              "dead after %.0f ms (longest gap between turns %.0f ms)", waited_ms,
              (double)lag_ns / 1e6);
    CHECK_MSG(waited_ms >= FAST_MISSED * FAST_HB_MS, "dead after only %.0f ms", waited_ms);
    CHECK(x.dead == 1);
    CHECK_STR_CONTAINS(x.dead_text, "agent-b (stage 0, replica 0");
    char missed[64];
    snprintf(missed, sizeof missed, "missed %d heartbeats", FAST_MISSED);
    CHECK_STR_CONTAINS(x.dead_text, missed);
    CHECK(pt_session_failure(s, &err) == 1);
    CHECK_STR_CONTAINS(err.msg, "agent-b");
    CHECK(wait_beating(s, 100, &err) == PT_ESTATE);
    /* a dead agent's messages are refused */
    pt_session_counts k0, k1;
    pt_session_counts_get(s, &k0);
    fake_heartbeat(&b, "running", 3);
    PUMP_UNTIL(s, control_rejected(s) > k0.control_rejected);
    pt_session_counts_get(s, &k1);
    CHECK(k1.control_rejected == k0.control_rejected + 1);

    /* a new generation: messages of the old one are stale */
    pt_msg stale;
    pt_msg_init(&stale, PT_MSG_ACK, NULL);
    fake c;
    fake_open(&c, "agent-c", s, 0);
    fake_register(&c, "tcp://127.0.0.1:41003");
    beat(&c, 1);
    PUMP_UNTIL(s, pt_session_find_agent(s, "agent-c") >= 0);
    int ic = pt_session_find_agent(s, "agent-c");
    REQUIRE(ic >= 0);
    int agents2[2] = {ic, ia};
    sp.agents = agents2;
    REQUIRE(pt_session_assign(s, &sp, &err) == 0);
    CHECK(pt_session_generation(s) == 2);
    ckpt_ack(&a, st_a.req, 6); /* a still at generation 1 */
    PUMP_UNTIL(s, control_rejected(s) > k1.control_rejected);
    pt_session_counts_get(s, &k0);
    CHECK(k0.control_rejected == k1.control_rejected + 1);
    CHECK(x.commits == 2);

    pt_msg_clear(&asg_a);
    pt_msg_clear(&asg_b);
    pt_msg_clear(&st_a);
    pt_msg_clear(&st_b);
    pt_session_bye(s, "test over");
    pt_msg bye;
    CHECK(fake_expect(&a, s, PT_MSG_BYE, WAIT_MS, &bye));
    CHECK_STR_CONTAINS(bye.u.bye.reason, "test over");
    fake_close(&a);
    fake_close(&b);
    fake_close(&c);
    pt_session_destroy(&s);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);

    char *text = NULL;
    REQUIRE(pt_file_read(rec, &text, NULL, NULL) == 0);
    CHECK_STR_CONTAINS(text, "\"kind\":\"plan\",\"gen\":1");
    CHECK_STR_CONTAINS(text, "\"kind\":\"dead\",\"agent\":\"agent-b\"");
    CHECK_STR_CONTAINS(text, "\"kind\":\"checkpoint\",\"step\":2");
    free(text);
}

/* Publishes f's metrics of `step` as worker (stage, 0) of generation gen. */
static void pub_metrics(fake *f, int64_t gen, int stage, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_METRICS, NULL);
    m.gen = gen;
    m.u.metrics.stage = stage;
    m.u.metrics.step = step;
    m.u.metrics.loss = 0.5;
    m.u.metrics.samples_per_s = 1;
    fake_send(f, &m, 1);
}

static void pub_events(fake *f, int64_t gen, int stage, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_EVENTS, NULL);
    m.gen = gen;
    pt_msg_event ev = {.stage = stage, .step = step, .op = PT_OP_FWD, .mb = 0, .version = -1};
    ev.start_ns = fclock(f);
    ev.end_ns = ev.start_ns + 1000;
    m.u.events.count = 1;
    m.u.events.events = &ev;
    fake_send(f, &m, 1);
}

/* Telemetry frames the session has counted one way or another. */
static uint64_t telemetry_counted(const pt_session *s)
{
    pt_session_counts k;
    pt_session_counts_get(s, &k);
    return k.telemetry.received + k.telemetry.duplicates + k.telemetry.stale +
           k.telemetry.malformed;
}

/* Assigns sp and has a and b acknowledge it; 1 when both did. */
static int assign_acked(pt_session *s, const pt_session_plan *sp, fake *a, fake *b)
{
    pt_error err = {0};
    pt_msg asg_a, asg_b;
    if (pt_session_assign(s, sp, &err) != 0 || !fake_expect(a, s, PT_MSG_ASSIGN, WAIT_MS, &asg_a))
        return 0;
    if (!fake_expect(b, s, PT_MSG_ASSIGN, WAIT_MS, &asg_b)) {
        pt_msg_clear(&asg_a);
        return 0;
    }
    a->gen = b->gen = asg_a.gen;
    ack(a, &asg_a, PT_MSG_ASSIGN);
    ack(b, &asg_b, PT_MSG_ASSIGN);
    pt_msg_clear(&asg_a);
    pt_msg_clear(&asg_b);
    return wait_beating(s, WAIT_MS, &err) == 0;
}

/* Telemetry of generation 1 that reaches the console after generation 2 was
 * applied (the console reads telemetry behind its control channel): it is
 * measurement of what happened, so it reaches the listener and the record
 * with its own generation and counts late; the agent's current step,
 * metrics and stage, which the controller acts on, stay generation 2's. A
 * frame of a generation no plan was sent for is refused. */
static void test_late_telemetry(void)
{
    seen x = {0};
    const char *rec = "run_session_test.d/late/run.ndjson";
    if (system("rm -rf run_session_test.d/late") != 0)
        fprintf(stderr, "cannot remove run_session_test.d/late\n");
    pt_mkdir_p("run_session_test.d/late", NULL);
    pt_session *s = open_session(rec, &x, 1);
    REQUIRE(s);
    fake a, b;
    REQUIRE(two_fakes(s, &a, &b));
    REQUIRE(subscribed(&a, s));
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    REQUIRE(plan && model);
    int ib = pt_session_find_agent(s, "agent-b"), ia = pt_session_find_agent(s, "agent-a");
    int gen1[2] = {ib, ia}; /* a runs stage 1 */
    pt_session_plan sp = {plan, model, gen1, "synthetic", 7, NULL, 0, 0};
    REQUIRE(assign_acked(s, &sp, &a, &b));
    CHECK(pt_session_generation(s) == 1);
    pub_metrics(&a, 1, 1, 3);
    PUMP_UNTIL(s, x.metrics >= 1);
    CHECK(pt_session_agent_at(s, ia)->step == 3);

    int gen2[2] = {ia, ib}; /* a runs stage 0 now */
    sp.agents = gen2;
    REQUIRE(assign_acked(s, &sp, &a, &b));
    CHECK(pt_session_generation(s) == 2);
    CHECK(pt_session_agent_at(s, ia)->step == -1 && pt_session_agent_at(s, ia)->stage == 0);
    int pending = pt_session_pending(s), metrics_before = x.metrics, events_before = x.events;
    pt_session_counts k0, k1;
    pt_session_counts_get(s, &k0);

    /* generation 1's steps 8 and 9, read now */
    pub_events(&a, 1, 1, 8);
    pub_metrics(&a, 1, 1, 9);
    /* and a frame of generation 3, which no plan was sent for */
    pub_metrics(&a, 3, 0, 1);
    uint64_t want = telemetry_counted(s) + 3;
    PUMP_UNTIL(s, telemetry_counted(s) >= want);
    pt_session_counts_get(s, &k1);
    CHECK_MSG(k1.telemetry.late == k0.telemetry.late + 2,
              "late %llu (before %llu), stale %llu (before %llu): generation 1's frames must be "
              "taken and counted late",
              (unsigned long long)k1.telemetry.late, (unsigned long long)k0.telemetry.late,
              (unsigned long long)k1.telemetry.stale, (unsigned long long)k0.telemetry.stale);
    CHECK(k1.telemetry.stale == k0.telemetry.stale + 1); /* generation 3 */
    CHECK(k1.telemetry.received == k0.telemetry.received + 2);
    CHECK(x.metrics == metrics_before + 1 && x.events == events_before + 1);
    /* generation 2's control state is as it was: step 9 and stage 1 are
     * generation 1's */
    const pt_session_agent *ag = pt_session_agent_at(s, ia);
    CHECK_MSG(ag->step == -1, "agent-a's step is %lld after a late frame of step 9",
              (long long)ag->step);
    CHECK(ag->stage == 0 && ag->gen == 2 && ag->state == PT_AGENT_ASSIGNED);
    CHECK(ag->metrics.step == 3 && ag->metrics.stage == 1); /* generation 1's last current one */
    CHECK(pt_session_min_step(s) == -1);
    CHECK(pt_session_pending(s) == pending);
    /* generation 2's own telemetry is taken as the agent's */
    pub_metrics(&a, 2, 0, 1);
    PUMP_UNTIL(s, pt_session_agent_at(s, ia)->step >= 1);
    CHECK(pt_session_agent_at(s, ia)->step == 1);
    CHECK(pt_session_agent_at(s, ia)->metrics.stage == 0);

    fake_close(&a);
    fake_close(&b);
    pt_session_destroy(&s);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);

    /* the record has generation 1's late frames after generation 2's plan */
    pt_record *r = NULL;
    pt_error err = {0};
    int lrc = pt_record_load(rec, &r, &err);
    CHECK_MSG(lrc == 0, "%s", err.msg);
    if (lrc != 0)
        return;
    int after_plan2 = 0, late_metrics = 0, late_events = 0, gen3 = 0;
    for (int64_t i = 0; i < pt_record_count(r); i++) {
        const pt_record_entry *e = pt_record_at(r, i);
        if (e->kind == PT_RECORD_PLAN && e->gen == 2)
            after_plan2 = 1;
        if (e->kind != PT_RECORD_RECV || strcmp(e->channel, "telemetry") != 0)
            continue;
        gen3 += e->gen == 3;
        if (!after_plan2 || e->gen != 1 || e->step_last < 8)
            continue;
        late_metrics += e->msg_type == PT_MSG_METRICS && e->step == 9;
        late_events += e->msg_type == PT_MSG_EVENTS && e->step == 8;
    }
    CHECK_MSG(late_metrics == 1 && late_events == 1,
              "record %s: generation 1's late metrics %d, events %d after generation 2's plan "
              "(want 1, 1)",
              rec, late_metrics, late_events);
    CHECK(gen3 == 0);
    pt_record_free(&r);
}

/* f's control connection breaks and ZeroMQ makes a new one, as over a cut
 * link: what the console had queued for the old one is lost with it; the
 * same process registers again (its seq goes on). The console frees the
 * routing id when it sees the old connection close, which can come after
 * the new one's handshake (whose connection it then ignores): so the new
 * connection is made again until something of want's type comes through
 * it, well within the session's dead bound (3 s). 1 with *out then. */
static int fake_reconnect_expect(fake *f, pt_session *s, pt_msg_type want, pt_msg *out)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        track(f->dealer, 0);
        zmq_close(f->dealer);
        f->dealer = zmq_socket(g_ctx, ZMQ_DEALER);
        int linger = 0;
        zmq_setsockopt(f->dealer, ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(f->dealer, ZMQ_ROUTING_ID, f->id, strlen(f->id));
        zmq_connect(f->dealer, pt_session_control_endpoint(s));
        track(f->dealer, 1);
        fake_register(f, "tcp://127.0.0.1:41002");
        if (fake_expect(f, s, want, 300, out))
            return 1;
    }
    return 0;
}

static void ack_step(fake *f, const pt_msg *req, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_ACK, NULL);
    m.gen = req->gen;
    m.req = req->req;
    m.u.ack.of = PT_MSG_STOP;
    m.u.ack.step = step;
    fake_send(f, &m, 0);
}

static uint64_t stops_resent(const pt_session *s)
{
    pt_session_counts k;
    pt_session_counts_get(s, &k);
    return k.stops_resent;
}

/* A stop whose message died with a broken connection is sent again when the
 * agent's process registers again: both rounds, the hold and the stop at the
 * common step, under their own ids; an agent that did not reconnect gets
 * nothing twice (docs/protocol.md, "Stopping at one step"). */
static void test_stop_resent(void)
{
    seen x = {0};
    pt_session *s = open_session("run_session_test.d/stop_resent.ndjson", &x, 0);
    REQUIRE(s);
    fake a, b;
    REQUIRE(two_fakes(s, &a, &b));
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    REQUIRE(plan && model);
    int ib = pt_session_find_agent(s, "agent-b"), ia = pt_session_find_agent(s, "agent-a");
    int agents[2] = {ib, ia};
    pt_error err = {0};
    pt_session_plan sp = {plan, model, agents, "synthetic", 7, NULL, 0, 0};
    REQUIRE(pt_session_assign(s, &sp, &err) == 0);
    pt_msg asg_a, asg_b, st_a, st_b;
    REQUIRE(fake_expect(&a, s, PT_MSG_ASSIGN, WAIT_MS, &asg_a));
    REQUIRE(fake_expect(&b, s, PT_MSG_ASSIGN, WAIT_MS, &asg_b));
    a.gen = b.gen = 1;
    ack(&a, &asg_a, PT_MSG_ASSIGN);
    ack(&b, &asg_b, PT_MSG_ASSIGN);
    REQUIRE(wait_beating(s, WAIT_MS, &err) == 0);
    REQUIRE(pt_session_start(s, 0, &err) == 0);
    REQUIRE(fake_expect(&a, s, PT_MSG_START, WAIT_MS, &st_a));
    REQUIRE(fake_expect(&b, s, PT_MSG_START, WAIT_MS, &st_b));
    ack(&a, &st_a, PT_MSG_START);
    ack(&b, &st_b, PT_MSG_START);
    REQUIRE(wait_beating(s, WAIT_MS, &err) == 0);
    uint64_t rejected0 = control_rejected(s);

    /* the hold reaches a; b's connection breaks before b reads its hold */
    REQUIRE(pt_session_stop(s, "test stop", &err) == 0);
    pt_msg hold_a, hold_b, stop_a, stop_b;
    REQUIRE(fake_expect(&a, s, PT_MSG_STOP, WAIT_MS, &hold_a));
    CHECK(hold_a.u.stop.hold == 1);
    CHECK(stops_resent(s) == 0);
    REQUIRE(fake_reconnect_expect(&b, s, PT_MSG_STOP, &hold_b));
    CHECK(hold_b.u.stop.hold == 1 && hold_b.gen == 1);
    CHECK_STR_CONTAINS(hold_b.u.stop.reason, "test stop");
    CHECK(hold_b.req != hold_a.req);
    CHECK(stops_resent(s) == 1);
    ack_step(&a, &hold_a, 3);
    ack_step(&b, &hold_b, 5);

    /* the stop at the common step: a reads it, b's connection breaks again */
    REQUIRE(fake_expect(&a, s, PT_MSG_STOP, WAIT_MS, &stop_a));
    CHECK(stop_a.u.stop.hold == 0 && stop_a.u.stop.at_step == 5);
    REQUIRE(fake_reconnect_expect(&b, s, PT_MSG_STOP, &stop_b));
    CHECK(stop_b.u.stop.hold == 0 && stop_b.u.stop.at_step == 5);
    CHECK(stops_resent(s) == 2);
    ack_step(&a, &stop_a, 5);
    ack_step(&b, &stop_b, 5);
    CHECK(wait_beating(s, WAIT_MS, &err) == 0);
    CHECK(pt_session_agent_at(s, ia)->state == PT_AGENT_STOPPED);
    CHECK(pt_session_agent_at(s, ib)->state == PT_AGENT_STOPPED);
    CHECK(pt_session_agent_at(s, ib)->stop_step == 5);
    /* a got each stop once: nothing more of them comes its way */
    pt_msg more;
    CHECK(!fake_expect(&a, s, PT_MSG_STOP, 200, &more));
    CHECK(control_rejected(s) == rejected0);

    pt_msg_clear(&asg_a);
    pt_msg_clear(&asg_b);
    fake_close(&a);
    fake_close(&b);
    pt_session_destroy(&s);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
}

/* A plan of one single-replica stage per device in devs. */
static pt_plan *plan_on(const int *devs, int n)
{
    pt_plan *p = pt_plan_new(n);
    p->layer_count = n;
    for (int k = 0; k < n; k++) {
        p->stages[k].first = k;
        p->stages[k].last = k + 1;
        pt_plan_set_replicas(p, k, &devs[k], 1);
    }
    return p;
}

/* The run controller's one mapping policy (tui/control/run.h, pt_run_map): the
 * agent of the worker's device first, then agents of no device in order of
 * registration, never an agent of another device, each agent once; running
 * out is an error naming the stage, replica and device. */
static void test_map_policy(void)
{
    pt_mkdir_p("run_session_test.d/map", NULL);
    pt_run_config cfg = {.run_dir = "run_session_test.d/map", .agents = 4};
    pt_run *run = NULL;
    pt_error err = {0};
    REQUIRE(pt_run_create(&cfg, &run, &err) == 0);
    pt_session *s = pt_run_session(run);
    CHECK(pt_run_get_state(run) == PT_RUN_WAITING);
    fake f[4];
    const char *ids[4] = {"agent-a", "agent-b", "agent-c", "agent-d"};
    const int devs[4] = {1, -1, 0, -1}; /* a: device 1, b: none, c: device 0, d: none */
    char ep[64];
    for (int k = 0; k < 4; k++) {
        fake_open(&f[k], ids[k], s, 0);
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", 41001 + k);
        fake_register_on(&f[k], ep, devs[k], NULL);
        /* one at a time: the table's order is the order of registration */
        int64_t end = pt_msg_now_ns() + WAIT_MS * NS_PER_MS;
        while (pt_session_agent_count(s) < k + 1 && pt_msg_now_ns() < end)
            pt_run_poll(run, 5, NULL);
        REQUIRE(pt_session_agent_count(s) == k + 1);
    }
    CHECK(pt_run_usable_agents(run) == 4);
    CHECK(pt_run_get_state(run) == PT_RUN_READY);
    int ia = pt_session_find_agent(s, "agent-a"), ib = pt_session_find_agent(s, "agent-b");
    int ic = pt_session_find_agent(s, "agent-c"), id = pt_session_find_agent(s, "agent-d");
    int got[4];

    /* devices 0 and 1: their agents, whatever the order of registration */
    const int d01[2] = {0, 1};
    pt_plan *p = plan_on(d01, 2);
    CHECK(pt_run_map(run, p, got, &err) == 0);
    CHECK_MSG(got[0] == ic && got[1] == ia, "got %d %d", got[0], got[1]);
    pt_plan_free(&p);

    /* a device nobody has goes to the first agent of no device; a second
     * such worker to the next one, not to an agent of another device */
    const int d579[3] = {5, 1, 7};
    p = plan_on(d579, 3);
    CHECK(pt_run_map(run, p, got, &err) == 0);
    CHECK_MSG(got[0] == ib && got[1] == ia && got[2] == id, "got %d %d %d", got[0], got[1], got[2]);
    pt_plan_free(&p);

    /* three devices nobody has, two agents of no device: refused, naming
     * the worker left over; agent c (device 0) is not taken for it */
    const int d567[3] = {5, 6, 7};
    p = plan_on(d567, 3);
    err.msg[0] = '\0';
    CHECK(pt_run_map(run, p, got, &err) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "stage 2 replica 0 needs device 7");
    pt_plan_free(&p);

    for (int k = 0; k < 4; k++)
        fake_close(&f[k]);
    pt_run_destroy(&run);
    CHECK(run == NULL);
}

static void setup(void)
{
    g_ctx = zmq_ctx_new();
    pt_mkdir_p("run_session_test.d", NULL);
}

/* The assigns of a generation over agents on GPUs of the given bus ids;
 * the ids the two agents were handed into ida/idb. */
static void assign_on_gpus(const char *gpu_a, const char *gpu_b, char *ida, char *idb)
{
    seen x = {0};
    pt_session *s = open_session(NULL, &x, 1);
    REQUIRE(s);
    fake a, b;
    fake_open(&a, "agent-a", s, 0);
    fake_open(&b, "agent-b", s, 0);
    fake_register_on(&a, "tcp://127.0.0.1:41001", 0, gpu_a);
    fake_register_on(&b, "tcp://127.0.0.1:41002", 0, gpu_b);
    beat(&a, 1);
    beat(&b, 1);
    PUMP_UNTIL(s, pt_session_agent_count(s) >= 2);
    REQUIRE(pt_session_agent_count(s) == 2);
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    REQUIRE(plan && model);
    int agents[2] = {pt_session_find_agent(s, "agent-a"), pt_session_find_agent(s, "agent-b")};
    pt_error err = {0};
    pt_session_plan sp = {plan, model, agents, "synthetic", 7, NULL, 0, 0};
    REQUIRE(pt_session_assign(s, &sp, &err) == 0);
    pt_msg asg_a, asg_b;
    REQUIRE(fake_expect(&a, s, PT_MSG_ASSIGN, WAIT_MS, &asg_a));
    REQUIRE(fake_expect(&b, s, PT_MSG_ASSIGN, WAIT_MS, &asg_b));
    snprintf(ida, PT_MSG_NCCL_ID_MAX, "%s", asg_a.u.assign.nccl_id);
    snprintf(idb, PT_MSG_NCCL_ID_MAX, "%s", asg_b.u.assign.nccl_id);
    pt_msg_clear(&asg_a);
    pt_msg_clear(&asg_b);
    beat(&a, 0);
    beat(&b, 0);
    fake_close(&a);
    fake_close(&b);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
    pt_session_destroy(&s);
}

/* A simulated agent (the "simulated" capability) has no data plane: its
 * assign lists only its own peer entry, while a training agent of the same
 * generation gets every worker's. */
static void test_simulated_peers(void)
{
    seen x = {0};
    pt_session *s = open_session(NULL, &x, 1);
    REQUIRE(s);
    fake a, b;
    fake_open(&a, "agent-a", s, 0);
    fake_open(&b, "agent-b", s, 0);
    pt_msg m;
    pt_msg_init(&m, PT_MSG_REGISTER, a.id);
    snprintf(m.u.reg.host, sizeof m.u.reg.host, "testhost");
    m.u.reg.pid = 1001;
    snprintf(m.u.reg.backend, sizeof m.u.reg.backend, "cpu");
    snprintf(m.u.reg.data_endpoint, sizeof m.u.reg.data_endpoint, "inproc://pt-sim-data-a");
    m.u.reg.cap_count = 1;
    snprintf(m.u.reg.caps[0], sizeof m.u.reg.caps[0], "%s", PT_MSG_CAP_SIMULATED);
    fake_send(&a, &m, 0);
    fake_register(&b, "tcp://127.0.0.1:41002");
    beat(&a, 1);
    beat(&b, 1);
    PUMP_UNTIL(s, pt_session_agent_count(s) >= 2);
    REQUIRE(pt_session_agent_count(s) == 2);
    int ia = pt_session_find_agent(s, "agent-a"), ib = pt_session_find_agent(s, "agent-b");
    CHECK(pt_session_agent_at(s, ia)->simulated && !pt_session_agent_at(s, ib)->simulated);
    pt_plan *plan = two_stage_plan();
    pt_model_spec *model = tiny_model();
    REQUIRE(plan && model);
    int agents[2] = {ib, ia}; /* a: stage 1, rank 1 */
    pt_error err = {0};
    pt_session_plan sp = {plan, model, agents, "synthetic", 7, NULL, 0, 0};
    REQUIRE(pt_session_assign(s, &sp, &err) == 0);
    pt_msg asg_a, asg_b;
    REQUIRE(fake_expect(&a, s, PT_MSG_ASSIGN, WAIT_MS, &asg_a));
    REQUIRE(fake_expect(&b, s, PT_MSG_ASSIGN, WAIT_MS, &asg_b));
    const pt_msg_assign *aa = &asg_a.u.assign, *ab = &asg_b.u.assign;
    CHECK_MSG(aa->peer_count == 1, "the simulated agent was sent %d peers", aa->peer_count);
    CHECK(aa->rank == 1 && aa->peers[0].rank == 1 && aa->peers[0].stage == 1 &&
          !strcmp(aa->peers[0].endpoint, "inproc://pt-sim-data-a"));
    CHECK_MSG(ab->peer_count == 2, "the training agent was sent %d peers", ab->peer_count);
    CHECK(!strcmp(ab->peers[1].endpoint, "inproc://pt-sim-data-a"));
    pt_msg_clear(&asg_a);
    pt_msg_clear(&asg_b);
    beat(&a, 0);
    beat(&b, 0);
    fake_close(&a);
    fake_close(&b);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
    pt_session_destroy(&s);
}

/* The console makes the NCCL unique id and hands the same one to every
 * worker of a generation when each has its own GPU, and none when two share
 * one (NCCL takes one GPU per rank: they exchange over ZeroMQ instead). */
static void test_nccl_id(void)
{
    char ida[PT_MSG_NCCL_ID_MAX], idb[PT_MSG_NCCL_ID_MAX];
    assign_on_gpus("00000000:19:00.0", "00000000:3B:00.0", ida, idb);
    if (pt_nccl_built()) {
        unsigned char bytes[PT_NCCL_ID_BYTES];
        CHECK_MSG(strlen(ida) == 2 * PT_NCCL_ID_BYTES, "id of %zu digits", strlen(ida));
        CHECK(pt_nccl_id_decode(ida, bytes, NULL) == 0);
        CHECK(!strcmp(ida, idb));
    } else {
        CHECK(!ida[0] && !idb[0]);
    }
    char first[PT_MSG_NCCL_ID_MAX];
    snprintf(first, sizeof first, "%s", ida);
    assign_on_gpus("00000000:19:00.0", "00000000:3B:00.0", ida, idb);
    if (pt_nccl_built())
        CHECK_MSG(strcmp(first, ida) != 0, "two runs were handed the same NCCL id");
    assign_on_gpus("00000000:19:00.0", "00000000:19:00.0", ida, idb);
    CHECK(!ida[0] && !idb[0]);
    assign_on_gpus("00000000:19:00.0", NULL, ida, idb);
    CHECK(!ida[0] && !idb[0]);
}

static void teardown(void)
{
    for (int i = 0; i < OPEN_MAX; i++)
        if (g_open[i]) {
            zmq_close(g_open[i]);
            g_open[i] = NULL;
        }
    zmq_ctx_term(g_ctx);
}

static void t_register(void)
{
    setup();
    test_register_and_clock();
    teardown();
}
static void t_many(void)
{
    setup();
    test_many_agents();
    teardown();
}
static void t_backlog(void)
{
    setup();
    test_telemetry_backlog();
    teardown();
}
static void t_rejects(void)
{
    setup();
    test_rejects();
    teardown();
}
static void t_flow(void)
{
    setup();
    test_plan_flow();
    teardown();
}

static void t_stop_resent(void)
{
    setup();
    test_stop_resent();
    teardown();
}

static void t_map(void)
{
    setup();
    test_map_policy();
    teardown();
}

static void t_nccl(void)
{
    setup();
    test_nccl_id();
    teardown();
}

static void t_late(void)
{
    setup();
    test_late_telemetry();
    teardown();
}

static void t_sim_peers(void)
{
    setup();
    test_simulated_peers();
    teardown();
}

PT_TEST_MAIN({"register_and_clock", t_register}, {"rejects", t_rejects}, {"many_agents", t_many},
             {"telemetry_backlog", t_backlog}, {"plan_flow", t_flow},
             {"stop_resent", t_stop_resent}, {"map_policy", t_map}, {"nccl_id", t_nccl},
             {"simulated_peers", t_sim_peers}, {"late_telemetry", t_late})

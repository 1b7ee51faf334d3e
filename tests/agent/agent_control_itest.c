/* pipetop-agent driven by a hand-made console (a ROUTER and a SUB in this
 * test): registration, rejection of malformed, misaddressed, out-of-order
 * and stale control messages (each answered with an error, the agent keeps
 * serving), a one-stage plan run for three steps with telemetry, a
 * checkpoint, bye; and a clean exit when the console goes silent. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/agent.h"
#include "protocol/fileio.h"
#include "protocol/message.h"
#include "tests/test.h"

#define NS_PER_MS    1000000LL
#define WAIT_MS      20000
#define EXIT_WAIT_MS 10000
#define TEST_DIR     "agent_control_itest.d"

typedef struct console {
    void *ctx, *router, *sub;
    char ctl[256], tel[256];
    char id[PT_MSG_ID_MAX];
    int64_t seq;
    int64_t agent_hb, agent_tsend, agent_trecv; /* its newest heartbeat, to echo */
    int errors;                                 /* error messages received from the agent */
    int rejected_errors;                        /* ... that report a rejected control message */
    int heartbeats;
} console;

static void console_open(console *c)
{
    memset(c, 0, sizeof *c);
    c->ctx = zmq_ctx_new();
    c->router = zmq_socket(c->ctx, ZMQ_ROUTER);
    c->sub = zmq_socket(c->ctx, ZMQ_SUB);
    int linger = 0;
    zmq_setsockopt(c->router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(c->sub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, "", 0);
    zmq_bind(c->router, "tcp://127.0.0.1:*");
    zmq_bind(c->sub, "tcp://127.0.0.1:*");
    size_t n = sizeof c->ctl;
    zmq_getsockopt(c->router, ZMQ_LAST_ENDPOINT, c->ctl, &n);
    n = sizeof c->tel;
    zmq_getsockopt(c->sub, ZMQ_LAST_ENDPOINT, c->tel, &n);
}

static void console_close(console *c)
{
    zmq_close(c->router);
    zmq_close(c->sub);
    zmq_ctx_term(c->ctx);
}

static void send_raw(console *c, const char *text, size_t len)
{
    zmq_send(c->router, c->id, strlen(c->id), ZMQ_SNDMORE);
    zmq_send(c->router, text, len, 0);
}

static void send_msg(console *c, pt_msg *m)
{
    if (!m->agent[0])
        snprintf(m->agent, sizeof m->agent, "%s", c->id);
    m->seq = c->seq++;
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    int rc = pt_msg_encode(m, &text, &len, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0)
        send_raw(c, text, len);
    free(text);
}

static void send_heartbeat(console *c)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_HEARTBEAT, c->id);
    m.u.heartbeat.hb = c->seq;
    m.u.heartbeat.t_send = pt_msg_now_ns();
    if (c->agent_tsend > 0) {
        m.u.heartbeat.has_echo = 1;
        m.u.heartbeat.echo_hb = c->agent_hb;
        m.u.heartbeat.echo_t_orig = c->agent_tsend;
        m.u.heartbeat.echo_t_recv = c->agent_trecv;
    }
    send_msg(c, &m);
}

/* Waits up to ms for a control message of `type` (any type: PT_MSG_TYPE_COUNT)
 * from the agent, heartbeating it meanwhile. */
static int expect(console *c, pt_msg_type type, int ms, pt_msg *out, int beat)
{
    int64_t end = pt_msg_now_ns() + ms * NS_PER_MS, next_beat = 0;
    while (pt_msg_now_ns() < end) {
        if (beat && c->id[0] && pt_msg_now_ns() >= next_beat) {
            send_heartbeat(c);
            next_beat = pt_msg_now_ns() + PT_AGENT_HEARTBEAT_MS * NS_PER_MS;
        }
        /* A bound SUB sends its subscription to a new publisher only when its
         * own thread processes commands: keep it doing so, as a console does. */
        int ev = 0;
        size_t evlen = sizeof ev;
        zmq_getsockopt(c->sub, ZMQ_EVENTS, &ev, &evlen);
        zmq_pollitem_t it = {c->router, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20) <= 0)
            continue;
        char id[256], body[1 << 16];
        int il = zmq_recv(c->router, id, sizeof id - 1, 0);
        int bl = zmq_recv(c->router, body, sizeof body, 0);
        if (il < 0 || bl < 0 || bl >= (int)sizeof body)
            continue;
        id[il] = '\0';
        pt_msg m;
        pt_error err = {0};
        if (pt_msg_decode(body, (size_t)bl, "agent", &m, &err) < 0) {
            CHECK_MSG(0, "the agent sent something that does not decode: %s", err.msg);
            continue;
        }
        CHECK(!strcmp(m.agent, id));
        if (!c->id[0])
            snprintf(c->id, sizeof c->id, "%.63s", id);
        if (m.type == PT_MSG_HEARTBEAT) {
            c->heartbeats++;
            c->agent_hb = m.u.heartbeat.hb;
            c->agent_tsend = m.u.heartbeat.t_send;
            c->agent_trecv = pt_msg_now_ns();
        }
        if (m.type == PT_MSG_ERROR) {
            c->errors++;
            if (strstr(m.u.error.reason, "rejected control message"))
                c->rejected_errors++;
        }
        if (type == PT_MSG_TYPE_COUNT || m.type == type) {
            *out = m;
            return 1;
        }
        pt_msg_clear(&m);
    }
    return 0;
}

static pid_t spawn_agent(const console *c, const char *name, const char *log)
{
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/pipetop-agent",
             getenv("PT_BUILD_DIR") ? getenv("PT_BUILD_DIR") : ".");
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(bin, bin, "--console", c->ctl, "--telemetry", c->tel, "--name", name, "--threads",
              "1", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* An agent with --checkpoint-root root. */
static pid_t spawn_agent_in(const console *c, const char *name, const char *log, const char *root)
{
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/pipetop-agent",
             getenv("PT_BUILD_DIR") ? getenv("PT_BUILD_DIR") : ".");
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(bin, bin, "--console", c->ctl, "--telemetry", c->tel, "--name", name, "--threads",
              "1", "--checkpoint-root", root, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Exit status of pid within ms (-1: still running, then killed). */
static int wait_exit(pid_t pid, int ms, double *took_ms)
{
    int64_t t0 = pt_msg_now_ns(), end = t0 + ms * NS_PER_MS;
    int st;
    while (pt_msg_now_ns() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            if (took_ms)
                *took_ms = (double)(pt_msg_now_ns() - t0) / 1e6;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        struct timespec ts = {0, 10 * NS_PER_MS};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

static const char *PLAN =
    "{\"v\":1,\"model\":\"tiny-mlp\",\"layers\":8,\"microbatch\":{\"size\":8,\"count\":2},"
    "\"schedule\":{\"kind\":\"gpipe\"},\"optimizer\":{\"kind\":\"sgd\",\"lr\":0.05,"
    "\"momentum\":0.9},\"stages\":[{\"layers\":[0,8],\"replicas\":[0]}]}";

static void make_assign(pt_msg *m, int64_t gen, int64_t req, const char *data_ep, const char *tel,
                        const char *ckdir)
{
    pt_msg_init(m, PT_MSG_ASSIGN, NULL);
    m->gen = gen;
    m->req = req;
    pt_msg_assign *a = &m->u.assign;
    pt_plan_parse(PLAN, "plan", &a->plan, NULL);
    pt_model_spec_load(pt_test_path("tests/data/run/tiny-mlp.json"), &a->model, NULL);
    a->peer_count = 1;
    a->peers = calloc(1, sizeof *a->peers);
    snprintf(a->peers[0].endpoint, sizeof a->peers[0].endpoint, "%s", data_ep);
    snprintf(a->data, sizeof a->data, "synthetic");
    a->seed = 1;
    snprintf(a->telemetry, sizeof a->telemetry, "%s", tel);
    if (ckdir)
        snprintf(a->checkpoint_dir, sizeof a->checkpoint_dir, "%s", ckdir);
}

static void test_session(void)
{
    console c;
    console_open(&c);
    const char *log = TEST_DIR "/agent1.log";
    pid_t pid = spawn_agent(&c, "agent-one", log);
    REQUIRE(pid > 0);
    pt_msg m;
    REQUIRE(expect(&c, PT_MSG_REGISTER, WAIT_MS, &m, 0));
    CHECK(!strcmp(c.id, "agent-one"));
    CHECK(m.seq == 0 && m.gen == 0);
    CHECK(m.u.reg.pid == pid);
    CHECK(!strcmp(m.u.reg.backend, "cpu"));
    CHECK_STR_CONTAINS(m.u.reg.data_endpoint, "tcp://127.0.0.1:");
    char data_ep[256];
    snprintf(data_ep, sizeof data_ep, "%s", m.u.reg.data_endpoint);
    pt_msg_clear(&m);

    /* heartbeats are answered at once */
    send_heartbeat(&c);
    int echoed = 0;
    for (int k = 0; k < 4 && !echoed && expect(&c, PT_MSG_HEARTBEAT, 2000, &m, 0); k++) {
        echoed = m.u.heartbeat.has_echo;
        CHECK(!strcmp(m.u.heartbeat.state, "waiting"));
        pt_msg_clear(&m);
    }
    CHECK(echoed);

    /* six bad messages */
    send_raw(&c, "\xff\xfe not json", 11);
    pt_msg_init(&m, PT_MSG_HEARTBEAT, "someone-else");
    m.u.heartbeat.t_send = 1;
    send_msg(&c, &m);
    pt_msg_init(&m, PT_MSG_REGISTER, NULL); /* only agents register */
    snprintf(m.u.reg.host, sizeof m.u.reg.host, "h");
    m.u.reg.pid = 1;
    snprintf(m.u.reg.backend, sizeof m.u.reg.backend, "cpu");
    send_msg(&c, &m);
    pt_msg_init(&m, PT_MSG_START, NULL); /* generation 5 was never assigned */
    m.gen = 5;
    m.req = 1;
    m.u.start.steps = 1;
    send_msg(&c, &m);
    int64_t keep = c.seq;
    c.seq = keep + 2;
    send_heartbeat(&c);
    c.seq = keep; /* a sequence number below the newest seen */
    send_heartbeat(&c);
    c.seq = keep + 3;
    zmq_send(c.router, c.id, strlen(c.id), ZMQ_SNDMORE);
    zmq_send(c.router, "{}", 2, ZMQ_SNDMORE);
    zmq_send(c.router, "{}", 2, 0);
    int64_t end = pt_msg_now_ns() + 3000 * NS_PER_MS;
    while (c.rejected_errors < 6 && pt_msg_now_ns() < end) {
        if (expect(&c, PT_MSG_TYPE_COUNT, 100, &m, 1))
            pt_msg_clear(&m);
    }
    CHECK_MSG(c.rejected_errors == 6, "%d rejections reported", c.rejected_errors);

    /* still serving: a one-stage plan, three steps */
    make_assign(&m, 1, 10, data_ep, c.tel, TEST_DIR "/ck");
    send_msg(&c, &m);
    pt_msg_clear(&m);
    REQUIRE(expect(&c, PT_MSG_ACK, WAIT_MS, &m, 1));
    CHECK(m.req == 10 && m.u.ack.of == PT_MSG_ASSIGN && m.gen == 1);
    pt_msg_clear(&m);
    /* the same generation again is stale */
    make_assign(&m, 1, 11, data_ep, c.tel, NULL);
    send_msg(&c, &m);
    pt_msg_clear(&m);
    REQUIRE(expect(&c, PT_MSG_ERROR, 2000, &m, 1));
    CHECK_STR_CONTAINS(m.u.error.reason, "not newer");
    CHECK(m.req == 11);
    pt_msg_clear(&m);

    /* a request of an older generation is stale */
    pt_msg_init(&m, PT_MSG_START, NULL);
    m.gen = 0;
    m.req = 20;
    m.u.start.steps = 1;
    send_msg(&c, &m);
    REQUIRE(expect(&c, PT_MSG_ERROR, 2000, &m, 1));
    CHECK_STR_CONTAINS(m.u.error.reason, "stale");
    CHECK(m.req == 20);
    pt_msg_clear(&m);

    pt_msg_init(&m, PT_MSG_START, NULL);
    m.gen = 1;
    m.req = 12;
    m.u.start.steps = 3;
    send_msg(&c, &m);
    REQUIRE(expect(&c, PT_MSG_ACK, WAIT_MS, &m, 1));
    CHECK(m.req == 12 && m.u.ack.of == PT_MSG_START);
    pt_msg_clear(&m);
    int idle = 0;
    end = pt_msg_now_ns() + WAIT_MS * NS_PER_MS;
    while (!idle && pt_msg_now_ns() < end && expect(&c, PT_MSG_HEARTBEAT, 1000, &m, 1)) {
        idle = !strcmp(m.u.heartbeat.state, "idle") && m.u.heartbeat.step == 2;
        pt_msg_clear(&m);
    }
    CHECK(idle);
    /* telemetry: metrics of steps 0..2 (each step's) with a finite loss, and events */
    int metrics = 0, events = 0, last_seq = -1, in_order = 1;
    char buf[1 << 20];
    int n;
    end = pt_msg_now_ns() + 5000 * NS_PER_MS; /* telemetry travels on its own connection */
    while (metrics < 3 && pt_msg_now_ns() < end) {
        send_heartbeat(&c); /* the agent leaves when the console is silent */
        zmq_pollitem_t it = {c.sub, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 50) <= 0 || (n = zmq_recv(c.sub, buf, sizeof buf, 0)) < 0)
            continue;
        pt_msg t;
        if (n >= (int)sizeof buf || pt_msg_decode(buf, (size_t)n, "telemetry", &t, NULL) < 0)
            continue;
        in_order &= t.seq == last_seq + 1;
        last_seq = (int)t.seq;
        if (t.type == PT_MSG_METRICS) {
            /* one step, or a fold of consecutive steps (docs/protocol.md,
             * "Telemetry thinning"), each with its own loss */
            int folded = t.u.metrics.steps > 1 ? t.u.metrics.steps : 1;
            CHECK(t.u.metrics.step - folded + 1 == metrics);
            for (int k = 0; k < folded; k++)
                CHECK(isfinite(t.u.metrics.losses[k]) && t.u.metrics.losses[k] > 0);
            CHECK(isfinite(t.u.metrics.loss) && t.u.metrics.loss > 0);
            CHECK(t.u.metrics.mem_peak[PT_MSG_MEM_WEIGHTS] > 0);
            metrics += folded;
        } else if (t.type == PT_MSG_EVENTS) {
            events += t.u.events.count;
        }
        pt_msg_clear(&t);
    }
    CHECK(metrics == 3);
    CHECK(events > 0);
    CHECK(in_order);

    /* a checkpoint after the current step: step 3 in <dir>/step-3 */
    pt_msg_init(&m, PT_MSG_CHECKPOINT, NULL);
    m.gen = 1;
    m.req = 13;
    m.u.checkpoint.step = -1;
    send_msg(&c, &m);
    REQUIRE(expect(&c, PT_MSG_CHECKPOINT_ACK, WAIT_MS, &m, 1));
    CHECK(m.req == 13 && m.u.checkpoint_ack.step == 3);
    CHECK_STR_CONTAINS(m.u.checkpoint_ack.dir, "ck/step-3");
    pt_msg_clear(&m);
    struct stat st;
    CHECK(stat(TEST_DIR "/ck/step-3/stage-0.json", &st) == 0);

    pt_msg_init(&m, PT_MSG_BYE, NULL);
    m.gen = 1;
    snprintf(m.u.bye.reason, sizeof m.u.bye.reason, "test over");
    send_msg(&c, &m);
    double took = 0;
    int status = wait_exit(pid, EXIT_WAIT_MS, &took);
    CHECK_MSG(status == 0, "exit status %d", status);
    char *text = NULL;
    pt_file_read(log, &text, NULL, NULL);
    CHECK_STR_CONTAINS(text, "the console said bye: test over");
    CHECK_STR_CONTAINS(text, "8 rejected"); /* the six bad ones, the stale assign and start */
    free(text);
    console_close(&c);
}

static void test_console_gone(void)
{
    console c;
    console_open(&c);
    const char *log = TEST_DIR "/agent2.log";
    pid_t pid = spawn_agent(&c, "agent-two", log);
    REQUIRE(pid > 0);
    pt_msg m;
    REQUIRE(expect(&c, PT_MSG_REGISTER, WAIT_MS, &m, 0));
    pt_msg_clear(&m);
    send_heartbeat(&c);
    REQUIRE(expect(&c, PT_MSG_HEARTBEAT, 2000, &m, 0));
    pt_msg_clear(&m);
    /* from now on the console says nothing */
    double took = 0;
    int status = wait_exit(pid, EXIT_WAIT_MS, &took);
    const double bound = PT_AGENT_MISSED_HEARTBEATS * PT_AGENT_HEARTBEAT_MS;
    CHECK_MSG(status == 3, "exit status %d", status);
    CHECK_MSG(took >= bound * 0.9 && took < bound + 3000, "left after %.0f ms (bound %.0f)", took,
              bound);
    char *text = NULL;
    pt_file_read(log, &text, NULL, NULL);
    CHECK_STR_CONTAINS(text, "silent");
    free(text);
    console_close(&c);
}

/* Sends an assign whose checkpoint_dir is `dir`, written into the text by
 * hand: the encoder refuses what an attacker would send. */
static void send_assign_with_dir(console *c, int64_t gen, int64_t req, const char *data_ep,
                                 const char *dir)
{
    pt_msg m;
    make_assign(&m, gen, req, data_ep, c->tel, "PLACEHOLDER-DIR");
    snprintf(m.agent, sizeof m.agent, "%s", c->id);
    m.seq = c->seq++;
    char *text = NULL;
    size_t len = 0;
    REQUIRE(pt_msg_encode(&m, &text, &len, NULL) == 0);
    pt_msg_clear(&m);
    char *at = strstr(text, "PLACEHOLDER-DIR");
    REQUIRE(at);
    size_t head = (size_t)(at - text), tail = strlen(at + strlen("PLACEHOLDER-DIR"));
    char *out = malloc(head + strlen(dir) + tail + 1);
    REQUIRE(out);
    memcpy(out, text, head);
    strcpy(out + head, dir);
    strcat(out, at + strlen("PLACEHOLDER-DIR"));
    send_raw(c, out, strlen(out));
    free(out);
    free(text);
}

/* Paths from the wire (issue 13): an assign may name a checkpoint folder
 * only inside the agent's --checkpoint-root; "..", an absolute path and an
 * empty component trick are refused and nothing is written outside. */
static void test_paths(void)
{
    console c;
    console_open(&c);
    const char *root = TEST_DIR "/root";
    pt_mkdir_p(root, NULL);
    system("rm -rf " TEST_DIR "/escape /tmp/pipetop-agent-itest-abs " TEST_DIR "/root/sub");
    pid_t pid = spawn_agent_in(&c, "agent-paths", TEST_DIR "/agent3.log", root);
    REQUIRE(pid > 0);
    pt_msg m;
    REQUIRE(expect(&c, PT_MSG_REGISTER, WAIT_MS, &m, 0));
    char data_ep[256];
    snprintf(data_ep, sizeof data_ep, "%s", m.u.reg.data_endpoint);
    pt_msg_clear(&m);
    static const char *const bad[] = {"../escape", "/tmp/pipetop-agent-itest-abs",
                                      "sub/../../escape", "sub//..//../escape"};
    int64_t gen = 1, req = 30;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++, req++) {
        send_assign_with_dir(&c, gen, req, data_ep, bad[k]);
        int refused = 0;
        int64_t end = pt_msg_now_ns() + 5000 * NS_PER_MS;
        while (!refused && pt_msg_now_ns() < end && expect(&c, PT_MSG_TYPE_COUNT, 500, &m, 1)) {
            CHECK_MSG(m.type != PT_MSG_ACK, "the assign with checkpoint_dir %s was taken", bad[k]);
            if (m.type == PT_MSG_ERROR) {
                refused = 1;
                CHECK_STR_CONTAINS(m.u.error.reason, "checkpoint_dir");
            }
            pt_msg_clear(&m);
        }
        CHECK_MSG(refused, "no refusal of checkpoint_dir %s", bad[k]);
    }
    struct stat st;
    CHECK(stat(TEST_DIR "/escape", &st) != 0);
    CHECK(stat("/tmp/pipetop-agent-itest-abs", &st) != 0);
    /* a folder inside the root is taken, and the checkpoint lands there */
    make_assign(&m, gen, req, data_ep, c.tel, "sub");
    send_msg(&c, &m);
    pt_msg_clear(&m);
    REQUIRE(expect(&c, PT_MSG_ACK, WAIT_MS, &m, 1));
    CHECK(m.u.ack.of == PT_MSG_ASSIGN);
    pt_msg_clear(&m);
    pt_msg_init(&m, PT_MSG_CHECKPOINT, NULL);
    m.gen = gen;
    m.req = req + 1;
    m.u.checkpoint.step = -1;
    send_msg(&c, &m);
    REQUIRE(expect(&c, PT_MSG_CHECKPOINT_ACK, WAIT_MS, &m, 1));
    CHECK_STR_CONTAINS(m.u.checkpoint_ack.dir, "/root/sub/step-0");
    pt_msg_clear(&m);
    CHECK(stat(TEST_DIR "/root/sub/step-0/stage-0.json", &st) == 0);
    pt_msg_init(&m, PT_MSG_BYE, NULL);
    m.gen = gen;
    snprintf(m.u.bye.reason, sizeof m.u.bye.reason, "test over");
    send_msg(&c, &m);
    CHECK(wait_exit(pid, EXIT_WAIT_MS, NULL) == 0);
    console_close(&c);
}

PT_TEST_MAIN({"session", test_session}, {"console_gone", test_console_gone}, {"paths", test_paths})

__attribute__((constructor)) static void make_dir(void)
{
    pt_mkdir_p(TEST_DIR, NULL);
}

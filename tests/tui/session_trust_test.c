/* The session's side of CURVE (tui/control/session.h, docs/architecture.md
 * "Trust"): a name belongs to a key. A register under a name the controller
 * bound to another key is refused; once an agent registered, nothing under
 * its name from another key is processed; without CURVE the session binds
 * only loopback and has no allow-list. Real sockets on loopback tcp. */
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/keyfile.h"
#include "protocol/message.h"
#include "runtime/trust.h"
#include "tests/test.h"
#include "protocol/fileio.h"
#include "tui/control/run.h"
#include "tui/control/session.h"

#define WAIT_MS   10000
#define RESEND_MS 200

typedef struct peer {
    void *ctx, *d;
} peer;

static int64_t now_ms(void)
{
    return pt_msg_now_ns() / 1000000;
}

static void peer_open(peer *p, const pt_keyfile *k, const char *server, const char *ident,
                      const char *ep)
{
    p->ctx = zmq_ctx_new();
    p->d = zmq_socket(p->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(p->d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(p->d, ZMQ_ROUTING_ID, ident, strlen(ident));
    CHECK(pt_trust_client(p->d, k, server, NULL) == 0);
    CHECK(zmq_connect(p->d, ep) == 0);
}

static void peer_close(peer *p)
{
    zmq_close(p->d);
    zmq_ctx_term(p->ctx);
}

static void peer_send(peer *p, pt_msg_type type, const char *as, int64_t seq)
{
    pt_msg m;
    pt_msg_init(&m, type, as);
    m.seq = seq;
    if (type == PT_MSG_REGISTER) {
        snprintf(m.u.reg.host, sizeof m.u.reg.host, "h");
        m.u.reg.pid = 1;
        m.u.reg.device = -1;
        snprintf(m.u.reg.backend, sizeof m.u.reg.backend, "cpu");
        snprintf(m.u.reg.data_endpoint, sizeof m.u.reg.data_endpoint, "tcp://127.0.0.1:9");
    } else {
        m.u.heartbeat.t_send = pt_msg_now_ns();
        snprintf(m.u.heartbeat.state, sizeof m.u.heartbeat.state, "waiting");
    }
    char *text = NULL;
    size_t len = 0;
    CHECK(pt_msg_encode(&m, &text, &len, NULL) == 0);
    zmq_send(p->d, text, len, ZMQ_DONTWAIT);
    free(text);
}

/* Sends m every RESEND_MS (a connection that raced the previous holder of
 * its routing id is dropped by the ROUTER) until done(s) or WAIT_MS. */
static int send_until(pt_session *s, peer *p, pt_msg_type type, const char *as, int64_t seq,
                      int (*done)(pt_session *, void *), void *arg)
{
    int64_t t0 = now_ms(), last = -RESEND_MS;
    while (now_ms() - t0 < WAIT_MS) {
        if (now_ms() - last >= RESEND_MS) {
            peer_send(p, type, as, seq);
            last = now_ms();
        }
        pt_session_poll(s, 20, NULL);
        if (done(s, arg))
            return 1;
    }
    return 0;
}

static uint64_t rejected(pt_session *s)
{
    pt_session_counts k;
    pt_session_counts_get(s, &k);
    return k.control_rejected;
}

static int rejected_over(pt_session *s, void *arg)
{
    return rejected(s) > *(uint64_t *)arg;
}

static int has_agent(pt_session *s, void *arg)
{
    return pt_session_find_agent(s, arg) >= 0;
}

/* The set-up of the CURVE cases: a console key, a session that allows
 * mallory's key (an allowed key in the wrong hands) and binds the name w0 to
 * the key `real` (as the controller does for the agent it spawned). */
typedef struct curve_rig {
    pt_keyfile console, real, mallory;
    pt_session *s;
} curve_rig;

static int rig_open(curve_rig *r)
{
    pt_error err = {0};
    r->s = NULL;
    if (pt_trust_keypair(&r->console, NULL) < 0 || pt_trust_keypair(&r->real, NULL) < 0 ||
        pt_trust_keypair(&r->mallory, NULL) < 0)
        return 0;
    char allowed[1][PT_KEY_Z85_LEN + 1];
    snprintf(allowed[0], sizeof allowed[0], "%s", r->mallory.public_z85);
    pt_session_config cfg = {
        .key = &r->console, .allowed = (const char(*)[PT_KEY_Z85_LEN + 1]) allowed, .allowed_n = 1};
    int rc = pt_session_create(&cfg, &r->s, &err);
    if (rc == 0)
        rc = pt_session_allow(r->s, r->real.public_z85, "w0", &err);
    CHECK_MSG(rc == 0, "session set-up: %s", err.msg);
    return rc == 0;
}

static void test_name_bound_to_key(void)
{
    curve_rig r;
    REQUIRE(rig_open(&r));
    pt_keyfile console = r.console, real = r.real, mallory = r.mallory;
    pt_session *s = r.s;
    CHECK(!strcmp(pt_session_public_key(s), console.public_z85));
    const char *ep = pt_session_control_endpoint(s);

    /* mallory (an allowed key) registers first as w0 */
    peer m;
    peer_open(&m, &mallory, console.public_z85, "w0", ep);
    uint64_t r0 = rejected(s);
    CHECK(send_until(s, &m, PT_MSG_REGISTER, "w0", 0, rejected_over, &r0));
    CHECK(pt_session_agent_count(s) == 0);
    peer_close(&m);

    /* the real w0 then registers */
    peer w;
    peer_open(&w, &real, console.public_z85, "w0", ep);
    CHECK(send_until(s, &w, PT_MSG_REGISTER, "w0", 0, has_agent, "w0"));
    int i = pt_session_find_agent(s, "w0");
    REQUIRE(i >= 0);
    CHECK(!strcmp(pt_session_agent_at(s, i)->public_key, real.public_z85));

    /* an agent not bound beforehand (--external) is bound by its first
     * register: x with mallory's key; the real key under x is refused */
    peer x;
    peer_open(&x, &mallory, console.public_z85, "x", ep);
    CHECK(send_until(s, &x, PT_MSG_REGISTER, "x", 0, has_agent, "x"));
    peer_close(&x);
    int xi = pt_session_find_agent(s, "x");
    REQUIRE(xi >= 0);
    CHECK(!strcmp(pt_session_agent_at(s, xi)->public_key, mallory.public_z85));
    peer y;
    peer_open(&y, &real, console.public_z85, "x", ep);
    uint64_t r1 = rejected(s);
    CHECK(send_until(s, &y, PT_MSG_HEARTBEAT, "x", 1, rejected_over, &r1));
    CHECK(send_until(s, &y, PT_MSG_REGISTER, "x", 0, rejected_over, &(uint64_t){r1 + 1}));
    const pt_session_agent *xa = pt_session_agent_at(s, xi);
    CHECK(!strcmp(xa->public_key, mallory.public_z85)); /* still mallory's x */
    CHECK(xa->control_rejected == 0);                   /* not counted against it */
    CHECK(pt_session_agent_count(s) == 2);
    peer_close(&y);
    peer_close(&w);
    pt_session_destroy(&s);
}

static void test_plain_session_limits(void)
{
    pt_session *s = NULL;
    pt_error err = {0};
    pt_session_config wide = {.control_bind = "tcp://0.0.0.0:*"};
    CHECK(pt_session_create(&wide, &s, &err) == PT_EINVAL);
    CHECK(s == NULL);
    CHECK_STR_CONTAINS(err.msg, "pipetop keys --out");
    err = (pt_error){0};
    REQUIRE(pt_session_create(NULL, &s, &err) == 0);
    CHECK(!strcmp(pt_session_public_key(s), ""));
    CHECK(pt_session_allow(s, "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", "w0", &err) == PT_ESTATE);
    CHECK(pt_session_refused_handshakes(s) == 0);
    pt_session_destroy(&s);
}

/* A telemetry PUB of key k to the session's telemetry endpoint. */
static void *tele_open(void *ctx, const pt_keyfile *k, const char *server, const char *ep)
{
    void *p = zmq_socket(ctx, ZMQ_PUB);
    int linger = 0;
    zmq_setsockopt(p, ZMQ_LINGER, &linger, sizeof linger);
    CHECK(pt_trust_client(p, k, server, NULL) == 0);
    CHECK(zmq_connect(p, ep) == 0);
    return p;
}

static void tele_send(void *pub, const char *as, int64_t seq)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_METRICS, as);
    m.seq = seq;
    m.u.metrics.step = 1;
    m.u.metrics.loss = 2.0;
    char *text = NULL;
    size_t len = 0;
    CHECK(pt_msg_encode(&m, &text, &len, NULL) == 0);
    zmq_send(pub, text, len, ZMQ_DONTWAIT);
    free(text);
}

static uint64_t tele_rejected(pt_session *s)
{
    pt_session_counts k;
    pt_session_counts_get(s, &k);
    return k.telemetry_rejected;
}

static int tele_rejected_over(pt_session *s, void *arg)
{
    return tele_rejected(s) > *(uint64_t *)arg;
}

static int has_metrics(pt_session *s, void *arg)
{
    return pt_session_agent_at(s, *(int *)arg)->has_metrics;
}

/* Publishes metrics as w0 every RESEND_MS (a SUB that joined late misses
 * the first), numbered seq, seq + inc, ..., until done(s) or WAIT_MS. */
static int tele_send_until(pt_session *s, void *pub, int64_t seq, int64_t inc,
                           int (*done)(pt_session *, void *), void *arg)
{
    int64_t t0 = now_ms(), last = -RESEND_MS;
    while (now_ms() - t0 < WAIT_MS) {
        if (now_ms() - last >= RESEND_MS) {
            tele_send(pub, "w0", seq);
            seq += inc;
            last = now_ms();
        }
        pt_session_poll(s, 20, NULL);
        if (done(s, arg))
            return 1;
    }
    return 0;
}

/* Forged telemetry (issue 13's probe: a frame with seq near 2^53 under a
 * real agent's name made every later genuine frame "too old"): under CURVE a
 * frame whose key is not the name's is refused before its sequence number is
 * tracked, so the real agent's telemetry goes on being taken. */
static void test_forged_telemetry(void)
{
    curve_rig r;
    REQUIRE(rig_open(&r));
    pt_keyfile console = r.console, real = r.real, mallory = r.mallory;
    pt_session *s = r.s;
    peer w;
    peer_open(&w, &real, console.public_z85, "w0", pt_session_control_endpoint(s));
    REQUIRE(send_until(s, &w, PT_MSG_REGISTER, "w0", 0, has_agent, "w0"));
    int i = pt_session_find_agent(s, "w0");
    REQUIRE(i >= 0);

    void *ctx = zmq_ctx_new();
    void *forger = tele_open(ctx, &mallory, console.public_z85, pt_session_telemetry_endpoint(s));
    uint64_t r0 = tele_rejected(s);
    CHECK_MSG(tele_send_until(s, forger, (1LL << 53) - 1, 0, tele_rejected_over, &r0),
              "the forged telemetry was not refused");
    CHECK(!pt_session_agent_at(s, i)->has_metrics);

    /* the real agent's own frames, numbered from 1, are taken */
    void *genuine = tele_open(ctx, &real, console.public_z85, pt_session_telemetry_endpoint(s));
    CHECK_MSG(tele_send_until(s, genuine, 1, 1, has_metrics, &i),
              "the real agent's telemetry was refused after the forgery");
    pt_rx_counts c;
    pt_session_agent_telemetry(s, i, &c);
    CHECK(c.stale == 0 && c.received >= 1);
    zmq_close(forger);
    zmq_close(genuine);
    zmq_ctx_term(ctx);
    peer_close(&w);
    pt_session_destroy(&s);
}

/* An allow-list entry "KEY agent=NAME" (docs/formats.md, "Allow-lists")
 * binds the name to the key before anyone registered: another allowed key
 * cannot take the name first, and the named key cannot take another name;
 * a key listed without a name takes any free one. Read from the file by the
 * run controller, as `pipetop run --allow` does. */
static void test_allowlist_names(void)
{
    pt_keyfile a, b;
    REQUIRE(pt_trust_keypair(&a, NULL) == 0);
    REQUIRE(pt_trust_keypair(&b, NULL) == 0);
    const char *dir = "session_trust_test.d";
    pt_mkdir_p(dir, NULL);
    char list[512], path[256];
    snprintf(list, sizeof list, "# node07 is a's\n%s agent=node07 the first host\n%s\n",
             a.public_z85, b.public_z85);
    snprintf(path, sizeof path, "%s/allow", dir);
    REQUIRE(pt_file_write_atomic(path, list, strlen(list), NULL) == 0);
    pt_run_config cfg = {.run_dir = "session_trust_test.d/run", .agents = 1, .allow_path = path};
    pt_run *run = NULL;
    pt_error err = {0};
    int made = pt_run_create(&cfg, &run, &err);
    CHECK_MSG(made == 0, "%s", err.msg);
    REQUIRE(made == 0);
    pt_session *s = pt_run_session(run);
    const char *server = pt_session_public_key(s), *ep = pt_session_control_endpoint(s);

    /* b (allowed, no name) registers first as node07: refused */
    peer pb;
    peer_open(&pb, &b, server, "node07", ep);
    uint64_t r0 = rejected(s);
    CHECK(send_until(s, &pb, PT_MSG_REGISTER, "node07", 0, rejected_over, &r0));
    CHECK(pt_session_agent_count(s) == 0);
    peer_close(&pb);
    /* a cannot take another name either */
    peer pa;
    peer_open(&pa, &a, server, "node08", ep);
    uint64_t r1 = rejected(s);
    CHECK(send_until(s, &pa, PT_MSG_REGISTER, "node08", 0, rejected_over, &r1));
    CHECK(pt_session_agent_count(s) == 0);
    peer_close(&pa);
    /* a as node07, and b under a free name, are let in */
    peer_open(&pa, &a, server, "node07", ep);
    CHECK(send_until(s, &pa, PT_MSG_REGISTER, "node07", 0, has_agent, "node07"));
    peer_open(&pb, &b, server, "spare1", ep);
    CHECK(send_until(s, &pb, PT_MSG_REGISTER, "spare1", 0, has_agent, "spare1"));
    int i = pt_session_find_agent(s, "node07");
    REQUIRE(i >= 0);
    CHECK(!strcmp(pt_session_agent_at(s, i)->public_key, a.public_z85));
    CHECK(pt_session_agent_count(s) == 2);
    peer_close(&pa);
    peer_close(&pb);
    pt_run_destroy(&run);

    /* a name that is not one: the file, line and reason */
    snprintf(list, sizeof list, "%s agent=no/slash\n", a.public_z85);
    REQUIRE(pt_file_write_atomic(path, list, strlen(list), NULL) == 0);
    err = (pt_error){0};
    CHECK(pt_run_create(&cfg, &run, &err) == PT_EPARSE);
    CHECK(run == NULL);
    CHECK_STR_CONTAINS(err.msg, "allow: line 1: agent=\"no/slash\" is not an agent name");
}

PT_TEST_MAIN({"name_bound_to_key", test_name_bound_to_key},
             {"plain_session_limits", test_plain_session_limits},
             {"forged_telemetry", test_forged_telemetry}, {"allowlist_names", test_allowlist_names})

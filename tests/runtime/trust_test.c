/* CURVE with the ZAP allow-list on real loopback sockets (issue 13): an
 * allowed key connects and exchanges messages both ways; a client with an
 * unknown key, and one without CURVE, get nothing through (the server never
 * receives their messages, and the handshake failure is what the test waits
 * for); the bind guard refuses non-loopback endpoints without CURVE. Key files
 * round-trip through pipetop's format. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/clock.h"
#include "protocol/keyfile.h"
#include "runtime/trust.h"
#include "tests/test.h"

#define WAIT_MS 10000 /* upper bound on any one handshake; the tests wait on events */

typedef struct rig {
    void *ctx, *server, *monitor;
    pt_zap *zap;
    pt_keyfile server_key, good_key;
    char endpoint[64];
} rig;

static int rig_up(rig *r)
{
    pt_error err = {0};
    memset(r, 0, sizeof *r);
    r->ctx = zmq_ctx_new();
    if (pt_trust_keypair(&r->server_key, &err) < 0 || pt_trust_keypair(&r->good_key, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    const char *allowed[] = {r->good_key.public_z85};
    if (pt_zap_start(r->ctx, allowed, 1, &r->zap, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    r->server = zmq_socket(r->ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(r->server, ZMQ_LINGER, &linger, sizeof linger);
    if (pt_trust_server(r->server, &r->server_key, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    /* the server's handshake failures, to wait on instead of sleeping */
    zmq_socket_monitor(r->server, "inproc://trust-test-monitor",
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
    r->monitor = zmq_socket(r->ctx, ZMQ_PAIR);
    zmq_setsockopt(r->monitor, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(r->monitor, "inproc://trust-test-monitor");
    if (zmq_bind(r->server, "tcp://127.0.0.1:*") != 0)
        return -1;
    size_t n = sizeof r->endpoint;
    zmq_getsockopt(r->server, ZMQ_LAST_ENDPOINT, r->endpoint, &n);
    return 0;
}

static void rig_down(rig *r)
{
    if (r->monitor)
        zmq_close(r->monitor);
    if (r->server) {
        zmq_socket_monitor(r->server, NULL, 0);
        zmq_close(r->server);
    }
    pt_zap_stop(&r->zap);
    if (r->ctx)
        zmq_ctx_term(r->ctx);
}

/* A DEALER client: CURVE with key (and the server's public key) when key is
 * not NULL, plain otherwise. */
static void *client(rig *r, const pt_keyfile *key)
{
    void *s = zmq_socket(r->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    pt_error err = {0};
    if (key && pt_trust_client(s, key, r->server_key.public_z85, &err) < 0)
        fprintf(stderr, "%s\n", err.msg);
    zmq_connect(s, r->endpoint);
    return s;
}

/* The next handshake-failure event of the server's monitor, 0 on timeout. */
static int next_failure(rig *r, int timeout_ms)
{
    zmq_pollitem_t it = {r->monitor, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) != 1)
        return 0;
    zmq_msg_t m;
    zmq_msg_init(&m);
    zmq_msg_recv(&m, r->monitor, 0);
    uint16_t event = 0;
    if (zmq_msg_size(&m) >= 2)
        memcpy(&event, zmq_msg_data(&m), 2);
    zmq_msg_close(&m);
    zmq_msg_init(&m);
    zmq_msg_recv(&m, r->monitor, 0); /* the endpoint frame */
    zmq_msg_close(&m);
    return event;
}

/* The first failure event of the kind want, skipping others: the server's
 * port is any the kernel hands out, and a socket of another test still
 * reconnecting to a port its peer left may reach it (its handshake fails
 * on the mechanism or the server key, never at the allow-list, which needs
 * this server's key). 0 when none came within WAIT_MS. */
static int failure_of_kind(rig *r, int want)
{
    int64_t end = (pt_clock_ns() / 1000000) + WAIT_MS;
    for (int64_t left = WAIT_MS; left > 0; left = end - (pt_clock_ns() / 1000000)) {
        int ev = next_failure(r, (int)left);
        if (ev == want || ev == 0)
            return ev;
    }
    return 0;
}

/* Receives one [identity, body] message on the server into body; its length
 * or -1 when nothing came within WAIT_MS. */
static int server_recv(rig *r, char *body, size_t cap)
{
    zmq_pollitem_t it = {r->server, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, WAIT_MS) != 1)
        return -1;
    char id[256];
    if (zmq_recv(r->server, id, sizeof id, 0) < 0)
        return -1;
    int n = zmq_recv(r->server, body, cap - 1, 0);
    if (n >= 0)
        body[n < (int)cap - 1 ? n : (int)cap - 1] = '\0';
    return n;
}

/* The good client's message is the only thing the server gets. */
static void expect_only_good(rig *r, const char *bad_body)
{
    void *good = client(r, &r->good_key);
    CHECK(zmq_send(good, "good", 4, 0) == 4);
    char body[64];
    int n = server_recv(r, body, sizeof body);
    CHECK_MSG(n == 4 && !strcmp(body, "good"), "server got %d bytes: \"%s\" (the %s client's?)", n,
              n >= 0 ? body : "", bad_body);
    /* and nothing else is queued */
    int events = 0;
    size_t sz = sizeof events;
    zmq_getsockopt(r->server, ZMQ_EVENTS, &events, &sz);
    CHECK(!(events & ZMQ_POLLIN));
    zmq_close(good);
}

static void test_allowed_key_exchanges(void)
{
    rig r;
    REQUIRE(rig_up(&r) == 0);
    void *c = client(&r, &r.good_key);
    CHECK(zmq_send(c, "hello", 5, 0) == 5);
    zmq_pollitem_t it = {r.server, 0, ZMQ_POLLIN, 0};
    REQUIRE(zmq_poll(&it, 1, WAIT_MS) == 1);
    char id[256], body[64];
    int id_n = zmq_recv(r.server, id, sizeof id, 0);
    int n = zmq_recv(r.server, body, sizeof body, 0);
    CHECK(id_n > 0 && n == 5 && !memcmp(body, "hello", 5));
    /* and back: the ROUTER answers through the identity it saw */
    REQUIRE(id_n > 0 && id_n <= (int)sizeof id);
    CHECK(zmq_send(r.server, id, (size_t)id_n, ZMQ_SNDMORE) == id_n);
    CHECK(zmq_send(r.server, "world", 5, 0) == 5);
    zmq_pollitem_t ci = {c, 0, ZMQ_POLLIN, 0};
    CHECK(zmq_poll(&ci, 1, WAIT_MS) == 1 && zmq_recv(c, body, sizeof body, 0) == 5 &&
          !memcmp(body, "world", 5));
    CHECK(pt_zap_allowed_count(r.zap) == 1 && pt_zap_refused_count(r.zap) == 0);
    zmq_close(c);
    rig_down(&r);
}

static void test_unknown_key_refused(void)
{
    rig r;
    REQUIRE(rig_up(&r) == 0);
    pt_keyfile evil;
    pt_error err = {0};
    REQUIRE(pt_trust_keypair(&evil, &err) == 0);
    void *c = client(&r, &evil);
    zmq_send(c, "evil", 4, ZMQ_DONTWAIT); /* queued until a handshake that never completes */
    CHECK(pt_zap_wait_refused(r.zap, 1, WAIT_MS) == 0);
    CHECK_MSG(failure_of_kind(&r, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) ==
                  ZMQ_EVENT_HANDSHAKE_FAILED_AUTH,
              "no auth failure event");
    expect_only_good(&r, "unknown-key");
    /* the same key, once allowed, gets in: the list is what decides */
    CHECK(pt_zap_allow(r.zap, evil.public_z85, &err) == 0);
    void *c2 = client(&r, &evil);
    CHECK(zmq_send(c2, "late", 4, 0) == 4);
    char body[64];
    int n;
    do
        n = server_recv(&r, body, sizeof body);
    while (n == 4 && !strcmp(body, "evil")); /* c's retry may now pass too */
    CHECK_MSG(n == 4 && !strcmp(body, "late"), "got \"%s\"", n >= 0 ? body : "");
    zmq_close(c);
    zmq_close(c2);
    rig_down(&r);
}

static void test_plain_client_gets_nothing(void)
{
    rig r;
    REQUIRE(rig_up(&r) == 0);
    void *c = client(&r, NULL);
    zmq_send(c, "plain", 5, ZMQ_DONTWAIT);
    int ev = next_failure(&r, WAIT_MS);
    CHECK_MSG(ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
                  ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL,
              "no handshake failure for a plain client (event %d)", ev);
    expect_only_good(&r, "plain-text");
    zmq_close(c);
    rig_down(&r);
}

/* A client holding the wrong server key cannot talk to the server either. */
static void test_wrong_server_key(void)
{
    rig r;
    REQUIRE(rig_up(&r) == 0);
    pt_keyfile other;
    pt_error err = {0};
    REQUIRE(pt_trust_keypair(&other, &err) == 0);
    void *s = zmq_socket(r.ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    REQUIRE(pt_trust_client(s, &r.good_key, other.public_z85, &err) == 0);
    zmq_connect(s, r.endpoint);
    zmq_send(s, "mitm", 4, ZMQ_DONTWAIT);
    CHECK(next_failure(&r, WAIT_MS) != 0);
    expect_only_good(&r, "wrong-server-key");
    zmq_close(s);
    rig_down(&r);
}

static void test_bind_guard(void)
{
    pt_error err = {0};
    CHECK(pt_trust_check_bind("tcp://127.0.0.1:5555", 0, &err) == 0);
    CHECK(pt_trust_check_bind("tcp://127.1.2.3:*", 0, &err) == 0);
    CHECK(pt_trust_check_bind("tcp://localhost:1", 0, &err) == 0);
    CHECK(pt_trust_check_bind("tcp://[::1]:7", 0, &err) == 0);
    CHECK(pt_trust_check_bind("ipc:///tmp/pt-run/ctl", 0, &err) == 0);
    CHECK(pt_trust_check_bind("inproc://x", 0, &err) == 0);
    const char *open_eps[] = {"tcp://0.0.0.0:5555",
                              "tcp://*:5555",
                              "tcp://10.0.0.1:1",
                              "tcp://eth0:1",
                              "tcp://127.0.0.1.evil.com:1",
                              "tcp://[::]:1",
                              "tcp://128.0.0.1:1",
                              "udp://127.0.0.1:1",
                              "tcp://:1"};
    for (size_t i = 0; i < sizeof open_eps / sizeof open_eps[0]; i++) {
        CHECK_MSG(pt_trust_check_bind(open_eps[i], 0, &err) == PT_EINVAL, "%s bound", open_eps[i]);
        CHECK_STR_CONTAINS(err.msg, open_eps[i]);
        CHECK_STR_CONTAINS(err.msg, "pipetop keys --out");
        CHECK(pt_trust_check_bind(open_eps[i], 1, &err) == 0);
    }
}

/* A generated pair written and loaded back is the same pair; the secret
 * file is 0600 and refused once others can read it; the public file holds
 * no secret. */
static void test_key_files(void)
{
    char dir[] = "/tmp/pt-keys-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char base[128], key_path[160], pub_path[160];
    snprintf(base, sizeof base, "%s/console", dir);
    snprintf(key_path, sizeof key_path, "%s.key", base);
    snprintf(pub_path, sizeof pub_path, "%s.pub", base);
    pt_keyfile k, back, pub;
    pt_error err = {0};
    REQUIRE(pt_trust_keypair(&k, &err) == 0);
    REQUIRE(pt_keyfile_write_pair(base, &k, 0, &err) == 0);
    struct stat st;
    CHECK(stat(key_path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(stat(pub_path, &st) == 0 && (st.st_mode & 0044) == 0044);
    CHECK(pt_keyfile_load(key_path, &back, &err) == 0 && back.has_secret &&
          !strcmp(back.public_z85, k.public_z85) && !strcmp(back.secret_z85, k.secret_z85));
    CHECK(pt_keyfile_load(pub_path, &pub, &err) == 0 && !pub.has_secret &&
          !strcmp(pub.public_z85, k.public_z85));
    char derived[PT_KEY_Z85_LEN + 1];
    CHECK(pt_trust_public_of(k.secret_z85, derived, &err) == 0 && !strcmp(derived, k.public_z85));
    CHECK(pt_keyfile_write_pair(base, &k, 0, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "exists");
    REQUIRE(chmod(key_path, 0644) == 0);
    CHECK(pt_keyfile_load(key_path, &back, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "chmod 600");
    unlink(key_path);
    unlink(pub_path);
    rmdir(dir);
}

PT_TEST_MAIN({"allowed_key_exchanges", test_allowed_key_exchanges},
             {"unknown_key_refused", test_unknown_key_refused},
             {"plain_client_gets_nothing", test_plain_client_gets_nothing},
             {"wrong_server_key", test_wrong_server_key}, {"bind_guard", test_bind_guard},
             {"key_files", test_key_files})

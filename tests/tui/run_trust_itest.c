/* Attacks on a real CURVE run (issue 13; docs/reliability.md,
 * "Authentication"): `pipetop run --external --key --allow` with two agents
 * started by hand, and an attacker holding a key on the allow-list (a
 * compromised or careless operator's agent) who
 * - registers under the real agent's name, from its own routing id and from
 *   the real agent's routing id;
 * - floods the control port with 200 junk frames of 16 MiB;
 * - floods it with thousands of junk frames just under the size cap;
 * while the run trains. Nothing changes: the run goes on, no agent is taken
 * for dead, and the weights at the step it stopped at equal those of an
 * undisturbed run to the same step.
 * Then a second console: after the real console is SIGKILLed, a console with
 * another key binds its port; the agent started by hand never talks to it
 * (the CURVE handshake proves the server key) and leaves as for a silent
 * console. */
#include <sys/stat.h>
#include <zmq.h>

#include "protocol/figures.h"
#include "protocol/keyfile.h"
#include "protocol/message.h"
#include "runtime/trust.h"
#include "tests/tui/run_util.h"
#include "tui/control/session.h"

#define TDIR        "run_trust_itest.d"
#define RUN_MS      180000
#define JUNK_BYTES  (16u << 20)
#define JUNK_FRAMES 200
#define SMALL_BYTES (PT_SESSION_CONTROL_MAX_BYTES - 1024)
#define SMALL_COUNT 3000

static char model[1024], plan[1024];

/* The model and plan every test runs (each test can be run alone after the
 * first made the keys and the profile: `run_trust_itest NAME`). */
static void set_paths(void)
{
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    snprintf(plan, sizeof plan, "%s", pt_test_path("tests/data/run/plan-a.json"));
}

static void make_key(const char *name)
{
    char out[256];
    snprintf(out, sizeof out, TDIR "/keys/%s", name);
    char *argv[] = {(char *)ru_bin("pipetop"), "keys", "--out", out, NULL};
    REQUIRE(ru_run(argv, TDIR "/keys.out", TDIR "/keys.err", RUN_MS) == 0);
}

static void load_key(const char *name, pt_keyfile *k)
{
    char path[256];
    snprintf(path, sizeof path, TDIR "/keys/%s.key", name);
    pt_error err = {0};
    REQUIRE(pt_keyfile_load(path, k, &err) == 0);
}

static int count_in(const char *path, const char *what)
{
    char *text = NULL;
    if (pt_file_read(path, &text, NULL, NULL) < 0)
        return 0;
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    free(text);
    return n;
}

static void wait_steps(const char *out, int n)
{
    int64_t t0 = ru_now_ms();
    while (ru_steps_seen(out) < n && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    REQUIRE(ru_steps_seen(out) >= n);
}

/* root: the run's checkpoint folder (agents started by hand are told it,
 * as `pipetop run --external` says). */
static pid_t start_agent(const char *ctl, const char *tel, const char *dev, const char *name,
                         const char *key, const char *grace_ms, const char *root, const char *log)
{
    ru_agent a = {ctl, tel, dev, name, key, TDIR "/keys/console.pub", grace_ms, root, .err = log};
    return ru_start_agent(&a);
}

/* The undisturbed run to step: its checkpoint of that step equals
 * ck/step-<step> exactly. */
static void check_equals_reference(const char *ck, int64_t step, const char *tag)
{
    char refck[256], dir[256], out[256], err[256];
    snprintf(refck, sizeof refck, TDIR "/%s-ck", tag);
    snprintf(dir, sizeof dir, TDIR "/%s", tag);
    snprintf(out, sizeof out, TDIR "/%s.out", tag);
    snprintf(err, sizeof err, TDIR "/%s.err", tag);
    REQUIRE(ru_reference_run(plan, model, "7", step, TDIR "/profile.json", refck, dir, out, err,
                             RUN_MS) == 0);
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/step-%lld", ck, (long long)step);
    snprintf(b, sizeof b, "%s/step-%lld", refck, (long long)step);
    int tensors = 0;
    double diff = ru_ckpt_diff(a, b, &tensors);
    CHECK_MSG(diff == 0 && tensors > 0, "step %lld: relative difference %g over %d tensors",
              (long long)step, diff, tensors);
}

/* A DEALER of the attacker's, CURVE with its allowed key, to the console. */
static void *attacker(void *ctx, const pt_keyfile *k, const char *server, const char *ident,
                      const char *ctl)
{
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, ivl = 1, hwm = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(d, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(d, ZMQ_ROUTING_ID, ident, strlen(ident));
    pt_error err = {0};
    CHECK_MSG(pt_trust_client(d, k, server, &err) == 0, "%s", err.msg);
    CHECK(zmq_connect(d, ctl) == 0);
    return d;
}

static void send_register(void *d, const char *as)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_REGISTER, as);
    snprintf(m.u.reg.host, sizeof m.u.reg.host, "evil");
    m.u.reg.pid = 1;
    m.u.reg.device = 0;
    snprintf(m.u.reg.backend, sizeof m.u.reg.backend, "cpu");
    snprintf(m.u.reg.data_endpoint, sizeof m.u.reg.data_endpoint, "tcp://127.0.0.1:9");
    char *text = NULL;
    size_t len = 0;
    REQUIRE(pt_msg_encode(&m, &text, &len, NULL) == 0);
    REQUIRE(zmq_send(d, text, len, 0) == (int)len);
    free(text);
}

static void no_free(void *data, void *hint)
{
    (void)data;
    (void)hint;
}

/* Disconnections the console made of d: each oversized frame costs the
 * attacker its connection. Counted until want or ms. */
static int disconnects(void *mon, int want, int ms)
{
    int n = 0;
    int64_t t0 = ru_now_ms();
    zmq_pollitem_t it = {mon, 0, ZMQ_POLLIN, 0};
    while (n < want && ru_now_ms() - t0 < ms) {
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        zmq_msg_init(&addr);
        if (zmq_msg_recv(&ev, mon, 0) >= 6 && zmq_msg_recv(&addr, mon, 0) >= 0) {
            uint16_t id;
            memcpy(&id, zmq_msg_data(&ev), sizeof id);
            n += id == ZMQ_EVENT_DISCONNECTED;
        }
        zmq_msg_close(&ev);
        zmq_msg_close(&addr);
    }
    return n;
}

static void test_attacks_change_nothing(void)
{
    ru_fresh_dir(TDIR);
    set_paths();
    char *prof[] = {
        (char *)ru_bin("pipetop"), "profile",   "--model", model, "--batch", "16", "--out",
        TDIR "/profile.json",      "--repeats", "2",       NULL};
    REQUIRE(ru_run(prof, TDIR "/profile.out", TDIR "/profile.err", RUN_MS) == 0);
    const char *names[] = {"console", "a", "b", "mallory", "other-console"};
    for (int k = 0; k < 5; k++)
        make_key(names[k]);
    FILE *f = fopen(TDIR "/keys/allow.txt", "w");
    REQUIRE(f);
    fprintf(f, "a.pub\nb.pub\nmallory.pub # an allowed key in the wrong hands\n");
    fclose(f);
    ru_argv run;
    ru_run_argv(&run, model, TDIR "/run", "--external", "--key", TDIR "/keys/console.key",
                "--allow", TDIR "/keys/allow.txt", "--plan", plan, "--seed", "7", "--iters",
                "1000000", "--profile", TDIR "/profile.json", "--checkpoint-dir", TDIR "/ck", NULL);
    pid_t console = ru_start(run.v, TDIR "/run.out", TDIR "/run.err");
    char ctl[256] = "", tel[256] = "";
    REQUIRE(ru_wait_endpoints(TDIR "/run/run.ndjson", ctl, tel, sizeof ctl, RUN_MS));
    int64_t t0;
    pid_t pa =
        start_agent(ctl, tel, "0", "hand-a", TDIR "/keys/a.key", "0", TDIR "/ck", TDIR "/a.err");
    pid_t pb =
        start_agent(ctl, tel, "1", "hand-b", TDIR "/keys/b.key", "0", TDIR "/ck", TDIR "/b.err");
    wait_steps(TDIR "/run.out", 3);

    pt_keyfile mk, ck;
    load_key("mallory", &mk);
    load_key("console", &ck);
    void *ctx = zmq_ctx_new();
    /* forged registers: from the real agent's routing id (the ROUTER keeps
     * the connection it has) and from its own, claiming hand-a */
    void *squat = attacker(ctx, &mk, ck.public_z85, "hand-a", ctl);
    send_register(squat, "hand-a");
    void *claim = attacker(ctx, &mk, ck.public_z85, "mallory", ctl);
    send_register(claim, "hand-a");
    const char *rec = TDIR "/run/run.ndjson";
    t0 = ru_now_ms();
    while (count_in(rec, "is not the sender's routing id") < 1 && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    CHECK(count_in(rec, "is not the sender's routing id") == 1);
    /* the squat's connection (the ROUTER ignores a second one under a
     * routing id) is counted and said, PT_SESSION_SILENT_MS after it came */
    const char *silent = "sent nothing 5 s after";
    while (count_in(rec, silent) < 1 && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    CHECK_MSG(count_in(rec, silent) >= 1, "the squat's silent connection was not told");

    /* 200 x 16 MiB: each costs the attacker its connection, unread */
    void *flood = attacker(ctx, &mk, ck.public_z85, "flood", ctl);
    REQUIRE(zmq_socket_monitor(flood, "inproc://flood-mon", ZMQ_EVENT_DISCONNECTED) == 0);
    void *mon = zmq_socket(ctx, ZMQ_PAIR);
    REQUIRE(zmq_connect(mon, "inproc://flood-mon") == 0);
    char *junk = malloc(JUNK_BYTES);
    REQUIRE(junk);
    memset(junk, 'J', JUNK_BYTES);
    int64_t flood_t0 = ru_now_ms();
    for (int k = 0; k < JUNK_FRAMES; k++) {
        zmq_msg_t m;
        zmq_msg_init_data(&m, junk, JUNK_BYTES, no_free, NULL);
        REQUIRE(zmq_msg_send(&m, flood, 0) == (int)JUNK_BYTES);
    }
    int dis = disconnects(mon, JUNK_FRAMES, RUN_MS);
    int64_t flood_ms = ru_now_ms() - flood_t0;
    CHECK_MSG(dis >= JUNK_FRAMES, "%d disconnects for %d oversized frames", dis, JUNK_FRAMES);
    fprintf(stderr, "flood of %d x %u bytes: %d disconnects in %lld ms\n", JUNK_FRAMES, JUNK_BYTES,
            dis, (long long)flood_ms);
    zmq_close(flood);
    zmq_close(mon);

    /* thousands just under the cap: over the byte budget, dropped unread */
    void *small = attacker(ctx, &mk, ck.public_z85, "small", ctl);
    for (int k = 0; k < SMALL_COUNT; k++) {
        zmq_msg_t m;
        zmq_msg_init_data(&m, junk, SMALL_BYTES, no_free, NULL);
        REQUIRE(zmq_msg_send(&m, small, 0) == (int)SMALL_BYTES);
    }
    t0 = ru_now_ms();
    while (count_in(rec, "its messages are dropped unread") < 1 && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    CHECK(count_in(rec, "its messages are dropped unread") >= 1);
    int before = ru_steps_seen(TDIR "/run.out");
    wait_steps(TDIR "/run.out", before + 3); /* it went on */

    kill(console, SIGINT);
    int st = ru_wait(console, RUN_MS, NULL);
    /* stopped by ^C at one step, with its checkpoint: 128 + SIGINT */
    CHECK_MSG(st == 128 + SIGINT, "pipetop run exit status %d", st);
    cJSON *s = ru_last_json(TDIR "/run.out");
    CHECK(!strcmp(ru_str(s, "event"), "summary"));
    const cJSON *fl = s ? cJSON_GetObjectItem(s, "control_flooded") : NULL;
    const cJSON *cs = s ? cJSON_GetObjectItem(s, "checkpoint_step") : NULL;
    CHECK_MSG(cJSON_IsNumber(fl) && fl->valuedouble > 0, "control_flooded %g",
              cJSON_IsNumber(fl) ? fl->valuedouble : -1);
    const cJSON *sc = s ? cJSON_GetObjectItem(s, "connections_silent") : NULL;
    CHECK_MSG(cJSON_IsNumber(sc) && sc->valuedouble >= 1, "connections_silent %g",
              cJSON_IsNumber(sc) ? sc->valuedouble : -1);
    REQUIRE(cJSON_IsNumber(cs) && cs->valuedouble > 0);
    int64_t step = (int64_t)cs->valuedouble;
    cJSON_Delete(s);
    /* no worker went to the attacker; nobody died */
    CHECK(count_in(rec, "\"agent\":\"mallory\"") == 0 || count_in(rec, "{\"worker\":") == 2);
    CHECK(count_in(rec, "{\"worker\":0,\"agent\":\"hand-a\"") == 1);
    CHECK(count_in(rec, "\"kind\":\"dead\"") == 0);
    CHECK(ru_wait(pa, 10000, NULL) == 0);
    CHECK(ru_wait(pb, 10000, NULL) == 0);
    zmq_close(squat);
    zmq_close(claim);
    zmq_close(small);
    zmq_ctx_term(ctx);
    free(junk);

    /* the undisturbed run to the same step: the same weights */
    check_equals_reference(TDIR "/ck", step, "ref");
}

/* The console is SIGKILLed; a console with another key binds its port. */
static void test_second_console_refused(void)
{
    set_paths();
    ru_argv run;
    ru_run_argv(&run, model, TDIR "/run2", "--external", "--key", TDIR "/keys/console.key",
                "--allow", TDIR "/keys/allow.txt", "--plan", plan, "--iters", "1000000",
                "--profile", TDIR "/profile.json", NULL);
    pid_t console = ru_start(run.v, TDIR "/run2.out", TDIR "/run2.err");
    char ctl[256] = "", tel[256] = "";
    REQUIRE(ru_wait_endpoints(TDIR "/run2/run.ndjson", ctl, tel, sizeof ctl, RUN_MS));
    int64_t t0;
    /* a short grace: they wait for a console with the right key, then leave */
    pid_t pa =
        start_agent(ctl, tel, "0", "hand-a", TDIR "/keys/a.key", "1000", TDIR, TDIR "/a2.err");
    pid_t pb =
        start_agent(ctl, tel, "1", "hand-b", TDIR "/keys/b.key", "1000", TDIR, TDIR "/b2.err");
    wait_steps(TDIR "/run2.out", 3);
    kill(console, SIGKILL);
    ru_wait(console, RUN_MS, NULL);

    pt_keyfile other;
    load_key("other-console", &other);
    pt_keyfile ak;
    load_key("a", &ak);
    char allowed[2][PT_KEY_Z85_LEN + 1];
    snprintf(allowed[0], sizeof allowed[0], "%s", ak.public_z85);
    load_key("b", &ak);
    snprintf(allowed[1], sizeof allowed[1], "%s", ak.public_z85);
    pt_session_config cfg = {.control_bind = ctl,
                             .telemetry_bind = tel,
                             .key = &other,
                             .allowed = (const char(*)[PT_KEY_Z85_LEN + 1]) allowed,
                             .allowed_n = 2};
    pt_session *s = NULL;
    pt_error err = {0};
    int rc = pt_session_create(&cfg, &s, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    REQUIRE(rc == 0);
    /* until both agents leave: they must never register here */
    int sa = -2, sb = -2;
    t0 = ru_now_ms();
    while ((sa == -2 || sb == -2) && ru_now_ms() - t0 < RUN_MS) {
        pt_session_poll(s, 50, NULL);
        int st;
        if (sa == -2 && waitpid(pa, &st, WNOHANG) == pa)
            sa = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (sb == -2 && waitpid(pb, &st, WNOHANG) == pb)
            sb = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    CHECK_MSG(sa == 3 && sb == 3, "agents exited %d and %d (3: the console went silent)", sa, sb);
    CHECK(pt_session_refused_handshakes(s) == 0); /* they refused it, not the other way */
    CHECK_MSG(pt_session_agent_count(s) == 0, "%d agents registered with the second console",
              pt_session_agent_count(s));
    pt_session_counts k;
    pt_session_counts_get(s, &k);
    CHECK(k.control_received == 0);
    pt_session_destroy(&s);
    char *log = NULL;
    pt_file_read(TDIR "/a2.err", &log, NULL, NULL);
    CHECK_STR_CONTAINS(log, "training on for up to 1.0 s");
    CHECK_STR_CONTAINS(log, "(a grace of 1.0 s included)");
    free(log);
}

/* The first step a `pipetop run --json` output shows (-1 none). */
static int64_t first_step(const char *out)
{
    char *text = NULL;
    if (pt_file_read(out, &text, NULL, NULL) < 0)
        return -1;
    const char *p = strstr(text, "\"event\":\"step\",\"step\":");
    int64_t k = p ? strtoll(p + strlen("\"event\":\"step\",\"step\":"), NULL, 10) : -1;
    free(text);
    return k;
}

/* The last step shown (-1 none). */
static int64_t last_step(const char *out)
{
    char *text = NULL;
    if (pt_file_read(out, &text, NULL, NULL) < 0)
        return -1;
    const char *key = "\"event\":\"step\",\"step\":", *p = text, *last = NULL;
    while ((p = strstr(p, key)))
        last = p++;
    int64_t k = last ? strtoll(last + strlen(key), NULL, 10) : -1;
    free(text);
    return k;
}

/* A console SIGKILLed mid-run and started again with the same key (and
 * --reattach): the agents started by hand train on through the grace
 * period, register again, and the new console picks the run up where it
 * is — no assign, the step numbers go on — and stops it at one step whose
 * weights equal an undisturbed run to that step. ipc endpoints in a 0700
 * folder, so the new console binds exactly the old one's. */
static void test_console_restart_reattaches(void)
{
    set_paths();
    mkdir(TDIR "/sock", 0700);
    /* the first console's flags; the second one's are these and --reattach */
#define RESTART_FLAGS                                                                              \
    "--external", "--key", TDIR "/keys/console.key", "--allow", TDIR "/keys/allow.txt",            \
        "--control-bind", "ipc://" TDIR "/sock/ctl", "--telemetry-bind",                           \
        "ipc://" TDIR "/sock/tel", "--plan", plan, "--seed", "7", "--iters", "1000000",            \
        "--profile", TDIR "/profile.json", "--checkpoint-dir", TDIR "/ck3"
    ru_argv run1, run2;
    ru_run_argv(&run1, model, TDIR "/run3", RESTART_FLAGS, NULL);
    pid_t console = ru_start(run1.v, TDIR "/run3.out", TDIR "/run3.err");
    const char *ctl = "ipc://" TDIR "/sock/ctl", *tel = "ipc://" TDIR "/sock/tel";
    pid_t pa = start_agent(ctl, tel, "0", "hand-a", TDIR "/keys/a.key", "60000", TDIR "/ck3",
                           TDIR "/a3.err");
    pid_t pb = start_agent(ctl, tel, "1", "hand-b", TDIR "/keys/b.key", "60000", TDIR "/ck3",
                           TDIR "/b3.err");
    wait_steps(TDIR "/run3.out", 3);
    kill(console, SIGKILL);
    ru_wait(console, RUN_MS, NULL);
    int64_t before = last_step(TDIR "/run3.out");
    /* both agents are in their grace period, training on */
    int64_t t0 = ru_now_ms();
    while ((count_in(TDIR "/a3.err", "training on for up to 60.0 s") < 1 ||
            count_in(TDIR "/b3.err", "training on for up to 60.0 s") < 1) &&
           ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    CHECK(count_in(TDIR "/a3.err", "training on for up to 60.0 s") == 1);
    CHECK(count_in(TDIR "/b3.err", "training on for up to 60.0 s") == 1);

    ru_run_argv(&run2, model, TDIR "/run4", RESTART_FLAGS, "--reattach", TDIR "/run3", NULL);
#undef RESTART_FLAGS
    pid_t again = ru_start(run2.v, TDIR "/run4.out", TDIR "/run4.err");
    wait_steps(TDIR "/run4.out", 3);
    /* the agents trained on without a console: at the reconnect they were
     * well past the old console's last step (the new console's first step
     * line need not show it: metrics folded while no console listened
     * arrive from the step after the old one's last) */
    int64_t first = first_step(TDIR "/run4.out");
    CHECK_MSG(first > before, "the new console's first step %lld, the old one's last %lld",
              (long long)first, (long long)before);
    for (int a = 0; a < 2; a++) {
        const char *log = a ? TDIR "/b3.err" : TDIR "/a3.err";
        long long done = -1;
        char *text = NULL;
        const char *at = NULL;
        if (pt_file_read(log, &text, NULL, NULL) >= 0 && (at = strstr(text, "last step done ")))
            done = strtoll(at + strlen("last step done "), NULL, 10);
        CHECK_MSG(done > before + 10,
                  "%s: at the reconnect its last step done %lld, the old "
                  "console's last %lld",
                  log, done, (long long)before);
        free(text);
    }
    CHECK(count_in(TDIR "/a3.err", "reconnected within the grace period") == 1);
    CHECK(count_in(TDIR "/b3.err", "reconnected within the grace period") == 1);
    /* the new console's numbering was taken up: nothing it sent was refused */
    CHECK(count_in(TDIR "/a3.err", "hand-a: rejected:") == 0);
    CHECK(count_in(TDIR "/b3.err", "hand-b: rejected:") == 0);
    /* the same processes registered with the new console */
    char want[64];
    snprintf(want, sizeof want, "\"agent\":\"hand-a\",\"seq\":");
    CHECK(count_in(TDIR "/run4/run.ndjson", want) >= 1);
    snprintf(want, sizeof want, "\"pid\":%ld,", (long)pa);
    CHECK(count_in(TDIR "/run4/run.ndjson", want) >= 1);
    snprintf(want, sizeof want, "\"pid\":%ld,", (long)pb);
    CHECK(count_in(TDIR "/run4/run.ndjson", want) >= 1);

    kill(again, SIGINT);
    int st = ru_wait(again, RUN_MS, NULL);
    CHECK_MSG(st == 128 + SIGINT, "the second console exited %d", st);
    cJSON *s = ru_last_json(TDIR "/run4.out");
    const cJSON *cs = s ? cJSON_GetObjectItem(s, "checkpoint_step") : NULL;
    REQUIRE(cJSON_IsNumber(cs) && cs->valuedouble > (double)first);
    int64_t step = (int64_t)cs->valuedouble;
    cJSON_Delete(s);
    CHECK(ru_wait(pa, 10000, NULL) == 0);
    CHECK(ru_wait(pb, 10000, NULL) == 0);

    check_equals_reference(TDIR "/ck3", step, "ref3");
}

/* A PUB of the attacker's to the console's telemetry SUB, CURVE with key k. */
static void *tele_attacker(void *ctx, const pt_keyfile *k, const char *server, const char *tel)
{
    void *p = zmq_socket(ctx, ZMQ_PUB);
    int linger = 0;
    zmq_setsockopt(p, ZMQ_LINGER, &linger, sizeof linger);
    pt_error err = {0};
    CHECK_MSG(pt_trust_client(p, k, server, &err) == 0, "%s", err.msg);
    CHECK(zmq_connect(p, tel) == 0);
    return p;
}

/* Forged telemetry under agent `as`: metrics with a sequence number near
 * 2^53 (once enough to make every later genuine frame "too old"), a step far
 * ahead, a loss and memory figures no run has, and events of that step. */
static void send_forged(void *pub, const char *as)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_METRICS, as);
    m.seq = (1LL << 53) - 1;
    m.gen = 1;
    m.u.metrics.stage = 1;
    m.u.metrics.step = 5;
    m.u.metrics.loss = 1e9;
    m.u.metrics.samples_per_s = 1e12;
    m.u.metrics.iter_ms = 1e6;
    for (int c = 0; c < PT_MSG_MEM_COUNT; c++)
        m.u.metrics.mem_cur[c] = m.u.metrics.mem_peak[c] = 1LL << 40;
    m.u.metrics.total_cur = m.u.metrics.total_peak = 1LL << 42;
    char *text = NULL;
    size_t len = 0;
    REQUIRE(pt_msg_encode(&m, &text, &len, NULL) == 0);
    zmq_send(pub, text, len, ZMQ_DONTWAIT);
    free(text);
    pt_msg_event ev = {.stage = 1,
                       .step = 6,
                       .mb = 0,
                       .op = PT_OP_FWD,
                       .version = 0,
                       .start_ns = 0,
                       .end_ns = 1000000000000LL};
    pt_msg_init(&m, PT_MSG_EVENTS, as);
    m.seq = (1LL << 53) - 2;
    m.gen = 1;
    m.u.events.count = 1;
    m.u.events.events = &ev;
    REQUIRE(pt_msg_encode(&m, &text, &len, NULL) == 0);
    zmq_send(pub, text, len, ZMQ_DONTWAIT);
    free(text);
}

static double num_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, a) : NULL;
    if (b)
        v = v ? cJSON_GetObjectItem(v, b) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Forged telemetry against a full training run: a peer whose key is not
 * allowed (refused at the handshake: nothing it sends arrives) and one with
 * an allowed key that sends under the real last-stage agent's name. The
 * forgeries are refused and counted, and the summary, computed from every
 * step, equals an undisturbed run's to the same step. */
static void test_forged_telemetry_changes_nothing(void)
{
    set_paths();
    ru_argv run;
    ru_run_argv(&run, model, TDIR "/run5", "--external", "--key", TDIR "/keys/console.key",
                "--allow", TDIR "/keys/allow.txt", "--plan", plan, "--seed", "7", "--iters",
                "1000000", "--profile", TDIR "/profile.json", "--checkpoint-dir", TDIR "/ck5",
                NULL);
    pid_t console = ru_start(run.v, TDIR "/run5.out", TDIR "/run5.err");
    char ctl[256] = "", tel[256] = "";
    REQUIRE(ru_wait_endpoints(TDIR "/run5/run.ndjson", ctl, tel, sizeof ctl, RUN_MS));
    pid_t pa =
        start_agent(ctl, tel, "0", "hand-a", TDIR "/keys/a.key", "0", TDIR "/ck5", TDIR "/a5.err");
    pid_t pb =
        start_agent(ctl, tel, "1", "hand-b", TDIR "/keys/b.key", "0", TDIR "/ck5", TDIR "/b5.err");
    wait_steps(TDIR "/run5.out", 3);

    pt_keyfile mk, ok, ck;
    load_key("mallory", &mk);
    load_key("other-console", &ok); /* not on the allow-list */
    load_key("console", &ck);
    void *ctx = zmq_ctx_new();
    void *stranger = tele_attacker(ctx, &ok, ck.public_z85, tel);
    void *insider = tele_attacker(ctx, &mk, ck.public_z85, tel);
    /* until the console has refused both kinds of frame (a PUB's first
     * frames go nowhere before the SUB's subscription reached it) */
    const char *rec = TDIR "/run5/run.ndjson";
    const char *why = "from hand-b: sent with key";
    int64_t t0 = ru_now_ms();
    while (count_in(rec, why) < 2 && ru_now_ms() - t0 < RUN_MS) {
        send_forged(stranger, "hand-b");
        send_forged(insider, "hand-b");
        usleep(100000);
    }
    int refused = count_in(rec, why);
    CHECK_MSG(refused >= 2, "%d forged frames refused", refused);
    CHECK(count_in(rec, "telemetry (metrics) from hand-b: sent with key") >= 1);
    CHECK(count_in(rec, "telemetry (events) from hand-b: sent with key") >= 1);
    int before = ru_steps_seen(TDIR "/run5.out");
    wait_steps(TDIR "/run5.out", before + 3); /* it went on */

    kill(console, SIGINT);
    int st = ru_wait(console, RUN_MS, NULL);
    CHECK_MSG(st == 128 + SIGINT, "pipetop run exit status %d", st);
    cJSON *s = ru_last_json(TDIR "/run5.out");
    REQUIRE(s && !strcmp(ru_str(s, "event"), "summary"));
    int64_t step = (int64_t)num_at(s, "checkpoint_step", NULL);
    REQUIRE(step > 0);
    int sa = ru_wait(pa, 10000, NULL), sb = ru_wait(pb, 10000, NULL);
    CHECK_MSG(sa == 0 && sb == 0,
              "agents exited %d and %d (-1: still running after 10 s, "
              "see a5.err, b5.err)",
              sa, sb);
    zmq_close(stranger);
    zmq_close(insider);
    zmq_ctx_term(ctx);
    /* refused and counted: the stranger at the handshake, the insider's
     * frames by name; the genuine frames were never taken for old */
    CHECK(num_at(s, "handshakes_refused", NULL) >= 1);
    CHECK_MSG(num_at(s, "telemetry", "rejected") >= refused, "telemetry rejected %g, %d refused",
              num_at(s, "telemetry", "rejected"), refused);
    CHECK(num_at(s, "telemetry", "stale") == 0);
    CHECK(num_at(s, "telemetry", "duplicates") == 0);

    /* the summary equals the undisturbed run's to the same step */
    check_equals_reference(TDIR "/ck5", step, "ref5");
    cJSON *r = ru_last_json(TDIR "/ref5.out");
    REQUIRE(r && !strcmp(ru_str(r, "event"), "summary"));
    /* steps_measured: the headline figure's window (protocol/figures.h),
     * full when no step was lost to the forged frames */
    int64_t window = step - 1 < PT_FIG_WINDOW_STEPS ? step - 1 : PT_FIG_WINDOW_STEPS;
    CHECK_MSG(num_at(s, "steps_measured", NULL) == num_at(r, "steps_measured", NULL) &&
                  num_at(s, "steps_measured", NULL) >= window,
              "steps measured: %g, undisturbed %g, of %lld", num_at(s, "steps_measured", NULL),
              num_at(r, "steps_measured", NULL), (long long)step);
    CHECK_MSG(num_at(s, "last_loss", NULL) == num_at(r, "last_loss", NULL),
              "last loss %.9g, undisturbed %.9g", num_at(s, "last_loss", NULL),
              num_at(r, "last_loss", NULL));
    const cJSON *ss = cJSON_GetObjectItem(s, "stages"), *rs = cJSON_GetObjectItem(r, "stages");
    REQUIRE(cJSON_GetArraySize(ss) == 2 && cJSON_GetArraySize(rs) == 2);
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetArrayItem(ss, k), *b = cJSON_GetArrayItem(rs, k);
        CHECK_MSG(num_at(a, "peak_memory_bytes", "total") ==
                      num_at(b, "peak_memory_bytes", "total"),
                  "stage %d peak memory %g, undisturbed %g", k,
                  num_at(a, "peak_memory_bytes", "total"), num_at(b, "peak_memory_bytes", "total"));
        CHECK(num_at(a, "iteration_ms", NULL) < 1e5); /* no forged 1e6 ms in it */
    }
    cJSON_Delete(s);
    cJSON_Delete(r);
}

PT_TEST_MAIN({"attacks_change_nothing", test_attacks_change_nothing},
             {"second_console_refused", test_second_console_refused},
             {"console_restart_reattaches", test_console_restart_reattaches},
             {"forged_telemetry_changes_nothing", test_forged_telemetry_changes_nothing})

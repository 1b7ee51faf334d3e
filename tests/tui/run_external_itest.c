/* `pipetop run --external` with agents started by hand (as on other hosts):
 * workers go to the agents of their devices; garbage on the console's
 * control and telemetry sockets is rejected and counted while the run goes
 * on; ^C stops the run after the current step with a summary, and the
 * agents leave on their own. */
#include <sys/stat.h>
#include <zmq.h>

#include "tests/tui/run_util.h"

#define TDIR   "run_external_itest.d"
#define RUN_MS 120000

/* 1 when the run record contains what. */
static int record_has(const char *record, const char *what)
{
    char *text = NULL;
    if (pt_file_read(record, &text, NULL, NULL) < 0)
        return 0;
    int has = strstr(text, what) != NULL;
    free(text);
    return has;
}

/* Lines of the run record that reject something on `channel`. */
static int rejected_lines(const char *record, const char *channel)
{
    char *text = NULL, want[64];
    if (pt_file_read(record, &text, NULL, NULL) < 0)
        return 0;
    snprintf(want, sizeof want, "\"kind\":\"rejected\",\"channel\":\"%s\"", channel);
    int n = 0;
    for (const char *p = text; (p = strstr(p, want)); p += strlen(want))
        n++;
    free(text);
    return n;
}

/* 1 once the console's SUB has subscribed at xpub (from then on what xpub
 * publishes reaches it), 0 after ms. */
static int subscribed(void *xpub, int ms)
{
    zmq_pollitem_t it = {xpub, 0, ZMQ_POLLIN, 0};
    int64_t t0 = ru_now_ms();
    while (ru_now_ms() - t0 < ms) {
        char buf[64];
        if (zmq_poll(&it, 1, 100) > 0 && zmq_recv(xpub, buf, sizeof buf, ZMQ_DONTWAIT) >= 1 &&
            buf[0] == 1)
            return 1;
    }
    return 0;
}

static void test_external_agents(void)
{
    ru_fresh_dir(TDIR);
    char model[1024], plan[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    snprintf(plan, sizeof plan, "%s", pt_test_path("tests/data/run/plan-a.json"));
    char *prof[] = {
        (char *)ru_bin("pipetop"), "profile",   "--model", model, "--batch", "16", "--out",
        TDIR "/profile.json",      "--repeats", "2",       NULL};
    REQUIRE(ru_run(prof, TDIR "/profile.out", TDIR "/profile.err", RUN_MS) == 0);
    ru_argv run;
    ru_run_argv(&run, model, TDIR "/run", "--external", "--plan", plan, "--iters", "1000000",
                "--profile", TDIR "/profile.json", NULL);
    pid_t console = ru_start(run.v, TDIR "/run.out", TDIR "/run.err");
    REQUIRE(console > 0);
    char ctl[256] = "", tel[256] = "";
    REQUIRE(ru_wait_endpoints(TDIR "/run/run.ndjson", ctl, tel, sizeof ctl, RUN_MS));

    /* two agents by hand, device 1 first: the workers must still match devices */
    ru_agent agent_b = {ctl, tel, "1", "hand-b", .out = TDIR "/b.out", .err = TDIR "/b.err"};
    ru_agent agent_a = {ctl, tel, "0", "hand-a", .out = TDIR "/a.out", .err = TDIR "/a.err"};
    pid_t pb = ru_start_agent(&agent_b);
    /* hand-b registers first (its register is in the record) */
    int64_t t0 = ru_now_ms();
    while (!record_has(TDIR "/run/run.ndjson", "\"agent\":\"hand-b\"") && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    REQUIRE(record_has(TDIR "/run/run.ndjson", "\"agent\":\"hand-b\""));
    pid_t pa = ru_start_agent(&agent_a);

    /* garbage from an intruder on both channels */
    void *ctx = zmq_ctx_new();
    /* XPUB: a PUB that hands over the console's subscription, so the test
     * knows when what it publishes gets through */
    void *dealer = zmq_socket(ctx, ZMQ_DEALER), *pub = zmq_socket(ctx, ZMQ_XPUB);
    int linger = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "intruder", 8);
    zmq_connect(dealer, ctl);
    zmq_connect(pub, tel);
    t0 = ru_now_ms();
    while (ru_steps_seen(TDIR "/run.out") < 3 && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    REQUIRE(ru_steps_seen(TDIR "/run.out") >= 3);
    REQUIRE(subscribed(pub, RUN_MS));
    const char *junk[] = {"\x01garbage", "{\"v\":1}", "{\"v\":1,\"type\":\"heartbeat\"}"};
    for (int k = 0; k < 3; k++) {
        zmq_send(dealer, junk[k], strlen(junk[k]), 0);
        zmq_send(pub, junk[k], strlen(junk[k]), 0);
    }
    /* the console has seen all six (its record says so) before the run
     * must show that it went on */
    t0 = ru_now_ms();
    while ((rejected_lines(TDIR "/run/run.ndjson", "control") < 3 ||
            rejected_lines(TDIR "/run/run.ndjson", "telemetry") < 3) &&
           ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    CHECK(rejected_lines(TDIR "/run/run.ndjson", "control") == 3);
    CHECK(rejected_lines(TDIR "/run/run.ndjson", "telemetry") == 3);
    int before = ru_steps_seen(TDIR "/run.out");
    t0 = ru_now_ms();
    while (ru_steps_seen(TDIR "/run.out") < before + 3 && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    CHECK(ru_steps_seen(TDIR "/run.out") >= before + 3); /* it went on */

    /* ^C: stop after the current step, summary, and an exit status that
     * says the run did not finish (128 + SIGINT, issue 13) */
    kill(console, SIGINT);
    int st = ru_wait(console, RUN_MS, NULL);
    CHECK_MSG(st == 128 + SIGINT, "pipetop run exit status %d", st);
    cJSON *s = ru_last_json(TDIR "/run.out");
    CHECK(!strcmp(ru_str(s, "event"), "summary"));
    const cJSON *t = s ? cJSON_GetObjectItem(s, "telemetry") : NULL;
    const cJSON *m = t ? cJSON_GetObjectItem(t, "malformed") : NULL;
    const cJSON *r = s ? cJSON_GetObjectItem(s, "control_rejected") : NULL;
    CHECK_MSG(cJSON_IsNumber(m) && m->valuedouble == 3, "telemetry malformed %g",
              cJSON_IsNumber(m) ? m->valuedouble : -1);
    CHECK_MSG(cJSON_IsNumber(r) && r->valuedouble == 3, "control rejected %g",
              cJSON_IsNumber(r) ? r->valuedouble : -1);
    cJSON_Delete(s);

    /* worker 0 ran on hand-a (device 0), worker 1 on hand-b */
    char *rec = NULL;
    pt_file_read(TDIR "/run/run.ndjson", &rec, NULL, NULL);
    CHECK_STR_CONTAINS(rec, "{\"worker\":0,\"agent\":\"hand-a\",\"stage\":0");
    CHECK_STR_CONTAINS(rec, "{\"worker\":1,\"agent\":\"hand-b\",\"stage\":1");
    free(rec);

    CHECK(ru_wait(pa, 10000, NULL) == 0);
    CHECK(ru_wait(pb, 10000, NULL) == 0);
    char *log = NULL;
    pt_file_read(TDIR "/a.err", &log, NULL, NULL);
    CHECK_STR_CONTAINS(log, "the console said bye");
    free(log);
    zmq_close(dealer);
    zmq_close(pub);
    zmq_ctx_term(ctx);
}

/* Lines of a file containing what. */
static int lines_with(const char *path, const char *what)
{
    char *text = NULL;
    if (pt_file_read(path, &text, NULL, NULL) < 0)
        return 0;
    int n = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        n += strstr(line, what) != NULL;
    }
    free(text);
    return n;
}

#define FLOOD_FRAMES 20000

/* Volume and words from outside (issue 25, item 8): 20,000 junk frames on
 * the control socket are all counted, but the console's stderr and record
 * hold at most PT_SESSION_REJECT_LINES of them a window plus a line saying
 * how many more; an agent that is not a worker reports an error whose text
 * forges a console line: it is shown quoted and attributed, never as a line
 * of pipetop's own. */
static void test_flood_and_foreign_words(void)
{
    ru_fresh_dir(TDIR);
    char model[1024], plan[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    snprintf(plan, sizeof plan, "%s", pt_test_path("tests/data/run/plan-a.json"));
    ru_argv run;
    ru_run_argv(&run, model, TDIR "/run", "--external", "--plan", plan, "--iters", "1000000", NULL);
    pid_t console = ru_start(run.v, TDIR "/run.out", TDIR "/run.err");
    REQUIRE(console > 0);
    char ctl[256] = "", tel[256] = "";
    REQUIRE(ru_wait_endpoints(TDIR "/run/run.ndjson", ctl, tel, sizeof ctl, RUN_MS));
    ru_agent agent_a = {ctl, tel, "0", "hand-a", .out = TDIR "/a.out", .err = TDIR "/a.err"};
    ru_agent agent_b = {ctl, tel, "1", "hand-b", .out = TDIR "/b.out", .err = TDIR "/b.err"};
    pid_t pa = ru_start_agent(&agent_a), pb = ru_start_agent(&agent_b);
    int64_t t0 = ru_now_ms();
    while (ru_steps_seen(TDIR "/run.out") < 3 && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    REQUIRE(ru_steps_seen(TDIR "/run.out") >= 3);

    void *ctx = zmq_ctx_new();
    void *junk = zmq_socket(ctx, ZMQ_DEALER), *talker = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, hwm = 0;
    zmq_setsockopt(junk, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(junk, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(talker, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(junk, ZMQ_ROUTING_ID, "junk", 4);
    zmq_setsockopt(talker, ZMQ_ROUTING_ID, "talker", 6);
    zmq_connect(junk, ctl);
    zmq_connect(talker, ctl);
    /* a registered agent that is no worker says something forged */
    const char *reg = "{\"v\":1,\"type\":\"register\",\"agent\":\"talker\",\"seq\":0,\"gen\":0,"
                      "\"host\":\"h\",\"pid\":1,\"device\":-1,\"backend\":\"cpu\","
                      "\"data_endpoint\":\"tcp://127.0.0.1:1\"}";
    zmq_send(talker, reg, strlen(reg), 0);
    const char *said = "{\"v\":1,\"type\":\"error\",\"agent\":\"talker\",\"seq\":1,\"gen\":1,"
                       "\"stage\":-1,\"replica\":-1,\"code\":"
                       "-10,\"reason\":\"x\\\"}\\n{\\\"error\\\":\\\"forged by talker\"}";
    zmq_send(talker, said, strlen(said), 0);
    t0 = ru_now_ms();
    while (!lines_with(TDIR "/run.err", "forged by talker") && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    /* then the flood (after: strangers share one byte budget, and the
     * talker must get through first); the summary counts all of it */
    for (int k = 0; k < FLOOD_FRAMES; k++)
        zmq_send(junk, "\x01not json", 9, 0);

    int before = ru_steps_seen(TDIR "/run.out");
    /* a window's end brings the line that counts what was not written */
    t0 = ru_now_ms();
    while ((ru_steps_seen(TDIR "/run.out") < before + 3 ||
            !lines_with(TDIR "/run.err", "more messages refused")) &&
           ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    CHECK(ru_steps_seen(TDIR "/run.out") >= before + 3); /* it went on */
    kill(console, SIGINT);
    CHECK(ru_wait(console, RUN_MS, NULL) == 128 + SIGINT);
    cJSON *sum = ru_last_json(TDIR "/run.out");
    const cJSON *r = sum ? cJSON_GetObjectItem(sum, "control_rejected") : NULL;
    CHECK_MSG(cJSON_IsNumber(r) && r->valuedouble >= FLOOD_FRAMES, "control rejected %g of %d",
              cJSON_IsNumber(r) ? r->valuedouble : -1, FLOOD_FRAMES);
    cJSON_Delete(sum);
    int err_lines = lines_with(TDIR "/run.err", "rejected"),
        rec_lines = rejected_lines(TDIR "/run/run.ndjson", "control");
    /* a window of PT_SESSION_REJECT_LINES, then a count per 10 s window */
    CHECK_MSG(err_lines <= 60, "%d stderr lines for %d junk frames", err_lines, FLOOD_FRAMES);
    CHECK_MSG(rec_lines <= 60, "%d record lines for %d junk frames", rec_lines, FLOOD_FRAMES);
    CHECK_MSG(lines_with(TDIR "/run.err", "more messages refused") >= 1,
              "no line counts the refusals not written");
    /* the words are the talker's, in quotes, never a line of pipetop's own */
    /* (stderr's lines are JSON: the quote's backslashes are escaped again) */
    CHECK_MSG(lines_with(TDIR "/run.err", "agent talker (no stage, pid 1) reported: ") == 1 &&
                  lines_with(TDIR "/run.err", "\\x0a{\\\\\\\"error") == 1,
              "the talker's words are not quoted");
    CHECK_MSG(lines_with(TDIR "/run.err", "{\"error\":\"forged") == 0,
              "a line of the talker's passed as the console's");
    CHECK(ru_wait(pa, 10000, NULL) == 0);
    CHECK(ru_wait(pb, 10000, NULL) == 0);
    zmq_close(junk);
    zmq_close(talker);
    zmq_ctx_term(ctx);
}

PT_TEST_MAIN({"external_agents", test_external_agents},
             {"flood_and_foreign_words", test_flood_and_foreign_words})

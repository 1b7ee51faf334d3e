/* A stop in the middle of a 3-stage pipelined run (one start "until
 * stopped", no chunks): the session's two-round stop (hold, then at_step;
 * docs/protocol.md, "Stopping at one step") must bring every agent to the
 * same step, acknowledged with that step, well within the data-plane
 * timeout, and commit a checkpoint there; a resume from it must continue at
 * exactly that step. Three rounds, each stopping wherever the pipeline
 * happens to be. Real pipetop-agent processes, driven through tui/session.h. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "tests/test.h"
#include "tui/run_ckpt.h"
#include "tui/session.h"

#define TEST_DIR      "session_stop_itest.d"
#define AGENTS        3
#define WAIT_MS       30000
#define STOP_BOUND_MS 8000 /* well under PT_AGENT_COMM_TIMEOUT_MS (30 s) */
#define ROUNDS        3
#define RESUME_STEPS  2

static const char *const PLAN =
    "{\"v\": 1, \"model\": \"tiny-mlp\", \"layers\": 8,"
    " \"microbatch\": {\"size\": 8, \"count\": 4},"
    " \"schedule\": {\"kind\": \"gpipe\"},"
    " \"optimizer\": {\"kind\": \"sgd\", \"lr\": 0.02, \"momentum\": 0.9},"
    " \"stages\": [{\"layers\": [0, 3], \"replicas\": [0]}, {\"layers\": [3, 5], \"replicas\": "
    "[1]},"
    " {\"layers\": [5, 8], \"replicas\": [2]}]}";

typedef struct seen {
    int64_t first_metrics_step[AGENTS]; /* first metrics step of each agent since reset; -1 */
} seen;

static void on_note(void *user, const pt_session_note *n)
{
    seen *s = user;
    if (n->kind == PT_NOTE_METRICS && n->agent >= 0 && n->agent < AGENTS &&
        s->first_metrics_step[n->agent] < 0)
        s->first_metrics_step[n->agent] = n->msg->u.metrics.step;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static pid_t spawn_agent(pt_session *s, int k)
{
    char bin[1200], name[16], dev[16], log[256];
    const char *dir = getenv("PT_BUILD_DIR");
    snprintf(bin, sizeof bin, "%s/pipetop-agent", dir ? dir : ".");
    snprintf(name, sizeof name, "w%d", k);
    snprintf(dev, sizeof dev, "%d", k);
    snprintf(log, sizeof log, TEST_DIR "/agent-%d.log", k);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(bin, bin, "--console", pt_session_control_endpoint(s), "--telemetry",
              pt_session_telemetry_endpoint(s), "--device", dev, "--name", name, "--threads", "1",
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int assign(pt_session *s, const pt_plan *plan, const pt_model_spec *spec, int64_t resume,
                  pt_error *err)
{
    int agents[AGENTS];
    for (int w = 0; w < AGENTS; w++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", w);
        agents[w] = pt_session_find_agent(s, name);
    }
    pt_session_plan sp = {plan, spec, agents, "synthetic", 7, TEST_DIR "/ckpt", 0, resume};
    int rc = pt_session_assign(s, &sp, err);
    return rc < 0 ? rc : pt_session_wait(s, WAIT_MS, err);
}

static void test_stop_mid_stream(void)
{
    if (system("rm -rf " TEST_DIR) != 0) {
    }
    pt_error err = {0};
    REQUIRE(pt_mkdir_p(TEST_DIR "/ckpt", &err) == 0);
    pt_plan *plan = NULL;
    pt_model_spec *spec = NULL;
    REQUIRE(pt_plan_parse(PLAN, "plan", &plan, &err) == 0);
    REQUIRE(pt_model_spec_load(pt_test_path("tests/data/run/tiny-mlp.json"), &spec, &err) == 0);
    pt_session_config cfg = {NULL, NULL, TEST_DIR "/run.ndjson", 0, 0};
    pt_session *s = NULL;
    REQUIRE(pt_session_create(&cfg, &s, &err) == 0);
    seen sn;
    pt_session_set_listener(s, on_note, &sn);
    pt_session_set_commit(s, pt_run_ckpt_commit, NULL);
    pid_t pids[AGENTS];
    for (int k = 0; k < AGENTS; k++)
        pids[k] = spawn_agent(s, k);
    int64_t until = now_ms() + WAIT_MS;
    while (pt_session_agent_count(s) < AGENTS && now_ms() < until)
        pt_session_poll(s, 50, NULL);
    REQUIRE(pt_session_agent_count(s) == AGENTS);
    /* the agents register in any order: the listener counts by table index */
    int64_t resume = 0;
    for (int round = 0; round < ROUNDS; round++) {
        CHECK_MSG(assign(s, plan, spec, resume, &err) == 0, "round %d: assign: %s", round, err.msg);
        for (int k = 0; k < AGENTS; k++)
            sn.first_metrics_step[k] = -1;
        REQUIRE(pt_session_start(s, 0, &err) == 0); /* until stopped: no chunk */
        /* Mid-stream: some iterations past the resume step, agents running. */
        int64_t goal = resume + 3 + round, max_seen = -1;
        until = now_ms() + WAIT_MS;
        while (pt_session_min_step(s) < goal && now_ms() < until && !pt_session_failure(s, &err))
            pt_session_poll(s, 5, NULL);
        REQUIRE(pt_session_min_step(s) >= goal);
        for (int i = 0; i < AGENTS; i++) {
            const pt_session_agent *a = pt_session_agent_at(s, i);
            CHECK(a->state == PT_AGENT_RUNNING);
            if (a->step > max_seen)
                max_seen = a->step;
        }
        int64_t t0 = now_ms();
        REQUIRE(pt_session_stop(s, "test stop", &err) == 0);
        int rc = pt_session_wait(s, STOP_BOUND_MS, &err);
        int64_t took = now_ms() - t0;
        CHECK_MSG(rc == 0, "round %d: stop: %s", round, err.msg);
        CHECK_MSG(took < STOP_BOUND_MS, "round %d: the stop took %lld ms", round, (long long)took);
        int64_t n = pt_session_stop_step(s);
        /* every iteration reported finished lies before the common step */
        CHECK_MSG(n > max_seen, "round %d: stop step %lld, step %lld was already done", round,
                  (long long)n, (long long)max_seen);
        for (int i = 0; i < AGENTS; i++) {
            const pt_session_agent *a = pt_session_agent_at(s, i);
            CHECK_MSG(a->state == PT_AGENT_STOPPED, "round %d: %s is %s", round, a->id,
                      pt_agent_state_name(a->state));
            CHECK_MSG(a->stop_step == n, "round %d: %s stopped at %lld, not %lld", round, a->id,
                      (long long)a->stop_step, (long long)n);
            CHECK(a->ckpt_step == n);
        }
        CHECK_MSG(pt_session_committed_step(s) == n, "round %d: committed %lld, stop step %lld",
                  round, (long long)pt_session_committed_step(s), (long long)n);
        printf("round %d: stopped at step %lld (%lld was done) in %lld ms\n", round, (long long)n,
               (long long)max_seen, (long long)took);
        if (n <= resume)
            break;
        resume = n;
    }
    /* A resume continues at the step of the last stop: its first iteration
     * is that step on every stage, and a bounded start ends N steps on. */
    CHECK(assign(s, plan, spec, resume, &err) == 0);
    for (int k = 0; k < AGENTS; k++)
        sn.first_metrics_step[k] = -1;
    REQUIRE(pt_session_start(s, RESUME_STEPS, &err) == 0);
    until = now_ms() + WAIT_MS;
    int idle = 0;
    while (!idle && now_ms() < until && !pt_session_failure(s, &err)) {
        pt_session_poll(s, 20, NULL);
        idle = pt_session_pending(s) == 0;
        for (int i = 0; i < AGENTS; i++)
            idle = idle && pt_session_agent_at(s, i)->state == PT_AGENT_IDLE;
    }
    CHECK(idle);
    CHECK(pt_session_min_step(s) == resume + RESUME_STEPS - 1);
    for (int i = 0; i < AGENTS; i++)
        CHECK_MSG(sn.first_metrics_step[i] == resume, "%s: first step %lld after resuming at %lld",
                  pt_session_agent_at(s, i)->id, (long long)sn.first_metrics_step[i],
                  (long long)resume);
    /* and a stop of idle agents lands where they are */
    REQUIRE(pt_session_stop(s, "done", &err) == 0);
    CHECK(pt_session_wait(s, STOP_BOUND_MS, &err) == 0);
    CHECK(pt_session_stop_step(s) == resume + RESUME_STEPS);

    pt_session_bye(s, "test over");
    for (int k = 0; k < AGENTS; k++) {
        int status = 0;
        int64_t end = now_ms() + 10000;
        pid_t r = 0;
        while ((r = waitpid(pids[k], &status, WNOHANG)) == 0 && now_ms() < end)
            pt_session_poll(s, 20, NULL);
        if (r == 0) {
            kill(pids[k], SIGKILL);
            waitpid(pids[k], &status, 0);
        }
        CHECK_MSG(r == pids[k] && WIFEXITED(status), "agent %d did not leave by itself", k);
    }
    pt_session_destroy(&s);
    pt_plan_free(&plan);
    pt_model_spec_free(&spec);
}

PT_TEST_MAIN({"stop_mid_stream", test_stop_mid_stream})

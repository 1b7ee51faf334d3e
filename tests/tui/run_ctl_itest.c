/* The run controller (tui/control/run.h) with real pipetop-agent processes, the one
 * implementation under both `pipetop run` and the console's live source:
 *
 * - a stop in the middle of a 3-stage pipelined run (one start "until
 *   stopped", no chunks): the two-round stop (hold, then at_step;
 *   docs/protocol.md, "Stopping at one step") brings every agent to the same
 *   step, acknowledged with that step, well within the data-plane timeout,
 *   and commits a checkpoint there; three rounds, each stopping wherever the
 *   pipeline happens to be, each re-assigned resuming at that step;
 * - a restart under a new plan (2 stages instead of 3): a new generation
 *   that resumes at exactly the step the stop committed on every stage, and
 *   a bounded start that finishes N steps on;
 * - a fault: an agent killed with SIGKILL fails the run at once (its process
 *   is reaped), naming the agent and its stage; ending the run leaves no
 *   process behind, the others leaving because the controller said bye. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "tests/test.h"
#include "tui/control/run.h"
#include "tui/control/session.h"

#define TEST_DIR      "run_ctl_itest.d"
#define AGENTS        3
#define WAIT_MS       30000
#define STOP_BOUND_MS 8000 /* well under PT_AGENT_COMM_TIMEOUT_MS (30 s) */
#define ROUNDS        3
#define RESUME_STEPS  2
/* A killed agent is reaped on the controller's next turn; the heartbeat
 * bound is the slow path it must not need. */
#define FAULT_BOUND_MS (PT_SESSION_MISSED_HEARTBEATS * PT_SESSION_HEARTBEAT_MS)

static const char *const PLAN =
    "{\"v\": 1, \"model\": \"tiny-mlp\", \"layers\": 8,"
    " \"microbatch\": {\"size\": 8, \"count\": 4},"
    " \"schedule\": {\"kind\": \"gpipe\"},"
    " \"optimizer\": {\"kind\": \"sgd\", \"lr\": 0.02, \"momentum\": 0.9},"
    " \"stages\": [{\"layers\": [0, 3], \"replicas\": [0]}, {\"layers\": [3, 5], \"replicas\": "
    "[1]},"
    " {\"layers\": [5, 8], \"replicas\": [2]}]}";

/* The same model on two stages, split elsewhere, with another schedule. */
static const char *const PLAN2 =
    "{\"v\": 1, \"model\": \"tiny-mlp\", \"layers\": 8,"
    " \"microbatch\": {\"size\": 8, \"count\": 4},"
    " \"schedule\": {\"kind\": \"1f1b-flush\"},"
    " \"optimizer\": {\"kind\": \"sgd\", \"lr\": 0.02, \"momentum\": 0.9},"
    " \"stages\": [{\"layers\": [0, 5], \"replicas\": [1]}, {\"layers\": [5, 8], \"replicas\": "
    "[0]}]}";

typedef struct seen {
    int64_t first_metrics_step[AGENTS]; /* first metrics step of each agent since reset; -1 */
} seen;

static void on_note(void *user, const pt_session_note *n)
{
    seen *s = user;
    if (n->kind == PT_NOTE_METRICS && n->agent >= 0 && n->agent < AGENTS &&
        s->first_metrics_step[n->agent] < 0)
        /* a fold's first step (docs/protocol.md, "Telemetry thinning") */
        s->first_metrics_step[n->agent] =
            n->msg->u.metrics.step -
            (n->msg->u.metrics.steps > 1 ? n->msg->u.metrics.steps - 1 : 0);
}

static void reset_first_steps(seen *sn)
{
    for (int k = 0; k < AGENTS; k++)
        sn->first_metrics_step[k] = -1;
}

/* Polls the controller until min_step reaches goal (or a failure / WAIT_MS). */
static int64_t run_until_step(pt_run *run, int64_t goal)
{
    pt_session *s = pt_run_session(run);
    int64_t until = (pt_clock_ns() / 1000000) + WAIT_MS;
    while (pt_session_min_step(s) < goal && (pt_clock_ns() / 1000000) < until &&
           pt_run_get_state(run) == PT_RUN_TRAINING)
        pt_run_poll(run, 5, NULL);
    return pt_session_min_step(s);
}

static int alive(int64_t pid)
{
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

static void test_controller(void)
{
    if (system("rm -rf " TEST_DIR) != 0) {
    }
    pt_error err = {0};
    REQUIRE(pt_mkdir_p(TEST_DIR "/ckpt", &err) == 0);
    pt_plan *plan = NULL, *plan2 = NULL;
    pt_model_spec *spec = NULL;
    REQUIRE(pt_plan_parse(PLAN, "plan", &plan, &err) == 0);
    REQUIRE(pt_plan_parse(PLAN2, "plan2", &plan2, &err) == 0);
    REQUIRE(pt_model_spec_load(pt_test_path("tests/data/run/tiny-mlp.json"), &spec, &err) == 0);
    seen sn;
    reset_first_steps(&sn);
    pt_run_config cfg = {.run_dir = TEST_DIR,
                         .agents = AGENTS,
                         .listener = on_note,
                         .listener_user = &sn,
                         .local_keys = 1};
    pt_run *run = NULL;
    REQUIRE(pt_run_create(&cfg, &run, &err) == 0);
    pt_session *s = pt_run_session(run);
    REQUIRE(pt_run_spawn(run, NULL, &err) == 0); /* agents 0..2 on devices 0..2 */
    CHECK_MSG(pt_run_wait_agents(run, WAIT_MS, &err) == 0, "%s", err.msg);
    REQUIRE(pt_run_get_state(run) == PT_RUN_READY);
    /* the agents register in any order: the listener counts by table index */
    pt_run_job job = {spec, "synthetic", 7, TEST_DIR "/ckpt", 0};
    int64_t resume = 0;
    for (int round = 0; round < ROUNDS; round++) {
        CHECK_MSG(pt_run_assign(run, plan, &job, resume, WAIT_MS, &err) == 0,
                  "round %d: assign: %s", round, err.msg);
        CHECK(pt_run_get_state(run) == PT_RUN_ASSIGNED);
        reset_first_steps(&sn);
        REQUIRE(pt_run_start(run, 0, &err) == 0); /* until stopped: no chunk */
        /* Mid-stream: some iterations past the resume step, agents running. */
        int64_t goal = resume + 3 + round, max_seen = -1;
        REQUIRE(run_until_step(run, goal) >= goal);
        for (int i = 0; i < AGENTS; i++) {
            const pt_session_agent *a = pt_session_agent_at(s, i);
            CHECK(a->state == PT_AGENT_RUNNING);
            if (a->step > max_seen)
                max_seen = a->step;
        }
        int64_t t0 = (pt_clock_ns() / 1000000);
        int rc = pt_run_stop(run, "test stop", STOP_BOUND_MS, &err);
        int64_t took = (pt_clock_ns() / 1000000) - t0;
        CHECK_MSG(rc == 0, "round %d: stop: %s", round, err.msg);
        CHECK(pt_run_get_state(run) == PT_RUN_STOPPED);
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

    /* Apply & restart: from a run under way, a new plan as a new generation
     * that resumes at the step the stop committed, on every stage. */
    CHECK(pt_run_assign(run, plan, &job, resume, WAIT_MS, &err) == 0);
    REQUIRE(pt_run_start(run, 0, &err) == 0);
    REQUIRE(run_until_step(run, resume + 2) >= resume + 2);
    int64_t gen = pt_session_generation(s), step = -1;
    CHECK_MSG(pt_run_restart(run, plan2, WAIT_MS, &step, &err) == 0, "restart: %s", err.msg);
    CHECK(pt_run_get_state(run) == PT_RUN_ASSIGNED);
    CHECK(pt_session_generation(s) == gen + 1);
    CHECK_MSG(step > resume + 2 && step == pt_session_stop_step(s) &&
                  step == pt_session_committed_step(s),
              "restart resumed at %lld (stop %lld, committed %lld)", (long long)step,
              (long long)pt_session_stop_step(s), (long long)pt_session_committed_step(s));
    CHECK(pt_run_first_step(run) == step);
    /* plan2 puts stage 0 on device 1 (agent 1) and stage 1 on device 0
     * (agent 0); the names are the run's own, random per run */
    int i0 = pt_session_find_agent(s, pt_run_agent_name(run, 0));
    int i1 = pt_session_find_agent(s, pt_run_agent_name(run, 1));
    int i2 = pt_session_find_agent(s, pt_run_agent_name(run, 2));
    REQUIRE(i0 >= 0 && i1 >= 0 && i2 >= 0);
    CHECK(pt_session_agent_at(s, i1)->stage == 0 && pt_session_agent_at(s, i0)->stage == 1);
    CHECK(pt_session_agent_at(s, i2)->worker == -1);
    reset_first_steps(&sn);
    REQUIRE(pt_run_start(run, RESUME_STEPS, &err) == 0);
    CHECK(pt_run_target_step(run) == step + RESUME_STEPS);
    int64_t until = (pt_clock_ns() / 1000000) + WAIT_MS;
    while (pt_run_get_state(run) == PT_RUN_TRAINING && (pt_clock_ns() / 1000000) < until)
        pt_run_poll(run, 20, NULL);
    CHECK_MSG(pt_run_get_state(run) == PT_RUN_FINISHED, "state %s",
              pt_run_state_name(pt_run_get_state(run)));
    CHECK(pt_session_min_step(s) == step + RESUME_STEPS - 1);
    for (int i = 0; i < AGENTS; i++) {
        if (i == i2)
            continue; /* not in plan2 */
        CHECK_MSG(sn.first_metrics_step[i] == step, "%s: first step %lld after resuming at %lld",
                  pt_session_agent_at(s, i)->id, (long long)sn.first_metrics_step[i],
                  (long long)step);
    }
    CHECK(sn.first_metrics_step[i2] == -1);
    /* and a stop of idle agents lands where they are */
    CHECK(pt_run_stop(run, "done", STOP_BOUND_MS, &err) == 0);
    CHECK(pt_session_stop_step(s) == step + RESUME_STEPS);

    /* A fault: back to plan (all three), training; kill the middle stage. */
    CHECK(pt_run_assign(run, plan, &job, step + RESUME_STEPS, WAIT_MS, &err) == 0);
    REQUIRE(pt_run_start(run, 0, &err) == 0);
    REQUIRE(run_until_step(run, step + RESUME_STEPS + 1) >= step + RESUME_STEPS + 1);
    int victim = -1;
    int64_t pids[AGENTS];
    for (int i = 0; i < AGENTS; i++) {
        const pt_session_agent *a = pt_session_agent_at(s, i);
        pids[i] = a->pid;
        if (a->stage == 1)
            victim = i;
    }
    REQUIRE(victim >= 0);
    int64_t t0 = (pt_clock_ns() / 1000000);
    REQUIRE(kill((pid_t)pids[victim], SIGKILL) == 0);
    until = (pt_clock_ns() / 1000000) + WAIT_MS;
    while (pt_run_get_state(run) == PT_RUN_TRAINING && (pt_clock_ns() / 1000000) < until)
        pt_run_poll(run, 20, NULL);
    int64_t took = (pt_clock_ns() / 1000000) - t0;
    CHECK(pt_run_get_state(run) == PT_RUN_FAILED);
    CHECK_MSG(took < FAULT_BOUND_MS, "the failure took %lld ms", (long long)took);
    err.msg[0] = '\0';
    CHECK(pt_run_failure(run, &err) == 1);
    char want[PT_MSG_ID_MAX + 64];
    snprintf(want, sizeof want, "agent %s (stage 1, replica 0", pt_session_agent_at(s, victim)->id);
    CHECK_STR_CONTAINS(err.msg, want);
    CHECK_STR_CONTAINS(err.msg, "signal 9");
    /* no restart from a failed run */
    CHECK(pt_run_assign(run, plan, &job, 0, WAIT_MS, &err) == PT_ESTATE);

    pt_run_end(run, "test over");
    CHECK(pt_run_get_state(run) == PT_RUN_ENDED);
    for (int i = 0; i < AGENTS; i++) {
        CHECK_MSG(!alive(pids[i]), "agent %s (pid %lld) is still running",
                  pt_session_agent_at(s, i)->id, (long long)pids[i]);
        if (i == victim)
            continue;
        char path[256], *log = NULL;
        snprintf(path, sizeof path, TEST_DIR "/agent-%s.log", pt_session_agent_at(s, i)->id);
        pt_file_read(path, &log, NULL, NULL);
        CHECK_STR_CONTAINS(log, "the console said bye");
        free(log);
    }
    pt_run_destroy(&run);
    pt_plan_free(&plan);
    pt_plan_free(&plan2);
    pt_model_spec_free(&spec);
}

PT_TEST_MAIN({"controller", test_controller})

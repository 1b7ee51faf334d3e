/* An agent that sat out a generation rejoins the next one while a peer of
 * its is still held in the previous one (docs/reliability.md, "Races"):
 * the peer is stopped with SIGSTOP before the assign goes out and let go
 * only once every other agent has acknowledged the new generation.
 *
 * Three agents; plan A runs 3 stages on all of them, plan B 2 stages on
 * agents 0 and 1 (agent 2 sits out). Each round assigns B, trains, stops,
 * then assigns A again with agent 1 (stage 1: the rejoining agent's peer)
 * held across the assign, and must train REJOIN_STEPS on within
 * REJOIN_BOUND_MS, well under the data-plane timeout.
 *
 * Before generations were wired at the first iteration, the rejoining agent
 * connected at its assign to the held peer's socket of generation B, whose
 * ZAP handler (B's peers only) refused it once the peer ran again; libzmq
 * does not reconnect after a refused handshake, so the first send waited
 * out the 30 s timeout. Agent 0 connected to that old socket too (it was
 * allowed there) and its first frames were lost with it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "tests/test.h"
#include "tui/control/run.h"
#include "tui/control/session.h"

#define TEST_DIR        "run_rejoin_itest.d"
#define AGENTS          3
#define WAIT_MS         30000
#define ROUNDS          4
#define REJOIN_STEPS    3
#define REJOIN_BOUND_MS 10000 /* a third of PT_AGENT_COMM_TIMEOUT_MS */
#define HELD            1     /* agent index held by SIGSTOP: stage 1 of plan A */

/* gpipe over three stages (agent i = stage i) */
static const char *const PLAN_A =
    "{\"v\": 1, \"model\": \"tiny-mlp\", \"layers\": 8,"
    " \"microbatch\": {\"size\": 8, \"count\": 4},"
    " \"schedule\": {\"kind\": \"gpipe\"},"
    " \"optimizer\": {\"kind\": \"sgd\", \"lr\": 0.02, \"momentum\": 0.9},"
    " \"stages\": [{\"layers\": [0, 3], \"replicas\": [0]}, {\"layers\": [3, 5], \"replicas\": "
    "[1]},"
    " {\"layers\": [5, 8], \"replicas\": [2]}]}";

/* two stages on devices 0 and 1: agent 2 sits out */
static const char *const PLAN_B =
    "{\"v\": 1, \"model\": \"tiny-mlp\", \"layers\": 8,"
    " \"microbatch\": {\"size\": 8, \"count\": 4},"
    " \"schedule\": {\"kind\": \"1f1b-flush\"},"
    " \"optimizer\": {\"kind\": \"sgd\", \"lr\": 0.02, \"momentum\": 0.9},"
    " \"stages\": [{\"layers\": [0, 4], \"replicas\": [0]}, {\"layers\": [4, 8], \"replicas\": "
    "[1]}]}";

/* The held agent is let go from the listener, at the moment every other
 * agent has acknowledged the generation being assigned. */
typedef struct hold {
    pt_session *s;
    int64_t gen;      /* the generation whose acks release it; 0: none held */
    int64_t pid;      /* the held agent's process */
    int held_idx;     /* its index in the session's table */
    int released;     /* 1 once SIGCONT was sent */
    int others_acked; /* how many others had acked when it was released */
} hold;

static void on_note(void *user, const pt_session_note *n)
{
    hold *h = user;
    if (n->kind != PT_NOTE_STATE || !h->gen || h->released)
        return;
    int acked = 0;
    for (int i = 0; i < pt_session_agent_count(h->s); i++) {
        const pt_session_agent *a = pt_session_agent_at(h->s, i);
        if (i != h->held_idx && a->gen == h->gen && a->state == PT_AGENT_ASSIGNED)
            acked++;
    }
    if (acked == AGENTS - 1) {
        h->others_acked = acked;
        h->released = kill((pid_t)h->pid, SIGCONT) == 0;
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls the controller until every worker finished goal steps, a failure,
 * or bound_ms; returns the slowest worker's step. */
static int64_t run_until_step(pt_run *run, int64_t goal, int bound_ms)
{
    pt_session *s = pt_run_session(run);
    int64_t until = now_ms() + bound_ms;
    while (pt_session_min_step(s) < goal && now_ms() < until &&
           pt_run_get_state(run) == PT_RUN_TRAINING)
        pt_run_poll(run, 20, NULL);
    return pt_session_min_step(s);
}

/* Assign, start, train steps on, stop; returns the stop step, -1 failed. */
static int64_t train_round(pt_run *run, const pt_plan *plan, pt_run_job *job, int64_t resume,
                           int bound_ms, const char *what)
{
    pt_error err = {0};
    pt_session *s = pt_run_session(run);
    if (pt_run_assign(run, plan, job, resume, WAIT_MS, &err) < 0) {
        CHECK_MSG(0, "%s: assign: %s", what, err.msg);
        return -1;
    }
    if (pt_run_start(run, 0, &err) < 0) {
        CHECK_MSG(0, "%s: start: %s", what, err.msg);
        return -1;
    }
    int64_t t0 = now_ms();
    int64_t got = run_until_step(run, resume + REJOIN_STEPS, bound_ms);
    CHECK_MSG(got >= resume + REJOIN_STEPS,
              "%s: %lld of %d steps in %lld ms (state %s; the data plane timeout is 30 s)", what,
              (long long)(got - resume), REJOIN_STEPS, (long long)(now_ms() - t0),
              pt_run_state_name(pt_run_get_state(run)));
    if (got < resume + REJOIN_STEPS)
        return -1;
    if (pt_run_stop(run, what, WAIT_MS, &err) < 0) {
        CHECK_MSG(0, "%s: stop: %s", what, err.msg);
        return -1;
    }
    return pt_session_stop_step(s);
}

static void test_rejoin_with_held_peer(void)
{
    if (system("rm -rf " TEST_DIR) != 0) {
    }
    pt_error err = {0};
    REQUIRE(pt_mkdir_p(TEST_DIR "/ckpt", &err) == 0);
    pt_plan *plan_a = NULL, *plan_b = NULL;
    pt_model_spec *spec = NULL;
    REQUIRE(pt_plan_parse(PLAN_A, "plan A", &plan_a, &err) == 0);
    REQUIRE(pt_plan_parse(PLAN_B, "plan B", &plan_b, &err) == 0);
    REQUIRE(pt_model_spec_load(pt_test_path("tests/data/run/tiny-mlp.json"), &spec, &err) == 0);
    hold h = {0};
    pt_run_config cfg = {.run_dir = TEST_DIR,
                         .agents = AGENTS,
                         .listener = on_note,
                         .listener_user = &h,
                         .local_keys = 1};
    pt_run *run = NULL;
    REQUIRE(pt_run_create(&cfg, &run, &err) == 0);
    h.s = pt_run_session(run);
    REQUIRE(pt_run_spawn(run, NULL, &err) == 0); /* agent i on device i */
    CHECK_MSG(pt_run_wait_agents(run, WAIT_MS, &err) == 0, "%s", err.msg);
    h.held_idx = pt_session_find_agent(h.s, pt_run_agent_name(run, HELD));
    REQUIRE(h.held_idx >= 0);
    h.pid = pt_session_agent_at(h.s, h.held_idx)->pid;
    pt_run_job job = {spec, "synthetic", 7, TEST_DIR "/ckpt", 0};
    int64_t step = train_round(run, plan_a, &job, 0, WAIT_MS, "first plan A");
    REQUIRE(step > 0);
    for (int round = 0; round < ROUNDS; round++) {
        step = train_round(run, plan_b, &job, step, WAIT_MS, "plan B");
        REQUIRE(step > 0);
        /* the rejoin: agent HELD stays in generation B until the others acked */
        h.gen = pt_session_generation(h.s) + 1;
        h.released = 0;
        REQUIRE(kill((pid_t)h.pid, SIGSTOP) == 0);
        char what[64];
        snprintf(what, sizeof what, "round %d: rejoin", round);
        int64_t next = train_round(run, plan_a, &job, step, REJOIN_BOUND_MS, what);
        if (!h.released)
            kill((pid_t)h.pid, SIGCONT);
        CHECK_MSG(h.released && h.others_acked == AGENTS - 1,
                  "round %d: the held agent was let go by the test only %s", round,
                  h.released ? "before the others acked" : "after the assign");
        h.gen = 0;
        REQUIRE(next > step);
        printf("round %d: rejoined with a held peer, stopped at step %lld\n", round,
               (long long)next);
        step = next;
    }
    pt_run_end(run, "test over");
    pt_run_destroy(&run);
    pt_plan_free(&plan_a);
    pt_plan_free(&plan_b);
    pt_model_spec_free(&spec);
}

PT_TEST_MAIN({"rejoin_with_held_peer", test_rejoin_with_held_peer})

/* Simulated agents (pipetop-agent --simulate --count N, agent/sim.c) under
 * the run controller, over the real sockets with per-run CURVE keys:
 *
 * - N agents of one process register, take a 4-stage plan (N/4 replicas a
 *   stage), run until stopped; a stop at one step brings every agent there
 *   and commits a checkpoint (a simulated one: "simulated": true, no
 *   layers); a new plan (2 stages, the devices swapped) is applied, resuming
 *   at that step, and 20 more steps finish on every agent;
 * - the record holds, for every agent, the metrics of every step of both
 *   generations (its own frame, or outside the full-detail windows of a
 *   stage of PT_RECORD_STAGE_FOLD_MIN replicas or more, its stage's sfold
 *   line counting every replica's frame), and its register says "simulated";
 * - the op events in the record equal the simulator's timeline of the same
 *   plan on the same profile and topology (no noise): each op's kind and
 *   duration, and its start within its program run, for every worker;
 * - `pipetop status` of the record says the agents were simulated;
 * - faults: from a straggler's step on, every agent's iteration is the
 *   simulator's with the straggler's device that much slower (the others
 *   wait for it, in step, as in a synchronous run), and an injected failure
 *   fails the run naming the agent.
 *
 * N: PT_SIM_AGENTS, default AGENTS_DEFAULT (a multiple of 4). ctest's
 * run_sim_1024 (label scale, registered with -DPT_SCALE_TESTS=ON) runs it
 * with 1,024, whose agents and console wait out each other's silence (a
 * process starved on a shared machine); bench/sim_control times the same
 * phases with the protocol's bounds. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/simulate.h"
#include "protocol/ckpt_index.h"
#include "protocol/clock.h"
#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"
#include "tests/test.h"
#include "tui/control/run.h"
#include "tui/control/session.h"

#define TEST_DIR "run_sim_itest.d"
#define AGENTS_DEFAULT                                                                             \
    96 /* above PT_SESSION_NAMES_PER_KEY (64): the names are bound to the key                      \
        */
#define WAIT_MS     120000
#define FIRST_STEPS 20 /* run until at least this many steps are done, then stop */
#define MORE_STEPS  20
#define CHECK_STEP  1 /* a step whose op events all go out (EVENTS_HEAD_STEPS) */
#define PLAN_CAP    (1 << 20)
#define NS_TOL      2 /* rounding of seconds to ns, twice */

static int agents_n(void)
{
    const char *e = getenv("PT_SIM_AGENTS");
    int n = e ? atoi(e) : AGENTS_DEFAULT;
    return n >= 4 && n % 4 == 0 ? n : AGENTS_DEFAULT;
}

/* A plan of tiny-mlp: stages cut at cuts[], each with r replicas on
 * devices first_dev + s * r ... (wrapping at n). */
static char *plan_text(int n, int stages, const int *cuts, const char *kind, int first_dev)
{
    char *t = malloc(PLAN_CAP);
    int r = n / stages, len = 0;
    len += snprintf(t + len, PLAN_CAP - len,
                    "{\"v\":1,\"model\":\"tiny-mlp\",\"layers\":8,"
                    "\"microbatch\":{\"size\":%d,\"count\":4},\"schedule\":{\"kind\":\"%s\"},"
                    "\"optimizer\":{\"kind\":\"sgd\",\"lr\":0.01},\"stages\":[",
                    n, kind);
    for (int s = 0; s < stages; s++) {
        len += snprintf(t + len, PLAN_CAP - len, "%s{\"layers\":[%d,%d],\"replicas\":[",
                        s ? "," : "", cuts[s], cuts[s + 1]);
        for (int k = 0; k < r; k++)
            len += snprintf(t + len, PLAN_CAP - len, "%s%d", k ? "," : "",
                            (first_dev + s * r + k) % n);
        len += snprintf(t + len, PLAN_CAP - len, "]}");
    }
    snprintf(t + len, PLAN_CAP - len, "]}");
    return t;
}

static void wait_state(pt_run *run, pt_run_state want, const char *what)
{
    int64_t until = pt_clock_ns() / 1000000 + WAIT_MS;
    while (pt_run_get_state(run) != want && pt_run_get_state(run) != PT_RUN_FAILED &&
           pt_clock_ns() / 1000000 < until)
        pt_run_poll(run, 20, NULL);
    pt_error err = {0};
    pt_run_failure(run, &err);
    CHECK_MSG(pt_run_get_state(run) == want, "waiting for %s: state %s %s", what,
              pt_run_state_name(pt_run_get_state(run)), err.msg);
}

/* Polls until the console has every agent's metrics up to `step` (its
 * newest metrics message ends there or later): with 1,024 agents on a
 * loaded machine the console's telemetry lags their heartbeats by seconds,
 * and what is still queued when the plan changes is stale, or when the run
 * ends is not recorded. */
static void wait_metrics(pt_run *run, int64_t step, const char *what)
{
    pt_session *s = pt_run_session(run);
    int n = pt_session_agent_count(s), behind = -1;
    int64_t until = pt_clock_ns() / 1000000 + WAIT_MS;
    for (;;) {
        behind = -1;
        for (int i = 0; i < n && behind < 0; i++) {
            const pt_session_agent *a = pt_session_agent_at(s, i);
            if (!a->has_metrics || a->metrics.step < step)
                behind = i;
        }
        if (behind < 0 || pt_clock_ns() / 1000000 >= until)
            break;
        pt_run_poll(run, 20, NULL);
    }
    const pt_session_agent *a = behind >= 0 ? pt_session_agent_at(s, behind) : NULL;
    CHECK_MSG(!a, "waiting for the metrics of %s (step %lld): %s has sent step %lld", what,
              (long long)step, a ? a->id : "",
              a && a->has_metrics ? (long long)a->metrics.step : -1LL);
}

/* ---- the record ----------------------------------------------------------------------- */

typedef struct agent_steps {
    char id[PT_MSG_ID_MAX];
    uint8_t *seen; /* [steps_cap]: bit 0 gen 1, bit 1 gen 2 */
    int simulated;
} agent_steps;

typedef struct record_view {
    int n, steps_cap;
    agent_steps *a;
    /* CHECK_STEP's op events of generation 1, by worker, in arrival order */
    pt_msg_event **ev;
    int *nev;
    /* metrics frames an sfold line folded (a stage of PT_RECORD_STAGE_FOLD_MIN
     * replicas or more, outside the full-detail windows), by generation
     * (1, 2), stage and step */
    int *sfold_metrics;
} record_view;

#define SF_STAGES 8 /* of either plan */

static int *sfold_at(const record_view *v, int gen, int stage, int64_t step)
{
    if (gen < 1 || gen > 2 || stage < 0 || stage >= SF_STAGES || step < 0 || step >= v->steps_cap)
        return NULL;
    return &v->sfold_metrics[((size_t)(gen - 1) * SF_STAGES + (size_t)stage) *
                                 (size_t)v->steps_cap +
                             (size_t)step];
}

/* An sfold line: how many metrics frames of its stage's step it folded. */
static void take_sfold(record_view *v, const cJSON *o)
{
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(o, "gen"),
                *stage = cJSON_GetObjectItemCaseSensitive(o, "stage"),
                *step = cJSON_GetObjectItemCaseSensitive(o, "step"),
                *frames = cJSON_GetObjectItemCaseSensitive(o, "frames");
    const cJSON *metrics = cJSON_GetArrayItem(frames, 1);
    CHECK_MSG(cJSON_IsNumber(gen) && cJSON_IsNumber(stage) && cJSON_IsNumber(step) &&
                  cJSON_IsNumber(metrics),
              "an sfold line without gen, stage, step or frames");
    int *c = cJSON_IsNumber(metrics)
                 ? sfold_at(v, gen->valueint, stage->valueint, (int64_t)step->valuedouble)
                 : NULL;
    if (c)
        *c += metrics->valueint;
}

/* Whether agent k's metrics of step st (generation gen) are in an sfold
 * line: device k's stage in the plan of gen folded per stage, every one of
 * its replicas' frames counted (simulated agent k is device k). */
static int folded_seen(const record_view *v, const pt_plan *plan, int gen, int k, int64_t st)
{
    for (int s = 0; s < plan->stage_count; s++)
        for (int r = 0; r < plan->stages[s].replica_count; r++)
            if (plan->stages[s].replicas[r] == k) {
                const int *c = sfold_at(v, gen, s, st);
                return c && plan->stages[s].replica_count >= PT_RECORD_STAGE_FOLD_MIN &&
                       *c == plan->stages[s].replica_count;
            }
    return 0;
}

static agent_steps *agent_of(record_view *v, const char *id)
{
    for (int k = 0; k < v->n; k++)
        if (!strcmp(v->a[k].id, id))
            return &v->a[k];
    return NULL;
}

static void take_msg(record_view *v, const pt_msg *m, const pt_program *prog)
{
    agent_steps *a = agent_of(v, m->agent);
    if (!a)
        return;
    if (m->type == PT_MSG_REGISTER) {
        for (int c = 0; c < m->u.reg.cap_count; c++)
            a->simulated |= !strcmp(m->u.reg.caps[c], PT_MSG_CAP_SIMULATED);
    } else if (m->type == PT_MSG_METRICS && (m->gen == 1 || m->gen == 2)) {
        const pt_msg_metrics *mt = &m->u.metrics;
        int64_t lo = mt->step - (mt->steps > 1 ? mt->steps - 1 : 0);
        for (int64_t s = lo; s <= mt->step && s < v->steps_cap; s++)
            a->seen[s] |= (uint8_t)m->gen;
    } else if (m->type == PT_MSG_EVENTS && m->gen == 1) {
        for (int k = 0; k < m->u.events.count; k++) {
            const pt_msg_event *e = &m->u.events.events[k];
            if (e->step != CHECK_STEP || e->stage >= prog->stage_count)
                continue;
            int w = prog->stage_worker[e->stage] + e->replica;
            v->ev[w] = realloc(v->ev[w], (size_t)(v->nev[w] + 1) * sizeof *v->ev[w]);
            v->ev[w][v->nev[w]++] = *e;
        }
    }
}

/* Reads every message the record holds (received frames, either channel). */
static void read_record(record_view *v, const pt_program *prog)
{
    char *text = NULL;
    pt_error err = {0};
    REQUIRE(pt_file_read(TEST_DIR "/" PT_RUN_RECORD_FILE, &text, NULL, &err) == 0);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(o, "msg");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
        char *body = msg && cJSON_IsString(kind) && !strcmp(kind->valuestring, "recv")
                         ? cJSON_PrintUnformatted(msg)
                         : NULL;
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "sfold"))
            take_sfold(v, o);
        pt_msg m;
        if (body && pt_msg_decode(body, strlen(body), "record", &m, &err) == 0) {
            take_msg(v, &m, prog);
            pt_msg_clear(&m);
        }
        free(body);
        cJSON_Delete(o);
    }
    free(text);
}

/* Every worker's op events of CHECK_STEP against the simulator's. */
static void check_timings(const record_view *v, const pt_program *prog, const pt_sim_result *res)
{
    int bad = 0;
    for (int w = 0; w < prog->worker_count; w++) {
        const pt_worker *pw = &prog->workers[w];
        int n = pw->op_end - pw->op_begin;
        CHECK_MSG(v->nev[w] == n, "worker %d: %d op events of step %d, the program has %d", w,
                  v->nev[w], CHECK_STEP, n);
        if (v->nev[w] != n)
            continue;
        const pt_sim_event *s0 = &res->events[pw->op_begin];
        const pt_msg_event *e0 = &v->ev[w][0];
        for (int i = 0; i < n && bad < 10; i++) {
            const pt_sim_event *s = &res->events[pw->op_begin + i];
            const pt_msg_event *e = &v->ev[w][i];
            int64_t want_dur = llround((s->end - s->start) * 1e9);
            int64_t want_off = llround(s->start * 1e9) - llround(s0->start * 1e9);
            int64_t dur = e->end_ns - e->start_ns, off = e->start_ns - e0->start_ns;
            int ok = e->op == prog->ops[pw->op_begin + i].kind && llabs(dur - want_dur) <= NS_TOL &&
                     llabs(off - want_off) <= NS_TOL;
            CHECK_MSG(ok,
                      "worker %d op %d (%s): duration %lld ns at +%lld ns, the simulator's %lld "
                      "ns at +%lld ns",
                      w, i, pt_op_name(e->op), (long long)dur, (long long)off, (long long)want_dur,
                      (long long)want_off);
            bad += !ok;
        }
    }
}

/* `pipetop status` and `pipetop export` of the record label the run simulated. */
static void check_status(int n)
{
    char cmd[512], line[512], want[128];
    const char *bin = getenv("PT_BUILD_DIR");
    snprintf(cmd, sizeof cmd, "%s/pipetop status " TEST_DIR " 2>&1", bin ? bin : ".");
    snprintf(want, sizeof want, "simulated: %d of %d agents", n, n);
    FILE *f = popen(cmd, "r");
    REQUIRE(f);
    int found = 0;
    while (fgets(line, sizeof line, f))
        found |= strstr(line, want) != NULL;
    pclose(f);
    CHECK_MSG(found, "pipetop status does not say \"%s\"", want);
    /* and its export: the trace's metadata and title */
    snprintf(cmd, sizeof cmd,
             "%s/pipetop export " TEST_DIR " --last 2 --trace " TEST_DIR "/sim-trace.json 2>&1",
             bin ? bin : ".");
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    char *text = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_file_read(TEST_DIR "/sim-trace.json", &text, NULL, &err) == 0, "%s", err.msg);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(o, "otherData");
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(meta, "title");
    CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "simulated")) &&
                  cJSON_IsString(title) && !strncmp(title->valuestring, "simulated agents: ", 18),
              "the export does not say the agents were simulated: %s",
              cJSON_IsString(title) ? title->valuestring : "(no title)");
    cJSON_Delete(o);
    free(text);
}

/* ---- the run ------------------------------------------------------------------------------- */

static void write_topology(int n)
{
    char t[512];
    snprintf(t, sizeof t,
             "{\"v\":1,\"name\":\"sim-agents-%d\",\"nodes\":[{\"name\":\"node\",\"repeat\":%d,"
             "\"count\":8,\"device\":{\"name\":\"gpu\",\"memory_gib\":16,\"speed\":1.0}}],"
             "\"links\":{\"intra\":{\"bandwidth_gbps\":100,\"latency_us\":5},"
             "\"inter\":{\"bandwidth_gbps\":25,\"latency_us\":20}}}",
             n, (n + 7) / 8);
    pt_error err = {0};
    REQUIRE(pt_file_write_atomic(TEST_DIR "/topology.json", t, strlen(t), &err) == 0);
}

static void test_simulated(void)
{
    int n = agents_n();
    if (system("rm -rf " TEST_DIR) != 0) {
    }
    pt_error err = {0};
    REQUIRE(pt_mkdir_p(TEST_DIR "/ckpt", &err) == 0);
    write_topology(n);
    const int cuts4[] = {0, 2, 4, 6, 8}, cuts2[] = {0, 5, 8};
    char *pt1 = plan_text(n, 4, cuts4, "1f1b-flush", 0),
         *pt2 = plan_text(n, 2, cuts2, "gpipe", n / 2);
    pt_plan *plan = NULL, *plan2 = NULL;
    pt_model_spec *spec = NULL;
    pt_profile *prof = NULL;
    pt_topology *topo = NULL;
    REQUIRE(pt_plan_parse(pt1, "plan", &plan, &err) == 0);
    REQUIRE(pt_plan_parse(pt2, "plan2", &plan2, &err) == 0);
    REQUIRE(pt_model_spec_load(pt_test_path("tests/data/run/tiny-mlp.json"), &spec, &err) == 0);
    const char *prof_path = pt_test_path("tests/data/sim-agents/profile.json");
    REQUIRE(pt_profile_load(prof_path, &prof, &err) == 0);
    REQUIRE(pt_topology_load(TEST_DIR "/topology.json", &topo, &err) == 0);

    pt_run_config cfg = {.run_dir = TEST_DIR, .agents = n, .local_keys = 1, .local_ipc = 1};
    pt_run *run = NULL;
    REQUIRE(pt_run_create(&cfg, &run, &err) == 0);
    pt_session *s = pt_run_session(run);
    /* more agents than the default: one process of them and the console
     * share 2 cores with whatever else runs, and a starved process misses
     * the heartbeat bounds; both sides then wait out the other's silence
     * (bench/sim_control measures these phases with the bounds) */
    int patience = n > AGENTS_DEFAULT ? WAIT_MS : 0;
    REQUIRE(pt_run_set_agents(run, patience, TEST_DIR "/ckpt", &err) == 0);
    pt_run_sim sim = {prof_path, TEST_DIR "/topology.json", 0, NULL, NULL, patience};
    REQUIRE(pt_run_set_simulate(run, &sim, &err) == 0);
    int64_t t0 = pt_clock_ns();
    REQUIRE(pt_run_spawn(run, NULL, &err) == 0);
    CHECK_MSG(pt_run_wait_agents(run, WAIT_MS, &err) == 0, "%s", err.msg);
    int64_t t1 = pt_clock_ns();
    pt_run_job job = {spec, "synthetic", 7, TEST_DIR "/ckpt", 0};
    CHECK_MSG(pt_run_assign(run, plan, &job, 0, WAIT_MS, &err) == 0, "assign: %s", err.msg);
    int64_t t2 = pt_clock_ns();
    REQUIRE(pt_run_start(run, 0, &err) == 0);
    int64_t until = pt_clock_ns() / 1000000 + WAIT_MS;
    while (pt_session_min_step(s) < FIRST_STEPS - 1 && pt_clock_ns() / 1000000 < until &&
           pt_run_get_state(run) == PT_RUN_TRAINING)
        pt_run_poll(run, 20, NULL);
    pt_run_failure(run, &err);
    CHECK_MSG(pt_session_min_step(s) >= FIRST_STEPS - 1,
              "waiting for step %d on every agent: %lld, run %s %s", FIRST_STEPS - 1,
              (long long)pt_session_min_step(s), pt_run_state_name(pt_run_get_state(run)), err.msg);
    REQUIRE(pt_session_min_step(s) >= FIRST_STEPS - 1);
    int64_t t3 = pt_clock_ns();
    CHECK_MSG(pt_run_stop(run, "test stop", WAIT_MS, &err) == 0, "stop: %s", err.msg);
    int64_t t4 = pt_clock_ns();
    int64_t stop = pt_session_stop_step(s);
    CHECK(stop >= FIRST_STEPS);
    for (int i = 0; i < n; i++) {
        const pt_session_agent *a = pt_session_agent_at(s, i);
        CHECK_MSG(a->stop_step == stop && a->ckpt_step == stop, "%s stopped at %lld, saved %lld",
                  a->id, (long long)a->stop_step, (long long)a->ckpt_step);
    }
    CHECK(pt_session_committed_step(s) == stop);
    pt_ckpt_index *ix = NULL;
    char dir[64];
    snprintf(dir, sizeof dir, TEST_DIR "/ckpt/step-%lld", (long long)stop);
    CHECK_MSG(pt_ckpt_index_load(dir, &ix, &err) == 0, "%s", err.msg);
    CHECK(ix && ix->simulated && ix->step == stop && ix->layer_count == 0);
    pt_ckpt_index_free(&ix);

    wait_metrics(run, stop - 1, "the first plan's steps");
    int64_t resume = -1;
    CHECK_MSG(pt_run_restart(run, plan2, WAIT_MS, &resume, &err) == 0, "restart: %s", err.msg);
    CHECK(resume == stop);
    REQUIRE(pt_run_start(run, MORE_STEPS, &err) == 0);
    wait_state(run, PT_RUN_FINISHED, "the new plan's steps");
    wait_metrics(run, stop + MORE_STEPS - 1, "the new plan's steps");
    for (int i = 0; i < n; i++) {
        const pt_session_agent *a = pt_session_agent_at(s, i);
        CHECK_MSG(a->gen == 2 && a->step == stop + MORE_STEPS - 1, "%s: gen %lld step %lld", a->id,
                  (long long)a->gen, (long long)a->step);
    }
    printf("%d simulated agents: registered in %.2f s, assigned in %.2f s, stopped at step %lld "
           "in %.2f s\n",
           n, (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9, (long long)stop,
           (double)(t4 - t3) / 1e9);
    pt_run_end(run, "test over");

    /* the record: every agent's steps, its label, and the op timings */
    record_view v = {n,   (int)(stop + MORE_STEPS + 1), calloc((size_t)n, sizeof *v.a), NULL, NULL,
                     NULL};
    v.sfold_metrics = calloc((size_t)2 * SF_STAGES * (size_t)v.steps_cap, sizeof *v.sfold_metrics);
    for (int k = 0; k < n; k++) {
        snprintf(v.a[k].id, sizeof v.a[k].id, "%s", pt_run_agent_name(run, k));
        v.a[k].seen = calloc((size_t)v.steps_cap, 1);
    }
    /* the record closed: a folded stage's last steps are written at the end */
    pt_run_destroy(&run);
    pt_cost *cost = NULL;
    pt_sim *sm = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    REQUIRE(pt_cost_new(prof, topo, &cost, &err) == 0 && pt_sim_new(&sm) == 0);
    REQUIRE(pt_sim_plan(sm, plan, cost, NULL, &prog, &res, &err) == 0);
    v.ev = calloc((size_t)prog.worker_count, sizeof *v.ev);
    v.nev = calloc((size_t)prog.worker_count, sizeof *v.nev);
    read_record(&v, &prog);
    for (int k = 0; k < n; k++) {
        CHECK_MSG(v.a[k].simulated, "%s registered without \"simulated\"", v.a[k].id);
        int missing = 0;
        int64_t first_missing = -1;
        for (int64_t st = 0; st < stop + MORE_STEPS; st++) {
            int gen = st < stop ? 1 : 2;
            int miss =
                !(v.a[k].seen[st] & gen) && !folded_seen(&v, gen == 1 ? plan : plan2, gen, k, st);
            if (miss && first_missing < 0)
                first_missing = st;
            missing += miss;
        }
        CHECK_MSG(missing == 0,
                  "%s: %d of steps 0..%lld have no metrics in the record (first: %lld)", v.a[k].id,
                  missing, (long long)(stop + MORE_STEPS - 1), (long long)first_missing);
        free(v.a[k].seen);
    }
    check_timings(&v, &prog, &res);
    check_status(n);
    for (int w = 0; w < prog.worker_count; w++)
        free(v.ev[w]);
    free(v.ev);
    free(v.nev);
    free(v.a);
    free(v.sfold_metrics);
    pt_program_release(&prog);
    pt_sim_free(&sm);
    pt_cost_free(&cost);
    pt_plan_free(&plan);
    pt_plan_free(&plan2);
    pt_model_spec_free(&spec);
    pt_profile_free(&prof);
    pt_topology_free(&topo);
    free(pt1);
    free(pt2);
}

/* A run of 8 agents (2 stages x 4 replicas) with one of pt_run_sim's faults,
 * in its own folder; the caller ends it. */
static void fault_run(const char *dir, const char *straggler, const char *fail, pt_plan **plan,
                      pt_run **out)
{
    char cmd[256], topo[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) {
    }
    pt_error err = {0};
    REQUIRE(pt_mkdir_p(dir, &err) == 0);
    snprintf(topo, sizeof topo, "%s/topology.json", dir);
    const char *t = "{\"v\":1,\"name\":\"eight\",\"nodes\":[{\"name\":\"n\",\"count\":8,"
                    "\"device\":{\"name\":\"gpu\",\"memory_gib\":16,\"speed\":1.0}}],"
                    "\"links\":{\"intra\":{\"bandwidth_gbps\":100,\"latency_us\":5},"
                    "\"inter\":{\"bandwidth_gbps\":25,\"latency_us\":20}}}";
    REQUIRE(pt_file_write_atomic(topo, t, strlen(t), &err) == 0);
    const int cuts[] = {0, 4, 8};
    char *pt = plan_text(8, 2, cuts, "1f1b-flush", 0);
    REQUIRE(pt_plan_parse(pt, "plan", plan, &err) == 0);
    free(pt);
    pt_run_config cfg = {.run_dir = dir, .agents = 8, .local_keys = 1, .local_ipc = 1};
    pt_run *run = NULL;
    REQUIRE(pt_run_create(&cfg, &run, &err) == 0);
    pt_run_sim sim = {
        pt_test_path("tests/data/sim-agents/profile.json"), topo, 0, straggler, fail, 0};
    REQUIRE(pt_run_set_simulate(run, &sim, &err) == 0);
    REQUIRE(pt_run_spawn(run, NULL, &err) == 0);
    *out = run;
    CHECK_MSG(pt_run_wait_agents(run, WAIT_MS, &err) == 0, "%s", err.msg);
}

/* The simulator's iteration of plan on the fault runs' profile and
 * topology, device `slow` (>= 0) 1 + frac times slower: *ms. */
static void sim_iter_ms(const char *dir, const pt_plan *plan, int slow, double frac, double *ms)
{
    *ms = NAN;
    char topo_path[256];
    snprintf(topo_path, sizeof topo_path, "%s/topology.json", dir);
    pt_profile *prof = NULL;
    pt_topology *topo = NULL;
    pt_cost *cost = NULL;
    pt_sim *sm = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    REQUIRE(pt_profile_load(pt_test_path("tests/data/sim-agents/profile.json"), &prof, &err) == 0);
    REQUIRE(pt_topology_load(topo_path, &topo, &err) == 0);
    if (slow >= 0)
        topo->devices[slow].speed /= 1.0 + frac;
    REQUIRE(pt_cost_new(prof, topo, &cost, &err) == 0 && pt_sim_new(&sm) == 0);
    REQUIRE(pt_sim_plan(sm, plan, cost, NULL, &prog, &res, &err) == 0);
    *ms = res.makespan_s * 1e3 / (prog.window_count > 0 ? prog.window_count : 1);
    pt_program_release(&prog);
    pt_sim_free(&sm);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

/* --straggler: agent 1 (device 1) runs 50 % longer from step 2 on, and the
 * others wait for it: every agent's iteration is the simulator's with device
 * 1 slower; --fail: agent 5 fails the run at step 3, saying so. */
static void test_faults(void)
{
    pt_error err = {0};
    pt_model_spec *spec = NULL;
    pt_plan *plan = NULL;
    REQUIRE(pt_model_spec_load(pt_test_path("tests/data/run/tiny-mlp.json"), &spec, &err) == 0);
    pt_run_job job = {spec, "synthetic", 7, NULL, 0};
    pt_run *run = NULL;
    fault_run(TEST_DIR "-straggler", "1:50:2", NULL, &plan, &run);
    REQUIRE(run);
    CHECK_MSG(pt_run_assign(run, plan, &job, 0, WAIT_MS, &err) == 0, "assign: %s", err.msg);
    REQUIRE(pt_run_start(run, 6, &err) == 0);
    wait_state(run, PT_RUN_FINISHED, "6 steps");
    pt_session *s = pt_run_session(run);
    int i1 = pt_session_find_agent(s, pt_run_agent_name(run, 1));
    int i0 = pt_session_find_agent(s, pt_run_agent_name(run, 0));
    REQUIRE(i0 >= 0 && i1 >= 0);
    /* the newest fold covers steps past 2 only when it began there: compare
     * the last step's pace through the fold's mean */
    double slow = pt_session_agent_at(s, i1)->metrics.iter_ms;
    double other = pt_session_agent_at(s, i0)->metrics.iter_ms;
    double plain, held;
    sim_iter_ms(TEST_DIR "-straggler", plan, -1, 0, &plain);
    sim_iter_ms(TEST_DIR "-straggler", plan, 1, 0.5, &held);
    CHECK_MSG(held > 1.2 * plain, "device 1 50 %% slower: %.3f ms an iteration, %.3f ms without",
              held, plain);
    CHECK_MSG(fabs(slow - other) <= 0.01 * slow && slow > 1.2 * plain,
              "the straggler's iteration %.3f ms, another's %.3f ms (the simulator: %.3f ms, "
              "%.3f ms with the straggler)",
              slow, other, plain, held);
    pt_run_end(run, "test over");
    pt_run_destroy(&run);
    pt_plan_free(&plan);

    run = NULL;
    fault_run(TEST_DIR "-fail", NULL, "5:3", &plan, &run);
    REQUIRE(run);
    CHECK_MSG(pt_run_assign(run, plan, &job, 0, WAIT_MS, &err) == 0, "assign: %s", err.msg);
    REQUIRE(pt_run_start(run, 0, &err) == 0);
    wait_state(run, PT_RUN_FAILED, "the failure");
    err.msg[0] = '\0';
    CHECK(pt_run_failure(run, &err) == 1);
    CHECK_STR_CONTAINS(err.msg, pt_run_agent_name(run, 5));
    CHECK_STR_CONTAINS(err.msg, "simulated failure at step 3");
    pt_run_end(run, "test over");
    pt_run_destroy(&run);
    pt_plan_free(&plan);
    pt_model_spec_free(&spec);
}

PT_TEST_MAIN({"simulated", test_simulated}, {"faults", test_faults})

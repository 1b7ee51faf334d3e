/* One definition of busy and bubble (protocol/op.h): `pipetop run`'s summary
 * (tui/run_report) and the console's stats view (pt_tline_busy_fracs over
 * the store's timeline) are fed the same events and must print the same
 * figure, which is compute time / the time the steps' spans occupy: not the
 * iteration time the agents report, not the hull of the steps. */
#include "tests/test.h"

#include "protocol/fileio.h"
#include "tests/planner/sched_fixture.h"
#include "tui/control/run_report.h"
#include "tui/record/store.h"

#define MS       1000000LL /* ns */
#define STEPS    4
#define ITER_MS  30.0 /* reported by the metrics: deliberately not the span */
#define N_EVENTS 5

/* One step of a 2-stage pipeline starting at base (ms): stage 0 computes
 * 4 + 6 + 1 ms, stage 1 4 + 4 + 1 ms; the step spans [base, base + 21). */
static void step_events(int stage, int64_t step, int64_t base, pt_msg_event *ev)
{
    static const struct {
        pt_op_kind op;
        int a, b;
    } s0[N_EVENTS] = {{PT_OP_FWD, 0, 4},
                      {PT_OP_SEND_ACT, 4, 5},
                      {PT_OP_RECV_GRAD, 5, 14},
                      {PT_OP_BWD, 14, 20},
                      {PT_OP_OPT_STEP, 20, 21}},
      s1[N_EVENTS] = {{PT_OP_RECV_ACT, 0, 5},
                      {PT_OP_FWD, 5, 9},
                      {PT_OP_BWD, 9, 13},
                      {PT_OP_SEND_GRAD, 13, 14},
                      {PT_OP_OPT_STEP, 14, 15}};
    for (int i = 0; i < N_EVENTS; i++) {
        memset(&ev[i], 0, sizeof ev[i]);
        ev[i].stage = stage;
        ev[i].step = step;
        ev[i].op = stage ? s1[i].op : s0[i].op;
        ev[i].mb = pt_op_has_one_mb(ev[i].op) ? 0 : -1;
        ev[i].version = -1;
        ev[i].start_ns = (base + (stage ? s1[i].a : s0[i].a)) * MS;
        ev[i].end_ns = (base + (stage ? s1[i].b : s0[i].b)) * MS;
    }
}

static void test_report_and_stats_agree(void)
{
    pt_plan *plan = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_load(pt_test_path("tests/data/run/plan-a.json"), &plan, &err) == 0);
    REQUIRE(plan->stage_count == 2 && pt_plan_device_count(plan) == 2);
    pt_run_report *rep = pt_run_report_new(plan, 0, STEPS);
    pt_store *store = NULL;
    REQUIRE(rep && pt_store_new(0, &store) == 0);
    /* steps at 0, 25, 50 (gaps of 4 ms between them) and 68, which overlaps
     * the step before it by 3 ms as an asynchronous schedule's would */
    static const int64_t base[STEPS] = {0, 25, 50, 68};
    for (int64_t k = 0; k < STEPS; k++)
        for (int w = 0; w < 2; w++) {
            pt_msg_event ev[N_EVENTS];
            step_events(w, k, base[k], ev);
            pt_msg_events batch = {N_EVENTS, ev};
            pt_run_report_events(rep, w, &batch);
            CHECK(pt_store_events(store, ev, N_EVENTS, 1) == N_EVENTS);
            pt_msg_metrics m;
            memset(&m, 0, sizeof m);
            m.stage = w;
            m.step = k;
            m.loss = 1.0;
            m.iter_ms = ITER_MS;
            m.samples_per_s = 100;
            pt_run_report_metrics(rep, w, &m);
        }
    const pt_run_figures *f = pt_run_report_figures(rep);
    REQUIRE(f->worker_count == 2 && f->steps_measured == STEPS - 1); /* step 0 left out */

    /* the stats view over the same steps */
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    REQUIRE(pt_store_timeline(store, 1, STEPS - 1, 0, &tl, NULL) == 0);
    REQUIRE(tl.row_count == 2);
    double busy[2];
    REQUIRE(pt_tline_busy_fracs(&tl, busy) == 0);

    /* steps 1..3 occupy [25,46) + [50,89) = 60 ms; 3 x 11 and 3 x 9 ms compute */
    const double want[2] = {33.0 / 60.0, 27.0 / 60.0};
    for (int w = 0; w < 2; w++) {
        int row = pt_tline_find_row(&tl, w, 0);
        REQUIRE(row >= 0);
        CHECK_NEAR(f->workers[w].busy, busy[row], 1e-9);
        CHECK_NEAR(f->workers[w].busy, want[w], 1e-9);
        CHECK_NEAR(f->workers[w].bubble, 1 - want[w], 1e-9);
        /* what the old definitions gave, so the figure above is not them */
        CHECK(fabs(f->workers[w].busy - (want[w] * 60.0) / (3 * ITER_MS)) > 0.05);
        CHECK(fabs(busy[row] - (want[w] * 60.0) / (89.0 - 25.0)) > 0.02);
    }
    pt_tline_release(&tl);
    pt_store_free(&store);
    pt_run_report_free(&rep);
    pt_plan_free(&plan);
}

/* A simulated synchronous program is one step spanning [0, makespan): the
 * stats view of its timeline gives the simulator's own busy fractions. */
static void test_stats_of_a_prediction_is_the_simulator(void)
{
    static const pt_sched_kind kinds[] = {PT_SCHED_GPIPE, PT_SCHED_DAPPLE, PT_SCHED_1F1B_FLUSH};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        pt_profile *prof = fx_profile(6, 1.0, 2.0, 1 << 20, 1 << 16, 8);
        pt_topology *topo = fx_topo(1, 3, 1e9, 1e-4); /* transfers of about 1 ms */
        pt_plan *plan = fx_plan(kinds[k], 3, 2, NULL, 8, 4);
        pt_cost *cost = NULL;
        pt_sim *sim = NULL;
        pt_error err = {0};
        REQUIRE(prof && topo && plan && pt_cost_new(prof, topo, &cost, &err) == 0);
        REQUIRE(pt_sim_new(&sim) == 0);
        pt_program prog;
        memset(&prog, 0, sizeof prog);
        pt_sim_result res;
        REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err) == 0);
        REQUIRE(prog.synchronous);
        pt_tline tl;
        memset(&tl, 0, sizeof tl);
        REQUIRE(pt_tline_from_sim(&tl, &prog, &res) == 0);
        double busy[3];
        REQUIRE(tl.row_count == 3 && pt_tline_busy_fracs(&tl, busy) == 0);
        for (int w = 0; w < 3; w++) {
            CHECK_NEAR(busy[w], res.workers[w].busy_frac, 1e-9);
            CHECK(res.workers[w].busy_frac > 0.1 && res.workers[w].busy_frac < 0.95);
        }
        pt_tline_release(&tl);
        pt_program_release(&prog);
        pt_sim_free(&sim);
        pt_cost_free(&cost);
        pt_plan_free(&plan);
        pt_topology_free(&topo);
        pt_profile_free(&prof);
    }
}

/* A step whose loss was lost in telemetry (its metrics frame dropped) is
 * known lost once the last stage has reported a later step, and only then:
 * `pipetop run` prints steps in order and passes over such a step instead of
 * waiting for it for ever (a dropped first frame held back every step line). */
static void test_lost_step_is_known(void)
{
    pt_plan *plan = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_load(pt_test_path("tests/data/run/plan-a.json"), &plan, &err) == 0);
    pt_run_report *rep = pt_run_report_new(plan, 0, STEPS);
    REQUIRE(rep);
    pt_msg_metrics m;
    memset(&m, 0, sizeof m);
    m.loss = 1.0;
    m.samples_per_s = 100;
    double loss, rate;
    /* stage 1 (the last) reports step 0 late: nothing is lost yet */
    m.stage = 0;
    m.step = 0;
    pt_run_report_metrics(rep, 0, &m);
    CHECK(!pt_run_report_step(rep, 0, &loss, &rate));
    CHECK(!pt_run_report_step_lost(rep, 0));
    /* the last stage's step 0 frame is dropped; its steps 1 and 2 arrive */
    m.stage = 1;
    for (m.step = 1; m.step <= 2; m.step++)
        pt_run_report_metrics(rep, 1, &m);
    CHECK(pt_run_report_step_lost(rep, 0));
    CHECK(pt_run_report_step(rep, 1, &loss, &rate) && loss == 1.0);
    CHECK(!pt_run_report_step_lost(rep, 1));
    /* its newest step, and one not reached yet, are not lost */
    CHECK(!pt_run_report_step_lost(rep, 2));
    CHECK(!pt_run_report_step_lost(rep, 3));
    pt_run_report_free(&rep);
    pt_plan_free(&plan);
}

PT_TEST_MAIN({"report_and_stats_agree", test_report_and_stats_agree},
             {"lost_step_is_known", test_lost_step_is_known},
             {"stats_of_a_prediction_is_the_simulator",
              test_stats_of_a_prediction_is_the_simulator})

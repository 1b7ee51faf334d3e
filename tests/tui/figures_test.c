/* The headline figures, defined once (protocol/figures.h, tui/record/figures.h):
 * - the measured iteration time is the median of the newest
 *   PT_FIG_WINDOW_STEPS steps, the generation's first step left out: what lies
 *   outside the window cannot move it, half the window lies on each side of
 *   it, and its label says which statistic over how many steps;
 * - from a store it counts only steps every stage replica reported, of the
 *   current generation, and a paused display's step count freezes it;
 * - `pipetop run`'s summary (tui/control/run_report.h) gives the same figure
 *   as the store for the same metrics;
 * - the prediction's label says calibrated (with the run's calibration) or
 *   analytic with the profile's origin, and the run folder's calibration
 *   looked up for a generation is its newest one up to it;
 * - a store's clone is a copy: filling the store afterwards leaves it be. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "tests/test.h"
#include "tui/control/run_report.h"
#include "tui/record/figures.h"

/* How many of v[0..n) are <= x and >= x. */
static void sides(const double *v, int n, double x, int *le, int *ge)
{
    *le = *ge = 0;
    for (int i = 0; i < n; i++) {
        *le += v[i] <= x;
        *ge += v[i] >= x;
    }
}

static void test_median_window(void)
{
    int used = -1;
    CHECK(pt_fig_iter_ms(NULL, 0, &used) == 0 && used == 0);
    double one = 7;
    CHECK(pt_fig_iter_ms(&one, 1, &used) == 7 && used == 1);
    double two[2] = {100, 5}; /* the first (warm-up) step is left out */
    CHECK(pt_fig_iter_ms(two, 2, &used) == 5 && used == 1);
    double three[3] = {100, 4, 6};
    CHECK(pt_fig_iter_ms(three, 3, &used) == 5 && used == 2);
    /* pseudo-random series of every length: the median of the window */
    unsigned seed = 12345;
    for (int n = 2; n <= 60; n++) {
        double v[60], keep[60];
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            v[i] = 10 + (seed >> 16) % 1000 / 10.0;
        }
        memcpy(keep, v, sizeof v);
        double m = pt_fig_iter_ms(v, n, &used);
        int window = n - 1 < PT_FIG_WINDOW_STEPS ? n - 1 : PT_FIG_WINDOW_STEPS;
        CHECK(used == window);
        CHECK(memcmp(keep, v, sizeof(double) * (size_t)n) == 0); /* not reordered */
        int le, ge;
        sides(v + n - window, window, m, &le, &ge);
        CHECK_MSG(2 * le >= window && 2 * ge >= window, "n %d: %g not a median", n, m);
        /* what lies before the window does not move it */
        for (int i = 0; i < n - window; i++)
            v[i] = 1e9;
        CHECK(pt_fig_iter_ms(v, n, NULL) == m);
    }
    char label[PT_FIG_LABEL_MAX];
    CHECK(!strcmp(pt_fig_iter_label(20, label, sizeof label), "median of last 20 steps"));
    CHECK(!strcmp(pt_fig_iter_label(3, label, sizeof label), "median of 3 steps"));
    CHECK(!strcmp(pt_fig_iter_label(0, label, sizeof label), "no complete step yet"));
}

/* A plan of `stages` stages, one replica each. */
static pt_plan *plan_of(int stages)
{
    pt_plan *p = pt_plan_new(stages);
    snprintf(p->model, sizeof p->model, "m");
    p->layer_count = stages;
    p->microbatch_size = 4;
    p->microbatch_count = 2;
    for (int s = 0; s < stages; s++) {
        p->stages[s].first = s;
        p->stages[s].last = s + 1;
        pt_plan_set_replicas(p, s, &s, 1);
    }
    return p;
}

static pt_msg_metrics metrics(int stage, int64_t step, double iter_ms)
{
    pt_msg_metrics m;
    memset(&m, 0, sizeof m);
    m.stage = stage;
    m.step = step;
    m.iter_ms = iter_ms;
    m.loss = NAN;
    m.samples_per_s = 1;
    return m;
}

/* Steps 0..29 of a 2-stage plan, stage 1 slower by step % 7 ms; step 30
 * reported by stage 0 only (still arriving). The store and the run's
 * summary agree; the incomplete step does not count; pausing at a step
 * count freezes the figure. */
static void test_store_and_summary_agree(void)
{
    pt_plan *plan = plan_of(2);
    pt_store *st = NULL;
    REQUIRE(pt_store_new(64, &st) == 0);
    REQUIRE(pt_store_set_plan(st, plan, 1) == 0);
    pt_run_report *rep = pt_run_report_new(plan, 0, 31);
    REQUIRE(rep);
    for (int64_t k = 0; k <= 30; k++)
        for (int s = 0; s < 2; s++) {
            if (k == 30 && s == 1)
                continue;
            pt_msg_metrics m = metrics(s, k, 20 + s * (double)(k % 7) + (k == 0 ? 500 : 0));
            pt_store_metrics(st, &m, 1, k);
            pt_run_report_metrics(rep, s, &m);
        }
    pt_fig_meas f;
    REQUIRE(pt_fig_measure_store(st, -1, &f) == 0);
    const pt_run_figures *rf = pt_run_report_figures(rep);
    CHECK(f.steps == PT_FIG_WINDOW_STEPS && rf->steps_measured == f.steps);
    CHECK_MSG(f.iter_ms == rf->iteration_ms, "store %g, run summary %g", f.iter_ms,
              rf->iteration_ms);
    CHECK(f.last_step == 29); /* step 30 is not complete */
    /* the window is steps 10..29: stage 1's 20 + k % 7 there */
    double want[PT_FIG_WINDOW_STEPS + 1];
    for (int k = 9; k <= 29; k++)
        want[k - 9] = 20 + k % 7;
    CHECK(f.iter_ms == pt_fig_iter_ms(want, PT_FIG_WINDOW_STEPS + 1, NULL));
    CHECK_STR_CONTAINS(f.label, "median of last 20 steps");
    /* paused after the first 12 store steps: steps 1..11 (0 left out) */
    pt_fig_meas p;
    REQUIRE(pt_fig_measure_store(st, 12, &p) == 0);
    CHECK(p.steps == 11 && p.last_step == 11);
    /* a new generation starts afresh: nothing of generation 1 counts */
    REQUIRE(pt_store_set_plan(st, plan, 2) == 0);
    REQUIRE(pt_fig_measure_store(st, -1, &f) == 0);
    CHECK(f.steps == 0 && f.iter_ms == 0);
    pt_run_report_free(&rep);
    pt_store_free(&st);
    pt_plan_free(&plan);
}

/* Telemetry of generation 1 that arrives after generation 2 began (the
 * session records it, counted late) changes neither generation 2's figure
 * nor a replica's newest memory, nor the newest step. */
static void test_late_generation(void)
{
    pt_plan *plan = plan_of(2);
    pt_store *st = NULL;
    REQUIRE(pt_store_new(64, &st) == 0);
    REQUIRE(pt_store_set_plan(st, plan, 1) == 0);
    for (int64_t k = 0; k < 20; k++)
        for (int s = 0; s < 2; s++) {
            pt_msg_metrics m = metrics(s, k, 30);
            pt_store_metrics(st, &m, 1, k);
        }
    REQUIRE(pt_store_set_plan(st, plan, 2) == 0);
    for (int64_t k = 20; k < 40; k++)
        for (int s = 0; s < 2; s++) {
            pt_msg_metrics m = metrics(s, k, 20 + s);
            m.total_peak = 2000;
            pt_store_metrics(st, &m, 2, k);
        }
    pt_msg_event ev = {
        .stage = 0, .replica = 0, .step = 39, .mb = 0, .op = PT_OP_FWD, .start_ns = 1, .end_ns = 2};
    CHECK(pt_store_events(st, &ev, 1, 2) == 1);
    pt_fig_meas before, after;
    REQUIRE(pt_fig_measure_store(st, -1, &before) == 0);
    CHECK(before.steps > 0);
    pt_msg_metrics late = metrics(1, 19, 900);
    late.total_peak = 99999;
    pt_store_metrics(st, &late, 1, 50);
    ev.step = 45; /* no older plan runs ahead; whatever a late frame says */
    CHECK(pt_store_events(st, &ev, 1, 1) == 1);
    REQUIRE(pt_fig_measure_store(st, -1, &after) == 0);
    CHECK_MSG(after.iter_ms == before.iter_ms && after.steps == before.steps,
              "late metrics moved the figure: %g over %d, was %g over %d", after.iter_ms,
              after.steps, before.iter_ms, before.steps);
    const pt_store_mem *mem = pt_store_mem_latest(st, 1, 0);
    CHECK_MSG(mem && mem->total_peak == 2000 && mem->step == 39, "newest memory %lld of step %lld",
              mem ? (long long)mem->total_peak : -1LL, mem ? (long long)mem->step : -1LL);
    CHECK(pt_store_last_step(st) == 39);
    pt_store_free(&st);
    pt_plan_free(&plan);
}

static void test_labels(void)
{
    pt_profile *p = pt_profile_new(1);
    pt_fig_pred f;
    memset(&f, 0, sizeof f);
    snprintf(p->source, sizeof p->source, "measured");
    pt_fig_pred_label(p, -1, &f);
    CHECK(!strcmp(f.kind, "analytic") && !f.calibrated);
    CHECK(!strcmp(f.label, "analytic, measured profile") && !strcmp(f.brief, "analytic"));
    pt_fig_pred_label(p, 3, &f);
    CHECK(!strcmp(f.kind, "calibrated") && f.cal_gen == 3);
    CHECK(!strcmp(f.label, "calibrated g3") && !strcmp(f.brief, "calibrated g3"));
    snprintf(p->origin.kind, sizeof p->origin.kind, "calibrated");
    snprintf(p->origin.run, sizeof p->origin.run, "runs/x");
    pt_fig_pred_label(p, -1, &f);
    CHECK(!strcmp(f.kind, "calibrated") && !strcmp(f.origin, "calibrated from runs/x"));
    pt_profile_free(&p);
}

/* Writes calibrated-gen-K{,-topology}.json of a 2-layer profile into dir. */
static void put_calibration(const char *dir, int k, double fwd_ms)
{
    pt_profile *p = pt_profile_new(2);
    snprintf(p->model, sizeof p->model, "m");
    snprintf(p->device, sizeof p->device, "cpu");
    p->microbatch = 4;
    for (int i = 0; i < 2; i++)
        p->layers[i].fwd_ms = fwd_ms, p->layers[i].bwd_ms = 2 * fwd_ms;
    pt_link link = {1e9, 1e-5};
    pt_topology *t = pt_topology_uniform(1, 2, 1LL << 30, link, link);
    char path[512];
    snprintf(path, sizeof path, "%s/calibrated-gen-%d.json", dir, k);
    REQUIRE(pt_profile_save(p, path, NULL) == 0);
    snprintf(path, sizeof path, "%s/calibrated-gen-%d-topology.json", dir, k);
    REQUIRE(pt_topology_save(t, path, NULL) == 0);
    pt_profile_free(&p);
    pt_topology_free(&t);
}

static void test_calibration_lookup(void)
{
    const char *dir = "figures_test.d";
    REQUIRE(pt_mkdir_p(dir, NULL) == 0);
    put_calibration(dir, 1, 1.0);
    put_calibration(dir, 3, 3.0);
    pt_profile *p = NULL;
    pt_topology *t = NULL;
    int64_t k = 0;
    CHECK(pt_fig_calibration_load(dir, 0, 2, &p, &t, &k) == PT_ENOTFOUND && !p && k == -1);
    REQUIRE(pt_fig_calibration_load(dir, 2, 2, &p, &t, &k) == 0);
    CHECK(k == 1 && p->layers[0].fwd_ms == 1.0 && t);
    pt_profile_free(&p);
    pt_topology_free(&t);
    REQUIRE(pt_fig_calibration_load(dir, 5, 2, &p, &t, &k) == 0);
    CHECK(k == 3 && p->layers[0].fwd_ms == 3.0);
    pt_profile_free(&p);
    pt_topology_free(&t);
    /* one of another model (layer count) is passed over */
    CHECK(pt_fig_calibration_load(dir, 5, 7, &p, &t, &k) == PT_ENOTFOUND && !p && !t);
    CHECK(pt_fig_calibration_load(NULL, 5, 2, &p, &t, &k) == PT_ENOTFOUND);
}

/* A paused display reads a clone: filling the store leaves the clone. */
static void test_store_clone(void)
{
    pt_plan *plan = plan_of(2);
    pt_store *st = NULL, *c = NULL;
    REQUIRE(pt_store_new(16, &st) == 0);
    REQUIRE(pt_store_set_plan(st, plan, 1) == 0);
    for (int64_t k = 0; k < 5; k++)
        for (int s = 0; s < 2; s++) {
            pt_msg_metrics m = metrics(s, k, 10 + (double)k);
            pt_store_metrics(st, &m, 1, k);
        }
    pt_store_agent a;
    memset(&a, 0, sizeof a);
    snprintf(a.id, sizeof a.id, "w0");
    snprintf(a.state, sizeof a.state, "running");
    REQUIRE(pt_store_set_agent(st, &a) == 0);
    REQUIRE(pt_store_clone(st, &c) == 0);
    pt_fig_meas before, after;
    pt_fig_measure_store(c, -1, &before);
    for (int64_t k = 5; k < 40; k++)
        for (int s = 0; s < 2; s++) {
            pt_msg_metrics m = metrics(s, k, 100 + (double)k);
            pt_store_metrics(st, &m, 1, k);
        }
    snprintf(a.state, sizeof a.state, "stopped");
    REQUIRE(pt_store_set_agent(st, &a) == 0);
    pt_fig_measure_store(c, -1, &after);
    CHECK(before.iter_ms == after.iter_ms && before.steps == after.steps);
    CHECK(pt_store_step_count(c) == 5 && pt_store_step_count(st) == 40);
    CHECK(!strcmp(pt_store_agent_at(c, 0)->state, "running"));
    CHECK(pt_store_find_agent(c, "w0") == 0);
    CHECK(pt_store_plan(c) != pt_store_plan(st) && pt_store_plan(c)->stage_count == 2);
    pt_store_free(&c);
    pt_store_free(&st);
    pt_plan_free(&plan);
}

PT_TEST_MAIN({"median_window", test_median_window},
             {"store_and_summary_agree", test_store_and_summary_agree}, {"labels", test_labels},
             {"calibration_lookup", test_calibration_lookup}, {"store_clone", test_store_clone},
             {"late_generation", test_late_generation})

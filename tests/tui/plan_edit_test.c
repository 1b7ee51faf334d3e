/* The plan editor: every edit re-simulates, and the prediction it shows is the
 * simulator's for exactly the edited plan (checked against an independent
 * pt_sim_plan of the plan); invalid edits leave the plan, its prediction and
 * the version untouched and say why; boundaries reach every partition of a
 * small model; a plan that stops fitting memory is refused; undo restores;
 * a planner's plan replaces the current one with the gain computed from the
 * two predictions. */
#include "tests/test.h"

#include <math.h>

#include "planner/cost.h"
#include "planner/simulate.h"
#include "tui/console/plan_edit.h"

#define GIB (1LL << 30)

static pt_profile *make_profile(int n)
{
    pt_profile *p = pt_profile_new(n);
    snprintf(p->model, sizeof p->model, "synthetic");
    snprintf(p->device, sizeof p->device, "cpu");
    snprintf(p->source, sizeof p->source, "analytic");
    p->microbatch = 8;
    p->input_bytes = 8 * 784 * 4;
    for (int i = 0; i < n; i++) {
        /* uneven layers so boundary moves change the prediction */
        p->layers[i].fwd_ms = 1.0 + (i % 3);
        p->layers[i].bwd_ms = 2.0 + (i % 5);
        p->layers[i].recompute_ms = p->layers[i].fwd_ms;
        p->layers[i].act_bytes = 8 * 512 * 4;
        p->layers[i].param_bytes = (i % 2) ? 0 : 512 * 512 * 4;
    }
    return p;
}

static pt_topology *make_topo(int devices, int64_t mem)
{
    pt_link intra = {5e9, 20e-6}, inter = {1e9, 50e-6};
    return pt_topology_uniform(1, devices, mem, intra, inter);
}

static pt_plan *make_plan(int layers, int S, const int *cuts)
{
    pt_plan *p = pt_plan_new(S);
    snprintf(p->model, sizeof p->model, "synthetic");
    p->layer_count = layers;
    p->microbatch_size = 8;
    p->microbatch_count = 4;
    p->schedule = PT_SCHED_DAPPLE;
    for (int s = 0; s < S; s++) {
        p->stages[s].first = cuts[s];
        p->stages[s].last = cuts[s + 1];
        pt_plan_set_replicas(p, s, &s, 1);
    }
    return p;
}

/* The reference: what the simulator predicts for plan, computed here. */
static double reference_iter(const pt_plan *plan, const pt_profile *prof, const pt_topology *t)
{
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog;
    memset(&prog, 0, sizeof prog);
    pt_sim_result res;
    double v = -1;
    if (pt_cost_new(prof, t, &cost, NULL) == 0 && pt_sim_new(&sim) == 0 &&
        pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0)
        v = res.iter_s;
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    return v;
}

static char *plan_json(const pt_plan_edit *e)
{
    return pt_plan_to_json(pt_plan_edit_plan(e));
}

static void test_boundary_moves_match_simulator(void)
{
    pt_profile *prof = make_profile(12);
    pt_topology *topo = make_topo(4, 16 * GIB);
    int cuts[] = {0, 3, 6, 9, 12};
    pt_plan *plan = make_plan(12, 4, cuts);
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    double before = pt_plan_edit_result(e)->iter_s;
    CHECK_NEAR(before, reference_iter(plan, prof, topo), 1e-12);
    uint64_t v0 = pt_plan_edit_version(e);
    REQUIRE(pt_plan_edit_move_boundary(e, 2, +2, &err) == 0);
    const pt_plan *p = pt_plan_edit_plan(e);
    CHECK(p->stages[1].last == 8 && p->stages[2].first == 8);
    CHECK(pt_plan_edit_version(e) == v0 + 1);
    double after = pt_plan_edit_result(e)->iter_s;
    CHECK_NEAR(after, reference_iter(p, prof, topo), 1e-12);
    CHECK(after != before); /* the layers are uneven, so the balance changed */
    CHECK(pt_plan_edit_stage_of_layer(e, 7) == 1 && pt_plan_edit_stage_of_layer(e, 8) == 2);
    /* mouse form */
    REQUIRE(pt_plan_edit_set_boundary(e, 1, 1, &err) == 0);
    CHECK(pt_plan_edit_plan(e)->stages[0].last == 1);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

static void test_invalid_edits_refused(void)
{
    pt_profile *prof = make_profile(6);
    pt_topology *topo = make_topo(3, 16 * GIB);
    int cuts[] = {0, 2, 4, 6};
    pt_plan *plan = make_plan(6, 3, cuts);
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    char *before = plan_json(e);
    double t = pt_plan_edit_result(e)->iter_s;
    uint64_t v = pt_plan_edit_version(e);
    CHECK(pt_plan_edit_move_boundary(e, 1, -2, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "stage 0 would have no layers");
    CHECK(pt_plan_edit_move_boundary(e, 2, +2, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "stage 2 would have no layers");
    CHECK(pt_plan_edit_move_boundary(e, 3, 1, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "no boundary 3");
    CHECK(pt_plan_edit_replicas(e, 0, -1, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "fewer than 1 replica");
    /* all 3 devices are in use */
    CHECK(pt_plan_edit_replicas(e, 1, +1, &err) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "no free device");
    CHECK(pt_plan_edit_split(e, 1, &err) == PT_ENOTFOUND);
    CHECK(pt_plan_edit_microbatch(e, 0, 4, &err) == PT_EINVAL);
    CHECK(pt_plan_edit_policy(e, 'C', &err) == PT_EINVAL);
    CHECK(pt_plan_edit_place(e, 0, 0, 7, &err) == PT_EINVAL);
    CHECK(pt_plan_edit_undo(e, &err) == PT_ESTATE);
    /* 2bw needs M >= S: 2 micro-batches for 3 stages is refused by the generator */
    REQUIRE(pt_plan_edit_microbatch(e, 8, 2, &err) == 0);
    char *mid = plan_json(e);
    uint64_t vmid = pt_plan_edit_version(e);
    CHECK(pt_plan_edit_schedule(e, PT_SCHED_2BW, &err) < 0);
    CHECK(err.msg[0] != 0);
    char *after = plan_json(e);
    CHECK(!strcmp(mid, after));
    CHECK(pt_plan_edit_version(e) == vmid);
    /* undo brings back the very first plan and its prediction */
    REQUIRE(pt_plan_edit_undo(e, &err) == 0);
    char *undone = plan_json(e);
    CHECK(!strcmp(before, undone));
    CHECK_NEAR(pt_plan_edit_result(e)->iter_s, t, 1e-15);
    CHECK(pt_plan_edit_version(e) > v);
    free(before);
    free(mid);
    free(after);
    free(undone);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

/* Every partition of 6 layers into 3 stages is reachable by boundary moves,
 * and each shows the simulator's prediction of that partition. */
static void test_all_partitions_reachable(void)
{
    enum { N = 6 };
    pt_profile *prof = make_profile(N);
    pt_topology *topo = make_topo(3, 16 * GIB);
    int cuts[] = {0, 2, 4, 6};
    pt_plan *plan = make_plan(N, 3, cuts);
    pt_plan_edit *e = NULL;
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, NULL) == 0);
    int seen = 0;
    for (int a = 1; a < N - 1; a++)
        for (int b = a + 1; b < N; b++) {
            pt_error err = {0};
            /* order the two moves so neither passes the other */
            int rc1, rc2;
            if (a < pt_plan_edit_plan(e)->stages[1].first) {
                rc1 = pt_plan_edit_set_boundary(e, 1, a, &err);
                rc2 = pt_plan_edit_set_boundary(e, 2, b, &err);
            } else {
                rc2 = pt_plan_edit_set_boundary(e, 2, b, &err);
                rc1 = pt_plan_edit_set_boundary(e, 1, a, &err);
            }
            CHECK_MSG(rc1 == 0 && rc2 == 0, "cuts %d %d: %s", a, b, err.msg);
            const pt_plan *p = pt_plan_edit_plan(e);
            CHECK(p->stages[0].first == 0 && p->stages[0].last == a && p->stages[1].last == b &&
                  p->stages[2].first == b && p->stages[2].last == N);
            CHECK_NEAR(pt_plan_edit_result(e)->iter_s, reference_iter(p, prof, topo), 1e-12);
            seen++;
        }
    CHECK(seen == (N - 1) * (N - 2) / 2);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

/* A split and a merge keep what the plan says besides its stages: the
 * replication of a round-robin pipedream plan and the stated precision
 * (they were dropped, turning such a plan into split-concat). */
static void test_split_merge_keep_plan_fields(void)
{
    pt_profile *prof = make_profile(8);
    pt_topology *topo = make_topo(4, 16 * GIB);
    int cuts[] = {0, 4, 8};
    pt_plan *plan = make_plan(8, 2, cuts);
    plan->schedule = PT_SCHED_PIPEDREAM;
    plan->replication = PT_REPL_ROUND_ROBIN;
    snprintf(plan->precision, sizeof plan->precision, "%s", pt_precision_name(prof->precision));
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    REQUIRE(pt_plan_edit_split(e, 6, &err) == 0);
    CHECK(pt_plan_edit_plan(e)->stage_count == 3);
    CHECK(pt_plan_edit_plan(e)->replication == PT_REPL_ROUND_ROBIN);
    CHECK(strcmp(pt_plan_edit_plan(e)->precision, pt_precision_name(prof->precision)) == 0);
    REQUIRE(pt_plan_edit_merge(e, 2, &err) == 0);
    CHECK(pt_plan_edit_plan(e)->stage_count == 2);
    CHECK(pt_plan_edit_plan(e)->replication == PT_REPL_ROUND_ROBIN);
    CHECK(strcmp(pt_plan_edit_plan(e)->precision, pt_precision_name(prof->precision)) == 0);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

static void test_replicas_split_merge_place(void)
{
    pt_profile *prof = make_profile(8);
    pt_topology *topo = make_topo(4, 16 * GIB);
    int cuts[] = {0, 4, 8};
    pt_plan *plan = make_plan(8, 2, cuts);
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    REQUIRE(pt_plan_edit_replicas(e, 0, +1, &err) == 0);
    const pt_plan *p = pt_plan_edit_plan(e);
    CHECK(p->stages[0].replica_count == 2 && p->stages[0].replicas[1] == 2);
    CHECK(pt_plan_edit_program(e)->worker_count == 3);
    /* replication shows an all-reduce in the program the timeline draws */
    int ar = 0;
    for (int i = 0; i < pt_plan_edit_program(e)->op_count; i++)
        ar += pt_plan_edit_program(e)->ops[i].kind == PT_OP_ALLREDUCE;
    CHECK(ar >= 2);
    CHECK_NEAR(pt_plan_edit_result(e)->iter_s, reference_iter(p, prof, topo), 1e-12);
    REQUIRE(pt_plan_edit_split(e, 6, &err) == 0);
    p = pt_plan_edit_plan(e);
    CHECK(p->stage_count == 3 && p->stages[1].last == 6 && p->stages[2].first == 6 &&
          p->stages[2].replicas[0] == 3);
    /* swap placement of stage 2 and stage 1 */
    REQUIRE(pt_plan_edit_place(e, 2, 0, 1, &err) == 0);
    p = pt_plan_edit_plan(e);
    CHECK(p->stages[2].replicas[0] == 1 && p->stages[1].replicas[0] == 3);
    REQUIRE(pt_plan_edit_merge(e, 2, &err) == 0);
    p = pt_plan_edit_plan(e);
    CHECK(p->stage_count == 2 && p->stages[1].first == 4 && p->stages[1].last == 8 &&
          p->stages[1].replicas[0] == 3);
    REQUIRE(pt_plan_edit_replicas(e, 0, -1, &err) == 0);
    CHECK(pt_plan_edit_plan(e)->stages[0].replica_count == 1);
    REQUIRE(pt_plan_edit_toggle_recompute(e, 1, &err) == 0);
    CHECK(pt_plan_edit_plan(e)->stages[1].recompute == 1);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

static void test_memory_refusal(void)
{
    pt_profile *prof = make_profile(8);
    /* find the memory a 2-stage plan needs, then give the devices just that */
    pt_topology *big = make_topo(2, 64 * GIB);
    int cuts[] = {0, 4, 8};
    pt_plan *plan = make_plan(8, 2, cuts);
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, big, &e, &err) == 0);
    int64_t need = 0;
    for (int s = 0; s < 2; s++) {
        pt_plan_stage_info si;
        REQUIRE(pt_plan_edit_stage_info(e, s, &si) == 0);
        CHECK(si.limit_bytes == 64 * GIB);
        if (si.peak_bytes > need)
            need = si.peak_bytes;
    }
    pt_plan_edit_free(&e);
    pt_topology *tight = make_topo(2, need);
    REQUIRE(pt_plan_edit_new(plan, prof, tight, &e, &err) == 0);
    CHECK(pt_plan_edit_fits(e));
    /* one stage holding everything needs more than the largest of the two */
    CHECK(pt_plan_edit_merge(e, 1, &err) == PT_ENOFIT);
    CHECK_STR_CONTAINS(err.msg, "stages[0]");
    CHECK_STR_CONTAINS(err.msg, "needs");
    CHECK(pt_plan_edit_plan(e)->stage_count == 2);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&big);
    pt_topology_free(&tight);
    pt_profile_free(&prof);
}

static void test_planner_gain(void)
{
    pt_profile *prof = make_profile(12);
    pt_topology *topo = make_topo(4, 16 * GIB);
    /* a badly balanced start */
    int cuts[] = {0, 1, 2, 3, 12};
    pt_plan *plan = make_plan(12, 4, cuts);
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    double old = pt_plan_edit_result(e)->iter_s;
    pt_plan_edit_gain g;
    int rc = pt_plan_edit_run_planner(e, "gpipe", &g, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK_NEAR(g.old_iter_s, old, 1e-15);
        CHECK_NEAR(g.new_iter_s, pt_plan_edit_result(e)->iter_s, 1e-15);
        CHECK_NEAR(g.gain, (old - g.new_iter_s) / old, 1e-12);
        CHECK(g.new_iter_s < old); /* balancing 12 uneven layers beats 1/1/1/9 */
        CHECK_NEAR(g.new_iter_s, reference_iter(pt_plan_edit_plan(e), prof, topo), 1e-12);
        const pt_plan *p = pt_plan_edit_plan(e);
        CHECK(p->microbatch_size * p->microbatch_count == 32);
    }
    CHECK(pt_plan_edit_run_planner(e, "nope", &g, &err) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "dapple");
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

/* b B m M keep the global batch (size x count) and change the other factor;
 * a split that does not divide it is refused; options the schedule kind does
 * not read (policy outside dapple, vertical sync outside pipedream) are
 * refused rather than silently stored. */
static void test_global_batch_kept(void)
{
    pt_profile *prof = make_profile(6);
    pt_topology *topo = make_topo(3, 16 * GIB);
    int cuts[] = {0, 2, 4, 6};
    pt_plan *plan = make_plan(6, 3, cuts); /* 4 x 8 = 32 samples */
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    const pt_plan *p = pt_plan_edit_plan(e);
    REQUIRE(pt_plan_edit_resplit(e, 1, 0, &err) == 0); /* B */
    p = pt_plan_edit_plan(e);
    CHECK(p->microbatch_size == 16 && p->microbatch_count == 2);
    REQUIRE(pt_plan_edit_resplit(e, -1, 0, &err) == 0); /* b */
    REQUIRE(pt_plan_edit_resplit(e, -1, 0, &err) == 0); /* b */
    p = pt_plan_edit_plan(e);
    CHECK(p->microbatch_size == 4 && p->microbatch_count == 8);
    REQUIRE(pt_plan_edit_resplit(e, 0, -1, &err) == 0); /* m: 8 -> 4 (7, 6, 5 do not divide 32) */
    p = pt_plan_edit_plan(e);
    CHECK(p->microbatch_size == 8 && p->microbatch_count == 4);
    REQUIRE(pt_plan_edit_resplit(e, 0, 1, &err) == 0); /* M: 4 -> 8 */
    p = pt_plan_edit_plan(e);
    CHECK(p->microbatch_size == 4 && p->microbatch_count == 8);
    /* 32 x 1 is the end of the road for M */
    REQUIRE(pt_plan_edit_microbatch(e, 1, 32, &err) == 0);
    uint64_t v = pt_plan_edit_version(e);
    CHECK(pt_plan_edit_resplit(e, 0, 1, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "global batch of 32");
    CHECK(pt_plan_edit_resplit(e, -1, 0, &err) == PT_EINVAL);
    CHECK(pt_plan_edit_version(e) == v);
    /* 3 x 4 = 12: doubling the size to 8 does not divide 12 */
    REQUIRE(pt_plan_edit_microbatch(e, 4, 3, &err) == 0);
    CHECK(pt_plan_edit_resplit(e, 1, 0, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "do not divide the global batch of 12");
    p = pt_plan_edit_plan(e);
    CHECK(p->microbatch_size * p->microbatch_count == 12);
    /* dapple reads a policy, not vertical sync */
    CHECK(pt_plan_edit_policy(e, 'A', &err) == 0);
    CHECK(pt_plan_edit_toggle_vsync(e, &err) == PT_EUNSUPP);
    CHECK_STR_CONTAINS(err.msg, "does not apply to dapple");
    REQUIRE(pt_plan_edit_schedule(e, PT_SCHED_PIPEDREAM, &err) == 0);
    CHECK(pt_plan_edit_policy(e, 'B', &err) == PT_EUNSUPP);
    CHECK_STR_CONTAINS(err.msg, "does not apply to pipedream");
    CHECK(pt_plan_edit_toggle_vsync(e, &err) == 0);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

/* S into interleaved re-cuts the layers into S·2 chunks on the same devices,
 * V sets v (the prediction the simulator's for exactly that plan), v past
 * the layers or under 2 is refused with the plan kept, chunks outside a
 * chunked kind are refused, and leaving interleaved cuts one stage per device
 * again; undo walks back. */
static void test_chunks(void)
{
    pt_profile *prof = make_profile(12);
    pt_topology *topo = make_topo(3, 16 * GIB);
    int cuts[] = {0, 4, 8, 12};
    pt_plan *plan = make_plan(12, 3, cuts);
    plan->microbatch_count = 6; /* a multiple of the 3 ranks */
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    CHECK(pt_plan_edit_chunks(e, 2, &err) == PT_EUNSUPP);
    CHECK_STR_CONTAINS(err.msg, "do not apply to dapple");
    REQUIRE(pt_plan_edit_schedule(e, PT_SCHED_INTERLEAVED, &err) == 0);
    const pt_plan *p = pt_plan_edit_plan(e);
    CHECK(p->schedule == PT_SCHED_INTERLEAVED && p->chunks == 2 && p->stage_count == 6);
    for (int s = 0; s < p->stage_count; s++)
        CHECK(p->stages[s].replicas[0] == s % 3);
    CHECK(fabs(pt_plan_edit_result(e)->iter_s - reference_iter(p, prof, topo)) < 1e-12);
    REQUIRE(pt_plan_edit_chunks(e, 4, &err) == 0);
    p = pt_plan_edit_plan(e);
    CHECK(p->chunks == 4 && p->stage_count == 12);
    CHECK(fabs(pt_plan_edit_result(e)->iter_s - reference_iter(p, prof, topo)) < 1e-12);
    uint64_t v = pt_plan_edit_version(e);
    CHECK(pt_plan_edit_chunks(e, 5, &err) == PT_EINVAL); /* 15 chunks of 12 layers */
    CHECK_STR_CONTAINS(err.msg, "layers");
    CHECK(pt_plan_edit_chunks(e, 1, &err) == PT_EINVAL);
    CHECK(pt_plan_edit_version(e) == v && pt_plan_edit_plan(e)->chunks == 4);
    REQUIRE(pt_plan_edit_schedule(e, PT_SCHED_1F1B_FLUSH, &err) == 0);
    p = pt_plan_edit_plan(e);
    CHECK(p->chunks == 1 && p->stage_count == 3);
    REQUIRE(pt_plan_edit_undo(e, &err) == 0);
    CHECK(pt_plan_edit_plan(e)->chunks == 4);
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

/* "layers a-b" of every stage and their devices: the cut of the plan. */
static void cut_of(const pt_plan *p, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = 0;
    for (int s = 0; s < p->stage_count && at + 32 < cap; s++)
        at += (size_t)snprintf(out + at, cap - at, "%d-%d@%d ", p->stages[s].first,
                               p->stages[s].last, p->stages[s].replicas[0]);
}

/* The kind alone (the console's S): every kind is taken or refused with a
 * reason, and no stage boundary or device ever changes; interleaved is
 * refused on a plan of one stage per device (naming V, which re-cuts), and
 * a one-chunk kind on an interleaved plan; the prediction is the
 * simulator's for the plan with just the kind changed. */
static void test_kind_keeps_boundaries(void)
{
    pt_profile *prof = make_profile(12);
    pt_topology *topo = make_topo(3, 16 * GIB);
    int cuts[] = {0, 3, 7, 12};
    pt_plan *plan = make_plan(12, 3, cuts);
    plan->microbatch_count = 6;
    pt_plan_edit *e = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_edit_new(plan, prof, topo, &e, &err) == 0);
    char cut0[256], cut[256];
    cut_of(pt_plan_edit_plan(e), cut0, sizeof cut0);
    int taken = 0;
    for (int k = 0; k < pt_sched_kind_count(); k++) {
        err = (pt_error){0};
        int rc = pt_plan_edit_kind(e, (pt_sched_kind)k, &err);
        cut_of(pt_plan_edit_plan(e), cut, sizeof cut);
        CHECK_MSG(!strcmp(cut, cut0), "%s moved the cut: %s -> %s",
                  pt_sched_kind_name((pt_sched_kind)k), cut0, cut);
        if (rc == 0) {
            taken++;
            const pt_plan *p = pt_plan_edit_plan(e);
            CHECK(p->schedule == (pt_sched_kind)k);
            CHECK(fabs(pt_plan_edit_result(e)->iter_s - reference_iter(p, prof, topo)) < 1e-12);
        } else {
            CHECK_MSG(err.msg[0], "%s refused without a reason",
                      pt_sched_kind_name((pt_sched_kind)k));
        }
        if (k == PT_SCHED_INTERLEAVED) {
            CHECK(rc == PT_EINVAL);
            CHECK_STR_CONTAINS(err.msg, "V re-cuts");
        }
    }
    CHECK(taken >= pt_sched_kind_count() - 1); /* all but interleaved, on this plan */
    /* on an interleaved plan (V's re-cut) only interleaved stays */
    REQUIRE(pt_plan_edit_schedule(e, PT_SCHED_INTERLEAVED, &err) == 0);
    cut_of(pt_plan_edit_plan(e), cut0, sizeof cut0);
    err = (pt_error){0};
    CHECK(pt_plan_edit_kind(e, PT_SCHED_1F1B_FLUSH, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "model chunks");
    CHECK(pt_plan_edit_kind(e, PT_SCHED_INTERLEAVED, &err) == 0);
    cut_of(pt_plan_edit_plan(e), cut, sizeof cut);
    CHECK(!strcmp(cut, cut0));
    pt_plan_edit_free(&e);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

PT_TEST_MAIN({"boundary_moves", test_boundary_moves_match_simulator},
             {"kind_keeps_boundaries", test_kind_keeps_boundaries},
             {"global_batch_kept", test_global_batch_kept},
             {"invalid_edits", test_invalid_edits_refused},
             {"all_partitions", test_all_partitions_reachable},
             {"replicas_split_merge_place", test_replicas_split_merge_place},
             {"split_merge_keep_plan_fields", test_split_merge_keep_plan_fields},
             {"memory_refusal", test_memory_refusal}, {"planner_gain", test_planner_gain},
             {"chunks", test_chunks})

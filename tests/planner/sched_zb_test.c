/* Zero-bubble schedules (Qi et al., ICLR'24) and the split backward they run
 * on: the validator's rules for BWD_INPUT / BWD_WEIGHT, the cost model's
 * split, and the simulator's figures for zb-h1 against the paper's bubble
 * formula and 1F1B's memory, and for zb-h2 against zb-h1 and the bound of a
 * flushed iteration. */
#include "tests/planner/sim_rig.h"
#include "tests/test.h"

#include <math.h>

#define F_MS   2.0
#define BWD_MS 4.0 /* split analytically into B = W = 2 ms (layers have parameters) */
#define TOL    1e-9

typedef fx_rig rig;

/* S equal one-layer stages, free communication and optimizer. */
static int rig_run(rig *g, pt_sched_kind kind, int S, int M, double fwd_ms, double bwd_ms)
{
    g->plan = fx_plan(kind, S, 1, NULL, 4, M);
    fx_rig_costs c = fx_rig_free_comm(S, S, fwd_ms, bwd_ms);
    return fx_rig_sim(g, &c, NULL, 1);
}

#define rig_free fx_rig_free

static int find(const pt_program *p, int w, int kind, int mb)
{
    for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++)
        if (p->ops[i].kind == kind && p->ops[i].mb == mb)
            return i;
    return -1;
}

/* ZB-H1 against the paper's bubble, (S-1)(F+B-W), and 1F1B's peak memory. */
static void test_zb_h1_bubble_and_memory(void)
{
    const double ratios[][2] = {{2.0, 4.0}, {2.0, 5.0}, {1.0, 6.0}, {3.0, 2.0}, {5.0, 8.0}};
    for (size_t c = 0; c < sizeof ratios / sizeof ratios[0]; c++)
        for (int S = 1; S <= 6; S++)
            for (int M = 1; M <= 10; M++) {
                double F = ratios[c][0], Bf = ratios[c][1], B = Bf / 2, W = Bf / 2;
                rig g = {0}, h = {0};
                REQUIRE(rig_run(&g, PT_SCHED_ZB_H1, S, M, F, Bf) == 0);
                REQUIRE(rig_run(&h, PT_SCHED_1F1B_FLUSH, S, M, F, Bf) == 0);
                double busy = M * (F + B + W) / 1000.0;
                /* never slower than 1F1B; with M >= S and F >= B = W (the paper's
                 * handcrafted case, F = B = W, and cheaper backwards) within the
                 * paper's formula. With B > F no order of these ops reaches it: on
                 * S = 2, M = 2, F = 2, B = W = 2.5 ms stage 0 idles for B while the
                 * first gradient comes back and its W_0 overlaps the wait for the
                 * last one, 16.5 ms against the formula's 16 ms. */
                CHECK_MSG(g.res.iter_s <= h.res.iter_s + TOL, "S %d M %d: %.6f > 1f1b %.6f", S, M,
                          g.res.iter_s, h.res.iter_s);
                if (M >= S && F >= B) {
                    double want = busy + (S - 1) * (F + B - W) / 1000.0;
                    CHECK_MSG(g.res.iter_s <= want + TOL, "F %g B %g S %d M %d: %.6f > %.6f", F, Bf,
                              S, M, g.res.iter_s, want);
                    CHECK(g.res.bubble_frac <= (S - 1) * (F + B - W) / 1000.0 / want + 1e-9);
                }
                /* the bubble is strictly smaller than 1F1B's whenever 1F1B has one */
                if (S > 1 && M > 1)
                    CHECK_MSG(g.res.bubble_frac < h.res.bubble_frac - 1e-9, "S %d M %d", S, M);
                int peak_1f1b = 0, peak = 0;
                for (int w = 0; w < h.res.worker_count; w++)
                    if (h.res.workers[w].peak_inflight > peak_1f1b)
                        peak_1f1b = h.res.workers[w].peak_inflight;
                for (int w = 0; w < g.res.worker_count; w++) {
                    pt_sched_shape q = {S, g.prog.workers[w].stage, M, 'A', 0, 0, 1};
                    int want = pt_sched_kind_info_of(PT_SCHED_ZB_H1)->inflight(&q);
                    CHECK_MSG(g.res.workers[w].peak_inflight == want, "S %d M %d w %d: %d vs %d", S,
                              M, w, g.res.workers[w].peak_inflight, want);
                    /* in flight: input and output, 2000 bytes each; and, from B to W, the
                     * layer's output gradient (1000 bytes) of the i + 1 micro-batches
                     * whose W stage i delays (at most M) */
                    int i = g.prog.workers[w].stage, pending = i + 1 < M ? i + 1 : M;
                    CHECK_MSG(g.res.workers[w].peak.bytes[PT_MEM_ACTS] ==
                                  (int64_t)want * 2000 + (int64_t)pending * 1000,
                              "S %d M %d w %d: ACTS %lld", S, M, w,
                              (long long)g.res.workers[w].peak.bytes[PT_MEM_ACTS]);
                    if (g.res.workers[w].peak_inflight > peak)
                        peak = g.res.workers[w].peak_inflight;
                }
                CHECK_MSG(peak == peak_1f1b, "S %d M %d: peak %d vs 1f1b %d", S, M, peak,
                          peak_1f1b);
                rig_free(&g);
                rig_free(&h);
            }
    /* F = B = W: a third of 1F1B's bubble time */
    rig g = {0}, h = {0};
    REQUIRE(rig_run(&g, PT_SCHED_ZB_H1, 4, 8, 2.0, 4.0) == 0);
    REQUIRE(rig_run(&h, PT_SCHED_1F1B_FLUSH, 4, 8, 2.0, 4.0) == 0);
    double idle = g.res.iter_s - 8 * 6e-3, idle_1f1b = h.res.iter_s - 8 * 6e-3;
    CHECK_NEAR(idle_1f1b, 3 * 6e-3, TOL);
    CHECK_NEAR(idle, idle_1f1b / 3, TOL);
    rig_free(&g);
    rig_free(&h);
}

/* ZB-H2 against ZB-H1 and the bound of a flushed iteration, (S-1)F +
 * M(F+B+W): never slower than ZB-H1, on the bound when F = B = W (M >= S)
 * and when F < B = W <= 1.25F with M >= 2S (where ZB-H1 is above it); with
 * B = W = 3F it stays above the bound (S = 6, M = 12: 94 against 89 ms), but
 * below ZB-H1; the in-flight count each stage states, about twice 1F1B's. */
static void test_zb_h2(void)
{
    const double ratios[][2] = {{2.0, 4.0}, {2.0, 5.0}, {1.0, 6.0}, {3.0, 2.0}};
    int below_h1 = 0;
    for (size_t c = 0; c < sizeof ratios / sizeof ratios[0]; c++)
        for (int S = 1; S <= 6; S++)
            for (int M = 1; M <= 13; M++) {
                double F = ratios[c][0], Bf = ratios[c][1];
                rig g = {0}, h = {0};
                REQUIRE(rig_run(&g, PT_SCHED_ZB_H2, S, M, F, Bf) == 0);
                REQUIRE(rig_run(&h, PT_SCHED_ZB_H1, S, M, F, Bf) == 0);
                double bound = ((S - 1) * F + M * (F + Bf)) / 1000.0;
                CHECK_MSG(g.res.iter_s <= h.res.iter_s + TOL, "F %g S %d M %d: %.6f > h1 %.6f", F,
                          S, M, g.res.iter_s, h.res.iter_s);
                CHECK(g.res.iter_s >= bound - TOL);
                if ((2 * F == Bf && M >= S) || (Bf / 2 > F && Bf / 2 <= 1.25 * F && M >= 2 * S))
                    CHECK_MSG(fabs(g.res.iter_s - bound) < TOL, "F %g B %g S %d M %d: %.6f vs %.6f",
                              F, Bf, S, M, g.res.iter_s, bound);
                below_h1 += g.res.iter_s < h.res.iter_s - TOL;
                int peak = 0;
                for (int w = 0; w < g.res.worker_count; w++) {
                    pt_sched_shape q = {S, g.prog.workers[w].stage, M, 'A', 0, 0, 1};
                    int want = pt_sched_kind_info_of(PT_SCHED_ZB_H2)->inflight(&q);
                    CHECK_MSG(g.res.workers[w].peak_inflight == want, "S %d M %d w %d: %d vs %d", S,
                              M, w, g.res.workers[w].peak_inflight, want);
                    if (want > peak)
                        peak = want;
                }
                CHECK(peak == (2 * S - 1 < M ? 2 * S - 1 : M));
                rig_free(&g);
                rig_free(&h);
            }
    CHECK(below_h1 > 20); /* it buys something where B > F */
}

/* The cost model's split: profiled halves when present, else half each for a
 * layer with parameters and all of it on the input for one without. */
static void test_cost_split(void)
{
    pt_profile *pf = fx_profile(3, 1.0, 6.0, 1000, 100, 4);
    pt_topology *topo = fx_topo(1, 1, FX_FAST_BPS, 0);
    pt_cost *cost = NULL;
    REQUIRE(pf && topo);
    pf->layers[1].param_bytes = 0;
    pf->layers[2].split = 1;
    pf->layers[2].bwd_input_ms = 1.5;
    pf->layers[2].bwd_weight_ms = 5.0;
    REQUIRE(pt_cost_new(pf, topo, &cost, NULL) == 0);
    CHECK_NEAR(pt_cost_bwd_input_s(cost, 0, 1, 4, 0), 3e-3, TOL);
    CHECK_NEAR(pt_cost_bwd_weight_s(cost, 0, 1, 4, 0), 3e-3, TOL);
    CHECK_NEAR(pt_cost_bwd_input_s(cost, 1, 2, 4, 0), 6e-3, TOL);
    CHECK_NEAR(pt_cost_bwd_weight_s(cost, 1, 2, 4, 0), 0, TOL);
    CHECK_NEAR(pt_cost_bwd_input_s(cost, 2, 3, 2, 0), 0.75e-3, TOL);
    CHECK_NEAR(pt_cost_bwd_weight_s(cost, 0, 3, 4, 0), 8e-3, TOL);
    /* the analytic halves add up to the whole backward */
    CHECK_NEAR(pt_cost_bwd_input_s(cost, 0, 2, 4, 0) + pt_cost_bwd_weight_s(cost, 0, 2, 4, 0),
               pt_cost_bwd_s(cost, 0, 2, 4, 0), TOL);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&pf);
}

/* A split backward is checked like a whole one, with W after its B. */
static void test_validator_split_rules(void)
{
    rig g = {0};
    REQUIRE(rig_run(&g, PT_SCHED_ZB_H1, 3, 4, F_MS, BWD_MS) == 0);
    pt_program *p = &g.prog;
    pt_error err = {0};
    /* W before its B */
    int w = 1, b = find(p, w, PT_OP_BWD_INPUT, 2), wt = find(p, w, PT_OP_BWD_WEIGHT, 2);
    REQUIRE(b >= 0 && wt > b);
    fx_move_op(p, wt, b);
    CHECK(pt_sched_validate(p, &err) == PT_EINVAL && strstr(err.msg, "without an earlier"));
    fx_move_op(p, b, wt);
    CHECK(pt_sched_validate(p, NULL) == 0);
    /* a B whose W is missing */
    pt_op keep = p->ops[wt];
    fx_delete_op(p, wt);
    CHECK(pt_sched_validate(p, &err) == PT_EINVAL && strstr(err.msg, "OPT_STEP before"));
    fx_insert_op(p, wt, keep);
    CHECK(pt_sched_validate(p, NULL) == 0);
    /* the step before a W it covers */
    int last_w = find(p, 0, PT_OP_BWD_WEIGHT, 3), opt = find(p, 0, PT_OP_OPT_STEP, 0);
    REQUIRE(last_w >= 0 && opt > last_w);
    fx_move_op(p, opt, last_w);
    CHECK(pt_sched_validate(p, &err) == PT_EINVAL && strstr(err.msg, "OPT_STEP before"));
    fx_move_op(p, last_w, opt);
    /* the input gradient sent before B */
    int send = find(p, w, PT_OP_SEND_GRAD, 1);
    b = find(p, w, PT_OP_BWD_INPUT, 1);
    REQUIRE(send == b + 1);
    fx_move_op(p, send, b);
    CHECK(pt_sched_validate(p, &err) == PT_EINVAL && strstr(err.msg, "gradient sent before"));
    fx_move_op(p, b, send);
    /* a whole BWD and a B for one micro-batch */
    p->ops[find(p, w, PT_OP_BWD_WEIGHT, 1)].kind = PT_OP_BWD;
    CHECK(pt_sched_validate(p, &err) == PT_EINVAL && strstr(err.msg, "second BWD"));
    rig_free(&g);
}

/* B is what the previous stage waits for: it sends the gradient at once,
 * and W of micro-batch j on stage i comes i micro-batches later. */
static void test_zb_h1_order(void)
{
    rig g = {0};
    int S = 4, M = 8;
    REQUIRE(rig_run(&g, PT_SCHED_ZB_H1, S, M, F_MS, BWD_MS) == 0);
    for (int w = 0; w < g.prog.worker_count; w++) {
        int i = g.prog.workers[w].stage;
        CHECK(fx_count(&g.prog, w, PT_OP_BWD) == 0);
        CHECK(fx_count(&g.prog, w, PT_OP_BWD_INPUT) == M);
        CHECK(fx_count(&g.prog, w, PT_OP_BWD_WEIGHT) == M);
        for (int j = i; j < M; j++)
            CHECK(find(&g.prog, w, PT_OP_BWD_WEIGHT, j - i) > find(&g.prog, w, PT_OP_BWD_INPUT, j));
    }
    rig_free(&g);
}

PT_TEST_MAIN({"zb_h1_bubble_and_memory", test_zb_h1_bubble_and_memory}, {"zb_h2", test_zb_h2},
             {"cost_split", test_cost_split}, {"validator_split_rules", test_validator_split_rules},
             {"zb_h1_order", test_zb_h1_order})

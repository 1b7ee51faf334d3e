/* Cost model: per-op times against sums computed here, links, the split-concat
 * boundary cost against the simulator's transfers, and the analytic memory
 * model against the simulator's event-tracked peaks for every kind. */
#include "tests/planner/sched_fixture.h"
#include "tests/test.h"

static pt_profile *ragged_profile(void)
{
    pt_profile *p = fx_profile(5, 0, 0, 0, 0, 8);
    for (int l = 0; l < 5; l++) {
        p->layers[l].fwd_ms = 1.0 + l;
        p->layers[l].bwd_ms = 2.0 + 3 * l;
        p->layers[l].recompute_ms = l == 2 ? 0 : 0.5 + l; /* 0: falls back to fwd_ms */
        p->layers[l].act_bytes = 1000 * (l + 1);
        p->layers[l].param_bytes = 4096 << l;
        p->layers[l].saved_bytes = l == 3 ? 0 : 800 * (5 - l);
        p->layers[l].scratch_bytes = (int64_t[]){1600, 0, 4000, 800, 2400}[l];
    }
    p->input_bytes = 800;
    return p;
}

static void test_compute_times(void)
{
    pt_profile *pf = ragged_profile();
    pt_topology *t = fx_topo(1, 2, 1e9, 0);
    t->devices[1].speed = 2.5;
    pt_cost *c = NULL;
    REQUIRE(pt_cost_new(pf, t, &c, NULL) == 0);
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b <= 5; b++)
            for (int rows = 1; rows <= 8; rows += 3)
                for (int d = 0; d < 2; d++) {
                    double f = 0, bw = 0, rc = 0;
                    int64_t par = 0, act = 0, saved = 0, widest = 0;
                    for (int l = a; l < b; l++) {
                        saved += pf->layers[l].saved_bytes;
                        if (pf->layers[l].scratch_bytes > widest)
                            widest = pf->layers[l].scratch_bytes;
                        f += pf->layers[l].fwd_ms;
                        bw += pf->layers[l].bwd_ms;
                        rc += l == 2 ? pf->layers[l].fwd_ms : pf->layers[l].recompute_ms;
                        par += pf->layers[l].param_bytes;
                        act += pf->layers[l].act_bytes;
                    }
                    double k = rows / 8.0 / t->devices[d].speed / 1000.0;
                    CHECK_NEAR(pt_cost_fwd_s(c, a, b, rows, d), f * k, 1e-15);
                    CHECK_NEAR(pt_cost_bwd_s(c, a, b, rows, d), bw * k, 1e-15);
                    CHECK_NEAR(pt_cost_recompute_s(c, a, b, rows, d), rc * k, 1e-15);
                    CHECK(pt_cost_param_bytes(c, a, b) == par);
                    CHECK(pt_cost_act_bytes(c, a, b, rows) == act * rows / 8);
                    CHECK(pt_cost_saved_bytes(c, a, b, rows) == saved * rows / 8);
                    /* input gradients of layers a+1..b-1 plus the widest layer scratch */
                    int64_t inner = act - pf->layers[b - 1].act_bytes;
                    CHECK(pt_cost_scratch_bytes(c, a, b, rows) == (inner + widest) * rows / 8);
                    CHECK(pt_cost_loss_saved_bytes(c, a, b, rows) ==
                          (b == 5 ? pf->layers[4].saved_bytes * rows / 8 : 0));
                }
    CHECK(pt_cost_boundary_bytes(c, 0, 4) == 400);
    {
        /* a profile without any saved or scratch bytes (PipeDream's, older files)
         * describes layers, not pipetop's runtime: no backward scratch */
        pt_profile *bare = fx_profile(3, 1, 1, 1000, 0, 8);
        pt_cost *bc = NULL;
        REQUIRE(pt_cost_new(bare, t, &bc, NULL) == 0);
        CHECK(pt_cost_scratch_bytes(bc, 0, 3, 8) == 0 && pt_cost_saved_bytes(bc, 0, 3, 8) == 0);
        pt_cost_free(&bc);
        pt_profile_free(&bare);
    }
    CHECK(pt_cost_boundary_bytes(c, 3, 8) == 3000);
    /* optimizer step: (3 + 2k) passes over the parameters at the stated bandwidth */
    double sgd = 4096.0 * (PT_COST_OPT_BASE_PASSES + PT_COST_OPT_STATE_PASSES * 1) /
                 (PT_COST_OPT_MEM_BW_BPS * 2.5);
    CHECK_NEAR(pt_cost_opt_step_s(c, 4096, PT_OPTIM_SGD, 1), sgd, 1e-18);
    CHECK(pt_cost_opt_step_s(c, 4096, PT_OPTIM_ADAM, 1) >
          pt_cost_opt_step_s(c, 4096, PT_OPTIM_SGD, 1));
    pt_cost_set_opt_bandwidth(c, 0);
    CHECK(pt_cost_opt_step_s(c, 4096, PT_OPTIM_ADAM, 0) == 0);
    pt_cost_free(&c);
    CHECK(c == NULL);
    pt_topology_free(&t);
    pt_profile_free(&pf);
}

/* A profile's fixed_share makes each per-layer time affine in rows: t(rows) =
 * t * (f + (1 - f) * rows / microbatch), in the cost model and in the
 * simulator's ops (a replicated stage's replicas run fewer rows each); a
 * profile without it is linear, as before the field. */
static void test_fixed_share_rows(void)
{
    pt_profile *pf = ragged_profile();
    pt_profile *lin = ragged_profile();
    for (int l = 0; l < 5; l++) {
        pf->layers[l].fixed_share = 0.1 + 0.15 * l;
        pf->layers[l].split = 1;
        pf->layers[l].bwd_input_ms = 0.5 + l;
        pf->layers[l].bwd_weight_ms = 1.5 + 2 * l;
    }
    pt_topology *t = fx_topo(1, 2, 1e9, 0);
    t->devices[1].speed = 2.5;
    pt_cost *c = NULL, *cl = NULL;
    REQUIRE(pt_cost_new(pf, t, &c, NULL) == 0 && pt_cost_new(lin, t, &cl, NULL) == 0);
    CHECK(pt_cost_has_fixed(c) && !pt_cost_has_fixed(cl));
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b <= 5; b++)
            for (int rows = 1; rows <= 8; rows += 3)
                for (int d = 0; d < 2; d++) {
                    double f = 0, bw = 0, rc = 0, bi = 0, ww = 0, fx = 0, lf = 0;
                    for (int l = a; l < b; l++) {
                        const pt_profile_layer *L = &pf->layers[l];
                        double k = L->fixed_share + (1 - L->fixed_share) * rows / 8.0;
                        f += L->fwd_ms * k;
                        bw += L->bwd_ms * k;
                        rc += (l == 2 ? L->fwd_ms : L->recompute_ms) * k;
                        bi += L->bwd_input_ms * k;
                        ww += L->bwd_weight_ms * k;
                        fx += (L->fwd_ms + L->bwd_ms) * L->fixed_share;
                        lf += lin->layers[l].fwd_ms;
                    }
                    double s = 1000.0 * t->devices[d].speed;
                    CHECK_NEAR(pt_cost_fwd_s(c, a, b, rows, d), f / s, 1e-15);
                    CHECK_NEAR(pt_cost_bwd_s(c, a, b, rows, d), bw / s, 1e-15);
                    CHECK_NEAR(pt_cost_recompute_s(c, a, b, rows, d), rc / s, 1e-15);
                    CHECK_NEAR(pt_cost_bwd_input_s(c, a, b, rows, d), bi / s, 1e-15);
                    CHECK_NEAR(pt_cost_bwd_weight_s(c, a, b, rows, d), ww / s, 1e-15);
                    CHECK_NEAR(pt_cost_fixed_s(c, a, b, d), fx / s, 1e-15);
                    CHECK(pt_cost_fixed_s(cl, a, b, d) == 0);
                    /* without the field: exactly the linear scaling */
                    CHECK(pt_cost_fwd_s(cl, a, b, rows, d) ==
                          lf / 1000.0 * rows / 8 / t->devices[d].speed);
                    /* at the profile's micro-batch both give the profile's time */
                    if (rows == 7)
                        CHECK_NEAR(pt_cost_fwd_s(c, a, b, 8, d), pt_cost_fwd_s(cl, a, b, 8, d),
                                   1e-15);
                }
    pt_cost_free(&c);
    pt_cost_free(&cl);
    pt_topology_free(&t);
    pt_profile_free(&lin);
    pt_profile_free(&pf);

    /* the simulator: a stage of 1 and one of 3 replicas, 12 rows per
     * micro-batch; every FWD and BWD lasts what the affine formula gives
     * for the rows it covers */
    const int reps[2] = {1, 3};
    pt_plan *plan = fx_plan(PT_SCHED_GPIPE, 2, 1, reps, 12, 2);
    pt_profile *sp = fx_profile(2, 1, 2, 12000, 10, 12);
    sp->layers[0].fixed_share = 0.3;
    sp->layers[1].fixed_share = 0.6;
    pt_topology *st =
        pt_topology_uniform(1, 4, 1 << 30, (pt_link){1e9, 1e-5}, (pt_link){1e8, 1e-4});
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    REQUIRE(pt_cost_new(sp, st, &cost, NULL) == 0 && pt_sim_new(&sim) == 0);
    REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0);
    int seen = 0;
    for (int w = 0; w < prog.worker_count; w++) {
        const pt_worker *x = &prog.workers[w];
        int l = x->first, rows = x->row_hi - x->row_lo;
        double k = sp->layers[l].fixed_share + (1 - sp->layers[l].fixed_share) * rows / 12.0;
        for (int i = x->op_begin; i < x->op_end; i++) {
            double want = prog.ops[i].kind == PT_OP_FWD   ? sp->layers[l].fwd_ms * k / 1000.0
                          : prog.ops[i].kind == PT_OP_BWD ? sp->layers[l].bwd_ms * k / 1000.0
                                                          : -1;
            if (want < 0)
                continue;
            double got = res.events[i].end - res.events[i].start;
            CHECK_MSG(fabs(got - want) < 1e-12, "worker %d op %d: sim %.9g formula %.9g", w, i, got,
                      want);
            seen += rows == 4;
        }
    }
    CHECK(seen > 0); /* the replicated stage's 4-row ops were checked */
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&st);
    pt_profile_free(&sp);
    pt_plan_free(&plan);
}

static void test_links(void)
{
    pt_profile *pf = ragged_profile();
    pt_link intra = {1e10, 1e-6}, inter = {1e8, 1e-4};
    pt_topology *t = pt_topology_uniform(2, 2, 1 << 30, intra, inter);
    pt_cost *c = NULL;
    REQUIRE(pt_cost_new(pf, t, &c, NULL) == 0);
    CHECK_NEAR(pt_cost_p2p_s(c, 0, 1, 1 << 20), 1e-6 + (1 << 20) / 1e10, 1e-15);
    CHECK_NEAR(pt_cost_p2p_s(c, 1, 2, 1 << 20), 1e-4 + (1 << 20) / 1e8, 1e-15);
    CHECK(pt_cost_p2p_s(c, 3, 3, 1 << 20) == 0);
    CHECK(pt_cost_link_s(inter, 0) == 0);
    CHECK(pt_cost_ring_allreduce_s(1, 1 << 20, 1, 1) == 0);
    CHECK_NEAR(pt_cost_ring_allreduce_s(4, 1000, 0.5, 100), 6 * 0.5 + 1.5 * 10, 1e-12);
    pt_cost_free(&c);
    /* a topology with a zero bandwidth is refused with the field named */
    t->inter.bandwidth = 0;
    pt_error err = {0};
    CHECK(pt_cost_new(pf, t, &c, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "inter.bandwidth");
    CHECK(c == NULL);
    pt_topology_free(&t);
    pt_profile_free(&pf);
}

/* pt_cost_boundary_s is what the simulator charges the slowest sender. */
static void test_boundary_matches_simulator(void)
{
    const int reps_list[][2] = {{1, 1}, {2, 3}, {3, 2}, {4, 1}, {1, 4}};
    for (int c = 0; c < 5; c++) {
        pt_plan *plan = fx_plan(PT_SCHED_GPIPE, 2, 1, reps_list[c], 12, 2);
        pt_profile *pf = fx_profile(2, 1, 1, 12000, 10, 12);
        pt_link intra = {1e9, 1e-5}, inter = {1e8, 1e-4};
        pt_topology *t = pt_topology_uniform(2, 4, 1 << 30, intra, inter);
        pt_cost *cost = NULL;
        pt_sim *sim = NULL;
        pt_program prog = {0};
        pt_sim_result res;
        REQUIRE(pt_cost_new(pf, t, &cost, NULL) == 0 && pt_sim_new(&sim) == 0);
        REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0);
        double worst = 0;
        for (int w = prog.stage_worker[0]; w < prog.stage_worker[1]; w++) {
            double sum = 0;
            for (int i = prog.workers[w].op_begin; i < prog.workers[w].op_end; i++)
                if (prog.ops[i].kind == PT_OP_SEND_ACT && prog.ops[i].mb == 0)
                    sum += res.events[i].end - res.events[i].start;
            if (sum > worst)
                worst = sum;
        }
        double b = pt_cost_boundary_s(cost, plan->stages[0].replicas, reps_list[c][0],
                                      plan->stages[1].replicas, reps_list[c][1], 12, 12000);
        CHECK_MSG(fabs(worst - b) < 1e-12, "reps %d:%d: sim %.9g model %.9g", reps_list[c][0],
                  reps_list[c][1], worst, b);
        CHECK(b > 0);
        pt_program_release(&prog);
        pt_sim_free(&sim);
        pt_cost_free(&cost);
        pt_topology_free(&t);
        pt_profile_free(&pf);
        pt_plan_free(&plan);
    }
}

/* The analytic model and the simulator's event tracking agree per category,
 * on in-flight micro-batches and on weight versions, for every kind. */
/* ... in a precision: fp32, and bf16, whose optimizer state (fp32 master
 * weights and moments) the simulator must charge as the model does. */
static void memory_model_matches_simulator(int precision)
{
    pt_profile *pf = ragged_profile();
    pf->precision = precision;
    pt_topology *t = fx_topo(2, 8, 1e9, 1e-6);
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    REQUIRE(pt_cost_new(pf, t, &cost, NULL) == 0 && pt_sim_new(&sim) == 0);
    const int cuts[][4] = {{5, 0, 0, 0}, {2, 5, 0, 0}, {1, 3, 5, 0}, {1, 2, 4, 5}};
    const int reps[][4] = {{1, 1, 1, 1}, {2, 1, 3, 1}, {1, 3, 1, 2}};
    int compared = 0;
    for (int kind = 0; kind < PT_SCHED_BUILTIN_COUNT; kind++)
        for (int S = 1; S <= 4; S++)
            for (int rp = 0; rp < 3; rp++)
                for (int M = 1; M <= 6; M += 2)
                    for (int var = 0; var < 4; var++) {
                        if ((kind == PT_SCHED_2BW && M < S) ||
                            pt_sched_kind_has(kind, PT_SCHED_OPT_CHUNKS)) /* own test */
                            continue;
                        pt_plan *plan = fx_plan((pt_sched_kind)kind, S, 1, reps[rp], 6, M);
                        plan->layer_count = 5;
                        for (int s = 0; s < S; s++) {
                            plan->stages[s].first = s ? cuts[S - 1][s - 1] : 0;
                            plan->stages[s].last = cuts[S - 1][s];
                            plan->stages[s].recompute = (var & 1) && s != 1;
                        }
                        plan->policy = (var & 2) ? 'B' : 'A';
                        plan->vertical_sync = (var & 2) ? 1 : 0;
                        plan->optimizer.kind = (var & 2) ? PT_OPTIM_ADAM : PT_OPTIM_SGD;
                        pt_error err = {0};
                        int rc = pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err);
                        CHECK_MSG(rc == 0, "%s", err.msg);
                        if (rc < 0) {
                            pt_plan_free(&plan);
                            continue;
                        }
                        for (int w = 0; w < prog.worker_count; w++) {
                            const pt_worker *x = &prog.workers[w];
                            pt_mem_query q = {plan->schedule,
                                              plan->policy,
                                              plan->vertical_sync,
                                              plan->optimizer.kind,
                                              S,
                                              x->stage,
                                              x->first,
                                              x->last,
                                              x->row_hi - x->row_lo,
                                              M,
                                              x->recompute,
                                              1};
                            pt_mem m;
                            pt_cost_stage_memory(cost, &q, &m);
                            const pt_sim_worker *sw = &res.workers[w];
                            int64_t sum = 0;
                            for (int k = 0; k < PT_MEM_KIND_COUNT; k++) {
                                CHECK_MSG(sw->peak.bytes[k] == m.bytes[k],
                                          "%s S %d reps %d M %d var %d stage %d %s: sim %lld "
                                          "model %lld",
                                          pt_sched_kind_name(kind), S, rp, M, var, x->stage,
                                          pt_mem_kind_name(k), (long long)sw->peak.bytes[k],
                                          (long long)m.bytes[k]);
                                sum += m.bytes[k];
                            }
                            CHECK(m.total == sum);
                            CHECK(sw->peak.total <= m.total && sw->peak.total > 0);
                            CHECK(sw->peak_inflight == pt_cost_stage_inflight(&q));
                            if (!x->recompute)
                                CHECK(sw->peak_inflight == pt_cost_inflight(plan->schedule,
                                                                            plan->policy, S,
                                                                            x->stage, M));
                            CHECK(sw->peak_versions == pt_cost_weight_versions(plan->schedule,
                                                                               plan->vertical_sync,
                                                                               S, x->stage));
                            compared++;
                        }
                        pt_plan_free(&plan);
                    }
    CHECK(compared > 1000);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&t);
    pt_profile_free(&pf);
}

static void test_memory_model_matches_simulator(void)
{
    memory_model_matches_simulator(PT_PRECISION_FP32);
    memory_model_matches_simulator(PT_PRECISION_BF16);
}

/* The optimizer step streams weights, gradients and state: (3 + 2k) passes
 * over an fp32 profile's parameter bytes, and in bf16 three passes over the
 * 2-byte weights plus two over the fp32 master weights and moments (4 + 4k
 * bytes per parameter); at the roofline's bandwidth when the profile has
 * one, times the device's speed. */
static void test_opt_step(void)
{
    pt_topology *t = fx_topo(1, 2, 1e9, 0);
    t->devices[1].speed = 2.5;
    const double bw = 2e12;
    const struct {
        int precision;
        pt_optim_kind optim;
        double bytes; /* touched by a step over 4096 parameter bytes */
        int64_t state;
    } cases[] = {{PT_PRECISION_FP32, PT_OPTIM_SGD, 4096.0 * 5, 4096},
                 {PT_PRECISION_FP32, PT_OPTIM_ADAM, 4096.0 * 7, 8192},
                 /* 2048 parameters: 8 and 12 bytes of state each */
                 {PT_PRECISION_BF16, PT_OPTIM_SGD, 4096.0 * 3 + 2 * 16384, 16384},
                 {PT_PRECISION_BF16, PT_OPTIM_ADAM, 4096.0 * 3 + 2 * 24576, 24576}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pt_profile *pf = ragged_profile();
        pf->precision = cases[k].precision;
        pf->roofline = (pt_profile_roofline){1, 1e15, bw, 0};
        pt_cost *c = NULL;
        REQUIRE(pt_cost_new(pf, t, &c, NULL) == 0);
        CHECK(pt_cost_optim_state_bytes(c, 4096, cases[k].optim) == cases[k].state);
        CHECK_NEAR(pt_cost_opt_step_s(c, 4096, cases[k].optim, 1), cases[k].bytes / (bw * 2.5),
                   1e-18);
        pt_cost_free(&c);
        pt_profile_free(&pf);
    }
    pt_topology_free(&t);
}

static void test_check_memory(void)
{
    pt_profile *pf = ragged_profile();
    pt_topology *t = fx_topo(1, 4, 1e9, 0);
    int reps[3] = {1, 2, 1};
    pt_plan *plan = fx_plan(PT_SCHED_GPIPE, 3, 1, reps, 8, 4);
    plan->layer_count = 5;
    plan->stages[0].last = 2;
    plan->stages[1].first = 2;
    plan->stages[1].last = 4;
    plan->stages[2].first = 4;
    plan->stages[2].last = 5;
    pt_error err = {0};
    CHECK(pt_cost_check_memory(plan, pf, t, &err) == 0);
    /* the need of stage 1 replica 0, from the model, is the limit that just fits */
    pt_cost *c = NULL;
    REQUIRE(pt_cost_new(pf, t, &c, NULL) == 0);
    pt_mem_query q = {PT_SCHED_GPIPE, 'A', 0, PT_OPTIM_SGD, 3, 1, 2, 4, 4, 4, 0, 1};
    pt_mem m;
    pt_cost_stage_memory(c, &q, &m);
    t->devices[1].memory_bytes = m.total;
    CHECK(pt_cost_check_memory(plan, pf, t, &err) == 0);
    t->devices[1].memory_bytes = m.total - 1;
    CHECK(pt_cost_check_memory(plan, pf, t, &err) == PT_ENOFIT);
    CHECK_STR_CONTAINS(err.msg, "stages[1]");
    CHECK_STR_CONTAINS(err.msg, "device 1");
    CHECK_STR_CONTAINS(err.msg, t->devices[1].name);
    CHECK_STR_CONTAINS(err.msg, "needs");
    /* the simulator agrees: that replica no longer fits */
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    REQUIRE(pt_sim_new(&sim) == 0);
    REQUIRE(pt_sim_plan(sim, plan, c, NULL, &prog, &res, NULL) == 0);
    CHECK(res.fits == 0);
    CHECK(res.worst_worker == 1);
    t->devices[1].memory_bytes = m.total;
    REQUIRE(pt_sim_plan(sim, plan, c, NULL, &prog, &res, NULL) == 0);
    CHECK(res.fits == 1);
    /* a device outside the topology is an error, not a fit */
    pt_plan_set_replicas(plan, 2, (int[]){7}, 1);
    CHECK(pt_cost_check_memory(plan, pf, t, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "stages[2].replicas[0]");
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&c);
    pt_plan_free(&plan);
    pt_topology_free(&t);
    pt_profile_free(&pf);
}

PT_TEST_MAIN({"compute_times", test_compute_times}, {"fixed_share_rows", test_fixed_share_rows},
             {"links", test_links}, {"boundary_matches_simulator", test_boundary_matches_simulator},
             {"memory_model_matches_simulator", test_memory_model_matches_simulator},
             {"check_memory", test_check_memory}, {"opt_step", test_opt_step})

/* Simulator: closed forms (iteration time and bubble of gpipe/dapple with
 * free communication), in-flight activations and weight versions per stage
 * from the simulated memory events, ring all-reduce time, replication speed,
 * overlap of communication with compute, Pipe-SGD's max(compute, comm), and
 * agreement with the validator on deadlocks. */
#include "tests/planner/sim_rig.h"
#include "tests/test.h"

#define F_MS 2.0
#define B_MS 5.0
#define TOL  1e-9

typedef fx_rig rig;

/* S equal stages of one layer; devices on one node of a fast link unless
 * bw/lat say otherwise. opt_free makes optimizer steps cost nothing. A rig
 * already built is simulated again under `kind`. */
static int rig_run(rig *g, pt_sched_kind kind, int S, int M, const int *reps, int mb_size,
                   int64_t act, int64_t par, double bw, double lat, int opt_free, int windows)
{
    int devs = 0;
    for (int s = 0; s < S; s++)
        devs += reps ? reps[s] : 1;
    if (!g->plan)
        g->plan = fx_plan(kind, S, 1, reps, mb_size, M);
    g->plan->schedule = kind;
    fx_rig_costs c = {S, devs, F_MS, B_MS, act, par, bw, lat, opt_free};
    pt_sched_opts o = {.microbatches = M, .windows = windows};
    return fx_rig_sim(g, &c, &o, 0);
}

#define rig_free fx_rig_free

static void test_closed_form_sync(void)
{
    const pt_sched_kind kinds[] = {PT_SCHED_GPIPE, PT_SCHED_DAPPLE, PT_SCHED_1F1B_FLUSH};
    for (int S = 1; S <= 6; S++)
        for (int M = 1; M <= 9; M++)
            for (int k = 0; k < 3; k++) {
                rig g = {0};
                REQUIRE(rig_run(&g, kinds[k], S, M, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0) == 0);
                double want = (M + S - 1) * (F_MS + B_MS) / 1000.0;
                CHECK_MSG(fabs(g.res.iter_s - want) < TOL, "%s S %d M %d: %.9f vs %.9f",
                          pt_sched_kind_name(kinds[k]), S, M, g.res.iter_s, want);
                double bubble = (double)(S - 1) / (M + S - 1);
                CHECK_NEAR(g.res.bubble_frac, bubble, 1e-9);
                for (int w = 0; w < g.res.worker_count; w++)
                    CHECK_NEAR(g.res.workers[w].bubble_frac, bubble, 1e-9);
                CHECK_NEAR(g.res.throughput, 4.0 * M / want, 1e-6 * g.res.throughput);
                rig_free(&g);
            }
}

/* Communication can only add time, and the optimizer step is on every
 * worker's critical path at the end. */
static void test_costs_add_time(void)
{
    rig g = {0};
    REQUIRE(rig_run(&g, PT_SCHED_DAPPLE, 4, 6, NULL, 4, 1000, 4000, FX_FAST_BPS, 0, 1, 0) == 0);
    double free_t = g.res.iter_s;
    rig_free(&g);
    REQUIRE(rig_run(&g, PT_SCHED_DAPPLE, 4, 6, NULL, 4, 1000, 4000, FX_FAST_BPS, 0, 0, 0) == 0);
    double opt = pt_cost_opt_step_s(g.cost, 4000, PT_OPTIM_SGD, 0);
    CHECK(opt > 0);
    CHECK_NEAR(g.res.iter_s, free_t + opt, 1e-12);
    rig_free(&g);
    REQUIRE(rig_run(&g, PT_SCHED_DAPPLE, 4, 6, NULL, 4, 1000, 4000, 1e6, 1e-4, 1, 0) == 0);
    CHECK(g.res.iter_s > free_t + 2 * 3 * (1e-4 + 1e-3)); /* >= one round trip of transfers */
    rig_free(&g);
}

static void test_inflight_activations(void)
{
    for (int S = 1; S <= 5; S++)
        for (int M = 1; M <= 8; M++) {
            const pt_sched_kind kinds[] = {PT_SCHED_GPIPE, PT_SCHED_DAPPLE, PT_SCHED_DAPPLE};
            for (int k = 0; k < 3; k++) {
                rig g = {0};
                g.plan = NULL;
                int rc = rig_run(&g, kinds[k], S, M, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0);
                if (k == 2) { /* policy B */
                    g.plan->policy = 'B';
                    rc = rig_run(&g, kinds[k], S, M, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0);
                }
                REQUIRE(rc == 0);
                for (int w = 0; w < g.res.worker_count; w++) {
                    int i = g.prog.workers[w].stage, want;
                    if (k == 0)
                        want = M;
                    else if (k == 1)
                        want = S - i < M ? S - i : M;
                    else
                        want = 2 * (S - i) - 1 < M ? 2 * (S - i) - 1 : M;
                    CHECK_MSG(g.res.workers[w].peak_inflight == want, "kind %d S %d M %d i %d: %d",
                              k, S, M, i, g.res.workers[w].peak_inflight);
                    /* bytes: stage input (1000) + its one layer's output (1000) per micro-batch */
                    CHECK(g.res.workers[w].peak.bytes[PT_MEM_ACTS] == (int64_t)want * 2000);
                    CHECK(g.res.workers[w].peak_versions == 1);
                }
                rig_free(&g);
            }
        }
    /* recomputation: a micro-batch in flight keeps the stage's input and output, the
     * inner layers' outputs exist for one micro-batch (none here: one layer a stage) */
    rig g = {0};
    REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 3, 5, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0) == 0);
    for (int s = 0; s < 3; s++)
        g.plan->stages[s].recompute = 1;
    REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 3, 5, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0) == 0);
    for (int w = 0; w < g.res.worker_count; w++)
        CHECK(g.res.workers[w].peak.bytes[PT_MEM_ACTS] == 5 * (1000 + 1000));
    rig_free(&g);
    /* two layers a stage: the inner layer's output once */
    pt_plan *plan = fx_plan(PT_SCHED_GPIPE, 3, 2, NULL, 4, 5);
    pt_profile *pf = fx_profile(6, F_MS, B_MS, 1000, 100, 4);
    pt_topology *topo = fx_topo(1, 3, FX_FAST_BPS, 0);
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    REQUIRE(pt_cost_new(pf, topo, &cost, NULL) == 0 && pt_sim_new(&sim) == 0);
    for (int s = 0; s < 3; s++)
        plan->stages[s].recompute = 1;
    REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0);
    for (int w = 0; w < res.worker_count; w++)
        CHECK(res.workers[w].peak.bytes[PT_MEM_ACTS] == 5 * (1000 + 1000) + 1000);
    for (int s = 0; s < 3; s++)
        plan->stages[s].recompute = 0;
    REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0);
    for (int w = 0; w < res.worker_count; w++)
        CHECK(res.workers[w].peak.bytes[PT_MEM_ACTS] == 5 * (1000 + 2000));
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&pf);
    pt_plan_free(&plan);
    REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 3, 5, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0) == 0);
    for (int s = 0; s < 3; s++)
        g.plan->stages[s].recompute = 1;
    REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 3, 5, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0) == 0);
    /* and it costs one more forward per micro-batch */
    CHECK_NEAR(g.res.iter_s, (5 + 3 - 1) * (2 * F_MS + B_MS) / 1000.0, TOL);
    rig_free(&g);
}

static void test_weight_versions(void)
{
    for (int S = 1; S <= 6; S++)
        for (int vs = 0; vs < 2; vs++) {
            rig g = {0};
            REQUIRE(rig_run(&g, PT_SCHED_PIPEDREAM, S, 4, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1,
                            0) == 0);
            g.plan->vertical_sync = vs;
            REQUIRE(rig_run(&g, PT_SCHED_PIPEDREAM, S, 4, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1,
                            0) == 0);
            for (int w = 0; w < g.res.worker_count; w++) {
                int i = g.prog.workers[w].stage;
                /* a stash holds the array its forward read: without vertical sync
                 * one per micro-batch in flight, the newest the live weights; with
                 * it a later stage also keeps the versions its coming micro-batches
                 * entered with: S arrays (as the runtime holds, executor_async_test) */
                int want = !vs ? S - i : S;
                CHECK_MSG(g.res.workers[w].peak_versions == want, "vsync %d S %d i %d: %d want %d",
                          vs, S, i, g.res.workers[w].peak_versions, want);
                CHECK_MSG(g.res.workers[w].peak_versions ==
                              pt_cost_weight_versions(PT_SCHED_PIPEDREAM, vs, S, i),
                          "vsync %d S %d i %d: %d", vs, S, i, g.res.workers[w].peak_versions);
                CHECK(g.res.workers[w].peak_inflight == S - i);
                CHECK(g.res.workers[w].peak.bytes[PT_MEM_STASH] ==
                      (int64_t)(g.res.workers[w].peak_versions - 1) * 100);
            }
            rig_free(&g);
        }
    for (int S = 1; S <= 5; S++)
        for (int M = S; M <= S + 3; M++) {
            rig g = {0};
            REQUIRE(rig_run(&g, PT_SCHED_2BW, S, M, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0) == 0);
            for (int w = 0; w < g.res.worker_count; w++)
                CHECK_MSG(g.res.workers[w].peak_versions == 2, "2bw S %d M %d w %d: %d", S, M, w,
                          g.res.workers[w].peak_versions);
            rig_free(&g);
            REQUIRE(rig_run(&g, PT_SCHED_PIPESGD, S, M, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 0) ==
                    0);
            for (int w = 0; w < g.res.worker_count; w++) {
                CHECK(g.res.workers[w].peak_versions == 1);
                /* the delayed gradient and the accumulating one */
                CHECK(g.res.workers[w].peak.bytes[PT_MEM_GRADS] == 200);
            }
            rig_free(&g);
        }
}

/* Asynchronous kinds keep every stage busy in the steady state. */
static void test_async_steady_state(void)
{
    const pt_sched_kind kinds[] = {PT_SCHED_PIPEDREAM, PT_SCHED_2BW};
    for (int k = 0; k < 2; k++)
        for (int S = 1; S <= 5; S++) {
            int M = S + 1;
            rig g = {0};
            REQUIRE(rig_run(&g, kinds[k], S, M, NULL, 4, 1000, 100, FX_FAST_BPS, 0, 1, 6) == 0);
            CHECK_MSG(fabs(g.res.iter_s - M * (F_MS + B_MS) / 1000.0) < TOL, "%s S %d: %.9f",
                      pt_sched_kind_name(kinds[k]), S, g.res.iter_s);
            CHECK(g.res.bubble_frac < 1e-9);
            rig_free(&g);
        }
}

static double ring(int p, double n, double a, double b)
{
    return 2.0 * (p - 1) * a + 2.0 * (p - 1) / p * n / b;
}

static void test_allreduce_ring(void)
{
    for (int r = 2; r <= 6; r++) {
        rig g = {0};
        int reps[1] = {r};
        const double bw = 1e9, lat = 2e-5;
        REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 1, 3, reps, 12, 1000, 1 << 20, bw, lat, 1, 0) == 0);
        int found = 0;
        for (int i = 0; i < g.prog.op_count; i++)
            if (g.prog.ops[i].kind == PT_OP_ALLREDUCE) {
                found++;
                double d = g.res.events[i].end - g.res.events[i].start;
                CHECK_NEAR(d, ring(r, 1 << 20, lat, bw), 1e-12);
            }
        CHECK(found == r);
        /* pure data parallelism: the largest share of the 12 rows sets the compute time,
         * then the all-reduce (the step is free here) */
        int most = 0;
        for (int j = 0; j < r; j++)
            if (12 * (j + 1) / r - 12 * j / r > most)
                most = 12 * (j + 1) / r - 12 * j / r;
        CHECK_NEAR(g.res.iter_s, 3 * (F_MS + B_MS) / 1000.0 * most / 12 + ring(r, 1 << 20, lat, bw),
                   1e-9);
        rig_free(&g);
    }
    /* across nodes the ring runs at the inter-node link */
    pt_profile *pf = fx_profile(1, 1, 1, 10, 1 << 20, 4);
    pt_link fast = {1e11, 1e-6}, slow = {1e9, 1e-4};
    pt_topology *t = pt_topology_uniform(2, 2, 1 << 30, fast, slow);
    pt_cost *c = NULL;
    REQUIRE(pt_cost_new(pf, t, &c, NULL) == 0);
    int same[2] = {0, 1}, cross[4] = {0, 1, 2, 3};
    CHECK_NEAR(pt_cost_allreduce_s(c, same, 2, 1 << 20), ring(2, 1 << 20, 1e-6, 1e11), 1e-15);
    CHECK_NEAR(pt_cost_allreduce_s(c, cross, 4, 1 << 20), ring(4, 1 << 20, 1e-4, 1e9), 1e-15);
    pt_cost_free(&c);
    pt_topology_free(&t);
    pt_profile_free(&pf);
}

static void test_replication_speed(void)
{
    for (int r = 1; r <= 4; r *= 2) {
        rig g = {0};
        int reps[2] = {1, r};
        REQUIRE(rig_run(&g, PT_SCHED_DAPPLE, 2, 4, reps, 8, 1000, 100, FX_FAST_BPS, 0, 1, 0) == 0);
        for (int i = 0; i < g.prog.op_count; i++) {
            int w = g.res.events[i].worker;
            if (g.prog.ops[i].kind == PT_OP_FWD)
                CHECK_NEAR(g.res.events[i].end - g.res.events[i].start,
                           F_MS / 1000.0 / g.prog.workers[w].replica_count, 1e-12);
            if (g.prog.ops[i].kind == PT_OP_BWD)
                CHECK_NEAR(g.res.events[i].end - g.res.events[i].start,
                           B_MS / 1000.0 / g.prog.workers[w].replica_count, 1e-12);
        }
        rig_free(&g);
    }
}

/* A send occupies the sender's comm lane and the data arrives after
 * latency + bytes/bandwidth, while the sender's compute goes on. */
static void test_comm_overlaps_compute(void)
{
    rig g = {0};
    const double bw = 1e6, lat = 1e-3; /* 1000 bytes: 2 ms per transfer */
    REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 2, 4, NULL, 4, 1000, 100, bw, lat, 1, 0) == 0);
    double xfer = lat + 1000 / bw;
    for (int mb = 0; mb < 4; mb++) {
        int s = fx_find(&g.prog, 0, PT_OP_SEND_ACT, mb), f = fx_find(&g.prog, 0, PT_OP_FWD, mb);
        int r = fx_find(&g.prog, 1, PT_OP_RECV_ACT, mb);
        CHECK_NEAR(g.res.events[s].end - g.res.events[s].start, xfer, 1e-12);
        CHECK(g.res.events[s].start >= g.res.events[f].end - 1e-12);
        CHECK_NEAR(g.res.events[r].end, g.res.events[s].end, 1e-12);
        CHECK(g.res.events[s].lane == PT_LANE_COMM && g.res.events[r].lane == PT_LANE_WAIT);
        if (mb > 0) /* forwards run back to back although the previous send is in flight */
            CHECK_NEAR(g.res.events[f].start,
                       g.res.events[fx_find(&g.prog, 0, PT_OP_FWD, mb - 1)].end, 1e-12);
    }
    rig_free(&g);
}

/* Pipe-SGD: an iteration costs max(compute + step, all-reduce); synchronous
 * data parallelism costs compute + all-reduce + step. */
static void test_pipesgd_overlap(void)
{
    for (int slow = 0; slow < 2; slow++) {
        rig g = {0};
        int reps[1] = {2};
        double bw = slow ? 2e8 : 4e9;
        REQUIRE(rig_run(&g, PT_SCHED_PIPESGD, 1, 2, reps, 4, 1000, 1 << 22, bw, 1e-5, 0, 6) == 0);
        double compute = 2 * (F_MS + B_MS) / 1000.0 / 2;
        double ar = ring(2, 1 << 22, 1e-5, bw);
        double step = pt_cost_opt_step_s(g.cost, 1 << 22, PT_OPTIM_SGD, 0);
        double want = compute + step > ar ? compute + step : ar;
        CHECK_MSG(fabs(g.res.iter_s - want) < 1e-9, "slow %d: %.9f vs %.9f (c %.6f ar %.6f)", slow,
                  g.res.iter_s, want, compute, ar);
        rig_free(&g);
        REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 1, 2, reps, 4, 1000, 1 << 22, bw, 1e-5, 0, 0) == 0);
        CHECK_NEAR(g.res.iter_s, compute + ar + step, 1e-9);
        rig_free(&g);
    }
}

static void test_deadlock_and_errors(void)
{
    rig g = {0};
    REQUIRE(rig_run(&g, PT_SCHED_DAPPLE, 3, 4, NULL, 4, 1000, 100, 1e9, 0, 1, 0) == 0);
    pt_program *p = &g.prog;
    fx_move_op(p, fx_find(p, 2, PT_OP_SEND_GRAD, 0), fx_find(p, 2, PT_OP_RECV_ACT, 1));
    fx_move_op(p, fx_find(p, 1, PT_OP_RECV_GRAD, 0), fx_find(p, 1, PT_OP_SEND_ACT, 1));
    pt_error e1 = {0}, e2 = {0};
    CHECK(pt_sched_validate(p, &e1) == PT_EDEADLOCK);
    CHECK(pt_sim_run(g.sim, p, g.cost, &g.res, &e2) == PT_EDEADLOCK);
    CHECK_STR_CONTAINS(e2.msg, "RECV_GRAD mb 0");
    /* a device the topology lacks */
    REQUIRE(rig_run(&g, PT_SCHED_DAPPLE, 3, 4, NULL, 4, 1000, 100, 1e9, 0, 1, 0) == 0);
    g.prog.workers[1].device = 99;
    CHECK(pt_sim_run(g.sim, &g.prog, g.cost, &g.res, &e2) == PT_EINVAL);
    CHECK_STR_CONTAINS(e2.msg, "device 99");
    rig_free(&g);
}

/* Sizes from outside whose memory figures overflow 64 bits are refused by
 * name (issue 13: signed overflow in the activation sums, seen by UBSan); just
 * below the bound the peak is exact. */
static void test_size_overflow(void)
{
    rig g = {0};
    const int M = 1 << 10;
    CHECK(rig_run(&g, PT_SCHED_GPIPE, 2, M, NULL, 1, 1LL << 52, 100, 1e9, 0, 1, 0) == PT_ERANGE);
    CHECK_STR_CONTAINS(g.err.msg, "need more than 2^63 bytes");
    rig_free(&g);
    REQUIRE(rig_run(&g, PT_SCHED_GPIPE, 2, M, NULL, 1, 1LL << 50, 100, 1e9, 0, 1, 0) == 0);
    /* gpipe keeps every micro-batch's activations on the last stage's worker */
    int64_t acts = g.res.workers[1].peak.bytes[PT_MEM_ACTS];
    CHECK_MSG(acts >= (int64_t)M * (1LL << 50), "peak activations %lld", (long long)acts);
    rig_free(&g);
}

/* Same input, same timeline; a reused pt_sim gives the same as a fresh one. */
static void test_deterministic_and_reusable(void)
{
    rig a = {0}, b = {0};
    int reps[3] = {2, 1, 3};
    REQUIRE(rig_run(&a, PT_SCHED_DAPPLE, 3, 8, reps, 6, 5000, 3000, 1e8, 1e-5, 0, 0) == 0);
    REQUIRE(rig_run(&a, PT_SCHED_PIPEDREAM, 3, 8, reps, 6, 5000, 3000, 1e8, 1e-5, 0, 0) == 0);
    REQUIRE(rig_run(&a, PT_SCHED_DAPPLE, 3, 8, reps, 6, 5000, 3000, 1e8, 1e-5, 0, 0) == 0);
    REQUIRE(rig_run(&b, PT_SCHED_DAPPLE, 3, 8, reps, 6, 5000, 3000, 1e8, 1e-5, 0, 0) == 0);
    REQUIRE(a.res.event_count == b.res.event_count);
    CHECK(a.res.iter_s == b.res.iter_s);
    for (int i = 0; i < a.res.event_count; i++)
        CHECK(a.res.events[i].start == b.res.events[i].start &&
              a.res.events[i].end == b.res.events[i].end);
    for (int w = 0; w < a.res.worker_count; w++)
        CHECK(!memcmp(&a.res.workers[w].peak, &b.res.workers[w].peak, sizeof(pt_mem)));
    rig_free(&a);
    rig_free(&b);
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Random damage to valid programs: neither the validator nor the simulator
 * may crash (the sanitizer build runs this), every program the validator
 * accepts must simulate, and a simulated deadlock must be a rejected program. */
static void test_mutants(void)
{
    uint32_t seed = 12345;
    int accepted = 0, rejected = 0;
    const pt_sched_kind kinds[] = {PT_SCHED_GPIPE, PT_SCHED_DAPPLE, PT_SCHED_PIPEDREAM,
                                   PT_SCHED_2BW, PT_SCHED_PIPESGD};
    int reps[3] = {2, 1, 3};
    for (int trial = 0; trial < 600; trial++) {
        rig g = {0};
        int async = kinds[trial % 5] >= PT_SCHED_PIPEDREAM;
        REQUIRE(rig_run(&g, kinds[trial % 5], 3, 3, reps, 6, 1000, 100, 1e9, 1e-6, 0,
                        async ? 3 : 0) == 0);
        pt_program *p = &g.prog;
        int n = 1 + (int)(lcg(&seed) % 3);
        for (int k = 0; k < n; k++) {
            int i = (int)(lcg(&seed) % (uint32_t)p->op_count);
            int v = (int)(lcg(&seed) % 9) - 1;
            pt_op *op = &p->ops[i];
            switch (lcg(&seed) % 10) {
            case 0:
                op->kind = (uint8_t)(lcg(&seed) % (PT_OP_KIND_COUNT + 1));
                break;
            case 1:
                op->flags ^= (uint8_t)(1 + lcg(&seed) % 3);
                break;
            case 2:
                op->mb = v;
                break;
            case 3:
                op->mb_end = v;
                break;
            case 4:
                op->version = v;
                break;
            case 5:
                op->peer = v;
                break;
            case 6:
                op->row_lo = v;
                break;
            case 7:
                op->row_hi = v;
                break;
            case 8:
                fx_delete_op(p, i);
                break;
            default: { /* swap with a neighbour on the same worker */
                int w = g.res.events[i].worker;
                if (i + 1 < p->workers[w].op_end) {
                    pt_op t = p->ops[i];
                    p->ops[i] = p->ops[i + 1];
                    p->ops[i + 1] = t;
                }
            }
            }
        }
        pt_error e1 = {0}, e2 = {0};
        int v = pt_sched_validate(p, &e1);
        int s = pt_sim_run(g.sim, p, g.cost, &g.res, &e2);
        if (v == 0) {
            accepted++;
            CHECK_MSG(s == 0, "accepted program fails to simulate: %s", e2.msg);
        } else {
            rejected++;
            CHECK(e1.msg[0] != '\0');
        }
        if (s == PT_EDEADLOCK)
            CHECK_MSG(v != 0, "simulator deadlock in an accepted program: %s", e2.msg);
        rig_free(&g);
    }
    CHECK(rejected > 300); /* most damage is caught */
    CHECK(accepted > 0);   /* some damage is harmless (a swap of independent ops) */
}

/* Devices sharing cores: 4 stages on one node of 4 devices. With 4 or more
 * cores (or none said) every compute op lasts its cost. With 2 or 1 the
 * pipeline's workers are stretched by how many compute at once: every op of
 * worker w lasts its reported core_stretch times its cost, that stretch lies
 * strictly between 1 and workers / cores (the fill and drain leave cores
 * idle), and the makespan grows, by less than workers / cores. A node of
 * its own keeps its speed. */
static void test_shared_cores(void)
{
    const int S = 4, M = 4;
    pt_profile *pf = fx_profile(S, F_MS, B_MS, 1000, 100, 4);
    pt_topology *topo = fx_topo(2, S, FX_FAST_BPS, 0);
    pt_plan *plan = fx_plan(PT_SCHED_GPIPE, S, 1, NULL, 4, M);
    REQUIRE(pf && topo && plan);
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    const int cores[] = {0, 4, 8, 2, 1};
    const double most[] = {1, 1, 1, 2, 4};
    double makespan[5];
    for (int k = 0; k < 5; k++) {
        for (int d = 0; d < S; d++)
            topo->devices[d].node_cores = cores[k];
        topo->devices[S].node_cores = 1; /* the other node: unused by the plan */
        pt_cost *cost = NULL;
        pt_program prog = {0};
        pt_sim_result res;
        REQUIRE(pt_cost_new(pf, topo, &cost, NULL) == 0);
        pt_cost_set_opt_bandwidth(cost, 0);
        REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0);
        for (int w = 0; w < res.worker_count; w++) {
            double st = res.workers[w].core_stretch;
            if (most[k] == 1)
                CHECK_NEAR(st, 1.0, 1e-12);
            else
                CHECK_MSG(st > 1.0 + 1e-6 && st < most[k] - 1e-6, "cores %d worker %d: %g",
                          cores[k], w, st);
        }
        for (int i = 0; i < prog.op_count; i++) {
            const pt_op *op = &prog.ops[i];
            const pt_sim_event *ev = &res.events[i];
            double st = res.workers[ev->worker].core_stretch;
            if (op->kind == PT_OP_FWD || op->kind == PT_OP_BWD)
                CHECK_NEAR(ev->end - ev->start, st * (op->kind == PT_OP_FWD ? F_MS : B_MS) / 1000.0,
                           1e-12);
        }
        makespan[k] = res.makespan_s;
        pt_program_release(&prog);
        pt_cost_free(&cost);
    }
    for (int k = 1; k < 3; k++)
        CHECK_NEAR(makespan[k], makespan[0], 1e-9 * makespan[0]);
    for (int k = 3; k < 5; k++)
        CHECK(makespan[k] > 1.01 * makespan[0] && makespan[k] < most[k] * makespan[0]);
    CHECK(makespan[4] > makespan[3]);
    pt_sim_free(&sim);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&pf);
}

/* Replicas in lockstep all compute at once: 4 replicas of one stage on 2
 * shared cores are stretched by exactly 4 / 2 = 2, on 1 core by 4. */
static void test_shared_cores_lockstep(void)
{
    const int reps[1] = {4};
    pt_profile *pf = fx_profile(2, F_MS, B_MS, 1000, 100, 4);
    pt_topology *topo = fx_topo(1, 4, FX_FAST_BPS, 0);
    pt_plan *plan = fx_plan(PT_SCHED_GPIPE, 1, 2, reps, 8, 4);
    REQUIRE(pf && topo && plan);
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    for (int c = 1; c <= 2; c++) {
        for (int d = 0; d < 4; d++)
            topo->devices[d].node_cores = c;
        pt_cost *cost = NULL;
        pt_program prog = {0};
        pt_sim_result res;
        REQUIRE(pt_cost_new(pf, topo, &cost, NULL) == 0);
        REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, NULL) == 0);
        for (int w = 0; w < res.worker_count; w++)
            CHECK_NEAR(res.workers[w].core_stretch, 4.0 / c, 1e-9);
        pt_program_release(&prog);
        pt_cost_free(&cost);
    }
    pt_sim_free(&sim);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&pf);
}

/* pt_core_stretch on hand-made spans: w0 computes [0, 2), w1 [1, 3), w2
 * [0, 1) on another node. On one core each of w0, w1 spends half its time
 * alone and half sharing: stretch (1 + 2) / 2 = 1.5; on two cores none;
 * w2 is alone on its node; a worker without spans gets 1. */
static void test_core_stretch(void)
{
    for (int c = 1; c <= 2; c++) {
        pt_core_span sp[3] = {{0, 2, 0, 0, c}, {1, 3, 1, 0, c}, {0, 1, 2, 1, c}};
        double st[4] = {0, 0, 0, 0};
        REQUIRE(pt_core_stretch(sp, 3, 4, st) == 0);
        CHECK_NEAR(st[0], c == 1 ? 1.5 : 1.0, 1e-12);
        CHECK_NEAR(st[1], c == 1 ? 1.5 : 1.0, 1e-12);
        CHECK_NEAR(st[2], 1.0, 1e-12);
        CHECK_NEAR(st[3], 1.0, 1e-12);
    }
}

PT_TEST_MAIN(
    {"closed_form_sync", test_closed_form_sync}, {"costs_add_time", test_costs_add_time},
    {"inflight_activations", test_inflight_activations}, {"weight_versions", test_weight_versions},
    {"async_steady_state", test_async_steady_state}, {"allreduce_ring", test_allreduce_ring},
    {"replication_speed", test_replication_speed},
    {"comm_overlaps_compute", test_comm_overlaps_compute},
    {"pipesgd_overlap", test_pipesgd_overlap}, {"deadlock_and_errors", test_deadlock_and_errors},
    {"deterministic_and_reusable", test_deterministic_and_reusable}, {"mutants", test_mutants},
    {"size_overflow", test_size_overflow}, {"shared_cores", test_shared_cores},
    {"shared_cores_lockstep", test_shared_cores_lockstep}, {"core_stretch", test_core_stretch})

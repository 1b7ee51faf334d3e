/* Interleaved 1F1B (Megatron-LM): the plan's chunk placement and its errors,
 * the generator's order against Megatron's, the validator's host rules, and
 * the simulator's bubble, (S-1)/(v·M + S-1) of the iteration with equal
 * stages and free communication, and its in-flight activations per chunk
 * and per device against the schedule's formulas. */
#include "planner/interleave.h"
#include "planner/plan_util.h"
#include "planner/planner.h"
#include "tests/planner/sim_rig.h"
#include "tests/test.h"

#include <math.h>
#include <string.h>

#define F_MS 1.0
#define B_MS 2.0

/* P ranks of v one-layer chunks (stage d + c·P on rank d's devices), reps[d]
 * replicas of rank d (NULL: one each). */
static pt_plan *il_plan(int P, int v, const int *reps, int mb, int M)
{
    pt_plan *p = fx_plan(PT_SCHED_INTERLEAVED, P * v, 1, NULL, mb, M);
    if (!p)
        return NULL;
    p->chunks = v;
    int dev = 0;
    for (int d = 0; d < P; d++) {
        int r = reps ? reps[d] : 1, devs[16];
        for (int k = 0; k < r; k++)
            devs[k] = dev++;
        for (int c = 0; c < v; c++)
            if (pt_plan_set_replicas(p, d + c * P, devs, r) < 0)
                pt_plan_free(&p);
    }
    return p;
}

typedef fx_rig rig;

static int rig_run(rig *g, pt_plan *plan, int layers, int devices, double f, double b)
{
    g->plan = plan;
    fx_rig_costs c = fx_rig_free_comm(layers, devices, f, b);
    return fx_rig_sim(g, &c, NULL, 1);
}

#define rig_free fx_rig_free

/* Equal chunks, free communication: the iteration is (v·M + S-1) chunk units
 * of F+B, the bubble (S-1)/(v·M + S-1); 1F1B on the same layers as S stages
 * has (S-1)/(M + S-1). */
static void test_bubble(void)
{
    for (int v = 2; v <= 3; v++)
        for (int P = 2; P <= 5; P++)
            for (int M = P; M <= 4 * P; M += P) {
                rig g = {0};
                REQUIRE(rig_run(&g, il_plan(P, v, NULL, 4, M), P * v, P, F_MS, B_MS) == 0);
                double unit = (F_MS + B_MS) / 1000.0;
                double want_iter = (v * M + P - 1) * unit;
                double want_bubble = (double)(P - 1) / (v * M + P - 1);
                CHECK_MSG(fabs(g.res.iter_s - want_iter) < 1e-9,
                          "v %d S %d M %d: iteration %.6f s, want %.6f", v, P, M, g.res.iter_s,
                          want_iter);
                CHECK_MSG(fabs(g.res.bubble_frac - want_bubble) < 1e-9,
                          "v %d S %d M %d: bubble %.6f, want %.6f", v, P, M, g.res.bubble_frac,
                          want_bubble);
                CHECK(g.res.host_count == P);
                for (int h = 0; h < g.res.host_count; h++)
                    CHECK(g.res.hosts[h].worker_count == v);
                rig_free(&g);
            }
}

/* Peak in-flight activations: per chunk worker the kind's formula, per device
 * (all its chunks) Megatron's warm-up plus one, all v·M units when the
 * warm-up covers them. */
static void test_inflight(void)
{
    for (int v = 2; v <= 3; v++)
        for (int P = 2; P <= 4; P++)
            for (int M = P; M <= 3 * P; M += P) {
                rig g = {0};
                REQUIRE(rig_run(&g, il_plan(P, v, NULL, 4, M), P * v, P, F_MS, B_MS) == 0);
                for (int w = 0; w < g.prog.worker_count; w++) {
                    pt_sched_shape q = {P * v, g.prog.workers[w].stage, M, 'A', 0, 0, v};
                    int want = pt_sched_kind_inflight_interleaved(&q);
                    CHECK_MSG(g.res.workers[w].peak_inflight == want,
                              "v %d S %d M %d worker %d: %d in flight, formula %d", v, P, M, w,
                              g.res.workers[w].peak_inflight, want);
                    pt_mem_query mq = {PT_SCHED_INTERLEAVED,
                                       'A',
                                       0,
                                       PT_OPTIM_SGD,
                                       P * v,
                                       g.prog.workers[w].stage,
                                       0,
                                       1,
                                       4,
                                       M,
                                       0,
                                       v};
                    CHECK(pt_cost_stage_inflight(&mq) == want);
                }
                for (int d = 0; d < P; d++) {
                    int W = pt_sched_interleaved_warmup(P, v, M, d);
                    int want = W < v * M ? W + 1 : v * M;
                    CHECK_MSG(g.res.hosts[d].peak_inflight == want,
                              "v %d S %d M %d rank %d: %d in flight on the device, want %d", v, P,
                              M, d, g.res.hosts[d].peak_inflight, want);
                }
                rig_free(&g);
            }
}

/* The order of rank 0 for S = 2, v = 2, M = 4 as Megatron-LM runs it (warm-up
 * 2(S-1) + (v-1)S = 4 units): F0c0 F1c0 F0c1 F1c1 | F2c0 B0c1 F3c0 B1c1 F2c1
 * B0c0 F3c1 B1c0 | B2c1 B3c1 B2c0 B3c0; and v times 1F1B's messages. */
static void test_order_and_messages(void)
{
    rig g = {0};
    REQUIRE(rig_run(&g, il_plan(2, 2, NULL, 4, 4), 4, 2, F_MS, B_MS) == 0);
    const pt_program *p = &g.prog;
    static const struct {
        int kind, stage, mb;
    } want[] = {{PT_OP_FWD, 0, 0}, {PT_OP_FWD, 0, 1}, {PT_OP_FWD, 2, 0}, {PT_OP_FWD, 2, 1},
                {PT_OP_FWD, 0, 2}, {PT_OP_BWD, 2, 0}, {PT_OP_FWD, 0, 3}, {PT_OP_BWD, 2, 1},
                {PT_OP_FWD, 2, 2}, {PT_OP_BWD, 0, 0}, {PT_OP_FWD, 2, 3}, {PT_OP_BWD, 0, 1},
                {PT_OP_BWD, 2, 2}, {PT_OP_BWD, 2, 3}, {PT_OP_BWD, 0, 2}, {PT_OP_BWD, 0, 3}};
    int n = 0;
    for (int k = 0; k < pt_sched_host_len(p, 0); k++) {
        const pt_op *op = &p->ops[pt_sched_host_op(p, 0, k)];
        if (op->kind != PT_OP_FWD && op->kind != PT_OP_BWD)
            continue;
        int w = g.sim ? g.res.events[pt_sched_host_op(p, 0, k)].worker : -1;
        REQUIRE(n < 16);
        CHECK_MSG(op->kind == want[n].kind && p->workers[w].stage == want[n].stage &&
                      op->mb == want[n].mb,
                  "unit %d: %s stage %d mb %d, want %s stage %d mb %d", n, pt_op_name(op->kind),
                  p->workers[w].stage, op->mb, pt_op_name(want[n].kind), want[n].stage, want[n].mb);
        n++;
    }
    CHECK(n == 16);
    int sends = 0;
    for (int i = 0; i < p->op_count; i++)
        sends += p->ops[i].kind == PT_OP_SEND_ACT;
    CHECK(sends == (2 * 2 - 1) * 4); /* S·v - 1 boundaries, against 1F1B's S - 1 */
    rig_free(&g);
}

/* A replicated rank: the chunks' all-reduces pair up per chunk stage and the
 * program still validates and simulates. */
static void test_replicated(void)
{
    int reps[] = {2, 1, 1};
    rig g = {0};
    REQUIRE(rig_run(&g, il_plan(3, 2, reps, 4, 6), 6, 4, F_MS, B_MS) == 0);
    CHECK(g.res.host_count == 4);
    CHECK(g.prog.worker_count == 8);
    int ar = 0;
    for (int i = 0; i < g.prog.op_count; i++)
        ar += g.prog.ops[i].kind == PT_OP_ALLREDUCE;
    CHECK(ar >= 4); /* both replicas of both chunks of rank 0 */
    rig_free(&g);
}

/* The validator refuses a host order that runs a worker's ops out of its
 * program order, and a deadlocking one. */
static void test_validator_hosts(void)
{
    rig g = {0};
    REQUIRE(rig_run(&g, il_plan(2, 2, NULL, 4, 4), 4, 2, F_MS, B_MS) == 0);
    pt_program *p = &g.prog;
    int b = p->host_begin[0], e = p->host_begin[1];
    /* swap the first two ops of worker 0 in host 0's order */
    int first = -1, second = -1;
    for (int k = b; k < e && second < 0; k++)
        if (p->host_ops[k] >= p->workers[0].op_begin && p->host_ops[k] < p->workers[0].op_end) {
            if (first < 0)
                first = k;
            else
                second = k;
        }
    REQUIRE(second > 0);
    int32_t t = p->host_ops[first];
    p->host_ops[first] = p->host_ops[second];
    p->host_ops[second] = t;
    CHECK(pt_sched_validate(p, &g.err) == PT_EINVAL);
    CHECK(strstr(g.err.msg, "program order") != NULL);
    p->host_ops[second] = p->host_ops[first];
    p->host_ops[first] = t;
    CHECK(pt_sched_validate(p, &g.err) == 0);
    /* host 1 (rank 1) running all of chunk 3's ops before chunk 1's: its first
     * op waits for chunk 2's activations, which need chunk 1 -- deadlock */
    int w1 = p->stage_worker[1], w3 = p->stage_worker[3], k = p->host_begin[1];
    for (int i = p->workers[w3].op_begin; i < p->workers[w3].op_end; i++)
        p->host_ops[k++] = i;
    for (int i = p->workers[w1].op_begin; i < p->workers[w1].op_end; i++)
        p->host_ops[k++] = i;
    CHECK(pt_sched_validate(p, &g.err) == PT_EDEADLOCK);
    pt_sim_result r;
    CHECK(pt_sim_run(g.sim, p, g.cost, &r, &g.err) == PT_EDEADLOCK);
    rig_free(&g);
}

/* Plan files: chunks parsed and written back, and every wrong placement
 * refused naming the field. */
static void test_plan_format(void)
{
    static const char *ok =
        "{\"v\":1,\"model\":\"fx\",\"layers\":4,\"microbatch\":{\"size\":4,\"count\":4},"
        "\"schedule\":{\"kind\":\"interleaved\",\"chunks\":2},"
        "\"optimizer\":{\"kind\":\"sgd\",\"lr\":0.1},"
        "\"stages\":[{\"layers\":[0,1],\"replicas\":[0]},{\"layers\":[1,2],\"replicas\":[1]},"
        "{\"layers\":[2,3],\"replicas\":[0]},{\"layers\":[3,4],\"replicas\":[1]}]}";
    pt_plan *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_plan_parse(ok, "t.json", &p, &err) == 0);
    CHECK(p->chunks == 2 && p->schedule == PT_SCHED_INTERLEAVED);
    CHECK(pt_plan_device_count(p) == 4 && pt_plan_rank_count(p) == 2);
    char *text = pt_plan_to_json(p);
    REQUIRE(text);
    pt_plan *q = NULL;
    CHECK(pt_plan_parse(text, "back.json", &q, &err) == 0 && q && q->chunks == 2);
    free(text);
    pt_plan_free(&q);
    pt_plan_free(&p);
    static const struct {
        const char *from, *to, *says;
    } bad[] = {
        {"\"count\":4", "\"count\":3", "microbatch.count"},
        {"\"chunks\":2", "\"chunks\":1", "schedule.chunks"},
        {"\"chunks\":2", "\"chunks\":4", "stages"},
        {"\"kind\":\"interleaved\"", "\"kind\":\"1f1b-flush\"", "schedule.chunks"},
        {"{\"layers\":[3,4],\"replicas\":[1]}", "{\"layers\":[3,4],\"replicas\":[1,2]}",
         "stages[3].replicas"},
        {"{\"layers\":[2,3],\"replicas\":[0]}", "{\"layers\":[2,3],\"replicas\":[1]}",
         "stages[2].replicas"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char buf[1024];
        const char *at = strstr(ok, bad[k].from);
        REQUIRE(at);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - ok), ok, bad[k].to,
                 at + strlen(bad[k].from));
        memset(&err, 0, sizeof err);
        CHECK_MSG(pt_plan_parse(buf, "t.json", &p, &err) < 0, "case %zu accepted", k);
        CHECK_MSG(strstr(err.msg, "t.json") && strstr(err.msg, bad[k].says),
                  "case %zu: \"%s\" does not name %s", k, err.msg, bad[k].says);
        pt_plan_free(&p);
    }
}

/* The largest device load (sum of its chunks' F+B) of a chunk plan. */
static double worst_device(const pt_cost *c, const int *cuts, int P, int v, int rows)
{
    double worst = 0;
    for (int d = 0; d < P; d++) {
        double t = 0;
        for (int k = d; k < P * v; k += P)
            t += pt_cost_fwd_s(c, cuts[k], cuts[k + 1], rows, -1) +
                 pt_cost_bwd_s(c, cuts[k], cuts[k + 1], rows, -1);
        worst = t > worst ? t : worst;
    }
    return worst;
}

/* pt_plan_rechunk: the plan's devices kept (chunk stage s on stage s % S's
 * replicas), a valid interleaved plan, and on these VGG-like uneven layers a
 * largest device load strictly below what balancing the chunks alone gives
 * (there two heavy chunks share a device); back to one stage per device. */
static void test_rechunk(void)
{
    static const double ms[] = {3, 1, 10, 1, 1, 8, 9, 1, 3, 10, 1, 1};
    const int n = 12, P = 3, v = 2;
    pt_profile *pf = fx_profile(n, 1, 2, 1000, 100, 4);
    REQUIRE(pf);
    for (int l = 0; l < n; l++) {
        pf->layers[l].fwd_ms = ms[l];
        pf->layers[l].bwd_ms = 2 * ms[l];
    }
    int reps[] = {2, 1, 1};
    pt_plan *plan = fx_plan(PT_SCHED_1F1B_FLUSH, P, 4, reps, 4, 6);
    pt_topology *t = fx_topo(1, 4, FX_FAST_BPS, 0);
    pt_cost *c = NULL;
    pt_error err = {0};
    REQUIRE(plan && t && pt_cost_new(pf, t, &c, &err) == 0);
    pt_plan *q = NULL, *back = NULL;
    REQUIRE(pt_plan_rechunk(plan, c, PT_SCHED_INTERLEAVED, v, &q, &err) == 0);
    CHECK(q->stage_count == P * v && q->chunks == v && q->schedule == PT_SCHED_INTERLEAVED);
    CHECK_MSG(pt_plan_check(q, NULL, t, "q", &err) == 0, "%s", err.msg);
    int cuts[7], plain[7], rc = 0;
    for (int s = 0; s < q->stage_count; s++) {
        cuts[s] = q->stages[s].first;
        CHECK(q->stages[s].replica_count == reps[s % P]);
        CHECK(q->stages[s].replicas[0] == plan->stages[s % P].replicas[0]);
    }
    cuts[P * v] = n;
    pu_balanced_partition(c, n, P * v, NULL, 0, plain, &rc);
    REQUIRE(rc == 0);
    double got = worst_device(c, cuts, P, v, 4), base = worst_device(c, plain, P, v, 4);
    CHECK_MSG(got < base - 1e-12, "device load %.4f, balanced chunks alone %.4f", got, base);
    REQUIRE(pt_plan_rechunk(q, c, PT_SCHED_1F1B_FLUSH, 1, &back, &err) == 0);
    CHECK(back->stage_count == P && back->chunks == 1);
    CHECK(pt_plan_check(back, NULL, t, "back", &err) == 0);
    pt_plan_free(&back);
    CHECK(pt_plan_rechunk(plan, c, PT_SCHED_INTERLEAVED, 1, &back, &err) == PT_EINVAL && !back);
    CHECK(pt_plan_rechunk(plan, c, PT_SCHED_INTERLEAVED, 5, &back, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "more than the model's 12 layers");
    pt_plan_free(&q);
    pt_plan_free(&back);
    pt_plan_free(&plan);
    pt_cost_free(&c);
    pt_topology_free(&t);
    pt_profile_free(&pf);
}

/* The kind choice of dapple and gpipe (--kinds) tries interleaved with
 * v = 2, 3, ... chunks: on equal layers and free communication it beats
 * 1F1B (bubble / v), the plan comes back cut into S·v chunks with the chosen
 * v in the report and its why; where M is not a multiple of S the row is
 * refused with the reason, and the plan keeps one chunk per device. */
static void test_planner_chooses_chunks(void)
{
    const int S = 4, L = 12;
    pt_profile *pf = fx_profile(L, F_MS, B_MS, 1000, 100, 4);
    pt_topology *topo = fx_topo(1, S, FX_FAST_BPS, 0);
    REQUIRE(pf && topo);
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.no_dp_floor = 1; /* the kind choice itself, not the data-parallel floor */
    o.kinds = (1u << PT_SCHED_1F1B_FLUSH) | (1u << PT_SCHED_INTERLEAVED);
    o.microbatch_sizes[0] = 4;
    o.microbatch_size_count = 1;
    {
        pt_plan *plan = NULL;
        pt_planner_report rep;
        pt_error err = {0};
        int rc = pt_planner_run("gpipe", pf, topo, 4 * 8, &o, &plan, &rep, &err);
        CHECK_MSG(rc == 0, "gpipe: %s", err.msg);
        REQUIRE(rc == 0);
        CHECK_MSG(plan->schedule == PT_SCHED_INTERLEAVED, "gpipe chose %s",
                  pt_sched_kind_name(plan->schedule));
        int v = plan->chunks;
        CHECK(v >= 2 && plan->stage_count == S * v && pt_plan_rank_count(plan) == S);
        REQUIRE(rep.chosen_kind >= 0);
        CHECK(rep.kinds[rep.chosen_kind].chunks == v);
        char want[32];
        snprintf(want, sizeof want, "interleaved v=%d", v);
        CHECK_STR_CONTAINS(rep.why, want);
        int il_rows = 0;
        double one_f1b = INFINITY;
        for (int i = 0; i < rep.kind_count; i++) {
            const pt_planner_kind_row *r = &rep.kinds[i];
            if (r->kind == PT_SCHED_INTERLEAVED) {
                CHECK(r->chunks == 2 + il_rows++);
                CHECK(!r->refused);
            }
            if (r->kind == PT_SCHED_1F1B_FLUSH)
                one_f1b = r->iter_s;
            if (r->allowed && r->fits)
                CHECK(r->iter_s >= rep.kinds[rep.chosen_kind].iter_s);
        }
        CHECK(il_rows >= 2);
        CHECK(rep.kinds[rep.chosen_kind].iter_s < one_f1b);
        /* the plan the planner hands out is the one it simulated */
        fx_rig g = {0};
        g.plan = plan;
        fx_rig_costs c = fx_rig_free_comm(L, S, F_MS, B_MS);
        c.opt_free = 0; /* the planner charges the optimizer step */
        REQUIRE(fx_rig_sim(&g, &c, NULL, 1) == 0);
        CHECK(fabs(g.res.iter_s - rep.iter_s) < 1e-12);
        fx_rig_free(&g);
    }
    /* dapple finds one replicated stage best here: interleaving has no ranks */
    {
        pt_plan *plan = NULL;
        pt_planner_report rep;
        pt_error err = {0};
        REQUIRE(pt_planner_run("dapple", pf, topo, 4 * 8, &o, &plan, &rep, &err) == 0);
        int rows = 0;
        for (int i = 0; i < rep.kind_count; i++)
            if (rep.kinds[i].kind == PT_SCHED_INTERLEAVED) {
                rows++;
                if (pt_plan_rank_count(plan) < 2)
                    CHECK(rep.kinds[i].refused && rep.kinds[i].chunks == 2);
            }
        CHECK(rows >= 1);
        pt_plan_free(&plan);
    }
    /* M = 6 on 4 ranks: Megatron's order does not exist */
    pt_plan *plan = NULL;
    pt_planner_report rep;
    pt_error err = {0};
    REQUIRE(pt_planner_run("gpipe", pf, topo, 4 * 6, &o, &plan, &rep, &err) == 0);
    CHECK(plan->schedule != PT_SCHED_INTERLEAVED && plan->chunks == 1);
    int refused = 0;
    for (int i = 0; i < rep.kind_count; i++)
        if (rep.kinds[i].kind == PT_SCHED_INTERLEAVED) {
            refused++;
            CHECK(rep.kinds[i].refused);
            CHECK_STR_CONTAINS(rep.kinds[i].note, "not a multiple");
        }
    CHECK(refused == 1);
    pt_plan_free(&plan);
    pt_profile_free(&pf);
    pt_topology_free(&topo);
}

PT_TEST_MAIN({"bubble", test_bubble}, {"inflight", test_inflight},
             {"order_and_messages", test_order_and_messages}, {"replicated", test_replicated},
             {"validator_hosts", test_validator_hosts}, {"plan_format", test_plan_format},
             {"rechunk", test_rechunk}, {"planner_chooses_chunks", test_planner_chooses_chunks})

/* PipeDream's round-robin replication in the pipedream kind's program
 * (planner/sched_pipedream.c), checked against the rule itself rather than
 * the generator's arithmetic:
 *
 * turns: for replica counts per stage from straight to every stage
 *   replicated, with and without recomputation, the program validates
 *   (matching, versions, collectives, deadlock freedom); replica j of a stage
 *   of r runs exactly the micro-batches k with k mod r = j, whole (all b
 *   rows); micro-batch k moves from replica k mod r_s to replica
 *   k mod r_{s+1}; the t-th all-reduce and step of every replica of a
 *   replicated stage cover round t, micro-batches [t·r, (t+1)·r) (one
 *   synchronisation per round); a replica's peak weight versions in the
 *   simulation equal PipeDream's (R_s - 1) / r_s + 1 (pt_plan_rr_inflight),
 *   and so does the memory model's stash count (pt_cost_replica_memory).
 * windows: the default run covers whole rounds of every stage (a multiple of
 *   every replica count), and asking for windows that end mid-round is
 *   refused with the field named.
 * file: "replication" parses, is written back, defaults to round-robin for
 *   pipedream, and is refused for kinds that do not read it and with
 *   vertical sync on a replicated stage. */
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "tests/planner/sched_fixture.h"
#include "tests/test.h"

typedef struct rr_case {
    int S;
    int reps[4];
    int M, rec;
} rr_case;

static const rr_case cases[] = {
    {2, {2, 1}, 4, 0},    {2, {1, 2}, 4, 0},    {2, {3, 1}, 6, 0},       {3, {1, 2, 1}, 4, 0},
    {3, {2, 2, 2}, 4, 1}, {3, {3, 1, 2}, 6, 0}, {4, {1, 1, 1, 3}, 6, 0}, {4, {2, 3, 1, 2}, 12, 1},
    {1, {4}, 8, 0},       {2, {5, 3}, 15, 0},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

static pt_plan *rr_plan(const rr_case *c, int mb_size)
{
    pt_plan *p = fx_plan(PT_SCHED_PIPEDREAM, c->S, 2, c->reps, mb_size, c->M);
    if (p) {
        p->replication = PT_REPL_ROUND_ROBIN;
        for (int s = 0; s < c->S; s++)
            p->stages[s].recompute = c->rec && s % 2 == 0;
    }
    return p;
}

/* Every op of worker w names only its own micro-batches, whole, with peers of
 * the right turn; its collectives cover its rounds in order. */
static void check_turns(const pt_program *p, int w, const char *name)
{
    const pt_worker *x = &p->workers[w];
    int r = x->replica_count, rounds = 0, fwds = 0;
    for (int i = x->op_begin; i < x->op_end; i++) {
        const pt_op *op = &p->ops[i];
        unsigned f = pt_op_facts(op->kind);
        if (f & PT_OPK_MB) {
            CHECK_MSG(op->mb % r == x->replica, "%s: worker %d runs micro-batch %d (r=%d)", name, w,
                      op->mb, r);
            CHECK_MSG(op->row_lo == 0 && op->row_hi == p->mb_size,
                      "%s: worker %d mb %d rows [%d,%d) not whole", name, w, op->mb, op->row_lo,
                      op->row_hi);
            fwds += op->kind == PT_OP_FWD;
        }
        if (f & PT_OPK_P2P) {
            const pt_worker *y = &p->workers[op->peer];
            CHECK_MSG(op->mb % y->replica_count == y->replica, "%s: mb %d goes to replica %d of %d",
                      name, op->mb, y->replica, y->replica_count);
        }
        if (op->kind == PT_OP_OPT_STEP) {
            CHECK_MSG(op->mb == rounds * r && op->mb_end == (rounds + 1) * r,
                      "%s: worker %d step %d covers [%d,%d), not round [%d,%d)", name, w, rounds,
                      op->mb, op->mb_end, rounds * r, (rounds + 1) * r);
            rounds++;
        }
        if (op->kind == PT_OP_ALLREDUCE)
            CHECK_MSG(op->mb == rounds * r && op->mb_end == (rounds + 1) * r,
                      "%s: worker %d all-reduce covers [%d,%d) in round %d", name, w, op->mb,
                      op->mb_end, rounds);
    }
    CHECK_MSG(fwds == p->mb_count / r, "%s: worker %d ran %d of %d micro-batches", name, w, fwds,
              p->mb_count);
    CHECK_MSG(rounds == p->mb_count / r, "%s: worker %d synchronised %d times for %d rounds", name,
              w, rounds, p->mb_count / r);
}

static void test_turns(void)
{
    pt_profile *pf = fx_profile(8, 1.0, 2.0, 4096, 1 << 16, 4);
    pt_topology *t = fx_topo(4, 4, 1e10, 1e-6);
    REQUIRE(pf && t);
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    for (int ci = 0; ci < NCASES; ci++) {
        const rr_case *c = &cases[ci];
        pt_profile *pc = fx_profile(2 * c->S, 1.0, 2.0, 4096, 1 << 16, 4);
        pt_plan *plan = rr_plan(c, 4);
        REQUIRE(plan && pc);
        char name[64];
        snprintf(name, sizeof name, "case %d (S=%d, M=%d)", ci, c->S, c->M);
        pt_program prog = {0};
        pt_error err = {0};
        int rc = pt_sched_build(plan, pc, NULL, &prog, &err);
        CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
        CHECK(prog.round_robin == 1);
        rc = rc ? rc : pt_sched_validate(&prog, &err);
        CHECK_MSG(rc == 0, "%s: invalid: %s", name, err.msg);
        for (int w = 0; rc == 0 && w < prog.worker_count; w++)
            check_turns(&prog, w, name);
        pt_cost *cost = NULL;
        pt_sim_result res;
        REQUIRE(pt_cost_new(pc, t, &cost, &err) == 0);
        if (rc == 0 && pt_sim_run(sim, &prog, cost, &res, &err) == 0) {
            for (int w = 0; w < prog.worker_count; w++) {
                int s = prog.workers[w].stage, want = pt_plan_rr_inflight(plan, s);
                int mine = prog.mb_count / prog.workers[w].replica_count;
                if (want > mine)
                    want = mine;
                CHECK_MSG(res.workers[w].peak_versions == want,
                          "%s: worker %d (stage %d) holds %d versions, PipeDream %d", name, w, s,
                          res.workers[w].peak_versions, want);
                pt_mem m;
                pt_cost_replica_memory(cost, plan, s, prog.workers[w].replica, &m);
                CHECK_MSG(m.bytes[PT_MEM_STASH] ==
                              (int64_t)(want - 1) * prog.workers[w].param_bytes,
                          "%s: stage %d: memory model stashes %lld bytes, %d versions hold %lld",
                          name, s, (long long)m.bytes[PT_MEM_STASH], want,
                          (long long)((want - 1) * prog.workers[w].param_bytes));
            }
        } else {
            CHECK_MSG(0, "%s: simulation failed: %s", name, err.msg);
        }
        pt_cost_free(&cost);
        pt_program_release(&prog);
        pt_plan_free(&plan);
        pt_profile_free(&pc);
    }
    pt_sim_free(&sim);
    pt_profile_free(&pf);
    pt_topology_free(&t);
}

static void test_windows(void)
{
    rr_case c = {2, {3, 2}, 4, 0};
    pt_plan *plan = rr_plan(&c, 4);
    REQUIRE(plan);
    pt_program prog = {0};
    pt_error err = {0};
    REQUIRE(pt_sched_build(plan, NULL, NULL, &prog, &err) == 0);
    CHECK(prog.mb_count % 3 == 0 && prog.mb_count % 2 == 0);
    CHECK(prog.window_count >= PT_SCHED_MIN_WINDOWS);
    CHECK(pt_sched_validate(&prog, &err) == 0);
    pt_sched_opts o = {.windows = 4}; /* 16 micro-batches: not a multiple of 3 */
    CHECK(pt_sched_build(plan, NULL, &o, &prog, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "windows");
    o.windows = 6;
    CHECK(pt_sched_build(plan, NULL, &o, &prog, &err) == 0);
    /* split-concat on the same stages: every replica runs every micro-batch */
    plan->replication = PT_REPL_SPLIT_CONCAT;
    CHECK(pt_sched_build(plan, NULL, &o, &prog, &err) == 0);
    CHECK(prog.round_robin == 0);
    int fwds = 0;
    for (int i = prog.workers[0].op_begin; i < prog.workers[0].op_end; i++)
        fwds += prog.ops[i].kind == PT_OP_FWD;
    CHECK(fwds == prog.mb_count);
    pt_program_release(&prog);
    pt_plan_free(&plan);
}

static void test_file(void)
{
    const char *base = "{\"v\":1,\"model\":\"fx\",\"layers\":4,\"microbatch\":{\"size\":2,"
                       "\"count\":4},\"schedule\":{\"kind\":\"%s\"%s},"
                       "\"stages\":[{\"layers\":[0,2],\"replicas\":[0,1,2]},"
                       "{\"layers\":[2,4],\"replicas\":[3]}]}";
    char json[512];
    pt_plan *p = NULL;
    pt_error err = {0};
    /* default: round-robin, so three replicas of a 2-sample micro-batch are fine */
    snprintf(json, sizeof json, base, "pipedream", "");
    REQUIRE(pt_plan_parse(json, "t", &p, &err) == 0);
    CHECK(p->replication == PT_REPL_ROUND_ROBIN && pt_plan_round_robin(p));
    char *out = pt_plan_to_json(p);
    REQUIRE(out);
    CHECK_STR_CONTAINS(out, "\"round-robin\"");
    pt_plan *q = NULL;
    CHECK(pt_plan_parse(out, "t", &q, &err) == 0 && q->replication == PT_REPL_ROUND_ROBIN);
    free(out);
    pt_plan_free(&q);
    pt_plan_free(&p);
    /* split-concat named: the rows rule applies again */
    snprintf(json, sizeof json, base, "pipedream", ",\"replication\":\"split-concat\"");
    CHECK(pt_plan_parse(json, "t", &p, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "replicas");
    snprintf(json, sizeof json, base, "pipedream", ",\"replication\":\"sideways\"");
    CHECK(pt_plan_parse(json, "t", &p, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "schedule.replication");
    snprintf(json, sizeof json, base, "dapple", ",\"replication\":\"round-robin\"");
    CHECK(pt_plan_parse(json, "t", &p, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "replication");
    snprintf(json, sizeof json, base, "pipedream", ",\"vertical_sync\":true");
    CHECK(pt_plan_parse(json, "t", &p, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "vertical_sync");
    CHECK(p == NULL);
}

PT_TEST_MAIN({"turns", test_turns}, {"windows", test_windows}, {"file", test_file})

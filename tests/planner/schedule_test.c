/* Schedule programs: every generated program passes the validator for many
 * (kind, S, M, replication, recompute) combinations; each kind's op order has
 * the property its paper states; the validator rejects hand-broken programs. */
#include "tests/planner/sched_fixture.h"
#include "tests/test.h"

static const int rep_patterns[][8] = {
    {1, 1, 1, 1, 1, 1, 1, 1}, {2, 1, 1, 1, 1, 1, 1, 1}, {3, 3, 3, 3, 3, 3, 3, 3},
    {1, 3, 2, 1, 3, 2, 1, 3}, {2, 3, 1, 2, 3, 1, 2, 3},
};
#define N_PATTERNS (int)(sizeof rep_patterns / sizeof rep_patterns[0])

static int build(pt_sched_kind kind, int S, int M, const int *reps, int recompute, int vsync,
                 char policy, int windows, pt_program *prog, pt_error *err)
{
    pt_plan *plan = fx_plan(kind, S, 2, reps, 7, M);
    pt_profile *pf = fx_profile(2 * S, 1, 2, 700, 100, 7);
    for (int s = 0; s < S; s++)
        plan->stages[s].recompute = recompute && (s % 2 == 0);
    plan->vertical_sync = vsync;
    plan->policy = policy;
    pt_sched_opts o = {.microbatches = 0, .windows = windows};
    int rc = pt_sched_build(plan, pf, &o, prog, err);
    pt_plan_free(&plan);
    pt_profile_free(&pf);
    return rc;
}

static void test_all_generated_programs_validate(void)
{
    pt_program prog = {0};
    int checked = 0;
    for (int kind = 0; kind < PT_SCHED_BUILTIN_COUNT; kind++)
        for (int S = 1; S <= 7; S += (S < 4 ? 1 : 3))
            for (int M = 1; M <= 9; M += 2)
                for (int pat = 0; pat < N_PATTERNS; pat++)
                    for (int extra = 0; extra < 4; extra++) {
                        /* chunk placements (interleaved) need their own plans:
                         * tests/planner/sched_interleaved_test.c validates them */
                        if (pt_sched_kind_has(kind, PT_SCHED_OPT_CHUNKS))
                            continue;
                        int recompute = extra & 1, alt = extra >> 1; /* alt: vsync / policy B */
                        pt_error err = {0};
                        int rc = build(kind, S, M, rep_patterns[pat], recompute, alt,
                                       alt ? 'B' : 'A', 0, &prog, &err);
                        if (kind == PT_SCHED_2BW && M < S) {
                            CHECK_MSG(rc == PT_EINVAL, "2bw S %d M %d must be refused", S, M);
                            CHECK_STR_CONTAINS(err.msg, "M >= S");
                            continue;
                        }
                        CHECK_MSG(rc == 0, "%s S %d M %d pat %d: %s", pt_sched_kind_name(kind), S,
                                  M, pat, err.msg);
                        if (rc < 0)
                            continue;
                        rc = pt_sched_validate(&prog, &err);
                        CHECK_MSG(rc == 0, "%s S %d M %d pat %d rec %d alt %d: %s",
                                  pt_sched_kind_name(kind), S, M, pat, recompute, alt, err.msg);
                        checked++;
                    }
    CHECK(checked > 500);
    pt_program_release(&prog);
}

/* Position (in the worker's compute order) helpers. */
static int fwds_before_first_bwd(const pt_program *p, int w)
{
    int n = 0;
    for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++) {
        if (p->ops[i].kind == PT_OP_BWD)
            return n;
        n += p->ops[i].kind == PT_OP_FWD;
    }
    return n;
}

/* After the warm-up, forwards and backwards alternate: never two forwards in
 * a row once a backward has run. Returns the largest run of FWDs after it. */
static int longest_fwd_run_after_first_bwd(const pt_program *p, int w)
{
    int seen_b = 0, run = 0, worst = 0;
    for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++) {
        if (p->ops[i].kind == PT_OP_BWD) {
            seen_b = 1;
            run = 0;
        } else if (p->ops[i].kind == PT_OP_FWD && seen_b) {
            if (++run > worst)
                worst = run;
        }
    }
    return worst;
}

static void test_warmup_counts(void)
{
    pt_program prog = {0};
    pt_error err = {0};
    for (int S = 1; S <= 6; S++)
        for (int M = 1; M <= 12; M++) {
            REQUIRE(build(PT_SCHED_GPIPE, S, M, NULL, 0, 0, 'A', 0, &prog, &err) == 0);
            for (int w = 0; w < prog.worker_count; w++)
                CHECK(fwds_before_first_bwd(&prog, w) == M);
            for (int pol = 0; pol < 2; pol++) {
                REQUIRE(build(PT_SCHED_DAPPLE, S, M, NULL, 0, 0, pol ? 'B' : 'A', 0, &prog, &err) ==
                        0);
                for (int w = 0; w < prog.worker_count; w++) {
                    int i = prog.workers[w].stage;
                    int K = pol ? 2 * (S - i) - 1 : S - i;
                    if (K > M)
                        K = M;
                    CHECK_MSG(fwds_before_first_bwd(&prog, w) == K, "dapple %c S %d M %d i %d",
                              pol ? 'B' : 'A', S, M, i);
                    CHECK(longest_fwd_run_after_first_bwd(&prog, w) <= 1);
                }
            }
            REQUIRE(build(PT_SCHED_1F1B_FLUSH, S, M, NULL, 0, 0, 'A', 0, &prog, &err) == 0);
            for (int w = 0; w < prog.worker_count; w++) {
                int K = S - prog.workers[w].stage;
                CHECK(fwds_before_first_bwd(&prog, w) == (K < M ? K : M));
            }
        }
    pt_program_release(&prog);
}

/* Split-concat: each transfer carries exactly the rows both replicas own, and
 * a stage receives every row of every micro-batch exactly once. */
static void test_split_concat_rows(void)
{
    pt_program prog = {0};
    pt_error err = {0};
    const int reps[] = {2, 3, 1, 4};
    REQUIRE(build(PT_SCHED_DAPPLE, 4, 3, reps, 0, 0, 'A', 0, &prog, &err) == 0);
    int mb_size = prog.mb_size;
    for (int w = 0; w < prog.worker_count; w++) {
        const pt_worker *x = &prog.workers[w];
        for (int i = x->op_begin; i < x->op_end; i++) {
            const pt_op *op = &prog.ops[i];
            if (op->kind != PT_OP_SEND_ACT && op->kind != PT_OP_RECV_GRAD)
                continue;
            const pt_worker *y = &prog.workers[op->peer];
            int lo = x->row_lo > y->row_lo ? x->row_lo : y->row_lo;
            int hi = x->row_hi < y->row_hi ? x->row_hi : y->row_hi;
            CHECK(op->row_lo == lo && op->row_hi == hi);
            CHECK(op->bytes == 700 * (hi - lo) / 7);
        }
    }
    /* every stage > 0 receives each row of each micro-batch exactly once */
    for (int s = 1; s < prog.stage_count; s++)
        for (int mb = 0; mb < prog.mb_count; mb++) {
            int seen[64] = {0};
            for (int w = prog.stage_worker[s]; w < prog.stage_worker[s + 1]; w++)
                for (int i = prog.workers[w].op_begin; i < prog.workers[w].op_end; i++)
                    if (prog.ops[i].kind == PT_OP_RECV_ACT && prog.ops[i].mb == mb)
                        for (int r = prog.ops[i].row_lo; r < prog.ops[i].row_hi; r++)
                            seen[r]++;
            for (int r = 0; r < mb_size; r++)
                CHECK(seen[r] == 1);
        }
    /* many-to-many: replica 1 of stage 0 (rows [3,7)) talks to replicas 1 and 2 of stage 1 */
    int w01 = prog.stage_worker[0] + 1, sends = 0;
    for (int i = prog.workers[w01].op_begin; i < prog.workers[w01].op_end; i++)
        sends += prog.ops[i].kind == PT_OP_SEND_ACT && prog.ops[i].mb == 0;
    CHECK(sends == 2);
    pt_program_release(&prog);
}

static void test_pipedream_versions(void)
{
    pt_program prog = {0};
    pt_error err = {0};
    for (int S = 1; S <= 5; S++)
        for (int vs = 0; vs < 2; vs++) {
            REQUIRE(build(PT_SCHED_PIPEDREAM, S, 3, NULL, 0, vs, 'A', 4, &prog, &err) == 0);
            int N = prog.mb_count;
            CHECK(N == 12);
            int ver[8][64];
            for (int w = 0; w < prog.worker_count; w++) {
                int i = prog.workers[w].stage;
                CHECK(fx_count(&prog, w, PT_OP_OPT_STEP) == N);
                int steps = 0;
                for (int k = prog.workers[w].op_begin; k < prog.workers[w].op_end; k++) {
                    const pt_op *op = &prog.ops[k];
                    if (op->kind == PT_OP_OPT_STEP) {
                        CHECK(op->version == ++steps);
                        CHECK(op->mb_end == op->mb + 1);
                        /* the step follows the backward it applies (after its sends) */
                        int b = k - 1;
                        while (prog.ops[b].kind == PT_OP_SEND_GRAD)
                            b--;
                        CHECK(prog.ops[b].kind == PT_OP_BWD && prog.ops[b].mb == op->mb);
                    }
                    if (op->kind == PT_OP_FWD) {
                        ver[i][op->mb] = op->version;
                        CHECK(op->flags & PT_OPF_STASH);
                        if (!vs)
                            CHECK(op->version == steps); /* newest weights when it starts */
                        else
                            CHECK(op->version <= steps);
                    }
                }
            }
            if (vs)
                for (int mb = 0; mb < N; mb++)
                    for (int i = 1; i < S; i++)
                        CHECK_MSG(ver[i][mb] == ver[0][mb], "vertical sync: mb %d stage %d", mb, i);
            REQUIRE(pt_sched_validate(&prog, &err) == 0);
        }
    pt_program_release(&prog);
}

static void test_2bw_and_pipesgd_versions(void)
{
    pt_program prog = {0};
    pt_error err = {0};
    const int reps[] = {2, 1, 3};
    REQUIRE(build(PT_SCHED_2BW, 3, 4, reps, 0, 0, 'A', 3, &prog, &err) == 0);
    CHECK(prog.initial_versions == 2);
    for (int w = 0; w < prog.worker_count; w++) {
        int steps = 0;
        for (int k = prog.workers[w].op_begin; k < prog.workers[w].op_end; k++) {
            const pt_op *op = &prog.ops[k];
            if (op->kind == PT_OP_FWD)
                CHECK(op->version == op->mb / 4);
            if (op->kind == PT_OP_OPT_STEP) {
                CHECK(op->mb == steps * 4 && op->mb_end == steps * 4 + 4);
                CHECK(op->version == steps + 2); /* W(t+1) from grad f(W(t-1)) */
                steps++;
            }
        }
        CHECK(steps == 3);
        CHECK(fx_count(&prog, w, PT_OP_ALLREDUCE) == (prog.workers[w].replica_count > 1 ? 3 : 0));
    }
    REQUIRE(build(PT_SCHED_PIPESGD, 3, 4, reps, 0, 0, 'A', 4, &prog, &err) == 0);
    for (int w = 0; w < prog.worker_count; w++) {
        int r = prog.workers[w].replica_count;
        /* every window's gradients are applied: the last one by the drain */
        CHECK(fx_count(&prog, w, PT_OP_OPT_STEP) == 4);
        CHECK(fx_count(&prog, w, PT_OP_ALLREDUCE) == (r > 1 ? 4 : 0));
        CHECK(fx_count(&prog, w, PT_OP_AR_WAIT) == (r > 1 ? 4 : 0));
        for (int k = prog.workers[w].op_begin; k < prog.workers[w].op_end; k++) {
            const pt_op *op = &prog.ops[k];
            if (op->kind == PT_OP_ALLREDUCE)
                CHECK(op->flags & PT_OPF_ASYNC);
            if (op->kind == PT_OP_OPT_STEP) {
                int u = op->mb / 4; /* the window whose gradients it applies */
                CHECK(op->mb == u * 4 && op->mb_end == u * 4 + 4);
                CHECK(op->version == u + 2); /* w(t+1) = w(t) - lr g(w(t-1)) */
                if (r > 1)
                    CHECK(prog.ops[k - 1].kind == PT_OP_AR_WAIT);
                if (u + 1 < 4) {
                    /* applied after window u+1's backwards: one step stale */
                    CHECK(fx_find(&prog, w, PT_OP_BWD, u * 4 + 7) < k);
                    CHECK(fx_find(&prog, w, PT_OP_FWD, u * 4 + 8) > k || u + 2 >= 4);
                } else {
                    /* the drain: the worker's last op, after the last backward */
                    CHECK(k == prog.workers[w].op_end - 1);
                    CHECK(fx_find(&prog, w, PT_OP_BWD, 15) < k);
                }
            }
        }
    }
    pt_program_release(&prog);
}

/* Every generated program applies every gradient it computes before it ends:
 * per worker, each micro-batch's BWD is covered by exactly one OPT_STEP after
 * it, every asynchronous all-reduce is waited for, and the worker's last
 * compute op is an OPT_STEP. So a program run back to back leaves nothing in
 * flight between runs (Pipe-SGD's drain, 2BW's and PipeDream's last steps). */
static void test_every_gradient_applied(void)
{
    pt_program prog = {0};
    int checked = 0;
    for (int kind = 0; kind < PT_SCHED_BUILTIN_COUNT; kind++)
        for (int S = 1; S <= 4; S++)
            for (int M = 1; M <= 6; M += (M < 3 ? 1 : 3))
                for (int pat = 0; pat < N_PATTERNS; pat++)
                    for (int windows = 0; windows <= 3; windows += 3) {
                        if ((kind == PT_SCHED_2BW && M < S) ||
                            pt_sched_kind_has(kind, PT_SCHED_OPT_CHUNKS)) /* own plans */
                            continue;
                        pt_error err = {0};
                        int sync = pt_sched_kind_has((pt_sched_kind)kind, PT_SCHED_SYNCHRONOUS);
                        REQUIRE(build((pt_sched_kind)kind, S, M, rep_patterns[pat], pat & 1,
                                      pat & 2, 'A', sync ? 0 : windows, &prog, &err) == 0);
                        int *cover = calloc((size_t)prog.mb_count, sizeof *cover);
                        int *bwd_at = malloc((size_t)prog.mb_count * sizeof *bwd_at);
                        for (int w = 0; w < prog.worker_count; w++) {
                            const pt_worker *x = &prog.workers[w];
                            int async = 0, waits = 0, last_compute = -1;
                            for (int m = 0; m < prog.mb_count; m++) {
                                cover[m] = 0;
                                bwd_at[m] = -1;
                            }
                            for (int k = x->op_begin; k < x->op_end; k++) {
                                const pt_op *op = &prog.ops[k];
                                if (op->kind == PT_OP_BWD || op->kind == PT_OP_BWD_WEIGHT)
                                    bwd_at[op->mb] = k; /* the op completing the backward */
                                if (op->kind == PT_OP_ALLREDUCE && (op->flags & PT_OPF_ASYNC))
                                    async++;
                                waits += op->kind == PT_OP_AR_WAIT;
                                if (pt_op_is_compute(op->kind))
                                    last_compute = k;
                                if (op->kind != PT_OP_OPT_STEP)
                                    continue;
                                for (int m = op->mb; m < op->mb_end; m++) {
                                    cover[m]++;
                                    CHECK(bwd_at[m] >= 0 && bwd_at[m] < k);
                                }
                            }
                            for (int m = 0; m < prog.mb_count; m++)
                                CHECK_MSG(cover[m] == 1,
                                          "%s S %d M %d pat %d w %d: mb %d applied %d "
                                          "times",
                                          pt_sched_kind_name((pt_sched_kind)kind), S, M, pat, w, m,
                                          cover[m]);
                            CHECK(async == waits);
                            CHECK(last_compute >= 0 &&
                                  prog.ops[last_compute].kind == PT_OP_OPT_STEP);
                            checked++;
                        }
                        free(cover);
                        free(bwd_at);
                    }
    CHECK(checked > 300);
    pt_program_release(&prog);
}

static void test_recompute_and_registry(void)
{
    pt_program prog = {0};
    pt_error err = {0};
    REQUIRE(build(PT_SCHED_GPIPE, 3, 4, NULL, 1, 0, 'A', 0, &prog, &err) == 0);
    for (int w = 0; w < prog.worker_count; w++) {
        int want = prog.workers[w].recompute ? 4 : 0;
        CHECK(fx_count(&prog, w, PT_OP_RECOMPUTE) == want);
        for (int k = prog.workers[w].op_begin; k < prog.workers[w].op_end; k++)
            if (prog.ops[k].kind == PT_OP_RECOMPUTE)
                CHECK(prog.ops[k + 1].kind == PT_OP_BWD && prog.ops[k + 1].mb == prog.ops[k].mb);
    }
    for (int k = 0; k < PT_SCHED_BUILTIN_COUNT; k++) {
        const pt_sched_info *in = pt_sched_info_of((pt_sched_kind)k);
        REQUIRE(in);
        CHECK(in->generate != NULL);
        CHECK(in->facts.flags == pt_sched_kind_info_of(k)->flags);
        CHECK_STR_CONTAINS(pt_sched_kind_name((pt_sched_kind)k), in->facts.name);
    }
    CHECK(pt_sched_info_of(PT_SCHED_BUILTIN_COUNT) == NULL);
    /* a synchronous kind refuses several windows; replicas beyond the micro-batch size */
    pt_plan *plan = fx_plan(PT_SCHED_DAPPLE, 2, 1, NULL, 4, 4);
    pt_sched_opts o = {.windows = 3};
    CHECK(pt_sched_build(plan, NULL, &o, &prog, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "windows");
    int many[5] = {0, 1, 2, 3, 4};
    pt_plan_set_replicas(plan, 1, many, 5);
    CHECK(pt_sched_build(plan, NULL, NULL, &prog, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "stages[1].replicas");
    CHECK(prog.op_count == 0);
    pt_plan_free(&plan);
    pt_program_release(&prog);
}

/* The kind table's parameter columns: the chunk range and the B->W hold.
 * The hold is what each stage of a generated program really keeps between
 * its BWD_INPUT and BWD_WEIGHT at most (recomputing stages included), and 0
 * for the kinds that do not split the backward. */
static void test_kind_table_parameters(void)
{
    for (int k = 0; k < PT_SCHED_BUILTIN_COUNT; k++) {
        int lo, hi;
        pt_sched_kind_chunks(k, &lo, &hi);
        if (k == PT_SCHED_INTERLEAVED)
            CHECK(lo == 2 && hi == PT_SCHED_CHUNKS_MAX);
        else
            CHECK_MSG(lo == 1 && hi == 1, "%s: chunks %d..%d", pt_sched_kind_name(k), lo, hi);
    }
    const pt_sched_kind kinds[] = {PT_SCHED_ZB_H1, PT_SCHED_ZB_H2, PT_SCHED_1F1B_FLUSH,
                                   PT_SCHED_GPIPE};
    for (size_t c = 0; c < sizeof kinds / sizeof kinds[0]; c++)
        for (int S = 1; S <= 5; S++)
            for (int M = 1; M <= 8; M++)
                for (int rec = 0; rec <= 1; rec++) {
                    pt_program prog = {0};
                    pt_error err = {0};
                    REQUIRE(build(kinds[c], S, M, NULL, rec, 0, 'A', 0, &prog, &err) == 0);
                    for (int w = 0; w < prog.worker_count; w++) {
                        int held = 0, peak = 0;
                        for (int i = prog.workers[w].op_begin; i < prog.workers[w].op_end; i++) {
                            held += prog.ops[i].kind == PT_OP_BWD_INPUT;
                            held -= prog.ops[i].kind == PT_OP_BWD_WEIGHT;
                            peak = held > peak ? held : peak;
                        }
                        pt_sched_shape q = {S, prog.workers[w].stage,     M, 'A',
                                            0, prog.workers[w].recompute, 1};
                        int want = pt_sched_kind_split_hold(kinds[c], &q);
                        CHECK_MSG(peak == want,
                                  "%s S %d M %d stage %d recompute %d: holds %d, "
                                  "table says %d",
                                  pt_sched_kind_name(kinds[c]), S, M, prog.workers[w].stage,
                                  prog.workers[w].recompute, peak, want);
                    }
                    pt_program_release(&prog);
                }
}

/* ---- the validator catches broken programs ------------------------------ */

static void expect_broken(pt_program *p, int code, const char *words)
{
    pt_error err = {0};
    int rc = pt_sched_validate(p, &err);
    CHECK_MSG(rc == code, "rc %d, want %d (%s)", rc, code, err.msg);
    CHECK_STR_CONTAINS(err.msg, words);
}

static void fresh(pt_program *p, pt_sched_kind kind, const int *reps, int recompute)
{
    pt_error err = {0};
    if (build(kind, 3, 4, reps, recompute, 0, 'A', 0, p, &err) < 0 ||
        pt_sched_validate(p, &err) < 0)
        fprintf(stderr, "fixture: %s\n", err.msg);
}

static void test_validator_catches(void)
{
    pt_program p = {0};
    const int reps[] = {2, 2, 1};

    fresh(&p, PT_SCHED_DAPPLE, NULL, 0); /* BWD moved before its FWD */
    int w = 1, f = fx_find(&p, w, PT_OP_FWD, 2), b = fx_find(&p, w, PT_OP_BWD, 2);
    fx_move_op(&p, b, f);
    expect_broken(&p, PT_EINVAL, "BWD before its FWD");

    fresh(&p, PT_SCHED_DAPPLE, NULL, 0); /* a send dropped */
    fx_delete_op(&p, fx_find(&p, 0, PT_OP_SEND_ACT, 1));
    expect_broken(&p, PT_EINVAL, "no matching send");

    fresh(&p, PT_SCHED_DAPPLE, NULL, 0); /* a receive dropped */
    fx_delete_op(&p, fx_find(&p, 2, PT_OP_RECV_ACT, 3));
    expect_broken(&p, PT_EINVAL, "no matching receive");

    fresh(&p, PT_SCHED_DAPPLE, NULL, 0); /* a receive after the FWD that needs it */
    fx_move_op(&p, fx_find(&p, 2, PT_OP_RECV_ACT, 3), fx_find(&p, 2, PT_OP_FWD, 3));
    expect_broken(&p, PT_EINVAL, "FWD before all its input rows");

    fresh(&p, PT_SCHED_DAPPLE, reps, 0); /* a send and receive of rows twice (both ends) */
    {
        int sa = fx_find(&p, 2, PT_OP_SEND_ACT, 1), ra = fx_find(&p, 4, PT_OP_RECV_ACT, 1);
        fx_insert_op(&p, sa + 1, p.ops[sa]);
        ra = fx_find(&p, 4, PT_OP_RECV_ACT, 1);
        p.ops[sa + 1].mb = 2;
        p.ops[sa + 1].mb_end = 3;
        (void)ra;
    }
    expect_broken(&p, PT_EINVAL, "matched by op");

    fresh(&p, PT_SCHED_GPIPE, NULL, 0); /* bytes disagree */
    p.ops[fx_find(&p, 1, PT_OP_RECV_ACT, 0)].bytes += 4;
    expect_broken(&p, PT_EINVAL, "disagree on the bytes");

    fresh(&p, PT_SCHED_GPIPE, NULL, 0); /* a send to the wrong micro-batch: unmatched */
    {
        int k = fx_find(&p, 0, PT_OP_SEND_ACT, 1);
        p.ops[k].row_hi--; /* rows no receive expects */
    }
    expect_broken(&p, PT_EINVAL, "no matching receive");

    fresh(&p, PT_SCHED_DAPPLE, NULL, 0); /* deadlock: stage 0 waits for mb 0's gradient first */
    int rg = fx_find(&p, 0, PT_OP_RECV_GRAD, 0);
    fx_move_op(&p, rg, p.workers[0].op_begin);
    expect_broken(&p, PT_EDEADLOCK, "deadlock");

    fresh(&p, PT_SCHED_DAPPLE, NULL, 0); /* deadlock across stages 1 and 2 */
    /* stage 2 sends mb 0's gradient only after mb 1's activation arrived; stage 1 sends
     * that activation only after mb 0's gradient arrived */
    fx_move_op(&p, fx_find(&p, 2, PT_OP_SEND_GRAD, 0), fx_find(&p, 2, PT_OP_RECV_ACT, 1));
    fx_move_op(&p, fx_find(&p, 1, PT_OP_RECV_GRAD, 0), fx_find(&p, 1, PT_OP_SEND_ACT, 1));
    expect_broken(&p, PT_EDEADLOCK, "deadlock");

    fresh(&p, PT_SCHED_DAPPLE, NULL, 0); /* step before the last backward */
    int opt = fx_find(&p, 1, PT_OP_OPT_STEP, 0), b3 = fx_find(&p, 1, PT_OP_BWD, 3);
    fx_move_op(&p, opt, b3);
    expect_broken(&p, PT_EINVAL, "OPT_STEP before every BWD");

    fresh(&p, PT_SCHED_GPIPE, NULL, 1); /* recompute missing */
    fx_delete_op(&p, fx_find(&p, 0, PT_OP_RECOMPUTE, 2));
    expect_broken(&p, PT_EINVAL, "without RECOMPUTE");

    fresh(&p, PT_SCHED_GPIPE, NULL, 0); /* backward reads another version */
    p.ops[fx_find(&p, 2, PT_OP_BWD, 1)].version = 1;
    expect_broken(&p, PT_EINVAL, "another weight version");

    fresh(&p, PT_SCHED_GPIPE, NULL, 0); /* reads a version nobody produced */
    p.ops[fx_find(&p, 2, PT_OP_FWD, 1)].version = 5;
    expect_broken(&p, PT_EINVAL, "not produced yet");

    fresh(&p, PT_SCHED_GPIPE, NULL, 0); /* a micro-batch's gradient never applied */
    p.ops[fx_find(&p, 2, PT_OP_OPT_STEP, 0)].mb_end = 3;
    expect_broken(&p, PT_EINVAL, "exactly one OPT_STEP");

    fresh(&p, PT_SCHED_DAPPLE, reps, 0); /* a replica skips its all-reduce */
    fx_delete_op(&p, fx_find(&p, 1, PT_OP_AR_WAIT, 0));
    fx_delete_op(&p, fx_find(&p, 1, PT_OP_ALLREDUCE, 0));
    expect_broken(&p, PT_EINVAL, "without a completed all-reduce");

    fresh(&p, PT_SCHED_DAPPLE, reps, 0); /* replicas issue different collectives */
    {
        int ar = fx_find(&p, 3, PT_OP_ALLREDUCE, 0);
        CHECK(p.ops[ar].flags & PT_OPF_ASYNC);
        p.ops[ar].flags &= (uint8_t)~PT_OPF_ASYNC;
        fx_delete_op(&p, fx_find(&p, 3, PT_OP_AR_WAIT, 0));
    }
    expect_broken(&p, PT_EINVAL, "different all-reduces");

    fresh(&p, PT_SCHED_DAPPLE, reps, 0); /* a bucket leaves a layer's gradient unreduced */
    {
        int ar = fx_find(&p, 1, PT_OP_ALLREDUCE, 0);
        CHECK(p.ops[ar].layer_hi - p.ops[ar].layer_lo >= 2);
        p.ops[ar].layer_lo++;
    }
    expect_broken(&p, PT_EINVAL, "without a completed all-reduce of all its layers");

    fresh(&p, PT_SCHED_DAPPLE, reps, 0); /* buckets first-layer first */
    {
        int ar = fx_find(&p, 1, PT_OP_ALLREDUCE, 0);
        pt_op second = p.ops[ar];
        int mid = (second.layer_lo + second.layer_hi) / 2;
        p.ops[ar].layer_hi = mid;
        second.layer_lo = mid;
        fx_insert_op(&p, ar + 1, second);
        pt_op wait = p.ops[fx_find(&p, 1, PT_OP_AR_WAIT, 0)];
        fx_insert_op(&p, fx_find(&p, 1, PT_OP_AR_WAIT, 0), wait);
    }
    expect_broken(&p, PT_EINVAL, "last layer first");

    fresh(&p, PT_SCHED_DAPPLE, reps, 0); /* two sends for one receive */
    {
        int k = fx_find(&p, 0, PT_OP_SEND_ACT, 1);
        p.ops[k].mb = 0;
        p.ops[k].mb_end = 1;
    }
    expect_broken(&p, PT_EINVAL, "matched by op");

    fresh(&p, PT_SCHED_DAPPLE, reps, 0); /* a matched transfer that skips a stage */
    {
        int ra = fx_find(&p, 2, PT_OP_RECV_ACT, 2);
        pt_op recv = p.ops[ra];
        fx_delete_op(&p, ra);
        fx_insert_op(&p, fx_find(&p, 4, PT_OP_RECV_ACT, 2), recv);
        p.ops[fx_find(&p, 0, PT_OP_SEND_ACT, 2)].peer = 4;
    }
    expect_broken(&p, PT_EINVAL, "adjacent stage");
    pt_program_release(&p);
}

PT_TEST_MAIN({"all_generated_programs_validate", test_all_generated_programs_validate},
             {"warmup_counts", test_warmup_counts}, {"split_concat_rows", test_split_concat_rows},
             {"pipedream_versions", test_pipedream_versions},
             {"2bw_and_pipesgd_versions", test_2bw_and_pipesgd_versions},
             {"every_gradient_applied", test_every_gradient_applied},
             {"recompute_and_registry", test_recompute_and_registry},
             {"kind_table_parameters", test_kind_table_parameters},
             {"validator_catches", test_validator_catches})

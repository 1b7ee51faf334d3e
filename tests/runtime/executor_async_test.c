/* The asynchronous schedules run by the stage executor against the
 * single-process references of their papers (tests/runtime/exec_common.h):
 *
 * - pipedream: every micro-batch's RECOMPUTE and BWD read exactly the weights
 *   its FWD read (the version each op reports, tracked by the executor, and a
 *   digest of the array's contents), the version named by the program; a
 *   stage holds S-i versions (one per micro-batch in flight, the newest of
 *   them the current weights: nothing is copied), the arena counts the
 *   others as stashes; and the weights after N micro-batches equal
 *   PipeDream's update order. Also with vertical sync, a replicated stage and
 *   recomputation.
 * - 2bw: never more than two versions per stage (and two are used), and the
 *   weights equal W(t+1) = W(t) - lr * grad f(W(t-1)), coalesced over M.
 * - pipesgd: data parallelism with one step of staleness,
 *   w(t+1) = w(t) - lr * g(w(t-1)), the all-reduce running in the background;
 *   the drain applies the last window too.
 */
#include "tests/runtime/exec_common.h"

static const int cuts3[] = {0, 2, 5, 8};
static const int cuts4[] = {0, 2, 4, 6, 8};
static const int mid2[] = {1, 2, 1};
static const int rc_mid[] = {0, 1, 0};

/* Per worker and micro-batch: FWD, RECOMPUTE and BWD read the same weights,
 * the version the program names. Returns the most versions held at once. */
static int check_versions(const char *name, const ec_run *r, int w)
{
    const pt_program *p = &r->prog;
    int n = r->events->n[w], most = 0;
    const pt_exec_event *ev = r->events->ev[w];
    int *fwd = malloc((size_t)p->mb_count * sizeof(int));
    for (int m = 0; m < p->mb_count; m++)
        fwd[m] = -1;
    int bwds = 0, initial = p->initial_versions;
    for (int i = 0; i < n; i++) {
        const pt_exec_event *e = &ev[i];
        if (e->versions_live > most)
            most = e->versions_live;
        if (e->kind != PT_OP_FWD && e->kind != PT_OP_BWD && e->kind != PT_OP_RECOMPUTE)
            continue;
        CHECK_MSG(e->used_version == e->version ||
                      (e->version < initial && e->used_version < initial),
                  "%s: worker %d %s mb %d read version %d, the program says %d", name, w,
                  pt_op_name(e->kind), e->mb, e->used_version, e->version);
        if (e->kind == PT_OP_FWD) {
            fwd[e->mb] = i;
            continue;
        }
        if (fwd[e->mb] < 0) {
            CHECK_MSG(0, "%s: worker %d: %s of mb %d before its FWD", name, w, pt_op_name(e->kind),
                      e->mb);
            continue;
        }
        const pt_exec_event *f = &ev[fwd[e->mb]];
        CHECK_MSG(e->used_version == f->used_version && e->weights_digest == f->weights_digest,
                  "%s: worker %d mb %d: %s read version %d (digest %llx), its FWD %d (%llx)", name,
                  w, e->mb, pt_op_name(e->kind), e->used_version,
                  (unsigned long long)e->weights_digest, f->used_version,
                  (unsigned long long)f->weights_digest);
        bwds += e->kind == PT_OP_BWD;
    }
    int mine = 0;
    for (int m = 0; m < p->mb_count; m++)
        mine += pt_sched_owns(p, &p->workers[w], m);
    CHECK_MSG(bwds == mine, "%s: worker %d ran %d backwards of %d", name, w, bwds, mine);
    free(fwd);
    return most;
}

static int pt_sched_min_int(int a, int b)
{
    return a < b ? a : b;
}

/* ceil(R_s / r_s) from the program's stages (the rule, not the generator). */
static int pt_ec_rr_inflight(const pt_program *p, int s)
{
    int r = p->stage_worker[s + 1] - p->stage_worker[s];
    int R = p->worker_count - p->stage_worker[s];
    return (R + r - 1) / r;
}

static int64_t stash_peak(ec_run *r, int w)
{
    pt_mem_stats st;
    pt_arena_stats(pt_net_arena(pt_pipeline_net(r->pp, w)), &st);
    return st.peak[PT_MEM_STASH];
}

static int64_t param_bytes(ec_run *r, int w)
{
    return pt_net_param_count(pt_pipeline_net(r->pp, w)) * (int64_t)sizeof(float);
}

static void run_pipedream(const char *name, const int *cuts, int S, const int *reps, const int *rc,
                          int vsync, pt_optim_kind ok)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = {.name = name,
                 .kind = PT_SCHED_PIPEDREAM,
                 .vsync = vsync,
                 .stages = S,
                 .cuts = cuts,
                 .replicas = reps,
                 .recompute = rc,
                 .mb_size = 4,
                 .mb_count = 3,
                 .windows = 4,
                 .optim = ok};
    ec_run r;
    int code = ec_run_case(&c, &spec, ds, 1, &r);
    CHECK_MSG(code == 0, "%s: run failed (%d)", name, code);
    if (code == 0) {
        int N = r.prog.mb_count;
        ec_weights want, short_by_one;
        ec_ref_pipedream(&spec, ds, cuts, S, c.mb_size, c.mb_count, N, vsync, ok, &want);
        ec_ref_pipedream(&spec, ds, cuts, S, c.mb_size, c.mb_count, N - 1, vsync, ok,
                         &short_by_one);
        ec_check_equal(name, &r.w, &want, &short_by_one);
        CHECK_MSG(r.replicas_equal, "%s: replicas of a stage differ", name);
        for (int w = 0; w < r.prog.worker_count; w++) {
            int i = r.prog.workers[w].stage, K = S - i < N ? S - i : N;
            int most = check_versions(name, &r, w);
            if (!vsync) {
                /* PipeDream: one array per micro-batch in flight, the newest
                 * of them the current weights (a stash holds what its forward
                 * read; the step after it goes out of place) */
                CHECK_MSG(most == K, "%s: worker %d held at most %d versions, expected %d", name, w,
                          most, K);
            } else {
                /* vertical sync: micro-batch k reads version k-S+1 everywhere, so
                 * stage i > 0 also keeps the i-1 versions between that and its
                 * newest; stage 0 holds what its in-flight forwards read, as
                 * without vertical sync */
                int want = S;
                CHECK_MSG(most == want, "%s: worker %d held at most %d versions, expected %d", name,
                          w, most, want);
            }
            CHECK_MSG(stash_peak(&r, w) == (most - 1) * param_bytes(&r, w),
                      "%s: worker %d: stash peak %lld bytes, expected %d x %lld", name, w,
                      (long long)stash_peak(&r, w), most - 1, (long long)param_bytes(&r, w));
        }
        /* the digest tells versions apart: stage 0's forwards read N - S + 1
         * different versions after the warm-up */
        const ec_events *e = r.events;
        uint64_t first = 0, last = 0;
        for (int i = 0; i < e->n[0]; i++)
            if (e->ev[0][i].kind == PT_OP_FWD) {
                if (!first)
                    first = e->ev[0][i].weights_digest;
                last = e->ev[0][i].weights_digest;
            }
        CHECK(first != last);
        free(want.w);
        free(short_by_one.w);
    }
    ec_run_free(&r);
    pt_dataset_free(&ds);
}

static void test_pipedream(void)
{
    run_pipedream("pipedream S=3", cuts3, 3, NULL, NULL, 0, PT_OPTIM_SGD);
    run_pipedream("pipedream S=4 adam", cuts4, 4, NULL, NULL, 0, PT_OPTIM_ADAM);
    run_pipedream("pipedream S=3 middle x2 recompute", cuts3, 3, mid2, rc_mid, 0, PT_OPTIM_SGD);
}

/* Round-robin replication, as PipeDream's runtime replicates a stage: each
 * round's replicas run distinct whole micro-batches (one each: together the
 * round), the replicas' weights are bit-identical after every round's step
 * (the digest each OPT_STEP reports), every replica holds (R_i - 1) / r_i + 1
 * weight versions, and the weights after the run are the reference's
 * (ec_ref_pipedream_rr: each round's mean gradient; control: the reference
 * one round of every stage short). */
static void run_pipedream_rr(const char *name, const int *cuts, int S, const int *reps,
                             const int *rc, pt_optim_kind ok)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = {.name = name,
                 .kind = PT_SCHED_PIPEDREAM,
                 .stages = S,
                 .cuts = cuts,
                 .replicas = reps,
                 .recompute = rc,
                 .mb_size = 4,
                 .mb_count = 6,
                 .windows = 4,
                 .optim = ok,
                 .round_robin = 1};
    ec_run r;
    int code = ec_run_case(&c, &spec, ds, 1, &r);
    CHECK_MSG(code == 0, "%s: run failed (%d)", name, code);
    if (code == 0) {
        const pt_program *p = &r.prog;
        int N = p->mb_count, L = 6; /* a multiple of every replica count used here */
        CHECK(p->round_robin && N % L == 0);
        ec_weights want, short_by_one;
        ec_ref_pipedream_rr(&spec, ds, cuts, S, reps, c.mb_size, c.mb_count, N, ok, &want);
        ec_ref_pipedream_rr(&spec, ds, cuts, S, reps, c.mb_size, c.mb_count, N - L, ok,
                            &short_by_one);
        ec_check_equal(name, &r.w, &want, &short_by_one);
        CHECK_MSG(r.replicas_equal, "%s: replicas of a stage differ", name);
        for (int s = 0; s < S; s++) {
            int w0 = p->stage_worker[s], rs = reps[s];
            const ec_events *e = r.events;
            /* the FWD micro-batches of round u over the replicas, and the
             * digest after each replica's u-th step */
            int seen[64] = {0}, steps0 = 0;
            for (int w = w0; w < w0 + rs; w++) {
                int k = 0;
                for (int i = 0; i < e->n[w]; i++) {
                    const pt_exec_event *ev = &e->ev[w][i];
                    if (ev->kind == PT_OP_FWD) {
                        CHECK(ev->row_lo == 0 && ev->row_hi == c.mb_size);
                        CHECK_MSG(ev->mb < 64 && !seen[ev->mb]++,
                                  "%s: micro-batch %d run twice on stage %d", name, ev->mb, s);
                        CHECK_MSG(ev->mb % rs == w - w0, "%s: stage %d replica %d ran mb %d", name,
                                  s, w - w0, ev->mb);
                    }
                    if (ev->kind != PT_OP_OPT_STEP)
                        continue;
                    CHECK(ev->mb == k * rs && ev->mb_end == (k + 1) * rs);
                    /* replica w's k-th step equals replica 0's k-th */
                    int j = 0, found = 0;
                    for (int i0 = 0; i0 < e->n[w0] && !found; i0++)
                        if (e->ev[w0][i0].kind == PT_OP_OPT_STEP && j++ == k) {
                            found = 1;
                            CHECK_MSG(e->ev[w0][i0].weights_digest == ev->weights_digest,
                                      "%s: stage %d replica %d differs after round %d", name, s,
                                      w - w0, k);
                        }
                    CHECK(found);
                    k++;
                }
                if (w == w0)
                    steps0 = k;
                int most = check_versions(name, &r, w);
                int K = pt_sched_min_int(pt_ec_rr_inflight(p, s), N / rs);
                CHECK_MSG(most == K, "%s: worker %d held %d versions, PipeDream %d", name, w, most,
                          K);
            }
            CHECK_MSG(steps0 == N / rs, "%s: stage %d synchronised %d times for %d rounds", name, s,
                      steps0, N / rs);
            for (int m = 0; m < N && m < 64; m++)
                CHECK_MSG(seen[m] == 1, "%s: stage %d ran micro-batch %d %d times", name, s, m,
                          seen[m]);
        }
        free(want.w);
        free(short_by_one.w);
    }
    ec_run_free(&r);
    pt_dataset_free(&ds);
}

static void test_pipedream_rr(void)
{
    run_pipedream_rr("pipedream rr 2:1", (const int[]){0, 4, 8}, 2, (const int[]){2, 1}, NULL,
                     PT_OPTIM_SGD);
    run_pipedream_rr("pipedream rr 1:3:2 adam", cuts3, 3, (const int[]){1, 3, 2}, NULL,
                     PT_OPTIM_ADAM);
    run_pipedream_rr("pipedream rr 2:3:1 recompute", cuts3, 3, (const int[]){2, 3, 1}, rc_mid,
                     PT_OPTIM_SGD);
}

static void test_pipedream_vsync(void)
{
    run_pipedream("pipedream vsync S=3", cuts3, 3, NULL, NULL, 1, PT_OPTIM_SGD);
    run_pipedream("pipedream vsync S=4 middle x2 recompute", cuts4, 4, (const int[]){1, 2, 1, 1},
                  (const int[]){0, 1, 1, 0}, 1, PT_OPTIM_SGD);
}

/* 2BW and Pipe-SGD share the reference: T windows, `applied` of them applied. */
static void run_stale(const ec_case *c, int applied, int max_versions)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_run r;
    int code = ec_run_case(c, &spec, ds, 1, &r);
    CHECK_MSG(code == 0, "%s: run failed (%d)", c->name, code);
    if (code == 0) {
        int64_t B = (int64_t)c->mb_size * c->mb_count;
        ec_weights want, control;
        ec_ref_stale(&spec, ds, B, c->windows, applied, c->optim, &want);
        /* control: the same windows without staleness */
        ec_ref_sync(&spec, ds, B, applied, c->optim, &control);
        ec_check_equal(c->name, &r.w, &want, &control);
        CHECK_MSG(r.replicas_equal, "%s: replicas of a stage differ", c->name);
        for (int w = 0; w < r.prog.worker_count; w++) {
            int most = check_versions(c->name, &r, w);
            CHECK_MSG(most == max_versions, "%s: worker %d held at most %d versions, expected %d",
                      c->name, w, most, max_versions);
            CHECK_MSG(stash_peak(&r, w) == (max_versions - 1) * param_bytes(&r, w),
                      "%s: worker %d: stash peak %lld bytes", c->name, w,
                      (long long)stash_peak(&r, w));
        }
        free(want.w);
        free(control.w);
    }
    ec_run_free(&r);
    pt_dataset_free(&ds);
}

static void test_2bw(void)
{
    ec_case c = {.name = "2bw S=3 M=4",
                 .kind = PT_SCHED_2BW,
                 .stages = 3,
                 .cuts = cuts3,
                 .mb_size = 4,
                 .mb_count = 4,
                 .windows = 4,
                 .optim = PT_OPTIM_SGD};
    run_stale(&c, c.windows, 2);
    c.name = "2bw S=3 middle x2 recompute M=3";
    c.replicas = mid2;
    c.recompute = rc_mid;
    c.mb_count = 3;
    run_stale(&c, c.windows, 2);
    c.name = "2bw S=4 adam";
    c.stages = 4;
    c.cuts = cuts4;
    c.replicas = NULL;
    c.recompute = NULL;
    c.mb_count = 5;
    c.optim = PT_OPTIM_ADAM;
    run_stale(&c, c.windows, 2);
}

static void test_pipesgd(void)
{
    static const int cuts1[] = {0, 8}, cuts2[] = {0, 4, 8};
    ec_case c = {.name = "pipesgd data parallel x3",
                 .kind = PT_SCHED_PIPESGD,
                 .stages = 1,
                 .cuts = cuts1,
                 .replicas = (const int[]){3},
                 .mb_size = 6,
                 .mb_count = 2,
                 .windows = 4,
                 .optim = PT_OPTIM_SGD};
    /* the program drains: the last window's all-reduce is waited for and applied, T
     * updates (one run; runs back to back: executor_backtoback_test) */
    run_stale(&c, c.windows, 1);
    c.name = "pipesgd S=2 second x2";
    c.stages = 2;
    c.cuts = cuts2;
    c.replicas = (const int[]){1, 2};
    c.mb_size = 4;
    c.mb_count = 3;
    c.windows = 5;
    run_stale(&c, c.windows, 1);
}

/* Pipe-SGD keeps two gradient buffers: window t accumulates while window
 * t-1's all-reduce is in flight. */
static void test_pipesgd_buffers(void)
{
    static const int cuts1[] = {0, 8};
    ec_case c = {.name = "pipesgd buffers",
                 .kind = PT_SCHED_PIPESGD,
                 .stages = 1,
                 .cuts = cuts1,
                 .replicas = (const int[]){2},
                 .mb_size = 4,
                 .mb_count = 2,
                 .windows = 3,
                 .optim = PT_OPTIM_SGD};
    pt_program prog = {0};
    REQUIRE(ec_program(&c, 8, &prog) == 0);
    pt_exec_needs ne;
    pt_error err = {0};
    REQUIRE(pt_exec_needs_of(&prog, 0, &ne, &err) == 0);
    CHECK(ne.grad_buffers == 2);
    CHECK(ne.needs_collective == 1);
    CHECK(ne.max_slots == 1);
    pt_program_release(&prog);
}

PT_TEST_MAIN({"pipedream", test_pipedream}, {"pipedream_rr", test_pipedream_rr},
             {"pipedream_vsync", test_pipedream_vsync}, {"2bw", test_2bw},
             {"pipesgd", test_pipesgd}, {"pipesgd_buffers", test_pipesgd_buffers})

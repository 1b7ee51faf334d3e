/* Asynchronous programs run back to back, as the agent runs them: RUNS calls
 * of pt_pipeline_run with consecutive global batches, compared with the
 * papers' recursions continued across the run boundaries.
 *
 * The boundary (planner/sched_*.c, docs/architecture.md "Runs"): every
 * generated program applies every gradient it computes before it ends
 * (PipeDream steps after every backward, 2BW after every window, Pipe-SGD
 * drains its last window's all-reduce), and a run starts with all its initial
 * versions equal to the weights the previous run ended with. So RUNS runs of
 * T windows are the recursion over RUNS*T windows with a flush every T
 * windows:
 *
 *   2BW, Pipe-SGD  V(t+2) = V(t+1) - lr * g(V(t)) for every window t, and at
 *                  the first window of a run V(t) = V(t+1) (that window's
 *                  gradient is not stale);
 *   PipeDream      stage i applies micro-batch k's gradient as its (k+1)-th
 *                  update; micro-batch k of a run reads the weights after
 *                  max(0, k - K_i + 1) updates of that run (K_i = S - i, or S
 *                  with vertical sync), counting from the weights the run
 *                  started with.
 *
 * Optimizer state carries over in both. Controls, each at least 100x the
 * tolerance away from the reference so the comparison could fail: the
 * recursion without the flush (what one long run computes: a program of
 * RUNS*T windows run once is checked against it too), and for Pipe-SGD the
 * old program that dropped each run's last window. In the last run every
 * backward's gradient is applied by an OPT_STEP of that run. */
#include "tests/runtime/exec_common.h"

#define RUNS 2

static const int cuts1[] = {0, 8};
static const int cuts2[] = {0, 4, 8};
static const int cuts3[] = {0, 2, 5, 8};

/* ---- references ---------------------------------------------------------- */

/* 2BW / Pipe-SGD over `runs` runs of T windows of global batches of B samples.
 * flush: each run starts with V(t) = V(t+1) (the programs); else the
 * continuous recursion. drop_last: the last window of each run is computed
 * but not applied (Pipe-SGD before its drain). */
static void ref_stale_runs(const pt_model_spec *spec, const pt_dataset *ds, int64_t B, int T,
                           int runs, int flush, int drop_last, pt_optim_kind ok, ec_weights *out)
{
    pt_net *net = ec_whole_net(spec, (int)B);
    pt_optim *opt = NULL;
    pt_optim_spec os = ec_optim(ok);
    pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, NULL);
    float *older = pt_net_version_new(net, PT_MEM_STASH, NULL); /* V(t) */
    float *newer = pt_net_params(net);                          /* V(t+1) */
    for (int r = 0; r < runs; r++) {
        if (flush)
            pt_net_version_copy(net, older, newer);
        for (int t = 0; t < T; t++) {
            if (drop_last && t == T - 1)
                continue;
            ec_grad(net, ds, B, (int64_t)r * T + t, older);
            pt_net_version_copy(net, older, newer);
            pt_optim_step(opt, newer, pt_net_grads(net));
        }
    }
    out->count = pt_net_param_count(net);
    out->w = malloc((size_t)out->count * sizeof(float));
    ec_gather(net, newer, net, out);
    pt_net_version_free(net, &older);
    pt_optim_destroy(&opt);
    pt_net_destroy(&net);
}

/* PipeDream over `runs` runs of N micro-batches of b samples (micro-batch k
 * of run r is global micro-batch g = r*N + k: rows [(g%M)b, (g%M+1)b) of
 * global batch g/M). Each run counts versions from the weights it started
 * with; runs = 1 with N' = RUNS*N is the continuous schedule. */
static void ref_pipedream_runs(const pt_model_spec *spec, const pt_dataset *ds, const int *cuts,
                               int S, int b, int M, int N, int runs, int vsync, pt_optim_kind ok,
                               ec_weights *out)
{
    pt_net *whole = ec_whole_net(spec, 1);
    pt_net *net[8];
    pt_optim *opt[8];
    float **ver[8]; /* ver[i][v]: stage i's weights after v updates of the current run */
    pt_optim_spec os = ec_optim(ok);
    for (int i = 0; i < S; i++) {
        pt_net_config nc = pt_net_config_default(spec);
        nc.first = cuts[i];
        nc.last = cuts[i + 1];
        nc.max_batch = b;
        nc.seed = INIT_SEED;
        pt_net_create(spec, &nc, &net[i], NULL);
        pt_optim_create(&os, pt_net_arena(net[i]), pt_net_param_count(net[i]), &opt[i], NULL);
        ver[i] = calloc((size_t)N + 1, sizeof(float *));
        ver[i][0] = pt_net_version_new(net[i], PT_MEM_STASH, NULL);
    }
    int64_t B = (int64_t)b * M;
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    float *act[9], *grad[9];
    for (int i = 0; i <= S; i++) {
        int64_t e = i == 0 ? pt_net_in_elems(net[0]) : pt_net_out_elems(net[i - 1]);
        act[i] = malloc((size_t)(b * e) * sizeof(float));
        grad[i] = malloc((size_t)(b * e) * sizeof(float));
    }
    for (int r = 0; r < runs; r++) {
        if (r > 0) /* the run starts from the weights the last one ended with */
            for (int i = 0; i < S; i++) {
                float *last = ver[i][N];
                ver[i][N] = NULL;
                for (int v = 0; v < N; v++)
                    pt_net_version_free(net[i], &ver[i][v]);
                ver[i][0] = last;
            }
        for (int k = 0; k < N; k++) {
            int64_t g = (int64_t)r * N + k;
            ec_batch bt;
            ec_batch_indices(pt_dataset_count(ds), B, g / M, idx);
            ec_load(ds, idx + (g % M) * b, b, &bt);
            memcpy(act[0], bt.x, (size_t)(b * pt_net_in_elems(net[0])) * sizeof(float));
            int u[8];
            for (int i = 0; i < S; i++) {
                int K = vsync ? S : S - i;
                u[i] = k - K + 1 > 0 ? k - K + 1 : 0;
                const float *y;
                pt_net_zero_grads(net[i]);
                pt_net_forward(net[i], 0, ver[i][u[i]], act[i], b, i == S - 1 ? bt.labels : NULL,
                               &y, NULL);
                if (i < S - 1)
                    memcpy(act[i + 1], y, (size_t)(b * pt_net_out_elems(net[i])) * sizeof(float));
            }
            for (int i = S - 1; i >= 0; i--)
                pt_net_backward(net[i], 0, ver[i][u[i]], NULL, i == S - 1 ? NULL : grad[i + 1],
                                i > 0 ? grad[i] : NULL);
            for (int i = 0; i < S; i++) {
                ver[i][k + 1] = pt_net_version_new(net[i], PT_MEM_STASH, ver[i][k]);
                pt_optim_step(opt[i], ver[i][k + 1], pt_net_grads(net[i]));
            }
            ec_batch_free(&bt);
        }
    }
    out->count = pt_net_param_count(whole);
    out->w = malloc((size_t)out->count * sizeof(float));
    for (int i = 0; i < S; i++) {
        ec_gather(net[i], ver[i][N], whole, out);
        for (int v = 0; v <= N; v++)
            pt_net_version_free(net[i], &ver[i][v]);
        free(ver[i]);
        pt_optim_destroy(&opt[i]);
        pt_net_destroy(&net[i]);
    }
    for (int i = 0; i <= S; i++) {
        free(act[i]);
        free(grad[i]);
    }
    free(idx);
    pt_net_destroy(&whole);
}

/* ---- checks -------------------------------------------------------------- */

/* In the last run, every worker applied every micro-batch's gradient exactly
 * once, by an OPT_STEP after its BWD. */
static void check_all_applied(const char *name, const ec_run *r)
{
    const pt_program *p = &r->prog;
    int *bwd = malloc((size_t)p->mb_count * sizeof *bwd);
    int *applied = malloc((size_t)p->mb_count * sizeof *applied);
    for (int w = 0; w < p->worker_count; w++) {
        for (int m = 0; m < p->mb_count; m++)
            bwd[m] = applied[m] = 0;
        for (int i = 0; i < r->events->n[w]; i++) {
            const pt_exec_event *e = &r->events->ev[w][i];
            if (e->kind == PT_OP_BWD)
                bwd[e->mb] = 1;
            if (e->kind == PT_OP_OPT_STEP)
                for (int m = e->mb; m < e->mb_end; m++) {
                    CHECK_MSG(bwd[m], "%s: worker %d applies mb %d before its backward", name, w,
                              m);
                    applied[m]++;
                }
        }
        int missing = 0;
        for (int m = 0; m < p->mb_count; m++)
            missing += !bwd[m] || applied[m] != 1;
        CHECK_MSG(missing == 0,
                  "%s: worker %d: %d micro-batches not backwarded and applied exactly once", name,
                  w, missing);
    }
    free(bwd);
    free(applied);
}

static void check_far(const char *name, const char *what, const ec_weights *control,
                      const ec_weights *want)
{
    double d = ec_rel(control->w, want->w, want->count);
    CHECK_MSG(d > 100 * EQ_TOL, "%s: the reference is only %.3g from %s", name, d, what);
    if (getenv("EC_VERBOSE"))
        printf("  %-40s %s at %.2e\n", name, what, d);
}

/* Runs case c RUNS times back to back and once with RUNS*T windows. */
static void run_case(const ec_case *c)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    int T = c->windows, N = c->mb_count * T, b = c->mb_size, M = c->mb_count;
    int64_t B = (int64_t)b * M;
    ec_weights flushed, continuous, dropped = {0, NULL};
    if (c->kind == PT_SCHED_PIPEDREAM) {
        ref_pipedream_runs(&spec, ds, c->cuts, c->stages, b, M, N, RUNS, c->vsync, c->optim,
                           &flushed);
        ref_pipedream_runs(&spec, ds, c->cuts, c->stages, b, M, RUNS * N, 1, c->vsync, c->optim,
                           &continuous);
    } else {
        ref_stale_runs(&spec, ds, B, T, RUNS, 1, 0, c->optim, &flushed);
        ref_stale_runs(&spec, ds, B, RUNS * T, 1, 0, 0, c->optim, &continuous);
        if (c->kind == PT_SCHED_PIPESGD)
            ref_stale_runs(&spec, ds, B, T, RUNS, 1, 1, c->optim, &dropped);
    }

    /* RUNS runs back to back: the flushed recursion */
    ec_run r;
    int code = ec_run_case(c, &spec, ds, RUNS, &r);
    CHECK_MSG(code == 0, "%s: run failed (%d)", c->name, code);
    if (code == 0) {
        char name[96];
        snprintf(name, sizeof name, "%s, %d runs", c->name, RUNS);
        ec_check_equal(name, &r.w, &flushed, &continuous);
        if (dropped.w)
            check_far(name, "the runs that drop their last window", &dropped, &flushed);
        CHECK_MSG(r.replicas_equal, "%s: replicas of a stage differ", name);
        check_all_applied(name, &r);
    }
    ec_run_free(&r);

    /* one run of RUNS*T windows: the continuous recursion */
    ec_case longer = *c;
    longer.windows = RUNS * T;
    code = ec_run_case(&longer, &spec, ds, 1, &r);
    CHECK_MSG(code == 0, "%s: long run failed (%d)", c->name, code);
    if (code == 0) {
        char name[96];
        snprintf(name, sizeof name, "%s, one run of %d windows", c->name, RUNS * T);
        ec_check_equal(name, &r.w, &continuous, &flushed);
    }
    ec_run_free(&r);
    free(flushed.w);
    free(continuous.w);
    free(dropped.w);
    pt_dataset_free(&ds);
}

static void test_pipedream(void)
{
    ec_case c = {.name = "pipedream S=3",
                 .kind = PT_SCHED_PIPEDREAM,
                 .stages = 3,
                 .cuts = cuts3,
                 .mb_size = 4,
                 .mb_count = 3,
                 .windows = 2,
                 .optim = PT_OPTIM_SGD};
    run_case(&c);
    c.name = "pipedream vsync S=3 middle x2 recompute adam";
    c.vsync = 1;
    c.replicas = (const int[]){1, 2, 1};
    c.recompute = (const int[]){0, 1, 0};
    c.optim = PT_OPTIM_ADAM;
    run_case(&c);
}

static void test_2bw(void)
{
    ec_case c = {.name = "2bw S=3 M=3",
                 .kind = PT_SCHED_2BW,
                 .stages = 3,
                 .cuts = cuts3,
                 .mb_size = 4,
                 .mb_count = 3,
                 .windows = 3,
                 .optim = PT_OPTIM_SGD};
    run_case(&c);
    c.name = "2bw S=2 second x2 adam";
    c.stages = 2;
    c.cuts = cuts2;
    c.replicas = (const int[]){1, 2};
    c.mb_count = 2;
    c.optim = PT_OPTIM_ADAM;
    run_case(&c);
}

static void test_pipesgd(void)
{
    ec_case c = {.name = "pipesgd data parallel x3",
                 .kind = PT_SCHED_PIPESGD,
                 .stages = 1,
                 .cuts = cuts1,
                 .replicas = (const int[]){3},
                 .mb_size = 6,
                 .mb_count = 2,
                 .windows = 3,
                 .optim = PT_OPTIM_SGD};
    run_case(&c);
    c.name = "pipesgd S=2 second x2 adam";
    c.stages = 2;
    c.cuts = cuts2;
    c.replicas = (const int[]){1, 2};
    c.mb_size = 4;
    c.mb_count = 3;
    c.windows = 2;
    c.optim = PT_OPTIM_ADAM;
    run_case(&c);
}

PT_TEST_MAIN({"pipedream", test_pipedream}, {"2bw", test_2bw}, {"pipesgd", test_pipesgd})

/* The stage executor at full size: the real fmnist-mlp and fmnist-mlp-deep
 * model specs on Fashion-MNIST (synthetic data of the same shape when the
 * Debian package is not installed), pipelined over threads, against
 * single-device training on the same global batches. Also prints the
 * pipeline's throughput next to single-process training (a figure, never
 * asserted: the machine is shared). */
#include <sys/resource.h>
#include <time.h>

#include "protocol/clock.h"
#include "tests/runtime/exec_common.h"

#define FM_ITERS 3

static pt_dataset *fm_data(const pt_model_spec *spec)
{
    pt_dataset *ds = NULL;
    pt_error err = {0};
    if (pt_dataset_open("fashion-mnist", spec, PT_DATA_TRAIN, DATA_SEED, &ds, &err) < 0) {
        printf("  (Fashion-MNIST not found: %s; using synthetic data)\n", err.msg);
        if (pt_dataset_open("synthetic", spec, PT_DATA_TRAIN, DATA_SEED, &ds, &err) < 0)
            fprintf(stderr, "%s\n", err.msg);
    }
    return ds;
}

static pt_model_spec *fm_model(const char *name)
{
    pt_model_spec *spec = NULL;
    pt_error err = {0};
    if (pt_model_spec_find(name, &spec, &err) < 0)
        fprintf(stderr, "%s\n", err.msg);
    return spec;
}

/* Cuts a chain of linear/relu pairs into S stages of about equal pairs. */
static void even_cuts(int layers, int S, int *cuts)
{
    int pairs = layers / 2;
    for (int s = 0; s <= S; s++)
        cuts[s] = 2 * (pairs * s / S);
    cuts[S] = layers;
}

/* CPU seconds of the whole process so far (all threads): a figure that a
 * loaded, shared machine distorts far less than wall time. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static void equivalence(const char *model, pt_sched_kind kind, char policy, int S, const int *reps,
                        int b, int M)
{
    pt_model_spec *spec = fm_model(model);
    REQUIRE(spec);
    pt_dataset *ds = fm_data(spec);
    REQUIRE(ds);
    int cuts[9];
    even_cuts(spec->layer_count, S, cuts);
    char name[96];
    snprintf(name, sizeof name, "%s %s%c S=%d b=%d M=%d", model, pt_sched_kind_name(kind),
             kind == PT_SCHED_DAPPLE ? policy : ' ', S, b, M);
    ec_case c = {.name = name,
                 .kind = kind,
                 .policy = policy,
                 .stages = S,
                 .cuts = cuts,
                 .replicas = reps,
                 .mb_size = b,
                 .mb_count = M,
                 .optim = PT_OPTIM_SGD};
    ec_run r;
    int rc = ec_run_case(&c, spec, ds, FM_ITERS, &r);
    CHECK_MSG(rc == 0, "%s: run failed", name);
    if (rc == 0) {
        ec_weights want, short_by_one;
        ec_ref_sync(spec, ds, (int64_t)b * M, FM_ITERS, PT_OPTIM_SGD, &want);
        ec_ref_sync(spec, ds, (int64_t)b * M, FM_ITERS - 1, PT_OPTIM_SGD, &short_by_one);
        ec_check_equal(name, &r.w, &want, &short_by_one);
        CHECK(r.replicas_equal);
        printf("  %s: weights within %.2g of single-device training, loss %.4f\n", name,
               ec_rel(r.w.w, want.w, want.count), pt_pipeline_window_loss(r.pp, 0));
        free(want.w);
        free(short_by_one.w);
    }
    ec_run_free(&r);
    pt_dataset_free(&ds);
    pt_model_spec_free(&spec);
}

static void test_fmnist_mlp(void)
{
    static const int mid2[] = {1, 2, 1};
    equivalence("fmnist-mlp", PT_SCHED_DAPPLE, 'A', 3, mid2, 32, 4);
    equivalence("fmnist-mlp", PT_SCHED_GPIPE, 'A', 3, NULL, 32, 4);
}

static void test_fmnist_mlp_deep(void)
{
    equivalence("fmnist-mlp-deep", PT_SCHED_1F1B_FLUSH, 'A', 4, NULL, 16, 8);
}

/* Samples per second of `iters` iterations of the pipeline vs one net. */
static void test_throughput(void)
{
    pt_model_spec *spec = fm_model("fmnist-mlp-deep");
    REQUIRE(spec);
    pt_dataset *ds = fm_data(spec);
    REQUIRE(ds);
    const int b = 32, M = 8, iters = 4;
    for (int S = 2; S <= 4; S += 2) {
        int cuts[9];
        even_cuts(spec->layer_count, S, cuts);
        ec_case c = {.name = "throughput",
                     .kind = PT_SCHED_DAPPLE,
                     .policy = 'A',
                     .stages = S,
                     .cuts = cuts,
                     .mb_size = b,
                     .mb_count = M,
                     .optim = PT_OPTIM_SGD};
        pt_program prog = {0};
        REQUIRE(ec_program(&c, spec->layer_count, &prog) == 0);
        pt_pipeline_config pc = {.spec = spec,
                                 .prog = &prog,
                                 .optim = ec_optim(PT_OPTIM_SGD),
                                 .init_seed = INIT_SEED,
                                 .data = ds,
                                 .data_seed = DATA_SEED};
        pt_pipeline *pp = NULL;
        pt_error err = {0};
        REQUIRE(pt_pipeline_create(&pc, &pp, &err) == 0);
        REQUIRE(pt_pipeline_run(pp, 0, &err) == 0); /* warm-up */
        double t0 = pt_clock_s(), c0 = cpu_s();
        for (int k = 1; k <= iters; k++)
            CHECK(pt_pipeline_run(pp, k, &err) == 0);
        double pipe_s = (pt_clock_s() - t0) / iters, pipe_cpu = (cpu_s() - c0) / iters;
        double busy = 0;
        int nw = prog.worker_count;
        for (int w = 0; w < nw; w++) {
            pt_exec_result res = pt_pipeline_result(pp, w);
            busy += (double)res.busy_ns / (double)res.wall_ns;
        }
        pt_pipeline_destroy(&pp);
        pt_program_release(&prog);
        /* single process, one batch of b*M */
        pt_net *net = ec_whole_net(spec, b * M);
        pt_optim *opt = NULL;
        pt_optim_spec os = ec_optim(PT_OPTIM_SGD);
        pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, NULL);
        ec_batch bt[5];
        int64_t *idx = malloc((size_t)(b * M) * sizeof *idx);
        for (int k = 0; k <= iters; k++) {
            ec_batch_indices(pt_dataset_count(ds), (int64_t)b * M, k, idx);
            ec_load(ds, idx, b * M, &bt[k]);
        }
        free(idx);
        for (int k = 0; k <= iters; k++) {
            if (k == 1) { /* batch 0 warms up */
                t0 = pt_clock_s();
                c0 = cpu_s();
            }
            pt_net_zero_grads(net);
            pt_net_forward(net, 0, NULL, bt[k].x, b * M, bt[k].labels, NULL, NULL);
            pt_net_backward(net, 0, NULL, NULL, NULL, NULL);
            pt_optim_step(opt, pt_net_params(net), pt_net_grads(net));
        }
        double single_s = (pt_clock_s() - t0) / iters, single_cpu = (cpu_s() - c0) / iters;
        for (int k = 0; k <= iters; k++)
            ec_batch_free(&bt[k]);
        pt_optim_destroy(&opt);
        pt_net_destroy(&net);
        printf("  fmnist-mlp-deep dapple S=%d b=%d M=%d: %.1f ms/iteration wall, %.1f ms CPU "
               "(mean busy %.2f); single process %.1f ms wall, %.1f ms CPU; wall speed-up %.2fx, "
               "CPU per sample %.2fx\n",
               S, b, M, pipe_s * 1e3, pipe_cpu * 1e3, busy / nw, single_s * 1e3, single_cpu * 1e3,
               single_s / pipe_s, pipe_cpu / single_cpu);
    }
    pt_dataset_free(&ds);
    pt_model_spec_free(&spec);
}

PT_TEST_MAIN({"fmnist_mlp", test_fmnist_mlp}, {"fmnist_mlp_deep", test_fmnist_mlp_deep},
             {"throughput", test_throughput})

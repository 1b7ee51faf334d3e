/* Single-process training throughput of a model (fmnist-mlp by default:
 * 784-1024-1024-1024-10, relu, softmax cross-entropy) at batch 64 with SGD
 * momentum, in samples/s: warm-up steps, then timed steps over 16 fixed
 * batches held in memory, the way bench/torch_baseline.py times PyTorch:
 * inputs uniform in [0, 1) (a token model: token ids uniform over its
 * embedding's vocabulary) and labels uniform, independent of them, so the
 * loss stays away from zero (a separable data set would drive gradients
 * towards denormal numbers, which some CPUs compute slowly) and both
 * programs see the same kind of data. Prints figures; never fails on time. Usage: train_throughput
 * [--model M] [--batch B] [--warmup N]
 * [--steps N] [--threads N] (see docs/benchmarks.md). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/blas_core.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "runtime/rng.h"

#define BATCHES     16
#define DATA_SEED   7
#define NET_SEED    1
#define MAX_ARG_INT 1000000

typedef struct bench_args {
    const char *model;
    int batch, warmup, steps, threads;
} bench_args;

static int parse(int argc, char **argv, bench_args *a)
{
    *a = (bench_args){"fmnist-mlp", 64, 20, 200, 1};
    for (int i = 1; i < argc; i++) {
        int *target = !strcmp(argv[i], "--batch")     ? &a->batch
                      : !strcmp(argv[i], "--warmup")  ? &a->warmup
                      : !strcmp(argv[i], "--steps")   ? &a->steps
                      : !strcmp(argv[i], "--threads") ? &a->threads
                                                      : NULL;
        if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            a->model = argv[++i];
        } else if (target && i + 1 < argc) {
            *target = atoi(argv[++i]);
            if (*target < (target == &a->warmup ? 0 : 1) || *target > MAX_ARG_INT) {
                fprintf(stderr, "train_throughput: %s out of range\n", argv[i - 1]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: train_throughput [--model M] [--batch B] [--warmup N] "
                            "[--steps N] [--threads N]\n");
            return 2;
        }
    }
    return 0;
}

/* The vocabulary of a token model's embedding (its input ids lie below it);
 * 0 for a model of float inputs. */
static int token_vocab(const pt_model_spec *spec)
{
    if (spec->input_kind != PT_INPUT_TOKENS)
        return 0;
    for (int i = 0; i < spec->layer_count; i++)
        if (spec->layers[i].kind == PT_LAYER_EMBEDDING)
            return spec->layers[i].vocab;
    return 0;
}

int main(int argc, char **argv)
{
    pt_blas_fixup_core(argv);
    bench_args a;
    if (parse(argc, argv, &a))
        return 2;
    openblas_set_num_threads(a.threads);

    pt_error err = {0};
    pt_model_spec *spec = NULL;
    pt_net *net = NULL;
    pt_optim *optim = NULL;
    float *x_host = NULL, *x_dev = NULL;
    int32_t *labels = NULL;
    int rc = pt_model_spec_find(a.model, &spec, &err);
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.max_batch = a.batch;
    cfg.seed = NET_SEED;
    if (rc == 0)
        rc = pt_net_create(spec, &cfg, &net, &err);
    pt_optim_spec os = pt_optim_default(PT_OPTIM_SGD);
    if (rc == 0)
        rc = pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &optim, &err);
    if (rc < 0) {
        fprintf(stderr, "train_throughput: %s\n", err.msg);
        return 1;
    }
    const int64_t in = pt_net_in_elems(net), lps = pt_net_label_count(net);
    const int64_t per_batch = a.batch * in;
    x_host = malloc((size_t)(BATCHES * per_batch) * sizeof(float));
    labels = malloc((size_t)(BATCHES * a.batch * lps) * sizeof(int32_t));
    x_dev = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_ACTS, BATCHES * per_batch);
    if (!x_host || !labels || !x_dev) {
        fprintf(stderr, "train_throughput: out of memory\n");
        return 1;
    }
    pt_rng rng = pt_rng_make(DATA_SEED, 0);
    int vocab = token_vocab(spec);
    for (int64_t i = 0; i < BATCHES * per_batch; i++)
        x_host[i] =
            vocab ? (float)pt_rng_below(&rng, (uint64_t)vocab) : (float)pt_rng_uniform(&rng);
    for (int64_t i = 0; i < BATCHES * a.batch * lps; i++)
        labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)pt_net_classes(net));
    const pt_backend *be = pt_net_backend(net);
    be->upload(be, x_dev, x_host, (size_t)(BATCHES * per_batch) * sizeof(float));

    /* Wall time, and the process's CPU time, which a loaded machine inflates less. */
    double t0 = 0, c0 = 0, loss = 0;
    for (int s = -a.warmup; s < a.steps; s++) {
        if (s == 0) {
            be->synchronize(be);
            t0 = pt_clock_of_s(CLOCK_MONOTONIC);
            c0 = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID);
        }
        int b = (s + a.warmup) % BATCHES;
        pt_net_zero_grads(net);
        rc = pt_net_forward(net, 0, NULL, x_dev + b * per_batch, a.batch,
                            labels + (int64_t)b * a.batch * lps, NULL, &loss);
        if (rc == 0)
            rc = pt_net_backward(net, 0, NULL, NULL, NULL, NULL);
        if (rc < 0) {
            fprintf(stderr, "train_throughput: step %d: %s\n", s, pt_strerror(rc));
            return 1;
        }
        pt_optim_step(optim, pt_net_params(net), pt_net_grads(net));
    }
    be->synchronize(be);
    double dt = pt_clock_of_s(CLOCK_MONOTONIC) - t0,
           cpu = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("pipetop %s batch %d threads %d (OpenBLAS core %s): %d steps in %.3f s, %.1f "
           "samples/s, %.3f ms/step; CPU time %.3f s, %.1f samples/CPU-s; last loss %.4f\n",
           spec->name, a.batch, a.threads, pt_blas_core_name(), a.steps, dt, a.steps * a.batch / dt,
           1e3 * dt / a.steps, cpu, a.steps * a.batch / cpu, loss);
    free(x_host);
    free(labels);
    pt_arena_free(pt_net_arena(net), x_dev);
    pt_optim_destroy(&optim);
    pt_net_destroy(&net);
    pt_model_spec_free(&spec);
    return 0;
}

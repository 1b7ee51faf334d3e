/* Single-device training step throughput of a model spec built in code:
 * fmnist-mlp's shape (784-1024-1024-1024-10, relu, softmax_xent) by default.
 * Prints the median step time over repeats, samples/s and the share of
 * each phase. Run with OPENBLAS_NUM_THREADS=1 for the single-thread figure.
 * Usage: net_step [batch] [steps] [sgd|adam]
 * bench/torch_baseline.py is the same step in PyTorch, for comparison.
 * Wall time is noisy on a shared machine; the CPU-time figure is not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "runtime/blas_core.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "runtime/rng.h"

#define WARMUP_STEPS 5
#define POOL_BATCHES 64

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    pt_blas_fixup_core(argv); /* OpenBLAS 0.3.21 may pick slow kernels on new CPUs */
    int batch = argc > 1 ? atoi(argv[1]) : 64;
    int steps = argc > 2 ? atoi(argv[2]) : 50;
    pt_optim_kind kind = argc > 3 && strcmp(argv[3], "adam") == 0 ? PT_OPTIM_ADAM : PT_OPTIM_SGD;
    if (batch < 1 || steps < 1) {
        fprintf(stderr, "usage: net_step [batch] [steps] [sgd|adam]\n");
        return 2;
    }
    pt_layer_spec layers[8];
    memset(layers, 0, sizeof layers);
    const int widths[4] = {1024, 1024, 1024, 10};
    for (int i = 0; i < 4; i++) {
        layers[2 * i].kind = PT_LAYER_LINEAR;
        layers[2 * i].out = widths[i];
        layers[2 * i].bias = 1;
        layers[2 * i + 1].kind = i < 3 ? PT_LAYER_RELU : PT_LAYER_SOFTMAX_XENT;
    }
    layers[7].classes = 10;
    pt_model_spec spec = {.name = "fmnist-mlp",
                          .input_kind = PT_INPUT_FLOAT,
                          .input_rank = 1,
                          .input = {784},
                          .layers = layers,
                          .layer_count = 8};
    pt_net_config cfg = pt_net_config_default(&spec);
    cfg.max_batch = batch;
    pt_net *net = NULL;
    pt_error err = {0};
    if (pt_net_create(&spec, &cfg, &net, &err) < 0) {
        fprintf(stderr, "net_step: %s\n", err.msg);
        return 1;
    }
    pt_optim_spec os = pt_optim_default(kind);
    pt_optim *opt = NULL;
    if (pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, &err) < 0) {
        fprintf(stderr, "net_step: %s\n", err.msg);
        return 1;
    }
    /* A pool of random batches with random labels: a single fixed batch is
     * memorised within a few steps, after which gradients underflow into
     * denormals and the timing says nothing about training. */
    float *x = malloc((size_t)POOL_BATCHES * batch * 784 * sizeof *x);
    int32_t *labels = malloc((size_t)POOL_BATCHES * batch * sizeof *labels);
    double *t_step = malloc((size_t)steps * sizeof *t_step);
    pt_rng rng = pt_rng_make(1, 1);
    for (int i = 0; i < POOL_BATCHES * batch * 784; i++)
        x[i] = (float)pt_rng_uniform(&rng);
    for (int i = 0; i < POOL_BATCHES * batch; i++)
        labels[i] = (int32_t)pt_rng_below(&rng, 10);

    double t_fwd = 0, t_bwd = 0, t_opt = 0, t_zero = 0, loss = 0, cpu0 = 0;
    for (int s = -WARMUP_STEPS; s < steps; s++) {
        if (s == 0)
            cpu0 = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID);
        double t0 = pt_clock_s();
        pt_net_zero_grads(net);
        double t1 = pt_clock_s();
        int b = (s + WARMUP_STEPS) % POOL_BATCHES;
        pt_net_forward(net, 0, NULL, x + (size_t)b * batch * 784, batch, labels + b * batch, NULL,
                       &loss);
        double t2 = pt_clock_s();
        pt_net_backward(net, 0, NULL, NULL, NULL, NULL);
        double t3 = pt_clock_s();
        pt_optim_step(opt, pt_net_params(net), pt_net_grads(net));
        double t4 = pt_clock_s();
        if (s >= 0) {
            t_zero += t1 - t0;
            t_fwd += t2 - t1;
            t_bwd += t3 - t2;
            t_opt += t4 - t3;
            t_step[s] = t4 - t0;
        }
    }
    double cpu = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    qsort(t_step, (size_t)steps, sizeof *t_step, cmp_double);
    double med = t_step[steps / 2], total = t_zero + t_fwd + t_bwd + t_opt;
    printf("model fmnist-mlp (784-1024-1024-1024-10), batch %d, %s, %d steps, "
           "OPENBLAS_NUM_THREADS=%s, OpenBLAS core %s\n",
           batch, kind == PT_OPTIM_ADAM ? "adam" : "sgd", steps,
           getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "(unset)",
           pt_blas_core_name());
    printf("step median %.3f ms (min %.3f ms), %.0f samples/s (last loss %.4f)\n", med * 1e3,
           t_step[0] * 1e3, batch / med, loss);
    printf("CPU time %.3f ms/step, %.0f samples/CPU-s\n", 1e3 * cpu / steps,
           (double)steps * batch / cpu);
    printf("share: zero %.1f%%, forward %.1f%%, backward %.1f%%, optimizer %.1f%%\n",
           100 * t_zero / total, 100 * t_fwd / total, 100 * t_bwd / total, 100 * t_opt / total);
    free(x);
    free(labels);
    free(t_step);
    pt_optim_destroy(&opt);
    pt_net_destroy(&net);
    return 0;
}

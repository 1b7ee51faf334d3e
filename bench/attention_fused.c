/* Fused (tiled, runtime/attention_tiled.h) against unfused causal attention
 * on the CPU backend: one attention layer, forward and backward with the
 * input gradient, on a few shapes from gpt-tiny's to a 1024-token one.
 * Prints per shape and variant the milliseconds of one forward + backward
 * (this thread's CPU time, the minimum over --repeats), and the bytes the
 * layer keeps for backward and its scratch (pt_net_layer_memory, what the
 * planners' model predicts). OpenBLAS at one thread. The tiled path is the
 * reference of a GPU kernel's blocking, written for clarity (scalar loops),
 * so its time says what a CPU run costs with "fused": true, not what a GPU
 * kernel would. Usage: attention_fused [--repeats R]. Prints figures; never
 * fails on time. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "runtime/blas_core.h"
#include "runtime/net.h"
#include "runtime/rng.h"

#define DEFAULT_REPS 5
#define MS_PER_S     1000.0

typedef struct shape {
    const char *what;
    int T, D, H, batch;
} shape;

static const shape shapes[] = {
    {"gpt-tiny's", 32, 64, 4, 16}, {"T 256", 256, 256, 4, 4}, {"T 1024", 1024, 512, 8, 1}};

static pt_layer_spec layer;
static pt_model_spec model(const shape *s, int fused)
{
    memset(&layer, 0, sizeof layer);
    layer.kind = PT_LAYER_ATTENTION;
    snprintf(layer.name, sizeof layer.name, "attention0");
    layer.heads = s->H;
    layer.fused = fused;
    pt_model_spec m = {.name = "attn",
                       .input_kind = PT_INPUT_FLOAT,
                       .input_rank = 2,
                       .input = {s->T, s->D},
                       .layers = &layer,
                       .layer_count = 1};
    return m;
}

/* Milliseconds of one forward + backward, the minimum over reps; -1 on error. */
static double time_layer(const shape *s, int fused, int reps, int64_t *saved, int64_t *scratch)
{
    pt_model_spec m = model(s, fused);
    pt_net_config cfg = pt_net_config_default(&m);
    cfg.max_batch = s->batch;
    pt_net *net = NULL;
    pt_error err = {0};
    if (pt_net_create(&m, &cfg, &net, &err) < 0 ||
        pt_net_layer_memory(&m, 0, s->batch, NULL, saved, scratch, &err) < 0) {
        fprintf(stderr, "attention_fused: %s\n", err.msg);
        pt_net_destroy(&net);
        return -1;
    }
    int64_t n = (int64_t)s->batch * s->T * s->D;
    float *x = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_COMM, n);
    float *dy = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_COMM, n);
    float *dx = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_COMM, n);
    pt_rng rng = pt_rng_make(3, 1);
    for (int64_t i = 0; x && dy && i < n; i++) {
        x[i] = (float)pt_rng_uniform_range(&rng, -1, 1);
        dy[i] = (float)pt_rng_uniform_range(&rng, -1, 1);
    }
    double best = -1;
    for (int r = 0; x && dy && dx && r < reps; r++) {
        double t0 = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID);
        if (pt_net_forward(net, 0, NULL, x, s->batch, NULL, NULL, NULL) < 0 ||
            pt_net_backward(net, 0, NULL, NULL, dy, dx) < 0)
            break;
        double t = (pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID) - t0) * MS_PER_S;
        best = best < 0 || t < best ? t : best;
    }
    pt_net_destroy(&net);
    return best;
}

int main(int argc, char **argv)
{
    pt_blas_fixup_core(argv);
    int reps = DEFAULT_REPS;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: attention_fused [--repeats R]\n");
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    openblas_set_num_threads(1);
    printf("attention on the CPU backend, forward + backward (input gradient), OpenBLAS core %s, "
           "1 thread; min over %d, thread CPU time\n",
           pt_blas_core_name(), reps);
    printf("%-10s %5s %4s %2s %5s | %10s %12s %12s | %10s %12s %12s\n", "shape", "T", "D", "H",
           "batch", "unfused ms", "saved B", "scratch B", "fused ms", "saved B", "scratch B");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        int64_t us = 0, uw = 0, fs = 0, fw = 0;
        double tu = time_layer(s, 0, reps, &us, &uw), tf = time_layer(s, 1, reps, &fs, &fw);
        printf("%-10s %5d %4d %2d %5d | %10.2f %12lld %12lld | %10.2f %12lld %12lld\n", s->what,
               s->T, s->D, s->H, s->batch, tu, (long long)us, (long long)uw, tf, (long long)fs,
               (long long)fw);
    }
    return 0;
}

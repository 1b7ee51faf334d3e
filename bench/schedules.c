/* Synchronous schedule kinds side by side, measured and predicted: for each
 * model (default fmnist-mlp-deep and gpt-tiny), S stages (default 4) cut for
 * equal compute, M micro-batches (default 8), every kind of the table below
 * is simulated (planner/simulate.h) and run for real by the stage executor
 * on a threaded in-process pipeline (runtime/pipeline.h, one thread per
 * stage, the executor `pipetop run`'s agents use), and one row prints the
 * predicted and the measured iteration time and bubble.
 *
 * The profile is measured here, on this machine, before the runs: every
 * layer alone at the micro-batch size, median of PROFILE_REPS, forward,
 * whole backward and its two halves (pt_net_backward_input / _weight), plus
 * the saved, scratch and keep bytes (pt_net_layer_memory, _keep). The topology is one
 * node of S devices sharing this machine's cores (the simulator slows
 * compute by workers / cores, as for `pipetop run` on one host). Measured:
 * wall time of one pt_pipeline_run per iteration and bubble = 1 - busy by
 * protocol/op.h's definition per device (an interleaved device's chunks
 * together, as the simulator predicts it), medians over the timed
 * iterations. Prints
 * figures; never fails on time. Usage: schedules [--models a,b] [--stages S]
 * [--microbatches M] [--mb-size B] [--iters N] (see docs/benchmarks.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner/interleave.h"
#include "planner/cost.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/clock.h"
#include "protocol/op.h"
#include "runtime/data.h"
#include "runtime/net.h"
#include "runtime/pipeline.h"
#include "runtime/rng.h"

#define PROFILE_REPS 7
#define WARMUP_ITERS 2
#define MAX_WORKERS  16
#define MAX_EVENTS   65536
#define DATA_SEED    3
#define INIT_SEED    1
#define LINK_BPS     5e9   /* in-process transfers: memory copies */
#define LINK_LAT_S   20e-6 /* and a message hand-over */
#define MAX_ITERS    100

/* The kinds compared: one line each. A kind with parameters sets them in
 * `reshape`, which takes the S-stage plan and returns the one to run (the
 * plan given is freed by the caller either way; NULL: failed). */
typedef struct kind_row {
    const char *label;
    pt_sched_kind kind;
    pt_plan *(*reshape)(const pt_plan *plan, const pt_cost *cost); /* NULL: as it is */
} kind_row;

/* Interleaved 1F1B with two chunks per device: the layers re-cut into 2·S
 * balanced chunks on the same S devices (pt_plan_rechunk). */
static pt_plan *interleave2(const pt_plan *plan, const pt_cost *cost)
{
    pt_plan *out = NULL;
    pt_error err = {0};
    if (pt_plan_rechunk(plan, cost, PT_SCHED_INTERLEAVED, 2, &out, &err) < 0)
        fprintf(stderr, "schedules: interleaved v=2: %s\n", err.msg);
    return out;
}

static const kind_row kinds[] = {
    {"1f1b-flush", PT_SCHED_1F1B_FLUSH, NULL},
    {"interleaved v2", PT_SCHED_INTERLEAVED, interleave2},
    {"zb-h1", PT_SCHED_ZB_H1, NULL},
    {"zb-h2", PT_SCHED_ZB_H2, NULL},
};
#define KIND_COUNT (int)(sizeof kinds / sizeof kinds[0])

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0;
}

/* ---- profile ----------------------------------------------------------- */

/* Median ms of each phase of layer l alone at `mb` samples. */
static int time_layer(const pt_model_spec *spec, int l, int mb, pt_profile_layer *L, int64_t *in_b)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = l;
    cfg.last = l + 1;
    cfg.max_batch = mb;
    pt_net *net = NULL;
    pt_error err = {0};
    if (pt_net_create(spec, &cfg, &net, &err) < 0) {
        fprintf(stderr, "schedules: %s\n", err.msg);
        return -1;
    }
    int64_t in = pt_net_in_elems(net) * mb, out = pt_net_out_elems(net) * mb;
    int64_t lab = pt_net_label_count(net) * mb;
    float *x = malloc((size_t)in * sizeof *x), *dy = malloc((size_t)out * sizeof *dy);
    float *dx = malloc((size_t)in * sizeof *dx);
    int32_t *labels = lab ? malloc((size_t)lab * sizeof *labels) : NULL;
    pt_rng rng = {DATA_SEED, (uint64_t)l};
    int tokens = l == 0 && spec->input_kind == PT_INPUT_TOKENS;
    int vocab = spec->layers[0].vocab > 0 ? spec->layers[0].vocab : 2;
    for (int64_t i = 0; i < in; i++)
        x[i] = tokens ? (float)(pt_rng_next(&rng) % (uint64_t)vocab)
                      : (float)pt_rng_uniform_range(&rng, -1, 1);
    for (int64_t i = 0; i < out; i++)
        dy[i] = (float)pt_rng_uniform_range(&rng, -1e-2, 1e-2);
    for (int64_t i = 0; i < lab; i++)
        labels[i] = (int32_t)(pt_rng_next(&rng) % (uint64_t)pt_net_classes(net));
    const float *g = lab ? NULL : dy;
    float *d = l > 0 ? dx : NULL;
    double tf[PROFILE_REPS], tb[PROFILE_REPS], ti[PROFILE_REPS], tw[PROFILE_REPS], t;
    for (int r = 0; r < PROFILE_REPS; r++) {
        t = pt_clock_s();
        pt_net_forward(net, 0, NULL, x, mb, labels, NULL, NULL);
        tf[r] = pt_clock_s() - t;
        t = pt_clock_s();
        pt_net_backward(net, 0, NULL, NULL, g, d);
        tb[r] = pt_clock_s() - t;
        pt_net_forward(net, 0, NULL, x, mb, labels, NULL, NULL);
        t = pt_clock_s();
        pt_net_backward_input(net, 0, NULL, g, d);
        ti[r] = pt_clock_s() - t;
        t = pt_clock_s();
        pt_net_backward_weight(net, 0, NULL, NULL);
        tw[r] = pt_clock_s() - t;
    }
    int64_t off, count;
    pt_net_layer_range(net, l, &off, &count);
    snprintf(L->name, sizeof L->name, "%s", spec->layers[l].name);
    L->fwd_ms = 1e3 * median(tf, PROFILE_REPS);
    L->bwd_ms = 1e3 * median(tb, PROFILE_REPS);
    L->recompute_ms = L->fwd_ms;
    L->split = 1;
    L->bwd_input_ms = 1e3 * median(ti, PROFILE_REPS);
    L->bwd_weight_ms = 1e3 * median(tw, PROFILE_REPS);
    L->act_bytes = out * (int64_t)sizeof(float);
    L->param_bytes = count * (int64_t)sizeof(float);
    *in_b = in * (int64_t)sizeof(float);
    pt_net_destroy(&net);
    free(x);
    free(dy);
    free(dx);
    free(labels);
    int rc = pt_net_layer_memory(spec, l, mb, NULL, &L->saved_bytes, &L->scratch_bytes, &err);
    if (rc == 0)
        rc = pt_net_layer_keep(spec, l, mb, NULL, &L->keep_bytes, &err);
    if (rc < 0)
        fprintf(stderr, "schedules: %s\n", err.msg);
    return rc;
}

static pt_profile *measure_profile(const pt_model_spec *spec, int mb)
{
    pt_profile *p = pt_profile_new(spec->layer_count);
    if (!p)
        return NULL;
    snprintf(p->model, sizeof p->model, "%s", spec->name);
    p->microbatch = mb;
    for (int l = 0; l < spec->layer_count; l++) {
        int64_t in_b;
        if (time_layer(spec, l, mb, &p->layers[l], &in_b) < 0) {
            pt_profile_free(&p);
            return NULL;
        }
        if (l == 0)
            p->input_bytes = in_b;
    }
    return p;
}

/* ---- plan -------------------------------------------------------------- */

/* S contiguous stages of about equal forward + backward time. */
static void equal_cuts(const pt_profile *pf, int S, int *cuts)
{
    double total = 0, acc = 0;
    int n = pf->layer_count;
    for (int l = 0; l < n; l++)
        total += pf->layers[l].fwd_ms + pf->layers[l].bwd_ms;
    cuts[0] = 0;
    int s = 1;
    for (int l = 0; l < n && s < S; l++) {
        acc += pf->layers[l].fwd_ms + pf->layers[l].bwd_ms;
        /* cut after l once this stage has its share, leaving a layer for each later one */
        if ((acc >= total * s / S && l + 1 <= n - (S - s)) || n - (l + 1) == S - s)
            cuts[s++] = l + 1;
    }
    cuts[S] = n;
}

static pt_plan *make_plan(const pt_model_spec *spec, const int *cuts, int S, int mb, int M,
                          const kind_row *k, const pt_cost *cost)
{
    pt_plan *plan = pt_plan_new(S);
    if (!plan)
        return NULL;
    snprintf(plan->model, sizeof plan->model, "%s", spec->name);
    plan->layer_count = spec->layer_count;
    for (int s = 0; s < S; s++) {
        plan->stages[s].first = cuts[s];
        plan->stages[s].last = cuts[s + 1];
        pt_plan_set_replicas(plan, s, &s, 1);
    }
    plan->microbatch_size = mb;
    plan->microbatch_count = M;
    plan->schedule = k->reshape ? PT_SCHED_1F1B_FLUSH : k->kind;
    plan->policy = 'A';
    plan->optimizer = pt_optim_default(PT_OPTIM_SGD);
    plan->optimizer.lr = 1e-3f;
    if (k->reshape) {
        pt_plan *shaped = k->reshape(plan, cost);
        pt_plan_free(&plan);
        return shaped;
    }
    return plan;
}

/* ---- measured run ------------------------------------------------------ */

typedef struct events {
    int n[MAX_WORKERS];
    pt_exec_event *ev[MAX_WORKERS];
} events;

static void on_op(void *user, const pt_exec_event *ev)
{
    events *e = user;
    if (ev->worker >= 0 && ev->worker < MAX_WORKERS && e->n[ev->worker] < MAX_EVENTS)
        e->ev[ev->worker][e->n[ev->worker]++] = *ev;
}

/* Bubble of one iteration from its events (protocol/op.h), per device as
 * the simulator counts it (pt_sim_result.bubble_frac): 1 - the mean over
 * devices of compute time / the iteration's span, a device's compute being
 * that of all its workers (an interleaved device's v chunks together, its
 * host; every other kind has one worker per device). Counting each chunk
 * alone would call a device idle while its other chunk computes. */
static double bubble_of(const events *e, const pt_program *prog)
{
    int W = prog->worker_count, H = pt_sched_host_count(prog);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int w = 0; w < W; w++)
        for (int i = 0; i < e->n[w]; i++) {
            lo = e->ev[w][i].start_ns < lo ? e->ev[w][i].start_ns : lo;
            hi = e->ev[w][i].end_ns > hi ? e->ev[w][i].end_ns : hi;
        }
    double span = (double)(hi - lo) * 1e-9, sum = 0, busy[MAX_WORKERS] = {0};
    for (int w = 0; w < W; w++)
        for (int i = 0; i < e->n[w]; i++)
            if (pt_op_is_compute(e->ev[w][i].kind))
                busy[pt_sched_host_of(prog, w)] +=
                    (double)(e->ev[w][i].end_ns - e->ev[w][i].start_ns) * 1e-9;
    for (int h = 0; h < H; h++)
        sum += pt_op_busy_frac(busy[h], span);
    return H ? 1 - sum / H : 0;
}

static int run_measured(const pt_model_spec *spec, const pt_program *prog, const pt_dataset *ds,
                        int iters, double *iter_s, double *bubble)
{
    events *e = calloc(1, sizeof *e);
    int W = prog->worker_count, rc = 0;
    if (!e || W > MAX_WORKERS)
        return -1;
    for (int w = 0; w < W; w++)
        if (!(e->ev[w] = malloc(MAX_EVENTS * sizeof(pt_exec_event))))
            rc = -1;
    pt_optim_spec optim = pt_optim_default(PT_OPTIM_SGD);
    optim.lr = 1e-3f;
    pt_pipeline_config pc = {.spec = spec,
                             .prog = prog,
                             .optim = optim,
                             .init_seed = INIT_SEED,
                             .data = ds,
                             .data_seed = DATA_SEED,
                             .on_op = on_op,
                             .user = e,
                             .host_comm = 1}; /* interleaved: one rank per device, as agents run */
    pt_pipeline *pp = NULL;
    pt_error err = {0};
    if (rc == 0 && (rc = pt_pipeline_create(&pc, &pp, &err)) < 0)
        fprintf(stderr, "schedules: %s\n", err.msg);
    double t[MAX_ITERS], b[MAX_ITERS];
    for (int it = 0; rc == 0 && it < WARMUP_ITERS + iters; it++) {
        memset(e->n, 0, sizeof e->n);
        double t0 = pt_clock_s();
        if ((rc = pt_pipeline_run(pp, it, &err)) < 0) {
            fprintf(stderr, "schedules: %s\n", err.msg);
            break;
        }
        if (it >= WARMUP_ITERS) {
            t[it - WARMUP_ITERS] = pt_clock_s() - t0;
            b[it - WARMUP_ITERS] = bubble_of(e, prog);
        }
    }
    if (rc == 0) {
        *iter_s = median(t, iters);
        *bubble = median(b, iters);
    }
    pt_pipeline_destroy(&pp);
    for (int w = 0; w < W; w++)
        free(e->ev[w]);
    free(e);
    return rc;
}

/* ---- main -------------------------------------------------------------- */

typedef struct args {
    char models[256];
    int stages, microbatches, mb_size, iters;
} args;

static int parse(int argc, char **argv, args *a)
{
    *a = (args){"fmnist-mlp-deep,gpt-tiny", 4, 8, 0, 5};
    for (int i = 1; i < argc; i++) {
        int *target = !strcmp(argv[i], "--stages")         ? &a->stages
                      : !strcmp(argv[i], "--microbatches") ? &a->microbatches
                      : !strcmp(argv[i], "--mb-size")      ? &a->mb_size
                      : !strcmp(argv[i], "--iters")        ? &a->iters
                                                           : NULL;
        if (!strcmp(argv[i], "--models") && i + 1 < argc) {
            snprintf(a->models, sizeof a->models, "%s", argv[++i]);
        } else if (target && i + 1 < argc) {
            *target = atoi(argv[++i]);
            int hi = target == &a->iters ? MAX_ITERS : target == &a->stages ? MAX_WORKERS : 4096;
            if (*target < (target == &a->mb_size ? 0 : 1) || *target > hi) {
                fprintf(stderr, "schedules: %s out of range\n", argv[i - 1]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: schedules [--models a,b] [--stages S] [--microbatches M] "
                            "[--mb-size B] [--iters N]\n");
            return 2;
        }
    }
    return 0;
}

static int bench_model(const char *name, const args *a, int cores)
{
    pt_model_spec *spec = NULL;
    pt_error err = {0};
    if (pt_model_spec_find(name, &spec, &err) < 0) {
        fprintf(stderr, "schedules: %s\n", err.msg);
        return 1;
    }
    int tokens = spec->input_kind == PT_INPUT_TOKENS;
    int mb = a->mb_size > 0 ? a->mb_size : tokens ? 8 : 32, S = a->stages, M = a->microbatches;
    if (spec->layer_count < S) {
        fprintf(stderr, "schedules: %s has %d layers, fewer than %d stages\n", name,
                spec->layer_count, S);
        pt_model_spec_free(&spec);
        return 1;
    }
    pt_dataset *ds = NULL;
    int64_t count = (int64_t)mb * M * (WARMUP_ITERS + a->iters);
    int rc = tokens ? pt_dataset_synth_tokens_new(count, spec->input[0], spec->layers[0].vocab,
                                                  DATA_SEED, PT_DATA_TRAIN, &ds, &err)
                    : pt_dataset_synth_class_new(count, spec->input[0],
                                                 spec->layers[spec->layer_count - 1].classes,
                                                 DATA_SEED, PT_DATA_TRAIN, &ds, &err);
    pt_profile *pf = rc == 0 ? measure_profile(spec, mb) : NULL;
    pt_link link = {LINK_BPS, LINK_LAT_S};
    pt_topology *topo = pt_topology_uniform(1, S, (int64_t)1 << 36, link, link);
    pt_cost *cost = NULL;
    if (rc < 0 || !pf || !topo || pt_cost_new(pf, topo, &cost, &err) < 0) {
        fprintf(stderr, "schedules: %s: set-up failed: %s\n", name, err.msg);
        rc = 1;
        goto out;
    }
    for (int d = 0; d < topo->device_count; d++)
        topo->devices[d].node_cores = cores;
    int cuts[MAX_WORKERS + 1];
    equal_cuts(pf, S, cuts);
    printf("\n%s: %d stages (layers", name, S);
    for (int s = 0; s < S; s++)
        printf(" [%d,%d)", cuts[s], cuts[s + 1]);
    printf("), M = %d, micro-batch %d, %d cores\n", M, mb, cores);
    printf("%-14s %12s %12s %10s %10s  (bubble per device: all its chunks together)\n", "kind",
           "pred iter ms", "meas iter ms", "pred bub", "meas bub");
    for (int k = 0; k < KIND_COUNT; k++) {
        pt_plan *plan = make_plan(spec, cuts, S, mb, M, &kinds[k], cost);
        pt_sim *sim = NULL;
        pt_program prog = {0};
        pt_sim_result res;
        double mt = 0, mbub = 0;
        int krc = plan && pt_sim_new(&sim) == 0 ? 0 : -1;
        if (krc == 0 && (krc = pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err)) < 0)
            fprintf(stderr, "schedules: %s: %s\n", kinds[k].label, err.msg);
        if (krc == 0)
            krc = run_measured(spec, &prog, ds, a->iters, &mt, &mbub);
        if (krc == 0)
            printf("%-14s %12.2f %12.2f %9.1f%% %9.1f%%\n", kinds[k].label, 1e3 * res.iter_s,
                   1e3 * mt, 100 * res.bubble_frac, 100 * mbub);
        else
            printf("%-14s failed\n", kinds[k].label);
        pt_program_release(&prog);
        pt_sim_free(&sim);
        pt_plan_free(&plan);
    }
out:
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&pf);
    pt_dataset_free(&ds);
    pt_model_spec_free(&spec);
    return rc;
}

int main(int argc, char **argv)
{
    args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("schedules: predicted (simulator, profile measured now) vs measured (in-process "
           "pipeline), %d iterations after %d warm-up\n",
           a.iters, WARMUP_ITERS);
    char *save = NULL;
    for (char *m = strtok_r(a.models, ",", &save); m; m = strtok_r(NULL, ",", &save))
        rc |= bench_model(m, &a, cores > 0 ? (int)cores : 1);
    return rc ? 1 : 0;
}

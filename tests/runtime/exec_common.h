/* Shared by the stage-executor tests: small models built by hand, plans, a
 * pipeline driver that collects the weights and the op events, and the
 * single-process references the pipelines are compared with:
 *
 *   ref_sync       single-device training on the whole global batch
 *                  (what gpipe, dapple and 1f1b-flush must equal);
 *   ref_stale      W(t+1) = W(t) - lr * grad f(W(t-1)) on whole global batches
 *                  (2BW; Pipe-SGD);
 *   ref_pipedream  PipeDream's update order: stage i applies micro-batch k's
 *                  gradient as its (k+1)-th update, and micro-batch k reads on
 *                  stage i the weights after k - K_i + 1 updates, K_i = S - i
 *                  in-flight micro-batches (with vertical sync K_i = S on every
 *                  stage).
 *
 * The references never look at a schedule program: they compute the
 * semantics from the papers with plain nets, the data order from
 * pt_data_order, and the optimizers of runtime/optim.h. Header-only because
 * every test file is its own program. */
#ifndef PT_TESTS_RUNTIME_EXEC_COMMON_H
#define PT_TESTS_RUNTIME_EXEC_COMMON_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "planner/schedule.h"
#include "protocol/plan.h"
#include "runtime/data.h"
#include "runtime/executor.h"
#include "runtime/layer.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "runtime/pipeline.h"
#include "tests/test.h"

#define EQ_TOL      1e-5 /* relative: pipeline weights vs reference (float summation order) */
#define INIT_SEED   7
#define DATA_SEED   11
#define SYNTH_COUNT 96 /* samples of the synthetic sets: several global batches */
#define MLP_IN      12
#define MLP_CLASSES 5
#define GPT_VOCAB   11
#define GPT_DIM     8
#define GPT_SEQ     5
/* Each shared-memory ring of a pipeline whose every message fits in a
 * quarter of it (ec_ring_bytes): the test models' activations, gradients and
 * parameters to all-reduce are a few KiB, and the comm default (8 MiB,
 * mapped populated) costs the kernel ~5 ms to zero per ring, for the
 * hundreds of rings the tests build. A larger model keeps the default: an
 * executor's all-reduce larger than its ring was seen to stall in-process
 * (memory_predict_test on fmnist-mlp-deep with 1 and 2 MiB rings). */
#define EC_RING_BYTES ((size_t)1 << 20)

/* ---- models ------------------------------------------------------------ */

static inline pt_layer_spec ec_layer(pt_layer_kind kind)
{
    pt_layer_spec s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    snprintf(s.name, sizeof s.name, "%s", pt_layer_ops_for(kind)->name);
    s.bias = 1;
    return s;
}

static inline pt_layer_spec ec_linear(int out)
{
    pt_layer_spec s = ec_layer(PT_LAYER_LINEAR);
    s.out = out;
    return s;
}

/* fmnist-mlp in miniature: 12 -> 16 -> 16 -> 16 -> 5, relu, softmax_xent;
 * 8 layers, so 2 to 4 stages split it. */
static pt_layer_spec ec_mlp_layers[8];
static inline pt_model_spec ec_mlp(void)
{
    pt_layer_spec l[8] = {ec_linear(16),          ec_layer(PT_LAYER_RELU),
                          ec_linear(16),          ec_layer(PT_LAYER_RELU),
                          ec_linear(16),          ec_layer(PT_LAYER_RELU),
                          ec_linear(MLP_CLASSES), ec_layer(PT_LAYER_SOFTMAX_XENT)};
    l[7].classes = MLP_CLASSES;
    memcpy(ec_mlp_layers, l, sizeof l);
    pt_model_spec s = {.name = "mlp",
                       .input_kind = PT_INPUT_FLOAT,
                       .input_rank = 1,
                       .input = {MLP_IN},
                       .layers = ec_mlp_layers,
                       .layer_count = 8};
    return s;
}

/* A small GPT: embedding, a residual attention block, a residual MLP block,
 * final norm, head, loss (6 layers). */
static pt_layer_spec ec_gpt_attn[2], ec_gpt_mlp[4], ec_gpt_layers[6];
static inline pt_model_spec ec_gpt(void)
{
    ec_gpt_attn[0] = ec_layer(PT_LAYER_LAYERNORM);
    ec_gpt_attn[1] = ec_layer(PT_LAYER_ATTENTION);
    ec_gpt_attn[1].heads = 2;
    ec_gpt_mlp[0] = ec_layer(PT_LAYER_LAYERNORM);
    ec_gpt_mlp[1] = ec_linear(16);
    ec_gpt_mlp[2] = ec_layer(PT_LAYER_GELU);
    ec_gpt_mlp[3] = ec_linear(GPT_DIM);
    pt_layer_spec l[6] = {ec_layer(PT_LAYER_EMBEDDING), ec_layer(PT_LAYER_RESIDUAL),
                          ec_layer(PT_LAYER_RESIDUAL),  ec_layer(PT_LAYER_LAYERNORM),
                          ec_linear(GPT_VOCAB),         ec_layer(PT_LAYER_SOFTMAX_XENT)};
    l[0].vocab = GPT_VOCAB;
    l[0].dim = GPT_DIM;
    l[0].positional = 1;
    l[1].body = ec_gpt_attn;
    l[1].body_count = 2;
    l[2].body = ec_gpt_mlp;
    l[2].body_count = 4;
    l[5].classes = GPT_VOCAB;
    memcpy(ec_gpt_layers, l, sizeof l);
    pt_model_spec s = {.name = "gpt",
                       .input_kind = PT_INPUT_TOKENS,
                       .input_rank = 1,
                       .input = {GPT_SEQ},
                       .layers = ec_gpt_layers,
                       .layer_count = 6};
    return s;
}

/* Synthetic data of the model's shape: token sequences of its input length
 * over its embedding's vocabulary, or features of its input size in as many
 * classes as its loss layer. */
static inline pt_dataset *ec_data(const pt_model_spec *spec)
{
    pt_dataset *ds = NULL;
    pt_error err = {0};
    int rc = spec->input_kind == PT_INPUT_TOKENS
                 ? pt_dataset_synth_tokens_new(SYNTH_COUNT, spec->input[0], spec->layers[0].vocab,
                                               DATA_SEED, PT_DATA_TRAIN, &ds, &err)
                 : pt_dataset_synth_class_new(SYNTH_COUNT, pt_model_spec_input_elems(spec),
                                              spec->layers[spec->layer_count - 1].classes,
                                              DATA_SEED, PT_DATA_TRAIN, &ds, &err);
    if (rc < 0)
        fprintf(stderr, "data: %s\n", err.msg);
    return ds;
}

/* ---- plans ------------------------------------------------------------- */

typedef struct ec_case {
    const char *name;
    pt_sched_kind kind;
    char policy;
    int vsync;
    int stages;
    const int *cuts;     /* stage s is layers [cuts[s], cuts[s+1]) */
    const int *replicas; /* per stage */
    const int *recompute;
    int mb_size, mb_count;
    int windows; /* asynchronous kinds; iterations for synchronous ones */
    pt_optim_kind optim;
    int gpt;
    const pt_model_spec *model; /* ec_check_sync: this model (a shipped one) instead of the
                                   MLP or the small GPT */
    /* gradient buckets (pt_sched_opts.bucket_bytes): 0 builds without a profile (one
     * bucket per stage); otherwise with ec_profile's real parameter bytes */
    int64_t bucket_bytes;
    /* interleaved: model chunks per device (stages = ranks x chunks, the replicas of
     * stage s those of stage s % ranks); 0: one */
    int chunks;
    /* interleaved: 1, one communicator rank per device shared by its chunks (the
     * layout of an agent hosting all its device's chunks, pt_pipeline_config.host_comm) */
    int host_comm;
    /* pipedream: 1, replicated stages take whole micro-batches round-robin
     * (PT_REPL_ROUND_ROBIN); 0 split-concat */
    int round_robin;
} ec_case;

static inline pt_optim_spec ec_optim(pt_optim_kind kind)
{
    pt_optim_spec o = pt_optim_default(kind);
    if (kind == PT_OPTIM_SGD)
        o.lr = 0.1f; /* large enough that K steps move the weights far beyond the tolerance */
    else
        o.lr = 0.01f;
    o.weight_decay = 0.01f;
    return o;
}

static inline pt_plan *ec_plan(const ec_case *c, int layer_count)
{
    pt_plan *plan = pt_plan_new(c->stages);
    if (!plan)
        return NULL;
    plan->layer_count = layer_count;
    int dev = 0, ranks = c->chunks > 1 ? c->stages / c->chunks : c->stages;
    for (int s = 0; s < c->stages; s++) {
        plan->stages[s].first = c->cuts[s];
        plan->stages[s].last = c->cuts[s + 1];
        int r = c->replicas ? c->replicas[s % ranks] : 1, devs[16];
        if (s >= ranks) /* a later chunk of rank s % ranks: its devices */
            for (int j = 0; j < r; j++)
                devs[j] = plan->stages[s % ranks].replicas[j];
        else
            for (int j = 0; j < r; j++)
                devs[j] = dev++;
        pt_plan_set_replicas(plan, s, devs, r);
        plan->stages[s].recompute = c->recompute ? c->recompute[s] : 0;
    }
    plan->microbatch_size = c->mb_size;
    plan->microbatch_count = c->mb_count;
    plan->schedule = c->kind;
    plan->policy = c->policy ? c->policy : 'A';
    plan->vertical_sync = c->vsync;
    plan->chunks = c->chunks > 1 ? c->chunks : 1;
    plan->replication = c->round_robin ? PT_REPL_ROUND_ROBIN : PT_REPL_SPLIT_CONCAT;
    plan->optimizer = ec_optim(c->optim);
    return plan;
}

static inline int ec_program(const ec_case *c, int layer_count, pt_program *prog)
{
    pt_plan *plan = ec_plan(c, layer_count);
    pt_error err = {0};
    pt_sched_opts o = {0};
    int sync = pt_sched_kind_has(c->kind, PT_SCHED_SYNCHRONOUS);
    o.windows = sync ? 0 : c->windows;
    int rc = plan ? pt_sched_build(plan, NULL, &o, prog, &err) : PT_ENOMEM;
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
    pt_plan_free(&plan);
    return rc;
}

static inline pt_net *ec_whole_net(const pt_model_spec *spec, int batch);

/* A profile of spec with its real parameter bytes (times are made up). */
static inline pt_profile *ec_profile(const pt_model_spec *spec, int mb)
{
    pt_net *whole = ec_whole_net(spec, 1);
    pt_profile *p = pt_profile_new(spec->layer_count);
    if (!whole || !p) {
        pt_net_destroy(&whole);
        pt_profile_free(&p);
        return NULL;
    }
    p->microbatch = mb;
    for (int l = 0; l < spec->layer_count; l++) {
        int64_t in, out, off, count;
        pt_net_layer_elems(whole, l, &in, &out);
        pt_net_layer_range(whole, l, &off, &count);
        if (l == 0)
            p->input_bytes = in * (int64_t)sizeof(float) * mb;
        pt_profile_layer *L = &p->layers[l];
        snprintf(L->name, sizeof L->name, "l%d", l);
        L->fwd_ms = 1.0;
        L->bwd_ms = 2.0;
        L->recompute_ms = L->fwd_ms;
        L->act_bytes = out * (int64_t)sizeof(float) * mb;
        L->param_bytes = count * (int64_t)sizeof(float);
    }
    pt_net_destroy(&whole);
    return p;
}

static inline int ec_program_spec(const ec_case *c, const pt_model_spec *spec, pt_program *prog)
{
    pt_plan *plan = ec_plan(c, spec->layer_count);
    pt_error err = {0};
    pt_sched_opts o = {0};
    int sync = pt_sched_kind_has(c->kind, PT_SCHED_SYNCHRONOUS);
    o.windows = sync ? 0 : c->windows;
    o.bucket_bytes = c->bucket_bytes;
    pt_profile *pf = c->bucket_bytes ? ec_profile(spec, c->mb_size) : NULL;
    int rc =
        plan && (pf || !c->bucket_bytes) ? pt_sched_build(plan, pf, &o, prog, &err) : PT_ENOMEM;
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
    pt_profile_free(&pf);
    pt_plan_free(&plan);
    return rc;
}

/* ---- weights ----------------------------------------------------------- */

/* Host copy of all parameters of the whole model, layer after layer. */
typedef struct ec_weights {
    int64_t count;
    float *w;
} ec_weights;

/* Reads the weights of one net (layers [first,last)) into the whole-model
 * array at the same offsets a whole-model net would use. */
static inline void ec_gather(pt_net *net, const float *array, const pt_net *layout, ec_weights *out)
{
    for (int l = pt_net_first(net); l < pt_net_last(net); l++) {
        int64_t off, cnt, off2, cnt2;
        pt_net_layer_range(net, l, &off, &cnt);
        pt_net_layer_range(layout, l, &off2, &cnt2);
        if (cnt && cnt == cnt2)
            pt_net_get_layer(net, l, array, out->w + off2, cnt);
    }
}

/* Normwise relative difference ||a - b|| / ||b||. */
static inline double ec_rel(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* Elementwise: max |a-b| / (max |b|). */
static inline double ec_maxrel(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (e > d)
            d = e;
        if (fabs(b[i]) > r)
            r = fabs(b[i]);
    }
    return r > 0 ? d / r : d;
}

/* ---- data order, independently of runtime/feed.c ----------------------- */

/* Sample indices of global batch t of B samples (whole batches per epoch). */
static inline void ec_batch_indices(int64_t n, int64_t B, int64_t t, int64_t *idx)
{
    int64_t per = n / B, e = t / per;
    int64_t *order = malloc((size_t)n * sizeof *order);
    pt_data_order(n, DATA_SEED, e, order);
    memcpy(idx, order + (t % per) * B, (size_t)B * sizeof *idx);
    free(order);
}

typedef struct ec_batch {
    int n;
    float *x;
    int32_t *labels;
} ec_batch;

static inline void ec_load(const pt_dataset *ds, const int64_t *idx, int n, ec_batch *b)
{
    b->n = n;
    b->x = malloc((size_t)n * (size_t)pt_dataset_input_elems(ds) * sizeof(float));
    b->labels = malloc((size_t)n * (size_t)pt_dataset_labels_per_sample(ds) * sizeof(int32_t));
    pt_dataset_get_batch(ds, idx, n, b->x, b->labels);
}

static inline void ec_batch_free(ec_batch *b)
{
    free(b->x);
    free(b->labels);
}

/* ---- references -------------------------------------------------------- */

static inline pt_net *ec_whole_net(const pt_model_spec *spec, int batch)
{
    pt_net_config nc = pt_net_config_default(spec);
    nc.max_batch = batch;
    nc.seed = INIT_SEED;
    pt_net *net = NULL;
    pt_error err = {0};
    if (pt_net_create(spec, &nc, &net, &err) < 0)
        fprintf(stderr, "ref net: %s\n", err.msg);
    return net;
}

/* Gradient of the mean loss of global batch t at weights `params` into the
 * net's gradient array (zeroed first). */
static inline void ec_grad(pt_net *net, const pt_dataset *ds, int64_t B, int64_t t,
                           const float *params)
{
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    ec_batch b;
    ec_batch_indices(pt_dataset_count(ds), B, t, idx);
    ec_load(ds, idx, (int)B, &b);
    pt_net_zero_grads(net);
    pt_net_forward(net, 0, params, b.x, (int)B, b.labels, NULL, NULL);
    pt_net_backward(net, 0, params, NULL, NULL, NULL);
    ec_batch_free(&b);
    free(idx);
}

/* Single-device training: `steps` steps on global batches 0..steps-1. */
static inline void ec_ref_sync(const pt_model_spec *spec, const pt_dataset *ds, int64_t B,
                               int steps, pt_optim_kind ok, ec_weights *out)
{
    pt_net *net = ec_whole_net(spec, (int)B);
    pt_optim *opt = NULL;
    pt_optim_spec os = ec_optim(ok);
    pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, NULL);
    for (int t = 0; t < steps; t++) {
        ec_grad(net, ds, B, t, pt_net_params(net));
        pt_optim_step(opt, pt_net_params(net), pt_net_grads(net));
    }
    out->count = pt_net_param_count(net);
    out->w = malloc((size_t)out->count * sizeof(float));
    ec_gather(net, NULL, net, out);
    pt_optim_destroy(&opt);
    pt_net_destroy(&net);
}

/* One step of staleness over T windows: V0 = V1 = init, window t's gradient
 * at V(t) gives V(t+2) = step(V(t+1)); `applied` of the windows' gradients
 * are applied (T for 2BW and Pipe-SGD, whose programs apply every window's
 * gradients before they end). out = the newest version. */
static inline void ec_ref_stale(const pt_model_spec *spec, const pt_dataset *ds, int64_t B, int T,
                                int applied, pt_optim_kind ok, ec_weights *out)
{
    pt_net *net = ec_whole_net(spec, (int)B);
    pt_optim *opt = NULL;
    pt_optim_spec os = ec_optim(ok);
    pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, NULL);
    float *older = pt_net_version_new(net, PT_MEM_STASH, NULL); /* V(t) */
    float *newer = pt_net_params(net);                          /* V(t+1) */
    for (int t = 0; t < applied; t++) {
        ec_grad(net, ds, B, t, older);
        pt_net_version_copy(net, older, newer);
        pt_optim_step(opt, newer, pt_net_grads(net)); /* newer = V(t+2), older = V(t+1) */
    }
    (void)T;
    out->count = pt_net_param_count(net);
    out->w = malloc((size_t)out->count * sizeof(float));
    ec_gather(net, newer, net, out);
    pt_net_version_free(net, &older);
    pt_optim_destroy(&opt);
    pt_net_destroy(&net);
}

/* PipeDream's semantics over N micro-batches of b samples (micro-batch k is
 * rows [(k%M)b, (k%M+1)b) of global batch k/M), on S stages cut at cuts[]. */
static inline void ec_ref_pipedream(const pt_model_spec *spec, const pt_dataset *ds,
                                    const int *cuts, int S, int b, int M, int N, int vsync,
                                    pt_optim_kind ok, ec_weights *out)
{
    pt_net *whole = ec_whole_net(spec, 1);
    pt_net *net[8];
    pt_optim *opt[8];
    float **ver[8]; /* ver[i][v]: stage i's weights after v updates */
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
    for (int k = 0; k < N; k++) {
        ec_batch bt;
        ec_batch_indices(pt_dataset_count(ds), B, k / M, idx);
        ec_load(ds, idx + (k % M) * b, b, &bt);
        memcpy(act[0], bt.x, (size_t)(b * pt_net_in_elems(net[0])) * sizeof(float));
        int u[8];
        for (int i = 0; i < S; i++) {
            int K = vsync ? S : S - i;
            u[i] = k - K + 1 > 0 ? k - K + 1 : 0;
            const float *y;
            pt_net_zero_grads(net[i]);
            pt_net_forward(net[i], 0, ver[i][u[i]], act[i], b, i == S - 1 ? bt.labels : NULL, &y,
                           NULL);
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

/* PipeDream's round-robin replication over N micro-batches (a multiple of
 * every reps[i]): replica j of stage i runs micro-batches j, j + r_i, ...;
 * stage i's u-th update applies the mean of the gradients of round u,
 * micro-batches [u·r_i, (u+1)·r_i), each the mean over its b samples; the
 * t-th micro-batch of a replica (k = t·r_i + j) reads the weights after
 * t - K_i + 1 updates, K_i = ceil(R_i / r_i) in flight per replica, R_i the
 * replicas of stages i..S-1 (PipeDream's runtime: (R_i - 1) / r_i warm-up
 * micro-batches). With every r_i = 1 this is ec_ref_pipedream. */
static inline void ec_ref_pipedream_rr(const pt_model_spec *spec, const pt_dataset *ds,
                                       const int *cuts, int S, const int *reps, int b, int M, int N,
                                       pt_optim_kind ok, ec_weights *out)
{
    pt_net *whole = ec_whole_net(spec, 1);
    pt_net *net[8];
    pt_optim *opt[8];
    float **ver[8], *acc[8];
    int K[8], R = 0;
    pt_optim_spec os = ec_optim(ok);
    for (int i = S - 1; i >= 0; i--) {
        R += reps[i];
        K[i] = (R + reps[i] - 1) / reps[i];
    }
    for (int i = 0; i < S; i++) {
        pt_net_config nc = pt_net_config_default(spec);
        nc.first = cuts[i];
        nc.last = cuts[i + 1];
        nc.max_batch = b;
        nc.seed = INIT_SEED;
        pt_net_create(spec, &nc, &net[i], NULL);
        pt_optim_create(&os, pt_net_arena(net[i]), pt_net_param_count(net[i]), &opt[i], NULL);
        ver[i] = calloc((size_t)N / reps[i] + 1, sizeof(float *));
        ver[i][0] = pt_net_version_new(net[i], PT_MEM_STASH, NULL);
        acc[i] = calloc((size_t)pt_net_param_count(net[i]) + 1, sizeof(float));
    }
    int64_t B = (int64_t)b * M;
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    float *act[9], *grad[9];
    for (int i = 0; i <= S; i++) {
        int64_t e = i == 0 ? pt_net_in_elems(net[0]) : pt_net_out_elems(net[i - 1]);
        act[i] = malloc((size_t)(b * e) * sizeof(float));
        grad[i] = malloc((size_t)(b * e) * sizeof(float));
    }
    for (int k = 0; k < N; k++) {
        ec_batch bt;
        ec_batch_indices(pt_dataset_count(ds), B, k / M, idx);
        ec_load(ds, idx + (k % M) * b, b, &bt);
        memcpy(act[0], bt.x, (size_t)(b * pt_net_in_elems(net[0])) * sizeof(float));
        int u[8];
        for (int i = 0; i < S; i++) {
            int t = k / reps[i];
            u[i] = t - K[i] + 1 > 0 ? t - K[i] + 1 : 0;
            const float *y;
            pt_net_zero_grads(net[i]);
            pt_net_forward(net[i], 0, ver[i][u[i]], act[i], b, i == S - 1 ? bt.labels : NULL, &y,
                           NULL);
            if (i < S - 1)
                memcpy(act[i + 1], y, (size_t)(b * pt_net_out_elems(net[i])) * sizeof(float));
        }
        for (int i = S - 1; i >= 0; i--)
            pt_net_backward(net[i], 0, ver[i][u[i]], NULL, i == S - 1 ? NULL : grad[i + 1],
                            i > 0 ? grad[i] : NULL);
        for (int i = 0; i < S; i++) {
            int64_t n = pt_net_param_count(net[i]);
            const float *g = pt_net_grads(net[i]);
            for (int64_t e = 0; e < n; e++)
                acc[i][e] += g[e];
            if ((k + 1) % reps[i])
                continue;
            int round = k / reps[i];
            for (int64_t e = 0; e < n; e++)
                acc[i][e] /= (float)reps[i];
            ver[i][round + 1] = pt_net_version_new(net[i], PT_MEM_STASH, ver[i][round]);
            pt_optim_step(opt[i], ver[i][round + 1], acc[i]);
            memset(acc[i], 0, (size_t)n * sizeof(float));
        }
        ec_batch_free(&bt);
    }
    out->count = pt_net_param_count(whole);
    out->w = malloc((size_t)out->count * sizeof(float));
    for (int i = 0; i < S; i++) {
        ec_gather(net[i], ver[i][N / reps[i]], whole, out);
        for (int v = 0; v <= N / reps[i]; v++)
            pt_net_version_free(net[i], &ver[i][v]);
        free(ver[i]);
        free(acc[i]);
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

/* ---- running a pipeline ------------------------------------------------ */

#define EC_MAX_EVENTS  8192
#define EC_MAX_WORKERS 16

/* Events of every worker; each worker thread appends to its own list. */
typedef struct ec_events {
    int n[EC_MAX_WORKERS];
    pt_exec_event *ev[EC_MAX_WORKERS];
} ec_events;

static inline void ec_on_op(void *user, const pt_exec_event *ev)
{
    ec_events *e = user;
    if (ev->worker < EC_MAX_WORKERS && e->n[ev->worker] < EC_MAX_EVENTS)
        e->ev[ev->worker][e->n[ev->worker]++] = *ev;
}

static inline ec_events *ec_events_new(void)
{
    ec_events *e = calloc(1, sizeof *e);
    for (int w = 0; w < EC_MAX_WORKERS; w++)
        e->ev[w] = malloc(EC_MAX_EVENTS * sizeof(pt_exec_event));
    return e;
}

static inline void ec_events_free(ec_events *e)
{
    for (int w = 0; e && w < EC_MAX_WORKERS; w++)
        free(e->ev[w]);
    free(e);
}

typedef struct ec_run {
    pt_program prog;
    pt_pipeline *pp;
    ec_events *events;
    ec_weights w;       /* replica 0 of every stage, whole-model layout */
    int replicas_equal; /* every replica bit-identical to replica 0 */
} ec_run;

/* pt_pipeline_config.shm_ring_bytes for spec's pipelines at micro-batches of
 * mb_size rows: EC_RING_BYTES when all of its parameters and any layer's
 * output for the micro-batch fit in a quarter of it, else 0 (the default). */
static inline size_t ec_ring_bytes(const pt_model_spec *spec, int mb_size)
{
    pt_layer_shape *sh = calloc((size_t)spec->layer_count, sizeof *sh);
    int64_t params = 0, widest = 0;
    pt_error err = {0};
    int ok = sh && pt_model_spec_shapes(spec, sh, &err) == 0;
    for (int l = 0; ok && l < spec->layer_count; l++) {
        params += sh[l].params;
        widest = sh[l].out_elems > widest ? sh[l].out_elems : widest;
    }
    free(sh);
    int64_t quarter = (int64_t)(EC_RING_BYTES / 4 / sizeof(float));
    return ok && params <= quarter && widest * mb_size <= quarter ? EC_RING_BYTES : 0;
}

/* Builds the program and pipeline of case c and runs it: `runs` runs of the
 * program with consecutive global batches (synchronous kinds: one iteration
 * per run). Returns 0 or the failing code (err printed). */
/* Where ec_run_case's pipelines compute (pt_pipeline_config.device and
 * .backend); NULL, NULL: the CPU backend. The references always run on the CPU. */
static const pt_device_spec *ec_device;
static const pt_backend *ec_backend;

static inline int ec_run_case(const ec_case *c, const pt_model_spec *spec, const pt_dataset *ds,
                              int runs, ec_run *r)
{
    memset(r, 0, sizeof *r);
    int rc = ec_program_spec(c, spec, &r->prog);
    if (rc < 0)
        return rc;
    pt_error err = {0};
    rc = pt_sched_validate(&r->prog, &err);
    if (rc < 0) {
        fprintf(stderr, "%s: program invalid: %s\n", c->name, err.msg);
        return rc;
    }
    r->events = ec_events_new();
    pt_pipeline_config pc = {.spec = spec,
                             .prog = &r->prog,
                             .optim = ec_optim(c->optim),
                             .init_seed = INIT_SEED,
                             .data = ds,
                             .data_seed = DATA_SEED,
                             /* a message's wait: under valgrind (PT_MEMCHECK,
                                scripts/memcheck.sh) 20 s were seen to pass on
                                a loaded machine before a 4-stage zb-h1 peer sent */
                             .timeout_ms = getenv("PT_MEMCHECK") ? 180000 : 20000,
                             .on_op = ec_on_op,
                             .user = r->events,
                             .digest = 1,
                             .device = ec_device,
                             .backend = ec_backend,
                             .host_comm = c->host_comm,
                             .shm_ring_bytes = ec_ring_bytes(spec, c->mb_size)};
    if ((rc = pt_pipeline_create(&pc, &r->pp, &err)) < 0) {
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
        return rc;
    }
    for (int k = 0; k < runs; k++) {
        for (int w = 0; w < EC_MAX_WORKERS; w++)
            r->events->n[w] = 0;
        if ((rc = pt_pipeline_run(r->pp, (int64_t)k * r->prog.window_count, &err)) < 0) {
            fprintf(stderr, "%s: run %d: %s\n", c->name, k, err.msg);
            return rc;
        }
    }
    pt_net *layout = ec_whole_net(spec, 1);
    r->w.count = pt_net_param_count(layout);
    r->w.w = calloc((size_t)r->w.count, sizeof(float));
    float *other = calloc((size_t)r->w.count, sizeof(float));
    r->replicas_equal = 1;
    for (int s = 0; s < r->prog.stage_count; s++) {
        int w0 = r->prog.stage_worker[s];
        ec_gather(pt_pipeline_net(r->pp, w0), NULL, layout, &r->w);
        for (int w = w0 + 1; w < r->prog.stage_worker[s + 1]; w++) {
            memcpy(other, r->w.w, (size_t)r->w.count * sizeof(float));
            ec_weights o = {r->w.count, other};
            ec_gather(pt_pipeline_net(r->pp, w), NULL, layout, &o);
            if (memcmp(other, r->w.w, (size_t)r->w.count * sizeof(float)) != 0)
                r->replicas_equal = 0;
        }
    }
    free(other);
    pt_net_destroy(&layout);
    return 0;
}

static inline void ec_run_free(ec_run *r)
{
    pt_pipeline_destroy(&r->pp);
    pt_program_release(&r->prog);
    ec_events_free(r->events);
    free(r->w.w);
    memset(r, 0, sizeof *r);
}

/* Asserts that got equals want within EQ_TOL, and that want is far from
 * `far` (the initial weights, or the reference one step short), so the
 * comparison could have failed. */
static inline void ec_check_equal(const char *name, const ec_weights *got, const ec_weights *want,
                                  const ec_weights *far)
{
    double rel = ec_rel(got->w, want->w, want->count);
    double mrel = ec_maxrel(got->w, want->w, want->count);
    double dist = far ? ec_rel(far->w, want->w, want->count) : 1;
    CHECK_MSG(got->count == want->count, "%s: %lld vs %lld parameters", name, (long long)got->count,
              (long long)want->count);
    CHECK_MSG(rel <= EQ_TOL && mrel <= EQ_TOL,
              "%s: weights differ from the reference: normwise %.3g, elementwise %.3g (tol %g)",
              name, rel, mrel, EQ_TOL);
    CHECK_MSG(dist > 100 * EQ_TOL, "%s: the reference is only %.3g from the control weights", name,
              dist);
    if (getenv("EC_DEBUG_ARGMAX")) {
        int64_t bi = 0;
        for (int64_t i = 0; i < want->count; i++)
            if (fabs((double)got->w[i] - want->w[i]) > fabs((double)got->w[bi] - want->w[bi]))
                bi = i;
        printf("  argmax %lld: %g vs %g\n", (long long)bi, got->w[bi], want->w[bi]);
    }
    if (getenv("EC_VERBOSE"))
        printf("  %-40s rel %.2e  maxrel %.2e  control %.2e\n", name, rel, mrel, dist);
}

/* Runs c for `iters` iterations and checks it against single-device training
 * on the same global batch (ec_check_equal, with the reference one step
 * short as control) and that the replicas of each stage agree. `more`, when
 * given, adds a test's own checks on the finished run before it is freed;
 * `failures_before` is pt_test_failures_ when the run started. */
typedef void (*ec_sync_more)(const ec_case *c, const ec_run *r, const ec_weights *want,
                             int failures_before);
static inline void ec_check_sync(const ec_case *c, int iters, ec_sync_more more)
{
    pt_model_spec spec = c->model ? *c->model : c->gpt ? ec_gpt() : ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    int before = pt_test_failures_;
    ec_run r;
    int rc = ec_run_case(c, &spec, ds, iters, &r);
    CHECK_MSG(rc == 0, "%s: run failed (%d)", c->name, rc);
    if (rc == 0) {
        int64_t B = (int64_t)c->mb_size * c->mb_count;
        ec_weights want, short_by_one;
        ec_ref_sync(&spec, ds, B, iters, c->optim, &want);
        ec_ref_sync(&spec, ds, B, iters - 1, c->optim, &short_by_one);
        ec_check_equal(c->name, &r.w, &want, &short_by_one);
        CHECK_MSG(r.replicas_equal, "%s: replicas of a stage differ", c->name);
        if (more)
            more(c, &r, &want, before);
        free(want.w);
        free(short_by_one.w);
    }
    ec_run_free(&r);
    pt_dataset_free(&ds);
}

#endif

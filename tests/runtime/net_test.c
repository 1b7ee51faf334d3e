/* pt_net against itself: pipeline stages vs the whole model, micro-batches
 * vs one batch, slots in flight, recomputation, memory accounting, and the
 * contracts of the API (errors, layer slices, versions). */
#include <stdint.h>

#include "runtime/layer.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/test.h"

#define ACCUM_TOL 1e-5 /* relative: micro-batch sums vs one batch (float order differs) */

static pt_layer_spec L(pt_layer_kind kind)
{
    pt_layer_spec s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    snprintf(s.name, sizeof s.name, "%s", pt_layer_ops_for(kind)->name);
    s.bias = 1;
    return s;
}

static pt_layer_spec linear(int out)
{
    pt_layer_spec s = L(PT_LAYER_LINEAR);
    s.out = out;
    return s;
}

/* 12 -> 16 -> 16 -> 5 relu MLP (a gelu on the logits, to have one) with softmax_xent. */
static pt_layer_spec mlp_layers[7];
static pt_model_spec mlp_spec(void)
{
    pt_layer_spec l[7] = {
        linear(16),       L(PT_LAYER_RELU),        linear(16), L(PT_LAYER_RELU), linear(5),
        L(PT_LAYER_GELU), L(PT_LAYER_SOFTMAX_XENT)};
    l[6].classes = 5;
    memcpy(mlp_layers, l, sizeof l);
    pt_model_spec s = {.name = "mlp",
                       .input_kind = PT_INPUT_FLOAT,
                       .input_rank = 1,
                       .input = {12},
                       .layers = mlp_layers,
                       .layer_count = 7};
    return s;
}

/* A small GPT: embedding, two residual blocks, final norm, head, loss. */
enum { VOCAB = 13, DIM = 8, SEQ = 6 };
static pt_layer_spec gpt_attn[2], gpt_mlp[4], gpt_layers[6];
static pt_model_spec gpt_spec(void)
{
    gpt_attn[0] = L(PT_LAYER_LAYERNORM);
    gpt_attn[1] = L(PT_LAYER_ATTENTION);
    gpt_attn[1].heads = 2;
    gpt_mlp[0] = L(PT_LAYER_LAYERNORM);
    gpt_mlp[1] = linear(16);
    gpt_mlp[2] = L(PT_LAYER_GELU);
    gpt_mlp[3] = linear(DIM);
    pt_layer_spec l[6] = {L(PT_LAYER_EMBEDDING), L(PT_LAYER_RESIDUAL), L(PT_LAYER_RESIDUAL),
                          L(PT_LAYER_LAYERNORM), linear(VOCAB),        L(PT_LAYER_SOFTMAX_XENT)};
    l[0].vocab = VOCAB;
    l[0].dim = DIM;
    l[0].positional = 1;
    l[1].body = gpt_attn;
    l[1].body_count = 2;
    l[2].body = gpt_mlp;
    l[2].body_count = 4;
    l[5].classes = VOCAB;
    memcpy(gpt_layers, l, sizeof l);
    pt_model_spec s = {.name = "gpt",
                       .input_kind = PT_INPUT_TOKENS,
                       .input_rank = 1,
                       .input = {SEQ},
                       .layers = gpt_layers,
                       .layer_count = 6};
    return s;
}

typedef struct batch {
    int n;
    float *x;
    int32_t *labels;
} batch;

static batch make_batch(const pt_model_spec *spec, int n, uint64_t seed)
{
    batch b = {n, NULL, NULL};
    pt_rng rng = pt_rng_make(seed, 0);
    int64_t per = 1;
    for (int i = 0; i < spec->input_rank; i++)
        per *= spec->input[i];
    const pt_layer_spec *last = &spec->layers[spec->layer_count - 1];
    int64_t nlab = spec->input_kind == PT_INPUT_TOKENS ? per : 1;
    b.x = malloc((size_t)(n * per) * sizeof *b.x);
    b.labels = malloc((size_t)(n * nlab) * sizeof *b.labels);
    for (int64_t i = 0; i < n * per; i++)
        b.x[i] = spec->input_kind == PT_INPUT_TOKENS
                     ? (float)pt_rng_below(&rng, (uint64_t)spec->layers[0].vocab)
                     : (float)pt_rng_uniform_range(&rng, -1, 1);
    for (int64_t i = 0; i < n * nlab; i++)
        b.labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)last->classes);
    return b;
}

static void free_batch(batch *b)
{
    free(b->x);
    free(b->labels);
}

static pt_net *make_net(const pt_model_spec *spec, int first, int last, int max_batch, int slots,
                        int recompute)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = first;
    cfg.last = last;
    cfg.max_batch = max_batch;
    cfg.max_slots = slots;
    cfg.recompute = recompute;
    cfg.seed = 42;
    pt_net *net = NULL;
    pt_error err = {0};
    if (pt_net_create(spec, &cfg, &net, &err) < 0)
        fprintf(stderr, "pt_net_create: %s\n", err.msg);
    return net;
}

static double max_rel_diff(const float *a, const float *b, int64_t n)
{
    double diff = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), m = fabs(a[i]) > fabs(b[i]) ? fabs(a[i]) : fabs(b[i]);
        diff = d > diff ? d : diff;
        mag = m > mag ? m : mag;
    }
    return mag > 0 ? diff / mag : diff;
}

/* Whole model vs stages [0,k) + [k,n) for every k: same initial weights,
 * bitwise the same output, loss, parameter gradients and input gradient. */
static void check_split(pt_model_spec spec, int check_dx)
{
    int nl = spec.layer_count;
    batch b = make_batch(&spec, 5, 3);
    pt_net *full = make_net(&spec, 0, nl, 8, 1, 0);
    REQUIRE(full);
    int64_t in = b.n * pt_net_in_elems(full), np = pt_net_param_count(full);
    const float *y_full;
    double loss_full;
    float *dx_full = malloc((size_t)in * sizeof *dx_full);
    REQUIRE(pt_net_forward(full, 0, NULL, b.x, b.n, b.labels, &y_full, &loss_full) == 0);
    int64_t out = b.n * pt_net_out_elems(full);
    float *probs = malloc((size_t)out * sizeof *probs);
    memcpy(probs, y_full, (size_t)out * sizeof *probs);
    REQUIRE(pt_net_backward(full, 0, NULL, NULL, NULL, dx_full) == 0);

    for (int k = 1; k < nl; k++) {
        pt_net *a = make_net(&spec, 0, k, 8, 1, 0), *c = make_net(&spec, k, nl, 8, 1, 0);
        REQUIRE(a && c);
        CHECK(!pt_net_has_loss(a) && pt_net_has_loss(c));
        CHECK(pt_net_out_elems(a) == pt_net_in_elems(c));
        CHECK(pt_net_param_count(a) + pt_net_param_count(c) == np);
        int64_t off_c, cnt;
        REQUIRE(pt_net_layer_range(full, k, &off_c, &cnt) == 0);
        CHECK(memcmp(pt_net_params(a), pt_net_params(full),
                     (size_t)pt_net_param_count(a) * sizeof(float)) == 0);
        CHECK_MSG(memcmp(pt_net_params(c), pt_net_params(full) + off_c,
                         (size_t)pt_net_param_count(c) * sizeof(float)) == 0,
                  "%s: stage [%d,%d) initial weights differ", spec.name, k, nl);

        const float *ya, *yc;
        double loss_c;
        REQUIRE(pt_net_forward(a, 0, NULL, b.x, b.n, NULL, &ya, NULL) == 0);
        REQUIRE(pt_net_forward(c, 0, NULL, ya, b.n, b.labels, &yc, &loss_c) == 0);
        CHECK_MSG(loss_c == loss_full, "%s k=%d: loss %.9g vs %.9g", spec.name, k, loss_c,
                  loss_full);
        CHECK(memcmp(yc, probs, (size_t)out * sizeof *yc) == 0);
        int64_t mid = b.n * pt_net_in_elems(c);
        float *g_mid = malloc((size_t)mid * sizeof *g_mid);
        float *dx = malloc((size_t)in * sizeof *dx);
        REQUIRE(pt_net_backward(c, 0, NULL, NULL, NULL, g_mid) == 0);
        REQUIRE(pt_net_backward(a, 0, NULL, NULL, g_mid, dx) == 0);
        CHECK_MSG(memcmp(pt_net_grads(a), pt_net_grads(full),
                         (size_t)pt_net_param_count(a) * sizeof(float)) == 0,
                  "%s k=%d: stage 0 gradients differ", spec.name, k);
        CHECK_MSG(memcmp(pt_net_grads(c), pt_net_grads(full) + off_c,
                         (size_t)pt_net_param_count(c) * sizeof(float)) == 0,
                  "%s k=%d: stage 1 gradients differ", spec.name, k);
        if (check_dx)
            CHECK(memcmp(dx, dx_full, (size_t)in * sizeof *dx) == 0);
        free(g_mid);
        free(dx);
        pt_net_destroy(&a);
        pt_net_destroy(&c);
    }
    free(probs);
    free(dx_full);
    pt_net_destroy(&full);
    free_batch(&b);
}

static void test_split_mlp(void)
{
    check_split(mlp_spec(), 1);
}

static void test_split_gpt(void)
{
    check_split(gpt_spec(), 1);
}

/* Micro-batches 4+4 with loss_scale 1/8 accumulate the gradient of one batch
 * of 8 (mean loss), and their losses sum to its loss. Also with recompute. */
static void check_accumulation(pt_model_spec spec, int recompute)
{
    batch b = make_batch(&spec, 8, 9);
    pt_net *one = make_net(&spec, 0, spec.layer_count, 8, 1, 0);
    pt_net *two = make_net(&spec, 0, spec.layer_count, 4, 2, recompute);
    REQUIRE(one && two);
    double loss8, loss_a, loss_b;
    REQUIRE(pt_net_forward(one, 0, NULL, b.x, 8, b.labels, NULL, &loss8) == 0);
    REQUIRE(pt_net_backward(one, 0, NULL, NULL, NULL, NULL) == 0);

    pt_net_set_loss_scale(two, pt_net_loss_scale_for(two, 8));
    int64_t in4 = 4 * pt_net_in_elems(two), lab4 = 4 * pt_net_label_count(two);
    REQUIRE(pt_net_forward(two, 0, NULL, b.x, 4, b.labels, NULL, &loss_a) == 0);
    REQUIRE(pt_net_forward(two, 1, NULL, b.x + in4, 4, b.labels + lab4, NULL, &loss_b) == 0);
    REQUIRE(pt_net_backward(two, 1, NULL, NULL, NULL, NULL) == 0);
    REQUIRE(pt_net_backward(two, 0, NULL, NULL, NULL, NULL) == 0);
    CHECK_NEAR(loss_a + loss_b, loss8, ACCUM_TOL * fabs(loss8));
    double rel = max_rel_diff(pt_net_grads(two), pt_net_grads(one), pt_net_param_count(one));
    CHECK_MSG(rel < ACCUM_TOL, "%s recompute=%d: 4+4 vs 8 gradient rel diff %.3g", spec.name,
              recompute, rel);
    /* and the check can fail: one micro-batch alone is not the whole */
    pt_net_zero_grads(two);
    REQUIRE(pt_net_forward(two, 0, NULL, b.x, 4, b.labels, NULL, NULL) == 0);
    REQUIRE(pt_net_backward(two, 0, NULL, NULL, NULL, NULL) == 0);
    CHECK(max_rel_diff(pt_net_grads(two), pt_net_grads(one), pt_net_param_count(one)) > 1e-2);
    pt_net_destroy(&one);
    pt_net_destroy(&two);
    free_batch(&b);
}

/* pt_net_backward_hooked calls the hook once per top-level layer, last layer
 * first, with global indices, when that layer's gradient is final and the
 * layers below have not run yet (what a bucket all-reduce relies on). */
typedef struct hook_rec {
    pt_net *net;
    int n, order[64];
    float *snap;    /* each layer's gradient slice at its hook */
    int below_zero; /* every earlier layer's gradient still zero at each hook */
} hook_rec;

static void record_hook(void *user, int layer)
{
    hook_rec *h = user;
    h->order[h->n++] = layer;
    int64_t off, count;
    REQUIRE(pt_net_layer_range(h->net, layer, &off, &count) == 0);
    const float *g = pt_net_grads(h->net);
    memcpy(h->snap + off, g + off, (size_t)count * sizeof(float));
    for (int64_t i = 0; i < off; i++)
        if (g[i] != 0.0f)
            h->below_zero = 0;
}

static void test_backward_hook(void)
{
    pt_model_spec spec = mlp_spec();
    int nl = spec.layer_count, first = 2;
    batch b = make_batch(&spec, 4, 7);
    pt_net *net = make_net(&spec, first, nl, 8, 1, 0);
    REQUIRE(net);
    int64_t np = pt_net_param_count(net);
    hook_rec h = {.net = net, .snap = calloc((size_t)np, sizeof(float)), .below_zero = 1};
    int64_t in = b.n * pt_net_in_elems(net);
    float *x = malloc((size_t)in * sizeof *x);
    for (int64_t i = 0; i < in; i++)
        x[i] = (float)((i % 7) - 3) * 0.25f;
    pt_net_zero_grads(net);
    REQUIRE(pt_net_forward(net, 0, NULL, x, b.n, b.labels, NULL, NULL) == 0);
    REQUIRE(pt_net_backward_hooked(net, 0, NULL, NULL, NULL, NULL, record_hook, &h) == 0);
    CHECK(h.n == nl - first);
    for (int k = 0; k < h.n; k++)
        CHECK_MSG(h.order[k] == nl - 1 - k, "hook %d: layer %d, want %d", k, h.order[k],
                  nl - 1 - k);
    CHECK(memcmp(h.snap, pt_net_grads(net), (size_t)np * sizeof(float)) == 0);
    CHECK(h.below_zero);
    double mag = 0;
    for (int64_t i = 0; i < np; i++)
        mag += fabs(pt_net_grads(net)[i]);
    CHECK(mag > 0); /* there were gradients to see */
    free(h.snap);
    free(x);
    pt_net_destroy(&net);
    free_batch(&b);
}

static void test_accumulation(void)
{
    check_accumulation(mlp_spec(), 0);
    check_accumulation(gpt_spec(), 0);
    check_accumulation(gpt_spec(), 1);
}

/* Several slots in flight, each with its own weight version, give what the
 * same micro-batches give one at a time: F0 F1 F2 B1 B0 B2 == (F0 B0)(F1 B1)(F2 B2). */
static void check_slots(pt_model_spec spec, int recompute)
{
    enum { SLOTS = 3, MB = 3 };
    batch b[SLOTS];
    pt_net *net = make_net(&spec, 0, spec.layer_count, MB, SLOTS, recompute);
    REQUIRE(net);
    int64_t np = pt_net_param_count(net), out = MB * pt_net_out_elems(net);
    float *versions[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        b[s] = make_batch(&spec, MB, 100 + s);
        versions[s] = pt_net_version_new(net, PT_MEM_STASH, NULL);
        REQUIRE(versions[s]);
        for (int64_t i = 0; i < np; i++) /* CPU backend: versions are host memory */
            versions[s][i] += 0.01f * s * (float)((i % 7) - 3);
    }
    /* one at a time */
    float *ref_grads = malloc((size_t)np * sizeof *ref_grads);
    float *ref_out[SLOTS];
    double ref_loss[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        const float *y;
        REQUIRE(pt_net_forward(net, 0, versions[s], b[s].x, MB, b[s].labels, &y, &ref_loss[s]) ==
                0);
        ref_out[s] = malloc((size_t)out * sizeof(float));
        memcpy(ref_out[s], y, (size_t)out * sizeof(float));
        REQUIRE(pt_net_backward(net, 0, NULL, NULL, NULL, NULL) == 0);
    }
    memcpy(ref_grads, pt_net_grads(net), (size_t)np * sizeof *ref_grads);
    /* interleaved */
    pt_net_zero_grads(net);
    const float *y[SLOTS];
    double loss[SLOTS];
    for (int s = 0; s < SLOTS; s++)
        REQUIRE(pt_net_forward(net, s, versions[s], b[s].x, MB, b[s].labels, &y[s], &loss[s]) == 0);
    for (int s = 0; s < SLOTS; s++) {
        CHECK(pt_net_slot_busy(net, s));
        CHECK(loss[s] == ref_loss[s]);
        CHECK_MSG(memcmp(y[s], ref_out[s], (size_t)out * sizeof(float)) == 0,
                  "%s: slot %d output clobbered", spec.name, s);
    }
    const int order[SLOTS] = {1, 0, 2};
    for (int i = 0; i < SLOTS; i++)
        REQUIRE(pt_net_backward(net, order[i], NULL, NULL, NULL, NULL) == 0);
    double rel = max_rel_diff(pt_net_grads(net), ref_grads, np);
    CHECK_MSG(rel < ACCUM_TOL, "%s recompute=%d: interleaved slots gradient rel diff %.3g",
              spec.name, recompute, rel);
    for (int s = 0; s < SLOTS; s++) {
        CHECK(!pt_net_slot_busy(net, s));
        free(ref_out[s]);
        pt_net_version_free(net, &versions[s]);
        CHECK(versions[s] == NULL);
        free_batch(&b[s]);
    }
    free(ref_grads);
    pt_net_destroy(&net);
}

static void test_slots(void)
{
    check_slots(mlp_spec(), 0);
    check_slots(gpt_spec(), 0);
    check_slots(gpt_spec(), 1);
}

/* Recompute gives bitwise the same gradients and holds less per slot. */
static void test_recompute(void)
{
    pt_model_spec spec = gpt_spec();
    batch b = make_batch(&spec, 4, 17);
    pt_net *keep = make_net(&spec, 0, 6, 4, 2, 0), *re = make_net(&spec, 0, 6, 4, 2, 1);
    REQUIRE(keep && re);
    float *dx_keep = malloc(4 * SEQ * sizeof(float)), *dx_re = malloc(4 * SEQ * sizeof(float));
    REQUIRE(pt_net_forward(keep, 1, NULL, b.x, 4, b.labels, NULL, NULL) == 0);
    REQUIRE(pt_net_backward(keep, 1, NULL, NULL, NULL, dx_keep) == 0);
    REQUIRE(pt_net_forward(re, 1, NULL, b.x, 4, b.labels, NULL, NULL) == 0);
    REQUIRE(pt_net_backward(re, 1, NULL, NULL, NULL, dx_re) == 0);
    CHECK(memcmp(pt_net_grads(keep), pt_net_grads(re),
                 (size_t)pt_net_param_count(re) * sizeof(float)) == 0);
    CHECK(pt_net_slot_bytes(re) < pt_net_slot_bytes(keep) / 4);
    free(dx_keep);
    free(dx_re);
    pt_net_destroy(&keep);
    pt_net_destroy(&re);
    free_batch(&b);
}

/* The arena's ACTS figure is the activation memory in flight: its peak grows
 * by one slot block per extra micro-batch in flight, it falls back after the
 * backwards, and a second iteration makes no backend allocation. */
static void test_memory(void)
{
    pt_model_spec spec = mlp_spec();
    enum { SLOTS = 4 };
    batch b = make_batch(&spec, 8, 1);
    pt_net *net = make_net(&spec, 0, spec.layer_count, 8, SLOTS, 0);
    REQUIRE(net);
    pt_arena *arena = pt_net_arena(net);
    pt_mem_stats st;
    pt_arena_stats(arena, &st);
    int64_t base = st.current[PT_MEM_ACTS];
    int64_t slot_bytes = pt_net_slot_bytes(net);
    CHECK(st.current[PT_MEM_WEIGHTS] == pt_net_param_count(net) * 4);
    CHECK(st.current[PT_MEM_GRADS] == pt_net_param_count(net) * 4);
    CHECK(slot_bytes > 0);
    for (int iter = 0; iter < 2; iter++) {
        pt_arena_reset_peaks(arena);
        int64_t allocs_before = st.backend_allocs;
        for (int s = 0; s < SLOTS; s++) {
            REQUIRE(pt_net_forward(net, s, NULL, b.x, 8, b.labels, NULL, NULL) == 0);
            pt_arena_stats(arena, &st);
            CHECK_MSG(st.peak[PT_MEM_ACTS] == base + (s + 1) * slot_bytes,
                      "%d in flight: peak acts %lld, expected %lld", s + 1,
                      (long long)st.peak[PT_MEM_ACTS], (long long)(base + (s + 1) * slot_bytes));
        }
        for (int s = 0; s < SLOTS; s++)
            REQUIRE(pt_net_backward(net, s, NULL, NULL, NULL, NULL) == 0);
        pt_arena_stats(arena, &st);
        CHECK(st.current[PT_MEM_ACTS] == base);
        CHECK(st.peak[PT_MEM_ACTS] == base + SLOTS * slot_bytes);
        if (iter == 1)
            CHECK_MSG(st.backend_allocs == allocs_before,
                      "steady state allocated: %lld backend allocations",
                      (long long)(st.backend_allocs - allocs_before));
    }
    /* 1F1B-like: never more than 2 in flight -> the peak is 2 slots */
    pt_arena_reset_peaks(arena);
    REQUIRE(pt_net_forward(net, 0, NULL, b.x, 8, b.labels, NULL, NULL) == 0);
    for (int s = 1; s < SLOTS; s++) {
        REQUIRE(pt_net_forward(net, s, NULL, b.x, 8, b.labels, NULL, NULL) == 0);
        REQUIRE(pt_net_backward(net, s - 1, NULL, NULL, NULL, NULL) == 0);
    }
    REQUIRE(pt_net_backward(net, SLOTS - 1, NULL, NULL, NULL, NULL) == 0);
    pt_arena_stats(arena, &st);
    CHECK(st.peak[PT_MEM_ACTS] == base + 2 * slot_bytes);
    /* Stash versions are counted under STASH */
    float *v = pt_net_version_new(net, PT_MEM_STASH, NULL);
    pt_arena_stats(arena, &st);
    CHECK(st.current[PT_MEM_STASH] == pt_net_param_count(net) * 4);
    pt_net_version_free(net, &v);
    pt_arena_stats(arena, &st);
    CHECK(st.current[PT_MEM_STASH] == 0);
    pt_net_destroy(&net);
    free_batch(&b);
}

/* Calls out of order or with wrong arguments fail with the documented code
 * and change nothing. */
static void test_contract_errors(void)
{
    pt_model_spec spec = mlp_spec();
    batch b = make_batch(&spec, 4, 2);
    pt_net *net = make_net(&spec, 0, 7, 4, 2, 0);
    pt_net *head = make_net(&spec, 0, 3, 4, 1, 0);
    REQUIRE(net && head);
    float dy[4 * 16];
    memset(dy, 0, sizeof dy);
    CHECK(pt_net_backward(net, 0, NULL, NULL, NULL, NULL) == PT_ESTATE);
    CHECK(pt_net_forward(net, 2, NULL, b.x, 4, b.labels, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_forward(net, 0, NULL, b.x, 5, b.labels, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_forward(net, 0, NULL, b.x, 0, b.labels, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_forward(net, 0, NULL, b.x, 4, NULL, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_forward(head, 0, NULL, b.x, 4, b.labels, NULL, NULL) == PT_EINVAL);
    REQUIRE(pt_net_forward(net, 0, NULL, b.x, 4, b.labels, NULL, NULL) == 0);
    CHECK(pt_net_forward(net, 0, NULL, b.x, 4, b.labels, NULL, NULL) == PT_ESTATE);
    CHECK(pt_net_backward(net, 0, NULL, NULL, dy, NULL) == PT_EINVAL);
    CHECK(pt_net_slot_busy(net, 0));
    CHECK(pt_net_release(net, 0) == 0);
    CHECK(!pt_net_slot_busy(net, 0));
    REQUIRE(pt_net_forward(head, 0, NULL, b.x, 4, NULL, NULL, NULL) == 0);
    CHECK(pt_net_backward(head, 0, NULL, NULL, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_backward(head, 0, NULL, NULL, dy, NULL) == 0);

    pt_net_config cfg = pt_net_config_default(&spec);
    pt_net *bad = NULL;
    pt_error err = {0};
    cfg.first = 4;
    cfg.last = 4;
    CHECK(pt_net_create(&spec, &cfg, &bad, &err) == PT_EINVAL && !bad);
    CHECK_STR_CONTAINS(err.msg, "[4,4)");
    cfg.first = 0;
    cfg.last = 8;
    CHECK(pt_net_create(&spec, &cfg, &bad, &err) == PT_EINVAL && !bad);
    cfg.last = 7;
    cfg.max_batch = 0;
    CHECK(pt_net_create(&spec, &cfg, &bad, &err) == PT_EINVAL && !bad);
    CHECK_STR_CONTAINS(err.msg, "max_batch");

    int64_t off, cnt;
    CHECK(pt_net_layer_range(head, 3, &off, &cnt) == PT_ERANGE);
    CHECK(pt_net_layer_range(net, 2, &off, &cnt) == 0 && off == 12 * 16 + 16 &&
          cnt == 16 * 16 + 16);
    CHECK(pt_net_layer_range(net, 3, &off, &cnt) == 0 && cnt == 0);
    int64_t ein, eout;
    CHECK(pt_net_layer_elems(net, 0, &ein, &eout) == 0 && ein == 12 && eout == 16);
    CHECK(pt_net_layer_elems(net, 4, &ein, &eout) == 0 && ein == 16 && eout == 5);
    CHECK(pt_net_layer_elems(head, 3, &ein, &eout) == PT_ERANGE);
    pt_net_destroy(&net);
    pt_net_destroy(&head);
    free_batch(&b);
}

/* Per-layer get/set round-trips; setting changes what forward computes;
 * count_correct agrees with an argmax done here. */
static void test_layer_io(void)
{
    pt_model_spec spec = mlp_spec();
    batch b = make_batch(&spec, 6, 4);
    pt_net *net = make_net(&spec, 0, 7, 6, 1, 0);
    REQUIRE(net);
    int64_t off, cnt;
    REQUIRE(pt_net_layer_range(net, 4, &off, &cnt) == 0);
    float *host = malloc((size_t)cnt * sizeof *host);
    CHECK(pt_net_get_layer(net, 4, NULL, host, cnt - 1) == PT_EINVAL);
    REQUIRE(pt_net_get_layer(net, 4, NULL, host, cnt) == 0);
    CHECK(memcmp(host, pt_net_params(net) + off, (size_t)cnt * sizeof *host) == 0);
    /* zero the last linear: every probability becomes 1/5 */
    memset(host, 0, (size_t)cnt * sizeof *host);
    REQUIRE(pt_net_set_layer(net, 4, NULL, host, cnt) == 0);
    const float *y;
    double loss;
    REQUIRE(pt_net_forward(net, 0, NULL, b.x, 6, b.labels, &y, &loss) == 0);
    for (int i = 0; i < 6 * 5; i++)
        CHECK_NEAR(y[i], 0.2, 1e-6);
    CHECK_NEAR(loss, log(5.0), 1e-6);
    pt_net_release(net, 0);
    CHECK(pt_net_init_params(net, NULL) == 0);
    REQUIRE(pt_net_forward(net, 0, NULL, b.x, 6, b.labels, &y, &loss) == 0);
    int64_t correct = -1, rows = -1, mine = 0;
    REQUIRE(pt_net_count_correct(net, 0, &correct, &rows) == 0);
    for (int r = 0; r < 6; r++) {
        int best = 0;
        for (int c = 1; c < 5; c++)
            if (y[r * 5 + c] > y[r * 5 + best])
                best = c;
        mine += best == b.labels[r];
    }
    CHECK(rows == 6);
    CHECK(correct == mine);
    free(host);
    pt_net_destroy(&net);
    free_batch(&b);
}

/* Different seeds give different weights; the same seed the same. */
static void test_seed(void)
{
    pt_model_spec spec = gpt_spec();
    pt_net_config cfg = pt_net_config_default(&spec);
    pt_net *a = NULL, *b = NULL, *c = NULL;
    REQUIRE(pt_net_create(&spec, &cfg, &a, NULL) == 0);
    REQUIRE(pt_net_create(&spec, &cfg, &b, NULL) == 0);
    cfg.seed = 2;
    REQUIRE(pt_net_create(&spec, &cfg, &c, NULL) == 0);
    size_t bytes = (size_t)pt_net_param_count(a) * sizeof(float);
    CHECK(memcmp(pt_net_params(a), pt_net_params(b), bytes) == 0);
    CHECK(memcmp(pt_net_params(a), pt_net_params(c), bytes) != 0);
    pt_net_destroy(&a);
    pt_net_destroy(&b);
    pt_net_destroy(&c);
}

PT_TEST_MAIN({"split_mlp", test_split_mlp}, {"split_gpt", test_split_gpt},
             {"accumulation", test_accumulation}, {"slots", test_slots},
             {"recompute", test_recompute}, {"memory", test_memory},
             {"contract_errors", test_contract_errors}, {"layer_io", test_layer_io},
             {"seed", test_seed}, {"backward_hook", test_backward_hook})

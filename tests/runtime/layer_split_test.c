/* The split backward (B: pt_net_backward_input, W: pt_net_backward_weight,
 * the zero-bubble schedules' BWD_INPUT and BWD_WEIGHT) gives exactly the
 * unsplit backward's results, for every layer kind alone and inside an MLP
 * and a GPT-style stack: two nets with the same weights run the same
 * micro-batches, one with pt_net_backward, the other with B of both
 * micro-batches first and then their W (so the keep blocks of two in-flight
 * micro-batches live at once), and the input gradients and the accumulated
 * parameter gradients must be bit-identical (the halves run the same
 * operations on the same data in the same order). Each check also asserts
 * the gradients are not all zero, so a half that computes nothing fails.
 * Recompute mode: B then W right after give the same; W after another
 * forward is refused. Gathered W (pt_net_backward_weight_many, the
 * 1f1b-gw kind's one pass over all micro-batches): within 1e-5, since a
 * linear layer stacks the micro-batches' rows into one gemm (the same sums
 * in another order). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/layer.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/test.h"

#define SEED    5
#define SAMPLES 3
#define SLOTS   2
#define VOCAB   9
#define SEQ     4
#define DIM     8

static pt_layer_spec L(pt_layer_kind kind)
{
    pt_layer_spec s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    snprintf(s.name, sizeof s.name, "%s", pt_layer_ops_for(kind)->name);
    s.bias = 1;
    s.heads = 2;
    return s;
}

static pt_layer_spec linear(int out)
{
    pt_layer_spec s = L(PT_LAYER_LINEAR);
    s.out = out;
    return s;
}

/* Random inputs (token ids when the net starts with an embedding), labels
 * and output gradients for SLOTS micro-batches of SAMPLES. */
typedef struct data {
    float *x[SLOTS], *dy[SLOTS];
    int32_t *labels[SLOTS];
} data;

static void data_make(data *d, pt_net *net, int tokens, int classes, uint64_t seed)
{
    pt_rng rng = {seed, 0};
    int64_t in = pt_net_in_elems(net) * SAMPLES, out = pt_net_out_elems(net) * SAMPLES;
    int64_t lab = pt_net_label_count(net) * SAMPLES;
    for (int s = 0; s < SLOTS; s++) {
        d->x[s] = malloc((size_t)in * sizeof(float));
        d->dy[s] = malloc((size_t)out * sizeof(float));
        d->labels[s] = lab > 0 ? malloc((size_t)lab * sizeof(int32_t)) : NULL;
        for (int64_t i = 0; i < in; i++)
            d->x[s][i] = tokens ? (float)(pt_rng_next(&rng) % VOCAB)
                                : (float)pt_rng_uniform_range(&rng, -1, 1);
        for (int64_t i = 0; i < out; i++)
            d->dy[s][i] = (float)pt_rng_uniform_range(&rng, -1, 1);
        for (int64_t i = 0; i < lab; i++)
            d->labels[s][i] = (int32_t)(pt_rng_next(&rng) % (uint64_t)classes);
    }
}

static void data_free(data *d)
{
    for (int s = 0; s < SLOTS; s++) {
        free(d->x[s]);
        free(d->dy[s]);
        free(d->labels[s]);
    }
}

static pt_net *make_net(const pt_model_spec *spec, int first, int last, int recompute)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = first;
    cfg.last = last;
    cfg.max_batch = SAMPLES;
    cfg.max_slots = SLOTS;
    cfg.recompute = recompute;
    cfg.seed = SEED;
    pt_net *net = NULL;
    pt_error err = {0};
    int rc = pt_net_create(spec, &cfg, &net, &err);
    CHECK_MSG(rc == 0, "%s [%d,%d): %s", spec->name, first, last, err.msg);
    return net;
}

static int nonzero(const float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (a[i] != 0.0f)
            return 1;
    return 0;
}

/* Layers [first, last) of spec: unsplit vs split backward. `order` "BBWW"
 * runs both B then both W; "BWBW" each W right after its B (recompute). */
static void check_split(const char *what, const pt_model_spec *spec, int first, int last,
                        int recompute, const char *order)
{
    pt_net *a = make_net(spec, first, last, recompute), *b = make_net(spec, first, last, recompute);
    REQUIRE(a && b);
    int tokens = first == 0 && spec->input_kind == PT_INPUT_TOKENS;
    data d;
    data_make(&d, a, tokens, pt_net_classes(a), 77);
    int loss = pt_net_has_loss(a), want_dx = first > 0 || !tokens;
    int64_t in = pt_net_in_elems(a) * SAMPLES, P = pt_net_param_count(a);
    float *dxa[SLOTS], *dxb[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        dxa[s] = calloc((size_t)in, sizeof(float));
        dxb[s] = calloc((size_t)in, sizeof(float));
        CHECK(pt_net_forward(a, s, NULL, d.x[s], SAMPLES, d.labels[s], NULL, NULL) == 0);
        CHECK(pt_net_forward(b, s, NULL, d.x[s], SAMPLES, d.labels[s], NULL, NULL) == 0);
    }
    for (int s = 0; s < SLOTS; s++)
        CHECK(pt_net_backward(a, s, NULL, NULL, loss ? NULL : d.dy[s], want_dx ? dxa[s] : NULL) ==
              0);
    int nb = 0, nw = 0;
    for (const char *o = order; *o; o++) {
        if (*o == 'B') {
            /* dy is scribbled over right after B: W must not read the caller's copy */
            CHECK(pt_net_backward_input(b, nb, NULL, loss ? NULL : d.dy[nb],
                                        want_dx ? dxb[nb] : NULL) == 0);
            CHECK(pt_net_slot_split(b, nb) && pt_net_slot_busy(b, nb));
            CHECK(pt_net_backward(b, nb, NULL, NULL, loss ? NULL : d.dy[nb], NULL) == PT_ESTATE);
            if (!loss)
                memset(d.dy[nb], 0, (size_t)(pt_net_out_elems(b) * SAMPLES) * sizeof(float));
            nb++;
        } else if (*o == 'G') {
            /* gathered: the W of every micro-batch B has run, in one pass */
            int ids[SLOTS];
            for (int k = 0; k < nb - nw; k++)
                ids[k] = nw + k;
            CHECK(pt_net_backward_weight_many(b, ids, nb - nw, NULL, NULL, NULL) == 0);
            for (; nw < nb; nw++)
                CHECK(!pt_net_slot_busy(b, nw));
        } else {
            CHECK(pt_net_backward_weight(b, nw, NULL, NULL) == 0);
            CHECK(!pt_net_slot_busy(b, nw));
            nw++;
        }
    }
    if (strchr(order, 'G')) {
        /* a linear layer stacks the micro-batches' rows into one gemm: the
         * same sums in another order, so the rounding differs by a few ulps of
         * the terms summed (not of the result, which may cancel): the bound
         * is relative to the largest gradient */
        const float *ga = pt_net_grads(a), *gb = pt_net_grads(b);
        double worst = 0, scale = 0;
        for (int64_t i = 0; i < P; i++) {
            double e = fabs((double)ga[i] - gb[i]);
            worst = e > worst ? e : worst;
            scale = fabs((double)ga[i]) > scale ? fabs((double)ga[i]) : scale;
        }
        CHECK_MSG(worst <= 1e-5 * scale,
                  "%s: gathered W's gradients differ from the backward's by %.3g of the largest",
                  what, scale > 0 ? worst / scale : worst);
    } else {
        CHECK_MSG(memcmp(pt_net_grads(a), pt_net_grads(b), (size_t)P * sizeof(float)) == 0,
                  "%s: parameter gradients of B+W differ from the backward's", what);
    }
    CHECK_MSG(P == 0 || nonzero(pt_net_grads(b), P), "%s: no parameter gradient", what);
    for (int s = 0; s < SLOTS && want_dx; s++) {
        CHECK_MSG(memcmp(dxa[s], dxb[s], (size_t)in * sizeof(float)) == 0,
                  "%s: input gradient of micro-batch %d differs", what, s);
        CHECK_MSG(first == 0 && spec->layers[0].kind == PT_LAYER_EMBEDDING ? 1
                                                                           : nonzero(dxb[s], in),
                  "%s: no input gradient", what);
    }
    for (int s = 0; s < SLOTS; s++) {
        free(dxa[s]);
        free(dxb[s]);
    }
    data_free(&d);
    pt_net_destroy(&a);
    pt_net_destroy(&b);
}

/* A float model with every float layer kind: [3, 6] -> linear 6, relu,
 * layernorm, gelu, residual(layernorm, attention), linear 5, softmax_xent. */
static pt_layer_spec float_body[2], float_layers[7];
static pt_model_spec float_model(void)
{
    float_body[0] = L(PT_LAYER_LAYERNORM);
    float_body[1] = L(PT_LAYER_ATTENTION);
    pt_layer_spec l[7] = {linear(6),
                          L(PT_LAYER_RELU),
                          L(PT_LAYER_LAYERNORM),
                          L(PT_LAYER_GELU),
                          L(PT_LAYER_RESIDUAL),
                          linear(5),
                          L(PT_LAYER_SOFTMAX_XENT)};
    l[4].body = float_body;
    l[4].body_count = 2;
    l[6].classes = 5;
    memcpy(float_layers, l, sizeof l);
    pt_model_spec s = {.name = "float",
                       .input_kind = PT_INPUT_FLOAT,
                       .input_rank = 2,
                       .input = {3, 6},
                       .layers = float_layers,
                       .layer_count = 7};
    return s;
}

/* GPT-style: embedding, residual attention, residual MLP, norm, head, loss. */
static pt_layer_spec gpt_attn[2], gpt_mlp[4], gpt_layers[6];
static pt_model_spec gpt_model(void)
{
    gpt_attn[0] = L(PT_LAYER_LAYERNORM);
    gpt_attn[1] = L(PT_LAYER_ATTENTION);
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

/* Every layer kind alone (a net of that one layer: no loss but for
 * softmax_xent, dy given, dx asked for but of an embedding at the input). */
static void test_each_layer(void)
{
    pt_model_spec f = float_model(), g = gpt_model();
    int seen[PT_LAYER_KIND_COUNT] = {0};
    char what[96];
    for (int i = 0; i < f.layer_count; i++) {
        snprintf(what, sizeof what, "%s alone", f.layers[i].name);
        check_split(what, &f, i, i + 1, 0, "BBWW");
        seen[f.layers[i].kind] = 1;
    }
    for (int i = 0; i < g.layer_count; i++) {
        snprintf(what, sizeof what, "gpt %s alone", g.layers[i].name);
        check_split(what, &g, i, i + 1, 0, "BBWW");
        seen[g.layers[i].kind] = 1;
    }
    pt_layer_spec attn = L(PT_LAYER_ATTENTION);
    pt_model_spec a = {.name = "attention",
                       .input_kind = PT_INPUT_FLOAT,
                       .input_rank = 2,
                       .input = {SEQ, DIM},
                       .layers = &attn,
                       .layer_count = 1};
    check_split("attention alone", &a, 0, 1, 0, "BBWW");
    attn.fused = 1;
    check_split("fused attention alone", &a, 0, 1, 0, "BBWW");
    seen[PT_LAYER_ATTENTION] = 1;
    for (int k = 0; k < PT_LAYER_KIND_COUNT; k++)
        CHECK_MSG(seen[k], "layer kind %d (%s) not covered", k, pt_layer_ops_for(k)->name);
}

/* Chains: whole models, and inner stages (no loss, dy in, dx out, the last
 * layer's dy copied into the keep block). */
static void test_chains(void)
{
    pt_model_spec f = float_model(), g = gpt_model();
    check_split("float model", &f, 0, f.layer_count, 0, "BBWW");
    check_split("float model B W B W", &f, 0, f.layer_count, 0, "BWBW");
    check_split("float inner stage", &f, 1, 6, 0, "BBWW");
    check_split("gpt model", &g, 0, g.layer_count, 0, "BBWW");
    check_split("gpt inner stage", &g, 1, 5, 0, "BBWW");
    check_split("gpt first stage", &g, 0, 3, 0, "BBWW");
    check_split("float model gathered", &f, 0, f.layer_count, 0, "BBG");
    check_split("float inner stage gathered", &f, 1, 6, 0, "BBG");
    check_split("gpt model gathered", &g, 0, g.layer_count, 0, "BBG");
    check_split("gpt inner stage gathered", &g, 1, 5, 0, "BBG");
}

/* pt_net_backward_weight_many refuses what it cannot run and then touches
 * no slot. */
static void test_gathered_refusals(void)
{
    pt_model_spec f = float_model();
    pt_net *net = make_net(&f, 0, f.layer_count, 0), *rc = make_net(&f, 0, f.layer_count, 1);
    REQUIRE(net && rc);
    data d;
    data_make(&d, net, 0, pt_net_classes(net), 9);
    for (int s = 0; s < SLOTS; s++)
        CHECK(pt_net_forward(net, s, NULL, d.x[s], SAMPLES, d.labels[s], NULL, NULL) == 0);
    CHECK(pt_net_backward_input(net, 0, NULL, NULL, NULL) == 0);
    int both[2] = {0, 1}, twice[2] = {0, 0}, bad[1] = {SLOTS};
    CHECK(pt_net_backward_weight_many(net, both, 2, NULL, NULL, NULL) == PT_ESTATE); /* 1: no B */
    CHECK(pt_net_slot_split(net, 0) && pt_net_slot_busy(net, 0));
    CHECK(pt_net_backward_weight_many(net, twice, 2, NULL, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_backward_weight_many(net, bad, 1, NULL, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_backward_weight_many(net, both, 0, NULL, NULL, NULL) == PT_EINVAL);
    CHECK(pt_net_slot_split(net, 0) && pt_net_slot_busy(net, 0));
    CHECK(pt_net_backward_input(net, 1, NULL, NULL, NULL) == 0);
    CHECK(pt_net_backward_weight_many(net, both, 2, NULL, NULL, NULL) == 0);
    CHECK(!pt_net_slot_busy(net, 0) && !pt_net_slot_busy(net, 1));
    /* recompute mode keeps one micro-batch's B state: one slot at a time only */
    CHECK(pt_net_backward_weight_many(rc, both, 2, NULL, NULL, NULL) == PT_EINVAL);
    data_free(&d);
    pt_net_destroy(&net);
    pt_net_destroy(&rc);
}

static void test_recompute(void)
{
    pt_model_spec f = float_model(), g = gpt_model();
    check_split("float recompute", &f, 0, f.layer_count, 1, "BWBW");
    check_split("gpt inner recompute", &g, 1, 5, 1, "BWBW");
    /* W after another micro-batch's forward: the shared block no longer holds B's state */
    pt_net *net = make_net(&g, 1, 5, 1);
    REQUIRE(net);
    data d;
    data_make(&d, net, 0, 0, 3);
    float *dx = calloc((size_t)(pt_net_in_elems(net) * SAMPLES), sizeof(float));
    CHECK(pt_net_forward(net, 0, NULL, d.x[0], SAMPLES, NULL, NULL, NULL) == 0);
    CHECK(pt_net_backward_input(net, 0, NULL, d.dy[0], dx) == 0);
    CHECK(pt_net_backward_input(net, 0, NULL, d.dy[0], dx) == PT_ESTATE);
    CHECK(pt_net_forward(net, 1, NULL, d.x[1], SAMPLES, NULL, NULL, NULL) == 0);
    CHECK(pt_net_backward_weight(net, 0, NULL, NULL) == PT_ESTATE);
    CHECK(pt_net_slot_split(net, 0));
    CHECK(pt_net_backward_weight(net, 1, NULL, NULL) == PT_ESTATE); /* no B yet */
    free(dx);
    data_free(&d);
    pt_net_destroy(&net);
}

PT_TEST_MAIN({"each_layer", test_each_layer}, {"chains", test_chains},
             {"recompute", test_recompute}, {"gathered_refusals", test_gathered_refusals})

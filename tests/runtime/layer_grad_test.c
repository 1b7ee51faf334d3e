/* Every layer's backward (gradient of its input and of its parameters)
 * against central finite differences, alone and inside a GPT-style stack and
 * an MLP.
 *
 * Objective: L = sum_i y_i * R_i for a fixed random R (a net without loss),
 * or the net's own loss (softmax_xent last), accumulated in double. Numerical
 * derivative: (L(v + eps) - L(v - eps)) / (2 eps), eps = 1e-3.
 * Bound: err = max_i |a_i - b_i| / max(max_i (|a_i| + |b_i|), 1e-3) < 1e-2,
 * a normwise relative error (a: analytic, b: numerical). Each check also
 * asserts that a gradient perturbed by 5% of its largest entry fails the same
 * bound, so the check can fail. */
#include <stdint.h>

#include "runtime/layer.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/test.h"

#define FD_EPS           1e-3
#define GRAD_TOL         1e-3
#define GRAD_FLOOR       1e-3
#define PERTURB_FRACTION 0.05

typedef struct fixture {
    pt_model_spec spec;
    int n;
    float *x;        /* n * in_elems */
    int32_t *labels; /* n * label_count, when the net has a loss */
    float *r;        /* n * out_elems: objective weights without loss */
} fixture;

static double objective(pt_net *net, const float *params, const fixture *f)
{
    const float *y = NULL;
    double loss = 0.0;
    int rc = pt_net_forward(net, 0, params, f->x, f->n, f->labels, &y, &loss);
    if (rc < 0) {
        fprintf(stderr, "forward failed: %d\n", rc);
        return NAN;
    }
    double l = loss;
    if (!pt_net_has_loss(net)) {
        l = 0.0;
        for (int64_t i = 0; i < f->n * pt_net_out_elems(net); i++)
            l += (double)y[i] * f->r[i];
    }
    pt_net_release(net, 0);
    return l;
}

static double grad_error(const float *a, const double *b, int64_t n)
{
    double diff = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]), m = fabs(a[i]) + fabs(b[i]);
        diff = d > diff ? d : diff;
        mag = m > mag ? m : mag;
    }
    return diff / (mag > GRAD_FLOOR ? mag : GRAD_FLOOR);
}

/* Checks a's error against b, and that a perturbed copy of a is caught. */
static void check_grad(const char *what, const char *name, const float *a, const double *b,
                       int64_t n)
{
    double err = grad_error(a, b, n);
    if (getenv("PT_VERBOSE"))
        printf("  %s %s: error %.3g over %lld values\n", name, what, err, (long long)n);
    CHECK_MSG(err < GRAD_TOL, "%s: %s gradient error %.3g (bound %.0e)", name, what, err, GRAD_TOL);
    float *bad = malloc((size_t)n * sizeof *bad);
    memcpy(bad, a, (size_t)n * sizeof *bad);
    int64_t big = 0;
    for (int64_t i = 1; i < n; i++)
        if (fabsf(bad[i]) > fabsf(bad[big]))
            big = i;
    float amax = fabsf(bad[big]) > GRAD_FLOOR ? fabsf(bad[big]) : (float)GRAD_FLOOR;
    bad[big] += (float)(PERTURB_FRACTION * amax);
    double bad_err = grad_error(bad, b, n);
    CHECK_MSG(bad_err >= GRAD_TOL, "%s: perturbed %s gradient not detected (error %.3g)", name,
              what, bad_err);
    free(bad);
}

/* Runs the full check on f's model; check_input = 0 for token inputs (whose
 * gradient is defined as 0 and checked to be exactly that). */
static void check_model(fixture *f, int check_input)
{
    const char *name = f->spec.name;
    pt_net_config cfg = pt_net_config_default(&f->spec);
    cfg.max_batch = f->n;
    cfg.seed = 7;
    pt_net *net = NULL;
    pt_error err = {0};
    int rc = pt_net_create(&f->spec, &cfg, &net, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
    if (rc)
        return;
    int64_t in = f->n * pt_net_in_elems(net), out = f->n * pt_net_out_elems(net);
    int64_t np = pt_net_param_count(net);
    pt_rng rng = pt_rng_make(99, 1);
    if (!pt_net_has_loss(net)) {
        f->r = malloc((size_t)out * sizeof *f->r);
        for (int64_t i = 0; i < out; i++)
            f->r[i] = (float)pt_rng_uniform_range(&rng, -1, 1);
    }
    /* Parameters: the initialised ones, plus noise so that zero biases and
     * unit gains do not hide a wrong gradient. */
    float *params = malloc((size_t)(np ? np : 1) * sizeof *params);
    memcpy(params, pt_net_params(net), (size_t)np * sizeof *params);
    for (int64_t i = 0; i < np; i++)
        params[i] += (float)pt_rng_uniform_range(&rng, -0.1, 0.1);

    /* analytic */
    float *dx = malloc((size_t)in * sizeof *dx);
    float *dy = pt_net_has_loss(net) ? NULL : f->r;
    pt_net_zero_grads(net);
    REQUIRE(pt_net_forward(net, 0, params, f->x, f->n, f->labels, NULL, NULL) == 0);
    REQUIRE(pt_net_backward(net, 0, NULL, NULL, dy, dx) == 0);
    const float *grads = pt_net_grads(net);

    /* numerical, input */
    if (check_input) {
        double *num = malloc((size_t)in * sizeof *num);
        for (int64_t i = 0; i < in; i++) {
            float keep = f->x[i];
            f->x[i] = keep + (float)FD_EPS;
            double lp = objective(net, params, f);
            f->x[i] = keep - (float)FD_EPS;
            double lm = objective(net, params, f);
            f->x[i] = keep;
            num[i] = (lp - lm) / (2 * FD_EPS);
        }
        check_grad("input", name, dx, num, in);
        free(num);
    } else {
        int zero = 1;
        for (int64_t i = 0; i < in; i++)
            zero &= dx[i] == 0.0f;
        CHECK_MSG(zero, "%s: token input gradient is not zero", name);
    }
    /* numerical, parameters */
    if (np > 0) {
        double *num = malloc((size_t)np * sizeof *num);
        for (int64_t i = 0; i < np; i++) {
            float keep = params[i];
            params[i] = keep + (float)FD_EPS;
            double lp = objective(net, params, f);
            params[i] = keep - (float)FD_EPS;
            double lm = objective(net, params, f);
            params[i] = keep;
            num[i] = (lp - lm) / (2 * FD_EPS);
        }
        check_grad("parameter", name, grads, num, np);
        /* per top-level layer too, so a wrong small layer is not hidden by a big one */
        for (int l = 0; l < f->spec.layer_count; l++) {
            int64_t off, cnt;
            REQUIRE(pt_net_layer_range(net, l, &off, &cnt) == 0);
            if (cnt == 0)
                continue;
            double e = grad_error(grads + off, num + off, cnt);
            CHECK_MSG(e < GRAD_TOL, "%s: layer %d parameter gradient error %.3g", name, l, e);
        }
        free(num);
    }
    free(params);
    free(dx);
    free(f->r);
    f->r = NULL;
    pt_net_destroy(&net);
}

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

static void make_float_fixture(fixture *f, const char *name, pt_layer_spec *layers, int count,
                               int rank, const int *dims, int n, int classes)
{
    memset(f, 0, sizeof *f);
    snprintf(f->spec.name, sizeof f->spec.name, "%s", name);
    f->spec.input_kind = PT_INPUT_FLOAT;
    f->spec.input_rank = rank;
    int64_t per = 1;
    for (int i = 0; i < rank; i++) {
        f->spec.input[i] = dims[i];
        per *= dims[i];
    }
    f->spec.layers = layers;
    f->spec.layer_count = count;
    f->n = n;
    f->x = malloc((size_t)(n * per) * sizeof *f->x);
    pt_rng rng = pt_rng_make(5, 5);
    for (int64_t i = 0; i < n * per; i++) {
        /* |x| in [0.1, 1]: away from relu's kink */
        double v = pt_rng_uniform_range(&rng, 0.1, 1.0);
        f->x[i] = (float)(pt_rng_uniform(&rng) < 0.5 ? -v : v);
    }
    if (classes > 0) {
        int64_t rows = n * per / classes;
        f->labels = malloc((size_t)rows * sizeof *f->labels);
        for (int64_t i = 0; i < rows; i++)
            f->labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)classes);
    }
}

static void free_fixture(fixture *f)
{
    free(f->x);
    free(f->labels);
}

static void test_linear(void)
{
    pt_layer_spec layers[1] = {linear(4)};
    fixture f;
    make_float_fixture(&f, "linear", layers, 1, 1, (int[]){5}, 3, 0);
    check_model(&f, 1);
    free_fixture(&f);
    /* rank-2 input: the layer acts on each of the T rows */
    layers[0].bias = 0;
    make_float_fixture(&f, "linear-nobias-rank2", layers, 1, 2, (int[]){3, 5}, 2, 0);
    check_model(&f, 1);
    free_fixture(&f);
}

static void test_relu_gelu(void)
{
    pt_layer_spec layers[1] = {L(PT_LAYER_RELU)};
    fixture f;
    make_float_fixture(&f, "relu", layers, 1, 1, (int[]){7}, 3, 0);
    check_model(&f, 1);
    free_fixture(&f);
    layers[0] = L(PT_LAYER_GELU);
    make_float_fixture(&f, "gelu", layers, 1, 1, (int[]){7}, 3, 0);
    check_model(&f, 1);
    free_fixture(&f);
}

static void test_layernorm(void)
{
    pt_layer_spec layers[1] = {L(PT_LAYER_LAYERNORM)};
    layers[0].eps = 1e-5f;
    fixture f;
    make_float_fixture(&f, "layernorm", layers, 1, 2, (int[]){3, 6}, 2, 0);
    check_model(&f, 1);
    free_fixture(&f);
}

static void test_attention(void)
{
    pt_layer_spec layers[1] = {L(PT_LAYER_ATTENTION)};
    layers[0].heads = 2;
    fixture f;
    make_float_fixture(&f, "attention", layers, 1, 2, (int[]){4, 6}, 2, 0);
    check_model(&f, 1);
    free_fixture(&f);
}

/* The fused (tiled) attention's gradients against finite differences, on a
 * sequence longer than one tile (T = 37 > PT_ATTN_BR = 32: a partial tile). */
static void test_attention_fused(void)
{
    pt_layer_spec layers[1] = {L(PT_LAYER_ATTENTION)};
    layers[0].heads = 2;
    layers[0].fused = 1;
    fixture f;
    make_float_fixture(&f, "attention_fused", layers, 1, 2, (int[]){37, 6}, 2, 0);
    check_model(&f, 1);
    free_fixture(&f);
}

static void test_residual(void)
{
    pt_layer_spec body[4] = {L(PT_LAYER_LAYERNORM), linear(5), L(PT_LAYER_GELU), linear(6)};
    pt_layer_spec layers[1] = {L(PT_LAYER_RESIDUAL)};
    layers[0].body = body;
    layers[0].body_count = 4;
    fixture f;
    make_float_fixture(&f, "residual", layers, 1, 2, (int[]){3, 6}, 2, 0);
    check_model(&f, 1);
    free_fixture(&f);
}

static void test_softmax_xent(void)
{
    pt_layer_spec layers[1] = {L(PT_LAYER_SOFTMAX_XENT)};
    layers[0].classes = 5;
    fixture f;
    make_float_fixture(&f, "softmax_xent", layers, 1, 1, (int[]){5}, 4, 5);
    check_model(&f, 1);
    free_fixture(&f);
    /* per-token labels: [T, classes] per sample */
    make_float_fixture(&f, "softmax_xent-tokens", layers, 1, 2, (int[]){3, 5}, 2, 5);
    check_model(&f, 1);
    free_fixture(&f);
}

static void make_token_fixture(fixture *f, const char *name, pt_layer_spec *layers, int count,
                               int seq, int vocab, int n, int with_labels)
{
    memset(f, 0, sizeof *f);
    snprintf(f->spec.name, sizeof f->spec.name, "%s", name);
    f->spec.input_kind = PT_INPUT_TOKENS;
    f->spec.input_rank = 1;
    f->spec.input[0] = seq;
    f->spec.layers = layers;
    f->spec.layer_count = count;
    f->n = n;
    f->x = malloc((size_t)(n * seq) * sizeof *f->x);
    pt_rng rng = pt_rng_make(6, 6);
    for (int i = 0; i < n * seq; i++)
        f->x[i] = (float)pt_rng_below(&rng, (uint64_t)vocab);
    if (with_labels) {
        f->labels = malloc((size_t)(n * seq) * sizeof *f->labels);
        for (int i = 0; i < n * seq; i++)
            f->labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)vocab);
    }
}

static void test_embedding(void)
{
    pt_layer_spec layers[1] = {L(PT_LAYER_EMBEDDING)};
    layers[0].vocab = 7;
    layers[0].dim = 4;
    layers[0].positional = 1;
    fixture f;
    make_token_fixture(&f, "embedding", layers, 1, 5, 7, 3, 0);
    check_model(&f, 0);
    free_fixture(&f);
    layers[0].positional = 0;
    make_token_fixture(&f, "embedding-nopos", layers, 1, 5, 7, 3, 0);
    check_model(&f, 0);
    free_fixture(&f);
}

/* A token id outside [0, vocab) or a label outside [0, classes) is an error,
 * not a wild read. */
static void test_bad_ids(void)
{
    pt_layer_spec layers[2] = {L(PT_LAYER_EMBEDDING), L(PT_LAYER_SOFTMAX_XENT)};
    layers[0].vocab = 4;
    layers[0].dim = 4;
    layers[1].classes = 4;
    fixture f;
    make_token_fixture(&f, "bad-ids", layers, 2, 3, 4, 2, 1);
    pt_net_config cfg = pt_net_config_default(&f.spec);
    cfg.max_batch = 2;
    pt_net *net = NULL;
    REQUIRE(pt_net_create(&f.spec, &cfg, &net, NULL) == 0);
    CHECK(pt_net_forward(net, 0, NULL, f.x, 2, f.labels, NULL, NULL) == 0);
    CHECK(pt_net_release(net, 0) == 0);
    f.x[3] = 4.0f;
    CHECK(pt_net_forward(net, 0, NULL, f.x, 2, f.labels, NULL, NULL) == PT_ERANGE);
    CHECK(!pt_net_slot_busy(net, 0));
    f.x[3] = 1.5f;
    CHECK(pt_net_forward(net, 0, NULL, f.x, 2, f.labels, NULL, NULL) == PT_ERANGE);
    f.x[3] = 1.0f;
    f.labels[5] = -1;
    CHECK(pt_net_forward(net, 0, NULL, f.x, 2, f.labels, NULL, NULL) == PT_ERANGE);
    pt_net_destroy(&net);
    free_fixture(&f);
}

static void test_gpt_stack(void)
{
    enum { VOCAB = 11, DIM = 8, SEQ = 5 };
    pt_layer_spec attn_body[2] = {L(PT_LAYER_LAYERNORM), L(PT_LAYER_ATTENTION)};
    attn_body[1].heads = 2;
    pt_layer_spec mlp_body[4] = {L(PT_LAYER_LAYERNORM), linear(16), L(PT_LAYER_GELU), linear(DIM)};
    pt_layer_spec layers[6] = {L(PT_LAYER_EMBEDDING), L(PT_LAYER_RESIDUAL),
                               L(PT_LAYER_RESIDUAL),  L(PT_LAYER_LAYERNORM),
                               linear(VOCAB),         L(PT_LAYER_SOFTMAX_XENT)};
    layers[0].vocab = VOCAB;
    layers[0].dim = DIM;
    layers[0].positional = 1;
    layers[1].body = attn_body;
    layers[1].body_count = 2;
    layers[2].body = mlp_body;
    layers[2].body_count = 4;
    layers[5].classes = VOCAB;
    fixture f;
    make_token_fixture(&f, "gpt", layers, 6, SEQ, VOCAB, 2, 1);
    check_model(&f, 0);
    free_fixture(&f);
}

static void test_mlp(void)
{
    pt_layer_spec layers[6] = {linear(10),       L(PT_LAYER_RELU), linear(8),
                               L(PT_LAYER_RELU), linear(4),        L(PT_LAYER_SOFTMAX_XENT)};
    layers[5].classes = 4;
    fixture f;
    make_float_fixture(&f, "mlp", layers, 6, 1, (int[]){12}, 3, 4);
    check_model(&f, 1);
    free_fixture(&f);
}

/* Shape errors name the layer and the reason. */
static void test_shape_errors(void)
{
    pt_layer_spec layers[2] = {L(PT_LAYER_ATTENTION), L(PT_LAYER_SOFTMAX_XENT)};
    layers[0].heads = 4;
    layers[1].classes = 6;
    snprintf(layers[0].name, sizeof layers[0].name, "attn0");
    pt_model_spec spec = {
        .name = "bad", .input_rank = 2, .input = {3, 6}, .layers = layers, .layer_count = 2};
    pt_net_config cfg = pt_net_config_default(&spec);
    pt_net *net = NULL;
    pt_error err = {0};
    CHECK(pt_net_create(&spec, &cfg, &net, &err) == PT_EINVAL);
    CHECK(net == NULL);
    CHECK_STR_CONTAINS(err.msg, "layers[0] (attn0)");
    CHECK_STR_CONTAINS(err.msg, "not divisible by heads 4");
    layers[0].heads = 2;
    layers[1].classes = 5;
    CHECK(pt_net_create(&spec, &cfg, &net, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "classes: 5 does not match");
}

PT_TEST_MAIN({"linear", test_linear}, {"relu_gelu", test_relu_gelu}, {"layernorm", test_layernorm},
             {"attention", test_attention}, {"attention_fused", test_attention_fused},
             {"residual", test_residual}, {"softmax_xent", test_softmax_xent},
             {"embedding", test_embedding}, {"bad_ids", test_bad_ids},
             {"gpt_stack", test_gpt_stack}, {"mlp", test_mlp}, {"shape_errors", test_shape_errors})

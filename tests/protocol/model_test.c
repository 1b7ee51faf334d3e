/* Model spec: shape inference against figures computed by hand from the
 * layer formulas, round-trips, lookup by name, and the checks that need a
 * spec built by hand. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "protocol/model.h"
#include "tests/test.h"

static int chain_equal(const pt_layer_spec *a, const pt_layer_spec *b, int n)
{
    for (int i = 0; i < n; i++) {
        const pt_layer_spec *x = &a[i], *y = &b[i];
        if (x->kind != y->kind || strcmp(x->name, y->name) || x->out != y->out ||
            x->bias != y->bias || x->vocab != y->vocab || x->dim != y->dim ||
            x->positional != y->positional || x->heads != y->heads || x->fused != y->fused ||
            x->classes != y->classes || x->eps != y->eps || x->body_count != y->body_count)
            return 0;
        if (x->body_count && !chain_equal(x->body, y->body, x->body_count))
            return 0;
    }
    return 1;
}

static int spec_equal(const pt_model_spec *a, const pt_model_spec *b)
{
    if (strcmp(a->name, b->name) || a->input_kind != b->input_kind ||
        a->input_rank != b->input_rank || a->layer_count != b->layer_count)
        return 0;
    for (int i = 0; i < a->input_rank; i++)
        if (a->input[i] != b->input[i])
            return 0;
    return chain_equal(a->layers, b->layers, a->layer_count);
}

/* parse(to_json(m)) == m, and writing is a fixed point. */
static void check_round_trip(const pt_model_spec *m)
{
    char *json = pt_model_spec_to_json(m);
    REQUIRE(json != NULL);
    pt_model_spec *back = NULL;
    pt_error err = {0};
    int rc = pt_model_spec_parse(json, "round-trip", &back, &err);
    CHECK_MSG(rc == 0, "%s\n%s", err.msg, json);
    if (back) {
        CHECK(spec_equal(m, back));
        char *again = pt_model_spec_to_json(back);
        CHECK(again && !strcmp(json, again));
        free(again);
    }
    pt_model_spec_free(&back);
    free(json);
}

static pt_model_spec *find(const char *name)
{
    pt_model_spec *m = NULL;
    pt_error err = {0};
    int rc = pt_model_spec_find(name, &m, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return m;
}

static void test_fmnist_mlp_shapes(void)
{
    pt_model_spec *m = find("fmnist-mlp");
    REQUIRE(m != NULL);
    CHECK(!strcmp(m->name, "fmnist-mlp"));
    CHECK(m->input_kind == PT_INPUT_FLOAT && m->input_rank == 1 && m->input[0] == 784);
    CHECK(pt_model_spec_input_elems(m) == 784);
    REQUIRE(m->layer_count == 8);
    pt_layer_shape s[8];
    pt_error err = {0};
    REQUIRE(pt_model_spec_shapes(m, s, &err) == 0);
    const int widths[] = {1024, 1024, 1024, 1024, 1024, 1024, 10, 10};
    const int ins[] = {784, 1024, 1024, 1024, 1024, 1024, 1024, 10};
    int64_t total = 0;
    for (int i = 0; i < 8; i++) {
        CHECK(s[i].rank == 1 && s[i].dims[0] == widths[i] && s[i].out_elems == widths[i]);
        total += s[i].params;
        if (m->layers[i].kind == PT_LAYER_LINEAR) {
            CHECK(s[i].params == (int64_t)ins[i] * widths[i] + widths[i]);
            CHECK_NEAR(s[i].fwd_flops, 2.0 * ins[i] * widths[i], 0);
        } else {
            CHECK(s[i].params == 0);
        }
    }
    CHECK_NEAR(s[1].fwd_flops, 1024 * PT_FLOPS_RELU_PER_ELEM, 0);
    CHECK_NEAR(s[7].fwd_flops, 10 * PT_FLOPS_SOFTMAX_XENT_PER_ELEM, 0);
    /* 784*1024+1024 + 2*(1024*1024+1024) + 1024*10+10 */
    CHECK(total == 2913290);
    CHECK(!strcmp(m->layers[0].name, "linear0") && !strcmp(m->layers[1].name, "relu1") &&
          !strcmp(m->layers[7].name, "softmax_xent7"));
    pt_model_spec_free(&m);
    CHECK(m == NULL);
}

static void test_fmnist_mlp_deep(void)
{
    pt_model_spec *m = find("fmnist-mlp-deep");
    REQUIRE(m != NULL);
    REQUIRE(m->layer_count == 34);
    pt_layer_shape *s = calloc(34, sizeof *s);
    REQUIRE(s != NULL);
    CHECK(pt_model_spec_shapes(m, s, NULL) == 0);
    int64_t total = 0, linears = 0;
    for (int i = 0; i < 34; i++) {
        total += s[i].params;
        linears += m->layers[i].kind == PT_LAYER_LINEAR;
    }
    CHECK(linears == 17);
    CHECK(total == (784LL * 512 + 512) + 15 * (512LL * 512 + 512) + (512 * 10 + 10));
    CHECK(s[33].out_elems == 10);
    free(s);
    pt_model_spec_free(&m);
}

static void test_gpt_tiny_shapes(void)
{
    pt_model_spec *m = find("gpt-tiny");
    REQUIRE(m != NULL);
    CHECK(m->input_kind == PT_INPUT_TOKENS && m->input_rank == 1 && m->input[0] == 32);
    REQUIRE(m->layer_count == 8);
    pt_layer_shape s[8];
    pt_error err = {0};
    REQUIRE(pt_model_spec_shapes(m, s, &err) == 0);
    const double T = 32, D = 64, V = 256, H = 256;
    /* embedding: vocab*dim + T*dim (positional) */
    CHECK(m->layers[0].kind == PT_LAYER_EMBEDDING && m->layers[0].positional);
    CHECK(s[0].rank == 2 && s[0].dims[0] == 32 && s[0].dims[1] == 64);
    CHECK(s[0].params == 256 * 64 + 32 * 64);
    CHECK_NEAR(s[0].fwd_flops, T * D, 0);
    /* attention block: layernorm 2D + Wqkv D*3D + 3D + Wo D*D + D */
    int64_t attn_params = 2 * 64 + (64 * 192 + 192) + (64 * 64 + 64);
    double attn_flops = 8 * T * D + (2 * T * D * 3 * D + 2 * T * T * D * 2 + 2 * T * D * D) + T * D;
    /* MLP block: layernorm 2D + D*H + H + H*D + D */
    int64_t mlp_params = 2 * 64 + (64 * 256 + 256) + (256 * 64 + 64);
    double mlp_flops =
        8 * T * D + 2 * T * D * H + 8 * T * H + 2 * T * H * D + T * D /* skip addition */;
    for (int b = 0; b < 2; b++) {
        const pt_layer_shape *a = &s[1 + 2 * b], *p = &s[2 + 2 * b];
        CHECK(a->rank == 2 && a->dims[0] == 32 && a->dims[1] == 64);
        CHECK(p->rank == 2 && p->dims[0] == 32 && p->dims[1] == 64);
        CHECK(a->params == attn_params);
        CHECK(p->params == mlp_params);
        CHECK_NEAR(a->fwd_flops, attn_flops, 0);
        CHECK_NEAR(p->fwd_flops, mlp_flops, 0);
    }
    CHECK(s[5].params == 128);
    CHECK(s[6].params == 64 * 256 + 256 && s[6].dims[1] == 256);
    CHECK_NEAR(s[6].fwd_flops, 2 * T * D * V, 0);
    CHECK(s[7].out_elems == 32 * 256);
    int64_t total = 0;
    for (int i = 0; i < 8; i++)
        total += s[i].params;
    CHECK(total == 135168);
    CHECK(!strcmp(m->layers[1].name, "block0.attn"));
    pt_model_spec_free(&m);
}

/* The GPU-sized model: 24 blocks of width 2048, 16 heads, sequence 1024,
 * vocabulary 50304, parameters by the same per-layer formulas as gpt-tiny. */
static void test_gpt_1_3b_shapes(void)
{
    pt_model_spec *m = find("gpt-1.3b");
    REQUIRE(m != NULL);
    CHECK(m->input_kind == PT_INPUT_TOKENS && m->input_rank == 1 && m->input[0] == 1024);
    REQUIRE(m->layer_count == 52);
    pt_layer_shape *s = calloc(52, sizeof *s);
    REQUIRE(s);
    pt_error err = {0};
    REQUIRE(pt_model_spec_shapes(m, s, &err) == 0);
    const int64_t D = 2048, V = 50304, T = 1024, H = 4 * 2048;
    CHECK(s[0].params == V * D + T * D);
    int64_t attn = 2 * D + (D * 3 * D + 3 * D) + (D * D + D);
    int64_t mlp = 2 * D + (D * H + H) + (H * D + D);
    int64_t total = 0;
    for (int i = 0; i < 52; i++)
        total += s[i].params;
    for (int b = 0; b < 24; b++) {
        CHECK(m->layers[1 + 2 * b].body[1].heads == 16);
        CHECK(s[1 + 2 * b].params == attn && s[2 + 2 * b].params == mlp);
    }
    CHECK(s[50].params == D * V + V && s[51].out_elems == T * V);
    CHECK(total == s[0].params + 24 * (attn + mlp) + 2 * D + D * V + V);
    CHECK(total == 1416795264); /* 1.21e9 of it in the blocks: GPT-3 XL's "1.3B" */
    free(s);
    pt_model_spec_free(&m);
}

static void test_round_trip_shipped(void)
{
    const char *names[] = {"fmnist-mlp", "fmnist-mlp-deep", "gpt-tiny", "gpt-1.3b"};
    for (size_t i = 0; i < 4; i++) {
        pt_model_spec *m = find(names[i]);
        if (m)
            check_round_trip(m);
        pt_model_spec_free(&m);
    }
}

/* Non-default values of every optional field survive a round-trip. */
static void test_round_trip_options(void)
{
    const char *json = "{\"v\":1,\"name\":\"opts\",\"input\":{\"kind\":\"tokens\",\"shape\":[8]},"
                       "\"layers\":[{\"type\":\"embedding\",\"vocab\":50,\"dim\":12,"
                       "\"positional\":false,\"name\":\"tok\"},"
                       "{\"type\":\"residual\",\"body\":[{\"type\":\"layernorm\",\"eps\":1e-6},"
                       "{\"type\":\"residual\",\"body\":[{\"type\":\"linear\",\"out\":12,"
                       "\"bias\":false}]}]},"
                       "{\"type\":\"attention\",\"heads\":3,\"fused\":true},"
                       "{\"type\":\"gelu\"},{\"type\":\"linear\",\"out\":50},"
                       "{\"type\":\"softmax_xent\",\"classes\":50}]}";
    pt_model_spec *m = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_parse(json, "opts", &m, &err) == 0);
    CHECK(!m->layers[0].positional && !strcmp(m->layers[0].name, "tok"));
    CHECK(m->layers[1].body_count == 2 && m->layers[1].body[0].eps == 1e-6f);
    CHECK(m->layers[1].body[1].body[0].bias == 0);
    CHECK(!strcmp(m->layers[1].body[1].name, "residual1"));
    CHECK(m->layers[2].fused == 1 && m->layers[2].heads == 3);
    pt_layer_shape s[6];
    REQUIRE(pt_model_spec_shapes(m, s, &err) == 0);
    CHECK(s[0].params == 50 * 12); /* no positional table */
    CHECK_NEAR(s[0].fwd_flops, 0, 0);
    CHECK(s[1].params == 2 * 12 + 12 * 12); /* layernorm + bias-free linear */
    check_round_trip(m);
    pt_model_spec_free(&m);
}

static void test_input_short_form(void)
{
    /* keys starting with '_' are comments, anywhere */
    const char *json = "{\"v\":1,\"name\":\"short\",\"input\":[4,6],\"layers\":["
                       "{\"type\":\"linear\",\"out\":3,\"_note\":[1]},"
                       "{\"type\":\"softmax_xent\",\"classes\":3}],\"_why\":{}}";
    pt_model_spec *m = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_parse(json, "short", &m, &err) == 0);
    CHECK(m->input_kind == PT_INPUT_FLOAT && m->input_rank == 2);
    pt_layer_shape s[2];
    REQUIRE(pt_model_spec_shapes(m, s, &err) == 0);
    /* linear acts on the last dim: 4 rows of 6 -> 3 */
    CHECK(s[0].rank == 2 && s[0].dims[0] == 4 && s[0].dims[1] == 3 && s[0].out_elems == 12);
    CHECK(s[0].params == 6 * 3 + 3);
    CHECK_NEAR(s[0].fwd_flops, 2.0 * 6 * 3 * 4, 0);
    pt_model_spec_free(&m);
}

/* A spec built by hand is checked by pt_model_spec_shapes too. */
static void test_shapes_validate_by_hand(void)
{
    pt_layer_spec layers[3] = {0};
    layers[0].kind = PT_LAYER_ATTENTION;
    layers[0].heads = 3;
    snprintf(layers[0].name, PT_NAME_MAX, "attn");
    layers[1].kind = PT_LAYER_LINEAR;
    layers[1].out = 5;
    layers[1].bias = 1;
    layers[2].kind = PT_LAYER_SOFTMAX_XENT;
    layers[2].classes = 5;
    pt_model_spec m = {.name = "hand",
                       .input_kind = PT_INPUT_FLOAT,
                       .input_rank = 2,
                       .input = {10, 64},
                       .layer_count = 3,
                       .layers = layers};
    pt_layer_shape s[3];
    pt_error err = {0};
    CHECK(pt_model_spec_shapes(&m, s, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "model hand: layers[0].heads: 3 heads do not divide");
    layers[0].heads = 4;
    CHECK(pt_model_spec_shapes(&m, s, &err) == 0);
    CHECK(s[0].params == 4LL * 64 * 64 + 4 * 64);
    layers[2].classes = 6;
    CHECK(pt_model_spec_shapes(&m, s, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "layers[2].classes");
    layers[2].classes = 5;
    layers[1].out = 0;
    CHECK(pt_model_spec_shapes(&m, s, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "layers[1].out: must be > 0");
    /* attention on a rank-1 input has no [T,D] to work on */
    m.input_rank = 1;
    m.input[0] = 64;
    layers[1].out = 5;
    CHECK(pt_model_spec_shapes(&m, s, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "layers[0].type: attention needs a [T,D] input (got [64])");
}

/* Shape figures that would overflow are refused, not wrapped. */
static void test_limits(void)
{
    const char *json =
        "{\"v\":1,\"name\":\"big\",\"input\":[16777216,16777216,4],\"layers\":["
        "{\"type\":\"linear\",\"out\":3},{\"type\":\"softmax_xent\",\"classes\":3}]}";
    pt_model_spec *m = NULL;
    pt_error err = {0};
    CHECK(pt_model_spec_parse(json, "big.json", &m, &err) < 0);
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(err.msg, "big.json: input.shape: more than");
}

static void test_kind_names(void)
{
    for (int k = 0; k < PT_LAYER_KIND_COUNT; k++) {
        const char *n = pt_layer_kind_name((pt_layer_kind)k);
        REQUIRE(n != NULL);
        pt_layer_kind back;
        CHECK(pt_layer_kind_parse(n, &back) == 0 && back == (pt_layer_kind)k);
    }
    pt_layer_kind out;
    CHECK(pt_layer_kind_parse("conv", &out) == PT_ENOTFOUND);
    CHECK(pt_layer_kind_name(PT_LAYER_KIND_COUNT) == NULL);
}

static void test_find(void)
{
    char dir[] = "/tmp/pt_model_test_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    pt_model_spec *m = find("fmnist-mlp");
    REQUIRE(m != NULL);
    snprintf(m->name, sizeof m->name, "only-here");
    char path[256];
    snprintf(path, sizeof path, "%s/only-here.json", dir);
    pt_error err = {0};
    REQUIRE(pt_model_spec_save(m, path, &err) == 0);
    pt_model_spec_free(&m);

    /* by path */
    CHECK(pt_model_spec_find(path, &m, &err) == 0 && m && !strcmp(m->name, "only-here"));
    pt_model_spec_free(&m);
    /* by name, through $PT_MODELS_DIR */
    unsetenv("PT_MODELS_DIR");
    CHECK(pt_model_spec_find("only-here", &m, &err) == PT_ENOTFOUND && m == NULL);
    CHECK_STR_CONTAINS(err.msg, "model \"only-here\": not found");
    setenv("PT_MODELS_DIR", dir, 1);
    CHECK(pt_model_spec_find("only-here", &m, &err) == 0 && m != NULL);
    pt_model_spec_free(&m);
    /* built-in names still resolve when $PT_MODELS_DIR lacks them */
    CHECK(pt_model_spec_find("gpt-tiny", &m, &err) == 0 && m != NULL);
    pt_model_spec_free(&m);
    /* a broken file found by name reports its own error, not "not found" */
    snprintf(path, sizeof path, "%s/broken.json", dir);
    REQUIRE(pt_file_write_atomic(path, "{\"v\":1", 6, &err) == 0);
    CHECK(pt_model_spec_find("broken", &m, &err) == PT_EPARSE);
    CHECK_STR_CONTAINS(err.msg, "broken.json: not valid JSON near line 1");
    unsetenv("PT_MODELS_DIR");
    unlink(path);
    snprintf(path, sizeof path, "%s/only-here.json", dir);
    unlink(path);
    rmdir(dir);
}

static void test_free_null(void)
{
    pt_model_spec_free(NULL);
    pt_model_spec *m = NULL;
    pt_model_spec_free(&m);
    CHECK(pt_model_spec_to_json(NULL) == NULL);
}

PT_TEST_MAIN({"fmnist_mlp_shapes", test_fmnist_mlp_shapes},
             {"fmnist_mlp_deep", test_fmnist_mlp_deep}, {"gpt_tiny_shapes", test_gpt_tiny_shapes},
             {"gpt_1_3b_shapes", test_gpt_1_3b_shapes},
             {"round_trip_shipped", test_round_trip_shipped},
             {"round_trip_options", test_round_trip_options},
             {"input_short_form", test_input_short_form},
             {"shapes_validate_by_hand", test_shapes_validate_by_hand}, {"limits", test_limits},
             {"kind_names", test_kind_names}, {"find", test_find}, {"free_null", test_free_null})

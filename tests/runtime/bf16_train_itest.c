/* bf16 training on the CPU stand-in against fp32 training (issue 28): the
 * shipped gpt-tiny, unfused and with fused attention, 100 steps of Adam at
 * batch 8 on synthetic tokens, once on the CPU backend in fp32 and once on
 * the bf16 CPU reference (tests/runtime/bf16_ref.h: activations and
 * gradients rounded to bf16 as stored, each step computing with a bf16 copy
 * of the fp32 master weights, Adam's update and moments in fp32). Every
 * step's loss agrees within 1e-2 relative (the GPU tests' bf16 tolerance),
 * the fp32 master weights after 100 steps within WEIGHT_TOL (2-norm,
 * relative), and the two runs do differ (the rounding ran). */
#include "tests/runtime/bf16_ref.h"
#include "tests/runtime/exec_common.h"

#define STEPS       100
#define BATCH       8
#define LOSS_TOL    1e-2 /* relative, every step */
#define WEIGHT_TOL  2e-2 /* relative 2-norm of the master weights after STEPS */
#define DIFFERS_MIN 1e-6 /* the bf16 run's losses differ from fp32 by at least this */
#define ADAM_LR     1e-3f

typedef struct trained {
    double loss[STEPS];
    float *w; /* master weights after STEPS */
    int64_t count;
} trained;

/* STEPS of Adam on backend be (NULL: the CPU in fp32); bf16: compute with a
 * bf16-rounded copy of the master weights. Returns 0 or -1. */
static int train(const pt_model_spec *spec, const pt_dataset *ds, const pt_backend *be, int bf16,
                 trained *out)
{
    pt_net_config nc = pt_net_config_default(spec);
    nc.max_batch = BATCH;
    nc.seed = INIT_SEED;
    nc.backend = be;
    pt_net *net = NULL;
    pt_error err = {0};
    if (pt_net_create(spec, &nc, &net, &err) < 0) {
        CHECK_MSG(0, "%s: %s", spec->name, err.msg);
        return -1;
    }
    int64_t count = pt_net_param_count(net);
    pt_optim_spec os = pt_optim_default(PT_OPTIM_ADAM);
    os.lr = ADAM_LR;
    pt_optim *opt = NULL;
    float *master = pt_net_params(net), *compute = master;
    int rc = pt_optim_create(&os, pt_net_arena(net), count, &opt, &err);
    if (rc == 0 && bf16)
        compute = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_WEIGHTS, count);
    CHECK_MSG(rc == 0 && compute, "%s: optimizer or compute copy: %s", spec->name, err.msg);
    if (!compute)
        rc = PT_ENOMEM;
    int64_t idx[BATCH];
    for (int t = 0; t < STEPS && rc == 0; t++) {
        ec_batch b;
        ec_batch_indices(pt_dataset_count(ds), BATCH, t, idx);
        ec_load(ds, idx, BATCH, &b);
        if (bf16) {
            memcpy(compute, master, (size_t)count * sizeof *compute);
            bf16_round_array(compute, count);
        }
        pt_net_zero_grads(net);
        rc = pt_net_forward(net, 0, compute, b.x, BATCH, b.labels, NULL, &out->loss[t]);
        if (rc == 0)
            rc = pt_net_backward(net, 0, compute, NULL, NULL, NULL);
        if (rc == 0)
            pt_optim_step(opt, master, pt_net_grads(net));
        ec_batch_free(&b);
    }
    CHECK_MSG(rc == 0, "%s: a step failed: %d", spec->name, rc);
    out->count = count;
    out->w = malloc((size_t)count * sizeof *out->w);
    memcpy(out->w, master, (size_t)count * sizeof *out->w);
    pt_optim_destroy(&opt);
    pt_net_destroy(&net);
    return rc;
}

static void check_model(pt_model_spec *spec, const char *what)
{
    pt_dataset *ds = ec_data(spec);
    REQUIRE(ds);
    trained f = {0}, h = {0};
    if (train(spec, ds, NULL, 0, &f) == 0 && train(spec, ds, bf16_ref_backend(), 1, &h) == 0) {
        double worst = 0, least = INFINITY;
        int at = 0;
        for (int t = 0; t < STEPS; t++) {
            double e = fabs(h.loss[t] - f.loss[t]) / fabs(f.loss[t]);
            if (e > worst) {
                worst = e;
                at = t;
            }
            least = fmin(least, fabs(h.loss[t] - f.loss[t]));
        }
        double ew = ec_rel(h.w, f.w, f.count), sum_diff = 0;
        for (int t = 0; t < STEPS; t++)
            sum_diff += fabs(h.loss[t] - f.loss[t]);
        printf("  %s: loss %.4f -> %.4f (fp32), %.4f -> %.4f (bf16); worst step %d: %.2e; "
               "weights after %d steps %.2e\n",
               what, f.loss[0], f.loss[STEPS - 1], h.loss[0], h.loss[STEPS - 1], at, worst, STEPS,
               ew);
        CHECK_MSG(worst < LOSS_TOL, "%s: step %d: bf16 loss %.6f, fp32 %.6f: %.3e relative", what,
                  at, h.loss[at], f.loss[at], worst);
        CHECK_MSG(ew < WEIGHT_TOL, "%s: master weights after %d steps %.3e apart", what, STEPS, ew);
        CHECK_MSG(sum_diff / STEPS > DIFFERS_MIN, "%s: bf16 and fp32 losses equal: no rounding",
                  what);
        CHECK_MSG(f.loss[STEPS - 1] < f.loss[0], "%s: fp32 training did not lower the loss", what);
    }
    free(f.w);
    free(h.w);
    pt_dataset_free(&ds);
}

static pt_model_spec *gpt_tiny(int fused)
{
    pt_model_spec *spec = NULL;
    pt_error err = {0};
    if (pt_model_spec_find("gpt-tiny", &spec, &err) < 0) {
        CHECK_MSG(0, "gpt-tiny: %s", err.msg);
        return NULL;
    }
    for (int i = 0; i < spec->layer_count; i++)
        for (int j = 0; j < spec->layers[i].body_count; j++)
            spec->layers[i].body[j].fused = fused;
    return spec;
}

static void test_gpt_tiny(void)
{
    pt_model_spec *spec = gpt_tiny(0);
    REQUIRE(spec);
    check_model(spec, "gpt-tiny");
    pt_model_spec_free(&spec);
}

static void test_gpt_tiny_fused(void)
{
    pt_model_spec *spec = gpt_tiny(1);
    REQUIRE(spec);
    check_model(spec, "gpt-tiny fused");
    pt_model_spec_free(&spec);
}

/* The reference rounds what it stores, and only that: an op's output is a
 * bf16 value, the optimizer's master weights are not. */
static void test_rounding(void)
{
    const pt_backend *be = bf16_ref_backend();
    /* bf16 keeps 7 fraction bits: 1 + 1/128 is the next value after 1 */
    CHECK(bf16_round(1.0f + 1.0f / 512) == 1.0f);              /* below half: down */
    CHECK(bf16_round(1.0f + 3.0f / 512) == 1.0f + 1.0f / 128); /* above half: up */
    CHECK(bf16_round(1.0f + 1.0f / 256) == 1.0f);              /* a tie: to even, down */
    CHECK(bf16_round(1.0f + 3.0f / 256) == 1.0f + 1.0f / 64);  /* a tie: to even, up */
    float x[3] = {1.0f / 3, 2.0f / 3, 1.1f}, y[3];
    be->relu_fwd(be, 3, x, y);
    for (int i = 0; i < 3; i++)
        CHECK(y[i] == bf16_round(x[i]) && y[i] != x[i]);
    float w[3] = {1.0f / 3, 0.7f, 0.1f}, w0[3], g[3] = {0.1f, -0.2f, 0.3f}, m[3] = {0}, v[3] = {0};
    memcpy(w0, w, sizeof w);
    be->adam_update(be, 3, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f, w, w, g, m, v);
    int kept_fp32 = 0;
    for (int i = 0; i < 3; i++)
        kept_fp32 += w[i] != bf16_round(w[i]);
    CHECK_MSG(kept_fp32 > 0, "the master weights were rounded to bf16");
}

PT_TEST_MAIN({"rounding", test_rounding}, {"gpt_tiny", test_gpt_tiny},
             {"gpt_tiny_fused", test_gpt_tiny_fused})

/* The shipped large-model specs (models/bert-48, xlnet-36, gpt3) load, have
 * the layer count, parameter count and forward FLOPs of the published
 * architectures, and give an analytic profile on every shipped device whose
 * parameter bytes and times agree with the spec. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/analytic.h"
#include "protocol/device.h"
#include "protocol/model.h"
#include "protocol/profile.h"
#include "tests/test.h"

/* Published parameter counts are rounded and count tied or untied heads
 * differently; the closed form below is exact for our layers. */
typedef struct arch {
    const char *name;
    int blocks, d, heads, seq, vocab, ffn;
    double published_params; /* as the paper states it */
    double published_tol;    /* relative */
} arch;

static const arch archs[] = {
    /* DAPPLE Table II: BERT-48 640M, XLNet-36 500M; GPT-3: 175B. */
    {"bert-48", 48, 1024, 16, 512, 30522, 4096, 640e6, 0.06},
    {"xlnet-36", 36, 1024, 16, 512, 32000, 4096, 500e6, 0.06},
    {"gpt3", 96, 12288, 96, 2048, 50257, 49152, 175e9, 0.01},
};

/* Learnable floats: token + position embedding; per block two layernorms,
 * Q/K/V/O projections with biases, the two MLP linears with biases; the final
 * layernorm and the vocabulary head with bias. */
static double closed_form_params(const arch *a)
{
    double d = a->d, f = a->ffn, v = a->vocab;
    double block = 2 * (2 * d) + 4 * (d * d + d) + (d * f + f) + (f * d + d);
    return v * d + a->seq * d + a->blocks * block + 2 * d + (d * v + v);
}

static void test_specs(void)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const arch *a = &archs[i];
        pt_model_spec *spec = NULL;
        pt_error err = {0};
        int rc = pt_model_spec_find(a->name, &spec, &err);
        CHECK_MSG(rc == 0, "%s: %s", a->name, err.msg);
        if (rc < 0)
            continue;
        CHECK(spec->layer_count == 2 * a->blocks + 4);
        pt_layer_shape *sh = calloc((size_t)spec->layer_count, sizeof *sh);
        REQUIRE(sh);
        CHECK_MSG(pt_model_spec_shapes(spec, sh, &err) == 0, "%s: %s", a->name, err.msg);
        double params = 0, flops = 0;
        for (int l = 0; l < spec->layer_count; l++) {
            params += (double)sh[l].params;
            flops += sh[l].fwd_flops;
        }
        double want = closed_form_params(a);
        CHECK_NEAR(params, want, 1e-9 * want);
        CHECK_MSG(fabs(params / a->published_params - 1) < a->published_tol,
                  "%s: %.4g parameters, published %.4g", a->name, params, a->published_params);
        /* Kaplan et al. 2020: forward FLOPs per token ~ 2N + 2 n_layer n_ctx d
         * (the attention scores and their weighted sum, no causal halving) */
        double per_token = flops / a->seq;
        double kaplan = 2 * params + 2.0 * a->blocks * a->seq * a->d;
        CHECK_MSG(fabs(per_token / kaplan - 1) < 0.05, "%s: %.4g FLOPs per token, Kaplan %.4g",
                  a->name, per_token, kaplan);
        /* every block has the same shape, so the same cost */
        CHECK(sh[1].params == sh[2 * a->blocks - 1].params);
        CHECK(sh[1].dims[0] == a->seq && sh[1].dims[1] == a->d);
        free(sh);
        pt_model_spec_free(&spec);
    }
}

/* An analytic profile on each shipped device: one entry per layer, parameter
 * bytes 4 per float, times positive and finite, faster devices not slower. */
static void test_profiles_on_devices(void)
{
    const char *dir = pt_test_path("devices");
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        pt_model_spec *spec = NULL;
        pt_error err = {0};
        REQUIRE(pt_model_spec_find(archs[i].name, &spec, &err) == 0);
        pt_layer_shape *sh = calloc((size_t)spec->layer_count, sizeof *sh);
        REQUIRE(sh && pt_model_spec_shapes(spec, sh, &err) == 0);
        DIR *d = opendir(dir);
        REQUIRE(d);
        int devices = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (n <= 5 || strcmp(e->d_name + n - 5, ".json"))
                continue;
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(n - 5), e->d_name);
            pt_device_desc dev;
            REQUIRE(pt_device_find(name, &dev, &err) == 0);
            pt_profile *p = NULL;
            int rc = pt_analytic_profile(spec, &dev, 2, NULL, &p, &err);
            CHECK_MSG(rc == 0, "%s on %s: %s", archs[i].name, name, err.msg);
            if (rc < 0)
                continue;
            CHECK(p->layer_count == spec->layer_count && p->microbatch == 2);
            double total_ms = 0;
            for (int l = 0; l < p->layer_count; l++) {
                const pt_profile_layer *L = &p->layers[l];
                CHECK(L->param_bytes == 4 * sh[l].params);
                CHECK(L->act_bytes == 4 * 2 * sh[l].out_elems);
                CHECK(isfinite(L->fwd_ms) && L->fwd_ms > 0 && L->bwd_ms >= L->fwd_ms);
                total_ms += L->fwd_ms;
            }
            /* compute-bound overall: at least the FLOPs at the reached peak */
            double flops = 0;
            for (int l = 0; l < spec->layer_count; l++)
                flops += sh[l].fwd_flops * 2;
            double floor_ms = 1000 * flops / (dev.peak_flops * PT_ANALYTIC_COMPUTE_EFFICIENCY);
            CHECK_MSG(total_ms >= floor_ms * (1 - 1e-9), "%s on %s: %.4g ms < %.4g ms",
                      archs[i].name, name, total_ms, floor_ms);
            pt_profile_free(&p);
            devices++;
        }
        closedir(d);
        CHECK(devices >= 5);
        free(sh);
        pt_model_spec_free(&spec);
    }
}

PT_TEST_MAIN({"specs", test_specs}, {"profiles_on_devices", test_profiles_on_devices})

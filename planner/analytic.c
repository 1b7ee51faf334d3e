/* Analytic profiles; the cost formulas are stated in analytic.h. */
#include "planner/analytic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes as a double, refused past what the profile format holds exactly. */
static int bytes_of(double floats, int64_t *out)
{
    double b = floats * PT_ANALYTIC_BYTES_PER_FLOAT;
    if (!(b <= PT_ANALYTIC_BYTES_MAX))
        return PT_ERANGE;
    *out = (int64_t)b;
    return 0;
}

/* 1 when a layer of this spec has parameters. */
static int has_params(const pt_layer_spec *l)
{
    switch (l->kind) {
    case PT_LAYER_LINEAR:
    case PT_LAYER_LAYERNORM:
    case PT_LAYER_EMBEDDING:
    case PT_LAYER_ATTENTION:
        return 1;
    case PT_LAYER_RESIDUAL:
        for (int j = 0; j < l->body_count; j++)
            if (has_params(&l->body[j]))
                return 1;
        return 0;
    default:
        return 0;
    }
}

/* Floats per sample that a layer with input shape (rank, dims) keeps for its
 * backward besides its input and output (*saved), uses as backward scratch
 * (*scratch) and, in a split backward, keeps from B to W besides the
 * gradient of its own output (*keep); writes its output shape. The formulas
 * are analytic.h's. */
static void layer_memory(const pt_layer_spec *l, int *rank, int *dims, double *saved,
                         double *scratch, double *keep)
{
    double in = 1;
    for (int i = 0; i < *rank; i++)
        in *= dims[i];
    int last = dims[*rank - 1];
    *saved = *scratch = *keep = 0;
    switch (l->kind) {
    case PT_LAYER_LINEAR:
        dims[*rank - 1] = l->out;
        break;
    case PT_LAYER_EMBEDDING:
        dims[1] = l->dim;
        *rank = 2;
        break;
    case PT_LAYER_LAYERNORM:
        *saved = PT_ANALYTIC_LAYERNORM_STATS * (in / last);
        break;
    case PT_LAYER_ATTENTION: {
        double T = dims[0], D = dims[1], H = l->heads;
        *saved = *scratch = PT_ANALYTIC_QKV * T * D + H * T * T + T * D;
        break;
    }
    case PT_LAYER_SOFTMAX_XENT:
        *saved = in / last; /* one int32 label per row, a float's room */
        break;
    case PT_LAYER_RESIDUAL: {
        double inner = 0, kept = 0, grads = 0, widest = 0;
        for (int j = 0; j < l->body_count; j++) {
            double s, w, k, body_in = 1;
            for (int i = 0; i < *rank; i++)
                body_in *= dims[i];
            if (j > 0)
                grads += body_in;
            layer_memory(&l->body[j], rank, dims, &s, &w, &k);
            if (j + 1 < l->body_count) {
                double out = 1;
                for (int i = 0; i < *rank; i++)
                    out *= dims[i];
                inner += out;
                /* the output gradient of an inner body layer with parameters */
                if (has_params(&l->body[j]))
                    *keep += out;
            }
            *keep += k;
            kept += s;
            if (w > widest)
                widest = w;
        }
        *saved = in + inner + kept; /* the body's output, inner outputs, saved bytes */
        *scratch = grads + widest;
        break;
    }
    default: /* relu, gelu: the chain keeps their input and output */
        break;
    }
}

static double cost_ms(double flops, double bytes, double flop_rate, double bandwidth)
{
    double compute_s = flops / flop_rate, memory_s = bytes / bandwidth;
    return PT_ANALYTIC_MS_PER_S * (compute_s > memory_s ? compute_s : memory_s);
}

static int check_args(const pt_model_spec *spec, const pt_device_desc *device, int microbatch,
                      double efficiency, pt_error *err)
{
    if (!spec || !device)
        return pt_error_set(err, PT_EINVAL, "analytic profile: no %s given",
                            spec ? "device" : "model");
    if (spec->layer_count < 1 || !spec->layers)
        return pt_error_set(err, PT_EINVAL, "%s: layers: the model has none", spec->name);
    if (microbatch < 1 || microbatch > PT_PROFILE_BATCH_MAX)
        return pt_error_set(err, PT_ERANGE, "batch: %d is outside 1..%d", microbatch,
                            PT_PROFILE_BATCH_MAX);
    if (!(efficiency > 0 && efficiency <= 1))
        return pt_error_set(err, PT_ERANGE, "efficiency: %g is outside (0, 1]", efficiency);
    if (!(device->peak_flops > 0) || !isfinite(device->peak_flops))
        return pt_error_set(err, PT_EINVAL, "%s: peak_flops: must be > 0", device->name);
    if (!(device->mem_bandwidth > 0) || !isfinite(device->mem_bandwidth))
        return pt_error_set(err, PT_EINVAL, "%s: mem_bandwidth: must be > 0", device->name);
    return 0;
}

int pt_analytic_profile(const pt_model_spec *spec, const pt_device_desc *device, int microbatch,
                        const pt_analytic_options *opt, pt_profile **out, pt_error *err)
{
    if (out)
        *out = NULL;
    double eff = opt && opt->efficiency != 0 ? opt->efficiency : PT_ANALYTIC_COMPUTE_EFFICIENCY;
    int rc = out ? check_args(spec, device, microbatch, eff, err)
                 : pt_error_set(err, PT_EINVAL, "analytic profile: no output given");
    if (rc < 0)
        return rc;
    int n = spec->layer_count;
    pt_layer_shape *shapes = calloc((size_t)n, sizeof *shapes);
    pt_profile *p = pt_profile_new(n);
    if (!shapes || !p) {
        rc = pt_error_set(err, PT_ENOMEM, "analytic profile: out of memory");
        goto fail;
    }
    if ((rc = pt_model_spec_shapes(spec, shapes, err)) < 0)
        goto fail;
    const double b = microbatch, flop_rate = device->peak_flops * eff;
    double in_elems = (double)pt_model_spec_input_elems(spec);
    if (bytes_of(in_elems * b, &p->input_bytes) < 0) {
        rc = pt_error_set(err, PT_ERANGE, "%s: input: %g floats x batch %d passes 2^53 bytes",
                          spec->name, in_elems, microbatch);
        goto fail;
    }
    int rank = spec->input_rank, dims[PT_SHAPE_MAX];
    memcpy(dims, spec->input, sizeof dims);
    for (int i = 0; i < n; i++) {
        const pt_layer_shape *s = &shapes[i];
        pt_profile_layer *l = &p->layers[i];
        double saved, scratch, keep;
        layer_memory(&spec->layers[i], &rank, dims, &saved, &scratch, &keep);
        double out_elems = (double)s->out_elems, params = (double)s->params;
        double weights_read = params;
        if (spec->layers[i].kind == PT_LAYER_EMBEDDING && out_elems * b < params)
            weights_read = out_elems * b;
        double bytes = ((in_elems + out_elems) * b + weights_read) * PT_ANALYTIC_BYTES_PER_FLOAT;
        double flops = s->fwd_flops * b;
        snprintf(l->name, sizeof l->name, "%s", spec->layers[i].name);
        l->fwd_ms = cost_ms(flops, bytes, flop_rate, device->mem_bandwidth);
        l->bwd_ms = cost_ms(PT_ANALYTIC_BWD_FACTOR * flops, PT_ANALYTIC_BWD_FACTOR * bytes,
                            flop_rate, device->mem_bandwidth);
        l->recompute_ms = l->fwd_ms;
        if (bytes_of(out_elems * b, &l->act_bytes) < 0 || bytes_of(params, &l->param_bytes) < 0 ||
            bytes_of(saved * b, &l->saved_bytes) < 0 ||
            bytes_of(scratch * b, &l->scratch_bytes) < 0 ||
            bytes_of(((has_params(&spec->layers[i]) ? out_elems : 0) + keep) * b, &l->keep_bytes) <
                0) {
            rc = pt_error_set(err, PT_ERANGE,
                              "%s: layers[%d] (%s): activation, parameters or saved bytes pass "
                              "2^53 bytes at batch %d",
                              spec->name, i, spec->layers[i].name, microbatch);
            goto fail;
        }
        in_elems = out_elems;
    }
    snprintf(p->model, sizeof p->model, "%s", spec->name);
    snprintf(p->device, sizeof p->device, "%s", device->name);
    snprintf(p->source, sizeof p->source, "%s", "analytic");
    p->microbatch = microbatch;
    free(shapes);
    *out = p;
    return 0;
fail:
    free(shapes);
    pt_profile_free(&p);
    return rc;
}

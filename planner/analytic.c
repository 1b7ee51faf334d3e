/* Analytic profiles; the cost formulas are stated in analytic.h. */
#include "planner/analytic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/layer_kind.h"

/* The layout rules of analytic.h, per layer kind, are its facts
 * (protocol/layer_kind.h: pt_layer_memory, pt_layer_core, pt_layer_has_params). */
typedef pt_layer_layout layout_ctx;
typedef pt_layer_mem layer_mem;

static double cost_ms(double flops, double bytes, double flop_rate, double bandwidth)
{
    double compute_s = flops / flop_rate, memory_s = bytes / bandwidth;
    return PT_ANALYTIC_MS_PER_S * (compute_s > memory_s ? compute_s : memory_s);
}

static int check_args(const pt_model_spec *spec, const pt_device_desc *device, int microbatch,
                      double efficiency, int precision, pt_error *err)
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
    if (!pt_precision_name(precision))
        return pt_error_set(err, PT_EINVAL, "precision: %d is not one of %s", precision,
                            pt_precision_names());
    if (!(device->peak_flops > 0) || !isfinite(device->peak_flops))
        return pt_error_set(err, PT_EINVAL, "%s: peak_flops: must be > 0", device->name);
    double peak = pt_device_peak(device, precision);
    if (!(peak > 0) || !isfinite(peak))
        return pt_error_set(err, PT_EINVAL, "%s: peaks.%s: the device has no %s peak", device->name,
                            pt_precision_name(precision), pt_precision_name(precision));
    if (!(device->mem_bandwidth > 0) || !isfinite(device->mem_bandwidth))
        return pt_error_set(err, PT_EINVAL, "%s: mem_bandwidth: must be > 0", device->name);
    if (!(device->launch_us >= 0) || !isfinite(device->launch_us))
        return pt_error_set(err, PT_EINVAL, "%s: launch_us: must be >= 0", device->name);
    return 0;
}

/* Whole bytes, refused past what the profile format holds exactly. */
static int bytes_of(double b, int64_t *out)
{
    if (!(b <= PT_ANALYTIC_BYTES_MAX))
        return PT_ERANGE;
    *out = (int64_t)b;
    return 0;
}

/* Everything the profile's layer i gets from the spec, per micro-batch. */
typedef struct layer_in {
    const pt_layer_spec *spec;
    const pt_layer_shape *shape;
    double in_elems; /* per sample */
    int rank, dims[PT_SHAPE_MAX];
} layer_in;

typedef struct run {
    const pt_device_desc *dev;
    layout_ctx x;
    double b, flop_rate, peak, wbytes; /* batch, reached and peak FLOP/s, bytes per weight */
} run;

static int fill_layer(const run *r, const layer_in *li, pt_profile_layer *l)
{
    layer_mem m;
    int rank = li->rank, dims[PT_SHAPE_MAX];
    memcpy(dims, li->dims, sizeof dims);
    pt_layer_memory(&r->x, li->spec, &rank, dims, &m);
    double b = r->b, out = (double)li->shape->out_elems, params = (double)li->shape->params;
    int embedding = (pt_layer_kind_flags(li->spec->kind) & PT_LKF_TOKENS) != 0;
    /* an embedding reads only the rows it gathers */
    double weights_read = embedding && out * b < params ? out * b : params;
    double act_traffic = (li->in_elems + out) * b * r->x.e;
    double bytes = act_traffic + weights_read * r->wbytes, flops = li->shape->fwd_flops * b;
    double launch = r->dev->launch_us / PT_ANALYTIC_US_PER_MS;
    int kernels_bwd = pt_layer_has_params(li->spec) ? 2 * m.kernels : m.kernels;
    snprintf(l->name, sizeof l->name, "%s", li->spec->name);
    l->fwd_ms = cost_ms(flops, bytes, r->flop_rate, r->dev->mem_bandwidth) + m.kernels * launch;
    l->bwd_ms = cost_ms(PT_ANALYTIC_BWD_FACTOR * flops, PT_ANALYTIC_BWD_FACTOR * bytes,
                        r->flop_rate, r->dev->mem_bandwidth) +
                kernels_bwd * launch;
    l->recompute_ms = l->fwd_ms;
    {
        /* what the backward runs of the forward again: the attention core
         * under selective recomputation, and always in a fused attention */
        double cf = 0, cb = 0;
        int ck = 0;
        pt_layer_core(li->spec, li->rank, li->dims, r->x.e, r->x.selective, &cf, &cb, &ck);
        if (ck > 0)
            l->bwd_ms += cost_ms(cf * b, cb * b, r->flop_rate, r->dev->mem_bandwidth) + ck * launch;
    }
    /* the roofline: the hardware's peak, not the reached share of it */
    l->flops = flops;
    l->kernels = m.kernels;
    double memory_s = bytes / r->dev->mem_bandwidth, compute_s = flops / r->flop_rate;
    double fixed = m.kernels * launch +
                   (memory_s >= compute_s && !embedding
                        ? PT_ANALYTIC_MS_PER_S * params * r->wbytes / r->dev->mem_bandwidth
                        : 0);
    l->fixed_share = l->fwd_ms > 0 ? fixed / l->fwd_ms : 0;
    if (l->fixed_share >= PT_PROFILE_SHARE_MAX)
        l->fixed_share = PT_PROFILE_SHARE_MAX;
    if (bytes_of(act_traffic, &l->bytes) < 0 ||
        bytes_of(embedding ? 0 : params * r->wbytes, &l->weight_bytes) < 0 ||
        bytes_of(out * b * r->x.e, &l->act_bytes) < 0 ||
        bytes_of(params * r->wbytes, &l->param_bytes) < 0 ||
        bytes_of(m.saved * b, &l->saved_bytes) < 0 ||
        bytes_of(m.scratch * b, &l->scratch_bytes) < 0 ||
        bytes_of(((pt_layer_has_params(li->spec) ? out * r->x.e : 0) + m.keep) * b,
                 &l->keep_bytes) < 0)
        return PT_ERANGE;
    return 0;
}

static int profile_layers(const pt_model_spec *spec, const pt_layer_shape *shapes, const run *r,
                          pt_profile *p, pt_error *err)
{
    layer_in li = {.rank = spec->input_rank, .in_elems = (double)pt_model_spec_input_elems(spec)};
    memcpy(li.dims, spec->input, sizeof li.dims);
    double in_e = spec->input_kind == PT_INPUT_TOKENS ? PT_ANALYTIC_TOKEN_BYTES : r->x.e;
    if (bytes_of(li.in_elems * r->b * in_e, &p->input_bytes) < 0)
        return pt_error_set(err, PT_ERANGE, "%s: input: %g elements x batch %g passes 2^53 bytes",
                            spec->name, li.in_elems, r->b);
    for (int i = 0; i < spec->layer_count; i++) {
        li.spec = &spec->layers[i];
        li.shape = &shapes[i];
        if (fill_layer(r, &li, &p->layers[i]) < 0)
            return pt_error_set(err, PT_ERANGE,
                                "%s: layers[%d] (%s): activation, parameters or saved bytes pass "
                                "2^53 bytes at batch %g",
                                spec->name, i, spec->layers[i].name, r->b);
        layer_mem ignore;
        pt_layer_memory(&r->x, li.spec, &li.rank, li.dims, &ignore);
        li.in_elems = (double)shapes[i].out_elems;
    }
    return 0;
}

int pt_analytic_profile(const pt_model_spec *spec, const pt_device_desc *device, int microbatch,
                        const pt_analytic_options *opt, pt_profile **out, pt_error *err)
{
    if (out)
        *out = NULL;
    double eff = opt && opt->efficiency != 0 ? opt->efficiency : PT_ANALYTIC_COMPUTE_EFFICIENCY;
    int prec = opt ? opt->precision : PT_PRECISION_FP32;
    int rc = out ? check_args(spec, device, microbatch, eff, prec, err)
                 : pt_error_set(err, PT_EINVAL, "analytic profile: no output given");
    if (rc < 0)
        return rc;
    int megatron = opt && opt->layout == PT_ANALYTIC_LAYOUT_MEGATRON;
    if (!opt || opt->layout == PT_ANALYTIC_LAYOUT_AUTO)
        megatron = pt_precision_master_bytes(prec) > 0;
    if (opt && opt->selective && !megatron)
        return pt_error_set(err, PT_EINVAL,
                            "selective recomputation: needs Megatron's layout (a 16-bit or fp8 "
                            "precision, or layout megatron)");
    run r = {.dev = device,
             .x = {pt_precision_act_bytes(prec), megatron, opt && opt->selective},
             .b = microbatch,
             .peak = pt_device_peak(device, prec),
             .wbytes = pt_precision_weight_bytes(prec)};
    r.flop_rate = r.peak * eff;
    int n = spec->layer_count;
    pt_layer_shape *shapes = calloc((size_t)n, sizeof *shapes);
    pt_profile *p = pt_profile_new(n);
    if (!shapes || !p) {
        rc = pt_error_set(err, PT_ENOMEM, "analytic profile: out of memory");
        goto fail;
    }
    if ((rc = pt_model_spec_shapes(spec, shapes, err)) < 0 ||
        (rc = profile_layers(spec, shapes, &r, p, err)) < 0)
        goto fail;
    snprintf(p->model, sizeof p->model, "%s", spec->name);
    snprintf(p->device, sizeof p->device, "%s", device->name);
    snprintf(p->source, sizeof p->source, "%s", "analytic");
    p->microbatch = microbatch;
    p->precision = prec;
    p->roofline = (pt_profile_roofline){1, r.peak, device->mem_bandwidth, device->launch_us};
    free(shapes);
    *out = p;
    return 0;
fail:
    free(shapes);
    pt_profile_free(&p);
    return rc;
}

int64_t pt_analytic_korthikanti_bytes(int64_t s, int64_t b, int64_t h, int64_t a,
                                      pt_analytic_recompute mode)
{
    switch (mode) {
    case PT_ANALYTIC_RECOMPUTE_FULL:
        return 2 * s * b * h;
    case PT_ANALYTIC_RECOMPUTE_SELECTIVE:
        return 34 * s * b * h;
    default:
        return 34 * s * b * h + 5 * a * s * s * b;
    }
}

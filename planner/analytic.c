/* Analytic profiles; the cost formulas are stated in analytic.h. */
#include "planner/analytic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the layout rules need: element bytes and which layout. */
typedef struct layout_ctx {
    double e;      /* bytes per activation element */
    int megatron;  /* Megatron-LM's layout (Korthikanti et al.), else the runtime's */
    int selective; /* megatron: selective recomputation of the attention core */
} layout_ctx;

/* Per sample, in bytes: what a layer keeps for its backward besides its
 * input and output, its backward scratch, its split-backward hold besides
 * its own output gradient; its forward kernel launches. */
typedef struct layer_mem {
    double saved, scratch, keep;
    int kernels;
} layer_mem;

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

static double elems(int rank, const int *dims)
{
    double n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

/* Attention on [T, D] with H heads: Q, K, V and the context, TD each, and
 * per head the T x T probabilities (the runtime) or, in Megatron's layout,
 * the softmax output, its dropout mask (one byte) and the dropout output,
 * which selective recomputation recomputes instead of keeping. A fused layer
 * keeps instead each query row's softmax statistics (fp32) and its backward
 * uses a delta per row for scratch; its dropout mask, in Megatron's layout,
 * is regenerated from the generator's state, as FlashAttention's is. */
static void attention_memory(const layout_ctx *x, double T, double D, double H, int fused,
                             layer_mem *m)
{
    double qkvc = (PT_ANALYTIC_QKV + 1) * T * D * x->e, probs = H * T * T;
    if (fused) {
        m->saved = qkvc + PT_ANALYTIC_ATTENTION_STATS * H * T * PT_ANALYTIC_STAT_BYTES;
        m->scratch = qkvc + H * T * PT_ANALYTIC_STAT_BYTES;
        m->kernels = PT_ANALYTIC_FUSED_ATTENTION_KERNELS;
        return;
    }
    if (!x->megatron) {
        m->saved = m->scratch = qkvc + probs * x->e;
    } else {
        m->saved = qkvc + (x->selective ? 0 : probs * (2 * x->e + PT_ANALYTIC_MASK_BYTES));
        m->scratch = qkvc + probs * x->e;
    }
    m->kernels = PT_ANALYTIC_ATTENTION_KERNELS + x->megatron; /* + the probabilities' dropout */
}

static void layer_memory(const layout_ctx *x, const pt_layer_spec *l, int *rank, int *dims,
                         layer_mem *m);

/* A residual: its body's inner outputs, saved bytes and (megatron) the
 * dropout mask before the addition; scratch: the body's input gradients but
 * the first, plus its largest scratch. */
static void residual_memory(const layout_ctx *x, const pt_layer_spec *l, int *rank, int *dims,
                            layer_mem *m)
{
    double in = elems(*rank, dims), inner = 0, kept = 0, grads = 0, widest = 0;
    int kernels = 1; /* the addition */
    for (int j = 0; j < l->body_count; j++) {
        layer_mem b;
        if (j > 0)
            grads += elems(*rank, dims) * x->e;
        layer_memory(x, &l->body[j], rank, dims, &b);
        if (j + 1 < l->body_count) {
            double out = elems(*rank, dims) * x->e;
            inner += out;
            /* the output gradient of an inner body layer with parameters */
            if (has_params(&l->body[j]))
                m->keep += out;
        }
        m->keep += b.keep;
        kept += b.saved;
        kernels += b.kernels;
        if (b.scratch > widest)
            widest = b.scratch;
    }
    /* the runtime keeps the body's output besides its input; Megatron's fused
     * bias-dropout-add keeps a one-byte mask */
    m->saved = inner + kept + (x->megatron ? in * PT_ANALYTIC_MASK_BYTES : in * x->e);
    m->scratch = grads + widest;
    m->kernels = kernels;
}

/* The layout rules of analytic.h for one layer with input shape (rank,
 * dims); writes its output shape. */
static void layer_memory(const layout_ctx *x, const pt_layer_spec *l, int *rank, int *dims,
                         layer_mem *m)
{
    double in = elems(*rank, dims);
    int last = dims[*rank - 1];
    memset(m, 0, sizeof *m);
    m->kernels = 1;
    switch (l->kind) {
    case PT_LAYER_LINEAR:
        dims[*rank - 1] = l->out;
        break;
    case PT_LAYER_EMBEDDING:
        dims[1] = l->dim;
        *rank = 2;
        m->kernels = 1 + (l->positional != 0);
        if (x->megatron) /* the embedding dropout's mask */
            m->saved = elems(*rank, dims) * PT_ANALYTIC_MASK_BYTES;
        break;
    case PT_LAYER_LAYERNORM:
        /* a mean and 1/std per row; Korthikanti et al. leave them out */
        m->saved = x->megatron ? 0 : PT_ANALYTIC_LAYERNORM_STATS * (in / last) * x->e;
        break;
    case PT_LAYER_ATTENTION:
        attention_memory(x, dims[0], dims[1], l->heads, l->fused, m);
        break;
    case PT_LAYER_SOFTMAX_XENT:
        /* one int32 label per row; Megatron also keeps the fp32 logits */
        m->saved = (in / last) * PT_ANALYTIC_LABEL_BYTES + (x->megatron ? in * 4 : 0);
        break;
    case PT_LAYER_RESIDUAL:
        residual_memory(x, l, rank, dims, m);
        break;
    default: /* relu, gelu: the chain keeps their input and output */
        break;
    }
}

/* The core of each attention layer in [first body layer...] that runs it
 * again in its backward (every layer under selective recomputation, else the
 * fused ones, whose backward recomputes the probabilities tile by tile):
 * FLOPs and bytes per sample its forward spends on the scores and the
 * probabilities. */
static void attention_core(const pt_layer_spec *l, int rank, const int *dims, double e,
                           int selective, double *flops, double *bytes, int *kernels)
{
    int r = rank, d[PT_SHAPE_MAX];
    memcpy(d, dims, sizeof d);
    const pt_layer_spec *body = l->kind == PT_LAYER_RESIDUAL ? l->body : l;
    int count = l->kind == PT_LAYER_RESIDUAL ? l->body_count : 1;
    layout_ctx plain = {e, 0, 0};
    for (int j = 0; j < count; j++) {
        if (body[j].kind == PT_LAYER_ATTENTION && r == 2 && (selective || body[j].fused)) {
            double T = d[0], D = d[1], H = body[j].heads;
            *flops += PT_ANALYTIC_ATTENTION_CORE_FLOPS * T * T * D;
            *bytes += PT_ANALYTIC_ATTENTION_CORE_PASSES * H * T * T * e;
            *kernels += PT_ANALYTIC_ATTENTION_CORE_KERNELS;
        }
        layer_mem ignore;
        layer_memory(&plain, &body[j], &r, d, &ignore);
    }
}

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
    layer_memory(&r->x, li->spec, &rank, dims, &m);
    double b = r->b, out = (double)li->shape->out_elems, params = (double)li->shape->params;
    int embedding = li->spec->kind == PT_LAYER_EMBEDDING;
    /* an embedding reads only the rows it gathers */
    double weights_read = embedding && out * b < params ? out * b : params;
    double act_traffic = (li->in_elems + out) * b * r->x.e;
    double bytes = act_traffic + weights_read * r->wbytes, flops = li->shape->fwd_flops * b;
    double launch = r->dev->launch_us / PT_ANALYTIC_US_PER_MS;
    int kernels_bwd = has_params(li->spec) ? 2 * m.kernels : m.kernels;
    snprintf(l->name, sizeof l->name, "%s", li->spec->name);
    l->fwd_ms = cost_ms(flops, bytes, r->flop_rate, r->dev->mem_bandwidth) + m.kernels * launch;
    l->bwd_ms = cost_ms(PT_ANALYTIC_BWD_FACTOR * flops, PT_ANALYTIC_BWD_FACTOR * bytes,
                        r->flop_rate, r->dev->mem_bandwidth) +
                kernels_bwd * launch;
    l->recompute_ms = l->fwd_ms;
    {
        double cf = 0, cb = 0;
        int ck = 0;
        attention_core(li->spec, li->rank, li->dims, r->x.e, r->x.selective, &cf, &cb, &ck);
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
        bytes_of(((has_params(li->spec) ? out * r->x.e : 0) + m.keep) * b, &l->keep_bytes) < 0)
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
        layer_memory(&r->x, li.spec, &li.rank, li.dims, &ignore);
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

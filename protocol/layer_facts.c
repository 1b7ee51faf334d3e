/* The facts of the built-in layer kinds (protocol/layer_kind.h), a section
 * per kind: its JSON fields, shape inference with its parameters and FLOPs,
 * its analytic memory (the layout rules of planner/analytic.h) and its
 * checkpoint tensors, then its pt_layer_<name>_facts. Its compute is
 * runtime/layer_<name>.c. */
#include <stdio.h>
#include <string.h>

#include "protocol/layer_kind.h"

static double elems(int rank, const int *dims)
{
    double n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

/* ---- linear ------------------------------------------------------------ */

static const char *const linear_keys[] = {"type", "name", "out", "bias", NULL};

static int linear_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth, pt_layer_spec *l)
{
    (void)depth;
    int rc = pt_jr_int(jr, obj, path, "out", PT_JR_REQUIRED, 0, 1, PT_MODEL_DIM_MAX, &l->out);
    if (rc == 0)
        rc = pt_jr_bool(jr, obj, path, "bias", PT_JR_OPTIONAL, 1, &l->bias);
    return rc;
}

static int linear_write(cJSON *obj, const pt_layer_spec *l)
{
    if (!pt_jr_add_number(obj, "out", l->out))
        return PT_ENOMEM;
    if (!l->bias && !cJSON_AddFalseToObject(obj, "bias"))
        return PT_ENOMEM;
    return 0;
}

static int linear_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                        pt_layer_shape *io)
{
    (void)depth;
    int rc = pt_layer_check_size(c->jr, path, "out", l->out);
    if (rc < 0)
        return rc;
    int64_t in = io->dims[io->rank - 1];
    int64_t rows = pt_layer_shape_elems(io) / in;
    io->dims[io->rank - 1] = l->out;
    io->params = in * l->out + (l->bias ? l->out : 0);
    io->fwd_flops = 2.0 * (double)in * l->out * (double)rows;
    return 0;
}

static int linear_tensors(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int rank,
                          const int *dims, pt_error *err)
{
    (void)depth, (void)err;
    pt_layer_tensor_add(t, "weight", 2, rank > 0 ? dims[rank - 1] : 0, l->out);
    if (l->bias)
        pt_layer_tensor_add(t, "bias", 1, l->out, 0);
    return 0;
}

const pt_layer_facts pt_layer_linear_facts = {.keys = linear_keys,
                                              .parse = linear_parse,
                                              .write = linear_write,
                                              .shape = linear_shape,
                                              .tensors = linear_tensors};

/* ---- relu, gelu -------------------------------------------------------- */

static const char *const plain_keys[] = {"type", "name", NULL};

static int plain_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth, pt_layer_spec *l)
{
    (void)jr, (void)obj, (void)path, (void)depth, (void)l;
    return 0;
}

static int plain_write(cJSON *obj, const pt_layer_spec *l)
{
    (void)obj, (void)l;
    return 0;
}

static int relu_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                      pt_layer_shape *io)
{
    (void)c, (void)l, (void)path, (void)depth;
    io->fwd_flops = PT_FLOPS_RELU_PER_ELEM * (double)pt_layer_shape_elems(io);
    return 0;
}

static int gelu_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                      pt_layer_shape *io)
{
    (void)c, (void)l, (void)path, (void)depth;
    io->fwd_flops = PT_FLOPS_GELU_PER_ELEM * (double)pt_layer_shape_elems(io);
    return 0;
}

/* the chain keeps their input and output; nothing else */
const pt_layer_facts pt_layer_relu_facts = {
    .keys = plain_keys, .parse = plain_parse, .write = plain_write, .shape = relu_shape};
const pt_layer_facts pt_layer_gelu_facts = {
    .keys = plain_keys, .parse = plain_parse, .write = plain_write, .shape = gelu_shape};

/* ---- layernorm --------------------------------------------------------- */

static const char *const layernorm_keys[] = {"type", "name", "eps", NULL};

static int layernorm_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth,
                           pt_layer_spec *l)
{
    (void)depth;
    double eps;
    pt_jr_range r = {0.0, 1.0, 1, 1};
    int rc = pt_jr_num(jr, obj, path, "eps", PT_JR_OPTIONAL, PT_LAYERNORM_EPS_DEFAULT, r, &eps);
    if (rc == 0)
        l->eps = (float)eps;
    if (rc == 0 && !(l->eps > 0.0f))
        rc = pt_jr_fail(jr, PT_ERANGE, path, "eps", "must be > 0 (got %g)", eps);
    return rc;
}

static int layernorm_write(cJSON *obj, const pt_layer_spec *l)
{
    if (l->eps != PT_LAYERNORM_EPS_DEFAULT &&
        !pt_jr_add_number(obj, "eps", pt_jr_short_float(l->eps)))
        return PT_ENOMEM;
    return 0;
}

static int layernorm_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path,
                           int depth, pt_layer_shape *io)
{
    (void)depth;
    if (!(l->eps > 0.0f && l->eps < 1.0f))
        return pt_jr_fail(c->jr, PT_ERANGE, path, "eps", "must be in (0, 1) (got %g)",
                          (double)l->eps);
    io->params = 2LL * io->dims[io->rank - 1];
    io->fwd_flops = PT_FLOPS_LAYERNORM_PER_ELEM * (double)pt_layer_shape_elems(io);
    return 0;
}

/* a mean and 1/std per row; Korthikanti et al. leave them out */
static void layernorm_memory(const pt_layer_layout *x, const pt_layer_spec *l, int rank,
                             const int *dims, pt_layer_mem *m)
{
    (void)l;
    double in = elems(rank, dims), last = dims[rank - 1];
    m->saved = x->megatron ? 0 : PT_ANALYTIC_LAYERNORM_STATS * (in / last) * x->e;
}

static int layernorm_tensors(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int rank,
                             const int *dims, pt_error *err)
{
    (void)l, (void)depth, (void)err;
    int64_t last = rank > 0 ? dims[rank - 1] : 0;
    pt_layer_tensor_add(t, "gain", 1, last, 0);
    pt_layer_tensor_add(t, "bias", 1, last, 0);
    return 0;
}

const pt_layer_facts pt_layer_layernorm_facts = {.keys = layernorm_keys,
                                                 .parse = layernorm_parse,
                                                 .write = layernorm_write,
                                                 .shape = layernorm_shape,
                                                 .memory = layernorm_memory,
                                                 .tensors = layernorm_tensors};

/* ---- embedding --------------------------------------------------------- */

static const char *const embedding_keys[] = {"type", "name", "vocab", "dim", "positional", NULL};

static int embedding_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth,
                           pt_layer_spec *l)
{
    (void)depth;
    int rc = pt_jr_int(jr, obj, path, "vocab", PT_JR_REQUIRED, 0, 1, PT_MODEL_DIM_MAX, &l->vocab);
    if (rc == 0)
        rc = pt_jr_int(jr, obj, path, "dim", PT_JR_REQUIRED, 0, 1, PT_MODEL_DIM_MAX, &l->dim);
    if (rc == 0)
        rc = pt_jr_bool(jr, obj, path, "positional", PT_JR_OPTIONAL, 1, &l->positional);
    return rc;
}

static int embedding_write(cJSON *obj, const pt_layer_spec *l)
{
    if (!pt_jr_add_number(obj, "vocab", l->vocab) || !pt_jr_add_number(obj, "dim", l->dim))
        return PT_ENOMEM;
    if (!l->positional && !cJSON_AddFalseToObject(obj, "positional"))
        return PT_ENOMEM;
    return 0;
}

static int embedding_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path,
                           int depth, pt_layer_shape *io)
{
    int rc;
    if ((rc = pt_layer_check_size(c->jr, path, "vocab", l->vocab)) < 0 ||
        (rc = pt_layer_check_size(c->jr, path, "dim", l->dim)) < 0)
        return rc;
    /* Where an embedding may stand is checked by the chain; here io is the
     * model input, [T] token ids. */
    if (depth > 0 || io->rank != 1)
        return pt_jr_fail(c->jr, PT_EINVAL, path, "type",
                          "embedding must be the first layer of a tokens model");
    int64_t t = io->dims[0];
    io->rank = 2;
    io->dims[1] = l->dim;
    io->params = (int64_t)l->vocab * l->dim + (l->positional ? t * l->dim : 0);
    io->fwd_flops = l->positional ? (double)t * l->dim : 0.0;
    return 0;
}

/* a gather and (positional) an addition; Megatron keeps the embedding
 * dropout's mask of its output */
static void embedding_memory(const pt_layer_layout *x, const pt_layer_spec *l, int rank,
                             const int *dims, pt_layer_mem *m)
{
    m->kernels = 1 + (l->positional != 0);
    if (x->megatron)
        m->saved = elems(rank, dims) * l->dim * PT_ANALYTIC_MASK_BYTES;
}

static int embedding_tensors(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int rank,
                             const int *dims, pt_error *err)
{
    (void)depth;
    if (rank >= PT_SHAPE_MAX)
        return pt_error_set(err, PT_EINVAL, "%s: input of rank %d is too deep", l->name, rank);
    pt_layer_tensor_add(t, "table", 2, l->vocab, l->dim);
    if (l->positional)
        pt_layer_tensor_add(t, "pos", 2, dims[0], l->dim);
    return 0;
}

const pt_layer_facts pt_layer_embedding_facts = {.keys = embedding_keys,
                                                 .parse = embedding_parse,
                                                 .write = embedding_write,
                                                 .shape = embedding_shape,
                                                 .memory = embedding_memory,
                                                 .tensors = embedding_tensors};

/* ---- attention --------------------------------------------------------- */

static const char *const attention_keys[] = {"type", "name", "heads", "fused", NULL};

static int attention_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth,
                           pt_layer_spec *l)
{
    (void)depth;
    int rc = pt_jr_int(jr, obj, path, "heads", PT_JR_REQUIRED, 0, 1, PT_MODEL_DIM_MAX, &l->heads);
    if (rc == 0)
        rc = pt_jr_bool(jr, obj, path, "fused", PT_JR_OPTIONAL, 0, &l->fused);
    return rc;
}

/* "fused" is written only when set: an unfused model's JSON is unchanged. */
static int attention_write(cJSON *obj, const pt_layer_spec *l)
{
    if (!pt_jr_add_number(obj, "heads", l->heads))
        return PT_ENOMEM;
    if (l->fused && !cJSON_AddTrueToObject(obj, "fused"))
        return PT_ENOMEM;
    return 0;
}

static int attention_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path,
                           int depth, pt_layer_shape *io)
{
    (void)depth;
    int rc = pt_layer_check_size(c->jr, path, "heads", l->heads);
    if (rc < 0)
        return rc;
    if (io->rank != 2) {
        char s[64];
        pt_layer_shape_str(s, sizeof s, io);
        return pt_jr_fail(c->jr, PT_EINVAL, path, "type", "attention needs a [T,D] input (got %s)",
                          s);
    }
    double t = io->dims[0];
    int64_t d = io->dims[1];
    if (d % l->heads != 0)
        return pt_jr_fail(c->jr, PT_EINVAL, path, "heads",
                          "%d heads do not divide the model width %lld", l->heads, (long long)d);
    /* Wqkv [D,3D] + bias 3D, Wo [D,D] + bias D. */
    io->params = d * 3 * d + 3 * d + d * d + d;
    /* QKV projection, scores Q K^T and weights x V (T x T x D each), output projection. */
    io->fwd_flops = 2.0 * t * (double)d * 3.0 * (double)d + 2.0 * t * t * (double)d * 2.0 +
                    2.0 * t * (double)d * (double)d;
    return 0;
}

/* Attention on [T, D] with H heads: Q, K, V and the context, TD each, and
 * per head the T x T probabilities (the runtime) or, in Megatron's layout,
 * the softmax output, its dropout mask (one byte) and the dropout output,
 * which selective recomputation recomputes instead of keeping. A fused layer
 * keeps instead each query row's softmax statistics (fp32) and its backward
 * uses a delta per row for scratch; its dropout mask, in Megatron's layout,
 * is regenerated from the generator's state, as FlashAttention's is. */
static void attention_memory(const pt_layer_layout *x, const pt_layer_spec *l, int rank,
                             const int *dims, pt_layer_mem *m)
{
    (void)rank;
    double T = dims[0], D = dims[1], H = l->heads;
    double qkvc = (PT_ANALYTIC_QKV + 1) * T * D * x->e, probs = H * T * T;
    if (l->fused) {
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

/* The scores and the probabilities: what selective recomputation runs
 * again, and a fused layer's backward always (tile by tile). */
static void attention_core(const pt_layer_spec *l, int rank, const int *dims, double e,
                           int selective, double *flops, double *bytes, int *kernels)
{
    if (rank != 2 || !(selective || l->fused))
        return;
    double T = dims[0], D = dims[1], H = l->heads;
    *flops += PT_ANALYTIC_ATTENTION_CORE_FLOPS * T * T * D;
    *bytes += PT_ANALYTIC_ATTENTION_CORE_PASSES * H * T * T * e;
    *kernels += PT_ANALYTIC_ATTENTION_CORE_KERNELS;
}

static int attention_tensors(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int rank,
                             const int *dims, pt_error *err)
{
    (void)l, (void)depth, (void)err;
    int64_t last = rank > 0 ? dims[rank - 1] : 0;
    pt_layer_tensor_add(t, "wqkv", 2, last, 3 * last);
    pt_layer_tensor_add(t, "bqkv", 1, 3 * last, 0);
    pt_layer_tensor_add(t, "wo", 2, last, last);
    pt_layer_tensor_add(t, "bo", 1, last, 0);
    return 0;
}

const pt_layer_facts pt_layer_attention_facts = {.keys = attention_keys,
                                                 .parse = attention_parse,
                                                 .write = attention_write,
                                                 .shape = attention_shape,
                                                 .memory = attention_memory,
                                                 .core = attention_core,
                                                 .tensors = attention_tensors};

/* ---- residual ---------------------------------------------------------- */

static const char *const residual_keys[] = {"type", "name", "body", NULL};

static int residual_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth,
                          pt_layer_spec *l)
{
    if (depth + 1 > PT_MODEL_NESTING_MAX)
        return pt_jr_fail(jr, PT_ERANGE, path, "body", "residual bodies nested more than %d deep",
                          PT_MODEL_NESTING_MAX);
    const cJSON *arr;
    int n;
    int rc = pt_jr_array(jr, obj, path, "body", PT_JR_REQUIRED, 1, &arr, &n);
    if (rc < 0)
        return rc;
    char bpath[PT_JPATH_MAX];
    pt_jr_join(bpath, sizeof bpath, path, "body");
    if (n > PT_MODEL_LAYERS_MAX)
        return pt_jr_fail(jr, PT_ERANGE, bpath, NULL, "more than %d layers", PT_MODEL_LAYERS_MAX);
    rc = pt_layer_parse_chain(jr, arr, n, bpath, depth + 1, &l->body);
    if (rc == 0)
        l->body_count = n;
    return rc;
}

static int residual_write(cJSON *obj, const pt_layer_spec *l)
{
    cJSON *body = pt_layer_write_chain(l->body, l->body_count);
    if (!body)
        return PT_ENOMEM;
    cJSON_AddItemToObject(obj, "body", body);
    return 0;
}

static int residual_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path,
                          int depth, pt_layer_shape *io)
{
    char bpath[PT_JPATH_MAX];
    pt_jr_join(bpath, sizeof bpath, path, "body");
    if (!l->body || l->body_count < 1)
        return pt_jr_fail(c->jr, PT_EINVAL, bpath, NULL, "must not be empty");
    if (depth + 1 > PT_MODEL_NESTING_MAX)
        return pt_jr_fail(c->jr, PT_ERANGE, bpath, NULL, "residual bodies nested more than %d deep",
                          PT_MODEL_NESTING_MAX);
    pt_layer_shape out = *io;
    int rc = pt_layer_shape_chain(c, l->body, l->body_count, bpath, depth + 1, &out, NULL);
    if (rc < 0)
        return rc;
    int same = out.rank == io->rank;
    for (int i = 0; same && i < io->rank; i++)
        same = out.dims[i] == io->dims[i];
    if (!same) {
        char a[64], b[64];
        pt_layer_shape_str(a, sizeof a, io);
        pt_layer_shape_str(b, sizeof b, &out);
        return pt_jr_fail(c->jr, PT_EINVAL, bpath, NULL,
                          "changes the shape %s to %s; a residual body must keep it", a, b);
    }
    io->params = out.params;
    io->fwd_flops = out.fwd_flops + PT_FLOPS_RESIDUAL_PER_ELEM * (double)pt_layer_shape_elems(io);
    return 0;
}

/* A residual: its body's inner outputs, saved bytes and (megatron) the
 * dropout mask before the addition; scratch: the body's input gradients but
 * the first, plus its largest scratch. */
static void residual_memory(const pt_layer_layout *x, const pt_layer_spec *l, int rank,
                            const int *in_dims, pt_layer_mem *m)
{
    int dims[PT_SHAPE_MAX];
    memcpy(dims, in_dims, sizeof dims);
    double in = elems(rank, dims), inner = 0, kept = 0, grads = 0, widest = 0;
    int kernels = 1; /* the addition */
    for (int j = 0; j < l->body_count; j++) {
        pt_layer_mem b;
        if (j > 0)
            grads += elems(rank, dims) * x->e;
        pt_layer_memory(x, &l->body[j], &rank, dims, &b);
        if (j + 1 < l->body_count) {
            double out = elems(rank, dims) * x->e;
            inner += out;
            /* the output gradient of an inner body layer with parameters */
            if (pt_layer_has_params(&l->body[j]))
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

static void residual_core(const pt_layer_spec *l, int rank, const int *in_dims, double e,
                          int selective, double *flops, double *bytes, int *kernels)
{
    int dims[PT_SHAPE_MAX];
    memcpy(dims, in_dims, sizeof dims);
    for (int j = 0; j < l->body_count; j++) {
        pt_layer_core(&l->body[j], rank, dims, e, selective, flops, bytes, kernels);
        if (pt_layer_out_shape(&l->body[j], 1, &rank, dims, NULL) < 0)
            return;
    }
}

static int residual_tensors(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int rank,
                            const int *in_dims, pt_error *err)
{
    int dims[PT_SHAPE_MAX];
    memcpy(dims, in_dims, sizeof dims);
    for (int b = 0; b < l->body_count; b++) {
        pt_layer_tensors sub = *t;
        int n = snprintf(sub.prefix, sizeof sub.prefix, "%sbody.%d.", t->prefix, b);
        if (n < 0 || n + 16 >= (int)sizeof sub.prefix)
            return pt_error_set(err, PT_EINVAL, "%s: its tensors' names are too long (%s)", l->name,
                                sub.prefix);
        int rc = pt_layer_tensors_of(&sub, &l->body[b], depth + 1, &rank, dims, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

const pt_layer_facts pt_layer_residual_facts = {.keys = residual_keys,
                                                .parse = residual_parse,
                                                .write = residual_write,
                                                .shape = residual_shape,
                                                .memory = residual_memory,
                                                .core = residual_core,
                                                .tensors = residual_tensors};

/* ---- softmax_xent ------------------------------------------------------ */

static const char *const softmax_keys[] = {"type", "name", "classes", NULL};

static int softmax_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth, pt_layer_spec *l)
{
    (void)depth;
    return pt_jr_int(jr, obj, path, "classes", PT_JR_REQUIRED, 0, 2, PT_MODEL_DIM_MAX, &l->classes);
}

static int softmax_write(cJSON *obj, const pt_layer_spec *l)
{
    return pt_jr_add_number(obj, "classes", l->classes) ? 0 : PT_ENOMEM;
}

static int softmax_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                         pt_layer_shape *io)
{
    (void)depth;
    if (l->classes < 2 || l->classes > PT_MODEL_DIM_MAX)
        return pt_jr_fail(c->jr, PT_ERANGE, path, "classes", "must be in [2, %d] (got %d)",
                          PT_MODEL_DIM_MAX, l->classes);
    int last = io->dims[io->rank - 1];
    if (last != l->classes)
        return pt_jr_fail(c->jr, PT_EINVAL, path, "classes",
                          "%d classes but the layer before gives %d features", l->classes, last);
    io->fwd_flops = PT_FLOPS_SOFTMAX_XENT_PER_ELEM * (double)pt_layer_shape_elems(io);
    return 0;
}

/* one int32 label per row; Megatron also keeps the fp32 logits */
static void softmax_memory(const pt_layer_layout *x, const pt_layer_spec *l, int rank,
                           const int *dims, pt_layer_mem *m)
{
    (void)l;
    double in = elems(rank, dims), last = dims[rank - 1];
    m->saved = (in / last) * PT_ANALYTIC_LABEL_BYTES + (x->megatron ? in * 4 : 0);
}

const pt_layer_facts pt_layer_softmax_xent_facts = {.keys = softmax_keys,
                                                    .parse = softmax_parse,
                                                    .write = softmax_write,
                                                    .shape = softmax_shape,
                                                    .memory = softmax_memory};

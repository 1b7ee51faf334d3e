/* Model spec: parser, writer, shape inference (docs/formats.md, "Model spec").
 *
 * Each layer kind is one row of `kinds`: its JSON name, its fields, and how it
 * reads, writes and infers shapes. A new layer kind is a new row. */
#include "protocol/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/datadir.h"
#include "protocol/fileio.h"
#include "protocol/json_util.h"

/* Shape flowing through a chain during inference, with where it sits. */
typedef struct shape_ctx {
    pt_jr *jr;
    const pt_model_spec *spec;
    int64_t params_total; /* running sum, checked against PT_MODEL_PARAMS_MAX */
} shape_ctx;

typedef struct kind_ops {
    const char *name;
    const char *const *keys; /* every field the layer object may hold */
    int (*parse)(pt_jr *jr, const cJSON *obj, const char *path, int depth, pt_layer_spec *l);
    int (*write)(cJSON *obj, const pt_layer_spec *l); /* 0 or PT_ENOMEM */
    /* io holds the input shape on entry and the layer's figures on return. */
    int (*shape)(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                 pt_layer_shape *io);
} kind_ops;

static const kind_ops *ops_of(pt_layer_kind kind);
static int parse_chain(pt_jr *jr, const cJSON *arr, int n, const char *path, int depth,
                       pt_layer_spec **out);
static cJSON *write_chain(const pt_layer_spec *layers, int n);
static int shape_chain(shape_ctx *c, const pt_layer_spec *layers, int n, const char *path,
                       int depth, pt_layer_shape *io, pt_layer_shape *each);

/* ---- shape helpers ---------------------------------------------------- */

static int64_t elems_of(const pt_layer_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

static void format_shape(char *out, size_t cap, const pt_layer_shape *s)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < s->rank && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%d", i ? "," : "", s->dims[i]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

static int check_size(pt_jr *jr, const char *path, const char *key, int v)
{
    if (v < 1)
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be > 0 (got %d)", v);
    if (v > PT_MODEL_DIM_MAX)
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be <= %d (got %d)", PT_MODEL_DIM_MAX, v);
    return 0;
}

static int add_params(shape_ctx *c, const char *path, int64_t params)
{
    if (params > PT_MODEL_PARAMS_MAX - c->params_total)
        return pt_jr_fail(c->jr, PT_ERANGE, path, NULL, "the model has more than %lld parameters",
                          (long long)PT_MODEL_PARAMS_MAX);
    c->params_total += params;
    return 0;
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

static int linear_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                        pt_layer_shape *io)
{
    (void)depth;
    int rc = check_size(c->jr, path, "out", l->out);
    if (rc < 0)
        return rc;
    int64_t in = io->dims[io->rank - 1];
    int64_t rows = elems_of(io) / in;
    io->dims[io->rank - 1] = l->out;
    io->params = in * l->out + (l->bias ? l->out : 0);
    io->fwd_flops = 2.0 * (double)in * l->out * (double)rows;
    return 0;
}

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

static int relu_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                      pt_layer_shape *io)
{
    (void)c, (void)l, (void)path, (void)depth;
    io->fwd_flops = PT_FLOPS_RELU_PER_ELEM * (double)elems_of(io);
    return 0;
}

static int gelu_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                      pt_layer_shape *io)
{
    (void)c, (void)l, (void)path, (void)depth;
    io->fwd_flops = PT_FLOPS_GELU_PER_ELEM * (double)elems_of(io);
    return 0;
}

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

static int layernorm_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                           pt_layer_shape *io)
{
    (void)depth;
    if (!(l->eps > 0.0f && l->eps < 1.0f))
        return pt_jr_fail(c->jr, PT_ERANGE, path, "eps", "must be in (0, 1) (got %g)",
                          (double)l->eps);
    io->params = 2LL * io->dims[io->rank - 1];
    io->fwd_flops = PT_FLOPS_LAYERNORM_PER_ELEM * (double)elems_of(io);
    return 0;
}

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

static int embedding_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                           pt_layer_shape *io)
{
    int rc;
    if ((rc = check_size(c->jr, path, "vocab", l->vocab)) < 0 ||
        (rc = check_size(c->jr, path, "dim", l->dim)) < 0)
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

static int attention_write(cJSON *obj, const pt_layer_spec *l)
{
    if (!pt_jr_add_number(obj, "heads", l->heads))
        return PT_ENOMEM;
    if (l->fused && !cJSON_AddTrueToObject(obj, "fused"))
        return PT_ENOMEM;
    return 0;
}

static int attention_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                           pt_layer_shape *io)
{
    (void)depth;
    int rc = check_size(c->jr, path, "heads", l->heads);
    if (rc < 0)
        return rc;
    if (io->rank != 2) {
        char s[64];
        format_shape(s, sizeof s, io);
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
    rc = parse_chain(jr, arr, n, bpath, depth + 1, &l->body);
    if (rc == 0)
        l->body_count = n;
    return rc;
}

static int residual_write(cJSON *obj, const pt_layer_spec *l)
{
    cJSON *body = write_chain(l->body, l->body_count);
    if (!body)
        return PT_ENOMEM;
    cJSON_AddItemToObject(obj, "body", body);
    return 0;
}

static int residual_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                          pt_layer_shape *io)
{
    char bpath[PT_JPATH_MAX];
    pt_jr_join(bpath, sizeof bpath, path, "body");
    if (!l->body || l->body_count < 1)
        return pt_jr_fail(c->jr, PT_EINVAL, bpath, NULL, "must not be empty");
    if (depth + 1 > PT_MODEL_NESTING_MAX)
        return pt_jr_fail(c->jr, PT_ERANGE, bpath, NULL, "residual bodies nested more than %d deep",
                          PT_MODEL_NESTING_MAX);
    pt_layer_shape out = *io;
    int rc = shape_chain(c, l->body, l->body_count, bpath, depth + 1, &out, NULL);
    if (rc < 0)
        return rc;
    int same = out.rank == io->rank;
    for (int i = 0; same && i < io->rank; i++)
        same = out.dims[i] == io->dims[i];
    if (!same) {
        char a[64], b[64];
        format_shape(a, sizeof a, io);
        format_shape(b, sizeof b, &out);
        return pt_jr_fail(c->jr, PT_EINVAL, bpath, NULL,
                          "changes the shape %s to %s; a residual body must keep it", a, b);
    }
    io->params = out.params;
    io->fwd_flops = out.fwd_flops + PT_FLOPS_RESIDUAL_PER_ELEM * (double)elems_of(io);
    return 0;
}

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

static int softmax_shape(shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
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
    io->fwd_flops = PT_FLOPS_SOFTMAX_XENT_PER_ELEM * (double)elems_of(io);
    return 0;
}

/* ---- the table --------------------------------------------------------- */

static const kind_ops kinds[PT_LAYER_KIND_COUNT] = {
    [PT_LAYER_LINEAR] = {"linear", linear_keys, linear_parse, linear_write, linear_shape},
    [PT_LAYER_RELU] = {"relu", plain_keys, plain_parse, plain_write, relu_shape},
    [PT_LAYER_GELU] = {"gelu", plain_keys, plain_parse, plain_write, gelu_shape},
    [PT_LAYER_LAYERNORM] = {"layernorm", layernorm_keys, layernorm_parse, layernorm_write,
                            layernorm_shape},
    [PT_LAYER_EMBEDDING] = {"embedding", embedding_keys, embedding_parse, embedding_write,
                            embedding_shape},
    [PT_LAYER_ATTENTION] = {"attention", attention_keys, attention_parse, attention_write,
                            attention_shape},
    [PT_LAYER_RESIDUAL] = {"residual", residual_keys, residual_parse, residual_write,
                           residual_shape},
    [PT_LAYER_SOFTMAX_XENT] = {"softmax_xent", softmax_keys, softmax_parse, softmax_write,
                               softmax_shape},
};

static const kind_ops *ops_of(pt_layer_kind kind)
{
    if ((int)kind < 0 || kind >= PT_LAYER_KIND_COUNT)
        return NULL;
    return &kinds[kind];
}

const char *pt_layer_kind_name(pt_layer_kind kind)
{
    const kind_ops *ops = ops_of(kind);
    return ops ? ops->name : NULL;
}

int pt_layer_kind_parse(const char *name, pt_layer_kind *out)
{
    for (int k = 0; name && k < PT_LAYER_KIND_COUNT; k++)
        if (!strcmp(kinds[k].name, name)) {
            *out = (pt_layer_kind)k;
            return 0;
        }
    return PT_ENOTFOUND;
}

/* ---- names ------------------------------------------------------------- */

static void default_name(char *out, size_t cap, pt_layer_kind kind, int index)
{
    const char *n = pt_layer_kind_name(kind);
    snprintf(out, cap, "%s%d", n ? n : "layer", index);
}

/* Names end up in file names (per-layer checkpoints), so keep them plain. */
static int check_name(pt_jr *jr, const char *path, const char *key, const char *name)
{
    for (const char *p = name; *p; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-' || ch == '.';
        if (!ok)
            return pt_jr_fail(jr, PT_EINVAL, path, key,
                              "\"%s\" may hold only letters, digits, '_', '-' and '.'", name);
    }
    if (!strcmp(name, ".") || !strcmp(name, ".."))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "\"%s\" is not a usable name", name);
    return 0;
}

/* ---- parsing ----------------------------------------------------------- */

static void free_chain(pt_layer_spec *layers, int n)
{
    if (!layers)
        return;
    for (int i = 0; i < n; i++)
        free_chain(layers[i].body, layers[i].body_count);
    free(layers);
}

static int parse_layer(pt_jr *jr, const cJSON *obj, const char *path, int index, int depth,
                       pt_layer_spec *l)
{
    int rc = pt_jr_is_object(jr, obj, path);
    if (rc < 0)
        return rc;
    char type[PT_NAME_MAX];
    if ((rc = pt_jr_str(jr, obj, path, "type", PT_JR_REQUIRED, NULL, type, sizeof type)) < 0)
        return rc;
    pt_layer_kind kind;
    if (pt_layer_kind_parse(type, &kind) < 0) {
        char list[160] = "";
        size_t n = 0;
        for (int k = 0; k < PT_LAYER_KIND_COUNT && n < sizeof list; k++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", k ? ", " : "", kinds[k].name);
        return pt_jr_fail(jr, PT_EINVAL, path, "type", "unknown layer type \"%s\" (known: %s)",
                          type, list);
    }
    l->kind = kind;
    const kind_ops *ops = ops_of(kind);
    if ((rc = pt_jr_keys(jr, obj, path, ops->keys)) < 0)
        return rc;
    char def[PT_NAME_MAX];
    default_name(def, sizeof def, kind, index);
    if ((rc = pt_jr_str(jr, obj, path, "name", PT_JR_OPTIONAL, def, l->name, sizeof l->name)) < 0 ||
        (rc = check_name(jr, path, "name", l->name)) < 0)
        return rc;
    return ops->parse(jr, obj, path, depth, l);
}

/* Parses n layer objects of arr (at path) into a new array *out. */
static int parse_chain(pt_jr *jr, const cJSON *arr, int n, const char *path, int depth,
                       pt_layer_spec **out)
{
    *out = NULL;
    pt_layer_spec *layers = calloc((size_t)n, sizeof *layers);
    if (!layers)
        return pt_jr_fail(jr, PT_ENOMEM, path, NULL, "out of memory");
    int i = 0, rc = 0;
    for (const cJSON *e = arr->child; e && i < n; e = e->next, i++) {
        char lpath[PT_JPATH_MAX];
        snprintf(lpath, sizeof lpath, "%s[%d]", path, i);
        if ((rc = parse_layer(jr, e, lpath, i, depth, &layers[i])) < 0)
            break;
        for (int j = 0; j < i; j++)
            if (!strcmp(layers[j].name, layers[i].name)) {
                rc = pt_jr_fail(jr, PT_EINVAL, lpath, "name",
                                "\"%s\" is already the name of %s[%d]", layers[i].name, path, j);
                break;
            }
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        free_chain(layers, n);
        return rc;
    }
    *out = layers;
    return 0;
}

static const char *const model_keys[] = {"v", "name", "input", "layers", NULL};
static const char *const input_keys[] = {"kind", "shape", NULL};

static int parse_input(pt_jr *jr, const cJSON *root, pt_model_spec *m)
{
    const cJSON *in = pt_jr_item(root, "input");
    if (!in)
        return pt_jr_fail(jr, PT_EINVAL, "", "input", "missing");
    const cJSON *shape = in;
    const char *spath = "input";
    m->input_kind = PT_INPUT_FLOAT;
    int rc;
    if (cJSON_IsObject(in)) {
        /* The short form "input": [784] is a float input of that shape. */
        if ((rc = pt_jr_keys(jr, in, "input", input_keys)) < 0)
            return rc;
        char kind[16];
        if ((rc = pt_jr_str(jr, in, "input", "kind", PT_JR_OPTIONAL, "float", kind, sizeof kind)) <
            0)
            return rc;
        if (!strcmp(kind, "tokens"))
            m->input_kind = PT_INPUT_TOKENS;
        else if (strcmp(kind, "float"))
            return pt_jr_fail(jr, PT_EINVAL, "input", "kind",
                              "unknown input kind \"%s\" (float or tokens)", kind);
        int n;
        if ((rc = pt_jr_array(jr, in, "input", "shape", PT_JR_REQUIRED, 1, &shape, &n)) < 0)
            return rc;
        spath = "input.shape";
    } else if (!cJSON_IsArray(in)) {
        return pt_jr_fail(jr, PT_EINVAL, "", "input",
                          "must be an object {\"kind\", \"shape\"} or a shape array");
    }
    int n = cJSON_GetArraySize(shape);
    if (n < 1 || n > PT_SHAPE_MAX)
        return pt_jr_fail(jr, PT_EINVAL, spath, NULL, "must have 1 to %d dimensions (got %d)",
                          PT_SHAPE_MAX, n);
    if (m->input_kind == PT_INPUT_TOKENS && n != 1)
        return pt_jr_fail(jr, PT_EINVAL, spath, NULL,
                          "a tokens input is one sequence length [T] (got %d dimensions)", n);
    int i = 0;
    for (const cJSON *e = shape->child; e; e = e->next, i++) {
        char p[PT_JPATH_MAX];
        snprintf(p, sizeof p, "%s[%d]", spath, i);
        if ((rc = pt_jr_elem_int(jr, e, p, 1, PT_MODEL_DIM_MAX, &m->input[i])) < 0)
            return rc;
    }
    m->input_rank = n;
    return 0;
}

/* ---- shape inference --------------------------------------------------- */

/* Infers the chain's shapes from io (its input); leaves io as its output
 * with params and fwd_flops summed over the chain. each (may be NULL)
 * receives every layer's own figures. */
static int shape_chain(shape_ctx *c, const pt_layer_spec *layers, int n, const char *path,
                       int depth, pt_layer_shape *io, pt_layer_shape *each)
{
    pt_layer_shape cur = *io;
    int64_t params = 0;
    double flops = 0.0;
    int top = depth == 0;
    for (int i = 0; i < n; i++) {
        const pt_layer_spec *l = &layers[i];
        char lpath[PT_JPATH_MAX];
        snprintf(lpath, sizeof lpath, "%s[%d]", path, i);
        const kind_ops *ops = ops_of(l->kind);
        if (!ops)
            return pt_jr_fail(c->jr, PT_EINVAL, lpath, "type", "unknown layer kind %d",
                              (int)l->kind);
        int tokens = c->spec->input_kind == PT_INPUT_TOKENS;
        if (l->kind == PT_LAYER_EMBEDDING && !(top && i == 0))
            return pt_jr_fail(c->jr, PT_EINVAL, lpath, "type",
                              "embedding must be the first layer of the model");
        if (l->kind == PT_LAYER_EMBEDDING && !tokens)
            return pt_jr_fail(c->jr, PT_EINVAL, lpath, "type",
                              "embedding needs a tokens input (input.kind is float)");
        if (top && i == 0 && tokens && l->kind != PT_LAYER_EMBEDDING)
            return pt_jr_fail(c->jr, PT_EINVAL, lpath, "type",
                              "a tokens model must start with an embedding layer (got %s)",
                              ops->name);
        if (l->kind == PT_LAYER_SOFTMAX_XENT && !(top && i == n - 1))
            return pt_jr_fail(c->jr, PT_EINVAL, lpath, "type",
                              "softmax_xent must be the last layer of the model");
        if (top && i == n - 1 && l->kind != PT_LAYER_SOFTMAX_XENT)
            return pt_jr_fail(c->jr, PT_EINVAL, lpath, "type",
                              "the last layer must be softmax_xent (got %s)", ops->name);
        cur.params = 0;
        cur.fwd_flops = 0.0;
        int rc = ops->shape(c, l, lpath, depth, &cur);
        if (rc < 0)
            return rc;
        cur.out_elems = 1;
        for (int d = 0; d < cur.rank; d++) {
            if (cur.dims[d] < 1 || cur.dims[d] > PT_MODEL_ELEMS_MAX / cur.out_elems)
                return pt_jr_fail(c->jr, PT_ERANGE, lpath, NULL,
                                  "output of more than %lld floats per sample",
                                  (long long)PT_MODEL_ELEMS_MAX);
            cur.out_elems *= cur.dims[d];
        }
        /* A residual's params are its body's, already counted there. */
        if (l->kind != PT_LAYER_RESIDUAL && (rc = add_params(c, lpath, cur.params)) < 0)
            return rc;
        if (each)
            each[i] = cur;
        params += cur.params;
        flops += cur.fwd_flops;
    }
    *io = cur;
    io->params = params;
    io->fwd_flops = flops;
    return 0;
}

static int spec_shapes(pt_jr *jr, const pt_model_spec *spec, pt_layer_shape *shapes)
{
    if (spec->input_rank < 1 || spec->input_rank > PT_SHAPE_MAX)
        return pt_jr_fail(jr, PT_EINVAL, "input.shape", NULL, "must have 1 to %d dimensions",
                          PT_SHAPE_MAX);
    if (spec->input_kind == PT_INPUT_TOKENS && spec->input_rank != 1)
        return pt_jr_fail(jr, PT_EINVAL, "input.shape", NULL,
                          "a tokens input is one sequence length [T]");
    pt_layer_shape io = {0};
    io.rank = spec->input_rank;
    io.out_elems = 1;
    for (int i = 0; i < spec->input_rank; i++) {
        if (spec->input[i] < 1 || spec->input[i] > PT_MODEL_DIM_MAX)
            return pt_jr_fail(jr, PT_ERANGE, "input.shape", NULL,
                              "dimension %d must be in [1, %d] (got %d)", i, PT_MODEL_DIM_MAX,
                              spec->input[i]);
        io.dims[i] = spec->input[i];
        if (io.out_elems > PT_MODEL_ELEMS_MAX / spec->input[i])
            return pt_jr_fail(jr, PT_ERANGE, "input.shape", NULL,
                              "more than %lld floats per sample", (long long)PT_MODEL_ELEMS_MAX);
        io.out_elems *= spec->input[i];
    }
    if (spec->layer_count < 1 || !spec->layers)
        return pt_jr_fail(jr, PT_EINVAL, "layers", NULL, "must not be empty");
    shape_ctx c = {jr, spec, 0};
    return shape_chain(&c, spec->layers, spec->layer_count, "layers", 0, &io, shapes);
}

int pt_model_spec_shapes(const pt_model_spec *spec, pt_layer_shape *shapes, pt_error *err)
{
    char source[PT_NAME_MAX + 8];
    snprintf(source, sizeof source, "model %s", spec && spec->name[0] ? spec->name : "?");
    pt_jr jr = {source, err};
    if (!spec || !shapes)
        return pt_jr_fail(&jr, PT_EINVAL, "", NULL, "no spec or no shapes array");
    return spec_shapes(&jr, spec, shapes);
}

int64_t pt_model_spec_input_elems(const pt_model_spec *spec)
{
    int64_t n = 1;
    for (int i = 0; i < spec->input_rank; i++)
        n *= spec->input[i];
    return n;
}

int pt_model_spec_parse(const char *json, const char *source, pt_model_spec **out, pt_error *err)
{
    *out = NULL;
    pt_jr jr = {source, err};
    cJSON *root;
    int rc = pt_jr_parse(&jr, json, &root);
    if (rc < 0)
        return rc;
    rc = pt_model_spec_from_tree(root, source, out, err);
    cJSON_Delete(root);
    return rc;
}

int pt_model_spec_from_tree(const cJSON *root, const char *source, pt_model_spec **out,
                            pt_error *err)
{
    *out = NULL;
    pt_jr jr = {source, err};
    int rc = pt_jr_check_root(&jr, root);
    if (rc < 0)
        return rc;
    pt_model_spec *m = calloc(1, sizeof *m);
    pt_layer_shape *shapes = NULL;
    if (!m) {
        rc = pt_jr_fail(&jr, PT_ENOMEM, "", NULL, "out of memory");
        goto done;
    }
    const cJSON *arr;
    int n;
    if ((rc = pt_jr_keys(&jr, root, "", model_keys)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "name", PT_JR_REQUIRED, NULL, m->name, sizeof m->name)) <
            0 ||
        (rc = check_name(&jr, "", "name", m->name)) < 0 || (rc = parse_input(&jr, root, m)) < 0 ||
        (rc = pt_jr_array(&jr, root, "", "layers", PT_JR_REQUIRED, 1, &arr, &n)) < 0)
        goto done;
    if (n > PT_MODEL_LAYERS_MAX) {
        rc = pt_jr_fail(&jr, PT_ERANGE, "layers", NULL, "more than %d layers", PT_MODEL_LAYERS_MAX);
        goto done;
    }
    if ((rc = parse_chain(&jr, arr, n, "layers", 0, &m->layers)) < 0)
        goto done;
    m->layer_count = n;
    shapes = calloc((size_t)n, sizeof *shapes);
    if (!shapes) {
        rc = pt_jr_fail(&jr, PT_ENOMEM, "", NULL, "out of memory");
        goto done;
    }
    rc = spec_shapes(&jr, m, shapes);
done:
    free(shapes);
    if (rc < 0)
        pt_model_spec_free(&m);
    *out = m;
    return rc;
}

int pt_model_spec_load(const char *path, pt_model_spec **out, pt_error *err)
{
    *out = NULL;
    char *text;
    int rc = pt_file_read(path, &text, NULL, err);
    if (rc < 0)
        return rc;
    rc = pt_model_spec_parse(text, path, out, err);
    free(text);
    return rc;
}

int pt_model_spec_find(const char *name, pt_model_spec **out, pt_error *err)
{
    *out = NULL;
    char path[PT_DATADIR_PATH_MAX];
    int rc = pt_datadir_lookup("model", "models", "PT_MODELS_DIR", name, path, sizeof path, err);
    return rc < 0 ? rc : pt_model_spec_load(path, out, err);
}

/* ---- writing ----------------------------------------------------------- */

static cJSON *write_chain(const pt_layer_spec *layers, int n)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr)
        return NULL;
    for (int i = 0; i < n; i++) {
        const pt_layer_spec *l = &layers[i];
        const kind_ops *ops = ops_of(l->kind);
        cJSON *o = cJSON_CreateObject();
        if (!o || !ops) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, o);
        char def[PT_NAME_MAX];
        default_name(def, sizeof def, l->kind, i);
        if (!cJSON_AddStringToObject(o, "type", ops->name) ||
            (strcmp(l->name, def) && !cJSON_AddStringToObject(o, "name", l->name)) ||
            ops->write(o, l) < 0) {
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

char *pt_model_spec_to_json(const pt_model_spec *spec)
{
    return pt_jr_print_and_delete(pt_model_spec_to_tree(spec));
}

cJSON *pt_model_spec_to_tree(const pt_model_spec *spec)
{
    if (!spec)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *input = cJSON_CreateObject();
    cJSON *shape = cJSON_CreateArray();
    cJSON *layers = write_chain(spec->layers, spec->layer_count);
    if (!root || !input || !shape || !layers) {
        cJSON_Delete(root);
        cJSON_Delete(input);
        cJSON_Delete(shape);
        cJSON_Delete(layers);
        return NULL;
    }
    pt_jr_add_number(root, "v", PT_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "name", spec->name);
    cJSON_AddItemToObject(root, "input", input);
    cJSON_AddStringToObject(input, "kind",
                            spec->input_kind == PT_INPUT_TOKENS ? "tokens" : "float");
    cJSON_AddItemToObject(input, "shape", shape);
    for (int i = 0; i < spec->input_rank && i < PT_SHAPE_MAX; i++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(spec->input[i]));
    cJSON_AddItemToObject(root, "layers", layers);
    return root;
}

int pt_model_spec_save(const pt_model_spec *spec, const char *path, pt_error *err)
{
    return pt_file_save_text(path, pt_model_spec_to_json(spec), err);
}

static int copy_chain(const pt_layer_spec *from, int n, pt_layer_spec **out)
{
    *out = NULL;
    if (n <= 0)
        return 0;
    pt_layer_spec *l = calloc((size_t)n, sizeof *l);
    if (!l)
        return PT_ENOMEM;
    for (int i = 0; i < n; i++) {
        l[i] = from[i];
        l[i].body = NULL;
        if (copy_chain(from[i].body, from[i].body_count, &l[i].body) < 0) {
            free_chain(l, i);
            return PT_ENOMEM;
        }
    }
    *out = l;
    return 0;
}

int pt_model_spec_copy(const pt_model_spec *spec, pt_model_spec **out, pt_error *err)
{
    *out = NULL;
    if (!spec)
        return 0;
    pt_model_spec *m = malloc(sizeof *m);
    if (!m)
        return pt_error_set(err, PT_ENOMEM, "model: out of memory");
    *m = *spec;
    if (copy_chain(spec->layers, spec->layer_count, &m->layers) < 0) {
        free(m);
        return pt_error_set(err, PT_ENOMEM, "model: out of memory");
    }
    *out = m;
    return 0;
}

void pt_model_spec_free(pt_model_spec **spec_p)
{
    if (!spec_p || !*spec_p)
        return;
    free_chain((*spec_p)->layers, (*spec_p)->layer_count);
    free(*spec_p);
    *spec_p = NULL;
}

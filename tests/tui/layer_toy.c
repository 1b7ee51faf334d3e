/* A throw-away layer kind, toy_bias (y = x + b over the last dimension, a
 * learned b), written as a new kind is: this one file and one line in the
 * list of kinds. It is compiled only into pipetop-layer-toy, the product's
 * sources built again with that line added (CMakeLists.txt, "a new layer
 * kind"), which tests/tui/layer_kind_test.sh runs; the real pipetop does not
 * know it.
 *
 * Its facts (protocol/layer_kind.h): no fields of its own; output shape the
 * input's; parameters b [D]; one FLOP per element; two kernels (a copy and
 * the broadcast addition) and nothing saved beyond its input and output;
 * one checkpoint tensor, "bias" [D]. Its compute (runtime/layer.h) on any
 * backend: forward y = x, y += b; backward dx = dy, db += column sums of dy. */
#include "protocol/layer_kind.h"
#include "runtime/layer.h"

/* ---- facts ---- */

static const char *const toy_keys[] = {"type", "name", NULL};

static int toy_parse(pt_jr *jr, const cJSON *obj, const char *path, int depth, pt_layer_spec *l)
{
    (void)jr, (void)obj, (void)path, (void)depth, (void)l;
    return 0;
}

static int toy_write(cJSON *obj, const pt_layer_spec *l)
{
    (void)obj, (void)l;
    return 0;
}

static int toy_shape(pt_layer_shape_ctx *c, const pt_layer_spec *l, const char *path, int depth,
                     pt_layer_shape *io)
{
    (void)c, (void)l, (void)path, (void)depth;
    io->params = io->dims[io->rank - 1];
    io->fwd_flops = (double)pt_layer_shape_elems(io);
    return 0;
}

static void toy_memory(const pt_layer_layout *x, const pt_layer_spec *l, int rank, const int *dims,
                       pt_layer_mem *m)
{
    (void)x, (void)l, (void)rank, (void)dims;
    m->kernels = 2;
}

static int toy_tensors(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int rank,
                       const int *dims, pt_error *err)
{
    (void)l, (void)depth, (void)err;
    pt_layer_tensor_add(t, "bias", 1, dims[rank - 1], 0);
    return 0;
}

const pt_layer_facts pt_layer_toy_bias_facts = {.keys = toy_keys,
                                                .parse = toy_parse,
                                                .write = toy_write,
                                                .shape = toy_shape,
                                                .memory = toy_memory,
                                                .tensors = toy_tensors};

/* ---- compute ---- */

static int width(const pt_layer *l)
{
    return l->in_dims[l->in_rank - 1];
}

static int toy_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    (void)spec, (void)max_batch, (void)err;
    pt_layer_same_shape(l);
    l->param_count = width(l);
    return 0;
}

static void toy_init(const pt_layer *l, float *w)
{
    for (int i = 0; i < width(l); i++)
        w[i] = 0.01f * (float)(i % 5) - 0.02f;
}

static int toy_forward(const pt_layer *l, pt_layer_run *r)
{
    int64_t n = r->n * l->in_elems;
    r->be->copy(r->be, r->y, r->x, (size_t)n * sizeof(float));
    r->be->add_row_vector(r->be, (int)(n / width(l)), width(l), r->w, r->y);
    return 0;
}

static void toy_backward_input(const pt_layer *l, pt_layer_run *r)
{
    if (r->dx)
        r->be->copy(r->be, r->dx, r->dy, (size_t)(r->n * l->in_elems) * sizeof(float));
}

static void toy_backward_weight(const pt_layer *l, pt_layer_run *r)
{
    r->be->col_sum(r->be, (int)(r->n * l->in_elems / width(l)), width(l), r->dy, 1.0f, r->dw);
}

static void toy_backward(const pt_layer *l, pt_layer_run *r)
{
    toy_backward_weight(l, r);
    toy_backward_input(l, r);
}

const pt_layer_ops pt_layer_toy_bias_ops = {
    .name = "toy_bias",
    .create = toy_create,
    .init_params = toy_init,
    .forward = toy_forward,
    .backward = toy_backward,
    .backward_input = toy_backward_input,
    .backward_weight = toy_backward_weight,
};

/* Linear: y = x W + b over the last dimension; W [in, out], b [out]. One
 * gemm over all n*rows_per_sample rows per call. */
#include <math.h>

#include "runtime/gemm_small.h"
#include "runtime/layer.h"
#include "runtime/rng.h"

/* be->gemm, or on the CPU backend the small-M kernels where they take the
 * shape (runtime/gemm_small.h): OpenBLAS would repack the weight matrix on
 * every micro-batch. The forward always goes through them when they run, so
 * a micro-batch's rows come out bit for bit as they would in a whole batch
 * (pipeline and single-device training see the same forward). */
static void linear_gemm(const pt_backend *be, pt_trans ta, pt_trans tb, int m, int n, int k,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc)
{
    if (be == pt_backend_cpu() &&
        pt_gemm_small(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc))
        return;
    be->gemm(be, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

static int linear_create(pt_layer *l, const pt_layer_spec *spec, int max_batch, pt_error *err)
{
    (void)spec;
    (void)max_batch;
    int in = l->in_dims[l->in_rank - 1];
    if (l->spec.out < 1)
        return pt_error_set(err, PT_EINVAL, "out: %d must be positive", l->spec.out);
    pt_layer_same_shape(l);
    l->out_dims[l->out_rank - 1] = l->spec.out;
    l->out_elems = l->in_elems / in * l->spec.out;
    l->param_count = (int64_t)in * l->spec.out + (l->spec.bias ? l->spec.out : 0);
    return 0;
}

/* He-style uniform: U(-sqrt(6/in), sqrt(6/in)) keeps the variance through
 * ReLU layers (deep MLPs train from it); biases start at 0. */
static void linear_init(const pt_layer *l, float *w)
{
    int in = l->in_dims[l->in_rank - 1], out = l->spec.out;
    pt_rng rng = {l->seed_key, 0};
    double bound = sqrt(6.0 / in);
    for (int64_t i = 0; i < (int64_t)in * out; i++)
        w[i] = (float)pt_rng_uniform_range(&rng, -bound, bound);
    if (l->spec.bias)
        for (int j = 0; j < out; j++)
            w[(int64_t)in * out + j] = 0.0f;
}

static int linear_forward(const pt_layer *l, pt_layer_run *r)
{
    int in = l->in_dims[l->in_rank - 1], out = l->spec.out;
    int rows = (int)(r->n * (l->in_elems / in));
    const float *W = r->w, *b = r->w + (int64_t)in * out;
    linear_gemm(r->be, PT_NO_TRANS, PT_NO_TRANS, rows, out, in, r->x, in, W, out, 0.0f, r->y, out);
    if (l->spec.bias)
        r->be->add_row_vector(r->be, rows, out, b, r->y);
    return 0;
}

/* dx = dy W^T: the input gradient (B of a split backward). */
static void linear_backward_input(const pt_layer *l, pt_layer_run *r)
{
    int in = l->in_dims[l->in_rank - 1], out = l->spec.out;
    int rows = (int)(r->n * (l->in_elems / in));
    if (r->dx)
        linear_gemm(r->be, PT_NO_TRANS, PT_TRANS, rows, in, out, r->dy, out, r->w, out, 0.0f, r->dx,
                    in);
}

/* dW += x^T dy, db += column sums of dy: the weight gradient (W). */
static void linear_backward_weight(const pt_layer *l, pt_layer_run *r)
{
    int in = l->in_dims[l->in_rank - 1], out = l->spec.out;
    int rows = (int)(r->n * (l->in_elems / in));
    float *dW = r->dw, *db = r->dw + (int64_t)in * out;
    linear_gemm(r->be, PT_TRANS, PT_NO_TRANS, in, out, rows, r->x, in, r->dy, out, 1.0f, dW, out);
    if (l->spec.bias)
        r->be->col_sum(r->be, rows, out, r->dy, 1.0f, db);
}

/* Gathered W: the runs' rows of x and dy stacked in ws, as many runs at a
 * time as fit, and one gemm over them all (K = their rows) instead of one
 * per micro-batch: a gemm with few rows streams dW through memory for
 * little work. A run too large to stack with another runs alone. */
static void linear_backward_weight_many(const pt_layer *l, const pt_layer_run *runs, int count,
                                        float *ws, int64_t ws_floats)
{
    int in = l->in_dims[l->in_rank - 1], out = l->spec.out;
    int64_t per = l->in_elems / in, cap = ws_floats / (in + out);
    const pt_backend *be = runs[0].be;
    float *dW = runs[0].dw, *db = runs[0].dw + (int64_t)in * out;
    for (int k = 0; k < count;) {
        int64_t rows = 0;
        int j = k;
        while (j < count && rows + runs[j].n * per <= cap)
            rows += runs[j++].n * per;
        if (j - k < 2) {
            linear_backward_weight(l, (pt_layer_run *)&runs[k]);
            k++;
            continue;
        }
        float *xs = ws, *dys = ws + rows * in;
        for (int64_t q = k, r0 = 0; q < j; r0 += runs[q].n * per, q++) {
            int64_t rq = runs[q].n * per;
            be->copy(be, xs + r0 * in, runs[q].x, (size_t)(rq * in) * sizeof(float));
            be->copy(be, dys + r0 * out, runs[q].dy, (size_t)(rq * out) * sizeof(float));
        }
        linear_gemm(be, PT_TRANS, PT_NO_TRANS, in, out, (int)rows, xs, in, dys, out, 1.0f, dW, out);
        if (l->spec.bias)
            be->col_sum(be, (int)rows, out, dys, 1.0f, db);
        k = j;
    }
}

static void linear_backward(const pt_layer *l, pt_layer_run *r)
{
    linear_backward_weight(l, r);
    linear_backward_input(l, r);
}

const pt_layer_ops pt_layer_linear_ops = {
    .name = "linear",
    .create = linear_create,
    .init_params = linear_init,
    .forward = linear_forward,
    .backward = linear_backward,
    .backward_input = linear_backward_input,
    .backward_weight = linear_backward_weight,
    .backward_weight_many = linear_backward_weight_many,
};

/* Data feed: global batches of a data set in single-device order. See
 * runtime/feed.h. */
#include "runtime/feed.h"

#include <stdlib.h>

#define FEED_STACK_ROWS 256 /* gathered indices held on the stack per call */

struct pt_feed {
    const pt_dataset *ds;
    uint64_t seed;
    int b, M;
    int64_t n, B, per_epoch;
    int64_t epoch; /* whose order is cached; -1 none */
    int64_t *order;
};

int pt_feed_create(const pt_dataset *ds, uint64_t seed, int mb_size, int mb_count, pt_feed **out,
                   pt_error *err)
{
    *out = NULL;
    if (!ds || mb_size < 1 || mb_count < 1)
        return pt_error_set(err, PT_EINVAL,
                            "feed: a data set and positive micro-batching are "
                            "required");
    int64_t n = pt_dataset_count(ds), B = (int64_t)mb_size * mb_count;
    if (n < B)
        return pt_error_set(err, PT_EINVAL,
                            "feed: %s holds %lld samples, fewer than one global batch of %lld",
                            pt_dataset_name(ds), (long long)n, (long long)B);
    pt_feed *f = calloc(1, sizeof *f);
    if (!f || !(f->order = malloc((size_t)n * sizeof(int64_t)))) {
        free(f);
        return pt_error_set(err, PT_ENOMEM, "feed: out of memory for %lld sample indices",
                            (long long)n);
    }
    f->ds = ds;
    f->seed = seed;
    f->b = mb_size;
    f->M = mb_count;
    f->n = n;
    f->B = B;
    f->per_epoch = n / B;
    f->epoch = -1;
    *out = f;
    return 0;
}

void pt_feed_destroy(pt_feed **feed_p)
{
    if (!feed_p || !*feed_p)
        return;
    free((*feed_p)->order);
    free(*feed_p);
    *feed_p = NULL;
}

int64_t pt_feed_batches_per_epoch(const pt_feed *feed)
{
    return feed->per_epoch;
}

int64_t pt_feed_sample(pt_feed *f, int64_t t, int mb, int row)
{
    int64_t e = t / f->per_epoch;
    if (e != f->epoch) {
        pt_data_order(f->n, f->seed, e, f->order);
        f->epoch = e;
    }
    return f->order[(t % f->per_epoch) * f->B + (int64_t)mb * f->b + row];
}

static int load(void *ctx, int64_t t, int mb, int row_lo, int row_hi, float *x, int32_t *labels,
                pt_error *err)
{
    pt_feed *f = ctx;
    if (t < 0 || mb < 0 || mb >= f->M || row_lo < 0 || row_hi > f->b || row_lo >= row_hi)
        return pt_error_set(err, PT_ERANGE,
                            "feed: rows [%d,%d) of micro-batch %d of global batch %lld are outside "
                            "%d micro-batches of %d samples",
                            row_lo, row_hi, mb, (long long)t, f->M, f->b);
    int64_t idx[FEED_STACK_ROWS];
    int64_t in = pt_dataset_input_elems(f->ds);
    int lps = pt_dataset_labels_per_sample(f->ds);
    for (int lo = row_lo; lo < row_hi; lo += FEED_STACK_ROWS) {
        int k = row_hi - lo < FEED_STACK_ROWS ? row_hi - lo : FEED_STACK_ROWS;
        for (int r = 0; r < k; r++)
            idx[r] = pt_feed_sample(f, t, mb, lo + r);
        int off = lo - row_lo;
        int rc = pt_dataset_get_batch(f->ds, idx, k, x ? x + (int64_t)off * in : NULL,
                                      labels ? labels + (int64_t)off * lps : NULL);
        if (rc < 0)
            return pt_error_set(err, rc, "feed: %s: sample index out of range",
                                pt_dataset_name(f->ds));
    }
    return 0;
}

pt_exec_feed pt_feed_as_exec(pt_feed *feed)
{
    pt_exec_feed e = {load, feed};
    return e;
}

/* Timelines of op spans (see tline.h). */
#include "tui/record/tline.h"

#include <stdlib.h>
#include <string.h>

#define TLINE_MIN_CAP 256

void pt_tline_clear(pt_tline *tl)
{
    tl->row_count = 0;
    tl->count = 0;
    tl->fold_count = 0;
    tl->t0 = tl->t1 = 0;
}

void pt_tline_release(pt_tline *tl)
{
    if (!tl)
        return;
    free(tl->rows);
    free(tl->spans);
    free(tl->folds);
    memset(tl, 0, sizeof *tl);
}

/* The first row not before (stage, replica), rows kept in that order: a
 * binary search, as a timeline of 1,024 replicas looks a row up per span. */
static int lower_row(const pt_tline *tl, int stage, int replica)
{
    int lo = 0, hi = tl->row_count;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const pt_tl_row *r = &tl->rows[mid];
        if (r->stage < stage || (r->stage == stage && r->replica < replica))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int row_is(const pt_tline *tl, int at, int stage, int replica)
{
    return at < tl->row_count && tl->rows[at].stage == stage && tl->rows[at].replica == replica;
}

int pt_tline_find_row(const pt_tline *tl, int stage, int replica)
{
    int at = lower_row(tl, stage, replica);
    return row_is(tl, at, stage, replica) ? at : -1;
}

int pt_tline_row(pt_tline *tl, int stage, int replica)
{
    int at = lower_row(tl, stage, replica);
    if (row_is(tl, at, stage, replica))
        return at;
    if (tl->row_count == tl->row_cap) {
        int cap = tl->row_cap ? tl->row_cap * 2 : 16;
        pt_tl_row *r = realloc(tl->rows, sizeof *r * (size_t)cap);
        if (!r)
            return PT_ENOMEM;
        tl->rows = r;
        tl->row_cap = cap;
    }
    memmove(tl->rows + at + 1, tl->rows + at, sizeof *tl->rows * (size_t)(tl->row_count - at));
    tl->rows[at].stage = stage;
    tl->rows[at].replica = replica;
    tl->row_count++;
    for (int64_t i = 0; i < tl->count; i++)
        if (tl->spans[i].row >= at)
            tl->spans[i].row++;
    for (int64_t i = 0; i < tl->fold_count; i++)
        if (tl->folds[i].row >= at)
            tl->folds[i].row++;
    return at;
}

int pt_tline_is_empty(const pt_tline *tl)
{
    return tl->count == 0 && tl->fold_count == 0;
}

/* [t0, t1) grown to hold [start, end). */
static void extend(pt_tline *tl, double start, double end)
{
    int empty = pt_tline_is_empty(tl);
    if (empty || start < tl->t0)
        tl->t0 = start;
    if (empty || end > tl->t1)
        tl->t1 = end;
}

int pt_tline_add(pt_tline *tl, const pt_tl_span *span)
{
    if (tl->count == tl->cap) {
        int64_t cap = tl->cap ? tl->cap * 2 : TLINE_MIN_CAP;
        pt_tl_span *s = realloc(tl->spans, sizeof *s * (size_t)cap);
        if (!s)
            return PT_ENOMEM;
        tl->spans = s;
        tl->cap = cap;
    }
    extend(tl, span->start, span->end);
    tl->spans[tl->count++] = *span;
    return 0;
}

int pt_tline_add_fold(pt_tline *tl, const pt_tl_fold *fold)
{
    if (tl->fold_count == tl->fold_cap) {
        int64_t cap = tl->fold_cap ? tl->fold_cap * 2 : TLINE_MIN_CAP;
        pt_tl_fold *f = realloc(tl->folds, sizeof *f * (size_t)cap);
        if (!f)
            return PT_ENOMEM;
        tl->folds = f;
        tl->fold_cap = cap;
    }
    extend(tl, fold->start, fold->end);
    tl->folds[tl->fold_count++] = *fold;
    return 0;
}

int pt_tline_from_sim(pt_tline *tl, const pt_program *prog, const pt_sim_result *res)
{
    pt_tline_clear(tl);
    for (int w = 0; w < prog->worker_count; w++)
        if (pt_tline_row(tl, prog->workers[w].stage, prog->workers[w].replica) < 0)
            return PT_ENOMEM;
    int M = prog->mb_per_window > 0 ? prog->mb_per_window : 1;
    for (int w = 0; w < prog->worker_count; w++) {
        const pt_worker *wk = &prog->workers[w];
        int row = pt_tline_find_row(tl, wk->stage, wk->replica);
        for (int i = wk->op_begin; i < wk->op_end && i < res->event_count; i++) {
            const pt_op *op = &prog->ops[i];
            const pt_sim_event *ev = &res->events[i];
            pt_tl_span s;
            s.start = ev->start;
            s.end = ev->end;
            s.row = row;
            s.mb = pt_op_has_one_mb(op->kind) ? op->mb : -1;
            s.step = op->mb >= 0 ? op->mb / M : 0;
            s.bytes = op->bytes;
            s.op = op->kind;
            s.lane = ev->lane;
            if (pt_tline_add(tl, &s) < 0)
                return PT_ENOMEM;
        }
    }
    return 0;
}

static int cmp_start(const void *a, const void *b)
{
    double x = ((const pt_tl_span *)a)->start, y = ((const pt_tl_span *)b)->start;
    return x < y ? -1 : x > y;
}

int64_t pt_tline_bubbles(const pt_tline *tl, int row, double lo, double hi, pt_tl_span *out,
                         int64_t cap)
{
    /* collect the row's compute spans overlapping [lo, hi), sorted by start */
    int64_t n = 0;
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        if (s->row == row && s->lane == PT_LANE_COMPUTE && s->end > lo && s->start < hi)
            n++;
    }
    pt_tl_span *c = malloc(sizeof *c * (size_t)(n ? n : 1));
    if (!c)
        return 0;
    int64_t k = 0;
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        if (s->row == row && s->lane == PT_LANE_COMPUTE && s->end > lo && s->start < hi)
            c[k++] = *s;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_start);
    int64_t nb = 0;
    double t = lo;
    for (int64_t i = 0; i <= n; i++) {
        double next = i < n ? c[i].start : hi;
        if (next > hi)
            next = hi;
        if (next > t) {
            if (nb < cap) {
                pt_tl_span *b = &out[nb];
                memset(b, 0, sizeof *b);
                b->start = t;
                b->end = next;
                b->row = row;
                b->mb = -1;
                b->step = i < n ? c[i].step : (n ? c[n - 1].step : 0);
                b->op = PT_OP_KIND_COUNT;
                b->lane = PT_LANE_COMPUTE;
            }
            nb++;
        }
        if (i < n && c[i].end > t)
            t = c[i].end;
    }
    free(c);
    return nb;
}

double pt_tline_busy(const pt_tline *tl, int row, double lo, double hi)
{
    double busy = 0;
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        if (s->row != row || s->lane != PT_LANE_COMPUTE)
            continue;
        double a = s->start > lo ? s->start : lo, b = s->end < hi ? s->end : hi;
        if (b > a)
            busy += b - a;
    }
    return busy;
}

static int cmp_step(const void *a, const void *b)
{
    int64_t x = ((const pt_op_iter *)a)->step, y = ((const pt_op_iter *)b)->step;
    return x < y ? -1 : x > y;
}

/* Step `step` over [lo, hi) into the iterations iv[0..*n): widens its entry
 * or appends one. 0 or PT_ENOMEM (iv freed). */
static int take_iter(pt_op_iter **iv, int64_t *n, int64_t *cap, int64_t step, double lo, double hi)
{
    int64_t k;
    /* steps are few and arrive mostly in order: search from the end */
    for (k = *n - 1; k >= 0 && (*iv)[k].step != step; k--)
        ;
    if (k >= 0) {
        if (lo < (*iv)[k].lo)
            (*iv)[k].lo = lo;
        if (hi > (*iv)[k].hi)
            (*iv)[k].hi = hi;
        return 0;
    }
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        pt_op_iter *q = realloc(*iv, sizeof *q * (size_t)*cap);
        if (!q) {
            free(*iv);
            *iv = NULL;
            return PT_ENOMEM;
        }
        *iv = q;
    }
    (*iv)[*n] = (pt_op_iter){.step = step, .lo = lo, .hi = hi};
    (*n)++;
    return 0;
}

int pt_tline_iters(const pt_tline *tl, pt_op_iter **out, int64_t *n_out)
{
    pt_op_iter *iv = NULL;
    int64_t n = 0, cap = 0;
    *out = NULL;
    *n_out = 0;
    for (int64_t i = 0; i < tl->count; i++)
        if (take_iter(&iv, &n, &cap, tl->spans[i].step, tl->spans[i].start, tl->spans[i].end) < 0)
            return PT_ENOMEM;
    for (int64_t i = 0; i < tl->fold_count; i++)
        if (take_iter(&iv, &n, &cap, tl->folds[i].step, tl->folds[i].start, tl->folds[i].end) < 0)
            return PT_ENOMEM;
    if (!iv && !(iv = malloc(sizeof *iv)))
        return PT_ENOMEM;
    qsort(iv, (size_t)n, sizeof *iv, cmp_step);
    *out = iv;
    *n_out = n;
    return 0;
}

int pt_tline_busy_fracs(const pt_tline *tl, double *busy)
{
    pt_op_iter *iv;
    int64_t n;
    if (pt_tline_iters(tl, &iv, &n) < 0)
        return PT_ENOMEM;
    double occupied = pt_op_iters_time_s(iv, n);
    free(iv);
    for (int r = 0; r < tl->row_count; r++)
        busy[r] = 0;
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        if (pt_op_is_compute(s->op) && s->row >= 0 && s->row < tl->row_count)
            busy[s->row] += s->end - s->start;
    }
    for (int64_t i = 0; i < tl->fold_count; i++) /* a folded stage: its median replica */
        if (tl->folds[i].row >= 0 && tl->folds[i].row < tl->row_count)
            busy[tl->folds[i].row] += tl->folds[i].busy_median;
    for (int r = 0; r < tl->row_count; r++)
        busy[r] = pt_op_busy_frac(busy[r], occupied);
    return 0;
}

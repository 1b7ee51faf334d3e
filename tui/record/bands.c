/* Bands and stragglers (see bands.h). */
#include "tui/record/bands.h"

#include <stdlib.h>
#include <string.h>

#include "protocol/op.h"

void pt_bands_release(pt_bands *b)
{
    if (!b)
        return;
    free(b->stages);
    free(b->rows);
    free(b->figure);
    free(b->slower);
    free(b->stage_of);
    free(b->straggler);
    free(b->by_slowness);
    memset(b, 0, sizeof *b);
}

/* Room for n rows and stages (n bounds both). 0 or PT_ENOMEM. */
static int reserve(pt_bands *b, int n)
{
    if (n <= b->row_cap)
        return 0;
    int cap = n;
    pt_tl_row *rows = realloc(b->rows, sizeof *rows * (size_t)cap);
    if (rows)
        b->rows = rows;
    double *fig = realloc(b->figure, sizeof *fig * (size_t)cap);
    if (fig)
        b->figure = fig;
    double *sl = realloc(b->slower, sizeof *sl * (size_t)cap);
    if (sl)
        b->slower = sl;
    int *so = realloc(b->stage_of, sizeof *so * (size_t)cap);
    if (so)
        b->stage_of = so;
    unsigned char *st = realloc(b->straggler, (size_t)cap);
    if (st)
        b->straggler = st;
    int *bs = realloc(b->by_slowness, sizeof *bs * (size_t)cap);
    if (bs)
        b->by_slowness = bs;
    pt_band_stage *sg = realloc(b->stages, sizeof *sg * (size_t)cap);
    if (sg)
        b->stages = sg;
    if (!rows || !fig || !sl || !so || !st || !bs || !sg)
        return PT_ENOMEM;
    b->row_cap = b->stage_cap = cap;
    return 0;
}

/* qsort has no user pointer: the figures the comparators read */
static const double *g_fig;
static const pt_tl_row *g_rows;

/* By figure, then replica: a tie takes the lower replica as the median. */
static int by_figure(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    if (g_fig[a] != g_fig[b])
        return g_fig[a] < g_fig[b] ? -1 : 1;
    return (g_rows[a].replica > g_rows[b].replica) - (g_rows[a].replica < g_rows[b].replica);
}

static const double *g_slower;
static int by_slowness(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    if (g_slower[a] != g_slower[b])
        return g_slower[a] > g_slower[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* Each row's figure: compute-lane seconds over the steps it has spans of,
 * per step (steps counted as distinct step numbers, spans of one step
 * arriving together or not). */
static int row_figures(pt_bands *b, const pt_tline *tl)
{
    int64_t *lo = calloc((size_t)tl->row_count, sizeof *lo);
    int64_t *hi = calloc((size_t)tl->row_count, sizeof *hi);
    if (!lo || !hi) {
        free(lo);
        free(hi);
        return PT_ENOMEM;
    }
    for (int r = 0; r < tl->row_count; r++) {
        b->figure[r] = 0;
        lo[r] = INT64_MAX;
        hi[r] = INT64_MIN;
    }
    for (int64_t i = 0; i < tl->count + tl->fold_count; i++) {
        const pt_tl_span *s = i < tl->count ? &tl->spans[i] : NULL;
        const pt_tl_fold *f = s ? NULL : &tl->folds[i - tl->count];
        int row = s ? s->row : f->row;
        int64_t step = s ? s->step : f->step;
        if (row < 0 || row >= tl->row_count || (s && s->lane != PT_LANE_COMPUTE))
            continue;
        b->figure[row] += s ? s->end - s->start : f->busy_median;
        if (step < lo[row])
            lo[row] = step;
        if (step > hi[row])
            hi[row] = step;
    }
    /* steps a row spans, first to last: the timeline holds consecutive steps */
    for (int r = 0; r < tl->row_count; r++)
        if (hi[r] >= lo[r])
            b->figure[r] /= (double)(hi[r] - lo[r] + 1);
    free(lo);
    free(hi);
    return 0;
}

/* The band of a stage whose one row (`row`, PT_TL_ALL_REPLICAS) holds
 * folded steps: their means (bands.h). */
static void folded_band(pt_bands *b, const pt_tline *tl, int row)
{
    pt_band_stage *st = &b->stages[b->stage_count];
    *st = (pt_band_stage){b->rows[row].stage, row, 1, 0, 0, 0, row, row, row, 0, 0, 1, -1};
    double slowest = -1;
    int steps = 0;
    for (int64_t i = 0; i < tl->fold_count; i++) {
        const pt_tl_fold *f = &tl->folds[i];
        if (f->row != row)
            continue;
        st->min_s += f->busy_min;
        st->median_s += f->busy_median;
        st->max_s += f->busy_max;
        steps++;
        if (f->replicas > st->replicas)
            st->replicas = f->replicas;
        if (f->busy_max > slowest) {
            slowest = f->busy_max;
            st->folded_straggler = f->straggler;
        }
    }
    if (steps) {
        st->min_s /= steps;
        st->median_s /= steps;
        st->max_s /= steps;
    }
    b->stage_of[row] = b->stage_count;
    b->slower[row] = st->median_s > 0 ? st->max_s / st->median_s - 1.0 : 0;
    b->straggler[row] = st->median_s > 0 && st->folded_straggler >= 0 &&
                        st->max_s >= st->median_s * (1.0 + b->pct / 100.0);
    if (b->straggler[row]) {
        st->stragglers = 1;
        b->by_slowness[b->straggler_count++] = row;
    }
    b->stage_count++;
}

/* The band of the stage whose rows are [first, end), its replicas sorted
 * by figure in idx (scratch of end - first). A row of the stage's folded
 * steps (PT_TL_ALL_REPLICAS sorts first) beside replica rows is left out of
 * the band: the replicas' own figures are the finer. */
static void stage_band(pt_bands *b, const pt_tline *tl, int first, int end, int *idx)
{
    if (b->rows[first].replica == PT_TL_ALL_REPLICAS) {
        if (end - first == 1) {
            folded_band(b, tl, first);
            return;
        }
        b->stage_of[first] = b->stage_count;
        b->slower[first] = 0;
        b->straggler[first] = 0;
        first++;
    }
    pt_band_stage *st = &b->stages[b->stage_count];
    int n = end - first;
    for (int k = 0; k < n; k++)
        idx[k] = first + k;
    g_fig = b->figure;
    g_rows = b->rows;
    qsort(idx, (size_t)n, sizeof *idx, by_figure);
    *st = (pt_band_stage){b->rows[first].stage, first,      n, 0, 0, 0, idx[0],
                          idx[(n - 1) / 2],     idx[n - 1], 0, n, 0, -1};
    st->min_s = b->figure[st->min_row];
    st->median_s = b->figure[st->median_row];
    st->max_s = b->figure[st->max_row];
    double limit = st->median_s * (1.0 + b->pct / 100.0);
    for (int r = first; r < end; r++) {
        b->stage_of[r] = b->stage_count;
        b->slower[r] = st->median_s > 0 ? b->figure[r] / st->median_s - 1.0 : 0;
        b->straggler[r] = st->median_s > 0 && b->figure[r] >= limit;
        if (b->straggler[r]) {
            st->stragglers++;
            b->by_slowness[b->straggler_count++] = r;
        }
    }
    b->stage_count++;
}

int pt_bands_build(pt_bands *b, const pt_tline *tl, double pct)
{
    b->stage_count = b->row_count = b->straggler_count = 0;
    b->pct = pct > 0 ? pct : PT_BANDS_STRAGGLER_PCT_DEF;
    if (tl->row_count == 0)
        return 0;
    int *idx = malloc(sizeof *idx * (size_t)tl->row_count);
    if (!idx || reserve(b, tl->row_count) < 0 || row_figures(b, tl) < 0) {
        free(idx);
        pt_bands_release(b);
        return PT_ENOMEM;
    }
    b->row_count = tl->row_count;
    memcpy(b->rows, tl->rows, sizeof *b->rows * (size_t)tl->row_count);
    for (int first = 0; first < b->row_count;) {
        int end = first + 1;
        while (end < b->row_count && b->rows[end].stage == b->rows[first].stage)
            end++;
        stage_band(b, tl, first, end, idx);
        first = end;
    }
    free(idx);
    g_slower = b->slower;
    qsort(b->by_slowness, (size_t)b->straggler_count, sizeof *b->by_slowness, by_slowness);
    return 0;
}

int pt_bands_find(const pt_bands *b, int stage, int replica)
{
    int lo = 0, hi = b->row_count;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const pt_tl_row *r = &b->rows[mid];
        if (r->stage < stage || (r->stage == stage && r->replica < replica))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->row_count && b->rows[lo].stage == stage && b->rows[lo].replica == replica ? lo
                                                                                             : -1;
}

const pt_band_stage *pt_bands_stage(const pt_bands *b, int stage)
{
    int lo = 0, hi = b->stage_count;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (b->stages[mid].stage < stage)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->stage_count && b->stages[lo].stage == stage ? &b->stages[lo] : NULL;
}

/* ASCII Gantt chart of a timeline (see timeline_ascii.h). */
#include "tui/export/timeline_ascii.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

char pt_timeline_glyph(int kind)
{
    const pt_op_info *info = pt_op_info_of(kind);
    return info && info->lane != PT_LANE_WAIT ? info->glyph : '.';
}

/* Cells whose midpoints fall in [start, end): [*lo, *hi), clipped to the row. */
static void cell_span(double start, double end, double t0, double dt, int width, int *lo, int *hi)
{
    double a = ceil((start - t0) / dt - 0.5), b = ceil((end - t0) / dt - 0.5);
    *lo = a < 0 ? 0 : a > width ? width : (int)a;
    *hi = b < 0 ? 0 : b > width ? width : (int)b;
}

void pt_timeline_row(const pt_program *prog, const pt_sim_result *res, int w, double t0, double t1,
                     int width, char *row)
{
    memset(row, '.', (size_t)width);
    row[width] = '\0';
    if (!(t1 > t0) || w < 0 || w >= prog->worker_count)
        return;
    double dt = (t1 - t0) / width;
    const pt_worker *x = &prog->workers[w];
    /* communication first, so compute in the same cell wins */
    for (int i = x->op_begin; i < x->op_end; i++) {
        const pt_sim_event *ev = &res->events[i];
        if (ev->lane != PT_LANE_COMM || ev->end <= t0 || ev->start >= t1)
            continue;
        int lo, hi;
        cell_span(ev->start, ev->end, t0, dt, width, &lo, &hi);
        for (int c = lo; c < hi; c++)
            row[c] = pt_timeline_glyph(prog->ops[i].kind);
    }
    for (int i = x->op_begin; i < x->op_end; i++) {
        const pt_sim_event *ev = &res->events[i];
        const pt_op *op = &prog->ops[i];
        if (!pt_op_is_compute(op->kind) || ev->end <= t0 || ev->start >= t1 || ev->end <= ev->start)
            continue;
        int lo, hi;
        cell_span(ev->start, ev->end, t0, dt, width, &lo, &hi);
        if (lo == hi) { /* shorter than a cell: still visible in the cell it starts in */
            lo = (int)((ev->start > t0 ? ev->start - t0 : 0) / dt);
            if (lo >= width)
                lo = width - 1;
            hi = lo + 1;
        }
        char g = pt_timeline_glyph(op->kind);
        row[lo] = g;
        for (int c = lo + 1; c < hi; c++)
            row[c] = g >= 'A' && g <= 'Z' ? (char)(g - 'A' + 'a') : g;
        if (pt_op_has_one_mb(op->kind)) {
            char num[16];
            int n = snprintf(num, sizeof num, "%d", op->mb);
            if (n > 0 && hi - lo >= n + 1)
                memcpy(row + lo + 1, num, (size_t)n);
        }
    }
}

typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

size_t pt_timeline_ascii(const pt_program *prog, const pt_sim_result *res,
                         const pt_timeline_opts *opts, char *buf, size_t cap)
{
    pt_timeline_opts o = opts ? *opts : (pt_timeline_opts){0};
    if (o.width <= 0)
        o.width = PT_TIMELINE_DEFAULT_WIDTH;
    if (o.width < PT_TIMELINE_MIN_WIDTH)
        o.width = PT_TIMELINE_MIN_WIDTH;
    if (o.width > PT_TIMELINE_MAX_WIDTH)
        o.width = PT_TIMELINE_MAX_WIDTH;
    if (!(o.t1 > o.t0)) {
        o.t0 = 0;
        o.t1 = res->makespan_s;
    }
    out w = {buf, cap, 0};
    if (cap > 0)
        buf[0] = '\0';
    char label[32], row[PT_TIMELINE_MAX_WIDTH + 1];
    int width = o.width;
    int label_w = 0;
    for (int k = 0; k < prog->worker_count; k++) {
        int n = snprintf(label, sizeof label, "s%dr%d", prog->workers[k].stage,
                         prog->workers[k].replica);
        if (n > label_w)
            label_w = n;
    }
    if (o.axis) {
        char left[32], right[32];
        snprintf(left, sizeof left, "%.3f ms", o.t0 * 1e3);
        snprintf(right, sizeof right, "%.3f ms", o.t1 * 1e3);
        int gap = width + 2 - (int)strlen(left) - (int)strlen(right);
        put(&w, "%*s %s%*s%s\n", label_w, "", left, gap > 1 ? gap : 1, "", right);
    }
    for (int k = 0; k < prog->worker_count; k++) {
        snprintf(label, sizeof label, "s%dr%d", prog->workers[k].stage, prog->workers[k].replica);
        pt_timeline_row(prog, res, k, o.t0, o.t1, width, row);
        put(&w, "%-*s |%s|\n", label_w, label, row);
    }
    if (o.legend) {
        put(&w,
            "%*s  F forward  B backward  R recompute  O optimizer step  > activation sent  "
            "< gradient sent  A all-reduce  . idle\n",
            label_w, "");
        int split = 0;
        for (int i = 0; i < prog->op_count && !split; i++)
            split = prog->ops[i].kind == PT_OP_BWD_INPUT;
        if (split)
            put(&w, "%*s  backward split: %c input gradient  %c weight gradient\n", label_w, "",
                pt_timeline_glyph(PT_OP_BWD_INPUT), pt_timeline_glyph(PT_OP_BWD_WEIGHT));
    }
    return w.len;
}

/* The text Gantt drawer (see timeline_ascii.h). */
#include "tui/export/timeline_ascii.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define AXIS_TICK_CELLS 12
#define AXIS_UNIT_CELLS 3 /* " ms" */

/* The glyph set, one fill per paint class. */
static const char paint_fill[PT_PAINT_COUNT] = {
    [PT_PAINT_FWD] = '=',       [PT_PAINT_BWD] = '#',        [PT_PAINT_RECOMPUTE] = '+',
    [PT_PAINT_BWD_INPUT] = '%', [PT_PAINT_BWD_WEIGHT] = '~', [PT_PAINT_COMM] = '>',
    [PT_PAINT_ALLREDUCE] = '*', [PT_PAINT_OPTSTEP] = '^',    [PT_PAINT_WAIT] = ' ',
    [PT_PAINT_BUBBLE] = '.',
};

char pt_timeline_fill(int paint)
{
    if (paint == PT_TIMELINE_FOLDED)
        return PT_TIMELINE_FOLDED_FILL;
    return paint >= 0 && paint < PT_PAINT_COUNT ? paint_fill[paint] : '?';
}

/* The legend, one entry per glyph a chart can hold (the fills above and
 * the sends' own glyphs), each with a long and a short name; the micro-batch
 * number that starts a block comes first. */
typedef struct legend_entry {
    const char *glyph, *wide, *narrow;
} legend_entry;

static const legend_entry legend[] = {
    {"3===", "fwd", "fwd"},
    {"3###", "bwd", "bwd"},
    {"3+++", "recompute", "rcmp"},
    {"3%%%", "bwd input grad", "in-grad"},
    {"3~~~", "bwd weight grad", "w-grad"},
    {">", "send act", "act"},
    {"<", "send grad", "grad"},
    {"*", "all-reduce", "allred"},
    {"^", "optimizer", "opt"},
    {".", "bubble", "bubble"},
};

/* The three forms, widest first: "3=== fwd  3### bwd ...", "3= fwd 3# bwd
 * ...", "= fwd # bwd ..." (every glyph in each). */
static const char *legend_form(int form)
{
    static char text[3][256];
    if (!text[form][0]) {
        size_t at = 0;
        for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++) {
            const legend_entry *e = &legend[i];
            const char *g = e->glyph;
            int glen = form == 0 ? (int)strlen(g) : g[0] == '3' ? 2 : 1;
            if (form == 2 && g[0] == '3')
                g++, glen = 1;
            at += (size_t)snprintf(text[form] + at, sizeof text[form] - at, "%s%.*s %s",
                                   i ? (form == 0 ? "  " : " ") : "", glen, g,
                                   form == 0 ? e->wide : e->narrow);
        }
    }
    return text[form];
}

const char *pt_timeline_legend(int width)
{
    for (int form = 0; form < 2; form++)
        if ((int)strlen(legend_form(form)) <= width)
            return legend_form(form);
    return legend_form(2);
}

/* Cell range [*c0, *c1) a span covers; 0 when outside the window. */
static int cells(double s, double e, double t0, double t1, int width, int *c0, int *c1)
{
    if (e <= t0 || s >= t1 || t1 <= t0 || e <= s) /* an op that took no time drew nothing */
        return 0;
    double per = (t1 - t0) / width;
    int a = (int)floor((s - t0) / per), b = (int)ceil((e - t0) / per);
    if (a < 0)
        a = 0;
    if (b > width)
        b = width;
    if (b <= a)
        b = a + 1;
    if (a >= width)
        return 0;
    *c0 = a;
    *c1 = b;
    return 1;
}

/* A span's fill: a send shows which way its data flows (the op's glyph). */
static char span_fill(int op)
{
    const pt_op_info *info = pt_op_info_of(op);
    return info && (info->facts & PT_OPK_SEND) ? info->glyph : pt_timeline_fill(pt_op_paint_of(op));
}

/* 1 when cell c holds a micro-batch label's digit. */
static int is_label(const unsigned char *labelled, int width, int c)
{
    return c >= 0 && c < width && labelled[c];
}

void pt_timeline_cells(const pt_tline *tl, int row, int lane, double t0, double t1, int width,
                       double busy_lo, double busy_hi, pt_timeline_cell *out)
{
    if (width > PT_TIMELINE_MAX_WIDTH)
        width = PT_TIMELINE_MAX_WIDTH;
    for (int c = 0; c < width; c++)
        out[c] = (pt_timeline_cell){' ', PT_TIMELINE_BLANK};
    if (width <= 0 || t1 <= t0)
        return;
    int b0, b1;
    if (lane == PT_LANE_COMPUTE && cells(busy_lo, busy_hi, t0, t1, width, &b0, &b1))
        for (int c = b0; c < b1; c++)
            out[c] = (pt_timeline_cell){pt_timeline_fill(PT_PAINT_BUBBLE), PT_PAINT_BUBBLE};
    if (lane == PT_LANE_COMPUTE) /* folded steps under the spans (a record has both seldom) */
        for (int64_t i = 0; i < tl->fold_count; i++) {
            const pt_tl_fold *f = &tl->folds[i];
            int c0, c1;
            if (f->row == row && cells(f->start, f->end, t0, t1, width, &c0, &c1))
                for (int c = c0; c < c1; c++)
                    out[c] = (pt_timeline_cell){PT_TIMELINE_FOLDED_FILL, PT_TIMELINE_FOLDED};
        }
    /* the fills first, each cell remembering the span that painted it last */
    int64_t owner[PT_TIMELINE_MAX_WIDTH];
    unsigned char labelled[PT_TIMELINE_MAX_WIDTH];
    memset(labelled, 0, (size_t)width);
    for (int c = 0; c < width; c++)
        owner[c] = -1;
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        int c0, c1;
        if (s->row != row || s->lane != lane || !cells(s->start, s->end, t0, t1, width, &c0, &c1))
            continue;
        pt_op_paint g = pt_op_paint_of(s->op);
        for (int c = c0; c < c1; c++) {
            out[c] = (pt_timeline_cell){span_fill(s->op), (uint8_t)g};
            owner[c] = i;
        }
    }
    if (lane != PT_LANE_COMPUTE)
        return;
    /* then the micro-batch numbers: one starts its block where the whole
     * number lies on cells its block still owns and no other number touches
     * it on either side; else it is left out (a zoom shows it) */
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        int c0, c1;
        if (s->row != row || s->lane != lane || s->mb < 0 ||
            !cells(s->start, s->end, t0, t1, width, &c0, &c1))
            continue;
        char num[16];
        int n = snprintf(num, sizeof num, "%d", s->mb), own = 1;
        for (int k = 0; k < n && own; k++)
            own = c0 + k < c1 && owner[c0 + k] == i;
        if (!own || is_label(labelled, width, c0 - 1) || is_label(labelled, width, c0 + n))
            continue;
        for (int k = 0; k < n; k++) {
            out[c0 + k].ch = num[k];
            labelled[c0 + k] = 1;
        }
    }
}

void pt_timeline_row(const pt_tline *tl, int row, double t0, double t1, int width, char *out)
{
    pt_timeline_cell comp[PT_TIMELINE_MAX_WIDTH], comm[PT_TIMELINE_MAX_WIDTH];
    if (width > PT_TIMELINE_MAX_WIDTH)
        width = PT_TIMELINE_MAX_WIDTH;
    pt_timeline_cells(tl, row, PT_LANE_COMPUTE, t0, t1, width, t0, t1, comp);
    pt_timeline_cells(tl, row, PT_LANE_COMM, t0, t1, width, t0, t1, comm);
    for (int c = 0; c < width; c++) {
        int idle = comp[c].paint == PT_TIMELINE_BLANK || comp[c].paint == PT_PAINT_BUBBLE;
        out[c] = idle && comm[c].paint != PT_TIMELINE_BLANK ? comm[c].ch : comp[c].ch;
    }
    out[width > 0 ? width : 0] = '\0';
}

void pt_timeline_axis(double t0, double t1, int width, char *out)
{
    memset(out, ' ', (size_t)(width > 0 ? width : 0));
    out[width > 0 ? width : 0] = 0;
    if (width <= 0 || t1 <= t0)
        return;
    /* the unit takes the last cells (" ms"); a tick whose label would run
     * into it is left out whole rather than cut or overwritten */
    int room = width >= AXIS_UNIT_CELLS + 2 ? width - AXIS_UNIT_CELLS : width;
    for (int c = 0; c < width; c += AXIS_TICK_CELLS) {
        double t = t0 + (t1 - t0) * c / width;
        char lab[24];
        int n = snprintf(lab, sizeof lab, "|%.*f", t1 - t0 < 0.01 ? 2 : 1, t * 1e3);
        if (c > 0 && c + n > room)
            break;
        for (int k = 0; k < n && c + k < width; k++)
            out[c + k] = lab[k];
    }
    if (room < width) {
        out[width - 2] = 'm';
        out[width - 1] = 's';
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

size_t pt_timeline_ascii(const pt_tline *tl, const pt_timeline_opts *opts, char *buf, size_t cap)
{
    pt_timeline_opts o = opts ? *opts : (pt_timeline_opts){0};
    o.width = o.width <= 0                      ? PT_TIMELINE_DEFAULT_WIDTH
              : o.width < PT_TIMELINE_MIN_WIDTH ? PT_TIMELINE_MIN_WIDTH
              : o.width > PT_TIMELINE_MAX_WIDTH ? PT_TIMELINE_MAX_WIDTH
                                                : o.width;
    if (!(o.t1 > o.t0)) {
        o.t0 = 0;
        o.t1 = tl->t1;
    }
    out w = {buf, cap, 0};
    if (cap > 0)
        buf[0] = '\0';
    char label[32], row[PT_TIMELINE_MAX_WIDTH + 1];
    int label_w = 0;
    for (int k = 0; k < tl->row_count; k++) {
        int n = snprintf(label, sizeof label, "s%dr%d", tl->rows[k].stage, tl->rows[k].replica);
        label_w = n > label_w ? n : label_w;
    }
    if (o.axis) {
        pt_timeline_axis(o.t0, o.t1, o.width, row);
        put(&w, "%*s  %s\n", label_w, "", row);
    }
    for (int k = 0; k < tl->row_count; k++) {
        snprintf(label, sizeof label, "s%dr%d", tl->rows[k].stage, tl->rows[k].replica);
        pt_timeline_row(tl, k, o.t0, o.t1, o.width, row);
        put(&w, "%-*s |%s|\n", label_w, label, row);
    }
    if (o.legend)
        put(&w, "%*s  %s\n", label_w, "", pt_timeline_legend(PT_TIMELINE_MAX_WIDTH));
    return w.len;
}

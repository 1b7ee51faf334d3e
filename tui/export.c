/* Trace-event JSON and SVG exports of timelines (see export.h). */
#include "tui/export.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/checked.h"
#include "protocol/fileio.h"
#include "tui/replay.h"

#define LANES_PER_REPLICA 4 /* tid = replica * 4 + lane */
#define SVG_WIDTH_DEF     1200
#define SVG_ROW_PX        22
#define SVG_COMM_PX       7
#define SVG_ROW_GAP_PX    6
#define SVG_LABEL_PX      70
#define SVG_TOP_PX        40
#define SVG_AXIS_PX       40
#define SVG_LEGEND_PX     30
#define SVG_LABEL_MIN_PX  9 /* narrowest block that gets its micro-batch number */
#define SVG_TICKS         10

/* A growable text buffer; failure sticks so callers check once at the end. */
typedef struct buf {
    char *p;
    size_t n, cap;
    int failed;
} buf;

static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && b->n + (size_t)n < b->cap) {
            b->n += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->n + (size_t)n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static int finish(buf *b, char **out, size_t *len, pt_error *err)
{
    if (b->failed) {
        free(b->p);
        return pt_error_set(err, PT_ENOMEM, "export: out of memory");
    }
    if (!b->p)
        bprintf(b, "%s", "");
    if (b->failed)
        return pt_error_set(err, PT_ENOMEM, "export: out of memory");
    *out = b->p;
    if (len)
        *len = b->n;
    return 0;
}

static const char *lane_name(int lane)
{
    return lane == PT_LANE_COMPUTE ? "compute" : lane == PT_LANE_COMM ? "comm" : "wait";
}

static void lower(const char *in, char *out, size_t cap)
{
    size_t i = 0;
    for (; in[i] && i + 1 < cap; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = 0;
}

static void trace_op(buf *b, const pt_tline *tl, const pt_tl_span *s, int *first)
{
    const pt_tl_row *row = &tl->rows[s->row];
    const char *name =
        s->op < PT_OP_KIND_COUNT ? pt_op_name(s->op) : pt_paint_name(PT_PAINT_BUBBLE);
    char cat[32];
    lower(name, cat, sizeof cat);
    char label[48];
    if (s->mb >= 0 && s->op < PT_OP_KIND_COUNT)
        snprintf(label, sizeof label, "%s mb%d", name, s->mb);
    else
        snprintf(label, sizeof label, "%s", name);
    bprintf(b,
            "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
            "\"pid\":%d,\"tid\":%d,\"args\":{\"step\":%lld,\"mb\":%d,\"bytes\":%lld}}",
            *first ? "" : ",", label, cat, s->start * PT_EXPORT_US_PER_S,
            (s->end - s->start) * PT_EXPORT_US_PER_S, row->stage + 1,
            row->replica * LANES_PER_REPLICA + s->lane, (long long)s->step, s->mb,
            (long long)s->bytes);
    *first = 0;
}

int pt_export_trace(const pt_tline *tl, const pt_export_mem *mem, int64_t mem_count, char **out,
                    size_t *len, pt_export_counts *counts, pt_error *err)
{
    buf b = {0};
    pt_export_counts c = {0};
    int first = 1;
    bprintf(&b, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    /* names: processes per stage, tracks per replica and lane */
    int last_stage = -1;
    for (int r = 0; r < tl->row_count; r++) {
        const pt_tl_row *row = &tl->rows[r];
        if (row->stage != last_stage) {
            bprintf(&b,
                    "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                    "\"args\":{\"name\":\"stage %d\"}},"
                    "\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                    "\"args\":{\"sort_index\":%d}}",
                    first ? "" : ",", row->stage + 1, row->stage, row->stage + 1, row->stage);
            first = 0;
            last_stage = row->stage;
        }
        for (int lane = 0; lane <= PT_LANE_WAIT; lane++) {
            bprintf(&b,
                    ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"r%d %s\"}}",
                    row->stage + 1, row->replica * LANES_PER_REPLICA + lane, row->replica,
                    lane_name(lane));
            c.tracks++;
        }
    }
    for (int64_t i = 0; i < tl->count; i++) {
        trace_op(&b, tl, &tl->spans[i], &first);
        c.ops++;
    }
    /* bubbles: gaps of every row's compute lane inside each iteration */
    int64_t niv = 0;
    pt_op_iter *iv = NULL;
    if (pt_tline_iters(tl, &iv, &niv) < 0)
        b.failed = 1;
    pt_tl_span *gaps = NULL;
    int64_t gap_cap = 0;
    for (int64_t k = 0; k < niv && !b.failed; k++)
        for (int r = 0; r < tl->row_count; r++) {
            int64_t ng = pt_tline_bubbles(tl, r, iv[k].lo, iv[k].hi, gaps, gap_cap);
            if (ng > gap_cap) {
                pt_tl_span *q = realloc(gaps, sizeof *q * (size_t)ng);
                if (!q) {
                    b.failed = 1;
                    break;
                }
                gaps = q;
                gap_cap = ng;
                ng = pt_tline_bubbles(tl, r, iv[k].lo, iv[k].hi, gaps, gap_cap);
            }
            for (int64_t g = 0; g < ng; g++) {
                gaps[g].step = iv[k].step;
                trace_op(&b, tl, &gaps[g], &first);
                c.bubbles++;
            }
        }
    free(gaps);
    free(iv);
    for (int64_t i = 0; i < mem_count && mem; i++) {
        const pt_export_mem *m = &mem[i];
        bprintf(&b, "%s\n{\"name\":\"memory r%d\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{",
                first ? "" : ",", m->replica, m->t * PT_EXPORT_US_PER_S, m->stage + 1);
        first = 0;
        for (int k = 0; k < PT_MSG_MEM_COUNT; k++)
            bprintf(&b, "%s\"%s\":%lld", k ? "," : "", pt_msg_mem_name(k), (long long)m->bytes[k]);
        bprintf(&b, "}}");
        c.counters++;
    }
    bprintf(&b, "\n]}\n");
    if (counts)
        *counts = c;
    return finish(&b, out, len, err);
}

/* ---- SVG -------------------------------------------------------------------- */

static void hex(pt_color c, char *out, const char *fallback)
{
    if (c.set)
        snprintf(out, 8, "#%02x%02x%02x", c.r, c.g, c.b);
    else
        snprintf(out, 8, "%s", fallback);
}

/* The SVG fill pattern over a paint class's colour, so blocks differ
 * without colour too; NULL: plain. */
static const char *const paint_pattern[PT_PAINT_COUNT] = {
    [PT_PAINT_BWD] = "hatch",
    [PT_PAINT_RECOMPUTE] = "dots",
    [PT_PAINT_ALLREDUCE] = "cross",
    [PT_PAINT_BUBBLE] = "bubble",
};

int pt_export_svg(const pt_tline *tl, const pt_theme *theme, const pt_export_svg_opts *opts,
                  char **out, size_t *len, pt_error *err)
{
    pt_theme def;
    if (!theme) {
        pt_theme_default(&def);
        theme = &def;
    }
    int width = opts && opts->width_px > 0 ? opts->width_px : SVG_WIDTH_DEF;
    double t0 = tl->t0, t1 = tl->t1;
    if (opts && opts->t1 > opts->t0) {
        t0 = opts->t0;
        t1 = opts->t1;
    }
    if (t1 <= t0)
        t1 = t0 + 1e-3;
    int band = SVG_ROW_PX + SVG_COMM_PX + SVG_ROW_GAP_PX;
    int height = SVG_TOP_PX + tl->row_count * band + SVG_AXIS_PX + SVG_LEGEND_PX;
    double plot_w = width - SVG_LABEL_PX - 10;
    double px_per_s = plot_w / (t1 - t0);
    char fg[8], dim[8], bubble[8];
    hex(theme->color[PT_THEME_TEXT], fg, "#202020");
    hex(theme->color[PT_THEME_DIM], dim, "#808080");
    hex(theme->color[PT_THEME_BUBBLE], bubble, "#c8c8c8");
    buf b = {0};
    bprintf(&b,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"monospace\" font-size=\"11\">\n"
            "<defs>\n"
            "<pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" "
            "stroke=\"#000\" stroke-opacity=\"0.35\" stroke-width=\"2\"/></pattern>\n"
            "<pattern id=\"dots\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\">"
            "<circle cx=\"2.5\" cy=\"2.5\" r=\"1\" fill=\"#000\" fill-opacity=\"0.4\"/></pattern>\n"
            "<pattern id=\"cross\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
            "<path d=\"M0 0L6 6M6 0L0 6\" stroke=\"#000\" stroke-opacity=\"0.4\"/></pattern>\n"
            "<pattern id=\"bubble\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">"
            "<circle cx=\"2\" cy=\"2\" r=\"0.7\" fill=\"%s\"/></pattern>\n"
            "</defs>\n",
            width, height, width, height, dim);
    if (opts && opts->title) {
        bprintf(&b, "<text x=\"10\" y=\"20\" fill=\"%s\" font-size=\"14\">", fg);
        for (const char *c = opts->title; *c; c++)
            if (*c == '<')
                bprintf(&b, "&lt;");
            else if (*c == '>')
                bprintf(&b, "&gt;");
            else if (*c == '&')
                bprintf(&b, "&amp;");
            else
                bprintf(&b, "%c", *c);
        bprintf(&b, "</text>\n");
    }
    for (int r = 0; r < tl->row_count; r++) {
        int y = SVG_TOP_PX + r * band;
        bprintf(&b,
                "<text x=\"4\" y=\"%d\" fill=\"%s\">s%dr%d</text>\n"
                "<rect class=\"row\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" "
                "fill-opacity=\"0.35\"/>\n",
                y + SVG_ROW_PX - 7, fg, tl->rows[r].stage, tl->rows[r].replica, SVG_LABEL_PX, y,
                plot_w, SVG_ROW_PX, bubble);
        bprintf(&b,
                "<rect class=\"bubble-bg\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                "fill=\"url(#bubble)\"/>\n",
                SVG_LABEL_PX, y, plot_w, SVG_ROW_PX);
    }
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *s = &tl->spans[i];
        if (s->lane == PT_LANE_WAIT || s->end < t0 || s->start > t1)
            continue;
        double a = s->start < t0 ? t0 : s->start, e = s->end > t1 ? t1 : s->end;
        double x = SVG_LABEL_PX + (a - t0) * px_per_s, w = (e - a) * px_per_s;
        if (w < 0.5)
            w = 0.5;
        int y = SVG_TOP_PX + s->row * band;
        int h = SVG_ROW_PX;
        if (s->lane == PT_LANE_COMM) {
            y += SVG_ROW_PX + 1;
            h = SVG_COMM_PX - 1;
        }
        char col[8];
        pt_op_paint paint = pt_op_paint_of(s->op);
        hex(theme->color[pt_paint_theme_key(paint)], col,
            paint == PT_PAINT_FWD ? "#ffffff" : "#a0a0a0");
        bprintf(&b,
                "<rect class=\"op\" data-op=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
                "height=\"%d\" fill=\"%s\" stroke=\"#000\" stroke-width=\"0.4\"><title>%s mb %d "
                "step %lld %.3f ms</title></rect>\n",
                pt_op_name(s->op), x, y, w, h, col, pt_op_name(s->op), s->mb, (long long)s->step,
                (s->end - s->start) * 1e3);
        const char *pat = paint_pattern[paint];
        if (pat)
            bprintf(&b,
                    "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"url(#%s)\"/>\n",
                    x, y, w, h, pat);
        if (s->lane == PT_LANE_COMPUTE && s->mb >= 0 && w >= SVG_LABEL_MIN_PX)
            bprintf(&b,
                    "<text x=\"%.2f\" y=\"%d\" fill=\"#000\" text-anchor=\"middle\">%d</text>\n",
                    x + w / 2, y + SVG_ROW_PX - 7, s->mb);
    }
    /* axis */
    int ay = SVG_TOP_PX + tl->row_count * band + 4;
    bprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\"/>\n", SVG_LABEL_PX,
            ay, SVG_LABEL_PX + plot_w, ay, dim);
    for (int k = 0; k <= SVG_TICKS; k++) {
        double x = SVG_LABEL_PX + plot_w * k / SVG_TICKS;
        double t = t0 + (t1 - t0) * k / SVG_TICKS;
        bprintf(&b,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%d\" fill=\"%s\" text-anchor=\"middle\">%.2f</text>\n",
                x, ay, x, ay + 5, dim, x, ay + 17, fg, t * 1e3);
    }
    bprintf(&b, "<text x=\"%.1f\" y=\"%d\" fill=\"%s\" text-anchor=\"end\">ms</text>\n",
            SVG_LABEL_PX + plot_w, ay + 30, fg);
    /* legend */
    static const pt_op_paint legend[] = {PT_PAINT_FWD,   PT_PAINT_BWD,       PT_PAINT_RECOMPUTE,
                                         PT_PAINT_COMM,  PT_PAINT_ALLREDUCE, PT_PAINT_OPTSTEP,
                                         PT_PAINT_BUBBLE};
    static const char *const legend_names[] = {"forward",    "backward",  "recompute", "send",
                                               "all-reduce", "optimizer", "bubble"};
    int ly = height - SVG_LEGEND_PX + 8;
    for (size_t k = 0; k < sizeof legend / sizeof legend[0]; k++) {
        int x = SVG_LABEL_PX + (int)k * 110;
        char col[8];
        hex(theme->color[pt_paint_theme_key(legend[k])], col, "#a0a0a0");
        const char *pat = paint_pattern[legend[k]];
        bprintf(&b,
                "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"%s\" stroke=\"#000\" "
                "stroke-width=\"0.4\"/>",
                x, ly, legend[k] == PT_PAINT_BUBBLE ? bubble : col);
        if (pat)
            bprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"url(#%s)\"/>", x,
                    ly, pat);
        bprintf(&b, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", x + 18, ly + 10, fg,
                legend_names[k]);
    }
    bprintf(&b, "</svg>\n");
    return finish(&b, out, len, err);
}

/* ---- sources ------------------------------------------------------------------ */

int pt_export_store_mem(const pt_store *store, int64_t origin_ns, pt_export_mem **out,
                        int64_t *count)
{
    int64_t n = pt_store_mem_count(store);
    pt_export_mem *m = malloc(sizeof *m * (size_t)(n ? n : 1));
    if (!m)
        return PT_ENOMEM;
    for (int64_t i = 0; i < n; i++) {
        const pt_store_mem *x = pt_store_mem_at(store, i);
        int64_t dt;
        /* exact when the difference fits; a record's times (+-2^62) always do */
        m[i].t = (pt_sub_i64(x->t_ns, origin_ns, &dt) == 0 ? (double)dt
                                                           : (double)x->t_ns - (double)origin_ns) *
                 1e-9;
        m[i].stage = x->stage;
        m[i].replica = x->replica;
        memcpy(m[i].bytes, x->cur, sizeof m[i].bytes);
        m[i].total = x->total_cur;
    }
    *out = m;
    *count = n;
    return 0;
}

int pt_export_load_run(const char *record_path, pt_tline *tl, pt_export_mem **mem,
                       int64_t *mem_count, pt_error *err)
{
    pt_record *rec = NULL;
    int rc = pt_record_load(record_path, &rec, err);
    if (rc < 0)
        return rc;
    pt_store *store = NULL;
    if (pt_store_new(0, &store) < 0) {
        pt_record_free(&rec);
        return pt_error_set(err, PT_ENOMEM, "export: out of memory");
    }
    /* the whole record must fit the ring, or the export would lose spans */
    pt_record_summary sum;
    pt_record_summarize(rec, &sum);
    if (sum.events > PT_STORE_SPANS_DEFAULT) {
        pt_store_free(&store);
        if (pt_store_new(sum.events, &store) < 0) {
            pt_record_free(&rec);
            return pt_error_set(err, PT_ENOMEM, "export: out of memory");
        }
    }
    for (int64_t i = 0; i < pt_record_count(rec); i++)
        pt_record_apply(rec, i, store);
    int64_t origin = 0;
    rc = pt_store_timeline(store, INT64_MIN, INT64_MAX, 0, tl, &origin);
    if (rc == 0 && mem)
        rc = pt_export_store_mem(store, origin, mem, mem_count);
    if (rc < 0)
        pt_error_set(err, rc, "export: out of memory");
    pt_store_free(&store);
    pt_record_free(&rec);
    return rc;
}

int pt_export_write(const char *path, const char *text, size_t len, pt_error *err)
{
    return pt_file_write_atomic(path, text, len, err);
}

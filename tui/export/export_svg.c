/* The SVG picture of an export set (see export.h): slide-ready, so every
 * label is placed from an estimate of its width and kept inside the
 * picture. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tui/export/export.h"

#define SVG_WIDTH_DEF    1200
#define SVG_FONT_PX      11
#define SVG_CHAR_EM      0.62 /* advance of a monospace glyph, in em (DejaVu Sans Mono 0.602) */
#define SVG_TITLE_PX     14
#define SVG_TITLE_MIN_PX 8
#define SVG_MARGIN_PX    10
#define SVG_ROW_PX       22
#define SVG_COMM_PX      7
#define SVG_ROW_GAP_PX   6
#define SVG_LABEL_PX     48 /* the row names' column */
#define SVG_TOP_PX       34
#define SVG_SECTION_PX   18 /* a comparison's section label above its rows */
#define SVG_AXIS_PX      42
#define SVG_LEGEND_ROW   20
#define SVG_SWATCH_PX    14
#define SVG_TICKS_MAX    10
#define SVG_LIGHT_TEXT   0.5 /* luminance above which a theme's text needs a dark ground */

/* The built-in slide colours (themes/light.theme's palette). */
static const char slide_colors[] = "text = #202020\ndim = #6c6c6c\nfwd = #3a8fd0\nbwd = #e08000\n"
                                   "recompute = #b05090\nbubble = #c6c6c6\ncomm = #008060\n"
                                   "allreduce = #c04000\noptstep = #a08000\n"
                                   "bwd.input = #e08000\nbwd.weight = #0060a0\n";

static double text_w(size_t chars, double font_px)
{
    return (double)chars * font_px * SVG_CHAR_EM;
}

static void hex(pt_color c, char *out, const char *fallback)
{
    if (c.set)
        snprintf(out, 8, "#%02x%02x%02x", c.r, c.g, c.b);
    else
        snprintf(out, 8, "%s", fallback);
}

static void put_escaped(FILE *f, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++) {
        if (s[i] == '<')
            fputs("&lt;", f);
        else if (s[i] == '>')
            fputs("&gt;", f);
        else if (s[i] == '&')
            fputs("&amp;", f);
        else
            fputc(s[i], f);
    }
}

/* The SVG fill pattern over a paint class's colour, so blocks differ
 * without colour too; NULL: plain. */
static const char *const paint_pattern[PT_PAINT_COUNT] = {
    [PT_PAINT_BWD] = "hatch",      [PT_PAINT_BWD_INPUT] = "hatch", [PT_PAINT_BWD_WEIGHT] = "rhatch",
    [PT_PAINT_RECOMPUTE] = "dots", [PT_PAINT_ALLREDUCE] = "cross", [PT_PAINT_BUBBLE] = "bubble",
};

/* The legend; the halves of a split backward only when the set has them. */
static const pt_op_paint legend_paint[] = {
    PT_PAINT_FWD,  PT_PAINT_BWD,       PT_PAINT_BWD_INPUT, PT_PAINT_BWD_WEIGHT, PT_PAINT_RECOMPUTE,
    PT_PAINT_COMM, PT_PAINT_ALLREDUCE, PT_PAINT_OPTSTEP,   PT_PAINT_BUBBLE};
static const char *const legend_names[] = {"forward",         "backward",  "input gradient",
                                           "weight gradient", "recompute", "send",
                                           "all-reduce",      "optimizer", "bubble"};
#define LEGEND_N ((int)(sizeof legend_paint / sizeof legend_paint[0]))

/* 1 when legend entry k is shown for set and the set it is compared with
 * (NULL: none). */
static int legend_shown(const pt_export_set *set, const pt_export_set *cmp, int k)
{
    pt_op_paint p = legend_paint[k];
    if (p != PT_PAINT_BWD_INPUT && p != PT_PAINT_BWD_WEIGHT)
        return 1;
    const pt_export_set *sets[2] = {set, cmp};
    for (int j = 0; j < 2; j++)
        for (int64_t i = 0; sets[j] && i < sets[j]->ops; i++)
            if (pt_op_paint_of(sets[j]->spans[i].op) == p)
                return 1;
    return 0;
}

/* A tick step of 1, 2 or 5 times a power of ten giving at most max ticks. */
static double tick_step(double span_ms, int max)
{
    double raw = span_ms / max, p = pow(10, floor(log10(raw)));
    for (int k = 0; k < 3; k++) {
        double m = (double[]){1, 2, 5}[k] * p;
        if (m >= raw)
            return m;
    }
    return 10 * p;
}

/* Legend rows needed for a plot width (entries wrap). */
static int legend_rows(const pt_export_set *set, const pt_export_set *cmp, double plot_w)
{
    int rows = 1;
    double x = 0;
    for (int k = 0; k < LEGEND_N; k++) {
        if (!legend_shown(set, cmp, k))
            continue;
        double w = SVG_SWATCH_PX + 4 + text_w(strlen(legend_names[k]), SVG_FONT_PX) + 14;
        if (x > 0 && x + w > plot_w) {
            rows++;
            x = 0;
        }
        x += w;
    }
    return rows;
}

/* One band per stage replica of set, from y0, for the times [t0, t1] drawn
 * from plot_x at px_per_s. */
static void draw_rows(FILE *f, const pt_export_set *set, double t0, double t1, double px_per_s,
                      double plot_x, double plot_w, int y0, const pt_theme *theme, const char *fg,
                      const char *bubble)
{
    int band = SVG_ROW_PX + SVG_COMM_PX + SVG_ROW_GAP_PX;
    for (int r = 0; r < set->row_count; r++) {
        int y = y0 + r * band;
        fprintf(f,
                "<text class=\"row-label\" x=\"%d\" y=\"%d\" fill=\"%s\">s%dr%d</text>\n"
                "<rect class=\"row\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" "
                "fill-opacity=\"0.35\"/>\n",
                SVG_MARGIN_PX / 2, y + SVG_ROW_PX - 7, fg, set->rows[r].stage, set->rows[r].replica,
                plot_x, y, plot_w, SVG_ROW_PX, bubble);
    }
    for (int64_t i = 0; i < set->ops; i++) {
        const pt_export_span *s = &set->spans[i];
        if (s->lane == PT_LANE_WAIT || s->end < t0 || s->start > t1)
            continue;
        double a = s->start < t0 ? t0 : s->start, e = s->end > t1 ? t1 : s->end;
        double x = plot_x + (a - t0) * px_per_s, w = (e - a) * px_per_s;
        if (w < 0.5)
            w = 0.5;
        int y = y0 + s->row * band, h = SVG_ROW_PX;
        if (s->lane == PT_LANE_COMM) {
            y += SVG_ROW_PX + 1;
            h = SVG_COMM_PX - 1;
        }
        char col[8];
        pt_op_paint paint = pt_op_paint_of(s->op);
        hex(theme->color[pt_paint_theme_key(paint)], col, "#a0a0a0");
        fprintf(f,
                "<rect class=\"op\" data-op=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
                "height=\"%d\" fill=\"%s\" stroke=\"#000\" stroke-width=\"0.4\"><title>%s mb %d "
                "step %lld gen %lld %.3f ms</title></rect>\n",
                pt_op_name(s->op), x, y, w, h, col, pt_op_name(s->op), s->mb, (long long)s->step,
                (long long)s->gen, (s->end - s->start) * 1e3);
        const char *pat = paint_pattern[paint];
        if (pat)
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"url(#%s)\"/>\n",
                    x, y, w, h, pat);
        char mb[16];
        int n = snprintf(mb, sizeof mb, "%d", s->mb);
        if (s->lane == PT_LANE_COMPUTE && s->mb >= 0 && w >= text_w((size_t)n, SVG_FONT_PX) + 2)
            fprintf(f,
                    "<text class=\"mb\" x=\"%.2f\" y=\"%d\" fill=\"#000\" "
                    "text-anchor=\"middle\">%s</text>\n",
                    x + w / 2, y + SVG_ROW_PX - 7, mb);
    }
}

/* The geometry and colours of one picture, worked out once. */
typedef struct svg_page {
    int width, height;
    double t0, t1; /* the set's window */
    double a0, a1; /* the axis: the window, or 0 to the longer of both with a comparison */
    double plot_x, plot_w, px_per_s;
    int rows_y, ay; /* where the set's rows and the axis start */
    char fg[8], dim[8], bubble[8], bg[8];
} svg_page;

static void page_layout(const pt_export_set *set, const pt_theme *theme,
                        const pt_export_svg_opts *opts, svg_page *pg)
{
    pg->width = opts && opts->width_px > 0 ? opts->width_px : SVG_WIDTH_DEF;
    pg->t0 = set->t0;
    pg->t1 = set->t1;
    if (opts && opts->t1 > opts->t0) {
        pg->t0 = opts->t0;
        pg->t1 = opts->t1;
    }
    if (pg->t1 <= pg->t0)
        pg->t1 = pg->t0 + 1e-3;
    const pt_export_set *cmp = opts ? opts->compare : NULL;
    /* with a comparison both sections start at 0 on one axis as long as the
     * longer of them; alone the axis keeps the set's own times */
    pg->a0 = pg->t0;
    pg->a1 = pg->t1;
    if (cmp) {
        double cspan = cmp->t1 - cmp->t0;
        pg->a0 = 0;
        pg->a1 = fmax(pg->t1 - pg->t0, cspan > 0 ? cspan : 0);
    }
    pg->plot_x = SVG_LABEL_PX;
    pg->plot_w = pg->width - SVG_LABEL_PX - 2 * SVG_MARGIN_PX;
    if (pg->plot_w < 40)
        pg->plot_w = 40;
    int band = SVG_ROW_PX + SVG_COMM_PX + SVG_ROW_GAP_PX;
    int lrows = legend_rows(set, cmp, pg->plot_w);
    int cmp_h = cmp ? SVG_SECTION_PX + cmp->row_count * band + SVG_SECTION_PX : 0;
    pg->rows_y = SVG_TOP_PX + cmp_h;
    pg->ay = pg->rows_y + set->row_count * band + 4;
    pg->height = pg->ay + SVG_AXIS_PX + lrows * SVG_LEGEND_ROW + SVG_MARGIN_PX;
    pg->px_per_s = pg->plot_w / (pg->a1 - pg->a0);
    pt_color tc = theme->color[PT_THEME_TEXT];
    hex(tc, pg->fg, "#202020");
    hex(theme->color[PT_THEME_DIM], pg->dim, "#808080");
    hex(theme->color[PT_THEME_BUBBLE], pg->bubble, "#c8c8c8");
    double lum = tc.set ? (0.2126 * tc.r + 0.7152 * tc.g + 0.0722 * tc.b) / 255.0 : 0;
    snprintf(pg->bg, sizeof pg->bg, "%s", lum > SVG_LIGHT_TEXT ? "#1c1c1c" : "#ffffff");
}

/* The document's head: size, fill patterns, background. */
static void put_head(FILE *f, const svg_page *pg)
{
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans Mono, monospace\" "
            "font-size=\"%d\">\n"
            "<defs>\n"
            "<pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" "
            "stroke=\"#000\" stroke-opacity=\"0.35\" stroke-width=\"2\"/></pattern>\n"
            "<pattern id=\"rhatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(-45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" "
            "stroke=\"#000\" stroke-opacity=\"0.35\" stroke-width=\"2\"/></pattern>\n"
            "<pattern id=\"dots\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\">"
            "<circle cx=\"2.5\" cy=\"2.5\" r=\"1\" fill=\"#000\" fill-opacity=\"0.4\"/></pattern>\n"
            "<pattern id=\"cross\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
            "<path d=\"M0 0L6 6M6 0L0 6\" stroke=\"#000\" stroke-opacity=\"0.4\"/></pattern>\n"
            "<pattern id=\"bubble\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">"
            "<circle cx=\"2\" cy=\"2\" r=\"0.7\" fill=\"%s\"/></pattern>\n"
            "</defs>\n"
            "<rect class=\"background\" x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n",
            pg->width, pg->height, pg->width, pg->height, SVG_FONT_PX, pg->dim, pg->width,
            pg->height, pg->bg);
}

/* The title in the largest font that fits the width, then cut. */
static void put_title(FILE *f, const svg_page *pg, const char *title)
{
    if (!title || !*title)
        return;
    size_t n = strlen(title);
    double avail = pg->width - 2 * SVG_MARGIN_PX, px = SVG_TITLE_PX;
    while (px > SVG_TITLE_MIN_PX && text_w(n, px) > avail)
        px -= 0.5;
    size_t fit = (size_t)(avail / (px * SVG_CHAR_EM));
    fprintf(f, "<text class=\"title\" x=\"%d\" y=\"20\" fill=\"%s\" font-size=\"%.1f\">",
            SVG_MARGIN_PX, pg->fg, px);
    put_escaped(f, title, n <= fit ? n : (fit > 3 ? fit - 3 : 0));
    fputs(n <= fit ? "</text>\n" : "...</text>\n", f);
}

/* The comparison above: its section labels and its rows. */
static void put_comparison(FILE *f, const svg_page *pg, const pt_export_svg_opts *opts,
                           const pt_theme *theme)
{
    const pt_export_set *cmp = opts->compare;
    const char *labels[2] = {opts->compare_label ? opts->compare_label : "predicted",
                             opts->label ? opts->label : "measured"};
    int ys[2] = {SVG_TOP_PX + SVG_SECTION_PX - 6, pg->rows_y - 6};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(labels[k]), fit = (size_t)(pg->plot_w / (SVG_FONT_PX * SVG_CHAR_EM));
        fprintf(f, "<text class=\"section\" x=\"%.1f\" y=\"%d\" fill=\"%s\">", pg->plot_x, ys[k],
                pg->fg);
        put_escaped(f, labels[k], n <= fit ? n : (fit > 3 ? fit - 3 : 0));
        fputs(n <= fit ? "</text>\n" : "...</text>\n", f);
    }
    draw_rows(f, cmp, cmp->t0, cmp->t0 + (pg->a1 - pg->a0), pg->px_per_s, pg->plot_x, pg->plot_w,
              SVG_TOP_PX + SVG_SECTION_PX, theme, pg->fg, pg->bubble);
}

/* The axis: ticks at round times in ms; a label that would leave the plot
 * is anchored at its end (or start) instead of its middle. */
static void put_axis(FILE *f, const svg_page *pg, int compared)
{
    double span_ms = (pg->a1 - pg->a0) * 1e3, step = tick_step(span_ms, SVG_TICKS_MAX);
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\"/>\n", pg->plot_x,
            pg->ay, pg->plot_x + pg->plot_w, pg->ay, pg->dim);
    double first = ceil(pg->a0 * 1e3 / step - 1e-9) * step;
    for (double t = first; t <= pg->a1 * 1e3 + step * 1e-6; t += step) {
        if (fabs(t) < step * 1e-6)
            t = 0; /* no "-0" from the rounding of the first tick */
        double x = pg->plot_x + (t / 1e3 - pg->a0) * pg->px_per_s;
        char label[32];
        int n = snprintf(label, sizeof label, "%.*f", decimals, t);
        double half = text_w((size_t)n, SVG_FONT_PX) / 2;
        const char *anchor = "middle";
        if (x + half > pg->width - 2)
            anchor = "end";
        else if (x - half < 2)
            anchor = "start";
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\"/>"
                "<text class=\"tick\" x=\"%.1f\" y=\"%d\" fill=\"%s\" "
                "text-anchor=\"%s\">%s</text>\n",
                x, pg->ay, x, pg->ay + 5, pg->dim, x, pg->ay + 17, pg->fg, anchor, label);
    }
    fprintf(f,
            "<text class=\"axis-title\" x=\"%.1f\" y=\"%d\" fill=\"%s\" "
            "text-anchor=\"middle\">%s</text>\n",
            pg->plot_x + pg->plot_w / 2, pg->ay + 32, pg->fg,
            compared ? "time from the start of each section's first iteration (ms)" : "time (ms)");
}

/* The legend, wrapped to the plot's width. */
static void put_legend(FILE *f, const svg_page *pg, const pt_export_set *set,
                       const pt_export_set *cmp, const pt_theme *theme)
{
    double lx = 0;
    int ly = pg->ay + SVG_AXIS_PX;
    for (int k = 0; k < LEGEND_N; k++) {
        if (!legend_shown(set, cmp, k))
            continue;
        double w = SVG_SWATCH_PX + 4 + text_w(strlen(legend_names[k]), SVG_FONT_PX) + 14;
        if (lx > 0 && lx + w > pg->plot_w) {
            lx = 0;
            ly += SVG_LEGEND_ROW;
        }
        double x = pg->plot_x + lx;
        char col[8];
        hex(theme->color[pt_paint_theme_key(legend_paint[k])], col, "#a0a0a0");
        const char *pat = paint_pattern[legend_paint[k]];
        fprintf(f,
                "<g class=\"legend\"><rect x=\"%.1f\" y=\"%d\" width=\"%d\" height=\"12\" "
                "fill=\"%s\" stroke=\"#000\" stroke-width=\"0.4\"/>",
                x, ly, SVG_SWATCH_PX, legend_paint[k] == PT_PAINT_BUBBLE ? pg->bubble : col);
        if (pat)
            fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%d\" height=\"12\" fill=\"url(#%s)\"/>",
                    x, ly, SVG_SWATCH_PX, pat);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"%s\">%s</text></g>\n", x + SVG_SWATCH_PX + 4,
                ly + 10, pg->fg, legend_names[k]);
        lx += w;
    }
}

int pt_export_svg_write(const pt_export_set *set, const pt_theme *theme,
                        const pt_export_svg_opts *opts, FILE *f, pt_error *err)
{
    pt_theme slide;
    if (!theme) {
        pt_theme_parse(slide_colors, "built-in", &slide, NULL);
        theme = &slide;
    }
    svg_page pg;
    page_layout(set, theme, opts, &pg);
    const pt_export_set *cmp = opts ? opts->compare : NULL;
    put_head(f, &pg);
    put_title(f, &pg, opts && opts->title ? opts->title : set->title);
    if (cmp)
        put_comparison(f, &pg, opts, theme);
    draw_rows(f, set, pg.t0, pg.t1, pg.px_per_s, pg.plot_x, pg.plot_w, pg.rows_y, theme, pg.fg,
              pg.bubble);
    put_axis(f, &pg, cmp != NULL);
    put_legend(f, &pg, set, cmp, theme);
    fputs("</svg>\n", f);
    if (ferror(f))
        return pt_error_set(err, PT_EIO, "export: cannot write the SVG: %s", strerror(errno));
    return 0;
}

typedef struct svg_args {
    const pt_theme *theme;
    const pt_export_svg_opts *opts;
} svg_args;

static int svg_writer(const pt_export_set *set, FILE *f, void *arg, pt_error *err)
{
    const svg_args *a = arg;
    return pt_export_svg_write(set, a->theme, a->opts, f, err);
}

int pt_export_svg(const pt_tline *tl, const pt_theme *theme, const pt_export_svg_opts *opts,
                  char **out, size_t *len, pt_error *err)
{
    pt_export_set set;
    if (pt_export_from_tline(tl, NULL, 0, &set) < 0)
        return pt_error_set(err, PT_ENOMEM, "export: out of memory");
    pt_export_svg_opts o = opts ? *opts : (pt_export_svg_opts){0};
    if (o.t1 > o.t0) { /* the caller's times are on the timeline's clock */
        o.t0 -= tl->t0;
        o.t1 -= tl->t0;
    }
    svg_args args = {theme, &o};
    return pt_export_set_to_text(&set, svg_writer, &args, out, len, err);
}

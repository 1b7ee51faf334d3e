/* The SVG export is slide-ready: `pipetop export --svg` of a recorded run
 * renders with rsvg-convert (librsvg2-bin, installed by scripts/setup.sh)
 * to a picture of the viewBox's size on a white background (a light-text
 * theme gets a dark one), with a title, the legend and the time axis, and
 * every text element (title, row names, micro-batch labels, axis labels,
 * legend) inside the picture by the width its characters take. */
#include "tests/test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "protocol/fileio.h"

#define TDIR        "export_svg_test.d"
#define CHAR_EM     0.602 /* DejaVu Sans Mono's advance, in em */
#define ASCENT_EM   0.8
#define DESCENT_EM  0.25
#define FONT_PX_DEF 11.0

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[len] = 0;
        if (n)
            *n = (size_t)len;
    }
    return b;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* An 8-bit RGB or RGBA, non-interlaced PNG (what rsvg-convert writes)
 * decoded to rows of RGBA; NULL when it is not one. */
static unsigned char *png_rgba(const char *path, int *w, int *h)
{
    size_t n = 0;
    unsigned char *b = (unsigned char *)slurp(path, &n);
    if (!b || n < 8 || memcmp(b, "\x89PNG\r\n\x1a\n", 8)) {
        free(b);
        return NULL;
    }
    unsigned char *idat = NULL;
    size_t ni = 0;
    int ok = 0, bpp = 4;
    for (size_t at = 8; at + 12 <= n;) {
        uint32_t len = be32(b + at);
        const unsigned char *type = b + at + 4, *data = b + at + 8;
        if (at + 12 + len > n)
            break;
        if (!memcmp(type, "IHDR", 4)) {
            *w = (int)be32(data);
            *h = (int)be32(data + 4);
            ok = data[8] == 8 && (data[9] == 6 || data[9] == 2) && data[12] == 0;
            bpp = data[9] == 6 ? 4 : 3;
        } else if (!memcmp(type, "IDAT", 4)) {
            idat = realloc(idat, ni + len);
            memcpy(idat + ni, data, len);
            ni += len;
        }
        at += 12 + len;
    }
    free(b);
    if (!ok || !idat) {
        free(idat);
        return NULL;
    }
    size_t stride = (size_t)*w * (size_t)bpp, raw_n = (stride + 1) * (size_t)*h;
    unsigned char *raw = malloc(raw_n), *out = malloc(stride * (size_t)*h),
                  *rgba = malloc((size_t)*w * 4 * (size_t)*h);
    uLongf got = raw_n;
    if (uncompress(raw, &got, idat, ni) != Z_OK || got != raw_n) {
        free(idat);
        free(raw);
        free(out);
        free(rgba);
        return NULL;
    }
    free(idat);
    for (int y = 0; y < *h; y++) {
        unsigned char f = raw[(size_t)y * (stride + 1)];
        const unsigned char *in = raw + (size_t)y * (stride + 1) + 1;
        unsigned char *row = out + (size_t)y * stride, *up = y ? row - stride : NULL;
        for (size_t x = 0; x < stride; x++) {
            size_t b4 = (size_t)bpp;
            int a = x >= b4 ? row[x - b4] : 0, u = up ? up[x] : 0,
                c = x >= b4 && up ? up[x - b4] : 0;
            int v = in[x];
            if (f == 1)
                v += a;
            else if (f == 2)
                v += u;
            else if (f == 3)
                v += (a + u) / 2;
            else if (f == 4) {
                int p = a + u - c, pa = abs(p - a), pb = abs(p - u), pc = abs(p - c);
                v += pa <= pb && pa <= pc ? a : pb <= pc ? u : c;
            }
            row[x] = (unsigned char)v;
        }
    }
    free(raw);
    for (size_t i = 0; i < (size_t)*w * (size_t)*h; i++)
        for (int k = 0; k < 4; k++)
            rgba[i * 4 + (size_t)k] = k < bpp ? out[i * (size_t)bpp + (size_t)k] : 255;
    free(out);
    return rgba;
}

static double attr(const char *tag, const char *end, const char *name, double def)
{
    char key[32];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(tag, key);
    return p && p < end ? atof(p + strlen(key)) : def;
}

static int attr_is(const char *tag, const char *end, const char *name, const char *value)
{
    char key[64];
    snprintf(key, sizeof key, " %s=\"%s\"", name, value);
    const char *p = strstr(tag, key);
    return p && p < end;
}

/* Characters of a text element's content, entities counted as one. */
static int text_chars(const char *p, const char *end)
{
    int n = 0;
    for (; p < end; p++, n++)
        if (*p == '&')
            while (p < end && *p != ';')
                p++;
    return n;
}

typedef struct svg_facts {
    double w, h;
    int texts, outside, ticks, legend, title;
    char last_tick[32];
} svg_facts;

static void check_svg(const char *svg, svg_facts *s)
{
    memset(s, 0, sizeof *s);
    const char *vb = strstr(svg, "viewBox=\"0 0 ");
    REQUIRE(vb);
    REQUIRE(sscanf(vb, "viewBox=\"0 0 %lf %lf", &s->w, &s->h) == 2);
    for (const char *t = svg; (t = strstr(t, "<text ")); t++) {
        const char *gt = strchr(t, '>'), *close = strstr(t, "</text>");
        REQUIRE(gt && close);
        double fs = attr(t, gt, "font-size", FONT_PX_DEF);
        double x = attr(t, gt, "x", 0), y = attr(t, gt, "y", 0);
        double tw = text_chars(gt + 1, close) * fs * CHAR_EM;
        double left = attr_is(t, gt, "text-anchor", "middle") ? x - tw / 2
                      : attr_is(t, gt, "text-anchor", "end")  ? x - tw
                                                              : x;
        s->texts++;
        if (left < 0 || left + tw > s->w || y - fs * ASCENT_EM < 0 || y + fs * DESCENT_EM > s->h) {
            s->outside++;
            fprintf(stderr, "outside the %gx%g picture: %.*s\n", s->w, s->h, (int)(close - t + 7),
                    t);
        }
        if (attr_is(t, gt, "class", "tick")) {
            s->ticks++;
            snprintf(s->last_tick, sizeof s->last_tick, "%.*s", (int)(close - gt - 1), gt + 1);
        }
        s->title += attr_is(t, gt, "class", "title");
    }
    static const char *const names[] = {"forward", "backward", "send", "optimizer", "bubble"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char want[64];
        snprintf(want, sizeof want, ">%s</text></g>", names[k]);
        s->legend += strstr(svg, want) != NULL;
    }
}

static int is_rgb(const unsigned char *px, int r, int g, int b)
{
    return px[0] == r && px[1] == g && px[2] == b && px[3] == 255;
}

/* Exports the record with extra arguments, renders it; checks what every
 * slide needs. bg: the background expected in the corners. */
static void export_and_render(const char *name, const char *extra, int bg)
{
    char svg[512], png[512], cmd[4096];
    if (system("command -v rsvg-convert >/dev/null") != 0)
        fprintf(stderr, "rsvg-convert is missing: install librsvg2-bin (scripts/setup.sh)\n");
    REQUIRE(system("command -v rsvg-convert >/dev/null") == 0);
    pt_mkdir_p(TDIR, NULL);
    snprintf(svg, sizeof svg, TDIR "/%s.svg", name);
    snprintf(png, sizeof png, TDIR "/%s.png", name);
    snprintf(cmd, sizeof cmd, "'%s/pipetop' export '%s' --svg '%s' %s >/dev/null",
             getenv("PT_BUILD_DIR"), pt_test_path("tests/data/run-dapple4"), svg, extra);
    REQUIRE(system(cmd) == 0);
    char *text = slurp(svg, NULL);
    REQUIRE(text);
    svg_facts s;
    check_svg(text, &s);
    CHECK(s.title == 1);
    CHECK_STR_CONTAINS(text, "fmnist-mlp-deep");
    CHECK(strstr(text, ">time (ms)</text>") ||
          strstr(text, ">time from the start of each section's first iteration (ms)</text>"));
    CHECK(s.legend == 5);
    CHECK(s.ticks >= 3);
    CHECK(s.outside == 0);
    CHECK(strstr(text, "class=\"op\"") != NULL);
    free(text);
    snprintf(cmd, sizeof cmd, "rsvg-convert -o '%s' '%s'", png, svg);
    REQUIRE(system(cmd) == 0);
    int w = 0, h = 0;
    unsigned char *px = png_rgba(png, &w, &h);
    REQUIRE(px);
    CHECK(w == (int)s.w && h == (int)s.h);
    const unsigned char *corner[4] = {px, px + (size_t)(w - 1) * 4, px + (size_t)(h - 1) * w * 4,
                                      px + ((size_t)(h - 1) * w + (size_t)w - 1) * 4};
    for (int k = 0; k < 4; k++)
        CHECK(is_rgb(corner[k], bg, bg, bg));
    /* and something is drawn: many pixels differ from the background */
    long drawn = 0;
    for (long i = 0; i < (long)w * h; i++)
        drawn += !is_rgb(px + i * 4, bg, bg, bg);
    CHECK(drawn > (long)w * h / 20);
    free(px);
}

static void test_slide_default(void)
{
    export_and_render("default", "", 255);
}

static void test_narrow(void)
{
    /* a narrow picture wraps the legend and shortens the title to fit */
    export_and_render("narrow", "--width 320 --last 2", 255);
}

static void test_dark_theme(void)
{
    export_and_render("dark", "--theme dark --steps 1:3", 0x1c);
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* --compare: the simulator's prediction of the shown plan above the
 * measurement, labelled, on one axis that starts at 0; each stage replica
 * has a band in both; still a slide (the checks of export_and_render). */
static void test_compare(void)
{
    export_and_render("compare", "--compare", 255);
    char *text = slurp(TDIR "/compare.svg", NULL);
    REQUIRE(text);
    /* labelled with the figures status prints (tui/record/figures.h) */
    CHECK_STR_CONTAINS(text, ">predicted: ");
    CHECK_STR_CONTAINS(text, " ms/iteration (analytic, ");
    CHECK_STR_CONTAINS(text, ">measured: ");
    CHECK_STR_CONTAINS(text, " ms/iteration (median of 4 steps); 4 iterations shown</text>");
    CHECK_STR_CONTAINS(text, ">time from the start of each section's first iteration (ms)</text>");
    for (int s = 0; s < 4; s++) {
        char row[32];
        snprintf(row, sizeof row, ">s%dr0</text>", s);
        CHECK(count_of(text, row) == 2);
    }
    /* the very numbers `pipetop status --json` gives for the run */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/pipetop' status --json '%s' > " TDIR "/status.json",
             getenv("PT_BUILD_DIR"), pt_test_path("tests/data/run-dapple4"));
    REQUIRE(system(cmd) == 0);
    char *st = slurp(TDIR "/status.json", NULL);
    cJSON *j = st ? cJSON_Parse(st) : NULL;
    REQUIRE(j);
    char want[128];
    snprintf(want, sizeof want, ">predicted: %.3f ms/iteration (",
             cJSON_GetObjectItem(j, "predicted_iteration_ms")->valuedouble);
    CHECK_STR_CONTAINS(text, want);
    snprintf(want, sizeof want, ">measured: %.3f ms/iteration (",
             cJSON_GetObjectItem(j, "measured_iteration_ms")->valuedouble);
    CHECK_STR_CONTAINS(text, want);
    cJSON_Delete(j);
    free(st);
    /* the axis starts at 0 at the plot's left edge (the row labels' column) */
    const char *first = strstr(text, "<text class=\"tick\"");
    REQUIRE(first);
    static const char at_left[] = "<text class=\"tick\" x=\"48.0\"";
    CHECK(!strncmp(first, at_left, sizeof at_left - 1));
    const char *end = strstr(first, "</text>");
    REQUIRE(end && end - first > 2);
    CHECK(!strncmp(end - 2, ">0</text>", 9));
    /* the prediction's ops are drawn: more op blocks than without it */
    char *plain = slurp(TDIR "/default.svg", NULL);
    REQUIRE(plain);
    CHECK(count_of(text, "class=\"op\"") > count_of(plain, "class=\"op\""));
    free(plain);
    free(text);
    /* and --compare without --svg is refused */
    snprintf(cmd, sizeof cmd, "'%s/pipetop' export '%s' --compare --trace /dev/null 2>/dev/null",
             getenv("PT_BUILD_DIR"), pt_test_path("tests/data/run-dapple4"));
    CHECK(system(cmd) != 0);
}

PT_TEST_MAIN({"slide_default", test_slide_default}, {"narrow", test_narrow},
             {"dark_theme", test_dark_theme}, {"compare", test_compare})

/* Colour themes (see theme.h). */
#include "tui/export/theme.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/datadir.h"
#include "protocol/fileio.h"

#define THEME_PATH_MAX 1024
#define THEME_EXT      ".theme"

static const char *const key_names[PT_THEME_KEY_COUNT] = {
    "text",      "dim",       "accent",     "header",     "tab",         "status",    "error",
    "warn",      "ok",        "border",     "select",     "boundary",    "fwd",       "bwd",
    "recompute", "bubble",    "comm",       "allreduce",  "optstep",     "predicted", "mem.weights",
    "mem.grads", "mem.optim", "mem.acts",   "mem.stash",  "mem.buffers", "loss",      "throughput",
    "limit",     "bwd.input", "bwd.weight", "background", "foreground"};

/* Built-in dark theme: Okabe-Ito hues for the op kinds (they stay apart for
 * the common colour-vision deficiencies), greys for chrome. */
static const unsigned dark_rgb[PT_THEME_KEY_COUNT] = {
    0xd0d0d0, /* text */
    0x808080, /* dim */
    0x56b4e9, /* accent */
    0xe0e0e0, /* header */
    0xf0e442, /* tab */
    0xc0c0c0, /* status */
    0xff5f5f, /* error */
    0xe69f00, /* warn */
    0x009e73, /* ok */
    0x5f5f5f, /* border */
    0x56b4e9, /* select */
    0xf0e442, /* boundary */
    0x56b4e9, /* fwd: sky blue */
    0xe69f00, /* bwd: orange */
    0xcc79a7, /* recompute: reddish purple */
    0x4e4e4e, /* bubble */
    0x009e73, /* comm: bluish green */
    0xd55e00, /* allreduce: vermillion */
    0xf0e442, /* optstep: yellow */
    0x9e9e9e, /* predicted */
    0x0072b2, /* mem.weights */
    0xe69f00, /* mem.grads */
    0xcc79a7, /* mem.optim */
    0x56b4e9, /* mem.acts */
    0xd55e00, /* mem.stash */
    0x009e73, /* mem.buffers */
    0xe69f00, /* loss */
    0x56b4e9, /* throughput */
    0xff5f5f, /* limit */
    0xe69f00, /* bwd.input: orange like bwd, told apart by its fill */
    0x0072b2, /* bwd.weight: blue */
    0x000000, /* background: unset (the terminal's) */
    0x000000, /* foreground: unset (the terminal's) */
};

const char *pt_theme_key_name(int key)
{
    return key >= 0 && key < PT_THEME_KEY_COUNT ? key_names[key] : NULL;
}

void pt_theme_default(pt_theme *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "dark");
    for (int k = 0; k < PT_THEME_KEY_COUNT; k++) {
        if (k == PT_THEME_BACKGROUND || k == PT_THEME_FOREGROUND)
            continue; /* the terminal's own */
        out->color[k].set = 1;
        out->color[k].r = (unsigned char)(dark_rgb[k] >> 16);
        out->color[k].g = (unsigned char)(dark_rgb[k] >> 8);
        out->color[k].b = (unsigned char)dark_rgb[k];
    }
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Parses "#RRGGBB" or "none" (already trimmed). */
static int parse_color(const char *v, pt_color *out)
{
    if (!strcmp(v, "none") || !strcmp(v, "default")) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    if (v[0] != '#' || strlen(v) != 7)
        return -1;
    int d[6];
    for (int i = 0; i < 6; i++)
        if ((d[i] = hexval((unsigned char)v[1 + i])) < 0)
            return -1;
    out->set = 1;
    out->r = (unsigned char)(d[0] * 16 + d[1]);
    out->g = (unsigned char)(d[2] * 16 + d[3]);
    out->b = (unsigned char)(d[4] * 16 + d[5]);
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

int pt_theme_parse(const char *text, const char *source, pt_theme *out, pt_error *err)
{
    if (!out)
        return pt_error_set(err, PT_EINVAL, "theme: no output");
    pt_theme_default(out);
    if (!text)
        return pt_error_set(err, PT_EINVAL, "%s: no text", source ? source : "theme");
    const char *src = source ? source : "theme";
    int lineno = 0;
    const char *p = text;
    pt_theme parsed = *out;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char line[256];
        lineno++;
        if (n >= sizeof line) {
            pt_error_set(err, PT_EPARSE, "%s: line %d: longer than %zu characters", src, lineno,
                         sizeof line - 1);
            return PT_EPARSE;
        }
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (nl ? 1 : 0);
        char *t = trim(line);
        if (!*t || *t == '#' || *t == ';')
            continue;
        char *eq = strchr(t, '=');
        if (!eq)
            return pt_error_set(err, PT_EPARSE, "%s: line %d: expected 'key = #RRGGBB'", src,
                                lineno);
        *eq = 0;
        char *key = trim(t), *val = trim(eq + 1);
        int k = -1;
        for (int i = 0; i < PT_THEME_KEY_COUNT; i++)
            if (!strcmp(key, key_names[i]))
                k = i;
        if (k < 0)
            continue; /* unknown keys are ignored on purpose */
        if (parse_color(val, &parsed.color[k]) < 0)
            return pt_error_set(err, PT_EPARSE,
                                "%s: line %d: %s: '%s' is not a colour (#RRGGBB or none)", src,
                                lineno, key, val);
    }
    *out = parsed;
    return 0;
}

int pt_theme_load(const char *path, pt_theme *out, pt_error *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = pt_file_read(path, &text, &len, err);
    if (rc < 0) {
        if (out)
            pt_theme_default(out);
        return rc;
    }
    rc = pt_theme_parse(text, path, out, err);
    free(text);
    if (rc == 0) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t n = strlen(base);
        size_t ext = strlen(THEME_EXT);
        if (n > ext && !strcmp(base + n - ext, THEME_EXT))
            n -= ext;
        if (n >= sizeof out->name)
            n = sizeof out->name - 1;
        memcpy(out->name, base, n);
        out->name[n] = 0;
    }
    return rc;
}

static int exists(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    return f != NULL;
}

int pt_theme_find(const char *name, pt_theme *out, pt_error *err)
{
    if (!name || !*name || !out)
        return pt_error_set(err, PT_EINVAL, "theme: no name");
    if (strchr(name, '/'))
        return pt_theme_load(name, out, err);
    char dirs[3][THEME_PATH_MAX];
    int nd = 0;
    const char *env = getenv("PT_THEMES_DIR");
    if (env && *env)
        snprintf(dirs[nd++], THEME_PATH_MAX, "%s", env);
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(dirs[nd++], THEME_PATH_MAX, "%s/pipetop/themes", xdg);
    else if (home && *home)
        snprintf(dirs[nd++], THEME_PATH_MAX, "%s/.config/pipetop/themes", home);
    pt_error derr = {0};
    if (pt_datadir_folder("themes", dirs[nd], THEME_PATH_MAX, &derr) < 0)
        snprintf(dirs[nd], THEME_PATH_MAX, "(%.*s)", THEME_PATH_MAX - 3, derr.msg);
    nd++;
    char path[THEME_PATH_MAX + PT_NAME_MAX + 16];
    for (int i = 0; i < nd; i++) {
        int n = snprintf(path, sizeof path, "%s/%s%s", dirs[i], name, THEME_EXT);
        if (n > 0 && (size_t)n < sizeof path && exists(path))
            return pt_theme_load(path, out, err);
    }
    if (!strcmp(name, "dark")) {
        pt_theme_default(out);
        return 0;
    }
    pt_theme_default(out);
    return pt_error_set(err, PT_ENOTFOUND, "theme '%s' not found (looked in %s%s%s%s%s)", name,
                        dirs[0], nd > 1 ? ", " : "", nd > 1 ? dirs[1] : "", nd > 2 ? ", " : "",
                        nd > 2 ? dirs[2] : "");
}

int pt_theme_paints_background(const pt_theme *theme)
{
    return theme->color[PT_THEME_BACKGROUND].set && theme->color[PT_THEME_FOREGROUND].set;
}

int pt_theme_is_mono(const pt_theme *theme)
{
    for (int k = 0; k < PT_THEME_KEY_COUNT; k++)
        if (theme->color[k].set)
            return 0;
    return 1;
}

static long dist2(int r, int g, int b, int r2, int g2, int b2)
{
    long dr = r - r2, dg = g - g2, db = b - b2;
    return dr * dr + dg * dg + db * db;
}

/* Levels of the xterm 6x6x6 colour cube. */
static const int cube_level[6] = {0, 95, 135, 175, 215, 255};

static int nearest_level(int v)
{
    int best = 0;
    for (int i = 1; i < 6; i++)
        if (abs(cube_level[i] - v) < abs(cube_level[best] - v))
            best = i;
    return best;
}

int pt_color_to_256(pt_color c)
{
    int ri = nearest_level(c.r), gi = nearest_level(c.g), bi = nearest_level(c.b);
    int cube = 16 + 36 * ri + 6 * gi + bi;
    long dc = dist2(c.r, c.g, c.b, cube_level[ri], cube_level[gi], cube_level[bi]);
    /* grey ramp 232..255: 8, 18, ..., 238 */
    int avg = (c.r + c.g + c.b) / 3;
    int gi2 = (avg - 8 + 5) / 10;
    if (gi2 < 0)
        gi2 = 0;
    if (gi2 > 23)
        gi2 = 23;
    int gv = 8 + 10 * gi2;
    long dg = dist2(c.r, c.g, c.b, gv, gv, gv);
    return dg < dc ? 232 + gi2 : cube;
}

int pt_color_to_8(pt_color c)
{
    /* ANSI order: black red green yellow blue magenta cyan white, as the
     * xterm defaults draw them */
    static const int pal[8][3] = {{0, 0, 0},   {205, 0, 0},   {0, 205, 0},   {205, 205, 0},
                                  {0, 0, 238}, {205, 0, 205}, {0, 205, 205}, {229, 229, 229}};
    int best = 0;
    long bd = -1;
    for (int i = 0; i < 8; i++) {
        long d = dist2(c.r, c.g, c.b, pal[i][0], pal[i][1], pal[i][2]);
        if (bd < 0 || d < bd) {
            bd = d;
            best = i;
        }
    }
    return best;
}

static const pt_theme_key paint_key[PT_PAINT_COUNT] = {
    [PT_PAINT_FWD] = PT_THEME_FWD,
    [PT_PAINT_BWD] = PT_THEME_BWD,
    [PT_PAINT_BWD_INPUT] = PT_THEME_BWD_INPUT,
    [PT_PAINT_BWD_WEIGHT] = PT_THEME_BWD_WEIGHT,
    [PT_PAINT_RECOMPUTE] = PT_THEME_RECOMPUTE,
    [PT_PAINT_COMM] = PT_THEME_COMM,
    [PT_PAINT_ALLREDUCE] = PT_THEME_ALLREDUCE,
    [PT_PAINT_OPTSTEP] = PT_THEME_OPTSTEP,
    [PT_PAINT_WAIT] = PT_THEME_BUBBLE,
    [PT_PAINT_BUBBLE] = PT_THEME_BUBBLE,
};

pt_theme_key pt_paint_theme_key(int paint)
{
    return paint >= 0 && paint < PT_PAINT_COUNT ? paint_key[paint] : PT_THEME_TEXT;
}

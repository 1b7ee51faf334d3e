/* Console settings file (see config.h). */
#include "tui/console/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"

#define CONFIG_LINE_MAX 512

void pt_config_default(pt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->theme, sizeof cfg->theme, "dark");
    cfg->refresh_hz = PT_CONFIG_REFRESH_DEF;
    cfg->mouse = 1;
    snprintf(cfg->planner, sizeof cfg->planner, "dapple");
    cfg->timeline_iters = PT_CONFIG_ITERS_DEF;
    cfg->timeline_split = 0;
    cfg->replay_speed = 1.0;
    cfg->straggler_pct = PT_CONFIG_STRAGGLER_DEF;
}

int pt_config_path(char *buf, size_t cap, pt_error *err)
{
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/pipetop/config", xdg);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.config/pipetop/config", home);
    else
        return pt_error_set(err, PT_ENOTFOUND, "config: neither XDG_CONFIG_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= cap)
        return pt_error_set(err, PT_ERANGE, "config: path longer than %zu bytes", cap);
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

static int parse_int(const char *v, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

static int parse_double(const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "yes"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "no"))
        *out = 0;
    else
        return -1;
    return 0;
}

static int parse_name(const char *v, char *out, size_t cap)
{
    size_t n = strlen(v);
    if (n == 0 || n >= cap)
        return -1;
    memcpy(out, v, n + 1);
    return 0;
}

/* Applies one key; 1 unknown key, 0 applied, -1 bad value (reason in why). */
static int apply(pt_config *c, const char *key, const char *val, const char **why)
{
    if (!strcmp(key, "theme")) {
        *why = "a name of 1-63 characters";
        return parse_name(val, c->theme, sizeof c->theme);
    }
    if (!strcmp(key, "planner")) {
        *why = "a name of 1-63 characters";
        return parse_name(val, c->planner, sizeof c->planner);
    }
    if (!strcmp(key, "refresh_hz")) {
        *why = "an integer in [1, 60]";
        return parse_int(val, PT_CONFIG_REFRESH_MIN, PT_CONFIG_REFRESH_MAX, &c->refresh_hz);
    }
    if (!strcmp(key, "timeline_iters")) {
        *why = "an integer in [1, 64]";
        return parse_int(val, 1, PT_CONFIG_ITERS_MAX, &c->timeline_iters);
    }
    if (!strcmp(key, "mouse")) {
        *why = "true or false";
        return parse_bool(val, &c->mouse);
    }
    if (!strcmp(key, "timeline_split")) {
        *why = "true or false";
        return parse_bool(val, &c->timeline_split);
    }
    if (!strcmp(key, "replay_speed")) {
        *why = "a number in [0.01, 1000]";
        return parse_double(val, PT_CONFIG_SPEED_MIN, PT_CONFIG_SPEED_MAX, &c->replay_speed);
    }
    if (!strcmp(key, "straggler_pct")) {
        *why = "a number in [1, 1000]";
        return parse_double(val, PT_CONFIG_STRAGGLER_MIN, PT_CONFIG_STRAGGLER_MAX,
                            &c->straggler_pct);
    }
    return 1;
}

int pt_config_parse(const char *text, const char *source, pt_config *cfg, pt_error *err)
{
    if (!cfg)
        return pt_error_set(err, PT_EINVAL, "config: no output");
    pt_config_default(cfg);
    const char *src = source ? source : "config";
    if (!text)
        return 0;
    pt_config c = *cfg;
    int lineno = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char line[CONFIG_LINE_MAX];
        lineno++;
        if (n >= sizeof line)
            return pt_error_set(err, PT_EINVAL, "%s: line %d: longer than %d characters", src,
                                lineno, CONFIG_LINE_MAX - 1);
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (nl ? 1 : 0);
        char *t = trim(line);
        if (!*t || *t == '#')
            continue;
        char *eq = strchr(t, '=');
        if (!eq)
            return pt_error_set(err, PT_EINVAL, "%s: line %d: expected 'key = value'", src, lineno);
        *eq = 0;
        char *key = trim(t), *val = trim(eq + 1);
        const char *why = "";
        if (apply(&c, key, val, &why) < 0)
            return pt_error_set(err, PT_EINVAL, "%s: line %d: %s: '%s' is not %s", src, lineno, key,
                                val, why);
    }
    *cfg = c;
    return 0;
}

int pt_config_load(const char *path, pt_config *cfg, pt_error *err)
{
    char *text = NULL;
    size_t len = 0;
    pt_config_default(cfg);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    fclose(f);
    int rc = pt_file_read(path, &text, &len, err);
    if (rc < 0)
        return rc;
    rc = pt_config_parse(text, path, cfg, err);
    free(text);
    return rc;
}

int pt_config_save(const char *path, const pt_config *cfg, pt_error *err)
{
    char dir[PT_CONFIG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        int rc = pt_mkdir_p(dir, err);
        if (rc < 0)
            return rc;
    }
    char text[2048];
    int n = snprintf(
        text, sizeof text,
        "# pipetop console settings (written by pipetop; unknown keys are ignored)\n"
        "theme = %s\nrefresh_hz = %d\nmouse = %s\nplanner = %s\n"
        "timeline_iters = %d\ntimeline_split = %s\nreplay_speed = %g\nstraggler_pct = %g\n",
        cfg->theme, cfg->refresh_hz, cfg->mouse ? "true" : "false", cfg->planner,
        cfg->timeline_iters, cfg->timeline_split ? "true" : "false", cfg->replay_speed,
        cfg->straggler_pct);
    if (n < 0 || (size_t)n >= sizeof text)
        return pt_error_set(err, PT_ERANGE, "%s: settings too long", path);
    return pt_file_write_atomic(path, text, (size_t)n, err);
}

/* Themes and settings: every shipped theme parses and names every key, the
 * built-in default equals themes/dark.theme, unknown keys are ignored and bad
 * values refused with the line, colour fallbacks pick the nearest palette
 * entry, glyphs tell op kinds apart without colour; the config file round
 * trips and is written atomically under $XDG_CONFIG_HOME. */
#include "tests/test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "tui/console/config.h"
#include "tui/export/theme.h"
#include "tui/export/timeline_ascii.h"

static const char *const shipped[] = {"dark", "light", "mono", "okabe-ito"};

static void test_shipped_themes(void)
{
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/themes/%s.theme", getenv("PT_SOURCE_DIR"), shipped[i]);
        char *text = NULL;
        size_t len;
        pt_error err = {0};
        REQUIRE(pt_file_read(path, &text, &len, &err) == 0);
        /* every key is written out, so a theme never silently inherits dark's */
        for (int k = 0; k < PT_THEME_KEY_COUNT; k++) {
            char needle[64];
            snprintf(needle, sizeof needle, "\n%s ", pt_theme_key_name(k));
            CHECK_MSG(strstr(text, needle), "%s lacks %s", shipped[i], pt_theme_key_name(k));
        }
        free(text);
        pt_theme t;
        CHECK(pt_theme_find(shipped[i], &t, &err) == 0);
        CHECK(!strcmp(t.name, shipped[i]));
        CHECK(pt_theme_is_mono(&t) == !strcmp(shipped[i], "mono"));
    }
}

static void test_default_is_dark_file(void)
{
    pt_theme def, file;
    pt_theme_default(&def);
    REQUIRE(pt_theme_find("dark", &file, NULL) == 0);
    for (int k = 0; k < PT_THEME_KEY_COUNT; k++)
        CHECK_MSG(!memcmp(&def.color[k], &file.color[k], sizeof(pt_color)), "key %s",
                  pt_theme_key_name(k));
}

static void test_okabe_ito_palette(void)
{
    static const unsigned palette[] = {0x000000, 0xe69f00, 0x56b4e9, 0x009e73,
                                       0xf0e442, 0x0072b2, 0xd55e00, 0xcc79a7};
    pt_theme t;
    REQUIRE(pt_theme_find("okabe-ito", &t, NULL) == 0);
    /* the op kinds and memory categories use palette colours only, and the
     * op kinds are pairwise different */
    int keys[] = {PT_THEME_FWD,         PT_THEME_BWD,       PT_THEME_RECOMPUTE,
                  PT_THEME_COMM,        PT_THEME_ALLREDUCE, PT_THEME_OPTSTEP,
                  PT_THEME_MEM_WEIGHTS, PT_THEME_MEM_ACTS,  PT_THEME_MEM_STASH};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        pt_color c = t.color[keys[i]];
        unsigned rgb = (unsigned)c.r << 16 | (unsigned)c.g << 8 | c.b;
        int in = 0;
        for (size_t j = 0; j < 8; j++)
            in |= rgb == palette[j];
        CHECK_MSG(c.set && in, "%s = #%06x", pt_theme_key_name(keys[i]), rgb);
        for (size_t j = 0; j < i && j < 6; j++)
            if (i < 6)
                CHECK(memcmp(&t.color[keys[i]], &t.color[keys[j]], sizeof(pt_color)) != 0);
    }
}

static void test_parse_rules(void)
{
    pt_theme t;
    pt_error err = {0};
    CHECK(pt_theme_parse("# comment\nfwd = #102030\nsparkle = #zzzzzz\n  ; also comment\n"
                         "bwd=none\n",
                         "x.theme", &t, &err) == 0);
    CHECK(t.color[PT_THEME_FWD].set && t.color[PT_THEME_FWD].r == 0x10 &&
          t.color[PT_THEME_FWD].g == 0x20 && t.color[PT_THEME_FWD].b == 0x30);
    CHECK(!t.color[PT_THEME_BWD].set);
    pt_theme def;
    pt_theme_default(&def);
    CHECK(!memcmp(&t.color[PT_THEME_TEXT], &def.color[PT_THEME_TEXT], sizeof(pt_color)));
    CHECK(pt_theme_parse("text = #fff\n", "y.theme", &t, &err) == PT_EPARSE);
    CHECK_STR_CONTAINS(err.msg, "y.theme: line 1: text");
    CHECK(pt_theme_parse("\n\nfwd #123456\n", "z.theme", &t, &err) == PT_EPARSE);
    CHECK_STR_CONTAINS(err.msg, "line 3");
    CHECK(pt_theme_parse("fwd = #12345g\n", "z.theme", &t, &err) == PT_EPARSE);
    CHECK(pt_theme_find("no-such-theme", &t, &err) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "no-such-theme");
}

static void test_fallback_colors(void)
{
    /* exact cube and grey entries map to themselves; 8 colours to the nearest */
    for (int i = 16; i < 232; i++) {
        static const int lv[6] = {0, 95, 135, 175, 215, 255};
        int v = i - 16;
        pt_color c = {1, (unsigned char)lv[v / 36], (unsigned char)lv[v / 6 % 6],
                      (unsigned char)lv[v % 6]};
        int got = pt_color_to_256(c);
        /* greys of the cube may equally be matched by the ramp: accept equal distance */
        if (got != i && !(got >= 232 && c.r == c.g && c.g == c.b))
            CHECK_MSG(0, "cube %d mapped to %d", i, got);
    }
    for (int g = 0; g < 24; g++) {
        unsigned char v = (unsigned char)(8 + 10 * g);
        pt_color c = {1, v, v, v};
        CHECK(pt_color_to_256(c) == 232 + g);
    }
    pt_color red = {1, 250, 10, 10}, blue = {1, 0, 0, 200}, white = {1, 255, 255, 255};
    CHECK(pt_color_to_8(red) == 1);
    CHECK(pt_color_to_8(blue) == 4);
    CHECK(pt_color_to_8(white) == 7);
}

static void test_glyphs_distinct(void)
{
    /* fwd, bwd, recompute, comm, all-reduce, optimizer and bubble are told
     * apart by their fill character alone */
    for (int a = 0; a < PT_PAINT_COUNT; a++)
        for (int b = 0; b < a; b++)
            if (a != PT_PAINT_WAIT && b != PT_PAINT_WAIT) /* a wait is blank */
                CHECK(pt_timeline_fill(a) != pt_timeline_fill(b));
    CHECK(pt_timeline_fill(PT_PAINT_COUNT) == '?');
    /* every op kind has a theme key of its own paint class, ops that compute
     * and idle time never share one */
    for (int k = 0; k < PT_OP_KIND_COUNT; k++)
        if (pt_op_is_compute(k))
            CHECK(pt_paint_theme_key(pt_op_paint_of(k)) != pt_paint_theme_key(PT_PAINT_BUBBLE));
    CHECK(pt_paint_theme_key(pt_op_paint_of(PT_OP_FWD)) == PT_THEME_FWD);
    CHECK(pt_paint_theme_key(pt_op_paint_of(PT_OP_SEND_GRAD)) == PT_THEME_COMM);
    CHECK(pt_paint_theme_key(PT_PAINT_COUNT) == PT_THEME_TEXT);
}

static void test_config_roundtrip(void)
{
    char dir[] = "/tmp/pt-config-XXXXXX";
    REQUIRE(mkdtemp(dir));
    setenv("XDG_CONFIG_HOME", dir, 1);
    char path[PT_CONFIG_PATH_MAX];
    REQUIRE(pt_config_path(path, sizeof path, NULL) == 0);
    char want[1100];
    snprintf(want, sizeof want, "%s/pipetop/config", dir);
    CHECK(!strcmp(path, want));
    pt_config c, d;
    pt_error err = {0};
    /* a missing file gives the defaults */
    CHECK(pt_config_load(path, &c, &err) == 0);
    CHECK(!strcmp(c.theme, "dark") && c.refresh_hz == PT_CONFIG_REFRESH_DEF && c.mouse == 1);
    snprintf(c.theme, sizeof c.theme, "okabe-ito");
    c.refresh_hz = 25;
    c.mouse = 0;
    c.timeline_iters = 5;
    c.timeline_split = 1;
    c.replay_speed = 2.5;
    c.straggler_pct = 35;
    snprintf(c.planner, sizeof c.planner, "2bw");
    REQUIRE(pt_config_save(path, &c, &err) == 0);
    REQUIRE(pt_config_load(path, &d, &err) == 0);
    CHECK(!strcmp(d.theme, "okabe-ito") && d.refresh_hz == 25 && d.mouse == 0 &&
          d.timeline_iters == 5 && d.timeline_split == 1 && d.replay_speed == 2.5 &&
          d.straggler_pct == 35 && !strcmp(d.planner, "2bw"));
    /* no temporary file is left beside it */
    char tmpdir[1100];
    snprintf(tmpdir, sizeof tmpdir, "%s/pipetop", dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 1", tmpdir);
    CHECK(system(cmd) == 0);
    /* bad values are refused with the line; unknown keys ignored */
    CHECK(pt_config_parse("future_key = 7\nrefresh_hz = 7\n", "cfg", &d, &err) == 0);
    CHECK(d.refresh_hz == 7);
    CHECK(pt_config_parse("mouse = true\nrefresh_hz = 0\n", "cfg", &d, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "cfg: line 2: refresh_hz");
    CHECK(d.refresh_hz == PT_CONFIG_REFRESH_DEF);
    CHECK(pt_config_parse("replay_speed = fast\n", "cfg", &d, &err) == PT_EINVAL);
    CHECK(pt_config_parse("straggler_pct = 0\n", "cfg", &d, &err) == PT_EINVAL);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

PT_TEST_MAIN({"shipped_themes", test_shipped_themes},
             {"default_is_dark", test_default_is_dark_file}, {"okabe_ito", test_okabe_ito_palette},
             {"parse_rules", test_parse_rules}, {"fallback_colors", test_fallback_colors},
             {"glyphs", test_glyphs_distinct}, {"config_roundtrip", test_config_roundtrip})

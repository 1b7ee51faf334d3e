/* Layout of the console's panels: at every terminal size from 80x24 to
 * 300x100 and in every view of the view table (timeline compared or not),
 * panels lie inside the screen, never overlap, cover it completely (so large
 * terminals are used), and each is large enough to show a framed line of
 * text. */
#include <string.h>

#include "tests/test.h"
#include "tui/console/layout.h"
#include "tui/console/ui.h"
#include "tui/console/view.h"

#include "protocol/error.h"

/* The layout of view `name` with the timeline compared (split) or not. */
static int lay(const char *name, int split, int rows, int cols, pt_layout *l)
{
    static pt_ui ui; /* layouts read the shared timeline mode only */
    ui.tl.mode = split ? PT_TL_BOTH : PT_TL_MEASURED;
    int v = pt_view_find(name);
    CHECK_MSG(v >= 0, "no view %s", name);
    return pt_view_layout(v, &ui, NULL, rows, cols, l);
}

/* A framed panel needs 2 border rows plus one of content and room for a title. */
#define MIN_PANEL_ROWS 3
#define MIN_PANEL_COLS 20

/* Panels (frame included) of the built-in views. */
static int expected_panels(const char *name, int split)
{
    static const struct {
        const char *name;
        int panels, split_panels;
    } known[] = {
        {"plan", 5, 5}, {"timeline", 4, 5}, {"stats", 6, 6}, {"agents", 3, 3}, {"help", 3, 3}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(known[i].name, name))
            return split ? known[i].split_panels : known[i].panels;
    return -1;
}

static int check_one(const char *name, int split, int rows, int cols)
{
    pt_layout l;
    int bad = 0;
    if (lay(name, split, rows, cols, &l) != 0)
        return 1;
    if (l.count != expected_panels(name, split))
        bad++;
    long area = 0;
    for (int i = 0; i < l.count; i++) {
        const pt_rect *r = &l.rect[i];
        if (r->y < 0 || r->x < 0 || r->y + r->h > rows || r->x + r->w > cols)
            bad++;
        if (l.framed[i] ? (r->h < MIN_PANEL_ROWS || r->w < MIN_PANEL_COLS) : r->h < 1)
            bad++;
        area += (long)r->h * r->w;
        for (int j = 0; j < i; j++)
            if (pt_rect_overlap(r, &l.rect[j]))
                bad++;
    }
    /* disjoint panels whose areas add up to the screen cover it exactly */
    if (area != (long)rows * cols)
        bad++;
    if (bad)
        fprintf(stderr, "layout %s split %d at %dx%d: %d problems\n", name, split, cols, rows, bad);
    return bad;
}

static void test_all_sizes(void)
{
    int failures = 0;
    CHECK(pt_view_count() == 5); /* every built-in view is checked */
    for (int v = 0; v < pt_view_count(); v++)
        for (int split = 0; split <= 1; split++)
            for (int rows = 24; rows <= 100; rows++)
                for (int cols = 80; cols <= 300; cols++)
                    if (check_one(pt_view_at(v)->name, split, rows, cols) && ++failures > 20)
                        goto out;
out:
    CHECK(failures == 0);
}

static void test_small_sizes_still_disjoint(void)
{
    /* between the minimum and 80x24 the layout must still be disjoint and
     * inside the screen (panel size is allowed to shrink there) */
    for (int v = 0; v < pt_view_count(); v++)
        for (int rows = PT_LAYOUT_MIN_ROWS; rows < 24; rows++)
            for (int cols = PT_LAYOUT_MIN_COLS; cols < 80; cols++) {
                pt_layout l;
                REQUIRE(lay(pt_view_at(v)->name, 0, rows, cols, &l) == 0);
                long area = 0;
                for (int i = 0; i < l.count; i++) {
                    const pt_rect *r = &l.rect[i];
                    CHECK(r->h >= 1 && r->w >= 1);
                    CHECK(r->y >= 0 && r->x >= 0 && r->y + r->h <= rows && r->x + r->w <= cols);
                    for (int j = 0; j < i; j++)
                        CHECK(!pt_rect_overlap(r, &l.rect[j]));
                    area += (long)r->h * r->w;
                }
                CHECK(area == (long)rows * cols);
            }
}

static void test_too_small(void)
{
    pt_layout l;
    CHECK(lay("plan", 0, PT_LAYOUT_MIN_ROWS - 1, 80, &l) == PT_ERANGE);
    CHECK(lay("plan", 0, 24, PT_LAYOUT_MIN_COLS - 1, &l) == PT_ERANGE);
    CHECK(pt_layout_find_name(&l, "plan-layers") == NULL);
    CHECK(pt_view_layout(pt_view_count(), NULL, NULL, 24, 80, &l) == PT_EINVAL);
    CHECK(lay("plan", 0, 1, 1, &l) == PT_ERANGE);
    CHECK(l.count == 0);
}

static void test_wide_uses_room(void)
{
    /* side by side from PT_LAYOUT_WIDE_COLS: the layer list is not as wide as
     * the screen; stacked below it */
    pt_layout l;
    REQUIRE(lay("plan", 0, 60, 200, &l) == 0);
    const pt_rect *layers = pt_layout_find_name(&l, "plan-layers");
    REQUIRE(layers);
    CHECK(layers->w < 200 && layers->h == 58);
    REQUIRE(lay("plan", 0, 24, 80, &l) == 0);
    layers = pt_layout_find_name(&l, "plan-layers");
    REQUIRE(layers);
    CHECK(layers->w == 80 && layers->h >= 10);
    /* split timeline: two Gantt panels of near-equal height */
    REQUIRE(lay("timeline", 1, 60, 200, &l) == 0);
    const pt_rect *a = pt_layout_find_name(&l, "tl-main"), *b = pt_layout_find_name(&l, "tl-pred");
    REQUIRE(a && b);
    CHECK(a->h - b->h <= 1 && b->h - a->h <= 1);
    CHECK(pt_rect_contains(a, 1, 0) && !pt_rect_contains(a, 0, 0));
    CHECK(a->h == b->h && a->y == b->y); /* wide: side by side */
}

/* The sizes a user meets (80x24, 120x40, 200x60): the compared timeline is
 * side by side from PT_LAYOUT_WIDE_COLS on (each chart as tall as the
 * body, so every stage row fits) and stacked below; the single chart takes
 * the body but the info band. */
static void test_common_sizes(void)
{
    static const int sizes[][2] = {{80, 24}, {120, 40}, {200, 60}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int cols = sizes[i][0], rows = sizes[i][1];
        pt_layout l;
        REQUIRE(lay("timeline", 1, rows, cols, &l) == 0);
        const pt_rect *a = pt_layout_find_name(&l, "tl-main"),
                      *b = pt_layout_find_name(&l, "tl-pred"),
                      *info = pt_layout_find_name(&l, "tl-info");
        REQUIRE(a && b && info);
        if (cols >= PT_LAYOUT_WIDE_COLS) {
            CHECK_MSG(a->y == b->y && a->h == b->h && a->x + a->w == b->x,
                      "%dx%d: compared charts not side by side", cols, rows);
            CHECK(a->h == rows - 2 - info->h);
            CHECK(a->w - b->w <= 1 && b->w - a->w <= 1);
        } else {
            CHECK_MSG(a->x == b->x && a->w == cols && a->y + a->h == b->y,
                      "%dx%d: compared charts not stacked", cols, rows);
        }
        REQUIRE(lay("timeline", 0, rows, cols, &l) == 0);
        a = pt_layout_find_name(&l, "tl-main");
        info = pt_layout_find_name(&l, "tl-info");
        REQUIRE(a && info);
        CHECK(a->h == rows - 2 - info->h && a->w == cols);
        for (int v = 0; v < pt_view_count(); v++)
            for (int sp = 0; sp <= 1; sp++)
                CHECK(check_one(pt_view_at(v)->name, sp, rows, cols) == 0);
    }
}

/* From 80x24 up, the panels that carry the headline figures have the room
 * for the lines that must stay (the views keep them by importance): the
 * plan summary's predicted, measured, bubble and memory-fit lines and the
 * edited plan's two (or the schedule and batch without an edit) at the width
 * of their short forms (38 columns), the
 * timeline's legend and figures rows, the stats view's iteration line above
 * one stage row. */
#define PLAN_MUST_LINES  6
#define PLAN_BRIEF_COLS  38
#define TL_INFO_ROWS_MIN 2
static void test_room_for_figures(void)
{
    for (int rows = 24; rows <= 60; rows++)
        for (int cols = 80; cols <= 200; cols++) {
            pt_layout l;
            REQUIRE(lay("plan", 0, rows, cols, &l) == 0);
            const pt_rect *sum = pt_layout_find_name(&l, "plan-summary");
            REQUIRE(sum);
            CHECK_MSG(sum->h - 2 >= PLAN_MUST_LINES && sum->w - 2 >= PLAN_BRIEF_COLS,
                      "%dx%d: plan summary %dx%d inside", cols, rows, sum->w - 2, sum->h - 2);
            for (int split = 0; split <= 1; split++) {
                REQUIRE(lay("timeline", split, rows, cols, &l) == 0);
                const pt_rect *info = pt_layout_find_name(&l, "tl-info");
                REQUIRE(info);
                CHECK(info->h >= TL_INFO_ROWS_MIN && info->w == cols);
            }
            REQUIRE(lay("stats", 0, rows, cols, &l) == 0);
            const pt_rect *busy = pt_layout_find_name(&l, "st-busy");
            REQUIRE(busy);
            CHECK(busy->h - 2 >= 2);
        }
}

PT_TEST_MAIN({"all_sizes", test_all_sizes}, {"room_for_figures", test_room_for_figures},
             {"common_sizes", test_common_sizes}, {"small_sizes", test_small_sizes_still_disjoint},
             {"too_small", test_too_small}, {"wide_uses_room", test_wide_uses_room})

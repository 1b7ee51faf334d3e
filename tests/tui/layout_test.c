/* Layout of the console's panels: at every terminal size from 80x24 to
 * 300x100 and in every view, panels lie inside the screen, never overlap,
 * cover it completely (so large terminals are used), and each is large
 * enough to show a framed line of text. */
#include "tests/test.h"
#include "tui/console/layout.h"

#include "protocol/error.h"

/* A framed panel needs 2 border rows plus one of content and room for a title. */
#define MIN_PANEL_ROWS 3
#define MIN_PANEL_COLS 20

static int expected_panels(pt_view v, int split)
{
    switch (v) {
    case PT_VIEW_PLAN:
        return 5;
    case PT_VIEW_TIMELINE:
        return split ? 5 : 4;
    case PT_VIEW_STATS:
        return 6;
    default:
        return 3;
    }
}

static int check_one(pt_view v, int split, int rows, int cols)
{
    pt_layout l;
    pt_layout_opts o = {split};
    int bad = 0;
    if (pt_layout_compute(v, rows, cols, &o, &l) != 0)
        return 1;
    if (l.count != expected_panels(v, split))
        bad++;
    long area = 0;
    for (int i = 0; i < l.count; i++) {
        const pt_rect *r = &l.rect[i];
        if (r->y < 0 || r->x < 0 || r->y + r->h > rows || r->x + r->w > cols)
            bad++;
        int framed = l.id[i] != PT_PANEL_HEADER && l.id[i] != PT_PANEL_STATUS &&
                     l.id[i] != PT_PANEL_TL_INFO; /* the info band is two unframed rows */
        if (framed ? (r->h < MIN_PANEL_ROWS || r->w < MIN_PANEL_COLS) : r->h < 1)
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
        fprintf(stderr, "layout %s split %d at %dx%d: %d problems\n", pt_view_name(v), split, cols,
                rows, bad);
    return bad;
}

static void test_all_sizes(void)
{
    int failures = 0;
    for (int v = 0; v < PT_VIEW_COUNT; v++)
        for (int split = 0; split <= 1; split++)
            for (int rows = 24; rows <= 100; rows++)
                for (int cols = 80; cols <= 300; cols++)
                    if (check_one((pt_view)v, split, rows, cols) && ++failures > 20)
                        goto out;
out:
    CHECK(failures == 0);
}

static void test_small_sizes_still_disjoint(void)
{
    /* between the minimum and 80x24 the layout must still be disjoint and
     * inside the screen (panel size is allowed to shrink there) */
    for (int v = 0; v < PT_VIEW_COUNT; v++)
        for (int rows = PT_LAYOUT_MIN_ROWS; rows < 24; rows++)
            for (int cols = PT_LAYOUT_MIN_COLS; cols < 80; cols++) {
                pt_layout l;
                REQUIRE(pt_layout_compute((pt_view)v, rows, cols, NULL, &l) == 0);
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
    CHECK(pt_layout_compute(PT_VIEW_PLAN, PT_LAYOUT_MIN_ROWS - 1, 80, NULL, &l) == PT_ERANGE);
    CHECK(pt_layout_compute(PT_VIEW_PLAN, 24, PT_LAYOUT_MIN_COLS - 1, NULL, &l) == PT_ERANGE);
    CHECK(pt_layout_find(&l, PT_PANEL_PLAN_LAYERS) == NULL);
    CHECK(pt_layout_compute(PT_VIEW_COUNT, 24, 80, NULL, &l) == PT_EINVAL);
    CHECK(pt_layout_compute(PT_VIEW_PLAN, 1, 1, NULL, &l) == PT_ERANGE);
    CHECK(l.count == 0);
}

static void test_wide_uses_room(void)
{
    /* side by side from PT_LAYOUT_WIDE_COLS: the layer list is not as wide as
     * the screen; stacked below it */
    pt_layout l;
    REQUIRE(pt_layout_compute(PT_VIEW_PLAN, 60, 200, NULL, &l) == 0);
    const pt_rect *layers = pt_layout_find(&l, PT_PANEL_PLAN_LAYERS);
    REQUIRE(layers);
    CHECK(layers->w < 200 && layers->h == 58);
    REQUIRE(pt_layout_compute(PT_VIEW_PLAN, 24, 80, NULL, &l) == 0);
    layers = pt_layout_find(&l, PT_PANEL_PLAN_LAYERS);
    REQUIRE(layers);
    CHECK(layers->w == 80 && layers->h >= 10);
    /* split timeline: two Gantt panels of near-equal height */
    pt_layout_opts o = {1};
    REQUIRE(pt_layout_compute(PT_VIEW_TIMELINE, 60, 200, &o, &l) == 0);
    const pt_rect *a = pt_layout_find(&l, PT_PANEL_TL_MAIN),
                  *b = pt_layout_find(&l, PT_PANEL_TL_PRED);
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
        pt_layout_opts split = {1};
        REQUIRE(pt_layout_compute(PT_VIEW_TIMELINE, rows, cols, &split, &l) == 0);
        const pt_rect *a = pt_layout_find(&l, PT_PANEL_TL_MAIN),
                      *b = pt_layout_find(&l, PT_PANEL_TL_PRED),
                      *info = pt_layout_find(&l, PT_PANEL_TL_INFO);
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
        REQUIRE(pt_layout_compute(PT_VIEW_TIMELINE, rows, cols, NULL, &l) == 0);
        a = pt_layout_find(&l, PT_PANEL_TL_MAIN);
        info = pt_layout_find(&l, PT_PANEL_TL_INFO);
        REQUIRE(a && info);
        CHECK(a->h == rows - 2 - info->h && a->w == cols);
        for (int v = 0; v < PT_VIEW_COUNT; v++)
            for (int sp = 0; sp <= 1; sp++)
                CHECK(check_one((pt_view)v, sp, rows, cols) == 0);
    }
}

PT_TEST_MAIN({"all_sizes", test_all_sizes}, {"common_sizes", test_common_sizes},
             {"small_sizes", test_small_sizes_still_disjoint}, {"too_small", test_too_small},
             {"wide_uses_room", test_wide_uses_room})

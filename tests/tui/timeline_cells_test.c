/* The text Gantt's character cells (tui/export/timeline_ascii.h, the one
 * drawer of the console and `pipetop sim`): blocks start with their micro-batch
 * number and are filled with their kind's glyph, idle cells inside the
 * shown iterations are bubbles, communication sits on its own lane, a
 * label that does not fit is left out rather than overwriting neighbours, no
 * two labels ever touch (zooming in brings the left-out ones back), and the
 * legend and docs/console.md name every glyph a chart can hold. */
#include "tests/test.h"

#include "tui/export/timeline_ascii.h"

static void add(pt_tline *tl, int row, int op, int mb, double a, double b)
{
    pt_tl_span s;
    memset(&s, 0, sizeof s);
    s.start = a;
    s.end = b;
    s.row = row;
    s.mb = mb;
    s.op = (uint8_t)op;
    s.lane = (uint8_t)pt_op_lane(op);
    REQUIRE(pt_tline_add(tl, &s) == 0);
}

static void cells_str(const pt_timeline_cell *c, int n, char *out)
{
    for (int i = 0; i < n; i++)
        out[i] = c[i].ch;
    out[n] = 0;
}

static void test_compute_row(void)
{
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    REQUIRE(pt_tline_row(&tl, 0, 0) == 0);
    add(&tl, 0, PT_OP_FWD, 3, 0, 4);
    add(&tl, 0, PT_OP_BWD, 3, 6, 10);
    add(&tl, 0, PT_OP_RECOMPUTE, 7, 11, 14);
    add(&tl, 0, PT_OP_OPT_STEP, -1, 14, 16);
    add(&tl, 0, PT_OP_SEND_ACT, 3, 4, 5);
    add(&tl, 0, PT_OP_SEND_GRAD, 3, 10, 11);
    add(&tl, 0, PT_OP_ALLREDUCE, -1, 16, 18);
    add(&tl, 0, PT_OP_RECV_ACT, 3, 0, 0.5);
    pt_timeline_cell c[20];
    char s[21];
    pt_timeline_cells(&tl, 0, PT_LANE_COMPUTE, 0, 20, 20, 0, 18, c);
    cells_str(c, 20, s);
    CHECK_MSG(!strcmp(s, "3===..3###.7++^^..  "), "compute row '%s'", s);
    CHECK(c[0].paint == PT_PAINT_FWD && c[6].paint == PT_PAINT_BWD &&
          c[4].paint == PT_PAINT_BUBBLE);
    CHECK(c[19].paint == PT_TIMELINE_BLANK);
    pt_timeline_cells(&tl, 0, PT_LANE_COMM, 0, 20, 20, 0, 18, c);
    cells_str(c, 20, s);
    CHECK_MSG(!strcmp(s, "    >     <     **  "), "comm row '%s'", s);
    /* zoomed in on [6, 11): the backward fills the window but the recompute's
     * start is outside, and half-open cells round outwards */
    pt_timeline_cells(&tl, 0, PT_LANE_COMPUTE, 6, 11, 5, 0, 18, c);
    cells_str(c, 5, s);
    CHECK_MSG(!strcmp(s, "3###."), "zoomed row '%s'", s);
    pt_tline_release(&tl);
}

static void test_labels_that_do_not_fit(void)
{
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    REQUIRE(pt_tline_row(&tl, 1, 0) == 0);
    add(&tl, 0, PT_OP_FWD, 12, 0, 1);  /* one cell: "12" does not fit */
    add(&tl, 0, PT_OP_FWD, 13, 1, 3);  /* two cells: fits */
    add(&tl, 0, PT_OP_BWD, 4, 3, 3.2); /* shorter than a cell still shows */
    pt_timeline_cell c[6];
    char s[7];
    pt_timeline_cells(&tl, 0, PT_LANE_COMPUTE, 0, 6, 6, 0, 4, c);
    cells_str(c, 6, s);
    /* "4" would touch "13": left out, its block keeps its fill */
    CHECK_MSG(!strcmp(s, "=13#  "), "row '%s'", s);
    pt_tline_release(&tl);
}

/* A zb-h1-like run of short blocks (micro-batches 8 to 23, three blocks of
 * a cell and a half each): at no width do two numbers touch (every run of
 * digits is one whole micro-batch number: "89" or "1011" would be two), and
 * wider cells show more numbers until every one is there. */
static void test_labels_never_touch(void)
{
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    REQUIRE(pt_tline_row(&tl, 0, 0) == 0);
    int ops[3] = {PT_OP_FWD, PT_OP_BWD_INPUT, PT_OP_BWD_WEIGHT};
    for (int k = 0; k < 48; k++)
        add(&tl, 0, ops[k % 3], 8 + k / 3, k * 1.5, (k + 1) * 1.5);
    int shown_prev = -1;
    for (int width = 24; width <= 384; width *= 2) {
        pt_timeline_cell c[400];
        char s[401];
        pt_timeline_cells(&tl, 0, PT_LANE_COMPUTE, 0, 72, width, 0, 72, c);
        cells_str(c, width, s);
        int shown = 0, bad = 0;
        for (int i = 0; i < width;) {
            if (s[i] < '0' || s[i] > '9') {
                i++;
                continue;
            }
            int v = 0, j = i;
            for (; j < width && s[j] >= '0' && s[j] <= '9'; j++)
                v = v * 10 + (s[j] - '0');
            bad |= v < 8 || v > 23 || j - i > 2;
            shown++;
            i = j;
        }
        CHECK_MSG(!bad, "width %d: numbers run together: %s", width, s);
        CHECK_MSG(shown >= shown_prev, "width %d shows %d numbers, narrower %d", width, shown,
                  shown_prev);
        shown_prev = shown;
    }
    CHECK_MSG(shown_prev == 48, "the widest chart shows %d of 48 numbers", shown_prev);
    pt_tline_release(&tl);
}

/* Every glyph a chart can hold (every paint's fill but the blank of waits,
 * and each send's own glyph) is in every form of the legend and in
 * docs/console.md's list of glyphs. */
static void test_legend_and_docs(void)
{
    char glyphs[32] = "";
    int n = 0;
    for (int p = 0; p < PT_PAINT_COUNT; p++) {
        char g = pt_timeline_fill(p);
        if (g != ' ' && !strchr(glyphs, g))
            glyphs[n++] = g;
    }
    for (int k = 0; k < PT_OP_KIND_COUNT; k++) {
        char g = pt_op_info_of(k)->glyph;
        if ((pt_op_facts(k) & PT_OPK_SEND) && !strchr(glyphs, g))
            glyphs[n++] = g;
    }
    CHECK(strchr(glyphs, '%') && strchr(glyphs, '~') && strchr(glyphs, '>') && strchr(glyphs, '<'));
    int widths[3] = {1000, 80, 10};
    for (int w = 0; w < 3; w++) {
        const char *leg = pt_timeline_legend(widths[w]);
        CHECK(w == 2 || (int)strlen(leg) <= widths[w]);
        for (int i = 0; i < n; i++)
            CHECK_MSG(strchr(leg, glyphs[i]), "legend at %d lacks '%c': %s", widths[w], glyphs[i],
                      leg);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/console.md", getenv("PT_SOURCE_DIR"));
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    char line[2048], list[2048] = "";
    while (fgets(line, sizeof line, f))
        if (strstr(line, "State is never told by colour alone") || list[0]) {
            strncat(list, line, sizeof list - strlen(list) - 1);
            if (strchr(line, '.') && strstr(list, "bubble"))
                break;
        }
    fclose(f);
    REQUIRE(list[0]);
    for (int i = 0; i < n; i++) {
        /* as the docs quote it: `>` alone, or a block `3===` */
        char alone[8], block[8];
        snprintf(alone, sizeof alone, "`%c`", glyphs[i]);
        snprintf(block, sizeof block, "%c%c`", glyphs[i], glyphs[i]);
        CHECK_MSG(strstr(list, alone) || strstr(list, block),
                  "docs/console.md's glyph list lacks '%c'", glyphs[i]);
    }
}

static void test_axis(void)
{
    char ax[40];
    pt_timeline_axis(0, 0.030, 36, ax);
    CHECK(strlen(ax) == 36);
    CHECK(!strncmp(ax, "|0.0", 4));
    CHECK(!strncmp(ax + 12, "|10.0", 5)); /* 12 cells of 30 ms / 36 = 10 ms */
    CHECK(!strcmp(ax + 34, "ms"));
    /* a tick at cell 24 of 28 would need 5 cells ("|20.0") and run into the
     * unit: it is left out instead of showing "|2ms" */
    pt_timeline_axis(0, 0.028, 28, ax);
    CHECK_MSG(!strcmp(ax + 24, "  ms"), "axis '%s'", ax);
    CHECK(!strncmp(ax + 12, "|12.0", 5));
}

PT_TEST_MAIN({"compute_row", test_compute_row},
             {"labels_that_do_not_fit", test_labels_that_do_not_fit},
             {"labels_never_touch", test_labels_never_touch},
             {"legend_and_docs", test_legend_and_docs}, {"axis", test_axis})

/* The text Gantt's character cells (tui/export/timeline_ascii.h, the one
 * drawer of the console and `pipetop sim`): blocks start with their micro-batch
 * number and are filled with their kind's glyph, idle cells inside the
 * shown iterations are bubbles, communication sits on its own lane, and a
 * label that does not fit is left out rather than overwriting neighbours. */
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
    CHECK_MSG(!strcmp(s, "=134  "), "row '%s'", s);
    pt_tline_release(&tl);
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
             {"labels_that_do_not_fit", test_labels_that_do_not_fit}, {"axis", test_axis})

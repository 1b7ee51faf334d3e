/* The text Gantt chart `pipetop sim` prints (tui/export/timeline_ascii.h,
 * the console's drawer and glyphs): the exact chart of a small pipeline a
 * user must see, rows of the requested width at any width, communication
 * glyphs where only communication runs, and snprintf-like sizing and
 * truncation. */
#include <string.h>

#include "tests/planner/sched_fixture.h"
#include "tests/test.h"
#include "tui/export/timeline_ascii.h"

typedef struct fix {
    pt_plan *plan;
    pt_profile *pf;
    pt_topology *topo;
    pt_cost *cost;
    pt_sim *sim;
    pt_program prog;
    pt_sim_result res;
    pt_tline tl; /* the simulator's timeline, as the chart draws it */
} fix;

static int setup(fix *f, pt_sched_kind kind, int S, int M, double bw)
{
    memset(f, 0, sizeof *f);
    f->plan = fx_plan(kind, S, 1, NULL, 4, M);
    f->pf = fx_profile(S, 1.0, 2.0, 1000000, 100, 4);
    f->topo = fx_topo(1, S, bw, 0);
    if (pt_cost_new(f->pf, f->topo, &f->cost, NULL) < 0 || pt_sim_new(&f->sim) < 0)
        return -1;
    pt_cost_set_opt_bandwidth(f->cost, 0);
    int rc = pt_sim_plan(f->sim, f->plan, f->cost, NULL, &f->prog, &f->res, NULL);
    return rc < 0 ? rc : pt_tline_from_sim(&f->tl, &f->prog, &f->res);
}

static void teardown(fix *f)
{
    pt_tline_release(&f->tl);
    pt_program_release(&f->prog);
    pt_sim_free(&f->sim);
    pt_cost_free(&f->cost);
    pt_topology_free(&f->topo);
    pt_profile_free(&f->pf);
    pt_plan_free(&f->plan);
}

static void test_exact_chart(void)
{
    fix f;
    REQUIRE(setup(&f, PT_SCHED_GPIPE, 2, 2, FX_FAST_BPS) == 0);
    CHECK_NEAR(f.res.makespan_s, 9e-3, 1e-12);
    pt_timeline_opts o = {18, 0, 0, 0, 0}; /* half a millisecond per cell */
    char buf[512];
    size_t n = pt_timeline_ascii(&f.tl, &o, buf, sizeof buf);
    CHECK(n == strlen(buf));
    CHECK_STR_CONTAINS(buf, "s0r0 |0=1=......1###0###|\n");
    CHECK_STR_CONTAINS(buf, "s1r0 |..0=1=1###0###....|\n");
    /* a one-cell block shows its micro-batch unless the number would touch
     * another one ("01" would read as one number): then it keeps its fill */
    o.width = 9;
    pt_timeline_ascii(&f.tl, &o, buf, sizeof buf);
    CHECK_STR_CONTAINS(buf, "s0r0 |0=...1#0#|");
    teardown(&f);
}

static void test_rows_have_the_width(void)
{
    fix f;
    REQUIRE(setup(&f, PT_SCHED_DAPPLE, 4, 7, 1e8) == 0);
    for (int width = PT_TIMELINE_MIN_WIDTH; width <= 300; width += 17) {
        pt_timeline_opts o = {width, 0, 0, 1, 1};
        size_t need = pt_timeline_ascii(&f.tl, &o, NULL, 0);
        char *buf = malloc(need + 1);
        REQUIRE(buf);
        CHECK(pt_timeline_ascii(&f.tl, &o, buf, need + 1) == need);
        CHECK(strlen(buf) == need);
        int rows = 0;
        for (char *line = buf; *line;) {
            char *nl = strchr(line, '\n');
            REQUIRE(nl);
            if (line[0] == 's') {
                char *bar = strchr(line, '|');
                REQUIRE(bar && bar < nl);
                CHECK(nl - bar - 2 == width); /* cells between the two bars */
                CHECK(nl[-1] == '|');
                rows++;
            }
            line = nl + 1;
        }
        CHECK(rows == f.prog.worker_count);
        CHECK(strstr(buf, "fwd") && strstr(buf, "%") && strstr(buf, "~") && strstr(buf, "bubble"));
        free(buf);
    }
    teardown(&f);
}

/* With a slow link the sends show where the stage is otherwise idle. */
static void test_comm_glyphs(void)
{
    fix f;
    REQUIRE(setup(&f, PT_SCHED_GPIPE, 2, 2, 1e8) == 0); /* 1 MB at 100 MB/s: 10 ms per send */
    char row[401];
    pt_timeline_row(&f.tl, 0, 0, f.res.makespan_s, 400, row);
    CHECK(strchr(row, '>') != NULL);
    pt_timeline_row(&f.tl, 1, 0, f.res.makespan_s, 400, row);
    CHECK(strchr(row, '<') != NULL);
    CHECK(strchr(row, '>') == NULL); /* the last stage sends no activations */
    /* every cell of a compute op is a compute glyph: fill and number cells
     * add up to busy time */
    int compute = 0;
    pt_timeline_row(&f.tl, 0, 0, f.res.makespan_s, 400, row);
    for (int c = 0; c < 400; c++)
        compute += strchr("=#0123456789", row[c]) != NULL;
    CHECK_NEAR(compute / 400.0, f.res.workers[0].busy_frac, 2.5 * 4 / 400.0);
    teardown(&f);
}

/* A split backward (zb-h1) draws its halves with their own glyphs, on every
 * stage, and the legend names them; an unsplit program draws neither. */
static void test_split_glyphs(void)
{
    fix f;
    REQUIRE(setup(&f, PT_SCHED_ZB_H1, 3, 4, FX_FAST_BPS) == 0);
    char buf[2048], row[201];
    pt_timeline_opts o = {120, 0, 0, 0, 1};
    pt_timeline_ascii(&f.tl, &o, buf, sizeof buf);
    CHECK_STR_CONTAINS(buf, "3%%% bwd input grad  3~~~ bwd weight grad");
    for (int w = 0; w < f.tl.row_count; w++) {
        pt_timeline_row(&f.tl, w, 0, f.res.makespan_s, 200, row);
        CHECK_MSG(strchr(row, '%') && strchr(row, '~') && !strchr(row, '#'), "row %d: %.200s", w,
                  row);
    }
    teardown(&f);
    REQUIRE(setup(&f, PT_SCHED_1F1B_FLUSH, 3, 4, FX_FAST_BPS) == 0);
    pt_timeline_row(&f.tl, 0, 0, f.res.makespan_s, 200, row);
    CHECK(strchr(row, '#') && !strchr(row, '%') && !strchr(row, '~'));
    teardown(&f);
}

static void test_truncation(void)
{
    fix f;
    REQUIRE(setup(&f, PT_SCHED_GPIPE, 3, 4, FX_FAST_BPS) == 0);
    char full[2048], small[40];
    size_t n = pt_timeline_ascii(&f.tl, NULL, full, sizeof full);
    CHECK(n == strlen(full));
    memset(small, 'x', sizeof small);
    CHECK(pt_timeline_ascii(&f.tl, NULL, small, sizeof small) == n);
    CHECK(small[sizeof small - 1] == '\0');
    CHECK(!strncmp(small, full, sizeof small - 1));
    teardown(&f);
}

PT_TEST_MAIN({"split_glyphs", test_split_glyphs}, {"exact_chart", test_exact_chart},
             {"rows_have_the_width", test_rows_have_the_width}, {"comm_glyphs", test_comm_glyphs},
             {"truncation", test_truncation})

/* Bands and stragglers (tui/record/bands.h): on random timelines of many
 * stages and replicas, every stage's band is the true minimum, median and
 * maximum of its replicas' compute time per iteration, computed here the
 * slow way (each row's spans summed by a scan of all spans, the figures
 * sorted), and the stragglers are exactly the replicas at or over the rule;
 * an injected straggler is found, listed first, with its excess. */
#include "tests/test.h"

#include "tui/record/bands.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double unit(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static void add(pt_tline *tl, int row, int op, int64_t step, double a, double b)
{
    pt_tl_span s;
    memset(&s, 0, sizeof s);
    s.start = a;
    s.end = b;
    s.row = row;
    s.mb = 0;
    s.step = step;
    s.op = (uint8_t)op;
    s.lane = (uint8_t)pt_op_lane(op);
    REQUIRE(pt_tline_add(tl, &s) == 0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A timeline of `stages` x `replicas` rows, `steps` steps, each row's ops
 * scaled by a random factor (slow[row] > 0: that factor instead). */
static void make(pt_tline *tl, int stages, int replicas, int steps, const double *slow)
{
    memset(tl, 0, sizeof *tl);
    /* rows added in a shuffled order: the timeline keeps them sorted */
    for (int k = 0; k < stages * replicas; k++) {
        int r = (k * 7919) % (stages * replicas);
        REQUIRE(pt_tline_row(tl, r / replicas, r % replicas) >= 0);
    }
    for (int row = 0; row < tl->row_count; row++) {
        double f = slow && slow[row] > 0 ? slow[row] : 1.0 + 0.1 * unit();
        double t = 0;
        for (int st = 0; st < steps; st++)
            for (int mb = 0; mb < 4; mb++) {
                add(tl, row, PT_OP_FWD, st, t, t + 0.002 * f);
                add(tl, row, PT_OP_SEND_ACT, st, t + 0.002 * f, t + 0.0025 * f); /* not compute */
                add(tl, row, PT_OP_BWD, st, t + 0.003, t + 0.003 + 0.004 * f);
                t += 0.01;
            }
    }
}

/* The figure of row, the slow way. */
static double brute_figure(const pt_tline *tl, int row)
{
    double sum = 0;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < tl->count; i++)
        if (tl->spans[i].row == row && tl->spans[i].lane == PT_LANE_COMPUTE) {
            sum += tl->spans[i].end - tl->spans[i].start;
            lo = tl->spans[i].step < lo ? tl->spans[i].step : lo;
            hi = tl->spans[i].step > hi ? tl->spans[i].step : hi;
        }
    return hi >= lo ? sum / (double)(hi - lo + 1) : 0;
}

static void check_against_brute(const pt_tline *tl, const pt_bands *b, double pct)
{
    double fig[1100];
    int stragglers = 0;
    CHECK(b->row_count == tl->row_count);
    for (int s = 0; s < b->stage_count; s++) {
        const pt_band_stage *st = &b->stages[s];
        int n = 0;
        for (int row = 0; row < tl->row_count; row++)
            if (tl->rows[row].stage == st->stage)
                fig[n++] = brute_figure(tl, row);
        REQUIRE(n == st->row_count && n > 0);
        qsort(fig, (size_t)n, sizeof fig[0], cmp_double);
        CHECK_NEAR(st->min_s, fig[0], 1e-12);
        CHECK_NEAR(st->median_s, fig[(n - 1) / 2], 1e-12);
        CHECK_NEAR(st->max_s, fig[n - 1], 1e-12);
        /* the drawn replica is the median's */
        CHECK_NEAR(brute_figure(tl, st->median_row), st->median_s, 1e-12);
        CHECK(tl->rows[st->median_row].stage == st->stage);
        for (int row = 0; row < tl->row_count; row++) {
            if (tl->rows[row].stage != st->stage)
                continue;
            int want = brute_figure(tl, row) >= fig[(n - 1) / 2] * (1 + pct / 100);
            CHECK_MSG(b->straggler[row] == want, "stage %d replica %d", st->stage,
                      tl->rows[row].replica);
            stragglers += want;
        }
    }
    CHECK(b->straggler_count == stragglers);
    for (int k = 1; k < b->straggler_count; k++)
        CHECK(b->slower[b->by_slowness[k - 1]] >= b->slower[b->by_slowness[k]]);
}

static void test_band_is_true_min_median_max(void)
{
    const int shapes[][2] = {{1, 1}, {4, 1}, {3, 2}, {5, 7}, {8, 128}};
    pt_bands b;
    memset(&b, 0, sizeof b);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        pt_tline tl;
        make(&tl, shapes[k][0], shapes[k][1], 2, NULL);
        double pct = k % 2 ? 5.0 : 20.0; /* 5 %: some random replicas cross it */
        REQUIRE(pt_bands_build(&b, &tl, pct) == 0);
        CHECK(b.stage_count == shapes[k][0]);
        check_against_brute(&tl, &b, pct);
        pt_tline_release(&tl);
    }
    pt_bands_release(&b);
}

static void test_injected_straggler(void)
{
    static double slow[8 * 128];
    for (int i = 0; i < 8 * 128; i++)
        slow[i] = 1.0;         /* every replica alike ... */
    slow[3 * 128 + 17] = 1.35; /* ... but stage 3 replica 17: 35 % longer ops */
    slow[5 * 128 + 2] = 1.15;  /* 15 %: under the rule */
    pt_tline tl;
    make(&tl, 8, 128, 3, slow);
    pt_bands b;
    memset(&b, 0, sizeof b);
    REQUIRE(pt_bands_build(&b, &tl, 0) == 0);
    CHECK(b.pct == PT_BANDS_STRAGGLER_PCT_DEF);
    CHECK(b.straggler_count == 1);
    int row = pt_bands_find(&b, 3, 17);
    REQUIRE(row >= 0);
    CHECK(b.straggler[row]);
    CHECK(b.by_slowness[0] == row);
    CHECK_NEAR(b.slower[row], 0.35, 1e-9);
    CHECK(!b.straggler[pt_bands_find(&b, 5, 2)]);
    CHECK_NEAR(b.slower[pt_bands_find(&b, 5, 2)], 0.15, 1e-9);
    const pt_band_stage *st = pt_bands_stage(&b, 3);
    REQUIRE(st);
    CHECK(st->stragglers == 1 && st->max_row == row && st->row_count == 128);
    CHECK(pt_bands_stage(&b, 8) == NULL && pt_bands_find(&b, 8, 0) == -1);
    /* a rule of 40 % leaves it out; 10 % takes stage 5's too */
    REQUIRE(pt_bands_build(&b, &tl, 40) == 0);
    CHECK(b.straggler_count == 0);
    REQUIRE(pt_bands_build(&b, &tl, 10) == 0);
    CHECK(b.straggler_count == 2 && b.by_slowness[0] == row);
    check_against_brute(&tl, &b, 10);
    pt_bands_release(&b);
    pt_tline_release(&tl);
}

static void test_empty(void)
{
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    pt_bands b;
    memset(&b, 0, sizeof b);
    CHECK(pt_bands_build(&b, &tl, 20) == 0);
    CHECK(b.stage_count == 0 && b.straggler_count == 0 && pt_bands_find(&b, 0, 0) == -1);
    pt_bands_release(&b);
    pt_bands_release(NULL);
}

PT_TEST_MAIN({"band_is_true_min_median_max", test_band_is_true_min_median_max},
             {"injected_straggler", test_injected_straggler}, {"empty", test_empty})

/* The op vocabulary: every kind's name parses back to it, the facts agree
 * with each other (what computes sits on the compute lane, a transfer is a
 * send or a receive, one micro-batch or a range), and the two pieces of the
 * busy definition (the time iterations occupy, the clamped fraction). */
#include "protocol/error.h"
#include "protocol/op.h"
#include "tests/test.h"

static void test_names_round_trip(void)
{
    for (int k = 0; k < PT_OP_KIND_COUNT; k++) {
        pt_op_kind back = PT_OP_KIND_COUNT;
        CHECK(pt_op_parse(pt_op_name(k), &back) == 0 && back == (pt_op_kind)k);
        CHECK(strlen(pt_op_name(k)) < PT_OP_NAME_MAX);
        for (int j = 0; j < k; j++)
            CHECK(strcmp(pt_op_name(j), pt_op_name(k)) != 0);
    }
    pt_op_kind out = PT_OP_BWD;
    CHECK(pt_op_parse("JUMP", &out) == PT_ENOTFOUND && out == PT_OP_BWD);
    CHECK(pt_op_parse("fwd", &out) == PT_ENOTFOUND);
    CHECK(pt_op_parse(NULL, &out) == PT_ENOTFOUND);
    CHECK(!strcmp(pt_op_name(PT_OP_KIND_COUNT), "?") && !strcmp(pt_op_name(-1), "?"));
    char list[256];
    pt_op_names_list(list, (int)sizeof list, ", ");
    for (int k = 0; k < PT_OP_KIND_COUNT; k++)
        CHECK_STR_CONTAINS(list, pt_op_name(k));
    char tiny[5];
    pt_op_names_list(tiny, (int)sizeof tiny, ", "); /* truncated, still a string */
    CHECK(strlen(tiny) == 4);
}

static void test_facts_agree(void)
{
    for (int k = 0; k < PT_OP_KIND_COUNT; k++) {
        unsigned f = pt_op_facts(k);
        CHECK(pt_op_is_compute(k) == (pt_op_lane(k) == PT_LANE_COMPUTE));
        CHECK(!!(f & PT_OPK_P2P) == !!(f & (PT_OPK_SEND | PT_OPK_RECV)));
        CHECK(!((f & PT_OPK_SEND) && (f & PT_OPK_RECV)));
        /* a send occupies the comm lane, a receive and an all-reduce wait only wait */
        if (f & PT_OPK_SEND)
            CHECK(pt_op_lane(k) == PT_LANE_COMM);
        if (f & PT_OPK_RECV)
            CHECK(pt_op_lane(k) == PT_LANE_WAIT);
        CHECK(!((f & PT_OPK_MB) && (f & PT_OPK_MB_RANGE)));
        CHECK(pt_op_has_mb(k));
        CHECK(pt_op_has_one_mb(k) == !!(f & PT_OPK_MB));
        CHECK(!(f & PT_OPK_COLLECTIVE) || (f & PT_OPK_MB_RANGE));
        CHECK(pt_op_is_mb_compute(k) == (pt_op_is_compute(k) && pt_op_has_one_mb(k)));
        /* idle time has a paint class of its own */
        CHECK(pt_op_paint_of(k) != PT_PAINT_BUBBLE);
    }
    CHECK(pt_op_paint_of(PT_OP_KIND_COUNT) == PT_PAINT_BUBBLE);
    CHECK(pt_op_facts(PT_OP_KIND_COUNT) == 0 && !pt_op_is_compute(-1));
    /* each send has its receive with the peer on the other side */
    CHECK((pt_op_facts(PT_OP_SEND_ACT) & PT_OPK_NEXT) &&
          !(pt_op_facts(PT_OP_RECV_ACT) & PT_OPK_NEXT));
    CHECK((pt_op_facts(PT_OP_RECV_GRAD) & PT_OPK_NEXT) &&
          !(pt_op_facts(PT_OP_SEND_GRAD) & PT_OPK_NEXT));
    CHECK(!strcmp(pt_paint_name(PT_PAINT_BUBBLE), "bubble") && !strcmp(pt_paint_name(-1), "?"));
}

static void test_iters_time(void)
{
    CHECK(pt_op_iters_time_s(NULL, 0) == 0);
    /* disjoint, overlapping, nested and touching spans, out of order */
    pt_op_iter it[] = {{3, 10, 14}, {0, 0, 2}, {1, 1, 3}, {2, 4, 6}, {4, 11, 12}, {5, 14, 15}};
    CHECK_NEAR(pt_op_iters_time_s(it, 6), 3 + 2 + 5, 1e-12); /* [0,3) [4,6) [10,15) */
    pt_op_iter one[] = {{7, 5, 5}};
    CHECK(pt_op_iters_time_s(one, 1) == 0);
}

static void test_busy_frac(void)
{
    CHECK_NEAR(pt_op_busy_frac(3, 4), 0.75, 1e-15);
    CHECK(pt_op_busy_frac(5, 4) == 1.0);
    CHECK(pt_op_busy_frac(1, 0) == 0.0 && pt_op_busy_frac(1, -1) == 0.0);
    CHECK(pt_op_busy_frac(-1, 4) == 0.0 && pt_op_busy_frac(NAN, 4) == 0.0);
}

PT_TEST_MAIN({"names_round_trip", test_names_round_trip}, {"facts_agree", test_facts_agree},
             {"iters_time", test_iters_time}, {"busy_frac", test_busy_frac})

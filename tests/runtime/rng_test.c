/* Counter-based RNG: purity (a value depends only on key and counter),
 * stream independence and distribution moments within statistical bounds. */
#include <stdint.h>

#include "runtime/rng.h"
#include "tests/test.h"

#define DRAWS 200000

static void test_pure(void)
{
    pt_rng a = pt_rng_make(5, 3), b = pt_rng_make(5, 3);
    for (int i = 0; i < 100; i++) {
        uint64_t v = pt_rng_next(&a);
        CHECK(v == pt_rng_at(pt_rng_key(5, 3), (uint64_t)i));
        CHECK(v == pt_rng_next(&b));
    }
    CHECK(pt_rng_key(5, 3) != pt_rng_key(5, 4));
    CHECK(pt_rng_key(5, 3) != pt_rng_key(6, 3));
    CHECK(pt_rng_key(0, 0) != 0);
    /* neighbouring streams do not share values at the same positions */
    int same = 0;
    pt_rng c = pt_rng_make(5, 4);
    a = pt_rng_make(5, 3);
    for (int i = 0; i < 1000; i++)
        same += pt_rng_next(&a) == pt_rng_next(&c);
    CHECK(same == 0);
}

/* Moments of U[0,1) and N(0,1) within 6 standard errors. */
static void test_moments(void)
{
    pt_rng r = pt_rng_make(1, 1);
    double s = 0, s2 = 0, n1 = 0, n2 = 0;
    double lo = 1, hi = 0;
    for (int i = 0; i < DRAWS; i++) {
        double u = pt_rng_uniform(&r);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        s += u;
        s2 += u * u;
        double z = pt_rng_normal(&r);
        n1 += z;
        n2 += z * z;
    }
    CHECK(lo >= 0.0 && hi < 1.0);
    double se = 1.0 / sqrt(DRAWS);
    CHECK_NEAR(s / DRAWS, 0.5, 6 * se * sqrt(1.0 / 12));
    CHECK_NEAR(s2 / DRAWS - pow(s / DRAWS, 2), 1.0 / 12, 6 * se * 0.075);
    CHECK_NEAR(n1 / DRAWS, 0.0, 6 * se);
    CHECK_NEAR(n2 / DRAWS, 1.0, 6 * se * sqrt(2.0));
    double v = pt_rng_uniform_range(&r, -2, -1);
    CHECK(v >= -2 && v < -1);
}

/* pt_rng_below: in range, and uniform by a chi-square bound (7 bins, 6
 * degrees of freedom, p = 1e-4 critical value 27.9). */
static void test_below(void)
{
    pt_rng r = pt_rng_make(2, 2);
    enum { BINS = 7 };
    long count[BINS] = {0};
    for (int i = 0; i < DRAWS; i++) {
        uint64_t v = pt_rng_below(&r, BINS);
        REQUIRE(v < BINS);
        count[v]++;
    }
    double chi = 0, e = (double)DRAWS / BINS;
    for (int b = 0; b < BINS; b++)
        chi += (count[b] - e) * (count[b] - e) / e;
    CHECK_MSG(chi < 27.9, "chi-square %.2f", chi);
    CHECK(pt_rng_below(&r, 0) == 0);
    CHECK(pt_rng_below(&r, 1) == 0);
}

PT_TEST_MAIN({"pure", test_pure}, {"moments", test_moments}, {"below", test_below})

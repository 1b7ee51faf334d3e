/* A run's `latest` pointer never moves back (issue 13): a save of an older
 * step is refused and leaves it as it was; a newer or equal one replaces it;
 * one that does not read is not replaced blindly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ckpt_index.h"
#include "protocol/fileio.h"
#include "tests/test.h"

#define TDIR "ckpt_latest_test.d"

static int64_t latest(void)
{
    int64_t step = -1;
    return pt_ckpt_latest_load(TDIR, &step, NULL) == 0 ? step : -1;
}

static void test_never_back(void)
{
    if (system("rm -rf " TDIR) != 0)
        fprintf(stderr, "cannot remove " TDIR "\n");
    pt_error err = {0};
    CHECK(pt_ckpt_latest_save(TDIR, 40, &err) == 0);
    CHECK(latest() == 40);
    CHECK(pt_ckpt_latest_save(TDIR, 40, &err) == 0); /* the same step again: a re-commit */
    CHECK(pt_ckpt_latest_save(TDIR, 80, &err) == 0);
    CHECK(latest() == 80);
    CHECK(pt_ckpt_latest_save(TDIR, 60, &err) == PT_ESTATE);
    CHECK_STR_CONTAINS(err.msg, TDIR "/latest names step 80, newer than step 60");
    CHECK(latest() == 80);
}

static void test_unreadable_not_replaced(void)
{
    pt_error err = {0};
    REQUIRE(pt_file_write_atomic(TDIR "/latest", "{\"v\":1,\"step\":", 14, &err) == 0);
    CHECK(pt_ckpt_latest_save(TDIR, 100, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "(not replaced)");
    char *text = NULL;
    REQUIRE(pt_file_read(TDIR "/latest", &text, NULL, NULL) == 0);
    CHECK(!strcmp(text, "{\"v\":1,\"step\":"));
    free(text);
}

PT_TEST_MAIN({"never_back", test_never_back},
             {"unreadable_not_replaced", test_unreadable_not_replaced})

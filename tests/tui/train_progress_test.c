/* The training progress bar: line layout within the terminal width, ETA
 * arithmetic, and the plain-line mode used when stdout is not a terminal. */
#include <string.h>

#include "tests/test.h"
#include "tui/record/progress.h"

static int count_char(const char *s, char c)
{
    int n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

static void test_format_fits_and_counts(void)
{
    char buf[512];
    pt_progress_format(buf, sizeof buf, 100, "epoch 1", 50, 100, 10.0, "loss 0.5");
    CHECK_STR_CONTAINS(buf, "epoch 1 [");
    CHECK_STR_CONTAINS(buf, " 50% 50/100  loss 0.5 ETA 0:10");
    /* Half the bar is filled. */
    int hashes = count_char(buf, '#'), dots = count_char(buf, '.') - 1; /* "0.5" */
    CHECK_MSG(hashes == dots && hashes > 0, "%d # vs %d .", hashes, dots);

    pt_progress_format(buf, sizeof buf, 100, "", 300, 300, 75.0, NULL);
    CHECK_STR_CONTAINS(buf, "100% 300/300 in 1:15");
    CHECK(count_char(buf, '.') == 0);
    pt_progress_format(buf, sizeof buf, 100, NULL, 1, 4, 3600.0, "x");
    CHECK_STR_CONTAINS(buf, "ETA 3:00:00");
    pt_progress_format(buf, sizeof buf, 100, NULL, 0, 4, 1.0, NULL);
    CHECK(strstr(buf, "ETA") == NULL);
    CHECK_STR_CONTAINS(buf, "  0% 0/4");
    /* Out-of-range counts are clamped, not printed as > 100%. */
    pt_progress_format(buf, sizeof buf, 100, NULL, 9, 4, 1.0, NULL);
    CHECK_STR_CONTAINS(buf, "100% 4/4");

    /* Never wider than the terminal minus one column, at any width. */
    for (int cols = 2; cols < 160; cols++) {
        pt_progress_format(buf, sizeof buf, cols, "epoch 12", 1234, 60000, 3.5,
                           "loss 0.4123  5120 samples/s");
        CHECK_MSG((int)strlen(buf) <= cols - 1, "cols %d: %zu chars", cols, strlen(buf));
    }
}

static void test_plain_lines(void)
{
    FILE *f = tmpfile();
    REQUIRE(f);
    pt_progress *p = pt_progress_new(f, "epoch 1", 1000, 0);
    REQUIRE(p);
    for (int i = 1; i <= 1000; i++)
        pt_progress_update(p, i, "loss 1");
    pt_progress_finish(&p, "done");
    CHECK(p == NULL);
    pt_progress_finish(&p, NULL);
    rewind(f);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    fclose(f);
    /* One line per tenth (10%..90%) and the final one; no carriage returns. */
    CHECK_MSG(count_char(out, '\n') == 10, "%d lines:\n%s", count_char(out, '\n'), out);
    CHECK(strchr(out, '\r') == NULL && strchr(out, '\033') == NULL);
    CHECK_STR_CONTAINS(out, " 10% 100/1000");
    CHECK_STR_CONTAINS(out, " 90% 900/1000");
    CHECK_STR_CONTAINS(out, "100% 1000/1000  done in ");
}

static void test_tty_redraws_in_place(void)
{
    FILE *f = tmpfile();
    REQUIRE(f);
    pt_progress *p = pt_progress_new(f, "e", 10, 1);
    REQUIRE(p);
    pt_progress_update(p, 1, "a");
    pt_progress_update(p, 10, "b"); /* within PT_PROGRESS_REDRAW_MS: drawn only by finish */
    pt_progress_finish(&p, NULL);
    rewind(f);
    char out[4096];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    fclose(f);
    CHECK(count_char(out, '\r') == 2);
    CHECK(count_char(out, '\n') == 1 && out[n - 1] == '\n');
    CHECK_STR_CONTAINS(out, "\033[K");
    CHECK_STR_CONTAINS(out, "100% 10/10  b in ");
}

PT_TEST_MAIN({"format_fits_and_counts", test_format_fits_and_counts},
             {"plain_lines", test_plain_lines}, {"tty_redraws_in_place", test_tty_redraws_in_place})

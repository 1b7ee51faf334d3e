/* A minimal test harness (after acutest): each test file defines test
 * functions, lists them in PT_TESTS, and gets a main that runs them all and
 * prints "N passed, N failed". A failed CHECK records the failure and the test
 * goes on, so one run shows every broken property. */
#ifndef PT_TESTS_TEST_H
#define PT_TESTS_TEST_H

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pt_test_failures_;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            pt_test_failures_++;                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            pt_test_failures_++;                                                                   \
        }                                                                                          \
    } while (0)

/* Stops the current test: for checks the rest of the test depends on. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);             \
            pt_test_failures_++;                                                                   \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double pt_a_ = (a), pt_b_ = (b);                                                           \
        if (!(fabs(pt_a_ - pt_b_) <= (tol))) {                                                     \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g, tol %.3g\n",          \
                    __FILE__, __LINE__, #a, pt_a_, #b, pt_b_, (double)(tol));                      \
            pt_test_failures_++;                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                            \
    do {                                                                                           \
        const char *pt_h_ = (hay), *pt_n_ = (needle);                                              \
        if (!pt_h_ || !strstr(pt_h_, pt_n_)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: \"%s\" does not contain \"%s\"\n", __FILE__,     \
                    __LINE__, pt_h_ ? pt_h_ : "(null)", pt_n_);                                    \
            pt_test_failures_++;                                                                   \
        }                                                                                          \
    } while (0)

struct pt_test_case {
    const char *name;
    void (*fn)(void);
};

/* The watchdog: a test binary ends itself, naming the case it was in,
 * PT_TEST_WATCHDOG_S seconds after it started (CMake sets it per test to
 * nine tenths of the test's ctest TIMEOUT), so a hang is reported by the
 * test rather than left to ctest's kill. Every wait in a test has a bound
 * of its own that fails with what it waited for; this only catches one
 * that was missed. */
static const char *volatile pt_test_case_now_ = "(set-up)";

static inline void pt_test_watchdog_fired_(int sig)
{
    (void)sig;
    static const char a[] = "watchdog: still in test case \"", b[] = "\" after PT_TEST_WATCHDOG_S "
                                                                     "seconds: a wait without a "
                                                                     "bound of its own; failing\n";
    const char *c = pt_test_case_now_;
    ssize_t n = write(STDERR_FILENO, a, sizeof a - 1);
    n = write(STDERR_FILENO, c, strlen(c));
    n = write(STDERR_FILENO, b, sizeof b - 1);
    (void)n;
    _exit(124);
}

static inline void pt_test_watchdog_arm_(void)
{
    const char *e = getenv("PT_TEST_WATCHDOG_S");
    int s = e ? atoi(e) : 0;
    if (s > 0) {
        signal(SIGALRM, pt_test_watchdog_fired_);
        alarm((unsigned)s);
    }
}

/* Usage: PT_TEST_MAIN({"name", fn}, ...). An argument filters tests by name. */
#define PT_TEST_MAIN(...)                                                                          \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        static const struct pt_test_case cases[] = {__VA_ARGS__};                                  \
        int passed = 0, failed = 0;                                                                \
        pt_test_watchdog_arm_();                                                                   \
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {                              \
            if (argc > 1 && !strstr(cases[i].name, argv[1]))                                       \
                continue;                                                                          \
            int before = pt_test_failures_;                                                        \
            pt_test_case_now_ = cases[i].name;                                                     \
            cases[i].fn();                                                                         \
            int ok = pt_test_failures_ == before;                                                  \
            printf("%s %s\n", ok ? "ok  " : "FAIL", cases[i].name);                                \
            fflush(stdout);                                                                        \
            if (ok)                                                                                \
                passed++;                                                                          \
            else                                                                                   \
                failed++;                                                                          \
        }                                                                                          \
        printf("%d passed, %d failed\n", passed, failed);                                          \
        return failed ? 1 : 0;                                                                     \
    }

/* Path of a file in the source tree (tests run from the build folder). */
static inline const char *pt_test_path(const char *rel)
{
    static char buf[4][1024];
    static int slot;
    const char *root = getenv("PT_SOURCE_DIR");
    char *out = buf[slot++ % 4];
    snprintf(out, sizeof buf[0], "%s/%s", root ? root : ".", rel);
    return out;
}

#endif

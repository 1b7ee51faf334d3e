#!/usr/bin/env bash
# watchdog.sh TEST.sh [ARGS...]: runs a shell test (each *_test.sh, see
# CMakeLists.txt) in a process group of its own and ends it, with a line
# saying so, PT_TEST_WATCHDOG_S seconds after it started: a test ends on its
# own bound, naming itself, not at ctest's TIMEOUT. Every wait inside a test
# has a bound of its own that fails with what it waited for (tm_wait, ...);
# this catches one that was missed. Exit: the test's, or 124 on its bound.
set -u
test=$1
secs=${PT_TEST_WATCHDOG_S:-0}
if ((secs <= 0)); then
    exec bash "$@"
fi
# timeout(1) runs the test in a new process group and signals the whole
# group, so processes the test started go too
timeout -k 10 "$secs" bash "$@"
rc=$?
if ((rc == 124 || rc == 137)); then
    echo "watchdog: $(basename "$test") still running after $secs s (PT_TEST_WATCHDOG_S): a wait" \
        "without a bound of its own; the test was ended (its last lines are above)" >&2
    exit 124
fi
exit "$rc"

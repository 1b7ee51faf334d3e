#!/usr/bin/env bash
# scripts/memcheck.sh BUILD JOBS [SKIP_REGEX]: runs the unit tests of BUILD
# (ctest label "unit") under valgrind's memcheck, JOBS at a time, each with
# the environment ctest gives it. Any valgrind error (--error-exitcode) or
# failing test fails the run; the log of each failure is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: scripts/memcheck.sh BUILD JOBS [SKIP_REGEX]}"
jobs="${2:-2}"
skip="${3:-^$}"
src="$PWD"
out="$build/memcheck"
rm -rf "$out"
mkdir -p "$out"
mapfile -t all < <(ctest --test-dir "$build" -N -L unit | awk '/Test +#/ {print $3}' | grep -Ev "$skip")
# The longest under valgrind first (executor_zb_test alone is a third of the
# stage), so that none of them starts last and runs alone at the end.
slow=(executor_zb_test executor_sync_test gemm_small_test executor_interleaved_test
      executor_memory_test executor_staged_test executor_contract_test gpu_host_test
      executor_async_test executor_backtoback_test cmd_help_test)
tests=()
for t in "${slow[@]}"; do
    printf '%s\n' "${all[@]}" | grep -qx "$t" && tests+=("$t")
done
for t in "${all[@]}"; do
    printf '%s\n' "${slow[@]}" | grep -qx "$t" || tests+=("$t")
done
((${#tests[@]})) || { echo "memcheck: no tests found in $build" >&2; exit 1; }
supp="$src/scripts/valgrind.supp" # glibc false positives, each explained there
# PT_MEMCHECK: tests that loop over equivalent variants may run fewer of them
# here (executor_zb_test: one schedule kind per plan shape, in turn)
export PT_SOURCE_DIR="$src" PT_BUILD_DIR="$src/$build" OPENBLAS_NUM_THREADS=1 PT_MEMCHECK=1 build out supp
run_one() {
    local t="$1" start=$SECONDS
    if (cd "$build" && valgrind --error-exitcode=99 --leak-check=no --track-origins=no \
        --quiet --suppressions="$supp" "./$t") >"$out/$t.log" 2>&1; then
        echo "memcheck: $t ok ($((SECONDS - start)) s)"
    else
        echo "memcheck: $t FAILED; $out/$t.log:" >&2
        tail -40 "$out/$t.log" >&2
        return 1
    fi
}
export -f run_one
start=$SECONDS
printf '%s\n' "${tests[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
rc=$?
echo "memcheck: ${#tests[@]} unit tests in $((SECONDS - start)) s ($jobs at a time)"
exit $((rc != 0))

#!/usr/bin/env bash
# scripts/fuzz.sh BUILD SECONDS JOBS: runs every libFuzzer harness of BUILD
# (configured with clang and -DPT_FUZZ=ON) for SECONDS each, JOBS at a time,
# from a copy of the seed corpus (tests/data/bad/<format>), so the checked-in
# corpus is never written, and read-only over tests/data, models,
# topologies, devices and profiles: libFuzzer runs every one of those files once before it mutates,
# which is what the <harness>_replay test of a build without libFuzzer does. Exits 1 when any harness crashes,
# leaks or fails a property; the crashing input is left in BUILD/fuzz-out/.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: scripts/fuzz.sh BUILD SECONDS JOBS}"
seconds="${2:-30}"
jobs="${3:-2}"
out="$build/fuzz-out"
rm -rf "$out"
mkdir -p "$out"
harnesses=()
for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    [[ -x "$build/$name" ]] || { echo "fuzz: $build/$name is not built" >&2; exit 1; }
    harnesses+=("$name")
done
run_one() { # run_one NAME: the harness over a private corpus copy
    local name="$1" corpus="$out/$1/corpus"
    mkdir -p "$corpus"
    local fmt="${name#fuzz_}"
    [[ -d tests/data/bad/$fmt ]] && cp -r "tests/data/bad/$fmt/." "$corpus/"
    "$build/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/$name/" "$corpus" tests/data models topologies devices profiles \
        >"$out/$name/log" 2>&1
    local rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "fuzz: $name FAILED (exit $rc); log: $out/$name/log" >&2
        tail -30 "$out/$name/log" >&2
        return 1
    fi
    echo "fuzz: $name ok ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$name/log" |
        awk '{print $2}') runs in ${seconds}s)"
}
failed=0
running=0
for name in "${harnesses[@]}"; do
    run_one "$name" &
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n || failed=1
        running=$((running - 1))
    fi
done
while ((running > 0)); do
    wait -n || failed=1
    running=$((running - 1))
done
exit $failed

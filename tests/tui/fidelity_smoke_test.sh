#!/bin/bash
# Smoke test of bench/fidelity --quick: three small plans of fmnist-mlp-deep
# run for real, each with a default, a calibrated (from another plan) and a
# measured iteration time, the error summary, and the throughput line. It
# checks the figures are there and positive, never their size (timing is the
# lead's quiet-machine measurement, docs/benchmarks.md).
set -u
BENCH="${PT_BUILD_DIR:?}/fidelity"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
out=$(timeout 500 "$BENCH" --quick --out-dir "$tmp" 2>"$tmp/err")
rc=$?
[ "$rc" -eq 0 ] || fail "fidelity --quick: exit $rc: $(tail -5 "$tmp/err")"
# rows: # schedule S M rep agents default calibrated from measured spread err err bubble bubble
rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 15 && $7 > 0 && $8 > 0 && $9 ~ /^[0-9]+$/ && $9 != $1 &&
            $10 > 0 { n++ } END { print n + 0 }' <<<"$out")
[ "$rows" -eq 3 ] || fail "$rows complete plan rows, want 3: $out"
grep -qE "^  default profile +median +[0-9.]+ % +worst +[0-9.]+ % +over 3 plans" <<<"$out" ||
    fail "no default-profile summary: $out"
grep -qE "^  calibrated on another plan +median +[0-9.]+ % +worst +[0-9.]+ % +over 3 plans" \
    <<<"$out" || fail "no calibrated summary: $out"
grep -qE "^  every other plan, same agents +median +[0-9.]+ % +worst +[0-9.]+ % +over 2 pairs" \
    <<<"$out" || fail "no all-pairs summary: $out"
grep -qE "^throughput, fmnist-mlp-deep, global batch 128: one process 1 BLAS thread [0-9.]+ samples/s, 2 threads [0-9.]+$" \
    <<<"$out" || fail "no single-process throughput: $out"
# one line per 2-stage kind the benchmark compares (dapple and 1f1b-gw)
for kind in dapple 1f1b-gw; do
    grep -qE "^  2-stage $kind +M=[0-9]+ [0-9.]+ samples/s; ratios [0-9.]+x \(1 thread\) and [0-9.]+x \(2 threads\)$" \
        <<<"$out" || fail "no throughput ratios for $kind: $out"
done
[ "$failures" -eq 0 ] && echo "fidelity_smoke_test: ok"
exit "$failures"

#!/usr/bin/env bash
# scripts/long_train.sh [BUILD] [STEPS] ["NAME ..."]: the shipped trainable models and the
# demo's configuration trained STEPS (default 2,000) iterations on their
# default hyper-parameters, each printing its first, lowest, highest and
# last loss and whether every loss was finite and the last 100 average
# below the first 100. Too long for CI (minutes of CPU each); the figures
# of the last run are in docs/reliability.md, "Training that diverges".
set -u
B=${1:-build}
STEPS=${2:-2000}
ONLY=${3:-} # names of the runs to make (default: all)
P="$(cd "$B" && pwd)/pipetop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # NAME ARGS...: a headless run, then its losses
    local name=$1
    shift
    [ -z "$ONLY" ] || [[ " $ONLY " == *" $name "* ]] || return 0
    local t0=$SECONDS
    (cd "$tmp" && timeout 7200 "$P" run "$@" --iters "$STEPS" --headless --json \
        --run-dir "$tmp/run-$name" >"$tmp/$name.json" 2>"$tmp/$name.err")
    local rc=$?
    grep -o '"event":"step","step":[0-9]*,"loss":[^,}]*' "$tmp/$name.json" | awk -F'[:,]' \
        -v name="$name" -v rc=$rc -v steps="$STEPS" -v secs=$((SECONDS - t0)) '
        { l[n++] = $6; if ($6 !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) nonfinite++ }
        END {
          lo = hi = l[0]; for (i = 0; i < n; i++) { if (l[i] < lo) lo = l[i]; if (l[i] > hi) hi = l[i] }
          k = n < 200 ? int(n / 2) : 100
          for (i = 0; i < k; i++) { a += l[i]; b += l[n - 1 - i] }
          ok = rc == 0 && n == steps && !nonfinite && b < a
          printf "%-18s exit %d, %d of %d steps, loss first %.4g lowest %.3g highest %.4g last %.3g; first %d avg %.4g, last %d avg %.3g: %s (%d s)\n",
              name, rc, n, steps, l[0], lo, hi, l[n - 1], k, a / k, k, b / k, ok ? "ok" : "DIVERGED OR FAILED", secs
          exit !ok }' || fail=1
    [ $rc -eq 0 ] || tail -2 "$tmp/$name.err"
}
check deep-synthetic --stages 4 --schedule gpipe --microbatches 4 --model fmnist-mlp-deep --data synthetic
check demo --stages 4 --schedule dapple --planner dapple --microbatches 4 --model fmnist-mlp-deep \
    --data fashion-mnist
check mlp --stages 2 --schedule 1f1b-flush --microbatches 4 --model fmnist-mlp --data fashion-mnist
check gpt-tiny --stages 2 --schedule 1f1b-flush --microbatches 4 --model gpt-tiny --data synthetic
exit $fail

#!/bin/bash
# A run whose loss or gradients stop being finite stops at that iteration
# (issue 25, item 5): with a NaN injected into iteration 5 (PT_FAULT_NAN:
# the last stage's loss, then every stage's gradients), `pipetop run` exits
# non-zero naming the iteration and the stage; the checkpoint `latest` names
# holds at most the 5 iterations before it, and a run resumed from it
# trains on with finite losses.
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
MODEL="${PT_SOURCE_DIR:?}/tests/data/run/tiny-mlp.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
cd "$tmp" || exit 1
for kind in loss grad; do
    PT_FAULT_NAN=$kind:5 timeout 300 "$PIPETOP" run --stages 2 --schedule gpipe --microbatches 2 \
        --model "$MODEL" --data synthetic --iters 20 --checkpoint-every 2 --run-dir "runs/$kind" \
        --headless >"$kind.out" 2>"$kind.err"
    rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$kind: exit $rc, want a failure: $(tail -2 "$kind.err")"
    grep -q 'iteration 5: ' "$kind.err" || fail "$kind: no 'iteration 5' in: $(tail -3 "$kind.err")"
    grep -q 'not a finite number\|not finite' "$kind.err" || fail "$kind: no 'not finite' in: $(tail -3 "$kind.err")"
    [ "$kind" = loss ] && { grep -q 'stage 1' "$kind.err" || fail "loss: the last stage (1) is not named"; }
    latest=$(cat "runs/$kind/ckpt/latest" 2>/dev/null | grep -oE '[0-9]+' | tail -n1)
    [ -n "$latest" ] && [ "$latest" -le 5 ] && [ "$latest" -ge 2 ] ||
        fail "$kind: latest is '$latest', want 2..5"
    # resumed without the fault: it loads (a non-finite tensor is refused)
    # and trains on with finite losses
    timeout 300 "$PIPETOP" run --resume "runs/$kind/ckpt" --stages 2 --schedule gpipe \
        --microbatches 2 --model "$MODEL" --data synthetic --iters 3 --run-dir "runs/$kind-2" \
        --headless --json >"$kind-2.out" 2>"$kind-2.err" ||
        fail "$kind: the resumed run failed: $(tail -2 "$kind-2.err")"
    grep -q '"last_loss":[0-9]' "$kind-2.out" || fail "$kind: no finite last_loss: $(tail -c 300 "$kind-2.out")"
done
if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "run_nan_test: ok"

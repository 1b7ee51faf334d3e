#!/bin/bash
# One run per run folder (issue 25, item 3): while a run trains in runs/x a
# second `pipetop run --run-dir runs/x` is refused at once, naming the
# first's pid, and writes nothing there; the first trains to its end with
# its record whole (status reads it, finished). `pipetop status` says
# "running" while a run holds its folder and, for a run killed without a
# closing line, "ended without a closing line" (not "running").
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
MODEL="${PT_SOURCE_DIR:?}/tests/data/run/tiny-mlp.json"
tmp=$(mktemp -d)
trap 'kill $first $third 2>/dev/null; rm -rf "$tmp"' EXIT
third=
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
cd "$tmp" || exit 1
run() { # DIR ITERS OUT
    timeout 300 "$PIPETOP" run --stages 2 --schedule gpipe --microbatches 2 --model "$MODEL" \
        --data synthetic --iters "$2" --run-dir "$1" --headless >"$3.out" 2>"$3.err"
}
run runs/x 100000 first &
first=$!
# the first run trains: its record holds a metrics line
for ((i = 0; i < 600; i++)); do
    grep -q '"metrics"' runs/x/run.ndjson 2>/dev/null && break
    sleep 0.1
done
grep -q '"metrics"' runs/x/run.ndjson || fail "the first run never trained: $(tail -2 first.err)"
st=$(timeout 60 "$PIPETOP" status --json runs/x 2>&1)
grep -q '"state":"running"' <<<"$st" || fail "status of a training run: $st"
before=$(stat -c %s runs/x/run.ndjson)
run runs/x 3 second
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "the second run: exit $rc, want a refusal"
pid=$(cat runs/x/.lock | tr -d '\n')
grep -q "runs/x is in use by another run (pid $pid" second.err ||
    fail "the refusal does not name pid $pid: $(cat second.err)"
[ "$(stat -c %s runs/x/run.ndjson)" -ge "$before" ] || fail "the record shrank"
kill -INT "$(tr -d '\n' <runs/x/.lock)" # pipetop, not timeout: its ^C
wait $first
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 130 ] || fail "the first run: exit $rc: $(tail -2 first.err)"
st=$(timeout 60 "$PIPETOP" status --json runs/x 2>&1) || fail "status after: $st"
grep -q '"state":"running"' <<<"$st" && fail "status still says running after the run ended: $st"
grep -q '"steps":[1-9]' <<<"$st" || fail "status after: no steps: $st"
grep -q 'not valid JSON' <<<"$st" && fail "the record is damaged: $st"
# a run killed with no closing line
run runs/y 100000 third &
third=$!
for ((i = 0; i < 600; i++)); do
    grep -q '"metrics"' runs/y/run.ndjson 2>/dev/null && break
    sleep 0.1
done
kill -9 "$(tr -d '\n' <runs/y/.lock)" # pipetop itself, as a crash would (not timeout)
wait $third 2>/dev/null
st=$(timeout 60 "$PIPETOP" status --json runs/y 2>&1)
grep -q '"state":"ended without a closing line"' <<<"$st" || fail "status of a killed run: $st"
if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "run_lock_test: ok"

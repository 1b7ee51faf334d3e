#!/bin/bash
# Readers of a run folder say what they passed over and never point at what
# is gone (issue 25, item 9): a record with a damaged line in the middle is
# still read by status, export and calibrate, each saying on stderr how many
# lines it passed over and the first one's file:line and reason; an export
# of a record holding only its session line fails (exit 1) saying so and
# writes nothing (it passed NULL to qsort); a run whose profiling fails says
# the profiler's own last words, not "see <log>" inside the run folder it
# then removes.
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
S="${PT_SOURCE_DIR:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
cd "$tmp" || exit 1
model="$S/tests/data/run/tiny-mlp.json"
plan="$S/tests/data/run/plan-a.json"
timeout 300 "$PIPETOP" run --plan "$plan" --model "$model" --data synthetic --iters 3 \
    --run-dir good >run.out 2>run.err || fail "run: exit $?: $(tail -3 run.err)"

# a damaged line in the middle: read, counted, named
cp -r good bad
lines=$(wc -l <bad/run.ndjson)
[ "$lines" -gt 8 ] || fail "the run's record has only $lines lines"
sed -i '5s/.*/{"type": garbage/' bad/run.ndjson
for cmd in "status bad" "export bad --trace bad.json" "calibrate bad --out cal.json"; do
    # shellcheck disable=SC2086
    timeout 60 "$PIPETOP" $cmd >out.txt 2>err.txt
    st=$?
    [ "$st" = 0 ] || fail "$cmd: exit $st: $(tail -2 err.txt)"
    grep -q 'passed over 1 bad line of the record (the first: bad/run.ndjson:5: not valid JSON)' \
        err.txt || fail "$cmd does not say what it passed over: $(cat err.txt)"
done
timeout 60 "$PIPETOP" status good >out.txt 2>err.txt
grep -q 'passed over' err.txt && fail "status of an intact record speaks of bad lines: $(cat err.txt)"

# a record of only its session line
mkdir empty && head -1 good/run.ndjson >empty/run.ndjson
for what in "--trace e.json" "--svg e.svg"; do
    # shellcheck disable=SC2086
    timeout 60 "$PIPETOP" export empty $what >out.txt 2>err.txt
    st=$?
    [ "$st" = 1 ] || fail "export empty $what: exit $st, want 1"
    grep -q 'no op events in the steps chosen; nothing written' err.txt ||
        fail "export empty $what: $(cat err.txt)"
done
[ -e e.json ] || [ -e e.svg ] && fail "export of an empty record wrote a file"

# profiling that fails: its words, no path to a removed folder
PT_FAULT_PROFILE=1 timeout 120 "$PIPETOP" run --plan "$plan" --model "$model" \
    --data synthetic --iters 3 --run-dir gone >out.txt 2>err.txt
st=$?
[ "$st" = 1 ] || fail "run with failing profiling: exit $st, want 1"
grep -q 'pipetop profile failed .*failed as asked' err.txt ||
    fail "the profiler's words are not in the message: $(cat err.txt)"
[ -e gone ] && fail "the refused run left its folder"
grep -q 'gone/' err.txt && fail "the message points into the removed run folder: $(cat err.txt)"

if [ "$failures" -ne 0 ]; then
    echo "record_readers_test: $failures failures" >&2
    exit 1
fi
echo "record_readers_test: ok"

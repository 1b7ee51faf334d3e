#!/bin/bash
# `pipetop import-trace` (docs/torch.md) on traces that real torch 1.13 runs
# make in the test: a 2-stage pipeline of a GPT in two processes over gloo
# (tests/bridge/pipe2.py), each rank profiled with torch.profiler, every op
# PP:-labelled. The run folder's op counts, iterations and per-stage busy time
# equal sums computed straight from the trace files (trace_check.py against
# status --json and export --trace); replay (tmux), status --json, export
# --compare and calibrate run on it; the schedule is inferred (1F1B, GPipe);
# a hand-written Kineto-form pair (object form, distributedInfo, ProfilerStep)
# imports the same way, also under a --label pattern; and bad traces are
# refused naming file, field and reason (tests/data/bad/torch_trace).
. "$(dirname "$0")/bridge_lib.sh"
bridge_tmux

# import_and_check NAME RUN_DIR TRACES... [-- IMPORT-OPTIONS...]
import_and_check() {
    local name=$1 run=$2
    shift 2
    local traces=() opts=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do traces+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    opts=("$@")
    check "$name: import" "$PIPETOP" import-trace "${traces[@]}" --out "$run" "${opts[@]}"
    "$PIPETOP" status --json "$run" >"$run.status" 2>&1 || fail "$name: status --json"
    check "$name: export --trace" "$PIPETOP" export "$run" --trace "$run.trace.json"
    check "$name: the record's ops, iterations and busy time equal the traces'" \
        "$PY" tests/bridge/trace_check.py "$run.status" "$run.trace.json" "${traces[@]}"
    check "$name: export --compare" "$PIPETOP" export "$run" --svg "$run.svg" --compare
    check "$name: calibrate" "$PIPETOP" calibrate "$run" --out "$run.cal.json"
}

# 1. 1F1B, 3 iterations, traced
mkdir -p "$tmp/t1"
check "pipe2.py 1F1B traced" "$PY" tests/bridge/pipe2.py --iters 3 --trace "$tmp/t1"
import_and_check "1F1B" "$tmp/run1" "$tmp/t1/rank1.json" "$tmp/t1/rank0.json" -- \
    --rank 1,0 --model gpt --microbatch 2
out=$("$PIPETOP" import-trace "$tmp/t1/rank0.json" "$tmp/t1/rank1.json" --rank 0,1 \
    --out "$tmp/run1b" 2>&1)
grep -qF 'plan inferred from the labels: 1f1b-flush' <<<"$out" || fail "1F1B inferred: $out"
grep -q '"state":"finished".*"steps":3' "$tmp/run1.status" || fail "status: $(cat "$tmp/run1.status")"
grep -q '"schedule":"1f1b-flush"' "$tmp/run1.status" || fail "status plan: $(cat "$tmp/run1.status")"

# the console replays it: both stages' rows with their micro-batches
tm_start 200 50 "$PIPETOP replay '$tmp/run1' --end --view timeline"
tm_check "replay: the timeline shows" tm_wait 30 'measured timeline'
tm_check "replay: stage 0's row" tm_wait 5 '^│s0r0 '
tm_check "replay: stage 1's row" tm_wait 5 '^│s1r0 '
tm_check "replay: q ends it" tm_quit_ok

# 2. GPipe's order is told apart
mkdir -p "$tmp/t2"
check "pipe2.py GPipe traced" "$PY" tests/bridge/pipe2.py --iters 2 --schedule gpipe --trace "$tmp/t2"
out=$("$PIPETOP" import-trace "$tmp/t2/rank0.json" "$tmp/t2/rank1.json" --rank 0,1 \
    --out "$tmp/run2" 2>&1)
grep -qF 'plan inferred from the labels: gpipe' <<<"$out" || fail "GPipe inferred: $out"

# 3. the plan that ran, given: checked against the labels
"$PIPETOP" import-trace "$tmp/t1/rank0.json" "$tmp/t1/rank1.json" --rank 0,1 --out "$tmp/run3" \
    --plan "$tmp/run1/plan.json" >/dev/null 2>&1 || fail "--plan of the run refused"
sed 's/"count":[[:space:]]*4/"count": 8/' "$tmp/run1/plan.json" >"$tmp/plan8.json"
out=$("$PIPETOP" import-trace "$tmp/t1/rank0.json" "$tmp/t1/rank1.json" --rank 0,1 \
    --out "$tmp/run4" --plan "$tmp/plan8.json" 2>&1)
grep -qF 'microbatch.count: 8, the traces name 4 micro-batches' <<<"$out" ||
    fail "a plan of 8 micro-batches: $out"

# 4. the Kineto form: ranks from distributedInfo, iterations from ProfilerStep
K=tests/data/torch
import_and_check "Kineto" "$tmp/runk" "$K/kineto-rank1.json" "$K/kineto-rank0.json"
grep -q '"steps":2' "$tmp/runk.status" || fail "Kineto iterations: $(cat "$tmp/runk.status")"
for r in 0 1; do
    sed -E 's/"PP:([0-9]+)([A-Z_]+)([0-9]+)"/"s\1-\2-m\3"/' "$K/kineto-rank$r.json" >"$tmp/lab$r.json"
done
check "a --label pattern" "$PIPETOP" import-trace "$tmp/lab0.json" "$tmp/lab1.json" \
    --out "$tmp/runl" --label '^s([0-9]+)-([A-Z_]+)-m([0-9]+)$'
"$PIPETOP" status --json "$tmp/runl" | grep -q '"events":48' || fail "--label: not 48 events"
out=$("$PIPETOP" import-trace "$tmp/lab0.json" --out "$tmp/runl2" --label 's([0-9]+)' 2>&1)
grep -qF 'it needs 3: stage, kind' <<<"$out" || fail "a pattern of 1 subexpression: $out"

# 5. refusals
for f in tests/data/bad/torch_trace/*.json; do
    checks=$((checks + 1))
    out=$("$PIPETOP" import-trace "$f" --rank 0 --out "$tmp/bad" 2>&1)
    [ $? -eq 1 ] || { fail "$f: not refused: $out"; continue; }
    grep -qF "$(cat "${f%.json}.expect")" <<<"$out" || fail "$f: '$out' lacks the .expect text"
done
out=$("$PIPETOP" import-trace "$tmp/t1/rank0.json" "$tmp/t1/rank1.json" --out "$tmp/bad" 2>&1)
grep -qF 'rank0.json: no rank: the trace has no distributedInfo.rank; give --rank' <<<"$out" ||
    fail "no rank: $out"
out=$("$PIPETOP" import-trace "$K/kineto-rank0.json" "$K/kineto-rank0.json" --out "$tmp/bad" 2>&1)
grep -qF 'are both rank 0' <<<"$out" || fail "one rank twice: $out"
out=$("$PIPETOP" import-trace "$tmp/t1/rank0.json" "$tmp/t1/rank0.json" --rank 0,1 --out "$tmp/bad" 2>&1)
grep -qF 'stage 0 has ops in' <<<"$out" || fail "a stage on two ranks: $out"
out=$("$PIPETOP" import-trace "$K/kineto-rank0.json" "$K/kineto-rank1.json" --out "$tmp/run1" 2>&1)
grep -qF 'run.ndjson exists: import into a new folder' <<<"$out" || fail "an existing record: $out"
tm_summary >/dev/null || failures=$((failures + TM_FAILURES))
checks=$((checks + TM_CHECKS))
summary

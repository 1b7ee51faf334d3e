#!/bin/bash
# The commands' JSON output for scripts (docs/formats.md, "JSON output of the
# commands"): plan --json, sim --json and status --json name every figure in
# one scheme with its unit in the name (_ms, _bytes, _per_s, _frac, or a
# plain count), the same figure has the same name everywhere
# (predicted_iteration_ms), status --json holds the prediction and the run
# state, and under --json every error is one JSON object on stderr with a
# stable `error` code (usage, not_found, ...) and the exit status of the
# text mode.
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
D="$PT_SOURCE_DIR/tests/data/run-dapple4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# names: every number's key carries a unit or is a known count/index
scheme_ok() { # FILE WHAT
    python3 - "$1" "$2" <<'EOF'
import json, re, sys
counts = {"v", "stages", "stage", "replica", "replicas", "device", "devices", "worker", "mb",
          "version", "windows", "microbatches", "microbatch_size", "microbatch_count", "layers",
          "evaluated", "generation", "steps", "step", "last_step", "first_step", "events",
          "rejected", "dropped", "pid", "agents_running", "peak_inflight", "peak_versions",
          "loss", "relative_error", "global_batch", "speedup_over_dp", "size", "count", "first",
          "last", "weights", "grads", "optim", "acts", "stash", "buffers", "comm", "total",
          "workers", "received", "duplicates", "malformed", "stale", "late", "control_rejected",
          "lr", "momentum", "beta1", "beta2", "eps", "weight_decay", "seed", "steps_measured",
          "calibration_generation"}
unit = re.compile(r".*_(ms|bytes|per_s|frac)$")
bad = []
def walk(o, path, in_bytes):
    if isinstance(o, dict):
        for k, v in o.items():
            b = in_bytes or k.endswith("_bytes")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if not (unit.match(k) or k in counts or b):
                    bad.append(path + k)
            walk(v, path + k + ".", b)
    elif isinstance(o, list):
        for v in o:
            walk(v, path, in_bytes)
text = open(sys.argv[1]).read()
for line in [text] if text.lstrip().startswith(("{", "[")) and "\n{" not in text else text.splitlines():
    if line.strip():
        walk(json.loads(line), "", False)
if bad:
    print("%s: keys without a unit: %s" % (sys.argv[2], ", ".join(sorted(set(bad)))))
    sys.exit(1)
EOF
}
field() { # FILE KEY: the number at the top level
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

"$PIPETOP" plan --planner dapple --profile "$D/profile.json" --topology local-cpu-4 --batch 32 \
    --json >"$tmp/plan.json" || fail "plan --json: exit $?"
scheme_ok "$tmp/plan.json" "plan --json" || fail "plan --json naming"
grep -q '"predicted_iteration_ms"' "$tmp/plan.json" || fail "plan --json lacks predicted_iteration_ms"
"$PIPETOP" plan --compare --profile "$D/profile.json" --topology local-cpu-4 --batch 32 \
    --json >"$tmp/compare.json" || fail "plan --compare --json: exit $?"
scheme_ok "$tmp/compare.json" "plan --compare --json" || fail "plan --compare --json naming"

"$PIPETOP" sim --plan "$D/plan.json" --profile "$D/profile.json" --topology local-cpu-4 --json \
    --events >"$tmp/sim.json" || fail "sim --json: exit $?"
scheme_ok "$tmp/sim.json" "sim --json" || fail "sim --json naming"

"$PIPETOP" status --json "$D" >"$tmp/status.json" || fail "status --json: exit $?"
scheme_ok "$tmp/status.json" "status --json" || fail "status --json naming"
[ "$(field "$tmp/status.json" state)" = finished ] || fail "status: state $(field "$tmp/status.json" state), want finished"
for k in predicted_iteration_ms measured_iteration_ms predicted_bubble_frac samples_per_s last_step; do
    grep -q "\"$k\":" "$tmp/status.json" || fail "status --json lacks $k"
done
# the prediction status gives is the simulator's for the run's plan, profile
# and topology (a copy of the run whose folder names local-cpu-4)
cp -r "$D" "$tmp/run"
cp "$PT_SOURCE_DIR/topologies/local-cpu-4.json" "$tmp/run/topology.json"
"$PIPETOP" status --json "$tmp/run" >"$tmp/status2.json" || fail "status --json (copy): exit $?"
pred=$(field "$tmp/status2.json" predicted_iteration_ms)
"$PIPETOP" sim --plan "$D/plan.json" --profile "$D/profile.json" --topology local-cpu-4 --json \
    >"$tmp/sim4.json" 2>/dev/null
sim=$(field "$tmp/sim4.json" iteration_ms)
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * b)" \
    "$pred" "$sim" || fail "status predicts $pred ms, sim $sim ms"

# errors under --json: one object on stderr with a stable code; stdout empty
err_ok() { # WANT-CODE WANT-STATUS CMD...
    local code=$1 status=$2
    shift 2
    "$PIPETOP" "$@" >"$tmp/out" 2>"$tmp/err"
    local st=$?
    [ "$st" -eq "$status" ] || { fail "$*: exit $st, want $status"; return; }
    [ ! -s "$tmp/out" ] || fail "$*: stdout not empty: $(head -c 200 "$tmp/out")"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$*: stderr is not one line: $(cat "$tmp/err")"
    python3 - "$tmp/err" "$code" "$1" <<'EOF' || fail "$*: stderr $(cat "$tmp/err")"
import json, sys
e = json.load(open(sys.argv[1]))
assert e["error"] == sys.argv[2], e
assert e["command"] == sys.argv[3], e
assert e["message"], e
EOF
}
err_ok usage 2 plan --json --bogus
err_ok usage 2 plan --json --profile "$D/profile.json" --topology local-cpu-4
err_ok not_found 1 plan --json --planner dapple --profile "$tmp/nope.json" --topology local-cpu-4 --batch 32
err_ok usage 2 sim --json --plan "$D/plan.json"
err_ok not_found 1 sim --json --plan "$tmp/nope.json" --profile "$D/profile.json" --topology local-cpu-4
err_ok not_found 1 status --json "$tmp/nope"
err_ok usage 2 run --json --iters 1 --epochs 1
if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "json_cli_test: ok"

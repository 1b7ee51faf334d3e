#!/bin/bash
# `pipetop calibrate`: fits a recorded run (tests/data/run-dapple4) into a
# profile that says it was calibrated from that run and a topology with the
# fitted link, both of which pipetop validate and pipetop sim accept; bad
# inputs fail with the file or field named.
set -u
cd "${PT_SOURCE_DIR:?}" || exit 1
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
RUN=tests/data/run-dapple4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

out=$("$PIPETOP" calibrate "$RUN" --out "$tmp/cal.json" --topology-out "$tmp/topo.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "calibrate: exit $rc: $out"
grep -qE "^generation 1, [0-9]+ steps in [1-4]\.\.[1-4] " <<<"$out" || fail "no generation line: $out"
rows=$(grep -cE '^ +[0-3] \[[0-9]+,[0-9]+\) +1 ' <<<"$out")
[ "$rows" -eq 4 ] || fail "$rows stage rows, want 4: $out"
grep -q "sends hold their worker" <<<"$out" || fail "the CPU runtime's sends hold the worker"
"$PIPETOP" validate profile "$tmp/cal.json" >/dev/null 2>&1 || fail "profile does not validate"
"$PIPETOP" validate topology "$tmp/topo.json" >/dev/null 2>&1 || fail "topology does not validate"
tr -d ' \t\n' <"$tmp/cal.json" >"$tmp/flat"
grep -q '"source":"calibrated"' "$tmp/flat" || fail "source is not calibrated"
grep -q "\"origin\":{\"kind\":\"calibrated\",\"run\":\"$RUN\",\"base\":\"$RUN/profile.json\"" \
    "$tmp/flat" || fail "origin does not name the run and base: $(head -c 400 "$tmp/flat")"
grep -q '"gen":1' "$tmp/flat" || fail "origin.gen"
grep -q '"sends_hold":true' "$tmp/flat" || fail "runtime.sends_hold"

# the calibrated files predict the run slower than its per-layer profile on a
# shipped one-machine topology does, as the run was
def=$("$PIPETOP" sim --plan "$RUN/plan.json" --profile "$RUN/profile.json" \
    --topology topologies/local-cpu-4.json | awk '/^iteration/ {print $2}')
cal=$("$PIPETOP" sim --plan "$RUN/plan.json" --profile "$tmp/cal.json" \
    --topology "$tmp/topo.json" | awk '/^iteration/ {print $2}')
awk -v d="$def" -v c="$cal" 'BEGIN { exit !(c > d && d > 0) }' ||
    fail "calibrated prediction $cal ms is not above the default $def ms"

# pipetop run predicts with the calibrated profile and says so in its summary
sum=$(timeout 300 "$PIPETOP" run --plan "$RUN/plan.json" --profile "$tmp/cal.json" \
    --topology "$tmp/topo.json" --model fmnist-mlp-deep --data synthetic --iters 2 --json \
    --run-dir "$tmp/run" 2>"$tmp/run.err" | tail -n 1)
grep -q "\"profile_origin\":\"calibrated from $RUN\"" <<<"$sum" ||
    fail "run summary lacks the profile's origin: $sum $(tail -3 "$tmp/run.err")"
pred=$(grep -o '"predicted_iteration_ms":[0-9.e+-]*' <<<"$sum" | cut -d: -f2)
awk -v p="$pred" -v c="$cal" 'BEGIN { d = p - c; exit !(d < 0.001 && d > -0.001) }' ||
    fail "run predicted $pred ms, sim $cal ms with the same files"

# bad inputs
"$PIPETOP" calibrate "$RUN" >/dev/null 2>&1
[ $? -eq 2 ] || fail "no --out: want exit 2"
msg=$("$PIPETOP" calibrate "$tmp/none" --out "$tmp/x.json" 2>&1)
[ $? -eq 1 ] && grep -q "$tmp/none" <<<"$msg" || fail "missing run: $msg"
msg=$("$PIPETOP" calibrate "$RUN" --out "$tmp/x.json" --profile profiles/vgg16.json 2>&1)
[ $? -eq 1 ] && grep -q '"fmnist-mlp-deep".*"vgg16"' <<<"$msg" || fail "wrong base profile: $msg"
mkdir -p "$tmp/empty"
head -n 1 "$RUN/run.ndjson" >"$tmp/empty/run.ndjson"
cp "$RUN/profile.json" "$tmp/empty/"
msg=$("$PIPETOP" calibrate "$tmp/empty" --out "$tmp/x.json" 2>&1)
[ $? -eq 1 ] && grep -q "no op events" <<<"$msg" || fail "record without events: $msg"
msg=$("$PIPETOP" calibrate "$RUN" --out "$tmp/x.json" --gen 7 2>&1)
[ $? -eq 1 ] && grep -q "no plan for generation 7" <<<"$msg" || fail "unknown generation: $msg"
[ ! -e "$tmp/x.json" ] || fail "a failed calibration wrote its output"

[ "$failures" -eq 0 ] && echo "calibrate_cli_test: ok"
exit "$failures"

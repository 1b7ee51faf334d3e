#!/bin/bash
# `pipetop sim`: the figures, the per-worker table and one timeline row per
# worker for every schedule kind; --json carries the same iteration time;
# missing or inconsistent inputs fail with the file or field named.
set -u
cd "${PT_SOURCE_DIR:?}" || exit 1
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
D=tests/data/sim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

for kind in gpipe dapple 1f1b-flush pipedream 2bw pipesgd zb-h1 zb-h2; do
    sed "s/\"kind\": \"dapple\", \"policy\": \"A\"/\"kind\": \"$kind\"/" "$D/plan.json" >"$tmp/plan.json"
    out=$("$PIPETOP" sim --plan "$tmp/plan.json" --profile "$D/profile.json" \
        --topology "$D/topology.json" --width 60 2>&1)
    rc=$?
    [ "$rc" -eq 0 ] || { fail "$kind: exit $rc: $out"; continue; }
    grep -q "^schedule      $kind" <<<"$out" || fail "$kind: no schedule line"
    for w in iteration throughput bubble memory; do
        grep -q "^$w " <<<"$out" || fail "$kind: no '$w' line"
    done
    rows=$(grep -cE '^s[0-9]+r[0-9]+ +\|.{60}\|$' <<<"$out")
    [ "$rows" -eq 4 ] || fail "$kind: $rows timeline rows of width 60, want 4"
    grep -q "3=== fwd  3### bwd" <<<"$out" || fail "$kind: no legend"
    text_ms=$(awk '/^iteration/ {print $2}' <<<"$out")
    json=$("$PIPETOP" sim --plan "$tmp/plan.json" --profile "$D/profile.json" \
        --topology "$D/topology.json" --json)
    json_ms=$(grep -o '"iteration_ms":[0-9.e+-]*' <<<"$json" | cut -d: -f2 |
        awk '{printf "%.3f", $1}')
    [ "$text_ms" = "$json_ms" ] || fail "$kind: text says $text_ms ms, json $json_ms ms"
    grep -q "\"schedule\":\"$kind\"" <<<"$json" || fail "$kind: json lacks the schedule"
    [ "$(grep -o '"peak_memory_bytes"' <<<"$json" | wc -l)" -eq 4 ] || fail "$kind: json workers"
done

# bad input: a missing file is named, a profile of another model is refused
out=$("$PIPETOP" sim --plan "$D/plan.json" --profile "$tmp/nope.json" \
    --topology "$D/topology.json" 2>&1)
[ $? -eq 1 ] || fail "missing profile: exit status"
grep -q "nope.json" <<<"$out" || fail "missing profile not named: $out"
grep -v '"l5"' "$D/profile.json" | sed 's/\("l4".*\)},$/\1}/' >"$tmp/five.json"
out=$("$PIPETOP" sim --plan "$D/plan.json" --profile "$tmp/five.json" \
    --topology "$D/topology.json" 2>&1)
[ $? -eq 1 ] || fail "five-layer profile: exit status ($out)"
grep -q "layers" <<<"$out" || fail "five-layer profile: '$out' does not name the layers"
# plans within the documented limits whose sizes overflow 64 bits (issue 13):
# refused with the .expect text, never undefined behaviour (see the ASan build)
for f in tests/data/bad/sim/*.json; do
    out=$("$PIPETOP" sim --plan "$f" --profile "$D/profile.json" --topology "$D/topology.json" 2>&1)
    [ $? -eq 1 ] || fail "$f: exit status ($out)"
    grep -qF "$(cat "${f%.json}.expect")" <<<"$out" || fail "$f: '$out' lacks the .expect text"
done
"$PIPETOP" sim >/dev/null 2>&1
[ $? -eq 2 ] || fail "no arguments: want exit 2"
"$PIPETOP" sim --plan "$D/plan.json" --profile "$D/profile.json" --topology "$D/topology.json" \
    --width 3 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--width 3: want exit 2"
"$PIPETOP" sim --help | grep -q "usage: pipetop sim" || fail "--help"

# --compare-schedules: one row per synchronous kind (the table's, read from
# --help), each with its iteration time, bubble and one peak per stage; the
# plan's own kind marked; zb-h1 never slower than 1f1b-flush on its partition
out=$("$PIPETOP" sim --plan "$D/plan.json" --profile "$D/profile.json" \
    --topology "$D/topology.json" --compare-schedules 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "compare-schedules: exit $rc: $out"
sync_kinds=$("$PIPETOP" sim --help | awk '/^schedule kinds/ {on = 1; next}
    on && NF && $0 !~ /\[asynchronous\]/ {print $1}')
[ -n "$sync_kinds" ] || fail "compare-schedules: no kinds in --help"
for kind in $sync_kinds; do
    # a kind with chunks (interleaved) names its v: "interleaved v=2"
    row=$(grep -E "^$kind( v=[0-9]+)?\*? " <<<"$out")
    [ -n "$row" ] || { fail "compare-schedules: no row for $kind"; continue; }
    grep -qE "^$kind( v=[0-9]+)?\*? +[0-9.]+ ms +[0-9.]+% +[0-9.]+ [KMG]i?B, [0-9.]+ [KMG]i?B, [0-9.]+ [KMG]i?B$" <<<"$row" ||
        fail "compare-schedules: $kind row malformed: $row"
done
for kind in pipedream 2bw pipesgd; do
    grep -qE "^$kind\*? " <<<"$out" && fail "compare-schedules: asynchronous $kind listed"
done
grep -qE '^dapple\* ' <<<"$out" || fail "compare-schedules: the plan's kind is not marked"
ms() { awk -v k="$1" '$1 == k || $1 == k "*" {print $2}' <<<"$out"; }
awk -v a="$(ms zb-h1)" -v b="$(ms 1f1b-flush)" 'BEGIN {exit !(a > 0 && a <= b)}' ||
    fail "compare-schedules: zb-h1 $(ms zb-h1) ms slower than 1f1b-flush $(ms 1f1b-flush) ms"
grep -qE '^interleaved v=2 ' <<<"$out" || fail "compare-schedules: no interleaved v=2 row"
# an interleaved plan (2 devices, 2 chunks each): one timeline row per chunk,
# and in the comparison its row marked, the other kinds on one stage per device
cat >"$tmp/il.json" <<'EOF2'
{"v": 1, "model": "sim-fixture", "layers": 6, "microbatch": {"size": 8, "count": 6},
 "schedule": {"kind": "interleaved", "chunks": 2}, "optimizer": {"kind": "adam", "lr": 0.001},
 "stages": [{"layers": [0, 1], "replicas": [0]}, {"layers": [1, 3], "replicas": [1]},
            {"layers": [3, 4], "replicas": [0]}, {"layers": [4, 6], "replicas": [1]}]}
EOF2
out=$("$PIPETOP" sim --plan "$tmp/il.json" --profile "$D/profile.json" \
    --topology "$D/topology.json" --width 60 2>&1)
[ $? -eq 0 ] || fail "interleaved plan: $out"
rows=$(grep -cE '^s[0-9]+r[0-9]+ +\|.{60}\|$' <<<"$out")
[ "$rows" -eq 4 ] || fail "interleaved plan: $rows timeline rows, want 4 (one per chunk)"
out=$("$PIPETOP" sim --plan "$tmp/il.json" --profile "$D/profile.json" \
    --topology "$D/topology.json" --compare-schedules 2>&1)
[ $? -eq 0 ] || fail "interleaved compare: $out"
grep -qE '^interleaved v=2\* +[0-9.]+ ms +[0-9.]+% +[0-9.]+ [KMG]i?B, [0-9.]+ [KMG]i?B$' <<<"$out" ||
    fail "interleaved compare: own row missing or not one peak per device: $out"
grep -qE '^1f1b-flush +[0-9.]+ ms' <<<"$out" || fail "interleaved compare: no 1f1b-flush row"
sed 's/"count": 6/"count": 5/' "$tmp/il.json" >"$tmp/il5.json"
out=$("$PIPETOP" sim --plan "$tmp/il5.json" --profile "$D/profile.json" \
    --topology "$D/topology.json" 2>&1)
[ $? -eq 1 ] || fail "interleaved M=5 on 2 ranks: accepted"
grep -q "microbatch.count" <<<"$out" || fail "interleaved M=5: '$out' does not name the field"

"$PIPETOP" sim --plan "$D/plan.json" --profile "$D/profile.json" \
    --topology "$D/topology.json" --compare-schedules --json >"$tmp/o" 2>&1 &&
    fail "compare-schedules with --json accepted"
grep -q "compare-schedules" "$tmp/o" || fail "compare-schedules --json: no reason given"

if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "sim_test: ok"

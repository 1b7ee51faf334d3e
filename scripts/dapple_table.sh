#!/bin/sh
# Prints the docs/planners.md table "DAPPLE's configurations": for each of
# topologies/dapple-config-{a,b,c}.json and each shipped profile, the default
# dapple plan, the default dapple plan free to choose any synchronous kind
# (--kinds sync), the paper-faithful plan (--objective dapple) and the dp
# baseline, each scored by the simulator (pipetop plan prints it).
# usage: scripts/dapple_table.sh [PIPETOP] [GLOBAL_BATCH]
set -eu
PIPETOP=${1:-build/pipetop}
GBS=${2:-128}
shape() { # plan JSON on stdin -> "8:8 b16" and the simulated ms
    python3 -c '
import json, sys
j = json.load(sys.stdin)
p = j["plan"]
reps = ":".join(str(len(s["replicas"])) for s in p["stages"])
if len(p["stages"]) == 1:
    reps = "DP %s" % reps
kind = p["schedule"]["kind"]
kind = "" if kind == "dapple" else " " + kind
print("%s b%d%s | %.1f" % (reps, p["microbatch"]["size"], kind, j["simulated_iteration_ms"]))'
}
run() {
    out=$("$PIPETOP" plan "$@" --json 2>/dev/null) && printf '%s' "$out" | shape || echo "no plan | -"
}
echo "| config | profile | default dapple | sim ms | --kinds sync | sim ms | --objective dapple | sim ms | dp | sim ms |"
echo "| --- | --- | --- | ---: | --- | ---: | --- | ---: | --- | ---: |"
for c in a b c; do
    for f in profiles/*.json; do
        m=$(basename "$f" .json)
        t=topologies/dapple-config-$c.json
        d=$(run --planner dapple --profile "$f" --topology "$t" --batch "$GBS")
        k=$(run --planner dapple --kinds sync --profile "$f" --topology "$t" --batch "$GBS")
        p=$(run --planner dapple --objective dapple --profile "$f" --topology "$t" --batch "$GBS")
        b=$(run --planner dp --profile "$f" --topology "$t" --batch "$GBS")
        echo "| $(echo $c | tr a-c A-C) | $m | $d | $k | $p | $b |"
    done
done

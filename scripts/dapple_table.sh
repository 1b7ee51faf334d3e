#!/bin/sh
# Prints the docs/planners.md table "DAPPLE's configurations": for each of
# topologies/dapple-config-{a,b,c}.json and each shipped profile, the default
# dapple plan, the default dapple plan free to choose any synchronous kind
# (--kinds sync), the paper-faithful plan (--objective dapple) and the dp
# baseline, each scored by the simulator (pipetop plan prints it).
# usage: scripts/dapple_table.sh [PIPETOP] [GLOBAL_BATCH]
#        scripts/dapple_table.sh --decisions [PIPETOP] [GLOBAL_BATCH]
# The second form prints the docs/planners.md table "DAPPLE's decisions":
# ResNet-50, VGG-16 and GNMT (gnmt_large) on each configuration, the default
# dapple plan against dp (both simulated) and --objective dapple's choice with
# its own latency of each candidate family (its report's why).
set -eu
if [ "${1:-}" = "--decisions" ]; then
    PIPETOP=${2:-build/pipetop}
    GBS=${3:-128}
    echo "| config | profile | default dapple (sim ms) | dp (sim ms) | --objective dapple: DP / best P:Q / G/2:G/2 / straight (its ms) | its choice |"
    echo "| --- | --- | --- | ---: | --- | --- |"
    for c in a b c; do
        for m in resnet50 vgg16 gnmt_large; do
            t=topologies/dapple-config-$c.json
            f=profiles/$m.json
            d=$("$PIPETOP" plan --planner dapple --profile "$f" --topology "$t" --batch "$GBS" \
                --json 2>/dev/null)
            b=$("$PIPETOP" plan --planner dp --profile "$f" --topology "$t" --batch "$GBS" \
                --json 2>/dev/null)
            p=$("$PIPETOP" plan --planner dapple --objective dapple --profile "$f" \
                --topology "$t" --batch "$GBS" --json 2>/dev/null)
            python3 -c '
import json, re, sys
d, b, p = (json.loads(x) for x in sys.argv[4:7])
def shape(j):
    s = j["plan"]["stages"]
    r = ":".join(str(len(x["replicas"])) for x in s)
    return ("DP " + r) if len(s) == 1 else r
w = p["why"]
fam = []
for name in ("overlapped DP", "bipartition P:Q", "G/2:G/2 straight", "straight pipeline"):
    m = re.search(re.escape(name) + r"(?: [0-9]+:[0-9]+ cut [0-9]+| S=[0-9]+)? ([0-9.]+) ms", w)
    fam.append(m.group(1) if m else "-")
choice = re.search(r"chose ([A-Za-z/:0-9 ]+?)(?: \(|$)", w)
print("| %s | %s | %s %.1f | %.1f | %s | %s: %s |" % (sys.argv[1].upper(), sys.argv[2], shape(d),
      d["simulated_iteration_ms"], b["simulated_iteration_ms"], " / ".join(fam),
      choice.group(1) if choice else "?", shape(p)))' "$c" "$m" "$GBS" "$d" "$b" "$p"
        done
    done
    exit 0
fi
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

#!/bin/bash
# Prints the docs/planners.md table "PipeDream's Table 1": the SOSP'19 cases
# on topologies/sosp-cluster-{a,b}.json, each at the global batch of 16 GPUs x
# a per-GPU minibatch: for pipedream (default objective), PipeDream's optimizer
# (--objective pipedream on the shipped graph.txt, imported as profiles/M.json
# with its minibatch; planned without a memory
# limit as its optimizer is, then simulated), dapple and dp: the plan (replicas
# per stage), its simulated iteration and its speed-up over dp's.
# usage: scripts/sosp_table.sh [PIPETOP]
set -eu
PIPETOP=${1:-build/pipetop}
row() { # label profile topology batch [options...] -> "shape | ms"
    local out
    out=$("$PIPETOP" plan "$@" --json 2>/dev/null) || {
        echo "no plan | -"
        return
    }
    printf '%s' "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
p = j["plan"]
reps = ":".join(str(len(s["replicas"])) for s in p["stages"])
if len(p["stages"]) == 1:
    reps = "DP " + reps
print("%s b%d | %.1f" % (reps, p["microbatch"]["size"], j["simulated_iteration_ms"]))'
}
speedup() { # "shape | ms" and dp's ms -> "shape, ms ms (x.xx)"
    python3 -c '
import sys
shape, ms = [x.strip() for x in sys.argv[1].split("|")]
dp = float(sys.argv[2])
print(shape if ms == "-" else "%s, %s ms (%.2fx)" % (shape, ms, dp / float(ms)))' "$1" "$2"
}
echo "| case | global batch | pipedream | PipeDream's optimizer (its graph.txt) | dapple | dp |"
echo "| --- | ---: | --- | --- | --- | ---: |"
for c in "vgg16 a 1024" "vgg16 b 1024" "vgg16 a 2048" "vgg16 b 2048" "resnet50 a 2048" \
    "resnet50 b 2048" "alexnet b 4096"; do
    set -- $c
    m=$1 cl=$2 gbs=$3
    t=topologies/sosp-cluster-$cl.json
    dp=$(row --planner dp --profile profiles/$m.json --topology "$t" --batch "$gbs")
    dp_ms=$(printf '%s' "$dp" | awk -F'|' '{print $2}' | tr -d ' ')
    pd=$(row --planner pipedream --profile profiles/$m.json --topology "$t" --batch "$gbs")
    po=$(row --planner pipedream --objective pipedream --profile profiles/$m.json \
        --topology "$t" --batch "$gbs" --memory-limit 1000)
    da=$(row --planner dapple --profile profiles/$m.json --topology "$t" --batch "$gbs")
    echo "| $m on $(echo "$cl" | tr a-b A-B) | $gbs | $(speedup "$pd" "$dp_ms") |" \
        "$(speedup "$po" "$dp_ms") | $(speedup "$da" "$dp_ms") | $dp_ms ms |"
done

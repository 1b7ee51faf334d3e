#!/bin/bash
# pipetop demo --simulate with the GPT-3 plan on a 32-node x 8-GPU cluster
# (cluster-128x8's nodes, a quarter of them: 252 simulated agents in one
# process), in tmux at 120x40 and 80x24; tests/tui/demo_sim_lib.sh says what
# it checks. demo_sim_scale_test.sh runs the same on cluster-128x8 itself.
# First: a bad --straggler is refused before the console opens.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/demo_sim_lib.sh"
DEMO_TOPOLOGY="$TM_DIR/cluster-32x8.json"
DEMO_WHAT="gpt3 on 32x8"
sed 's/"cluster-128x8"/"cluster-32x8"/; s/"repeat": 128,/"repeat": 32,/' \
    "$PT_SOURCE_DIR/topologies/cluster-128x8.json" >"$DEMO_TOPOLOGY"
grep -q '"repeat": 32,' "$DEMO_TOPOLOGY" ||
    { echo "FAIL: topologies/cluster-128x8.json has no \"repeat\": 128 to make 32x8 of" >&2; exit 1; }
# --straggler is refused before the console opens: without --simulate, and
# naming a device the plan does not have (the demo's 4-device plan)
out=$("$PIPETOP" demo --straggler 1:50:1 2>&1)
tm_check "--straggler without --simulate: exit 2" test $? -eq 2
tm_check "  and says so" grep -q -- '--straggler goes with --simulate' <<<"$out"
out=$("$PIPETOP" demo --simulate --straggler 9:50:1 --run-dir "$TM_DIR/refused" 2>&1)
tm_check "--straggler 9:50:1 on 4 devices: exit 1" test $? -eq 1
tm_check "  naming the bound" grep -q -- '--straggler "9:50:1": .*(0 <= K < 4)' <<<"$out"
tm_check "  before any run folder" test ! -e "$TM_DIR/refused"

for size in "120 40" "80 24"; do
    demo_size $size
done
tm_summary

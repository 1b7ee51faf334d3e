#!/bin/bash
# pipetop demo --simulate with the GPT-3 plan on cluster-128x8 (63 stages x 16
# replicas = 1,008 workers, 1,024 devices: one simulated agent per device up
# to the plan's last, in one process), in tmux at 120x40 and 80x24;
# tests/tui/demo_sim_lib.sh says what it checks. Label "scale": minutes of
# CPU on 2 cores (docs/console.md, "The demo at cluster scale").
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/demo_sim_lib.sh"
DEMO_TOPOLOGY=cluster-128x8
DEMO_WHAT="gpt3 on cluster-128x8"
for size in "120 40" "80 24"; do
    demo_size $size
done
tm_summary

#!/bin/bash
# pipetop demo --simulate with the GPT-3 plan on cluster-128x8 (A100s in bf16:
# 63 stages x 16 replicas = 1,008 workers, one simulated agent each, in one
# process; a step every 15.7 s), in tmux at 120x40 and 80x24;
# tests/tui/demo_sim_lib.sh says what it checks. Label "scale": minutes of
# CPU on 2 cores (docs/console.md, "The demo at cluster scale").
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/demo_sim_lib.sh"
DEMO_TOPOLOGY=cluster-128x8
DEMO_DEVICE=a100-80gb # the 63 x 16 plan (an H100 in fp8 gets 94 x 8)
DEMO_PRECISION=bf16
DEMO_WHAT="gpt3 on cluster-128x8"
for size in "120 40" "80 24"; do
    demo_size $size
done
tm_summary

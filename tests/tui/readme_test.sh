#!/bin/bash
# The README's "Using it" block works as written, in order, in a folder that
# holds what a fresh clone has (the shipped models, devices, topologies,
# themes and profiles, and build/ with the programs): every command exits 0.
# The interactive console commands (demo, replay) run under tmux until their
# screen shows data, then q must end them with status 0. Without the
# Fashion-MNIST files (scripts/setup.sh installs them) --data fashion-mnist
# becomes synthetic, and the test says so. Also: `run` with the quick form
# gets the --stages it asks for (scripts/setup.sh main's headless run).
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
work="$TM_DIR/clone"
mkdir -p "$work"
for d in models devices topologies themes profiles; do
    cp -r "$PT_SOURCE_DIR/$d" "$work/"
done
ln -s "$PT_BUILD_DIR" "$work/build"
data_sub=""
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ ! -d "$PT_SOURCE_DIR/data/fashion-mnist" ]; then
    data_sub="synthetic"
    echo "note: no Fashion-MNIST here: --data fashion-mnist runs as --data synthetic"
fi

# the block: the lines between "## Using it"'s ```sh and the closing ```
block=$(awk '/^## Using it/ {on = 1; next} on && /^```sh/ {inb = 1; next} inb && /^```/ {exit} inb' \
    "$PT_SOURCE_DIR/README.md")
n=$(printf '%s\n' "$block" | grep -c '^build/pipetop ')
tm_check "the README block has commands ($n)" test "$n" -ge 10

console_cmd() { # CMD: runs an interactive command under tmux in the clone
    local cmd=$1
    tm_start 120 40 "bash -c \"cd '$work' && $cmd\""
    tm_check "$cmd: the console shows data" tm_wait 120 '^pipetop 1 plan.*\| step [0-9]+'
    tm_check "$cmd: q ends it with status 0" tm_quit_ok
}

while IFS= read -r line; do
    cmd=${line%%  #*} # the comment after two spaces and '#'
    cmd=$(printf '%s' "$cmd" | sed 's/[[:space:]]*$//')
    [ -n "$cmd" ] || continue
    [ -n "$data_sub" ] && cmd=${cmd//--data fashion-mnist/--data $data_sub}
    case "$cmd" in
    "build/pipetop demo"* | "build/pipetop replay"*)
        console_cmd "$cmd"
        continue
        ;;
    esac
    TM_CHECKS=$((TM_CHECKS + 1))
    if ! (cd "$work" && eval "$cmd") >"$TM_DIR/out" 2>&1; then
        tm_fail "README command failed: $cmd"
        tail -n 5 "$TM_DIR/out" >&2
    fi
done <<<"$block"

# what the block promises: plan.json before sim, checkpoints where --resume looks
tm_check "plan wrote plan.json" test -s "$work/plan.json"
tm_check "the first run checkpointed into runs/first/ckpt" test -d "$work/runs/first/ckpt/step-100"
tm_check "the resumed run finished" grep -q '"state":"finished"' <<<"$(cd "$work" && build/pipetop status --json runs/second)"

# the quick form gets the stages it asks for even when the planner would choose fewer
(cd "$work" && build/pipetop run --stages 4 --schedule dapple --planner dapple --microbatches 4 \
    --model fmnist-mlp-deep --data synthetic --iters 2 --run-dir runs/four >"$TM_DIR/out" 2>&1)
tm_check "run --stages 4 exits 0" test $? -eq 0
stages=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["stages"]))' \
    "$work/runs/four/plan.json" 2>/dev/null)
tm_check "run --stages 4 runs 4 stages (got $stages)" test "$stages" = 4
tm_summary

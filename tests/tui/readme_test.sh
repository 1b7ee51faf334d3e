#!/bin/bash
# The README's "Using it" block works as written, in order, in a folder that
# holds what a fresh clone has (the shipped models, devices, topologies,
# themes and profiles, and build/ with the programs): every command exits 0.
# The interactive console commands (demo, replay) run under tmux until their
# screen shows data, then q must end them with status 0. Without the
# Fashion-MNIST files (scripts/setup.sh installs them) --data fashion-mnist
# becomes synthetic, and the test says so. Also: `run` with the quick form
# gets the --stages it asks for (scripts/setup.sh main's headless run); the
# resumed run checkpoints into its own folder; and each of the block's runs
# shows one measured and one predicted iteration time, with one label, in
# `run`'s summary, `status` (with and without a path), `status --json`,
# `replay` (header and plan view) and `export --compare`
# (tests/tui/figures_agree.py).
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
    # a run's summary, kept for the comparison below
    case "$cmd" in
    *" run "*"--run-dir runs/"*) cp "$TM_DIR/out" "$TM_DIR/summary-${cmd##*--run-dir runs/}" ;;
    esac
done <<<"$block"

# what the block promises: plan.json before sim, checkpoints where --resume looks
tm_check "plan wrote plan.json" test -s "$work/plan.json"
tm_check "the first run checkpointed into runs/first/ckpt" test -d "$work/runs/first/ckpt/step-100"
tm_check "the resumed run finished" grep -q '"state":"finished"' <<<"$(cd "$work" && build/pipetop status --json runs/second)"

# a resumed run writes into its own folder, never into the one it resumed from
tm_check "the resumed run checkpointed into runs/second/ckpt" test -d "$work/runs/second/ckpt/step-150"
tm_check "runs/first/ckpt holds no step of the second run" test ! -e "$work/runs/first/ckpt/step-150"

# one run, one set of figures, wherever it is looked at
figures_agree() { # RUN [TAG]: every place shows RUN's figures alike (TAG: no run summary)
    local run=$1 tag=${2-}
    local f="$TM_DIR/fig-$run$tag" sum=("summary=$TM_DIR/summary-$run")
    [ -n "$tag" ] && sum=()
    (cd "$work" && build/pipetop status "runs/$run") >"$f.status" 2>&1
    (cd "$work" && build/pipetop status --json "runs/$run") >"$f.json" 2>&1
    (cd "$work" && build/pipetop export "runs/$run" --svg "$f.svg" --compare) >"$f.export" 2>&1
    local more=()
    if [ "$run" = second ]; then # the newest run: status without a path picks it
        (cd "$work" && build/pipetop status) >"$f.nopath" 2>&1
        more=("status_nopath=$f.nopath")
    fi
    tm_start 120 40 "bash -c \"cd '$work' && build/pipetop replay runs/$run --end --view plan\""
    tm_wait 60 'measured +[0-9]' && tm_settle 5
    tm_cap >"$f.replay"
    tm_quit_ok
    python3 "$PT_SOURCE_DIR/tests/tui/figures_agree.py" "$run$tag" "${sum[@]}" \
        "status=$f.status" "json=$f.json" "replay=$f.replay" "svg=$f.svg" "${more[@]}"
}
tm_check "runs/first: one figure everywhere" figures_agree first
tm_check "runs/second: one figure everywhere" figures_agree second
# a calibration in the run folder (what the live console writes after a
# generation's first steps): every place predicts with it, labelled so
cp "$work/cal.json" "$work/runs/second/calibrated-gen-1.json"
cp "$work/cal-topo.json" "$work/runs/second/calibrated-gen-1-topology.json"
tm_check "runs/second calibrated: one figure everywhere" figures_agree second -calibrated
tm_check "runs/second calibrated: status --json says calibrated" \
    grep -q '"predicted_kind":"calibrated"' "$TM_DIR/fig-second-calibrated.json"

# the quick form gets the stages it asks for even when the planner would choose fewer
(cd "$work" && build/pipetop run --stages 4 --schedule dapple --planner dapple --microbatches 4 \
    --model fmnist-mlp-deep --data synthetic --iters 2 --run-dir runs/four >"$TM_DIR/out" 2>&1)
tm_check "run --stages 4 exits 0" test $? -eq 0
stages=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["stages"]))' \
    "$work/runs/four/plan.json" 2>/dev/null)
tm_check "run --stages 4 runs 4 stages (got $stages)" test "$stages" = 4
tm_summary

#!/bin/bash
# docs/torch.md runs as written (as readme_test.sh does for the README): every
# line of its ```sh blocks, in order, in a folder that holds what a clone has
# (build/, bridge/, the data folders, tests/bridge with the example GPT and
# its training). `export` lines set the test's own environment; the console
# command runs under tmux until it waits for the run, then the training line
# beside it, until the console shows both stages' ops and the loss; q must
# end the console with status 0 and the training must end with status 0.
# Every other command must exit 0. The promised files must be there.
. "$(dirname "$0")/bridge_lib.sh"
bridge_tmux
work="$tmp/clone"
mkdir -p "$work/tests"
for d in models devices topologies themes profiles; do
    cp -r "$PT_SOURCE_DIR/$d" "$work/"
done
ln -s "$PT_BUILD_DIR" "$work/build"
ln -s "$PT_SOURCE_DIR/bridge" "$work/bridge"
ln -s "$PT_SOURCE_DIR/tests/bridge" "$work/tests/bridge"
export PYTHONDONTWRITEBYTECODE=1
cd "$work" || exit 1

block=$(awk '/^```sh/ {inb = 1; next} inb && /^```/ {inb = 0; next} inb' \
    "$PT_SOURCE_DIR/docs/torch.md")
n=$(grep -c . <<<"$block")
check "docs/torch.md has commands ($n)" test "$n" -ge 20

console_cmd() { # the console: under tmux, until it waits for the run
    tm_start 160 45 "bash -c \"cd '$work' && $1\""
    tm_check "$1: the console waits for the run" tm_wait 60 'observing: run the training'
}
observed_training() { # the training beside the console, until both stages show
    set -m
    (eval "$1" >"$tmp/train.log" 2>&1) &
    train_pid=$!
    set +m
    tm_check "the measured timeline shows" tm_wait 180 'measured timeline: last [0-9]+ iterations'
    tm_check "stage 0's row" tm_wait 10 '^│s0r0 .*[0-9]'
    tm_check "stage 1's row" tm_wait 10 '^│s1r0 .*[0-9]'
    tm_check "the header shows the loss" tm_wait 60 '\| step [0-9]+ loss [0-9]+\.[0-9]+ '
    tm_check "q ends the console with status 0" tm_quit_ok
    checks=$((checks + 1))
    wait "$train_pid" || { fail "the observed training failed"; tail -n 20 "$tmp/train.log" >&2; }
    train_pid=""
}

while IFS= read -r cmd; do
    [ -n "$cmd" ] || continue
    case "$cmd" in
    export\ *) eval "$cmd" ;;
    "build/pipetop console"*) console_cmd "$cmd" ;;
    PIPETOP_OBSERVE=*) observed_training "$cmd" ;;
    *) check "docs/torch.md: $cmd" eval "$cmd" ;;
    esac
done <<<"$block"

for f in gpt-profile.json resnet18-profile.json gpt-plan.json resnet18-plan.json gpt-torch.json \
    gpt-torch.csv gpt-titan.toml gpt_deepspeed.py traces/rank0.json traces/rank1.json \
    runs/gpt/run.ndjson gpt-trace.json gpt.svg gpt-calibrated.json gpt-plan2.json; do
    check "docs/torch.md made $f" test -s "$f"
done
check "the imported run finished its 3 iterations" grep -q '"state":"finished".*"steps":3' \
    <<<"$(build/pipetop status --json runs/gpt)"
tm_summary >/dev/null || failures=$((failures + TM_FAILURES))
checks=$((checks + TM_CHECKS))
summary

#!/bin/bash
# Watching a PyTorch run live (docs/torch.md): `pipetop console --observe DIR`
# spawns one pipetop-agent --observe per pipeline rank; a 2-process torch
# 1.13 pipeline over gloo (tests/bridge/pipe2.py), each process reporting
# through pipetop_torch.Monitor with PIPETOP_OBSERVE=DIR, shows both stages'
# ops in the console's measured timeline and its loss in the stats view and
# the header; apply & restart and plan edits are refused with the read-only
# message of an observed run; q ends the console with status 0 (the
# training goes on without it). The socket folder is 0700, its sockets 0600,
# and an agent refuses a folder others can reach.
. "$(dirname "$0")/bridge_lib.sh"
bridge_tmux
obs="$TM_DIR/obs"
K="$PT_SOURCE_DIR/tests/data/torch"

tm_start 160 45 "$PIPETOP console --observe '$obs' --plan '$K/gpt-2stage-plan.json' --profile '$K/gpt-profile.json' --view timeline"
tm_check "the console waits for the run" tm_wait 60 "observing: run the training with PIPETOP_OBSERVE=$obs"
tm_check "the folder is 0700" test "$(stat -c %a "$obs")" = 700
tm_check "each rank's socket is there, 0600" \
    test "$(stat -c %a "$obs/rank-0.sock")$(stat -c %a "$obs/rank-1.sock")" = 600600

# the training, in a process group of its own
set -m
(cd "$PT_SOURCE_DIR/tests/bridge" && PIPETOP_OBSERVE="$obs" exec "$PY" pipe2.py --seconds 300 \
    >"$tmp/train.log" 2>&1) &
train_pid=$!
set +m

tm_check "the measured timeline shows" tm_wait 120 'measured timeline: last [0-9]+ iterations'
row_has_ops() { # row_has_ops STAGE: its row holds micro-batch numbers and both glyphs
    local row
    row=$(tm_cap | grep -m1 "^│s$1r0 " | sed "s/^│s$1r0 *//")
    [[ $row == *[0-9]* && $row == *=* && $row == *'#'* ]]
}
wait_row_ops() { # wait_row_ops STAGE: until its row shows ops (30 s): the first measured
    local i        # screen may hold only the rank whose frame came first (CI saw s1r0 alone)
    for ((i = 0; i < 150; i++)); do
        row_has_ops "$1" && return 0
        sleep 0.2
    done
    return 1
}
tm_check "stage 0's ops in its row" wait_row_ops 0
tm_check "stage 1's ops in its row" wait_row_ops 1
tm_check "the header shows the loss" tm_wait 30 '\| step [0-9]+ loss [0-9]+\.[0-9]+ '
loss_plotted() { # the stats view's loss panel has its axis and no "nothing yet"
    local screen
    screen=$(tm_cap)
    grep -q '─ loss ─' <<<"$screen" && grep -q '\* raw o smooth' <<<"$screen" &&
        ! grep -q 'no steps measured yet' <<<"$screen"
}
tm_keys 3
tm_check "stats: the loss plot" tm_wait 20 '─ loss ─'
tm_check "stats: the loss has values" loss_plotted
tm_keys 1
tm_check "plan view" tm_wait 10 'predicted +[0-9.]+ ms/iteration'
tm_keys A
tm_check "apply & restart refused: observed" tm_wait 10 \
    "an observed run cannot be restarted from here: it runs in its own PyTorch processes: 'A' would restart the run; refused"
tm_keys '}'
tm_check "an edit refused: observed" tm_wait 10 \
    "an observed run cannot be restarted from here: .*'\}' would edit the plan; refused"
tm_check "q ends the console with status 0" tm_quit_ok
tm_check "the training goes on after the console" kill -0 "$train_pid"

# an agent refuses a folder others can reach
mkdir -p "$tmp/open" && chmod 755 "$tmp/open"
out=$("$PT_BUILD_DIR/pipetop-agent" --console ipc:///nonexistent --observe "$tmp/open" 2>&1)
tm_check "an open folder is refused" grep -qF 'its mode is not 0700' <<<"$out"
out=$("$PIPETOP" console --observe "$tmp/obs2" --plan "$K/gpt-2stage-plan.json" 2>&1)
tm_check "--observe without --profile is refused" grep -qF -- '--observe needs --plan' <<<"$out"
tm_summary

#!/bin/bash
# The plan view of the console (simulation only), driven in tmux: moving a
# stage boundary changes the predicted iteration time shown, by exactly what
# the simulator says (pipetop sim on the plan the console writes); invalid
# edits are refused with their reason in the status line and change nothing;
# the layout holds at 80x24 and 200x60; q exits.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"

predicted() { # the predicted iteration time shown, in ms
    tm_cap | grep -oE 'predicted +[0-9.]+ ms' | grep -oE '[0-9]+\.[0-9]+'
}
stage0() { # "layers A-B" of stage 0's header
    tm_cap | grep -oE '== stage 0 +layers [0-9]+-[0-9]+' | grep -oE '[0-9]+-[0-9]+$'
}

tm_start 80 24 "$PIPETOP --view plan"
tm_check "plan view appears" tm_wait 15 'predicted +[0-9.]+ ms'
tm_check "layout at 80x24" tm_layout_ok 80 24
before=$(predicted)
range0=$(stage0)
tm_check "stage 0 shown" test -n "$range0"

# } moves the end of the cursor's stage (stage 0) one layer down. The model
# alternates linear and (nearly free) relu layers, so of two moves one takes a
# linear layer across and must change the prediction.
tm_keys '}'
tm_check "edit reported" tm_wait 5 'boundary moved; plan: [0-9.]+ ms predicted'
range1=$(stage0)
tm_check "stage 0 grew by one layer ($range0 -> $range1)" \
    test "${range1%-*}" = "${range0%-*}" -a "${range1#*-}" -eq $((${range0#*-} + 1))
after=$(predicted)
if [ "$after" = "$before" ]; then
    tm_keys '}'
    tm_check "second move reported" tm_wait 5 "layers 0-$((${range0#*-} + 2)) "
    range1=$(stage0)
    after=$(predicted)
fi
tm_check "predicted time changed ($before -> $after)" test "$before" != "$after"

# the number shown is the simulator's for the edited plan: write it, simulate it
tm_keys w
tm_check "plan written" tm_wait 5 'wrote the edited plan to plan-edited.json'
cfgdir="$TM_DIR/config"
prof="$TM_DIR/profile.json"
"$PIPETOP" profile --analytic --model fmnist-mlp-deep --device "$PT_SOURCE_DIR/devices/cpu-local.json" \
    --batch "$(grep -oE '"size":[[:space:]]*[0-9]+' "$TM_DIR/plan-edited.json" | grep -oE '[0-9]+$')" \
    --out "$prof" >/dev/null 2>&1
sim=$("$PIPETOP" sim --plan "$TM_DIR/plan-edited.json" --profile "$prof" \
    --topology "$PT_SOURCE_DIR/topologies/local-cpu-4.json" 2>/dev/null |
    grep -m1 -oE '^iteration +[0-9.]+ ms' | grep -oE '[0-9]+\.[0-9]+')
tm_check "console shows pipetop sim's time ($after vs $sim)" test -n "$sim" -a "$sim" = "$after"

# invalid edits: refused with the reason, plan unchanged
tm_keys Home '['
tm_check "moving stage 0's start is refused" tm_wait 5 'refused: stage 0 starts at layer 0'
tm_keys '-'
tm_check "fewer than 1 replica is refused" tm_wait 5 'refused: stage 0 cannot have fewer than 1 replica'
tm_keys J
tm_check "joining stage 0 is refused" tm_wait 5 'refused: stage 0 has no stage before it'
tm_check "prediction unchanged by refused edits" test "$(predicted)" = "$after"
tm_check "stage 0 unchanged by refused edits" test "$(stage0)" = "$range1"
# a boundary moved past the next one empties a stage: refused (the model has
# 34 layers, so 40 moves empty stage 1 whatever the planner chose)
for i in $(seq 1 40); do tm_keys '}'; done
tm_check "emptying a stage is refused" tm_wait 5 'refused: stage 1 would have no layers'
# undo brings back the first plan and its prediction
for i in $(seq 1 30); do tm_keys u; done
tm_check "undo restores the first prediction" tm_wait 5 "predicted +$before ms"

# the mouse (SGR reports, as xterm sends them): drag stage 1's header onto
# layer 2's row, so stage 0 becomes layers 0-1; a click on a tab switches views
mouse() { # press|release COL ROW (0-based)
    local e=M
    [ "$1" = release ] && e=m
    tmux -L "$TM_SOCK" send-keys -t t -l $'\e'"[<0;$(($2 + 1));$(($3 + 1))$e"
}
tm_keys Home
tm_wait 5 '^│   2 ' >/dev/null
# under load the console may still be working through the keys above: take
# the rows from a settled screen, and if a drag still missed (the screen moved
# between capture and press), undo whatever it did and drag again
dragged=1
for attempt in 1 2 3; do
    tm_settle 10
    hdr=$(tm_cap | grep -n '== stage 1 ' | cut -d: -f1)
    row=$(tm_cap | grep -n '^│   2 ' | cut -d: -f1)
    [ -n "$hdr" ] && [ -n "$row" ] || { dragged=0; break; }
    mouse press 10 $((hdr - 1))
    mouse release 10 $((row - 1))
    tm_wait 5 '== stage 0  layers 0-1 ' && { dragged=1; break; }
    dragged=0
    tm_keys u
done
tm_check "stage 1 header and layer 2 on screen" test -n "$hdr" -a -n "$row"
tm_check "dragging the boundary moves it" test "$dragged" = 1
tm_keys u
tm_check "undo after the drag" tm_wait 5 "predicted +$before ms"
mouse press 30 0
mouse release 30 0
tm_check "clicking the stats tab opens the stats view" tm_wait 5 'throughput \(samples/s\)'
tm_keys 1

# apply & restart without a live run says why
tm_keys A
tm_check "apply refused without a run" tm_wait 5 'apply & restart needs a live run'

# the planner key fills the plan and reports the gain
tm_keys b P
tm_check "planner result and gain shown" tm_wait 20 'planner dapple: [0-9.]+ -> [0-9.]+ ms per iteration'

tm_resize 200 60
tm_check "layout at 200x60" tm_layout_ok 200 60
tm_check "wide layout puts the summary beside the layers" tm_wait 5 '┐┌─ plan: prediction'
tm_check "q exits with 0" tm_quit_ok
tm_summary

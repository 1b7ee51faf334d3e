#!/bin/bash
# The demo switched live to the zero-bubble schedules: in the plan view S
# steps through the kinds to zb-h1, A applies it and the run restarts as a
# new generation whose agents run the split backward, and the live timeline
# draws its two halves apart: B (BWD_INPUT) cells filled with '%', W
# (BWD_WEIGHT) cells with '~' (tui/theme.c's fills), which no other kind
# paints; then the same for zb-h2. q ends the console.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$TM_DIR/run"

# plan view: S until the schedule line names $1 (at most one turn of the table)
switch_to() {
    local kind=$1 i
    tm_keys 1
    for ((i = 0; i < 16; i++)); do
        tm_cap | grep -qE "schedule +$kind," && return 0
        tm_keys S
        tm_settle 5
    done
    tm_cap | grep -qE "schedule +$kind,"
}

# the stage rows of the timeline show both halves of the split backward
split_drawn() {
    local secs=$1 i rows
    for ((i = 0; i < secs * 5; i++)); do
        rows=$(tm_cap | grep -E '^│s[0-9]r[0-9] ')
        grep -q '%' <<<"$rows" && grep -q '~' <<<"$rows" && return 0
        sleep 0.2
    done
    return 1
}

tm_start 120 32 "$PIPETOP demo --data synthetic --run-dir '$RUN'"
tm_check "agents register and train" tm_wait 120 'live gen 1, 4 agents \| step [0-9]+'
tm_check "timeline of the live run" tm_wait 60 'measured timeline'
tm_check "no split backward before the switch" bash -c \
    "! tmux -L '$TM_SOCK' capture-pane -p -t t | grep -E '^│s[0-9]r[0-9] ' | grep -q '~'"
gen=1
for kind in zb-h1 zb-h2; do
    tm_check "plan view reaches $kind with S" switch_to "$kind"
    tm_keys A
    gen=$((gen + 1))
    tm_check "$kind: apply queued" tm_wait 10 'apply & restart: queued'
    tm_check "$kind: restarted as generation $gen" tm_wait 120 "generation $gen resumes at step [0-9]+"
    tm_check "$kind: generation $gen trains" tm_wait 60 "live gen $gen, 4 agents"
    tm_keys 2
    tm_check "$kind: B ('%') and W ('~') drawn apart in the stage rows" split_drawn 60
    tm_check "$kind: layout intact" tm_layout_ok 120 32
done
tm_check "q exits with 0" tm_quit_ok
rec="$RUN/run.ndjson"
tm_check "the record has BWD_INPUT and BWD_WEIGHT events" \
    bash -c "grep -q 'BWD_INPUT' '$rec' && grep -q 'BWD_WEIGHT' '$rec'"
tm_summary

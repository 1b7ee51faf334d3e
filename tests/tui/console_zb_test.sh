#!/bin/bash
# The demo switched live to the zero-bubble schedules: in the plan view S
# steps through the kinds to zb-h1, A applies it and the run restarts as a
# new generation whose agents run the split backward, and the live timeline
# draws its two halves apart: B (BWD_INPUT) cells filled with '%', W
# (BWD_WEIGHT) cells with '~' (tui/export/timeline_ascii.c's fills), which no other kind
# paints; then the same for zb-h2. Then interleaved: the demo's 3 stages
# joined to 2 (J; M = 8 is a multiple of 2), V re-cuts them into 2 chunks
# per device ("interleaved v=2"; S, which keeps every boundary, skips
# interleaved), V makes it 3 and u takes it back, A
# restarts the run on the same 4 agents, one per device each running its
# device's chunks, and the timeline shows the chunk stages s2 and s3 (which
# only the interleaved plan has) computing. q ends the console.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$TM_DIR/run"

# plan view: S until the edited plan (or, unedited, the running one) is of
# kind $1 (at most one turn of the table)
sched_line() { # the edited plan's kind line when there is an edit, else the running plan's
    local s
    s=$(tm_cap)
    grep -oE 'edited: +[a-z0-9-]+,[^│]*' <<<"$s" | head -1 | grep . ||
        grep -oE 'schedule +[a-z0-9-]+[^│]*' <<<"$s" | head -1
}
s_mark() { tm_cap | grep -oE '[a-z0-9-]+ \([0-9]+ of [0-9]+ kinds' | tail -n1; }
switch_to() {
    local kind=$1 i before j
    tm_keys 1
    tm_wait 20 'plan: fmnist-mlp-deep, 34 layers' || return 1
    for ((i = 0; i < 16; i++)); do
        sched_line | grep -qE "^(edited: +|schedule +)$kind," && return 0
        before=$(s_mark)
        tm_keys S
        # one S at a time: the console may lag behind its keys while it trains;
        # each press names the kind it reached or skipped ("K (i of N kinds")
        for ((j = 0; j < 100; j++)); do
            [ "$(s_mark)" != "$before" ] && break
            sleep 0.2
        done
    done
    sched_line | grep -qE "^(edited: +|schedule +)$kind,"
}

# rows of stage $1 in the timeline, computing (a forward or backward cell)
stage_drawn() {
    local st=$1 secs=$2 i
    for ((i = 0; i < secs * 5; i++)); do
        tm_cap | grep -E "^│s${st}r[0-9] " | grep -qE '[0-9=#]' && return 0
        sleep 0.2
    done
    return 1
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
tm_keys 1
tm_check "interleaved: no chunk stage s3 before the switch" bash -c \
    "! tmux -L '$TM_SOCK' capture-pane -p -t t | grep -q '== stage 3 '"
# the cursor on the last layer; J joins the last stage with the one before until 2 are left
join_to_two() {
    local i n
    tm_wait 20 'plan: fmnist-mlp-deep, 34 layers' || return 1 # the '1' above has been drawn
    tm_keys $(printf 'j %.0s' {1..40}) # down to the last layer (End arrives as an escape sequence)
    for ((i = 0; i < 8; i++)); do
        n=$(tm_cap | grep -oE 'fmnist-mlp-deep, 34 layers, [0-9]+ stages' | grep -oE '[0-9]+ stages' | cut -d' ' -f1)
        [ "$n" = 2 ] && return 0
        [ -n "$n" ] && [ "$n" -gt 2 ] || return 1
        tm_keys J
        # one J at a time: wait for this join to show before judging the count
        tm_wait 20 "fmnist-mlp-deep, 34 layers, $((n - 1)) stages" || return 1
    done
    return 1
}
tm_check "J: 2 stages" join_to_two
tm_keys V
tm_check "V: interleaved, 4 chunk stages on the 2 ranks" tm_wait 10 'edited: +interleaved v=2, 4 stages'
tm_keys V
tm_check "V: 3 chunks per device" tm_wait 10 'edited: +interleaved v=3, 6 stages'
tm_keys u
tm_check "u: back to 2 chunks" tm_wait 10 'edited: +interleaved v=2, 4 stages'
tm_keys A
gen=$((gen + 1))
tm_check "interleaved: apply queued" tm_wait 10 'apply & restart: queued'
tm_check "interleaved: restarted as generation $gen" tm_wait 120 "generation $gen resumes at step [0-9]+"
tm_check "interleaved: generation $gen trains on the 4 agents" tm_wait 60 "live gen $gen, 4 agents"
tm_keys 2
tm_check "interleaved: chunk stage s2 computes" stage_drawn 2 60
tm_check "interleaved: chunk stage s3 computes" stage_drawn 3 60
tm_check "interleaved: layout intact" tm_layout_ok 120 32
tm_check "q exits with 0" tm_quit_ok
rec="$TM_DIR/run.txt" # the record's text (the demo writes it compressed: docs/formats.md)
gzip -dcf "$RUN/run.ndjson" >"$rec"
tm_check "the record has BWD_INPUT and BWD_WEIGHT events" \
    bash -c "grep -q 'BWD_INPUT' '$rec' && grep -q 'BWD_WEIGHT' '$rec'"
# the interleaved plan's agents are its devices: as many as the replicas of its first 2
# stages (each agent runs both chunks of its device), not one per chunk worker
one_agent_per_device() {
    local line agents devices
    line=$(grep '"kind":"interleaved","chunks":2' "$rec" | head -1)
    agents=$(grep -o '"worker":[0-9]*' <<<"$line" | wc -l)
    read -r devices workers < <(python3 -c 'import json,sys
p = json.loads(sys.stdin.read())["plan"]
reps = [len(s["replicas"]) for s in p["stages"]]
print(sum(reps[:len(reps) // 2]), sum(reps))' <<<"$line")
    echo "interleaved generation: $agents agents, $devices devices, $workers chunk workers"
    [ -n "$line" ] && [ "$agents" -eq "$devices" ] && [ "$agents" -lt "$workers" ]
}
tm_check "the record: generation $gen is interleaved on one agent per device" one_agent_per_device
tm_summary

#!/bin/bash
# History and generations, end to end: a live demo run is restarted under a
# new schedule (apply & restart), so its record holds two plan generations.
# Live, once the run is longer than any panel is wide (issue 12 found only
# the last 1-3 s kept), the stats graphs keep the whole run from step 0 (z),
# several steps to a column, with the restart marked.
# Replayed, the plan view follows the generation being shown (schedule and
# prediction of that generation), the replay seeks between generations, one
# step back and to the start, and the graphs hold the whole run there too.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$TM_DIR/run"

# header_step: the step the header shows, or -1
header_step() {
    tm_cap | head -n1 | grep -oE 'step [0-9]+' | head -n1 | grep -oE '[0-9]+' || echo -1
}

# wait_steps_past N SECS: the header's step passes N
wait_steps_past() {
    local n=$1 secs=$2 i s
    for ((i = 0; i < secs * 5; i++)); do
        s=$(header_step)
        [ "$s" -gt "$n" ] && return 0
        sleep 0.2
    done
    return 1
}

# graph_marks_restart: a stats graph line holds the restart marker '|'
graph_marks_restart() {
    tm_cap | sed -n '3,12p' | grep -q '[#:*. o]|\||[#:*. o]'
}

# 1. live: train, restart under the next schedule kind, keep the history
tm_start 120 40 "$PIPETOP demo --data synthetic --run-dir '$RUN' --view plan"
tm_check "demo trains (generation 1)" tm_wait 60 'live gen 1'
tm_check "plan view shows dapple" tm_wait 10 'schedule +dapple'
tm_check "steps are measured" wait_steps_past 40 60
tm_keys S
tm_check "S picks the next kind" tm_wait 5 'schedule +1f1b-flush'
tm_keys A
tm_check "apply & restart reaches generation 2" tm_wait 60 'live gen 2'
resumed=$(header_step)
tm_check "generation 2 trains on" wait_steps_past $((resumed + 40)) 60
# 150 steps: more than twice the columns of the 80-wide stats graph
tm_check "the run trains past step 150" wait_steps_past 150 120
tm_resize 80 24
tm_keys 3
tm_check "stats view, recent steps" tm_wait 5 ' z all'
tm_keys z
tm_check "z: the whole run from step 0" tm_wait 5 'step 0\.\.[0-9]+ all'
tm_check "z: steps per column said" tm_wait 2 'all [0-9]+/col'
tm_check "the restart stays marked" graph_marks_restart
tm_check "q exits with 0" tm_quit_ok

# 2. replay: the plan view follows generations; seeking
tm_start 120 40 "$PIPETOP replay '$RUN' --end --view plan"
tm_check "replay at the end shows generation 2 of 2" tm_wait 30 'gen 2/2'
tm_check "the footer lists the replay keys" tm_wait 15 '^replay: space pause  n/N step  ,/\. generation  R rewind'
tm_check "generation 2's plan: 1f1b-flush" tm_wait 5 'schedule +1f1b-flush'
tm_keys ,
tm_check ", goes to the start of generation 2" tm_wait 5 'generation 2 of 2'
tm_keys ,
tm_check ", again goes to generation 1" tm_wait 5 'generation 1 of 2'
tm_check "generation 1's plan: dapple" tm_wait 5 'schedule +dapple'
tm_check "header says gen 1/2" tm_wait 2 'gen 1/2'
tm_keys .
tm_check ". goes to generation 2" tm_wait 5 'generation 2 of 2'
tm_check "generation 2's plan again" tm_wait 5 'schedule +1f1b-flush'
tm_keys e
tm_check "e: the end" tm_wait 5 'replay 1x end'
last=$(header_step)
tm_keys N
tm_check "N: one step back" tm_wait 5 'one step back'
tm_check "N: the header's step goes down" bash -c "[ \$(tmux -L $TM_SOCK capture-pane -p -t t | head -n1 | grep -oE 'step [0-9]+' | grep -oE '[0-9]+') -lt $last ]"
tm_keys 3 z
tm_check "replay stats: the whole run" tm_wait 5 'step 0\.\.[0-9]+ all'
tm_check "replay stats: the restart marked" graph_marks_restart
tm_keys R
tm_check "R rewinds" tm_wait 5 'rewound to the start'
tm_check "R: gen 1 again" tm_wait 5 'gen 1/2'
tm_resize 120 90
tm_keys '?'
tm_check "help lists the seek keys" tm_wait 5 'next / previous plan generation'
tm_check "help lists the stats keys" tm_wait 2 'the whole run \(downsampled'
tm_check "q exits with 0" tm_quit_ok

tm_summary

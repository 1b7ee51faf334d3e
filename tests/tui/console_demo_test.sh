#!/bin/bash
# pipetop demo, driven in tmux: 4 local agents train, the live timeline shows
# the stage rows with micro-batch numbers; an edit applied with A restarts the
# run under a new plan generation that resumes at the very step the old one
# stopped after (checked in the run record: last metrics step of generation 1
# + 1 = first of generation 2 = the resume step of the new assign); q ends the
# console and leaves no agent process behind.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$TM_DIR/run"
DATA=fashion-mnist
[ -d /usr/share/datasets/fashion-mnist ] || DATA=synthetic

tm_start 100 30 "$PIPETOP demo --data $DATA --run-dir '$RUN'"
tm_check "agents register and train" tm_wait 120 'live gen 1, 4 agents \| step [0-9]+'
tm_check "timeline of the live run" tm_wait 60 'measured timeline'
tm_check "stage rows shown" tm_wait 10 '^│s0r0 '
tm_check "micro-batch labels in the rows" tm_wait 10 '^│s0r0 .*[0-9].*[0-9]'
tm_check "layout intact while live" tm_layout_ok 100 30
tm_keys 4
tm_check "agents view: 4 running agents" tm_wait 10 'agents: 4'
# htop's columns: the agent's pid, CPU % and RSS (read from /proc: the demo's
# agents run here) and the device it really runs on
tm_check "agents view: pid, cpu%, rss columns" tm_wait 5 '^│agent +pid +cpu% +rss '
tm_check "agents view: a row with pid, CPU % and RSS figures" \
    tm_wait 10 '^│[^ ]+ +[0-9]+ +[0-9]+ +[0-9.]+[KMG] .*cpu:[0-9]+ '
tm_keys / w 2 Enter
tm_check "agents filter: one agent left" tm_wait 5 'agents: 4, filter "w2"'
only_w2() { ! tm_cap | grep -qE '^│w[013] '; }
tm_check "agents filter: only w2 shown" only_w2
tm_keys / Escape s
tm_check "agents sort key changes" tm_wait 5 'sorted by stage'
# 80x24: the header keeps step, loss and throughput of the live run
tm_resize 80 24
tm_check "80x24: header keeps step, loss and throughput" \
    tm_wait 10 '^pipetop .*(step [0-9]+ loss [0-9.]+|s[0-9]+ L [0-9.]+) [0-9]+/s'
tm_resize 100 30
# Z freezes the display while training goes on: the record grows past the
# step on screen, the screen keeps it; Z again shows the newer steps
poll_until() { # SECONDS FUNCTION: polls until FUNCTION succeeds
    local i
    for ((i = 0; i < $1 * 5; i++)); do
        "$2" && return 0
        sleep 0.2
    done
    return 1
}
header_step() { tm_cap | head -n1 | grep -oE 'step [0-9]+' | grep -oE '[0-9]+'; }
# the demo's record is compressed (docs/formats.md, "Compression"); gzip -dcf reads what was
# flushed of a stream still being written (and a plain file as it is)
record_step() { gzip -dcf "$RUN/run.ndjson" 2>/dev/null | grep '"type":"metrics"' | grep -oE '"step":[0-9]+' | grep -oE '[0-9]+' | sort -n | tail -n1; }
tm_keys Z
tm_check "Z: the header says PAUSED" tm_wait 5 '^pipetop .*PAUSED'
frozen=$(header_step)
past() { [ "$(record_step)" -ge $((frozen + 5)) ] 2>/dev/null; }
tm_check "training goes on while paused (record past step $frozen + 5)" poll_until 60 past
tm_check "the paused screen still shows step $frozen" test "$(header_step)" = "$frozen"
tm_keys Z
newer() { [ "$(header_step)" -ge $((frozen + 5)) ] 2>/dev/null; }
tm_check "Z again: the newer steps show" poll_until 10 newer
# an edit in the plan view, then apply & restart
tm_keys 1 '}' '}'
tm_check "edit accepted" tm_wait 10 'boundary moved'
tm_keys A
tm_check "apply queued" tm_wait 10 'apply & restart: queued'
tm_check "restarted as generation 2" tm_wait 120 'generation 2 resumes at step [0-9]+'
# the screen that showed it: the message passes once generation 2 trains
resume=$(grep -oE 'generation 2 resumes at step [0-9]+' <<<"$TM_MATCH" | grep -oE '[0-9]+$')
tm_check "the new generation trains" tm_wait 60 'live gen 2, 4 agents'
# the queued message went when the state changed (the restart's note replaced it)
tm_check "the 'queued' message is gone once generation 2 trains" \
    tm_wait_gone 3 'queued: the run stops'
tm_keys 2
gen2_recorded() { [ "$(record_step)" -ge $((resume + 2)) ] 2>/dev/null; }
tm_check "generation 2's steps reach the record" poll_until 60 gen2_recorded
tm_check "q exits with 0" tm_quit_ok

# the record: generation 1 ends at step resume-1, generation 2 starts at resume
tm_check "run record written" test -s "$RUN/run.ndjson"
rec="$TM_DIR/run.txt" # the record's text (the demo writes it compressed)
gzip -dcf "$RUN/run.ndjson" >"$rec"
tm_check "the compressed record ends whole" bash -c "gzip -t '$RUN/run.ndjson'"
last1=$(grep '"type":"metrics"' "$rec" | grep '"gen":1,' | grep -oE '"step":[0-9]+' |
    grep -oE '[0-9]+' | sort -n | tail -n1)
first2=$(grep '"type":"metrics"' "$rec" | grep '"gen":2,' | grep -oE '"step":[0-9]+' |
    grep -oE '[0-9]+' | sort -n | head -n1)
plan2=$(grep '"kind":"plan","gen":2' "$rec" | grep -oE '"resume_step":[0-9]+' | grep -oE '[0-9]+$')
tm_check "resume step shown ($resume) is the assign's ($plan2)" test -n "$resume" -a "$resume" = "$plan2"
tm_check "generation 1 stopped after step $((resume - 1)) (last metrics $last1)" \
    test -n "$last1" -a "$last1" -eq $((resume - 1))
tm_check "generation 2 starts at step $resume (first metrics $first2)" \
    test -n "$first2" -a "$first2" -eq "$resume"
tm_check "the checkpoint it resumed from exists" test -f "$RUN/ckpt/step-$resume/index.json"

# no agent outlives the console: every pid the record names is gone
pids=$(grep -oE '"pid":[0-9]+' "$rec" | grep -oE '[0-9]+' | sort -u)
tm_check "the record names the agents' pids" test -n "$pids"
for p in $pids; do
    tm_check "agent pid $p has exited" bash -c "! kill -0 $p 2>/dev/null"
done
tm_summary

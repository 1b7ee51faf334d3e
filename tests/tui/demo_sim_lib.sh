# The live GPT-3 demo on simulated agents (issue 27), driven in tmux at
# 120x40 and 80x24: `pipetop demo --simulate --model gpt3` on a cluster
# topology, an analytic profile (DEMO_DEVICE in DEMO_PRECISION; default an
# H100 in fp8), agent K a straggler
# STRAGGLER_PCT % slower from step STRAGGLER_STEP on. Sourced by
# demo_sim_test.sh (a 32x8 cluster, 252 agents) and demo_sim_scale_test.sh
# (cluster-128x8, 1,008 workers), which then set DEMO_TOPOLOGY (a name in
# topologies/ or a file) and DEMO_WHAT (a label for the messages) and call
# demo_size COLS ROWS for each size. Each starts a fresh demo and checks:
# - every agent of the plan registers and the run starts (generation 1);
# - the timeline shows one row per stage (no replica rows), the stages page,
#   and the selected stage's replicas are named below;
# - no straggler is listed before the straggler's step is measured; after
#   it (8 iterations shown), exactly one is listed, and it is the stage and replica the plan puts
#   on device K, its stage row marked "!";
# - Enter drills into that stage's replicas, where its row is marked; Esc
#   comes back to the stage rows;
# - the agents view holds every agent (one per device up to the plan's
#   last); "!" keeps the straggler only, the agent of device K;
# - q stops the agents and exits with 0.
# Waits are on screen text with bounds; nothing is timed.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
# the analytic profile the agents' ops last by (the planner's plan depends
# on it: gpt3 on cluster-128x8 is 63 x 16 on an A100 in bf16, 94 x 8 on an
# H100 in fp8)
DEMO_DEVICE=${DEMO_DEVICE:-h100-80gb}
DEMO_PRECISION=${DEMO_PRECISION:-fp8}
STRAGGLER_K=${STRAGGLER_K:-5}
STRAGGLER_PCT=50
STRAGGLER_STEP=1
# registering and assigning hundreds of agents on a loaded 2-core machine
REGISTER_WAIT_S=${DEMO_REGISTER_WAIT_S:-240}
STEP_WAIT_S=120

# wait_until SECONDS WHAT COMMAND...: polls COMMAND until it succeeds; 1
# after SECONDS, naming WHAT was waited for
wait_until() {
    local secs=$1 what=$2 i
    shift 2
    for ((i = 0; i < secs * 5; i++)); do
        "$@" 2>/dev/null && return 0
        sleep 0.2
    done
    echo "waited ${secs} s for $what" >&2
    "$@"
}
# what the run folder says when the run did not start: its status, the
# agents' log and the first agents the console took for dead (the record is
# gzip'd: the demo sets PT_RECORD_COMPRESS)
run_diag() {
    echo "--- pipetop status $RUN:" >&2
    "$PIPETOP" status "$RUN" 2>&1 | grep -v '^agent ' | head -n 20 >&2
    echo "--- the agents' log:" >&2
    tail -n 20 "$RUN"/agent-*.log >&2 2>/dev/null
    echo "--- agents the console took for dead (of $(gzip -dcf "$RUN/run.ndjson" |
        grep -ac '"kind":"dead"')):" >&2
    gzip -dcf "$RUN/run.ndjson" | grep -a '"kind":"dead"' | head -n 3 >&2
    return 1
}

replica_rows() {
    tm_cap | grep -cE '^│s[0-9]+r[0-9]+'
}
# the stage labels of the timeline's rows, in screen order
stage_labels() {
    tm_cap | grep -oE '^│s[0-9]+( !)? ' | sed 's/^│//; s/ !//; s/ *$//' | tr '\n' ' '
}
# 0 when the stage rows shown are s0, s1, ... in order, each once, at least 3
stages_in_order() {
    local want=0 got n=0
    for got in $(stage_labels); do
        [ "$got" = "s$want" ] || { echo "stage rows: $(stage_labels)" >&2; return 1; }
        want=$((want + 1))
        n=$((n + 1))
    done
    [ "$n" -ge 3 ] || { echo "only $n stage rows: $(stage_labels)" >&2; return 1; }
}
# "S R": the stage and replica the plan puts on device $1
plan_device() {
    python3 - "$RUN/plan.json" "$1" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
dev = int(sys.argv[2])
for s, st in enumerate(plan["stages"]):
    if dev in st["replicas"]:
        print(s, st["replicas"].index(dev))
        break
EOF
}
# the agents the plan needs: one per device up to its last
plan_agents() {
    python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))
print(1 + max(d for st in p["stages"] for d in st["replicas"]))' "$RUN/plan.json"
}
agent_rows() {
    tm_cap | grep -cE '^│!?sim-'
}
# the newest step in the header ("step N", on a narrow screen "sN")
header_step() {
    tm_cap | head -n1 | grep -oE '(step |\| s)[0-9]+' | head -n1 | grep -oE '[0-9]+$'
}

# prints the CPU seconds the console and its agents' process have used so
# far (a figure for the log, not a check)
cpu_s() {
    awk -v tck="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.1f", ($12 + $13) / tck}' \
        "/proc/$1/stat" 2>/dev/null
}
demo_cpu() {
    local pane console agent
    pane=$(tmux -L "$TM_SOCK" display-message -p -t t '#{pane_pid}')
    console=$(ps -o pid= --ppid "$pane" | head -n1 | tr -d ' ')
    [ -n "$console" ] || return 0
    agent=$(ps -o pid= --ppid "$console" | head -n1 | tr -d ' ')
    echo "$1: CPU so far: console $(cpu_s "$console") s, agents' process $(cpu_s "$agent") s"
}

demo_size() {
    local cols=$1 rows=$2 g="$DEMO_WHAT ${1}x$2" n sr s r stage_replicas
    RUN="$TM_DIR/run-${cols}x$rows"
    tm_start "$cols" "$rows" "$PIPETOP demo --simulate --model gpt3 --topology '$DEMO_TOPOLOGY' \
--device $DEMO_DEVICE --precision $DEMO_PRECISION --straggler $STRAGGLER_K:$STRAGGLER_PCT:$STRAGGLER_STEP \
--run-dir '$RUN' --no-mouse"
    tm_check "$g: the plan's timeline appears" tm_wait 120 'predicted timeline' || return
    tm_check "$g: layout" tm_layout_ok "$cols" "$rows"
    # the header: "live gen 1, N agents", on a narrow screen "g1"; a run
    # that did not start says "failed gen 1"
    tm_wait "$REGISTER_WAIT_S" '(\| (live|failed) gen 1, [0-9]+ agents| sim g1 \|)'
    tm_check "$g: every agent registers, the run starts" \
        grep -qE '(\| live gen 1, [0-9]+ agents| sim g1 \|)' <<<"$TM_MATCH" || run_diag || return
    # and says the agents are simulated, wide or narrow
    tm_check "$g: the header says simulated" \
        grep -qE '^pipetop .*(simulated \| .*live gen 1| sim g1 \|)' <<<"$TM_MATCH"
    n=$(plan_agents)
    tm_check "$g: the first step measured" tm_wait "$STEP_WAIT_S" 'measured timeline' || run_diag || return
    # a screen of step 0's ops: the straggler is slow from step 1 only
    local step
    step=$(header_step)
    if [ -n "$step" ] && [ "$step" -lt "$STRAGGLER_STEP" ]; then
        tm_check "$g: no straggler before step $STRAGGLER_STEP (step $step shown)" \
            tm_wait 1 'stragglers: none'
    fi
    # (the first measured screens hold the stages heard from so far)
    tm_check "$g: one row per stage, in order" wait_until 30 "every stage's row" stages_in_order
    # 8 iterations shown, not 2: I works (and a straggler used to fall behind
    # its stage every step, before the others waited for it, and drop out of
    # a window of 2 iterations some 35 s after it was first marked)
    for ((i = 0; i < 6; i++)); do tm_keys I; done
    tm_check "$g: I: 8 iterations shown" tm_wait 10 'measured timeline: last 8 iterations'
    tm_check "$g: no replica rows" test "$(replica_rows)" -eq 0
    # (63 stages leave no room for band lines; a wide screen names the
    # selected stage's replicas below)
    [ "$cols" -lt 100 ] ||
        tm_check "$g: the selected stage's replicas" tm_wait 5 's0: [0-9]+ replicas, Enter shows them'
    tm_check "$g: the stages page" tm_wait 5 'v [0-9]+ more'
    tm_check "$g: the straggler listed after its step" \
        tm_wait "$STEP_WAIT_S" 'stragglers: stage [0-9]+ replica [0-9]+ \+[0-9]+ %' || return
    sr=$(grep -oE 'stragglers: stage [0-9]+ replica [0-9]+' <<<"$TM_MATCH" | head -n1)
    s=$(awk '{print $3}' <<<"$sr")
    r=$(awk '{print $5}' <<<"$sr")
    tm_check "$g: the straggler is device $STRAGGLER_K's (stage $s replica $r)" \
        test "$(plan_device "$STRAGGLER_K")" = "$s $r"
    tm_check "$g: only one straggler" test "$(grep -oE 'replica [0-9]+ \+[0-9]+ %' <<<"$TM_MATCH" | wc -l)" -eq 1
    # select stage s (the selection pages the stages with it)
    for ((i = 0; i < s; i++)); do tm_keys Down; done
    tm_check "$g: the straggler's stage row marked" tm_wait 10 "^│s$s ! "
    tm_keys Enter
    stage_replicas=$(python3 -c 'import json, sys
print(len(json.load(open(sys.argv[1]))["stages"][int(sys.argv[2])]["replicas"]))' "$RUN/plan.json" "$s")
    tm_check "$g: Enter shows stage $s's $stage_replicas replicas" \
        tm_wait 10 "stage $s's $stage_replicas replicas"
    tm_check "$g: drilled: no stage rows" tm_wait_gone 5 '^│s[0-9]+ '
    for ((i = 0; i < r; i++)); do tm_keys Down; done
    tm_check "$g: the straggler's replica row marked" tm_wait 10 "^│s${s}r$r! "
    tm_keys Escape
    tm_check "$g: Esc: the stage rows again" tm_wait 10 "^│s$s "

    tm_keys 4
    tm_check "$g: the agents view holds all $n agents" tm_wait 10 "agents: $n, sorted by agent"
    tm_check "$g: agents view layout" tm_layout_ok "$cols" "$rows"
    tm_keys '!'
    tm_check "$g: stragglers only" tm_wait 10 'stragglers only \(1\)'
    # its device ("simulated:K") on a wide screen, on a narrow one its stage
    # (cut to the column: "s30~")
    if [ "$cols" -ge 100 ]; then
        tm_check "$g: one row, the agent of device $STRAGGLER_K" \
            tm_wait 5 "^│!sim-.* simulated:$STRAGGLER_K "
    else
        tm_check "$g: one row, the agent of stage $s" tm_wait 5 "^│!sim-.* s$s(r$r |~)"
    fi
    tm_check "$g: and no other" test "$(agent_rows)" -eq 1
    demo_cpu "$g"
    tm_check "$g: q stops the agents and exits with 0" tm_quit_ok
}

#!/bin/bash
# The console at cluster scale (issue 27), driven in tmux at 120x40 and 80x24
# on a recorded run of 1,024 agents (4 stages x 256 replicas, written by
# bench/console_scale, stage 3 replica 17's ops 35 % longer) and on the
# simulator's GPT-3 plan on cluster-128x8 (63 stages x 16 replicas), both
# sizes too:
# - the timeline shows one row per stage (no replica rows), each with its
#   band line; Enter drills into a stage's replicas, Esc comes back; stages
#   beyond the screen page with the selection;
# - the injected straggler is marked on its stage row and in its replica row
#   ("!") and listed ("stragglers: stage 3 replica 17 +3x %");
# - the agents view holds all 1,024 rows: PgDn reaches the last, the compute
#   sort puts the straggler first, "!" keeps the stragglers only, a text
#   filter leaves exactly the agents that match.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
WRITER="$PT_BUILD_DIR/console_scale"
[ -x "$WRITER" ] || { echo "FAIL: $WRITER not built (bench/console_scale.c)" >&2; exit 1; }
RUN="$TM_DIR/run1024"
mkdir -p "$RUN"
(cd "$PT_SOURCE_DIR" && "$WRITER" --write "$RUN" --replicas 256 --steps 4 --straggler 3:17:35) >/dev/null ||
    { echo "FAIL: console_scale --write" >&2; exit 1; }

# stage_rows: the distinct stage labels of the timeline ("s0".."s3"), sorted
stage_rows() {
    tm_cap | grep -oE '^│s[0-9]+( !)? ' | sed 's/^│//; s/ !//; s/ *$//' | sort -u | tr '\n' ' '
}
replica_rows() {
    tm_cap | grep -cE '^│s[0-9]+r[0-9]+'
}
one_straggler() {
    ! tm_cap | grep -qE 'replica 17 \+3[0-9] %, stage'
}
# the first row of the agents table: the straggler, "!" on its id (cut to
# the column on a narrow screen) and on its compute figure
first_is_straggler() {
    tm_cap | sed -n 4p | grep -qE '^│!s3r0(17|~) .*!2[0-9.]+ \+3[0-9]%'
}
last_row_is_last() {
    tm_cap | grep -E '^│!?s[0-9]r' | tail -n1 | grep -q '^│s3r255 '
}
# agent_rows: rows of the agents table (below its heading)
agent_rows() {
    tm_cap | grep -cE '^│!?s[0-9]r[0-9~]'
}

for size in "120 40" "80 24"; do
    set -- $size
    cols=$1 rows=$2
    tm_start "$cols" "$rows" "$PIPETOP replay '$RUN' --end"
    tm_check "${cols}x$rows: timeline appears" tm_wait 30 'measured timeline'
    tm_check "${cols}x$rows: layout" tm_layout_ok "$cols" "$rows"
    tm_check "${cols}x$rows: band lines of 256 replicas" tm_wait 5 '^│ x256 +band [0-9.]+ \| [0-9.]+ \| [0-9.]+'
    tm_check "${cols}x$rows: one row per stage" test "$(stage_rows)" = "s0 s1 s2 s3 "
    tm_check "${cols}x$rows: no replica rows" test "$(replica_rows)" -eq 0
    tm_check "${cols}x$rows: the straggler's stage marked" tm_wait 2 '^│s3 ! '
    tm_check "${cols}x$rows: the straggler listed" tm_wait 2 'stragglers: stage 3 replica 17 \+3[0-9] %'
    tm_check "${cols}x$rows: only one straggler" one_straggler
    # drill into stage 3 (the fourth row) and down to replica 17
    tm_keys Down Down Down Enter
    tm_check "${cols}x$rows: Enter shows stage 3's replicas" tm_wait 5 '^│s3r0 '
    tm_check "${cols}x$rows: drilled: no stage rows" test -z "$(stage_rows)"
    for ((i = 0; i < 17; i++)); do tm_keys Down; done
    tm_check "${cols}x$rows: the straggler's row marked" tm_wait 5 '^│s3r17! '
    tm_keys Escape
    tm_check "${cols}x$rows: Esc: the stage rows again" tm_wait 5 '^│s0 '
    tm_check "${cols}x$rows: the stage rows, all of them" test "$(stage_rows)" = "s0 s1 s2 s3 "

    tm_keys 4
    tm_check "${cols}x$rows: agents view holds 1024" tm_wait 5 'agents: 1024, sorted by agent'
    # PgDn to the end (Home and End reach tmux's pane as its own terminal's
    # sequences, not always xterm's)
    for ((i = 0; i < 60; i++)); do tm_keys NPage; done
    tm_check "${cols}x$rows: PgDn reaches the last agent" tm_wait 5 '^│s3r255 '
    tm_check "${cols}x$rows: and nothing past it" last_row_is_last
    for ((i = 0; i < 60; i++)); do tm_keys PPage; done
    tm_check "${cols}x$rows: PgUp back to the first" tm_wait 5 '^│s0r000 '
    tm_keys s s s
    tm_check "${cols}x$rows: sorted by compute" tm_wait 5 'sorted by compute'
    tm_check "${cols}x$rows: the straggler first, marked" first_is_straggler
    tm_keys '!'
    tm_check "${cols}x$rows: stragglers only" tm_wait 5 'stragglers only \(1\)'
    tm_check "${cols}x$rows: one row, the straggler" test "$(agent_rows)" -eq 1
    tm_keys '!' / s 2 r 1 0 Enter
    tm_check "${cols}x$rows: text filter" tm_wait 5 'filter "s2r10"'
    # s2r010 and s2r100..s2r109
    tm_check "${cols}x$rows: the filter leaves 11 agents" test "$(agent_rows)" -eq 11
    tm_check "${cols}x$rows: q exits with 0" tm_quit_ok
done

# the simulator's GPT-3 plan on cluster-128x8: 63 stages of 16 replicas, paged
for size in "120 40" "80 24"; do
    set -- $size
    g="gpt3 ${1}x$2"
    tm_start "$1" "$2" "$PIPETOP console --model gpt3 --topology cluster-128x8 --view timeline"
    tm_check "$g: predicted timeline" tm_wait 60 'predicted timeline'
    tm_check "$g: layout" tm_layout_ok "$1" "$2"
    tm_check "$g: one row per stage" tm_wait 5 '^│s0 '
    tm_check "$g: no replica rows" test "$(replica_rows)" -eq 0
    tm_check "$g: the stages page" tm_wait 5 'v [0-9]+ more'
    for ((i = 0; i < 7; i++)); do tm_keys NPage; done
    tm_check "$g: PgDn brings the last stage" tm_wait 5 '^│s62 '
    tm_check "$g: the stragglers line (none in a prediction)" tm_wait 2 'stragglers: none'
    tm_keys Enter
    tm_check "$g: Enter shows the 16 replicas of a stage" tm_wait 5 "stage 62's 16 replicas"
    tm_check "$g: its replica rows" tm_wait 5 '^│s62r[0-9]+ '
    tm_check "$g: q exits with 0" tm_quit_ok
done

tm_summary

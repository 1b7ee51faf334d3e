#!/bin/bash
# One set of numbers on every screen of a live demo (tui/record/figures.h),
# driven in tmux at 120x40:
# - paused (Z) at one moment, the header, plan view, timeline footer and
#   stats view show the same measured and predicted iteration time, with the
#   same statistic and label; and two captures 3 s apart are identical (every
#   figure frozen, while training goes on);
# - an edited plan that is not applied changes only the "edited" figures: the
#   running plan's prediction in the plan view, the timeline footer, the
#   stats view and the predicted timeline stay as they were;
# - S visits every schedule kind once (applied, or skipped with the reason)
#   and comes back to the first, and no stage boundary moves on the way;
# - apply & restart leaves the keys live: views switch at once while the run
#   stops, checkpoints and resumes, and the new generation trains.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$TM_DIR/run"
DATA=fashion-mnist
[ -d /usr/share/datasets/fashion-mnist ] || DATA=synthetic
KINDS=$("$PIPETOP" sim --help | sed -n '/schedule kinds/,/^$/p' | grep -cE '^  [a-z0-9-]+ ')

poll_until() { # SECONDS COMMAND...: polls until COMMAND succeeds
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 5; i++)); do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}
num() { grep -oE "$1" | head -n1 | grep -oE '[0-9]+\.[0-9]+' | head -n1; }
# the figures of one screen: "MEASURED PREDICTED STEPS LABEL", from the
# header and the view shown
header_fig() {
    tm_cap | head -n1 | grep -oE 'iter [0-9.]+ ms meas, [0-9.]+ pred|[0-9]+\.[0-9]+/[0-9]+\.[0-9]+ ?ms' |
        grep -oE '[0-9]+\.[0-9]+' | paste -sd' '
}
# same_num A B: one value printed at two precisions (equal at the shorter)
same_num() {
    local da=${1#*.} db=${2#*.} d
    d=${#da}
    [ ${#db} -lt "$d" ] && d=${#db}
    [ "$(LC_ALL=C printf '%.*f' "$d" "$1")" = "$(LC_ALL=C printf '%.*f' "$d" "$2")" ]
}
same_pair() { # "A B" "C D"
    local x y
    read -r -a x <<<"$1"
    read -r -a y <<<"$2"
    [ "${#x[@]}" -eq 2 ] && [ "${#y[@]}" -ge 2 ] && same_num "${x[0]}" "${y[0]}" && same_num "${x[1]}" "${y[1]}"
}
plan_fig() {
    local s
    s=$(tm_cap)
    echo "$(num 'measured +[0-9.]+ ms' <<<"$s") $(num 'predicted +[0-9.]+ ms' <<<"$s")" \
        "$(grep -oE 'measured +[0-9.]+ ms[^(]*\((med |median of last )[0-9]+' <<<"$s" | grep -oE '[0-9]+$')" \
        "$(grep -oE 'predicted +[0-9.]+ ms[^(]*\([a-z]+( g[0-9]+)?' <<<"$s" | sed 's/.*(//')"
}
footer_fig() {
    local s
    s=$(tm_cap | tail -n 3)
    echo "$(num 'meas(ured)? [0-9.]+' <<<"$s") $(num 'pred(icted)? [0-9.]+' <<<"$s")" \
        "$(grep -oE '(med |median of last )[0-9]+' <<<"$s" | grep -oE '[0-9]+$')" \
        "$(grep -oE 'pred(icted)? [0-9.]+ ms[^(]*\([a-z]+( g[0-9]+)?' <<<"$s" | sed 's/.*(//')"
}
stats_fig() {
    local s
    s=$(tm_cap)
    echo "$(num 'iter(ation)? [0-9.]+' <<<"$s") $(grep -oE ', [0-9.]+ pred' <<<"$s" | num '[0-9.]+')"
}

tm_start 120 40 "$PIPETOP demo --data $DATA --run-dir '$RUN'"
tm_check "agents register and train" tm_wait 180 'live gen 1, 4 agents \| step [0-9]+'
tm_keys 1
# calibrated on generation 1 (after its first steps) and measured over a full window
tm_check "the running plan is predicted from the calibration" \
    tm_wait 300 'predicted +[0-9.]+ ms.*\(calibrated g1'
tm_check "measured over the newest 20 steps" tm_wait 300 'measured +[0-9.]+ ms.*\(med 20'

# ---- one moment: paused, every view shows the same figures
tm_keys Z
tm_check "Z: PAUSED" tm_wait 5 '^pipetop .*PAUSED'
tm_settle 3
h=$(header_fig)
p=$(plan_fig)
tm_keys 2
tm_wait 5 'measured timeline' && tm_settle 3
f=$(footer_fig)
tm_keys 3
tm_wait 5 'busy/bubble' && tm_settle 3
st=$(stats_fig)
echo "paused: header '$h' plan '$p' footer '$f' stats '$st'"
read -r pm pp psteps plabel <<<"$p"
tm_check "plan view has both figures, 20 steps, calibrated g1 ($p)" \
    test -n "$pp" -a "$psteps" = 20 -a "$plabel" = "calibrated g1"
tm_check "header shows the plan view's figures ($h vs $pm $pp)" same_pair "$h" "$pm $pp"
tm_check "timeline footer shows the plan view's figures ($f vs $p)" test "$f" = "$p"
tm_check "stats view shows the plan view's figures ($st vs $pm $pp)" same_pair "$st" "$pm $pp"
a=$(tm_cap)
sleep 3
b=$(tm_cap)
tm_check "paused: two captures 3 s apart are identical" test "$a" = "$b"
tm_keys Z
tm_check "Z again: resumed" tm_wait_gone 5 'PAUSED'

# ---- an edit, not applied: only the edited figures move
tm_keys 2 p
tm_wait 5 'predicted timeline' && tm_settle 3
pred_chart0=$(tm_cap | sed -n '3,30p')
tm_keys p p 3
tm_wait 5 'busy/bubble' && tm_settle 3
busy0=$(tm_cap | grep -oE 's[0-9]r[0-9] .* pred +[0-9]+%' | grep -oE 'pred +[0-9]+%' | paste -sd' ')
mem0=$(tm_cap | grep -oE 'pred [0-9.]+[KMG]' | paste -sd' ')
tm_keys 1
tm_wait 5 'running plan' && tm_settle 3
pred0=$(plan_fig | cut -d' ' -f2)
tm_check "no edited line before an edit" bash -c "! grep -q 'edited:' <<<\"\$(tmux -L $TM_SOCK capture-pane -p -t t)\""
tm_keys '}'
tm_check "the edit shows as edited:" tm_wait 10 'edited: +[0-9.]+ ms'
tm_check "the stages panel names the edited plan" tm_wait 5 '─ edited: '
pred1=$(plan_fig | cut -d' ' -f2)
tm_check "the running plan's prediction stays ($pred0, then $pred1)" test "$pred0" = "$pred1"
tm_keys 2
tm_wait 5 'measured timeline' && tm_settle 3
tm_check "the timeline footer's prediction stays" test "$(footer_fig | cut -d' ' -f2)" = "$pred0"
tm_keys p
tm_wait 5 'predicted timeline' && tm_settle 3
tm_check "the predicted timeline is the running plan's still" test "$(tm_cap | sed -n '3,30p')" = "$pred_chart0"
tm_keys p p 3
tm_wait 5 'busy/bubble' && tm_settle 3
busy1=$(tm_cap | grep -oE 's[0-9]r[0-9] .* pred +[0-9]+%' | grep -oE 'pred +[0-9]+%' | paste -sd' ')
mem1=$(tm_cap | grep -oE 'pred [0-9.]+[KMG]' | paste -sd' ')
tm_check "stats: predicted busy stays ($busy0 / $busy1)" test -n "$busy0" -a "$busy0" = "$busy1"
tm_check "stats: predicted memory stays ($mem0 / $mem1)" test -n "$mem0" -a "$mem0" = "$mem1"
# the plan view first: on the stats view there is no edited line to wait
# for, nor stage boundaries to take as the ones S must keep
tm_keys 1
tm_check "back to the plan view" tm_wait 5 'running plan'
tm_keys u
# every "edited:" gone, as before the edit: the plan view's own line does not
# read "edited: N ms" (only the status bar's did, and it may have moved on),
# so waiting on that form alone took the edited boundaries for the plan's
tm_check "undone: no edited line" tm_wait_gone 10 'edited:'

# ---- S: every kind once, boundaries kept, back to the first
bounds() { tm_cap | grep -oE '== stage [0-9]+ +layers [0-9]+-[0-9]+' | paste -sd' '; }
kind() { tm_cap | grep -oE 'schedule +[a-z0-9-]+' | head -n1 | awk '{print $2}'; }
b0=$(bounds)
k0=$(kind)
tm_check "the plan view shows its stage boundaries ($b0)" test -n "$b0"
visited=""
seen=""
for ((i = 1; i <= KINDS; i++)); do
    tm_keys S
    # each press names another kind: wait for the line to change (5 s)
    prev=$seen
    for ((t = 0; t < 25; t++)); do
        cap=$(tm_cap)
        seen=$(grep -oE '(schedule|S:) [a-z0-9-]+ \([0-9]+ of [0-9]+ kinds' <<<"$cap" | tail -n1)
        [ -n "$seen" ] && [ "$seen" != "$prev" ] && break
        sleep 0.2
    done
    visited="$visited $(awk '{print $2}' <<<"$seen")"
    tm_check "S press $i ($seen): no boundary moved" \
        test "$(grep -oE '== stage [0-9]+ +layers [0-9]+-[0-9]+' <<<"$cap" | paste -sd' ')" = "$b0"
done
distinct=$(tr ' ' '\n' <<<"$visited" | grep -c . )
unique=$(tr ' ' '\n' <<<"$visited" | grep . | sort -u | wc -l)
tm_check "S visited $KINDS kinds, each once ($visited)" test "$distinct" -eq "$KINDS" -a "$unique" -eq "$KINDS"
tm_check "S came back to $k0" test "$(kind)" = "$k0"
tm_check "the last kind visited is the first ($visited)" test "$(awk '{print $NF}' <<<"$visited")" = "$k0"
tm_check "interleaved was skipped with its reason" \
    grep -qE 'interleaved' <<<"$visited"

# ---- apply & restart: the keys stay live while the run restarts
tm_keys '}'
tm_check "edit for the restart" tm_wait 10 'edited: +[0-9.]+ ms'
tm_keys A
t0=$(date +%s%N)
tm_keys 3
tm_check "a view switch answers at once during the restart" tm_wait 3 'busy/bubble'
tm_keys 1
tm_check "and back" tm_wait 3 'running plan'
echo "view switches during the restart took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
tm_check "restarted as generation 2" tm_wait 180 'generation 2 resumes at step [0-9]+'
tm_check "generation 2 trains" tm_wait 120 'live gen 2, 4 agents'
tm_check "the edit is the running plan now: no edited line" tm_wait_gone 10 'edited: +[0-9.]+ ms'
tm_check "q exits with 0" tm_quit_ok
silent=$(grep -l 'was silent' "$RUN"/agent-*.log 2>/dev/null | wc -l)
tm_check "no agent found the console silent ($silent logs say so)" test "$silent" -eq 0
tm_summary

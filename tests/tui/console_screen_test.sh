#!/bin/bash
# What a user must see on the console's screen at 80x24, 120x40 and 200x60,
# driven in tmux on the recorded run tests/data/run-dapple4 and on the
# simulator alone:
# - the header keeps step, loss and throughput at 80x24 (labels shorten,
#   figures stay); the plan view and the timeline footer keep their figures;
#   the axis' last tick is never overwritten by the unit;
# - timeline rows grow with the room; p compares measured and predicted side
#   by side on a wide screen, both on one axis from 0, every stage shown;
# - memory bars are to scale and say so; messages expire;
# - the global batch stays fixed under b B m M (the other factor follows),
#   changes under g G, and options the schedule does not read are refused;
# - a theme that sets both background and foreground paints them, the
#   others leave the terminal's own background;
# - F1 opens the help (every view's keys, stats too, no empty heading), a
#   pause key freezes the display and says so in the header, unknown keys
#   get an answer, F10 quits.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$PT_SOURCE_DIR/tests/data/run-dapple4"

# the header's figures as the replay's last step has them (step 4 of the record)
header_figures() {
    tm_cap | head -n1 | grep -qE '(step 4 loss [0-9]+\.[0-9]+|s4 L [0-9]+\.[0-9]+) [0-9]+/s'
}
# no axis label runs into the unit: "|12ms" or a cut "|1" before "ms"
axis_clean() {
    local axis
    axis=$(tm_cap | grep -E '\|0\.0' | head -n1)
    [ -n "$axis" ] || { echo "no axis" >&2; return 1; }
    printf '%s\n' "$axis" | grep -qE '[|0-9.]ms' && { echo "unit overwrote a tick: $axis" >&2; return 1; }
    return 0
}
# lines from a row's label to the next row's: the row's height on screen
row_height() { # STAGE
    tm_cap | awk -v a="s$1r0" -v b="s$(($1 + 1))r0" '
        index($0, "│" a " ") == 1 { on = 1 } index($0, "│" b " ") == 1 { print n; exit } on { n++ }'
}

# ---- 80x24 on the replayed run
tm_start 80 24 "$PIPETOP replay '$RUN' --end"
tm_check "80x24: the header keeps step, loss and throughput" tm_wait 15 '^pipetop .*(step 4|s4) '
tm_check "80x24: header figures" header_figures
tm_check "80x24: layout" tm_layout_ok 80 24
tm_keys 2
tm_check "80x24: timeline footer keeps both times" \
    tm_wait 5 'meas [0-9]+\.[0-9]+.* pred [0-9]+\.[0-9]+'
tm_check "80x24: axis ticks not overwritten by the unit" axis_clean
h80=$(row_height 0)
tm_keys 1
plan_figures() { # the running plan's prediction and measurement, bubble and memory fit
    tm_wait 5 'predicted +[0-9.]+ ms' && tm_wait 5 'measured +[0-9.]+ ms' &&
        tm_wait 5 'bubble +[0-9.]+ %' && tm_wait 5 'memory +fits'
}
tm_check "80x24: plan view keeps predicted and measured" plan_figures
tm_check "80x24: the global batch is shown" tm_wait 5 'batch +32 (samples|=) '
tm_check "q exits" tm_quit_ok

# ---- 120x40: rows grow, p side by side on one axis, all stages
tm_start 120 40 "$PIPETOP replay '$RUN' --end"
tm_check "120x40: header" tm_wait 15 '^pipetop 1 plan 2 timeline.*step 4 loss'
tm_keys 2
tm_check "120x40: timeline" tm_wait 5 '^│s3r0 '
h120=$(row_height 0)
tm_check "rows grow with the room ($h80 lines at 80x24, $h120 at 120x40)" \
    test -n "$h80" -a -n "$h120" -a "${h120:-0}" -gt "${h80:-0}"
tm_check "120x40: layout" tm_layout_ok 120 40
tm_keys p p
tm_check "p p: both charts" tm_wait 5 'timeline: measured and predicted'
both_side_by_side() {
    local line
    line=$(tm_cap | sed -n 2p)
    case "$line" in *"measured timeline"*"predicted timeline"*) ;; *)
        echo "not side by side: $line" >&2; return 1 ;; esac
    # one axis: the two charts' axis lines are the same text
    line=$(tm_cap | sed -n 3p | sed 's/^│//; s/│$//')
    local left=${line%%││*} right=${line#*││}
    [ "$left" = "$right" ] || { echo "axes differ: '$left' vs '$right'" >&2; return 1; }
    # every stage on both sides
    local s
    for s in 0 1 2 3; do
        tm_cap | grep -qE "^│s${s}r0 .*││s${s}r0 " || { echo "stage $s not on both sides" >&2; return 1; }
    done
}
tm_check "120x40: side by side, one axis, all 4 stages on both" both_side_by_side
tm_check "120x40: layout with both charts" tm_layout_ok 120 40
tm_resize 80 24
tm_check "80x24: both charts stacked" tm_wait 5 '^┌─ predicted timeline'
tm_check "80x24: layout with both charts" tm_layout_ok 80 24
tm_resize 200 60
tm_check "200x60: layout with both charts" tm_layout_ok 200 60
tm_check "200x60: side by side" tm_wait 5 '^┌─ measured timeline.*┌─ predicted timeline'

# memory bars: to scale against the device limit, saying so
tm_keys 3
tm_check "stats: the memory panel names its scale" tm_wait 5 'memory, bar = device limit'
mem_to_scale() {
    # s0r0 uses well under 1 % of its 4 GiB: no cell of the bar may be filled
    local row
    row=$(tm_cap | grep -oE 's0r0 +[^ ]+ +[0-9.]+[KMG]/[0-9.]+G [0-9.]+%' | head -n1)
    [ -n "$row" ] || { echo "no memory row with a percentage" >&2; return 1; }
    local pct=${row##* } bar
    bar=$(printf '%s' "$row" | awk '{print $2}')
    case "$pct" in 0.*) printf '%s' "$bar" | grep -q '[a-z]' &&
        { echo "bar '$bar' filled for $pct" >&2; return 1; } ;; esac
    return 0
}
tm_check "stats: memory bar to scale" mem_to_scale
tm_check "200x60: layout of the stats view" tm_layout_ok 200 60

# help: F1, every view, no empty heading; unknown keys answered; messages expire
tm_keys F1
tm_check "F1 opens the help" tm_wait 5 '^│everywhere'
tm_check "help lists the stats view" tm_wait 2 '^│stats view \(3\)'
tm_check "help lists the agents filter" tm_wait 2 'filter: type text'
tm_check "replay keys listed" tm_wait 2 '^│replay \(this console'
tm_keys Escape 1 '~'
tm_check "unknown key answered" tm_wait 5 'key ~ does nothing in the plan view'
tm_check "the message expires" tm_wait_gone 15 'key ~ does nothing'
tm_keys F10
tm_check "F10 quits" tm_wait 20 '^EXITED 0'

# ---- the simulator alone: global batch, refused options, pause, themes
tm_start 100 30 "$PIPETOP --view plan"
tm_check "plan view" tm_wait 15 'batch +64 samples = [0-9]+ micro-batch'
# the planner's micro-batching follows the cost model: bring it to 8 x 8 with M / m first
mb_count() {
    tm_cap | grep -oE 'batch +64 samples = [0-9]+ micro' | grep -oE '[0-9]+ micro' | grep -oE '[0-9]+'
}
c=$(mb_count)
while [ -n "$c" ] && [ "$c" -lt 8 ]; do
    tm_keys M
    c=$((c * 2))
    tm_wait 5 "batch +64 samples = $c micro-batches" || break
done
while [ -n "$c" ] && [ "$c" -gt 8 ]; do
    tm_keys m
    c=$((c / 2))
    tm_wait 5 "batch +64 samples = $c micro-batches" || break
done
tm_check "plan view at 8 micro-batches of 8" tm_wait 5 'batch +64 samples = 8 micro-batches x 8'
tm_keys B
tm_check "B keeps the global batch" tm_wait 5 'batch +64 samples = 4 micro-batches x 16'
tm_check "B says so" tm_wait 2 'global batch kept'
tm_keys m
tm_check "m keeps the global batch" tm_wait 5 'batch +64 samples = 2 micro-batches x 32'
tm_keys M M
tm_check "M keeps the global batch" tm_wait 5 'batch +64 samples = 8 micro-batches x 8'
tm_keys g
tm_check "g halves the global batch" tm_wait 5 'batch +32 samples = 4 micro-batches x 8'
tm_keys v
tm_check "v under dapple is refused" tm_wait 5 'refused: vertical sync does not apply to dapple'
tm_keys Z
tm_check "Z pauses: the header says so" tm_wait 5 '^pipetop .*PAUSED'
tm_keys Z
tm_check "Z resumes" tm_wait_gone 5 '^pipetop .*PAUSED'
tm_keys 4
tm_check "agents view without agents" tm_wait 5 'no agents \(simulation\)'
# themes: dark leaves the terminal's background; light paints white under dark text
bg_of_text() { # the agents view has no coloured blocks: any background is the theme's
    tmux -L "$TM_SOCK" capture-pane -e -p -t t | grep -oE '48;5;[0-9]+' | sort -u
}
tm_check "dark: no background of its own" test -z "$(bg_of_text)"
tm_keys t
tm_check "t: light theme" tm_wait 5 'theme light'
light_bg() { bg_of_text | grep -qx '48;5;231'; }
tm_check "light: white background" light_bg
tm_check "q exits" tm_quit_ok
tm_summary

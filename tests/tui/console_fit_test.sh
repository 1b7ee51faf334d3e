#!/bin/bash
# Every view at 80x24, driven in tmux on the recorded run tests/data/run-dapple4
# (and the agents view, whose columns shrink and drop to fit; its filter finds
# a device and a stage as the row shows them), and a zero-bubble timeline at
# its default zoom:
# - no line is wider than 80 columns and every framed line keeps both its
#   borders (a line that starts with a border ends with one);
# - the header keeps every figure (step, loss, throughput, measured and
#   predicted iteration time); the plan view its predicted and measured
#   iteration time, bubble and memory-fit lines; the timeline footer both
#   times and a legend naming every glyph; the stats view the iteration times;
# - the key bar is never cut in the middle (it ends with "? help  q quit")
#   and help lines wrap rather than being cut;
# - a zb-h1 plan of 16 micro-batches at default zoom (80x24 and 120x40) has
#   no two micro-batch numbers touching: every run of digits is one number.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$PT_SOURCE_DIR/tests/data/run-dapple4"

# framed lines keep both borders, and nothing is wider than the screen
borders_ok() { # COLS
    tm_cap | python3 -c '
import sys
cols, bad = int(sys.argv[1]), 0
for n, line in enumerate(sys.stdin.read().split("\n")[:-1], 1):
    if len(line) > cols:
        print("line %d is %d wide" % (n, len(line))); bad += 1
    elif line[:1] in "│┌└" and line[-1:] not in "│┐┘":
        print("line %d lost its right border: %s" % (n, line)); bad += 1
    elif line[-1:] in "│┐┘" and line[:1] not in "│┌└":
        print("line %d lost its left border: %s" % (n, line)); bad += 1
sys.exit(1 if bad else 0)' "$1" >&2
}
header_all() { # step, loss, throughput, measured/predicted iteration time
    tm_cap | head -n1 | grep -qE '(step 4 loss [0-9.]+|s4 L [0-9.]+) [0-9]+/s .*[0-9]+\.[0-9]+/[0-9]+\.[0-9]+ ?ms|iter [0-9.]+ ms meas, [0-9.]+ pred'
}
keybar_whole() { tm_cap | tail -n1 | grep -qE '\? help  q quit *$'; }
view_ok() { # NAME: the checks every view gets at 80x24
    tm_check "80x24 $1: layout" tm_layout_ok 80 24
    tm_check "80x24 $1: borders and widths" borders_ok 80
    tm_check "80x24 $1: every header figure" header_all
}

tm_start 80 24 "$PIPETOP replay '$RUN' --end --view plan"
tm_check "replay shows the plan view" tm_wait 15 'measured +[0-9.]+ ms'
tm_wait_gone 15 'checkpoint of step|committed' # the record's last note goes
view_ok plan
for what in 'predicted +[0-9.]+ ms' 'measured +[0-9.]+ ms' 'bubble +[0-9.]+ %' 'memory +(fits|NO FIT|DOES NOT FIT)'; do
    tm_check "80x24 plan: '$what'" tm_wait 2 "$what"
done
tm_check "80x24 plan: the key bar is whole" keybar_whole
tm_keys 2
tm_check "80x24 timeline" tm_wait 5 'measured timeline'
view_ok timeline
tm_check "80x24 timeline: footer keeps both times" tm_wait 2 'meas [0-9]+\.[0-9]+.* pred [0-9]+\.[0-9]+'
# every glyph a chart paints (tui/export/timeline_ascii.c's fills and the
# sends' '<' '>'; the wait's blank aside) in the legend (timeline_cells_test
# holds docs/console.md's list to the same set)
GLYPHS=$( (grep -oE "\[PT_PAINT_[A-Z_]+\] = '[^ ']'" "$PT_SOURCE_DIR/tui/export/timeline_ascii.c" |
    grep -oE "'.'" | tr -d "'"; printf '<\n>\n') | sort -u | tr -d '\n')
legend_all() { # the legend row names each glyph
    local row g miss=""
    row=$(tm_cap | grep -E ' fwd ' | tail -n1)
    for ((k = 0; k < ${#GLYPHS}; k++)); do
        g=${GLYPHS:k:1}
        grep -qF -- "$g" <<<"$row" || miss="$miss$g"
    done
    [ ${#GLYPHS} -ge 10 ] && [ -z "$miss" ] || { echo "legend misses '$miss' of '$GLYPHS': $row" >&2; return 1; }
}
tm_check "80x24 timeline: the legend names every glyph" legend_all
tm_check "80x24 timeline: the key bar is whole" keybar_whole
tm_keys 3
tm_check "80x24 stats" tm_wait 5 'busy/bubble'
view_ok stats
tm_check "80x24 stats: iteration times" tm_wait 2 'iter(ation)? [0-9.]+ (ms )?meas'
tm_keys 4
tm_check "80x24 agents" tm_wait 5 'agents'
view_ok agents
tm_check "80x24 agents: heartbeat and step kept" tm_wait 2 '^│agent .* (heartbeat|hb|heartb~) .* step '
rows_of() { tm_cap | grep -cE '^│w[0-9]+ '; }
tm_keys / c p u : 1 Enter
tm_check "80x24 agents: the filter finds a device as shown (cpu:1)" tm_wait 5 'filter "cpu:1"'
tm_check "80x24 agents: cpu:1 leaves w1 alone" test "$(rows_of)" = 1 -a -n "$(tm_cap | grep -E '^│w1 ')"
tm_keys / BSpace BSpace BSpace BSpace BSpace s 2 Enter
tm_check "80x24 agents: the filter finds a stage (s2)" tm_wait 5 'filter "s2"'
tm_check "80x24 agents: s2 leaves w2 alone" test "$(rows_of)" = 1 -a -n "$(tm_cap | grep -E '^│w2 ')"
tm_keys / Escape
tm_check "80x24 agents: Esc clears the filter" tm_wait 5 'agents: 4, sorted'
tm_keys F1
tm_check "80x24 help" tm_wait 5 '^│everywhere'
view_ok help
tm_check "80x24 help: more below is marked" tm_wait 2 'v [0-9]+ more \(Down\)'
help_wrapped() { # the theme key's line goes on under itself: "saved in the config" whole
    tm_cap | tr -d '│' | tr '\n' ' ' | tr -s ' ' | grep -q 'saved in the config'
}
tm_check "80x24 help: long lines wrap, none is cut" help_wrapped
tm_check "q exits" tm_quit_ok

# ---- zb-h1, 16 micro-batches: numbers never touch at default zoom
prof="$TM_DIR/prof.json"
plan="$TM_DIR/zb.json"
"$PIPETOP" profile --analytic --model fmnist-mlp-deep --device "$PT_SOURCE_DIR/devices/cpu-local.json" \
    --batch 8 --out "$prof" >/dev/null 2>&1
"$PIPETOP" plan --planner gpipe --stages 4 --profile "$prof" --topology local-cpu-4 --batch 128 \
    --microbatch 8 --out "$plan" >/dev/null 2>&1
python3 - "$plan" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["schedule"] = {"kind": "zb-h1"}
json.dump(p, open(sys.argv[1], "w"))
EOF
labels_apart() { # every run of digits in the rows is one micro-batch number (0..15)
    local bad
    bad=$(tm_cap | grep -E '^│s[0-9]r[0-9] ' | sed -E 's/^│s[0-9]r[0-9] +//' |
        grep -oE '[0-9]+' | awk '$0 > 15 || length($0) > 2 { print }')
    [ -z "$bad" ] || { echo "numbers that run together: $bad" >&2; return 1; }
}
for size in "80 24" "120 40"; do
    set -- $size
    tm_start "$1" "$2" "$PIPETOP console --plan '$plan' --profile '$prof' --topology local-cpu-4 --view timeline"
    tm_check "$1x$2 zb-h1: the predicted timeline" tm_wait 15 '^│s3r0 '
    tm_check "$1x$2 zb-h1: it is zb-h1's" tm_wait 5 '%'
    tm_check "$1x$2 zb-h1: no two micro-batch numbers touch" labels_apart
    tm_keys + + +
    tm_check "$1x$2 zb-h1 zoomed in: still apart" labels_apart
    tm_check "q exits" tm_quit_ok
done
tm_summary

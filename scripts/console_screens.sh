#!/bin/bash
# Captures every view of the console at 120x40 from the real binary, driven
# in tmux on the recorded run tests/data/run-dapple4, and writes them into
# docs/console.md between the "screens" markers (so the pictures there are
# what the program draws, and can be regenerated after a change):
#   scripts/console_screens.sh [BUILD_DIR]     (default: build)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
export PT_BUILD_DIR=$(cd "${1:-$root/build}" && pwd)
export PT_SOURCE_DIR=$root
set +e
. "$root/tests/tui/tmux_lib.sh"
set -e
doc="$root/docs/console.md"
COLS=120
ROWS=40
out="$TM_DIR/screens.md"

# shot TITLE KEYS... WAIT-PATTERN: keys, then the screen once it shows the pattern and settles
shot() {
    local title=$1 pat=${*: -1} keys=("${@:2:$#-2}")
    [ ${#keys[@]} -gt 0 ] && tm_keys "${keys[@]}"
    tm_wait 20 "$pat" || { echo "console_screens: '$title' never showed /$pat/" >&2; exit 1; }
    tm_settle 10 || true
    {
        echo "### $title"
        echo
        echo '```'
        tm_cap | sed 's/[[:space:]]*$//'
        echo '```'
        echo
    } >>"$out"
}

# the record's path as the screens print it: relative, the same on every machine
tm_start $COLS $ROWS "$PIPETOP replay '$root/tests/data/run-dapple4' --end --view plan --theme mono --no-mouse"
: >"$out"
shot "1 plan: layers under stage headers, the running plan's figures, memory per stage" 'measured +[0-9.]+ ms'
shot "2 timeline: the last iterations, one row per stage replica" 2 '^│s3r0 '
shot "2 timeline, p p: measured and predicted side by side on one axis" p p '┌─ predicted timeline'
shot "3 stats: throughput and loss, busy and memory per stage replica" p 3 'memory, bar = device limit'
shot "4 agents: process, device, stage replica, state, heartbeat" 4 '^│agent +pid'
shot "? help: every key, by view" '?' '^│everywhere'
tm_quit_ok >/dev/null || true

begin='<!-- screens:begin (scripts/console_screens.sh writes this part) -->'
end='<!-- screens:end -->'
new="$TM_DIR/console.md"
awk -v b="$begin" -v e="$end" -v f="$out" '
    $0 == b { print; print ""; while ((getline l < f) > 0) print l; skip = 1; next }
    $0 == e { skip = 0 }
    !skip' "$doc" >"$new"
grep -qF "$begin" "$doc" || { echo "console_screens: $doc lacks the marker: $begin" >&2; exit 1; }
cp "$new" "$doc"
echo "wrote $(grep -c '^### ' "$out") screens into docs/console.md"

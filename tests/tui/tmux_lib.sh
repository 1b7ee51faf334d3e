# Helpers for the console's tmux-driven tests (tests/tui/*_test.sh): run the
# real pipetop in a detached tmux server on a private socket at a fixed size,
# type keys, read the screen with capture-pane, wait with bounds, and always
# kill the server at the end. Sourced, not run.
#
# The pane runs "CMD; echo EXITED <status>; sleep", so a test sees how the
# program ended without racing the pane's death.

PIPETOP="${PT_BUILD_DIR:?}/pipetop"
TM_SOCK="pt$$"
TM_SERVERS=0 # each tm_start gets a socket of its own: a new server on the socket
             # of one being killed can die with it
TM_DIR=$(mktemp -d /tmp/pipetop-tmux.XXXXXX)
TM_FAILURES=0
TM_CHECKS=0

tm_cleanup() {
    local i
    for ((i = 1; i <= TM_SERVERS; i++)); do
        tmux -L "pt$$-$i" kill-server 2>/dev/null
        rm -f "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/pt$$-$i"
    done
    rm -rf "$TM_DIR"
}
trap tm_cleanup EXIT

tm_fail() {
    echo "FAIL: $*" >&2
    TM_FAILURES=$((TM_FAILURES + 1))
}

# tm_check DESCRIPTION COMMAND...: counts a check, fails it when COMMAND fails.
tm_check() {
    local what=$1
    shift
    TM_CHECKS=$((TM_CHECKS + 1))
    if ! "$@"; then
        tm_fail "$what"
        echo "--- screen:" >&2
        tm_cap >&2
        return 1
    fi
    return 0
}

# tm_start COLS ROWS CMD: a new server running CMD (in $TM_DIR) at COLS x ROWS.
tm_start() {
    local cols=$1 rows=$2 cmd=$3
    [ "$TM_SERVERS" -gt 0 ] && tmux -L "$TM_SOCK" kill-server 2>/dev/null
    TM_SERVERS=$((TM_SERVERS + 1))
    TM_SOCK="pt$$-$TM_SERVERS"
    LANG=C.UTF-8 tmux -L "$TM_SOCK" -f /dev/null new-session -d -s t -x "$cols" -y "$rows" \
        "cd '$TM_DIR' && env LANG=C.UTF-8 TERM=xterm-256color XDG_CONFIG_HOME='$TM_DIR/config' $cmd; echo EXITED \$?; sleep 600"
    tmux -L "$TM_SOCK" set-option -t t status off >/dev/null
}

tm_cap() {
    tmux -L "$TM_SOCK" capture-pane -p -t t
}

tm_keys() {
    tmux -L "$TM_SOCK" send-keys -t t "$@"
}

tm_resize() {
    tmux -L "$TM_SOCK" resize-window -t t -x "$1" -y "$2"
}

# tm_wait SECONDS EGREP-PATTERN: polls the screen until the pattern shows;
# 0 when it did (TM_MATCH: that screen, for a figure of a passing message),
# 1 on timeout.
TM_MATCH=""
tm_wait() {
    local secs=$1 pat=$2 i
    for ((i = 0; i < secs * 5; i++)); do
        TM_MATCH=$(tm_cap)
        grep -qE -- "$pat" <<<"$TM_MATCH" && return 0
        sleep 0.2
    done
    return 1
}

# tm_settle SECONDS: polls until two captures 0.2 s apart are the same, i.e.
# the console has drawn everything sent to it so far; 1 on timeout.
tm_settle() {
    local secs=$1 i a b
    a=$(tm_cap)
    for ((i = 0; i < secs * 5; i++)); do
        sleep 0.2
        b=$(tm_cap)
        [ "$a" = "$b" ] && return 0
        a=$b
    done
    return 1
}

# tm_wait_gone SECONDS EGREP-PATTERN: polls until the pattern is no longer shown.
tm_wait_gone() {
    local secs=$1 pat=$2 i
    for ((i = 0; i < secs * 5; i++)); do
        tm_cap | grep -qE -- "$pat" || return 0
        sleep 0.2
    done
    return 1
}

# tm_layout_ok COLS ROWS: the screen is COLS x ROWS with nothing past the right
# edge, the header on the first line, a panel's top border on the second
# (corner at column 1 and at column COLS) and a bottom border above the
# status line somewhere below, with every framed line as wide as its frame.
tm_layout_ok() {
    # the screen may still be redrawing after a key or a resize: retry a while
    local i
    for ((i = 0; i < 25; i++)); do
        tm_layout_once "$1" "$2" 2>/dev/null && return 0
        sleep 0.2
    done
    tm_layout_once "$1" "$2"
}

tm_layout_once() {
    local cols=$1 rows=$2 screen n top
    screen=$(tm_cap)
    n=$(printf '%s\n' "$screen" | wc -l)
    [ "$n" -eq "$rows" ] || { echo "screen has $n lines, want $rows" >&2; return 1; }
    printf '%s\n' "$screen" | head -n1 | grep -q '^pipetop ' || { echo "no header" >&2; return 1; }
    top=$(printf '%s\n' "$screen" | sed -n 2p)
    [ "${top:0:1}" = "┌" ] || { echo "line 2 does not start a panel: $top" >&2; return 1; }
    # every line fits the width (display columns)
    local widest
    widest=$(printf '%s\n' "$screen" | LANG=C.UTF-8 wc -L)
    [ "$widest" -le "$cols" ] || { echo "a line is $widest wide, screen $cols" >&2; return 1; }
    # the outermost right corner of line 2 sits at the last column
    [ "$(printf '%s' "$top" | LANG=C.UTF-8 wc -m)" -eq "$cols" ] ||
        { echo "top border is $(printf '%s' "$top" | LANG=C.UTF-8 wc -m) wide, want $cols" >&2; return 1; }
    [ "${top: -1}" = "┐" ] || { echo "line 2 does not end a panel: $top" >&2; return 1; }
    printf '%s\n' "$screen" | grep -q '^└.*┘$' || { echo "no bottom border" >&2; return 1; }
    return 0
}

# tm_quit: q, then the program must have exited with status 0.
tm_quit_ok() {
    tm_keys q
    tm_wait 20 '^EXITED 0'
}

tm_summary() {
    echo "$((TM_CHECKS - TM_FAILURES)) passed, $TM_FAILURES failed"
    [ "$TM_FAILURES" -eq 0 ]
}

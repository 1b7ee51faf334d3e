#!/usr/bin/env bash
# pt_control, the run controller and session, is headless: it links no
# curses. Two checks, each of which fails if a curses call creeps in:
#  1. no symbol pt_control's archive leaves undefined is defined by the curses
#     libraries pipetop loads (and pt_console's archive does need some: the
#     check sees curses when it is there);
#  2. a program linked against pt_control alone (run_session_test) needs no
#     curses or terminfo library at run time.
set -euo pipefail
build="${PT_BUILD_DIR:?}"
# shellcheck disable=SC1091
. "$build/control_headless.env"
fail() { echo "FAIL: $*"; exit 1; }
for f in "$PT_CONTROL_LIB" "$PT_CONSOLE_LIB" "$PT_HEADLESS_PROG" "$PT_CURSES_PROG"; do
    [ -f "$f" ] || fail "$f is not built"
done
curses_syms=$(mktemp)
trap 'rm -f "$curses_syms"' EXIT
libs=$(ldd "$PT_CURSES_PROG" | awk '/curses|tinfo|formw/ {print $3}')
[ -n "$libs" ] || fail "$(basename "$PT_CURSES_PROG") loads no curses library"
for lib in $libs; do
    nm -D --defined-only "$lib" | awk '{sub(/@.*/, "", $NF); print $NF}'
done | sort -u >"$curses_syms"
[ -s "$curses_syms" ] || fail "no symbols read from $libs"
undefined_in() { nm -u "$1" 2>/dev/null | awk '{print $NF}' | sort -u; }
console_uses=$(comm -12 <(undefined_in "$PT_CONSOLE_LIB") "$curses_syms" | wc -l)
[ "$console_uses" -gt 0 ] || fail "pt_console uses no curses symbol: the check would see nothing"
control_uses=$(comm -12 <(undefined_in "$PT_CONTROL_LIB") "$curses_syms")
[ -z "$control_uses" ] || fail "pt_control uses curses: $(echo "$control_uses" | tr '\n' ' ')"
needed=$(readelf -d "$PT_HEADLESS_PROG" | awk '/NEEDED/ {print $NF}')
grep -qi 'curses\|tinfo' <<<"$needed" && fail "$(basename "$PT_HEADLESS_PROG") needs $needed"
echo "ok: pt_control leaves none of ${console_uses} curses symbols pt_console needs undefined;"
echo "    $(basename "$PT_HEADLESS_PROG") needs: $(echo "$needed" | tr -d '[]' | tr '\n' ' ')"

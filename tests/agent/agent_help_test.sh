#!/bin/bash
# pipetop-agent --help lists every option of the agent's option table
# (agent/main.c), and every option it lists is one the agent accepts: given
# without a value it is refused for the value, never as an unknown option.
set -u
AGENT="${PT_BUILD_DIR:?}/pipetop-agent"
SRC="${PT_SOURCE_DIR:?}/agent/main.c"
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
help=$("$AGENT" --help) || fail "--help: exit $?"
grep -q '^usage: pipetop-agent' <<<"$help" || fail "--help has no usage line"
table=$(grep -oE '^\s*\{"[a-z0-9-]+", PT_OPT_' "$SRC" | grep -oE '"[a-z0-9-]+"' | tr -d '"')
[ "$(wc -w <<<"$table")" -ge 5 ] || fail "found no option table in $SRC"
for o in $table; do
    grep -qE "^  --$o( |$)" <<<"$help" || fail "--help does not list --$o"
done
for o in $(grep -oE '^  --[a-z0-9-]+' <<<"$help" | tr -d ' '); do
    err=$("$AGENT" "$o" 2>&1 >/dev/null)
    rc=$?
    [ "$rc" -eq 2 ] || fail "$o without a value: exit $rc, want 2"
    grep -q "unknown option" <<<"$err" && fail "$o is listed but refused: $err"
done
err=$("$AGENT" --no-such-option 2>&1)
[ $? -eq 2 ] && grep -q "unknown option '--no-such-option'" <<<"$err" ||
    fail "an unknown option is not refused: $err"
[ "$failures" -eq 0 ] || exit 1
echo "agent help: all checks passed"

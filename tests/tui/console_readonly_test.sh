#!/bin/bash
# `pipetop console --readonly`, driven in tmux: monitoring only. Every key
# that edits the plan or would restart the run is refused with a status line
# saying so, and the plan stays as it was (stage 0's layers, the predicted
# time); keys that only look (cursor, views, help) still work; q exits 0.
# Without --readonly the same key does edit (so the refusal is --readonly's).
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"

predicted() {
    tm_cap | grep -oE 'predicted +[0-9.]+ ms' | grep -oE '[0-9]+\.[0-9]+'
}
stage0() {
    tm_cap | grep -oE '== stage 0 +layers [0-9]+-[0-9]+' | grep -oE '[0-9]+-[0-9]+$'
}

tm_start 100 30 "$PIPETOP console --readonly --view plan"
tm_check "plan view appears" tm_wait 15 'predicted +[0-9.]+ ms'
before=$(predicted)
range0=$(stage0)
tm_check "stage 0 shown" test -n "$range0"
for k in '}' '+' 'S' 'M' 'c' 'P'; do
    tm_keys "$k"
    tm_check "'$k' refused" tm_wait 5 "read-only console \(--readonly\): '[$k]' would edit the plan; refused"
done
tm_keys A
tm_check "apply & restart refused" tm_wait 5 "read-only console \(--readonly\): 'A' would restart the run; refused"
tm_keys w
tm_check "write refused" tm_wait 5 "'w' would edit the plan; refused"
tm_check "no plan file written" test ! -e "$TM_DIR/plan-edited.json"
tm_check "stage 0 unchanged ($range0 -> $(stage0))" test "$(stage0)" = "$range0"
tm_check "prediction unchanged ($before -> $(predicted))" test "$(predicted)" = "$before"
# looking still works: the cursor, another view and back
tm_keys j 2
tm_check "timeline view" tm_wait 5 'timeline'
tm_keys 1
tm_check "back in the plan view" tm_wait 5 'predicted +[0-9.]+ ms'
tm_check "q exits with 0" tm_quit_ok

# the same key edits without --readonly
tm_start 100 30 "$PIPETOP console --view plan"
tm_check "plan view appears (editable)" tm_wait 15 'predicted +[0-9.]+ ms'
tm_keys '}'
tm_check "without --readonly the edit is made" tm_wait 5 'boundary moved; plan: [0-9.]+ ms predicted'
tm_check "q exits with 0 (editable)" tm_quit_ok
tm_summary

#!/bin/bash
# pipetop demo --simulate --fail K:STEP: the agent of device K fails when it
# reaches step STEP, and the run fails saying which agent and why, on the
# console's status line and header, in the run record's "failed" entry, and
# so in `pipetop status` (text and --json). A bad --fail is refused before
# the console opens.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"

out=$("$PIPETOP" demo --fail 1:3 2>&1)
tm_check "--fail without --simulate: exit 2" test $? -eq 2
tm_check "  and says so" grep -q -- '--fail goes with --simulate' <<<"$out"
out=$("$PIPETOP" demo --simulate --fail 9:3 --run-dir "$TM_DIR/refused" 2>&1)
tm_check "--fail 9:3 on 4 devices: exit 1" test $? -eq 1
tm_check "  naming the bound" grep -q -- '--fail "9:3": .*(0 <= K < 4)' <<<"$out"
tm_check "  before any run folder" test ! -e "$TM_DIR/refused"

RUN="$TM_DIR/failed-run"
tm_start 120 40 "$PIPETOP demo --simulate --fail 1:3 --run-dir '$RUN' --no-mouse"
why='failed: simulated failure at step 3 \(--fail\)'
tm_check "the status line says the run failed, which agent and why" \
    tm_wait 60 "the run failed: agent sim-[0-9a-f]+-1 \(stage [0-9]+, replica 0, pid [0-9]+\) $why"
tm_check "the header says failed" tm_wait 5 '\| failed gen 1, 4 agents'
tm_keys 4
# every agent's row says gone (polled: the rows change as they leave)
gone_rows() { tm_cap | grep -cE '^│sim-.* gone '; }
all_gone() {
    local i
    for ((i = 0; i < 50; i++)); do
        [ "$(gone_rows)" -eq 4 ] && return 0
        sleep 0.2
    done
    echo "agents gone: $(gone_rows) of 4" >&2
    return 1
}
# the step column of a row: after the heartbeat age ("N ms") and the drops
none_past_step3() { ! tm_cap | grep -E '^│sim-.* gone ' | grep -qE ' ms +[0-9]+ +([4-9]|[1-9][0-9]+) '; }
tm_check "the agents are told to leave: all 4 gone" all_gone
tm_check "  none went on past step 3" none_past_step3
tm_check "q exits with 0" tm_quit_ok

status=$("$PIPETOP" status "$RUN" 2>&1)
tm_check "status: failed" grep -q '^run .* (failed)$' <<<"$status"
tm_check "status: the failure, as the console said it" \
    grep -qE "^failure: agent sim-[0-9a-f]+-1 .*$why" <<<"$status"
json=$("$PIPETOP" status --json "$RUN" 2>&1)
tm_check "status --json: state and failure" \
    grep -qE '"state":"failed","failure":"agent sim-[0-9a-f]+-1 [^"]*simulated failure at step 3' \
    <<<"$json"
tm_summary

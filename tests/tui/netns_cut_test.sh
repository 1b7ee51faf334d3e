#!/bin/bash
# A multi-host run that network cuts do not lose (issue 25, item 2): two
# "hosts" (network namespaces joined by a veth pair), the console and agent
# a in A, agent b in B, CURVE on every channel. While the run trains the link
# goes down for 5 s, ten times, each once the run has gone on at least
# STEPS_BETWEEN steps since the last. The run is never lost: after the tenth
# cut it trains on, stops at a step on ^C with a checkpoint there, and the
# checkpoint equals, bit for bit, the same run uncut (on loopback) to that
# step.
#
# What used to lose it: the console kept a dead control connection and
# dropped the agent's reconnect under its name (fixed with ZMTP heartbeats);
# and a data-plane frame written into a TCP connection that then broke was
# gone, the receiver waiting for it until its 30 s timeout (2 runs in 9; now
# asked for and sent again, runtime/comm.h "Resending"); and a stop sent on
# a control connection that then broke was lost with it, the agent running
# into its step and waiting there (1 run in 16; now sent again when the agent
# registers again, docs/protocol.md "Stopping at one step").
#
# Needs root (network namespaces), as CI has; exits 77 (skipped) otherwise.
# Sends traffic only inside the namespaces it creates. PT_CUTS=N cuts N
# times; PT_KEEP_FAILED=DIR keeps a failed run's files there.
set -u
S="${PT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
B="${PT_BUILD_DIR:-$S/${1:-build}}"
CUTS=${PT_CUTS:-10}
CUT_S=5
STEPS_BETWEEN=20
RUN_S=600
NETNS_NAME=netns_cut_test NETNS_OCTET=232
. "$S/tests/tui/netns_lib.sh"
model="$S/tests/data/run/tiny-mlp.json"
plan="$S/tests/data/run/plan-a.json"
"$B/pipetop" profile --model "$model" --batch 16 --out "$tmp/profile.json" --repeats 2 \
    >/dev/null 2>&1 || fail "profile"
for k in console a b; do
    "$B/pipetop" keys --out "$tmp/keys/$k" >/dev/null || fail "keys $k"
done
printf 'a.pub\nb.pub\n' >"$tmp/keys/allow.txt"
pub="$tmp/keys/console.pub"
last_step() { # the highest metrics step in the record, or -1
    grep -o '"type":"metrics"[^}]*"step":[0-9]*' "$tmp/ns/run.ndjson" 2>/dev/null |
        grep -oE '[0-9]+$' | sort -n | tail -n1 | grep . || echo -1
}

netns_console --plan "$plan" --model "$model" --data synthetic --seed 7 --iters 1000000 \
    --json --profile "$tmp/profile.json"
$inA "$B/pipetop-agent" --console "$ctl" --telemetry "$tel" --device 0 --name hand-a --threads 1 \
    --data-bind "tcp://$net.1:*" --key "$tmp/keys/a.key" --server-key "$pub" \
    --checkpoint-root "$tmp/ns-ck" >/dev/null 2>"$tmp/a.err" &
pids+=($!)
$inB "$B/pipetop-agent" --console "$ctl" --telemetry "$tel" --device 1 --name hand-b --threads 1 \
    --data-bind "tcp://$net.2:*" --key "$tmp/keys/b.key" --server-key "$pub" \
    --checkpoint-root "$tmp/ns-ck" >/dev/null 2>"$tmp/b.err" &
pids+=($!)

# CUTS times: once the run went on STEPS_BETWEEN steps, the link down CUT_S s
prev=-1
for ((c = 1; c <= CUTS && failures == 0; c++)); do
    t0=$SECONDS
    while [ "$(last_step)" -lt $((prev + STEPS_BETWEEN)) ]; do
        kill -0 "$console" 2>/dev/null || { fail "cut $c: the run ended: $(tail -3 "$tmp/ns.err")"; break 2; }
        [ $((SECONDS - t0)) -lt 120 ] || { fail "cut $c: no $STEPS_BETWEEN steps in 120 s after the last cut"; break 2; }
        sleep 0.1
    done
    prev=$(last_step)
    netns_link down
    sleep $CUT_S # the cut itself: a duration, not a wait for an event
    netns_link up
done
# it trains on after the last cut, then stops at a step on ^C
t0=$SECONDS
while [ "$(last_step)" -lt $((prev + STEPS_BETWEEN)) ] && kill -0 "$console" 2>/dev/null &&
    [ $((SECONDS - t0)) -lt 120 ]; do
    sleep 0.1
done
# ^C to pipetop itself (its run folder's lock holds its pid): timeout(1) would pass
# it on to the process and to its group, a second ^C abandoning the run
kill -INT "$(tr -d '\n' <"$tmp/ns/.lock")"
wait "$console"
st=$?
[ "$st" = 130 ] || fail "the run after $CUTS cuts: exit $st (want 130, stopped by ^C): $(tail -3 "$tmp/ns.err")"
grep -q 'stalled beyond' "$tmp/ns.err" && fail "an agent was given up: $(grep 'stalled beyond' "$tmp/ns.err" | head -1)"
step=$(grep -oE '"step":[0-9]+' "$tmp/ns-ck/latest" 2>/dev/null | grep -oE '[0-9]+')
[ -n "$step" ] && [ "$step" -gt $((CUTS * STEPS_BETWEEN)) ] || fail "latest '$step' after $CUTS cuts"

# the same run uncut, on loopback, to that step (its spawned agents, as the
# ones above, run OpenBLAS on one thread: the same sums in the same order)
timeout $RUN_S "$B/pipetop" run --plan "$plan" --model "$model" --data synthetic --seed 7 \
    --iters "$step" --json --profile "$tmp/profile.json" --run-dir "$tmp/ref" \
    --checkpoint-dir "$tmp/ref-ck" >"$tmp/ref.out" 2>"$tmp/ref.err" ||
    fail "the uncut run: $(tail -3 "$tmp/ref.err")"
tensors=0
for f in "$tmp/ref-ck/step-$step"/*.f32; do
    cmp -s "$f" "$tmp/ns-ck/step-$step/$(basename "$f")" ||
        fail "$(basename "$f") differs from the uncut run at step $step"
    tensors=$((tensors + 1))
done
[ "$tensors" -gt 0 ] || fail "no tensors at step $step"
reattached=$(grep -c 'reconnected' "$tmp/b.err")
resent=0 # frames sent again, from each agent's last data-plane line
for e in "$tmp/a.err" "$tmp/b.err"; do
    n=$(grep -o 'sent again [0-9]*' "$e" | tail -n1 | grep -oE '[0-9]+$')
    resent=$((resent + ${n:-0}))
done
stops=$(grep -oE '"stops_resent":[0-9]+' "$tmp/ns.out" | grep -oE '[0-9]+$')
if [ "$failures" -ne 0 ]; then
    echo "netns_cut_test: $failures failures" >&2
    tail -n 5 "$tmp/ns.err" "$tmp/b.err" >&2
    exit 1
fi
echo "netns_cut_test: ok ($CUTS cuts of $CUT_S s, agent b reconnected $reattached times, $resent data-plane frames and ${stops:-?} stops sent again, $tensors tensors equal at step $step)"

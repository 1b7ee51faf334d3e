#!/bin/bash
# A refused key is said on both sides (issue 25, item 7): an agent whose key
# is not on the console's allow-list leaves at once with exit 4, saying the
# console refused its handshake (not "silent for 30 s"); the console says,
# once, which public key it refused and from where, however often the agent
# tried. An agent given the wrong server key says so too.
set -u
B="${PT_BUILD_DIR:?}"
MODEL="${PT_SOURCE_DIR:?}/tests/data/run/tiny-mlp.json"
tmp=$(mktemp -d)
console=
trap '[ -n "$console" ] && kill "$console" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
cd "$tmp" || exit 1
for k in console good bad other; do
    "$B/pipetop" keys --out "k/$k" >/dev/null || fail "keys $k"
done
pub() { awk '$1 == "public" {print $2}' "k/$1.pub"; }
pub good >k/allow
timeout 300 "$B/pipetop" run --external --key k/console.key --allow k/allow --stages 1 \
    --schedule gpipe --microbatches 1 --model "$MODEL" --data synthetic --iters 3 --run-dir r \
    >c.out 2>c.err &
console=$!
# the console says where agents connect once it has profiled and planned
for ((i = 0; i < 1200; i++)); do
    grep -q -- '--telemetry' c.out c.err 2>/dev/null && break
    sleep 0.1
done
ctl=$(cat c.out c.err | grep -oE -- '--console [^ ]+' | head -n1 | cut -d' ' -f2)
tel=$(cat c.out c.err | grep -oE -- '--telemetry [^ ]+' | head -n1 | cut -d' ' -f2)
[ -n "$ctl" ] && [ -n "$tel" ] || fail "no endpoints in: $(cat c.out c.err)"
t0=$SECONDS
timeout 60 "$B/pipetop-agent" --console "$ctl" --telemetry "$tel" --device 0 --name bad \
    --key k/bad.key --server-key k/console.pub >a.out 2>a.err
rc=$?
[ $rc -eq 4 ] || fail "refused agent: exit $rc, want 4: $(tail -2 a.err)"
[ $((SECONDS - t0)) -lt 20 ] || fail "the refused agent took $((SECONDS - t0)) s to leave"
grep -q "refused this agent's handshake: refused by the peer's allow-list" a.err ||
    fail "the agent does not say its key was refused: $(tail -2 a.err)"
badpub=$(pub bad)
for ((i = 0; i < 100; i++)); do
    grep -qF -- "public key $badpub from" c.out c.err && break
    sleep 0.1
done
n=$(cat c.out c.err | grep -cF -- "public key $badpub from")
[ "$n" -eq 1 ] || fail "the console named the refused key $n times, want 1: $(grep refused c.err | head -3)"
cat c.out c.err | grep -F -- "public key $badpub from" | grep -q 'not on the allow-list' ||
    fail "no reason with the refused key: $(cat c.out c.err | grep -F "$badpub")"
# a good key but the wrong server key: the agent cannot prove the console
timeout 60 "$B/pipetop-agent" --console "$ctl" --telemetry "$tel" --device 0 --name good \
    --key k/good.key --server-key k/other.pub >b.out 2>b.err
rc=$?
[ $rc -eq 4 ] || [ $rc -eq 3 ] || fail "wrong server key: exit $rc: $(tail -2 b.err)"
grep -q "refused this agent's handshake\|silent" b.err || fail "wrong server key: $(tail -2 b.err)"
if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "refused_key_test: ok"

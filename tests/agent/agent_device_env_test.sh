#!/bin/bash
# Without --device, pipetop-agent takes its GPU from what a launcher set
# (docs/deploy.md): Slurm's SLURM_LOCALID picks among CUDA_VISIBLE_DEVICES,
# a task bound to one GPU (one visible) takes cuda:0, and an index with no
# such visible GPU, or a GPU that cannot be opened, means the CPU, said in
# one line. --device overrides the environment. Each agent is pointed at a
# console that is not there and stopped once it has said what it picked;
# also the usage errors of --grace-ms and --key.
set -u
AGENT="${PT_BUILD_DIR:?}/pipetop-agent"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
# picked LOCALID VISIBLE WAIT-FOR EXTRA-ARGS...: the agent's stderr once it
# printed WAIT-FOR (a regex) or left, or after 2 s when WAIT-FOR is "-" (a
# line that must not come)
picked() {
    local local_id=$1 visible=$2 want=$3
    shift 3
    (
        [ "$local_id" = - ] && unset SLURM_LOCALID || export SLURM_LOCALID="$local_id"
        [ "$visible" = - ] && unset CUDA_VISIBLE_DEVICES || export CUDA_VISIBLE_DEVICES="$visible"
        exec "$AGENT" --console tcp://127.0.0.1:9 "$@"
    ) 2>"$tmp/err" &
    local pid=$!
    local tries=300
    [ "$want" = - ] && tries=40
    for _ in $(seq 1 $tries); do
        [ "$want" != - ] && grep -qE "$want|cannot start" "$tmp/err" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    cat "$tmp/err"
}
out=$(picked 1 0,1 'no --device')
grep -q 'no --device: cuda:1 from SLURM_LOCALID=1 CUDA_VISIBLE_DEVICES=0,1' <<<"$out" ||
    fail "local id 1 of two GPUs: $out"
out=$(picked 3 5 'no --device')
grep -q 'no --device: cuda:0 from SLURM_LOCALID=3 CUDA_VISIBLE_DEVICES=5' <<<"$out" ||
    fail "a task bound to one GPU: $out"
out=$(picked - 2 'no --device')
grep -q 'no --device: cuda:0 from SLURM_LOCALID=(unset) CUDA_VISIBLE_DEVICES=2' <<<"$out" ||
    fail "one visible GPU without Slurm: $out"
out=$(picked 2 0,1 'using the CPU')
grep -q 'SLURM_LOCALID=2 but CUDA_VISIBLE_DEVICES=0,1 names 2 GPUs; using the CPU' <<<"$out" ||
    fail "local id beyond the visible GPUs: $out"
out=$(picked x - 'using the CPU')
grep -q 'SLURM_LOCALID="x" is not a task index; using the CPU' <<<"$out" || fail "bad id: $out"
out=$(picked 1 0,1 - --device cpu)
grep -q 'no --device' <<<"$out" && fail "--device cpu was overridden: $out"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    out=$(picked 0 0 'computing on the CPU')
    grep -q 'computing on the CPU' <<<"$out" || fail "no GPU here: no fallback line: $out"
fi
"$AGENT" --console tcp://127.0.0.1:9 --grace-ms 5 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'needs --key and --server-key' "$tmp/err" || fail "--grace-ms without --key"
"$AGENT" --console tcp://127.0.0.1:9 --key x.key >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'go together' "$tmp/err" || fail "--key without --server-key"
"$AGENT" --console tcp://127.0.0.1:9 --data-bind 'tcp://0.0.0.0:*' >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q 'pipetop keys --out' "$tmp/err" || fail "a wide data bind without CURVE: $(cat "$tmp/err")"
[ "$failures" -eq 0 ] || exit 1
echo "agent device from the environment: all checks passed"

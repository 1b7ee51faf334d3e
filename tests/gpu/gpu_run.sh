#!/bin/bash
# `pipetop run` on topologies of cuda:N devices, with the stand-in CUDA module
# (tests/gpu/cuda_standin_module.c, named by $PIPETOP_CUDA_MODULE: a copy of
# the CPU backend per stand-in GPU, NCCL between processes through files):
#   - every agent is started on its device (--device cuda:N --index D) and
#     registers with that device's name and memory;
#   - two GPUs of their own: the console hands out an NCCL id, the agents
#     train with every message and all-reduce over (stand-in) NCCL, and the
#     loss equals the CPU run's on the same plan (the host path);
#   - two devices on one GPU (cuda:0 twice): no NCCL id, the host path;
#   - the console (`pipetop demo --topology` in tmux): the agents view shows
#     each agent's GPU name, index and free/total memory.
# Registered by cmake/cuda.cmake (CUDA builds: only they load a module).
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
: "${PIPETOP_CUDA_MODULE:?}"
W="$TM_DIR/w"
mkdir -p "$W"
export OPENBLAS_NUM_THREADS=1
MODEL=fmnist-mlp

topo() { # FILE NODE-JSON
    printf '{"v": 1, "name": "t", "nodes": [%s],\n "links": {"intra": %s}}\n' "$2" \
        '{"bandwidth_gbps": 400, "latency_us": 5}' >"$1"
}
topo "$W/own.json" '{"name": "g", "gpus": 2, "device": {"name": "gpu", "memory_gib": 16}}'
topo "$W/shared.json" '{"name": "g", "devices": [
  {"name": "a", "memory_gib": 16, "compute": "cuda:0"},
  {"name": "b", "memory_gib": 16, "compute": "cuda:0"}]}'
topo "$W/cpu.json" '{"name": "g", "count": 2, "device": {"name": "cpu", "memory_gib": 16}}'

# every run after the first takes its plan, so all train the same split
run() { # NAME TOPOLOGY; the stand-in's NCCL files go to $W/NAME.tmp
    local plan=(--stages 2 --schedule 1f1b-flush --microbatches 4)
    [ -f "$W/own/plan.json" ] && plan=(--plan "$W/own/plan.json")
    mkdir -p "$W/$1.tmp"
    TMPDIR="$W/$1.tmp" "$PIPETOP" run --model $MODEL --data synthetic --topology "$2" \
        "${plan[@]}" --iters 4 --seed 7 --headless --json --run-dir "$W/$1" >"$W/$1.out" 2>"$W/$1.err"
}
losses() { # the run's step lines (the record folds metrics: their loss may be null)
    grep -oE '"event":"step","step":[0-9]+,"loss":[0-9.e+-]+' "$W/$1.out" |
        grep -oE '"loss":[0-9.e+-]+' | tail -n 4
}
registers() { grep '"type":"register"' "$W/$1/run.ndjson"; }

tm_check "2 own GPUs: run completes" run own "$W/own.json"
for d in 0 1; do
    tm_check "own: agent of device $d registers on stand-in GPU $d" \
        bash -c "grep -q '\"device\":$d,\"device_name\":\"stand-in GPU $d\"' <<<\"\$0\"" \
        "$(registers own)" || cat "$W/own.err" >&2
done
tm_check "own: 16 GiB registered" grep -q '"memory_bytes":17179869184' <(registers own)
# 1f1b-flush, 4 micro-batches: 4 activations 0->1 and 4 gradients 1->0 per step
nccl_calls() { cat "$W/$1.tmp"/pt-standin-nccl-*/log 2>/dev/null | grep -c "^$2 "; }
tm_check "own: 32 sends over NCCL in 4 steps (8 a step)" test "$(nccl_calls own send)" = 32
tm_check "own: 32 receives over NCCL in 4 steps" test "$(nccl_calls own recv)" = 32

tm_check "one shared GPU: run completes" run shared "$W/shared.json"
tm_check "shared: both agents on stand-in GPU 0" \
    test "$(registers shared | grep -c '"device_name":"stand-in GPU 0"')" = 2
tm_check "shared: host path (no NCCL call)" test "$(nccl_calls shared send)" = 0

tm_check "CPU devices: run completes" run cpu "$W/cpu.json"
tm_check "CPU: agents on the CPU backend" bash -c '! grep -q stand-in <<<"$0"' "$(registers cpu)"
# the same plan, seed and data on GPUs over NCCL, on one GPU over the host,
# and on CPUs: the stand-in computes as the CPU does, so the losses agree
# within the 1e-5 of every pipeline-vs-reference check (observed ~1e-7: the
# CPU agents' OpenBLAS sums in another order), and the two GPU runs exactly
close() { # NAME REF TOLERANCE
    paste <(losses "$1") <(losses "$2") | tr -d '"loss:' | awk -v tol="$3" '
        { n++; d = $1 - $2; if (d < 0) d = -d; if (d > tol * ($2 < 0 ? -$2 : $2)) bad++ }
        END { if (n != 4 || bad) { print n " losses, " bad+0 " apart" > "/dev/stderr"; exit 1 } }'
}
tm_check "own (NCCL) losses equal the CPU run's within 1e-5" close own cpu 1e-5
tm_check "shared (host path) losses equal own's (NCCL) exactly" close shared own 0

# The console (the demo on these devices): its agents view names each GPU,
# its index and the driver's free and total memory.
tm_start 160 30 "$PIPETOP demo --data synthetic --topology '$W/own.json' --run-dir '$W/tui'"
tm_check "console: agents train" tm_wait 60 'live gen 1, 2 agents \| step [0-9]+'
tm_keys 4
tm_check "agents view: device and free/memory columns" tm_wait 10 'device +stage .* free/memory'
for d in 0 1; do
    tm_check "agents view: GPU $d with its free and total memory" \
        tm_wait 10 "stand-in GPU $d:$d +s0r$d +running .* [0-9.]+G/16\.0G"
done
tm_keys q
tm_wait 30 'EXITED' >/dev/null
echo "gpu_run: $TM_CHECKS checks, $TM_FAILURES failed"
[ "$TM_FAILURES" -eq 0 ]

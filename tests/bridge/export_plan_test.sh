#!/bin/bash
# `pipetop export-plan` (docs/torch.md): for a 4-rank plan of each
# synchronous kind, torch's per-rank CSV passes a checker of
# torch.distributed.pipelining's _validate_schedule rules and parses with
# its _action_regex (export_check.py csv; the checker itself refuses broken
# schedules: export_check.py checker), and the FQN split cuts the real torch
# module (a small GPT written in torch, and torchvision's ResNet-50) into
# parts that, run in sequence with torch 1.13, give the whole module's output
# and gradients within 1e-6; torchtitan's TOML, DeepSpeed's subclass (run
# against a stand-in of the PipelineModule methods it calls) and Megatron's
# layout say the same partition; every refusal names the plan's field and the
# framework's limit, and --flatten says what it changed.
. "$(dirname "$0")/bridge_lib.sh"

check "the schedule checker refuses broken schedules" "$PY" tests/bridge/export_check.py checker

# the model's profile: its layer names (9: tok, blocks.0-5, ln_f, head)
check "profile the GPT" "$PIPETOP" profile --torch gpt_model:gpt --input 16 --tokens 64 \
    --batch 4 --repeats 1 --warmup 0 --threads 1 --out "$tmp/gpt.json"

# plan KIND STAGES [EXTRA]: a 4-rank plan of the GPT's 9 layers
plan() {
    local kind=$1 stages=$2 extra=${3:-}
    printf '{"v":1,"model":"gpt","layers":9,"microbatch":{"size":4,"count":8},
 "schedule":{"kind":"%s"%s},"optimizer":{"kind":"sgd","lr":0.02,"momentum":0.9},
 "stages":[%s]}\n' "$kind" "$extra" "$stages"
}
four='{"layers":[0,3],"replicas":[0]},{"layers":[3,5],"replicas":[1]},{"layers":[5,7],"replicas":[2]},{"layers":[7,9],"replicas":[3]}'
eight='{"layers":[0,1],"replicas":[0]},{"layers":[1,2],"replicas":[1]},{"layers":[2,3],"replicas":[2]},{"layers":[3,4],"replicas":[3]},{"layers":[4,5],"replicas":[0]},{"layers":[5,6],"replicas":[1]},{"layers":[6,7],"replicas":[2]},{"layers":[7,9],"replicas":[3]}'
kinds=(1f1b-flush zb-h1 interleaved gpipe dapple zb-h2 1f1b-gw)
exports=()
for kind in "${kinds[@]}"; do
    if [ "$kind" = interleaved ]; then
        plan interleaved "$eight" ',"chunks":2' >"$tmp/$kind.json"
    else
        plan "$kind" "$four" >"$tmp/$kind.json"
    fi
    check "$kind: export to torch" "$PIPETOP" export-plan "$tmp/$kind.json" --to torch \
        --profile "$tmp/gpt.json" --out "$tmp/$kind.torch.json"
    exports+=("$tmp/$kind.torch.json")
done
check "every kind's CSV passes the checker" "$PY" tests/bridge/export_check.py csv "${exports[@]}"
check "every kind's parts compute the GPT" "$PY" tests/bridge/export_check.py split \
    gpt_model:gpt 16 64 "${exports[@]}"
check "the bridge's checker, from the command line" "$PY" -m pipetop_torch.schedule \
    "$tmp/interleaved.torch.csv" --ranks 4 --stages 8 --microbatches 8
grep -q '^0F0,0F1,0F2,0F3,' "$tmp/1f1b-flush.torch.csv" || fail "1f1b-flush: rank 0 starts with 4 forwards"
grep -q 'I' "$tmp/zb-h1.torch.csv" && grep -q 'W' "$tmp/zb-h1.torch.csv" ||
    fail "zb-h1: the CSV has no I and W actions"
grep -qE '"blocks.2":[[:space:]]*"BEGINNING"' "$tmp/1f1b-flush.torch.json" ||
    fail "1f1b-flush: no split point at blocks.2"

# ResNet-50 cut where a 4-stage plan of its 22 layers cuts
check "profile ResNet-50's names" "$PIPETOP" profile --torch torchvision.models:resnet50 \
    --input 3,32,32 --batch 2 --repeats 1 --warmup 0 --threads 1 --out "$tmp/r50.json"
check "plan ResNet-50 in 4 stages" "$PIPETOP" plan --planner gpipe --stages 4 --batch 8 \
    --profile "$tmp/r50.json" --topology dgx1-v100-x8 --out "$tmp/r50-plan.json"
check "export ResNet-50's plan" "$PIPETOP" export-plan "$tmp/r50-plan.json" --to torch \
    --profile "$tmp/r50.json" --out "$tmp/r50.torch.json"
check "ResNet-50's parts compute ResNet-50" "$PY" tests/bridge/export_check.py split \
    torchvision.models:resnet50 3,64,64 0 "$tmp/r50.torch.json"

# torchtitan, DeepSpeed, Megatron
check "torchtitan" "$PIPETOP" export-plan "$tmp/interleaved.json" --to torchtitan \
    --profile "$tmp/gpt.json" --out "$tmp/titan.toml"
check "torchtitan's parts" "$PY" tests/bridge/export_check.py torchtitan "$tmp/titan.toml" \
    "$tmp/interleaved.torch.json"
check "deepspeed" "$PIPETOP" export-plan "$tmp/1f1b-flush.json" --to deepspeed \
    --profile "$tmp/gpt.json" --out "$tmp/ds.py"
check "deepspeed's subclass builds the plan's stages" "$PY" tests/bridge/export_check.py \
    deepspeed "$tmp/ds.py" "$tmp/1f1b-flush.json"
out=$("$PIPETOP" export-plan "$tmp/1f1b-flush.json" --to megatron --profile "$tmp/gpt.json")
grep -qF -- '--pipeline-model-parallel-size 4 --pipeline-model-parallel-layout "Ett|tt|tt|L"' \
    <<<"$out" || fail "megatron 1f1b-flush layout: $out"
out=$("$PIPETOP" export-plan "$tmp/interleaved.json" --to megatron --profile "$tmp/gpt.json" 2>&1)
grep -qF '"E|t|t|t|t|t|t|L"' <<<"$out" || fail "megatron interleaved layout: $out"

# refused FIELD-AND-LIMIT WORDS... : export-plan exits 1 and says each
refused() {
    local name=$1 plan_file=$2 fw=$3 prof=$4
    shift 4
    checks=$((checks + 1))
    local args=(export-plan "$plan_file" --to "$fw" --csv "$tmp/x.csv")
    [ -n "$prof" ] && args+=(--profile "$prof")
    out=$("$PIPETOP" "${args[@]}" 2>&1)
    [ $? -eq 1 ] || { fail "$name: not refused: $out"; return; }
    for w in "$@"; do
        grep -qF -- "$w" <<<"$out" || fail "$name: '$out' lacks '$w'"
    done
}
# flattened NAME PLAN FW PROFILE WORDS...: with --flatten it exports and says each change
flattened() {
    local name=$1 plan_file=$2 fw=$3 prof=$4
    shift 4
    checks=$((checks + 1))
    local args=(export-plan "$plan_file" --to "$fw" --csv "$tmp/x.csv" --flatten)
    [ -n "$prof" ] && args+=(--profile "$prof")
    out=$("$PIPETOP" "${args[@]}" 2>&1)
    [ $? -eq 0 ] || { fail "$name --flatten: exit status: $out"; return; }
    for w in "$@"; do
        grep -qF -- "$w" <<<"$out" || fail "$name --flatten: '$out' lacks '$w'"
    done
}
G="$tmp/gpt.json"
plan pipedream "$four" >"$tmp/pd.json"
refused "asynchronous" "$tmp/pd.json" torch "$G" 'schedule.kind: "pipedream" is asynchronous' \
    'torch.distributed.pipelining: its schedules are synchronous' '(--flatten: 1f1b-flush)'
flattened "asynchronous" "$tmp/pd.json" torch "$G" \
    '--flatten: schedule.kind: pipedream -> 1f1b-flush: torch.distributed.pipelining flushes'
refused "zb-h1 on DeepSpeed" "$tmp/zb-h1.json" deepspeed "" 'schedule.kind: "zb-h1"' \
    "DeepSpeed's PipelineModule: it runs 1F1B with a flush (TrainSchedule)"
flattened "zb-h1 on DeepSpeed" "$tmp/zb-h1.json" deepspeed "" \
    '--flatten: schedule.kind: "zb-h1" -> 1f1b-flush'
refused "gpipe on Megatron" "$tmp/gpipe.json" megatron "$G" 'schedule.kind: "gpipe"' \
    'Megatron-Core: it runs 1F1B and interleaved 1F1B'
plan dapple "$four" ',"policy":"B"' >"$tmp/dapple-b.json"
refused "dapple B on DeepSpeed" "$tmp/dapple-b.json" deepspeed "" 'schedule.policy: policy B'
refused "interleaved on DeepSpeed" "$tmp/interleaved.json" deepspeed "" \
    'schedule.kind: "interleaved"'
flattened "interleaved on DeepSpeed" "$tmp/interleaved.json" deepspeed "$G" \
    '--flatten: schedule: interleaved (2 chunks per device) -> 1f1b-flush, stages: 8 chunks -> 4 stages'
refused "interleaved on DeepSpeed without a profile" "$tmp/interleaved.json" deepspeed "" \
    'schedule.kind: "interleaved"'
out=$("$PIPETOP" export-plan "$tmp/interleaved.json" --to deepspeed --flatten 2>&1)
grep -qF 'needs the profile' <<<"$out" || fail "re-cut without a profile: $out"
uneven='{"layers":[0,3],"replicas":[0,4]},{"layers":[3,5],"replicas":[1]},{"layers":[5,7],"replicas":[2]},{"layers":[7,9],"replicas":[3]}'
plan 1f1b-flush "$uneven" >"$tmp/uneven.json"
for fw in torch torchtitan deepspeed megatron; do
    refused "uneven replicas, $fw" "$tmp/uneven.json" "$fw" "$G" \
        'stages[1].replicas: stages run 1 to 2 replicas' 'the same data-parallel degree'
done
flattened "uneven replicas" "$tmp/uneven.json" deepspeed "" \
    '--flatten: stages[0].replicas: 2 -> 1 (its first 1 devices)'
dp='{"layers":[0,3],"replicas":[0,4]},{"layers":[3,5],"replicas":[1,5]},{"layers":[5,7],"replicas":[2,6]},{"layers":[7,9],"replicas":[3,7]}'
printf '{"v":1,"model":"gpt","layers":9,"microbatch":{"size":3,"count":8},"schedule":{"kind":"1f1b-flush"},"stages":[%s]}\n' "$dp" >"$tmp/odd.json"
refused "micro-batch over replicas" "$tmp/odd.json" megatron "$G" \
    'microbatch.size: 3 samples do not split evenly over 2 data-parallel replicas'
flattened "micro-batch over replicas" "$tmp/odd.json" deepspeed "" \
    '--flatten: microbatch.size: 3 -> 2'
sed 's/"replicas":\[1\]}/"replicas":[1],"recompute":true}/' "$tmp/1f1b-flush.json" >"$tmp/rc.json"
refused "recompute on torch" "$tmp/rc.json" torch "$G" \
    'stages[1].recompute: 1 of 4 stages recompute' 'the CSV has no recompute action'
flattened "recompute on torch" "$tmp/rc.json" torch "$G" \
    '--flatten: stages[*].recompute: 1 of 4 -> none'
refused "mixed recompute on DeepSpeed" "$tmp/rc.json" deepspeed "" \
    'stages[1].recompute: 1 of 4 stages recompute'
flattened "mixed recompute on DeepSpeed" "$tmp/rc.json" deepspeed "" \
    '--flatten: stages[*].recompute: 1 of 4 -> every stage'
printf '{"v":1,"model":"tfm","layers":7,"microbatch":{"size":4,"count":4},"schedule":{"kind":"1f1b-flush"},"stages":[{"layers":[0,2],"replicas":[0]},{"layers":[2,7],"replicas":[1]}]}\n' >"$tmp/tfm.json"
M=tests/data/torch/megatron-profile.json
refused "a cut inside a transformer layer" "$tmp/tfm.json" megatron "$M" \
    'stages[1].layers: the cut before layer 2 ("layers.0.mlp") is inside a transformer layer' \
    'Megatron-Core: it runs 1F1B and interleaved 1F1B, cut between transformer layers'
flattened "a cut inside a transformer layer" "$tmp/tfm.json" megatron "$M" \
    '--flatten: stages[1].layers: [2,7) -> [1,7)' 'the cut inside "layers.0" moved to its start' \
    '"E|ttL"'
refused "a layer outside transformer layers" "$tmp/tfm.json" megatron \
    tests/data/torch/megatron-stray.json 'layers[3] ("adapter") lies between transformer layers'
refused "no profile" "$tmp/1f1b-flush.json" torch "" 'give --profile'
refused "another model's profile" "$tmp/tfm.json" torch "$G" 'the profile has 9 layers, the plan 7'
out=$("$PIPETOP" export-plan "$tmp/1f1b-flush.json" --to torch --profile "$G" 2>&1)
[ $? -eq 1 ] && grep -qF 'writes a schedule CSV beside its file' <<<"$out" ||
    fail "torch without --out or --csv: $out"
out=$("$PIPETOP" export-plan "$tmp/1f1b-flush.json" --to jax 2>&1)
[ $? -eq 2 ] && grep -qF 'unknown framework "jax"' <<<"$out" || fail "--to jax: $out"
summary

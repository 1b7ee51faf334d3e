#!/bin/sh
# Prints the docs/planners.md table "Predicted model TFLOP/s per GPU": for
# three GPT-style models on H100 and A100 clusters, an analytic bf16 profile
# (pipetop profile --analytic --precision bf16, micro-batch 1), the dapple
# planner's plan with Adam (pipeline x data parallel, no tensor parallelism)
# and the simulator's iteration time, turned into model FLOP/s per GPU with
# Megatron-LM's count (Narayanan et al., SC'21, appendix, without the
# recomputed forward): 72 B s l h^2 (1 + s/6h) + 6 B s h V per iteration.
# The published figures beside them are converted to the same count (see
# docs/planners.md, "Cost model and precision").
# usage: scripts/tflops_table.sh [PIPETOP] [WORKDIR]
set -eu
PIPETOP=${1:-build/pipetop}
WORK=${2:-$(mktemp -d /tmp/pipetop-tflops.XXXXXX)}
mkdir -p "$WORK"

# megatron-1.7b: the 1.7B model of SC'21's Table 1 (h 2304, 24 layers, 24
# heads, sequence 2048, vocabulary 51,200), written as gpt-1.3b's blocks.
python3 - "$WORK/megatron-1.7b.json" <<'EOF'
import json, sys
h, layers, heads, seq, vocab = 2304, 24, 24, 2048, 51200
spec = {"v": 1, "name": "megatron-1.7b",
        "_comment": "Narayanan et al., SC'21, Table 1, first row: h 2304, 24 layers, 24 heads, s 2048, V 51200",
        "input": {"kind": "tokens", "shape": [seq]},
        "layers": [{"type": "embedding", "vocab": vocab, "dim": h, "positional": True}]}
for i in range(layers):
    spec["layers"].append({"type": "residual", "name": "block%d.attn" % i,
                           "body": [{"type": "layernorm"}, {"type": "attention", "heads": heads}]})
    spec["layers"].append({"type": "residual", "name": "block%d.mlp" % i,
                           "body": [{"type": "layernorm"}, {"type": "linear", "out": 4 * h},
                                    {"type": "gelu"}, {"type": "linear", "out": h}]})
spec["layers"] += [{"type": "layernorm", "name": "ln_f"},
                   {"type": "linear", "name": "head", "out": vocab, "bias": False},
                   {"type": "softmax_xent", "classes": vocab}]
json.dump(spec, open(sys.argv[1], "w"), indent=1)
EOF

# row MODEL SPEC DEVICE TOPOLOGY GBS S H L V PEAK_TFLOPS PUBLISHED
#   PUBLISHED: "model TFLOP/s|what|source"
row() {
    model=$1 spec=$2 dev=$3 topo=$4 gbs=$5 s=$6 h=$7 l=$8 v=$9
    shift 9
    peak=$1 published=$2
    prof="$WORK/$model-$dev-bf16.json"
    "$PIPETOP" profile --analytic --model "$spec" --device "$dev" --batch 1 --precision bf16 \
        --out "$prof" >/dev/null
    "$PIPETOP" plan --planner dapple --profile "$prof" --topology "$topo" --batch "$gbs" \
        --optimizer adam --precision bf16 --json >"$WORK/$model-plan.json" 2>/dev/null || true
    python3 - "$WORK/$model-plan.json" "$model" "$topo" "$gbs" "$s" "$h" "$l" "$v" "$peak" \
        "$published" <<'EOF'
import json, sys
path, model, topo, gbs, s, h, l, v, peak, published = sys.argv[1:]
gbs, s, h, l, v, peak = int(gbs), int(s), int(h), int(l), int(v), float(peak)
flops = 72.0 * gbs * s * l * h * h * (1 + s / (6.0 * h)) + 6.0 * gbs * s * h * v
pub_tflops, pub_what, pub_src = published.split("|")
try:
    j = json.load(open(path))
    p = j["plan"]
    gpus = sum(len(st["replicas"]) for st in p["stages"])
    t = j["simulated_iteration_ms"] / 1000.0
    reps = [len(st["replicas"]) for st in p["stages"]]
    if len(reps) == 1:
        shape = "data parallel, %d replicas" % reps[0]
    else:
        shape = "%d stages, replicas %s" % (len(reps), ":".join(map(str, reps)) if len(reps) <= 12
                                            else "%d each" % reps[0] if min(reps) == max(reps)
                                            else "%d-%d" % (min(reps), max(reps)))
    recomputing = sum(1 for st in p["stages"] if st.get("recompute"))
    shape += ", micro-batch %d x %d, %s%s" % (
        p["microbatch"]["size"], p["microbatch"]["count"], p["schedule"]["kind"],
        ", %d stages recompute" % recomputing if recomputing else "")
    tf = flops / t / gpus / 1e12
    ours = "%.2f s | %.0f (%.0f %%)" % (t, tf, 100 * tf / peak)
except Exception as e:
    gpus, shape, ours = "-", "no plan (%s)" % e, "- | -"
print("| %s | %s (%s GPUs) | %d | %s | %s | %s | %s (%.0f %%) | %s |" % (
    model, topo, gpus, gbs, shape, ours, pub_what, pub_tflops, 100 * float(pub_tflops) / peak,
    pub_src))
EOF
}

echo "| model | cluster | global batch | pipetop's plan (dapple, bf16, Adam) | predicted iteration | predicted model TFLOP/s per GPU (MFU) | published run | its model TFLOP/s per GPU (MFU) | source |"
echo "| --- | --- | ---: | --- | ---: | ---: | --- | ---: | --- |"
# gpt-1.3b on 64 H100: Megatron-LM's smallest weak-scaling model (2B, sequence
# 4096, vocabulary 131,072) ran at 41 % MFU on H100: 0.41 x 989.4.
row gpt-1.3b gpt-1.3b h100-80gb h100-8x8 512 1024 2048 24 50304 989.4 \
    "405.7|2B GPT, H100 cluster, MFU 41 %|Megatron-LM README, Training Speed and Scalability (NVIDIA/Megatron-LM)"
# megatron-1.7b on 32 A100: SC'21 Table 1 reports 137 TFLOP/s per GPU
# counting the recomputed forward (96 B s l h^2 (...) + 6 B s h V); the model
# count is (72 (1 + s/6h) + 6V/lh) / (96 (1 + s/6h) + 6V/lh) of it.
pub17=$(python3 -c 's,h,l,V=2048,2304,24,51200; a=1+s/(6.0*h); r=(72*a+6.0*V/(l*h))/(96*a+6.0*V/(l*h)); print("%.1f" % (137*r))')
row megatron-1.7b "$WORK/megatron-1.7b.json" a100-80gb dgx-a100-4x8 512 2048 2304 24 51200 312 \
    "$pub17|the same model, 32 A100 80 GB, data parallel only (t=1, p=1), batch 512: 137 TFLOP/s with recomputation|Narayanan et al., SC'21, Table 1"
# gpt3 on 96 H100: Megatron-LM's GPT-3 175B strong scaling starts at 96 H100s
# and 47 % MFU (batch 1152; 131,072 vocabulary; tensor parallelism).
row gpt3 gpt3 h100-80gb h100-12x8 1152 2048 12288 96 50257 989.4 \
    "465.0|GPT-3 175B, 96 H100, batch 1152, MFU 47 %|Megatron-LM README, strong scaling (NVIDIA/Megatron-LM)"

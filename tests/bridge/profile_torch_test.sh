#!/bin/bash
# `pipetop profile --torch` (docs/torch.md) on GPT-style models written in
# torch (tests/bridge/gpt_model.py): the profile's parameter bytes equal
# torch's sum over model.parameters() exactly (a root-level parameter and a
# weight two layers share included), each layer's act_bytes equals the bytes
# of the tensor its module returns, the per-layer times add up to within 25 %
# of a whole forward+backward timed apart (profile_torch_lib.sh), and DAPPLE
# plans it on dgx1-v100-x8. --layers picks the layers; a factory that does
# not import, a layer that is not a submodule and a --clock that is neither
# clock are refused saying so. ResNet-50 at 224x224, batch 8:
# profile_resnet50_test.sh (label "long").
. "$(dirname "$0")/bridge_lib.sh"
. "$(dirname "$0")/profile_torch_lib.sh"

# wide enough that its time is arithmetic: the per-layer sum is timed
profile_and_check gpt-wide gpt_model:gpt_wide 64 8 512 5
# the narrow GPT of the export and import tests: bytes (its times are
# Python's per-op cost: each layer alone pays it once more)
check "the narrow GPT" "$PIPETOP" profile --torch gpt_model:gpt --input 16 --tokens 64 --batch 4 \
    --repeats 1 --warmup 0 --threads 1 --out "$tmp/gpt.json"
out=$("$PY" tests/bridge/profile_check.py "$tmp/gpt.json" gpt_model:gpt 16 4 64 1 1 2>&1)
grep -qF 'gpt_model:gpt: 9 layers, 315392 parameter bytes (torch: 315392)' <<<"$out" ||
    fail "the narrow GPT's bytes: $out"

# --layers: blocks two at a time, the rest as they come
check "--layers" "$PIPETOP" profile --torch gpt_model:gpt --input 16 --tokens 64 --batch 4 \
    --repeats 1 --warmup 0 --threads 1 --layers tok,blocks.0,blocks.1,blocks.2,ln_f,head \
    --out "$tmp/gpt-layers.json"
"$PY" - "$tmp/gpt-layers.json" "$tmp/gpt.json" <<'PYEOF' || fail "--layers: the layers' bytes"
import json, sys
a, b = (json.load(open(p))["layers"] for p in sys.argv[1:3])
assert [l["name"] for l in a] == ["tok", "blocks.0", "blocks.1", "blocks.2", "ln_f", "head"], a
assert sum(l["param_bytes"] for l in a) == sum(l["param_bytes"] for l in b)
# blocks.2 runs blocks 2-5: it returns what blocks.5 returns
assert a[3]["act_bytes"] == b[6]["act_bytes"]
PYEOF

# refusals: exit 1 and the reason
refused() { # refused NAME WORDS -- ARGS...
    local name=$1 words=$2
    shift 3
    checks=$((checks + 1))
    out=$("$PIPETOP" profile "$@" --out "$tmp/x.json" 2>&1)
    local rc=$?
    [ $rc -ne 0 ] || { fail "$name: not refused"; return; }
    grep -qF -- "$words" <<<"$out" || fail "$name: '$out' lacks '$words'"
    [ ! -e "$tmp/x.json" ] || fail "$name: wrote a profile"
}
refused "no such module" "cannot import nosuch: No module named 'nosuch'" -- \
    --torch nosuch:f --input 3 --batch 1
refused "no such factory" "gpt_model has no attribute 'nope'" -- \
    --torch gpt_model:nope --input 16 --batch 1
refused "no such layer" "layer 'blocks.9': no such submodule" -- \
    --torch gpt_model:gpt --input 16 --tokens 64 --batch 1 --layers tok,blocks.9
refused "a bad clock" '--clock "sundial": wall or cpu' -- \
    --torch gpt_model:gpt --input 16 --batch 1 --clock sundial
refused "no --input" '--torch needs --input SHAPE and --batch B' -- --torch gpt_model:gpt --batch 1
summary

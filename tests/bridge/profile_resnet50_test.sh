#!/bin/bash
# `pipetop profile --torch torchvision.models:resnet50 --input 3,224,224
# --batch 8` as issue 26 asks (docs/torch.md): parameter bytes equal torch's
# sum exactly, each layer's output bytes its tensor's size, the per-layer
# times within 25 % of a whole forward+backward timed apart, and DAPPLE plans
# it on dgx1-v100-x8 (profile_torch_lib.sh). One timed repeat after a warm-up
# on both sides (resnet50 at batch 8 is a few CPU seconds a pass; the CPU
# clock of one thread keeps one repeat steady). On the CPU about 25 s of CPU
# time (one torch thread): ctest label "long" (ctest -LE long leaves it out).
. "$(dirname "$0")/bridge_lib.sh"
. "$(dirname "$0")/profile_torch_lib.sh"
if ! "$PY" -c 'import torchvision' 2>/dev/null; then
    echo "FAIL: $PY cannot import torchvision: install python3-torchvision" >&2
    exit 1
fi
profile_and_check resnet50 torchvision.models:resnet50 3,224,224 8 0 1
summary

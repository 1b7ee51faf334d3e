#!/bin/bash
# `cmake --install` into a temporary prefix, the prefix then moved elsewhere
# (so nothing may depend on the path it was installed to), and the installed
# programs run from a folder outside the source tree with no environment
# (env -i PATH=/usr/bin:/bin): `pipetop plan` and `pipetop sim` on shipped
# profiles and topologies given by name, a 2-stage `pipetop run --iters 3`
# that really trains 3 steps on agents started from the installed bin/, its
# record exported with a shipped theme, and
# the demo's lookups (its model, topology and device by name; the console
# itself in tmux when tmux is there). The installed programs must find their
# data in the prefix and nowhere else: with the prefix's models/ gone a model
# lookup fails, and with only bin/ copied $PIPETOP_DATA is what finds it.
# Where the build has the CUDA module, it is installed under lib/pipetop and
# the moved programs load it from there (bin/ alone says it is missing).
set -u
BUILD="${PT_BUILD_DIR:?}"
tmp=$(mktemp -d /tmp/pipetop-install.XXXXXX)
TM_SOCK="ptinst$$"
cleanup() {
    tmux -L "$TM_SOCK" kill-server 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

if ! out=$(cmake --install "$BUILD" --prefix "$tmp/first" 2>&1); then
    echo "FAIL: cmake --install: $out" >&2
    exit 1
fi
mv "$tmp/first" "$tmp/prefix"
P="$tmp/prefix"
for f in bin/pipetop bin/pipetop-agent share/pipetop/models/fmnist-mlp.json \
    share/pipetop/devices/cpu-local.json share/pipetop/topologies/local-cpu-4.json \
    share/pipetop/themes/dark.theme share/pipetop/profiles/vgg16.json \
    share/pipetop/bridge/pipetop_torch/__init__.py \
    share/doc/pipetop/architecture.md share/doc/pipetop/README.md; do
    [ -e "$P/$f" ] || fail "not installed: $f"
done
mkdir -p "$tmp/work"
# the CUDA module, where the build made one, beside the programs' lib/ and
# found there by the moved programs (a load error would name it)
if [ -e "$BUILD/libpt_cuda.so" ]; then
    mod=$(find "$P" -name libpt_cuda.so)
    [ -n "$mod" ] && [ "${mod#"$P"/lib}" != "$mod" ] || fail "not installed under lib/: libpt_cuda.so"
fi

# in_work CMD...: CMD in the work folder with an empty environment
in_work() {
    (cd "$tmp/work" && env -i PATH=/usr/bin:/bin "$@")
}

# plan and sim, shipped files by name
out=$(in_work "$P/bin/pipetop" plan --planner dapple --profile vgg16 --topology dgx1-v100-x8 \
    --batch 1024 --out plan.json 2>&1) || fail "plan: $out"
[ -s "$tmp/work/plan.json" ] || fail "plan: no plan.json written"
grep -q '"stages"' "$tmp/work/plan.json" 2>/dev/null || fail "plan: plan.json has no stages"
out=$(in_work "$P/bin/pipetop" sim --plan plan.json --profile vgg16 --topology dgx1-v100-x8 2>&1) ||
    fail "sim: $out"
grep -qE '^iteration +[0-9.]+ ms' <<<"$out" || fail "sim: no iteration time in: $out"

# a 2-stage run of 3 iterations on synthetic data, agents from the installed bin/
out=$(in_work timeout 300 "$P/bin/pipetop" run --stages 2 --schedule 1f1b-flush --microbatches 2 \
    --model fmnist-mlp --data synthetic --iters 3 --json 2>&1) || fail "run: exit $?: $out"
steps=$(grep -c '^{"event":"step"' <<<"$out")
[ "$steps" -eq 3 ] || fail "run: $steps step events, want 3: $out"
grep -q '^{"event":"step","step":2,"loss":[0-9]' <<<"$out" || fail "run: no loss at step 2"
summary=$(grep '^{"event":"summary"' <<<"$out" | tail -n1)
grep -q '"steps_measured":2[,}]' <<<"$summary" ||
    fail "run: summary does not report steps 1..2 measured: $summary"
rec=$(ls "$tmp"/work/runs/*/run.ndjson 2>/dev/null | head -n1)
[ -n "$rec" ] && grep -q '"type":"metrics".*"step":2,' "$rec" ||
    fail "run: no run record under the work folder with metrics of step 2"

# the run exported as SVG with a shipped theme (themes/ found in the prefix)
if [ -n "$rec" ]; then
    out=$(in_work "$P/bin/pipetop" export "$rec" --svg t.svg --theme okabe-ito 2>&1) ||
        fail "export with theme okabe-ito: $out"
    grep -q '<svg' "$tmp/work/t.svg" 2>/dev/null || fail "export: no SVG written"
fi

# the demo: its help, and its model, topology and device found by name
out=$(in_work "$P/bin/pipetop" demo --help 2>&1) || fail "demo --help: $out"
grep -q -- '--view' <<<"$out" || fail "demo --help lists no --view"
out=$(in_work "$P/bin/pipetop" profile --analytic --model fmnist-mlp-deep --device cpu-local \
    --batch 8 2>&1) || fail "the demo's model/device lookup: $out"
out=$(in_work "$P/bin/pipetop" plan --planner dp --profile resnet18 --topology local-cpu-4 \
    --batch 64 2>&1) || fail "the demo's topology local-cpu-4 by name: $out"
grep -q "on 'local-cpu-4'" <<<"$out" || fail "plan on local-cpu-4 does not name it: $out"
if command -v tmux >/dev/null; then
    LANG=C.UTF-8 tmux -L "$TM_SOCK" -f /dev/null new-session -d -s t -x 100 -y 30 \
        "cd '$tmp/work' && env -i PATH=/usr/bin:/bin LANG=C.UTF-8 TERM=xterm-256color \
         '$P/bin/pipetop' demo --data synthetic --run-dir demo-run; echo EXITED \$?; sleep 600"
    seen=0
    for _ in $(seq 1200); do # up to 120 s for 4 agents to register and train
        if tmux -L "$TM_SOCK" capture-pane -p -t t | grep -qE 'live gen 1, 4 agents \| step [0-9]+'; then
            seen=1
            break
        fi
        tmux -L "$TM_SOCK" capture-pane -p -t t | grep -q '^EXITED' && break
        sleep 0.1
    done
    [ "$seen" -eq 1 ] || fail "installed demo did not train: $(tmux -L "$TM_SOCK" capture-pane -p -t t)"
    tmux -L "$TM_SOCK" send-keys -t t q
    for _ in $(seq 300); do
        tmux -L "$TM_SOCK" capture-pane -p -t t | grep -q '^EXITED' && break
        sleep 0.1
    done
    tmux -L "$TM_SOCK" capture-pane -p -t t | grep -q '^EXITED 0' || fail "installed demo: q did not exit 0"
fi

# the data comes from the prefix: without its models/ the model is not found ...
cp -r "$P" "$tmp/nomodels"
rm -rf "$tmp/nomodels/share/pipetop/models"
mkdir "$tmp/nomodels/share/pipetop/models"
if out=$(in_work "$tmp/nomodels/bin/pipetop" profile --analytic --model fmnist-mlp --device cpu-local \
    --batch 8 2>&1); then
    fail "a model was found although the prefix has none: $out"
fi
grep -q 'not found' <<<"$out" || fail "no 'not found' for the missing model: $out"
# ... and bin/ alone finds it through $PIPETOP_DATA
mkdir -p "$tmp/bare/bin"
cp "$P/bin/pipetop" "$tmp/bare/bin/"
out=$(in_work "$tmp/bare/bin/pipetop" profile --analytic --model fmnist-mlp --device cpu-local \
    --batch 8 2>&1) && fail "bin/ alone found a model without PIPETOP_DATA: $out"
out=$(in_work env PIPETOP_DATA="$P/share/pipetop" "$tmp/bare/bin/pipetop" profile --analytic \
    --model fmnist-mlp --device cpu-local --batch 8 2>&1) || fail "PIPETOP_DATA not used: $out"

# --device cuda: the installed module loads (the error, if any, is the GPU's, in
# CUDA's words where it cannot count devices);
# bin/ alone has no module and says where it looked
if [ -e "$BUILD/libpt_cuda.so" ]; then
    out=$(in_work "$P/bin/pipetop" profile --model fmnist-mlp --device cuda --batch 8 \
        --out cuda.json 2>&1) ||
        grep -qE 'cuda: no GPU visible|cuda: no device|cuda: cudaGetDeviceCount: ' <<<"$out" ||
        fail "installed pipetop --device cuda: $out"
    out=$(in_work env PIPETOP_DATA="$P/share/pipetop" "$tmp/bare/bin/pipetop" profile \
        --model fmnist-mlp --device cuda --batch 8 --out cuda.json 2>&1) &&
        fail "bin/ alone opened cuda without its module: $out"
    grep -q 'the CUDA module libpt_cuda.so is not installed' <<<"$out" ||
        fail "bin/ alone: no clear error for the missing module: $out"
fi

[ "$failures" -eq 0 ] || exit 1
echo "install: all checks passed"

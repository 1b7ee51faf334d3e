#!/bin/bash
# A new layer kind is one file and one line of the list of kinds (issue 22;
# docs/architecture.md, "Layer kinds"). The build makes pipetop-layer-toy:
# every product source compiled again, unchanged, with protocol/layer_kinds.h
# replaced by a copy holding one more line, X(TOY_BIAS, toy_bias, ...), and
# one more file, tests/tui/layer_toy.c, which defines the kind's facts and
# compute (CMakeLists.txt, "a new layer kind"). Copying the list rather than
# adding a hook to the product keeps the product free of test switches: the
# copy comes first on the include path, so every source that includes the
# list sees the line, exactly as an edit of the list would.
#
# On a model using the kind, three paths must know it, and this fails if any
# does not:
#  - `pipetop profile --analytic`: the layer's row has the facts' parameters
#    (16 floats), FLOPs (one per element), its split-backward hold (it has
#    parameters) and its two kernels (a forward above two launches);
#  - `pipetop train`: 60 steps, every loss finite, the last ten steps' mean
#    below the first ten's;
#  - checkpoints: the layer's "bias" tensor [16] is saved after 14 steps
#    (and differs from its initial values); a load of that checkpoint and a
#    re-save without training gives every tensor file byte for byte. (6
#    steps and 8 more from a checkpoint do not give 14 steps' files on the
#    synthetic data, for the shipped models either: its order is not
#    resumed, so that is not asked here.)
# The product's pipetop is checked to refuse the kind, so what passes is the
# one file and the one line.
set -u
TOY="${PT_BUILD_DIR:?}/pipetop-layer-toy"
PIPETOP="${PT_BUILD_DIR}/pipetop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
[ -x "$TOY" ] || fail "$TOY was not built"
cat >toy.json <<'JSON'
{"v": 1, "name": "toy", "input": [8], "layers": [
  {"type": "linear", "out": 16}, {"type": "toy_bias"}, {"type": "relu"},
  {"type": "linear", "out": 4}, {"type": "softmax_xent", "classes": 4}]}
JSON

# the product does not know it
if "$PIPETOP" profile --analytic --model toy.json --device a100-40gb --batch 8 --json \
    >/dev/null 2>err0.txt; then
    fail "the product's pipetop accepts toy_bias: the test proves nothing"
fi
grep -q 'unknown layer type "toy_bias"' err0.txt || fail "pipetop: $(cat err0.txt)"

# 1. the analytic profile
"$TOY" profile --analytic --model toy.json --device a100-40gb --batch 8 --json >prof.json \
    2>err1.txt || fail "profile --analytic: $(cat err1.txt)"
python3 - prof.json <<'PY' || exit 1
import json, sys
p = json.load(open(sys.argv[1]))
row = [l for l in p["layers"] if l["name"] == "toy_bias1"]
if len(row) != 1:
    sys.exit("FAIL: profile: no row toy_bias1 in %s" % [l["name"] for l in p["layers"]])
r, b, launch_ms = row[0], p["microbatch"], p["roofline"]["launch_us"] / 1000
want = {"param_bytes": 16 * 4, "flops": 16 * b, "keep_bytes": 16 * 4 * b, "saved_bytes": 0}
bad = {k: (r.get(k), v) for k, v in want.items() if r.get(k) != v}
if bad:
    sys.exit("FAIL: profile: toy_bias1 (got, want): %s" % bad)
if not r["fwd_ms"] > 2 * launch_ms:
    sys.exit("FAIL: profile: toy_bias1 fwd_ms %g is not above two launches (%g ms)"
             % (r["fwd_ms"], 2 * launch_ms))
print("profile: toy_bias1 %s" % {k: r[k] for k in want})
PY

# 2. training
train() {
    "$TOY" train --model toy.json --data synthetic --batch 16 --eval-samples 0 --json "$@"
}
train --steps 60 --log-every 1 >train.json 2>err2.txt || fail "train: $(cat err2.txt)"
python3 - train.json <<'PY' || exit 1
import json, math, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"event":"step"' in l]
loss = [s["loss"] for s in steps]
if len(loss) != 60 or not all(math.isfinite(x) for x in loss):
    sys.exit("FAIL: train: %d step losses, want 60 finite: %s" % (len(loss), loss))
first, last = sum(loss[:10]) / 10, sum(loss[-10:]) / 10
if not last < first:
    sys.exit("FAIL: train: the last 10 steps' loss %.4f is not below the first 10's %.4f"
             % (last, first))
print("train: loss %.4f over the first 10 steps, %.4f over the last 10" % (first, last))
PY

# 3. checkpoints
train --steps 14 --save whole >/dev/null 2>err3.txt || fail "train --save: $(cat err3.txt)"
python3 - whole/index.json <<'PY' || exit 1
import json, sys
ix = json.load(open(sys.argv[1]))
layer = [l for l in ix["layers"] if l["name"] == "toy_bias1"]
names = [(t["name"], t["shape"]) for t in layer[0]["tensors"]] if layer else []
if ("bias", [16]) not in names:
    sys.exit("FAIL: checkpoint: toy_bias1 has no tensor bias [16]: %s" % names)
PY
train --steps 0 --save init >/dev/null 2>err4.txt || fail "train --steps 0: $(cat err4.txt)"
train --steps 0 --load whole --save again >/dev/null 2>err5.txt ||
    fail "train --steps 0 --load: $(cat err5.txt)"
n=0
for f in whole/*.f32; do
    b=$(basename "$f")
    cmp -s "$f" "again/$b" || fail "checkpoint: $b differs after a load and a re-save"
    n=$((n + 1))
done
[ -f whole/layer001.bias.f32 ] || fail "checkpoint: no file for toy_bias1's bias: $(ls whole)"
# what was re-saved is what was loaded, not the initial values again
cmp -s whole/layer001.bias.f32 init/layer001.bias.f32 &&
    fail "checkpoint: toy_bias1's bias after 14 steps equals its initial values"
echo "layer_kind_test: ok (checkpoints: $n tensor files equal)"

#!/bin/bash
# A run's files are its user's alone (issue 25, item 6): after `pipetop run`
# with checkpoints, every folder under the run folder and the checkpoint
# folder is 0700 and every file 0600 (record, plan, profile, agents' logs,
# checkpoint tensors and index, keys), whatever the caller's umask; an
# export is 0600 too; a public key `pipetop keys` writes stays 0644.
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
cd "$tmp" || exit 1
umask 022 # a usual umask: pipetop must not depend on the caller's
timeout 300 "$PIPETOP" run --stages 2 --schedule gpipe --microbatches 2 \
    --model "$PT_SOURCE_DIR/tests/data/run/tiny-mlp.json" --data synthetic --iters 4 \
    --checkpoint-every 2 --run-dir runs/a --headless >run.out 2>run.err ||
    fail "run: exit $?: $(tail -3 run.err)"
timeout 60 "$PIPETOP" export runs/a --trace trace.json >/dev/null 2>&1 || fail "export: exit $?"
n=0
while IFS= read -r -d '' f; do
    n=$((n + 1))
    m=$(stat -c %a "$f")
    if [ -d "$f" ]; then
        [ "$m" = 700 ] || fail "folder $f is $m, want 700"
    else
        [ "$m" = 600 ] || fail "file $f is $m, want 600"
    fi
done < <(find runs trace.json -mindepth 0 -print0)
[ "$n" -ge 8 ] || fail "only $n paths under runs/: $(find runs | head)"
find runs -name '*.f32' | grep -q . || fail "no checkpoint tensor under runs/"
timeout 60 "$PIPETOP" keys --out keys/c >/dev/null || fail "keys"
[ "$(stat -c %a keys/c.pub)" = 644 ] || fail "public key $(stat -c %a keys/c.pub), want 644"
[ "$(stat -c %a keys/c.key)" = 600 ] || fail "secret key $(stat -c %a keys/c.key), want 600"
if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "run_modes_test: ok ($n paths)"

#!/bin/bash
# `pipetop validate KIND FILE` on every bad plan (exit 1, the expected message
# on stderr, nothing on stdout), on one bad file of each other format, and on
# the shipped files (exit 0, "FILE: ok").
set -u
cd "${PT_SOURCE_DIR:?}" || exit 1
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
failures=0
checks=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# expect_bad KIND FILE: exit status 1 and the .expect text in stderr.
expect_bad() {
    local kind=$1 file=$2 want out err rc
    want=$(head -n1 "${file%.json}.expect")
    out=$(mktemp) err=$(mktemp)
    "$PIPETOP" validate "$kind" "$file" >"$out" 2>"$err"
    rc=$?
    checks=$((checks + 1))
    [ "$rc" -eq 1 ] || fail "$kind $file: exit status $rc, want 1"
    grep -qF -- "$want" "$err" || fail "$kind $file: stderr '$(cat "$err")' lacks '$want'"
    grep -qF -- "$file: " "$err" || fail "$kind $file: stderr does not name the file"
    [ -s "$out" ] && fail "$kind $file: wrote to stdout: $(cat "$out")"
    rm -f "$out" "$err"
}

expect_ok() {
    local kind=$1 file=$2 out rc
    out=$("$PIPETOP" validate "$kind" "$file" 2>&1)
    rc=$?
    checks=$((checks + 1))
    [ "$rc" -eq 0 ] || fail "$kind $file: exit status $rc ($out), want 0"
    [ "$out" = "$file: ok" ] || fail "$kind $file: printed '$out'"
}

n=0
for f in tests/data/bad/plan/*.json; do
    expect_bad plan "$f"
    n=$((n + 1))
done
[ "$n" -ge 8 ] || fail "only $n bad plans"
expect_bad plan tests/data/bad/plan/device_twice.json
expect_bad model tests/data/bad/model/unknown_type.json
expect_bad profile tests/data/bad/profile/negative_fwd.json
expect_bad topology tests/data/bad/topology/zero_bandwidth.json

for f in models/*.json; do expect_ok model "$f"; done
for f in topologies/*.json; do expect_ok topology "$f"; done

# a bad file of the wrong kind is refused too: a model is not a plan
expect_bad_kind() {
    local rc
    "$PIPETOP" validate plan models/fmnist-mlp.json >/dev/null 2>&1
    rc=$?
    checks=$((checks + 1))
    [ "$rc" -eq 1 ] || fail "a model validated as a plan: exit status $rc, want 1"
}
expect_bad_kind

# usage errors exit 2
"$PIPETOP" validate >/dev/null 2>&1
[ $? -eq 2 ] || fail "no arguments: want exit status 2"
"$PIPETOP" validate widget models/fmnist-mlp.json >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown kind: want exit status 2"
"$PIPETOP" validate --help | grep -q "usage: pipetop validate" || fail "--help"
"$PIPETOP" --help | grep -q "validate" || fail "validate missing from pipetop --help"
checks=$((checks + 4))

if [ "$failures" -ne 0 ]; then
    echo "$((checks - failures)) passed, $failures failed"
    exit 1
fi
echo "$checks passed, 0 failed"

#!/bin/bash
# `pipetop keys --out DIR/NAME`: a pair whose secret file is mode 0600 and
# whose public file is readable, both in pipetop's key-file format; an
# existing key is not replaced without --force; no --out is a usage error.
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
out=$("$PIPETOP" keys --out "$tmp/sub/console" 2>&1) || fail "keys: exit $?: $out"
[ "$(stat -c %a "$tmp/sub/console.key")" = 600 ] || fail "secret file mode $(stat -c %a "$tmp/sub/console.key")"
[ "$(stat -c %a "$tmp/sub/console.pub")" = 644 ] || fail "public file mode"
pub=$(awk '$1 == "public" {print $2}' "$tmp/sub/console.pub")
[ ${#pub} -eq 40 ] || fail "public key '$pub'"
grep -qF -- "public $pub" "$tmp/sub/console.key" || fail "the pair's public key differs"
grep -q '^secret ' "$tmp/sub/console.pub" && fail "the public file holds a secret"
grep -qF -- "$pub" <<<"$out" || fail "the public key is not printed"
before=$(cat "$tmp/sub/console.key")
"$PIPETOP" keys --out "$tmp/sub/console" >/dev/null 2>"$tmp/err" && fail "replaced a key"
grep -q "exists" "$tmp/err" || fail "no 'exists' message: $(cat "$tmp/err")"
[ "$(cat "$tmp/sub/console.key")" = "$before" ] || fail "the key changed"
"$PIPETOP" keys --out "$tmp/sub/console" --force >/dev/null || fail "--force"
[ "$(cat "$tmp/sub/console.key")" != "$before" ] || fail "--force kept the old key"
"$PIPETOP" keys >/dev/null 2>&1
[ $? -eq 2 ] || fail "no --out: want exit 2"
if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "keys_test: ok"

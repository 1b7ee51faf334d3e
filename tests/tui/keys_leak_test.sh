#!/bin/bash
# No error about a key file or an allow-list shows what the file holds
# (issue 25, item 4): a secret with a misspelt field, a secret file others
# may read, a key file or allow-list that is a password-style file (a copy
# of a shadow line, and /etc/shadow itself through a link when it exists),
# a directory, a file of another user, and an allow-list naming a key file
# whose text is a foreign line. For each, `pipetop run` fails (exit 1) and
# its stderr holds no 6-byte piece of the secret or of the foreign file.
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
"$PIPETOP" keys --out "$tmp/c" >/dev/null || fail "pipetop keys"
secret=$(awk '$1 == "secret" {print $2}' "$tmp/c.key")
[ ${#secret} -eq 40 ] || fail "no secret in $tmp/c.key"

# leaks FILE_OF_SECRET_TEXT STDERR: a 6-byte window of any line of the first
# found in the second
leaks() {
    local text=$1 err=$2 line i
    while IFS= read -r line; do
        for ((i = 0; i + 6 <= ${#line}; i++)); do
            grep -qF -- "${line:i:6}" "$err" && {
                echo "'${line:i:6}' of \"$line\""
                return 0
            }
        done
    done <"$text"
    return 1
}

# expect_refused NAME SECRET-TEXT-FILE ARGS...: run fails naming no secret
expect_refused() {
    local name=$1 text=$2
    shift 2
    timeout 60 "$PIPETOP" run --external --model "$PT_SOURCE_DIR/tests/data/run/tiny-mlp.json" --data synthetic \
        --stages 1 --schedule gpipe --microbatches 1 --iters 1 --run-dir "$tmp/run-$name" "$@" >/dev/null 2>"$tmp/$name.err"
    local rc=$?
    [ "$rc" -eq 1 ] || fail "$name: exit $rc, want 1: $(head -c 300 "$tmp/$name.err")"
    [ -s "$tmp/$name.err" ] || fail "$name: no message"
    local what
    if what=$(leaks "$text" "$tmp/$name.err"); then
        fail "$name: stderr shows $what: $(head -c 300 "$tmp/$name.err")"
    fi
}
printf '%s\n' "$secret" >"$tmp/secret.txt"

# a secret key file with a misspelt field
sed 's/^secret /secrets =/' "$tmp/c.key" >"$tmp/misspelt.key"
chmod 600 "$tmp/misspelt.key"
expect_refused misspelt "$tmp/secret.txt" --key "$tmp/misspelt.key"
grep -qE 'line [0-9]+: (unknown field|not "WORD VALUE")' "$tmp/misspelt.err" || fail "misspelt: no line and field: $(cat "$tmp/misspelt.err")"
# a secret readable by others
cp "$tmp/c.key" "$tmp/open.key"
chmod 644 "$tmp/open.key"
expect_refused open "$tmp/secret.txt" --key "$tmp/open.key"
grep -q 'chmod 600' "$tmp/open.err" || fail "open: no chmod advice: $(cat "$tmp/open.err")"
# a shadow-style file as the key and as the allow-list
printf 'root:$y$j9T$Qm8aSecretSaltXyz$AbCdEfGhIjKlMnOpQrStUvWxYz0123:19000:0:99999:7:::\n' \
    >"$tmp/shadow"
chmod 600 "$tmp/shadow"
expect_refused shadow-key "$tmp/shadow" --key "$tmp/shadow"
expect_refused shadow-allow "$tmp/shadow" --key "$tmp/c.key" --allow "$tmp/shadow"
grep -q 'shadow: line 1: not a Z85 public key' "$tmp/shadow-allow.err" ||
    fail "shadow-allow: no file and line: $(cat "$tmp/shadow-allow.err")"
# an allow-list naming a file whose first word is foreign
printf 'hunter2word\n' >"$tmp/foreign"
printf 'foreign\n' >"$tmp/allow-names"
expect_refused foreign-allow "$tmp/foreign" --key "$tmp/c.key" --allow "$tmp/allow-names"
# a directory as the key
mkdir "$tmp/dir.key"
expect_refused dir "$tmp/secret.txt" --key "$tmp/dir.key"
if [ -r /etc/shadow ]; then
    ln -s /etc/shadow "$tmp/link.key"
    ln -s /etc/shadow "$tmp/link.allow"
    expect_refused link-key /etc/shadow --key "$tmp/link.key"
    expect_refused link-allow /etc/shadow --key "$tmp/c.key" --allow "$tmp/link.allow"
fi
# a key file of another user (as root: chown it to nobody)
if [ "$(id -u)" -eq 0 ]; then
    cp "$tmp/c.key" "$tmp/theirs.key"
    chown nobody "$tmp/theirs.key"
    expect_refused theirs "$tmp/secret.txt" --key "$tmp/theirs.key"
    grep -q 'not by this user' "$tmp/theirs.err" || fail "theirs: $(cat "$tmp/theirs.err")"
fi
if [ "$failures" -ne 0 ]; then
    echo "$failures failures" >&2
    exit 1
fi
echo "keys_leak_test: ok"

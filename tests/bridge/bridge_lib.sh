# Shared by the PyTorch bridge's tests (tests/bridge/*_test.sh): the
# interpreter with torch (Debian's python3-torch, which scripts/setup.sh test
# installs), the programs, a scratch folder, and failure counting.
set -u
cd "${PT_SOURCE_DIR:?}" || exit 1
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
PY="${PIPETOP_PYTHON:-/usr/bin/python3}"
export PYTHONPATH="$PT_SOURCE_DIR/bridge:$PT_SOURCE_DIR/tests/bridge"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# check NAME COMMAND...: runs COMMAND, a failure if it exits non-zero
check() {
    local name=$1
    shift
    checks=$((checks + 1))
    if ! "$@" >"$tmp/check.out" 2>&1; then
        fail "$name"
        tail -n 20 "$tmp/check.out" >&2
    fi
}

if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "FAIL: $PY cannot import torch: install python3-torch (scripts/setup.sh test does)" >&2
    exit 1
fi

# bridge_tmux: the console's tmux helpers too (tests/tui/tmux_lib.sh); at
# the end the tmux servers go, and the training in process group $train_pid
# when a test started one (set -m) and left it running
train_pid=""
bridge_tmux() {
    . "$PT_SOURCE_DIR/tests/tui/tmux_lib.sh"
    trap bridge_end EXIT
}
bridge_end() {
    [ -n "$train_pid" ] && kill -- "-$train_pid" 2>/dev/null
    rm -rf "$tmp"
    tm_cleanup
}

summary() {
    echo "$checks checks, $failures failures"
    [ "$failures" -eq 0 ]
}

#!/bin/bash
# A console waiting for its agents ends at the first SIGTERM (issue 25,
# item 1: `run --external` ignored the first one while waiting and only a
# second ended it): exit 128+15 within seconds, saying why.
set -u
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
"$PIPETOP" run --external --stages 2 --schedule gpipe --microbatches 2 \
    --model "${PT_SOURCE_DIR:?}/tests/data/run/tiny-mlp.json" --data synthetic --iters 3 \
    --run-dir r >o 2>e &
for ((i = 0; i < 1200; i++)); do
    grep -q -- '--telemetry' o e 2>/dev/null && break
    sleep 0.1
done
pid=$(tr -d '\n' <r/.lock)
kill -TERM "$pid"
t0=$SECONDS
for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
    echo "FAIL: still waiting $((SECONDS - t0)) s after one SIGTERM" >&2
    exit 1
fi
wait
grep -q 'interrupted by SIGTERM while waiting for the agents' e || {
    echo "FAIL: no reason given: $(tail -2 e)" >&2
    exit 1
}
echo "run_wait_signal_test: ok"

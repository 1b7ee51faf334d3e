#!/bin/bash
# scripts/gpu-check.sh without a GPU (issue 30):
# - its parsing (--parse, the function its table is made with) on output
#   captured from `ctest -L gpu -V` (tests/data/gpu-check/ctest-v-dryrun.log,
#   every line "N: "-prefixed), with and without that prefix and with the
#   GPU run's tag: every section full, the same lines every way; a FAIL line,
#   or a section without lines, fails it and names the section;
# - its steps, on a build folder of stand-in programs: a full table and PASS
#   when all is well; a test program that hangs is stopped at its timeout and
#   named while the later steps still run; a NaN loss fails the check; steps
#   past the budget are not started. Each run must end within its bounds;
# - every GPU test ctest registers is bounded at 300 s or less.
set -u
SRC="${PT_SOURCE_DIR:?}"
check="$SRC/scripts/gpu-check.sh"
log="$SRC/tests/data/gpu-check/ctest-v-dryrun.log"
tmp=$(mktemp -d /tmp/pipetop-gpucheck.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# ---- parsing ----------------------------------------------------------------
want=$(grep -cE '^[0-9]+: DRY-RUN (layer|op|optim|pipeline|nccl|memory) ' "$log")
[ "$want" -ge 60 ] || fail "the captured log has only $want result lines"
out=$("$check" --parse "$log") || fail "--parse of the captured ctest -V log failed: $out"
for kind in layer op optim pipeline nccl memory; do
    grep -q "^  $kind " <<<"$out" || fail "no $kind lines parsed from ctest -V output"
done
grep -q MISSING <<<"$out" && fail "a section is missing: $out"
got=$(grep -c '^  ' <<<"$out")
[ "$got" -eq "$want" ] || fail "$got lines parsed of $want"

sed -E 's/^[0-9]+: //' "$log" >"$tmp/plain.log"
grep -qE '^[0-9]+: ' "$tmp/plain.log" && fail "the prefix was not removed"
plain=$("$check" --parse "$tmp/plain.log") || fail "--parse without the prefix failed"
[ "$plain" = "$out" ] || fail "with and without ctest's prefix the tables differ"

sed 's/: DRY-RUN /: GPU-CHECK /' "$log" >"$tmp/gpu.log"
gpu=$("$check" --parse "$tmp/gpu.log") || fail "--parse of GPU-CHECK lines failed: $gpu"
[ "$gpu" = "$out" ] || fail "GPU-CHECK lines parse differently from DRY-RUN lines"

awk '!done && / PASS \(unrounded/ { sub(/ PASS /, " FAIL "); done = 1 } 1' "$log" >"$tmp/fail.log"
"$check" --parse "$tmp/fail.log" >"$tmp/fail.out" && fail "a FAIL line passed --parse"
grep -q ' FAIL ' "$tmp/fail.out" || fail "the FAIL line is not in the table"

grep -v ' DRY-RUN nccl ' "$log" >"$tmp/nonccl.log"
"$check" --parse "$tmp/nonccl.log" >"$tmp/nonccl.out" && fail "a log without nccl lines passed"
grep -q "MISSING: no DRY-RUN nccl lines" "$tmp/nonccl.out" || fail "the empty section is not named: $(cat "$tmp/nonccl.out")"

# ---- steps, on stand-in programs --------------------------------------------
fake="$tmp/build"
mkdir -p "$fake"
# the module: any shared library, for ldd
cp "$(ldd /bin/sh | awk '/libc\.so/ { print $3 }')" "$fake/libpt_cuda.so"
for t in layers pipeline nccl memory; do
    kinds=$([ "$t" = layers ] && echo "layer|op|optim" || echo "$t")
    sed -E 's/^[0-9]+: //' "$log" | grep -E "^DRY-RUN ($kinds) " >"$fake/$t.lines"
    cat >"$fake/${t}_gputest_dryrun" <<EOF
#!/bin/sh
[ "\${STUB_HANG:-}" = "$t" ] && exec sleep 300
cat "$fake/$t.lines"
EOF
    cat >>"$fake/CTestTestfile.cmake" <<EOF
add_test(${t}_gputest "/bin/sh" "-c" "echo SKIPPED; exit 77")
set_tests_properties(${t}_gputest PROPERTIES LABELS "gpu" SKIP_RETURN_CODE "77")
EOF
done
cat >"$fake/pipetop" <<'EOF'
#!/bin/sh
# pipetop's commands as gpu-check calls them; the loss of every step is $STUB_LOSS
cmd=$1
shift
out="" rundir=""
while [ $# -gt 0 ]; do
    [ "$1" = --out ] && out=$2
    [ "$1" = --run-dir ] && rundir=$2
    shift
done
case $cmd in
profile | plan) echo '{}' >"$out" ;;
sim) echo '{"iteration_ms":20.0}' ;;
run)
    mkdir -p "$rundir"
    for d in 0 1; do
        echo "{\"kind\":\"recv\",\"msg\":{\"type\":\"register\",\"device\":$d,\"device_name\":\"stub GPU $d\",\"backend\":\"cuda\"}}"
    done >"$rundir/run.ndjson"
    ;;
train)
    for s in 1 2 3 4 5 6 7 8 9 10 11 12; do
        echo "{\"event\":\"step\",\"step\":$s,\"loss\":${STUB_LOSS:-5.5},\"samples_per_s\":400}"
    done
    ;;
esac
EOF
chmod +x "$fake"/*_dryrun "$fake/pipetop"

t0=$SECONDS
timeout 120 "$check" --dry-run --no-build --build "$fake" >"$tmp/good.out" 2>&1 ||
    fail "all steps well, gpu-check failed: $(cat "$tmp/good.out")"
[ $((SECONDS - t0)) -le 30 ] || fail "the good run took $((SECONDS - t0)) s"
grep -q "result: PASS" "$tmp/good.out" || fail "good run: no PASS"
grep -qE "MISSING|\(no .* lines" "$tmp/good.out" && fail "good run: a section is empty: $(cat "$tmp/good.out")"
grep -q "12 steps, loss 5.5 -> 5.5, all finite" "$tmp/good.out" || fail "good run: no loss line"
grep -q "2 agents on: stub GPU 0,stub GPU 1; 4 steps done" "$tmp/good.out" ||
    fail "good run: no line of pipetop run on GPU agents"

# a hanging test program: stopped at its timeout (4 s here), named, the rest still run
t0=$SECONDS
env STUB_HANG=pipeline STUB_LOSS=nan timeout 120 "$check" --dry-run --no-build --build "$fake" \
    --step-cap 4 >"$tmp/hang.out" 2>&1 && fail "a hang and a NaN loss passed"
[ $((SECONDS - t0)) -le 40 ] || fail "the run with a hang took $((SECONDS - t0)) s"
grep -q "pipeline .*TIMED OUT after 4 s" "$tmp/hang.out" || fail "the hang is not named: $(cat "$tmp/hang.out")"
grep -q "MISSING: no DRY-RUN pipeline lines" "$tmp/hang.out" || fail "no missing pipeline section"
grep -qE "^  (nccl|memory|train) .* ok$" "$tmp/hang.out" || fail "the steps after the hang did not run"
grep -q "loss not finite or off: step 1: nan" "$tmp/hang.out" || fail "the NaN loss is not reported: $(cat "$tmp/hang.out")"
grep -q "result: FAIL" "$tmp/hang.out" || fail "hang run: no FAIL"

# a budget spent: later steps are not started
env STUB_HANG=layers timeout 120 "$check" --dry-run --no-build --build "$fake" --budget 6 \
    --step-cap 30 >"$tmp/budget.out" 2>&1 && fail "a spent budget passed"
# the layers step gets what is left of the 6 s when it starts: the preflight
# before it may take a second or two on a loaded machine (CI saw 5 s)
grep -qE "layers .*TIMED OUT after [3-6] s" "$tmp/budget.out" ||
    fail "layers not stopped at the budget: $(cat "$tmp/budget.out")"
grep -q "NOT RUN: the budget of 6 s is spent" "$tmp/budget.out" || fail "steps past the budget were started"

# every GPU test ctest knows is bounded at 300 s or less (its own TIMEOUT; the
# --timeout of a ctest command line does not apply to tests that set one)
BUILD="${PT_BUILD_DIR:-}"
if [ -n "$BUILD" ] && [ -e "$BUILD/libpt_cuda.so" ]; then
    timeouts=$(ctest --test-dir "$BUILD" -L gpu --show-only=json-v1 | tr -d ' \n' |
        grep -o '"name":"TIMEOUT","value":[0-9.]*' | grep -o '[0-9.]*$')
    [ "$(wc -w <<<"$timeouts")" -ge 4 ] || fail "ctest knows $(wc -w <<<"$timeouts") GPU test timeouts, want 4"
    for v in $timeouts; do
        awk -v v="$v" 'BEGIN { exit !(v > 0 && v <= 300) }' || fail "a GPU test's TIMEOUT is $v s"
    done
else
    echo "gpu-check: a build without the CUDA backend registers no GPU tests; their timeouts not checked"
fi

[ "$failures" -eq 0 ] || exit 1
echo "gpu-check: parsing and steps all checked"

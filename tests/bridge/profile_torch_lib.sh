# Shared by profile_torch_test.sh and profile_resnet50_test.sh (after
# bridge_lib.sh): profile_and_check NAME M:F SHAPE BATCH TOKENS REPEATS makes
# a profile with `pipetop profile --torch` (one torch thread, the process's CPU
# time: a shared machine's other work does not inflate it) and checks it
# against torch itself (profile_check.py: parameter bytes exactly, each
# layer's output bytes, per-layer times within 25 % of a whole
# forward+backward), then plans it with DAPPLE on dgx1-v100-x8. The timing is
# measured again, up to 3 times, only when its figure alone is out: on a
# loaded machine one period of other work can land in one of the two
# measurements; a per-layer sum that is off by itself stays off every time.
# The profile is left in $tmp/NAME.json.
profile_and_check() {
    local name=$1 module=$2 shape=$3 batch=$4 tokens=$5 repeats=$6 attempt ok=0
    local tok=()
    [ "$tokens" -gt 0 ] && tok=(--tokens "$tokens")
    checks=$((checks + 1))
    for attempt in 1 2 3; do
        if ! "$PIPETOP" profile --torch "$module" --input "$shape" "${tok[@]}" --batch "$batch" \
            --threads 1 --clock cpu --repeats "$repeats" --warmup 1 --out "$tmp/$name.json" \
            >"$tmp/$name.out" 2>&1; then
            cat "$tmp/$name.out" >&2
            break
        fi
        "$PY" tests/bridge/profile_check.py "$tmp/$name.json" "$module" "$shape" "$batch" \
            "$tokens" 1 "$repeats" cpu >"$tmp/$name.check" 2>&1
        local rc=$?
        cat "$tmp/$name.check"
        if [ $rc -eq 0 ]; then
            ok=1
            break
        fi
        # only the timing is measured again
        grep -q 'AssertionError: per-layer sum' "$tmp/$name.check" || break
        echo "$name: attempt $attempt: the timing is out (load $(cut -d' ' -f1 /proc/loadavg))"
    done
    [ $ok -eq 1 ] || fail "$name: the profile does not match torch (above)"
    check "$name: the origin says torch" grep -qE '"framework":[[:space:]]*"torch 1\.' \
        "$tmp/$name.json"
    check "$name: the origin names the factory" grep -qE "\"module\":[[:space:]]*\"$module\"" \
        "$tmp/$name.json"
    check "$name: dapple plans it on dgx1-v100-x8" "$PIPETOP" plan --planner dapple \
        --profile "$tmp/$name.json" --topology dgx1-v100-x8 --batch 64 --out "$tmp/$name-plan.json"
    check "$name: sim runs the plan" "$PIPETOP" sim --plan "$tmp/$name-plan.json" \
        --profile "$tmp/$name.json" --topology dgx1-v100-x8
}

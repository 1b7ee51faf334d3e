#!/bin/bash
# pipetop profile --plan: each stage of a plan measured whole (its layers in
# sequence in one net) alternating with its layers one by one, alone and
# with --beside (every stage replica at once, one process each).
#
# Property: a stage measured whole equals the sum of its layers measured in
# the same conditions. The noise stated: compared on each side's fastest of
# 20 rounds (the round least disturbed by other load: a loaded machine
# preempts a 2 ms stage far more often than a 0.3 ms layer, so medians are
# not comparable there), within 15 % for gpt-tiny's blocks (measured 1-6 %),
# 25 % with --beside (the other stage's process shares the caches and, on a
# loaded 2-core machine, the cores: +16 % seen once under ctest -j2).
# fmnist-mlp-deep's 17-layer stages cost 10-25 % more whole than their layers
# alone (cache: the whole stage's saved activations do not stay in cache),
# which is what in-place profiling is for: held to 50 % and to not being
# cheaper than its layers by more than 15 %.
# Also: the written profile's layers of a stage sum to the stage's whole
# median, and bad input is refused with the field named.
set -u
cd "${PT_SOURCE_DIR:?}" || exit 1
PIPETOP="${PT_BUILD_DIR:?}/pipetop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

plan() { # model layers cut
    printf '{"v":1,"model":"%s","layers":%d,"microbatch":{"size":16,"count":4},' "$1" "$2"
    printf '"schedule":{"kind":"dapple","policy":"A"},"optimizer":{"kind":"sgd","lr":0.02,'
    printf '"momentum":0.9,"weight_decay":0},"stages":[{"layers":[0,%d],"replicas":[0]},' "$3"
    printf '{"layers":[%d,%d],"replicas":[1]}]}\n' "$3" "$2"
}

# check MODEL LAYERS CUT TOL_HI TOL_LO [--beside]
check() {
    local model=$1 n=$2 cut=$3 hi=$4 lo=$5
    shift 5
    plan "$model" "$n" "$cut" >"$tmp/$model.plan.json"
    local err="$tmp/$model$*.err" out="$tmp/$model$*.json"
    # a machine loaded enough to preempt every one of 20 rounds of a stage can
    # hide the property: up to 3 tries, each a fresh measurement
    local try rows
    for try in 1 2 3; do
        if ! "$PIPETOP" profile --model "$model" --batch 16 --threads 1 --repeats 20 \
            --warmup 3 --plan "$tmp/$model.plan.json" "$@" --out "$out" >/dev/null 2>"$err"; then
            fail "$model $*: exit $?: $(cat "$err")"
            return
        fi
        rows=$(grep -c '^stage [01] ' "$err")
        [ "$rows" -eq 2 ] || { fail "$model $*: $rows stage lines: $(cat "$err")"; return; }
        # fastest round: fwd WHOLE / LAYERS, bwd WHOLE / LAYERS
        awk -v hi="$hi" -v lo="$lo" -v what="$model $* (try $try)" '
            /^stage [01] / {
                split($0, a, "fastest round: ")
                n = split(a[2], f, /[ ,\/]+/)  # fwd W L bwd W L
                for (k = 0; k < 2; k++) {
                    w = f[2 + 3 * k]; l = f[3 + 3 * k]
                    r = (w - l) / l
                    if (!(w > 0 && l > 0) || r > hi || r < -lo) {
                        printf "%s: %s %s %s: whole %s ms, its layers %s ms (%+.0f %%)\n",
                            (try_last ? "FAIL" : "retry"), what, $1 " " $2, (k ? "bwd" : "fwd"),
                            w, l, 100 * r > "/dev/stderr"
                        bad++
                    }
                }
            }
            END { exit bad > 0 }' try_last=$((try == 3)) "$err" && break
        [ "$try" -eq 3 ] && failures=$((failures + 1))
    done
    # the profile's layers of stage 0 sum to stage 0's whole median
    local whole sum
    whole=$(awk '/^stage 0 / { print $5 }' "$err")
    sum=$(tr -d ' \t\n' <"$out" | grep -o '"fwd_ms":[0-9.e+-]*' | head -n "$cut" |
        cut -d: -f2 | awk '{ s += $1 } END { printf "%.6f", s }')
    awk -v w="$whole" -v s="$sum" 'BEGIN { d = (s - w) / w; exit !(d < 1e-3 && d > -1e-3) }' ||
        fail "$model $*: stage 0's layers sum to $sum ms in the profile, measured whole $whole ms"
}

check gpt-tiny 8 4 0.15 0.15
check gpt-tiny 8 4 0.25 0.25 --beside
check fmnist-mlp-deep 34 17 0.50 0.15

msg=$("$PIPETOP" profile --model gpt-tiny --beside 2>&1)
[ $? -eq 2 ] && grep -q -- "--beside needs --plan" <<<"$msg" || fail "--beside alone: $msg"
plan fmnist-mlp-deep 34 17 >"$tmp/other.json"
msg=$("$PIPETOP" profile --model gpt-tiny --plan "$tmp/other.json" --out "$tmp/x.json" 2>&1)
[ $? -eq 1 ] && grep -q "$tmp/other.json: the plan is for model \"fmnist-mlp-deep\"" <<<"$msg" ||
    fail "plan of another model: $msg"
[ ! -e "$tmp/x.json" ] || fail "a refused profile was written"

[ "$failures" -eq 0 ] && echo "profile_stage_test: ok"
exit "$failures"

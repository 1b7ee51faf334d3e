#!/usr/bin/env bash
# scripts/gpu-check.sh: the GPU checks in one command, on a machine with an
# NVIDIA GPU (an H200 in mind: 16 cores; the checks, after the build, within
# a budget of 270 s). It builds with the CUDA backend first (not timed), then
# runs every step under its own timeout, inside the budget, and prints one table:
#
#   preflight  the driver (>= 580 for CUDA 13), ldd of the CUDA module, NCCL
#   layers     every layer's forward/backward vs the CPU (fp32; tf32 and bf16 vs a
#              CPU that rounds the products' inputs as tensor cores do), single ops
#   pipeline   2- and 4-stage pipelines on the one GPU vs single-device training
#   nccl       all-reduce, send/recv groups, the executor's rank check; memory:
#              the arena against the driver's own figures
#   gemm       per-layer GEMM TFLOP/s through pipetop vs a bare cublasGemmEx loop
#   mfu        gpt-1.3b bf16 training (12 steps, every loss finite) as MFU
#   sim        measured vs simulated iteration time with the GPU-measured profile
#
#   scripts/gpu-check.sh             the real run; exit 1 when a check fails, a step
#                                    times out, or no GPU is usable
#   scripts/gpu-check.sh --dry-run   no GPU needed: the test code with a CPU stand-in
#                                    (*_dryrun), gpt-tiny on the CPU, through the same
#                                    steps and parsing; every figure is marked DRY-RUN
#   scripts/gpu-check.sh --parse [--tag T] LOG...   prints the test sections of the
#                                    table from logs (plain, or ctest -V's "N: " lines);
#                                    exit 1 when one is empty or a line says FAIL
# Options: --build DIR (default build-gpu; dry run: build), --no-build (use DIR as
# it is), --jobs N (default nproc), --batch B (gpt-1.3b micro-batch, default 8),
# --budget S (seconds for all steps, default 270), --step-cap S (no step longer
# than S, below the steps' own timeouts; for tests). Work files: DIR/gpu-check/.
# The first run on a machine: read docs/gpu.md, "A first GPU run".
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
dry=0 build="" jobs="$(nproc 2>/dev/null || echo 2)" batch=8 budget=270 do_build=1 parse=0
step_cap=600
tag=""
while (($#)); do
    case "$1" in
    --dry-run) dry=1 ;;
    --build) build="$2"; shift ;;
    --no-build) do_build=0 ;;
    --jobs) jobs="$2"; shift ;;
    --batch) batch="$2"; shift ;;
    --budget) budget="$2"; shift ;;
    --step-cap) step_cap="$2"; shift ;;
    --parse) parse=1; shift; break ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
fail=0
note() { printf 'gpu-check: %s\n' "$*" >&2; }

# ---- the parsing, shared by the table and --parse ---------------------------
# result_lines KINDS: the "TAG KIND ..." lines of stdin, ctest -V's "N: " prefix
# dropped, without the tag.
result_lines() {
    sed -E 's/^[0-9]+: //' | grep -E "^$tag ($1) " | sed -E "s/^$tag //"
}

# section TITLE KINDS LOG...: the title and the lines, indented; fail=1 when
# there are none or one ends in FAIL.
section() {
    local title=$1 kinds=$2 lines
    shift 2
    echo "$title"
    lines=$(cat "$@" 2>/dev/null | result_lines "$kinds")
    if [[ -z "$lines" ]]; then
        echo "  MISSING: no $tag ${kinds//|/ or } lines in $*"
        fail=1
        return
    fi
    # shellcheck disable=SC2001 # a prefix on every line
    sed 's/^/  /' <<<"$lines"
    if grep -qE ' FAIL( |$)' <<<"$lines"; then
        fail=1
    fi
}

test_sections() { # test_sections LOG...
    section "layers vs the CPU (relative 2-norm error; fp32 1e-4, tf32 1e-3, bf16 1e-2; tf32/bf16 vs the CPU rounding inputs as named)" \
        "layer|op|optim" "$@"
    echo
    section "pipelines on the one GPU vs single-device training (tolerance 1e-5, fp32)" "pipeline" "$@"
    echo
    section "nccl" "nccl" "$@"
    echo
    section "memory" "memory" "$@"
}

if [[ $parse == 1 ]]; then
    if [[ "${1:-}" == "--tag" ]]; then
        tag=$2
        shift 2
    fi
    [[ -n "$tag" ]] || tag=$(grep -qE '(^|: )DRY-RUN ' "$@" && echo DRY-RUN || echo GPU-CHECK)
    test_sections "$@"
    exit "$fail"
fi

# ---- build (before the budget starts) -----------------------------------------
[[ -n "$build" ]] || build=$([[ $dry == 1 ]] && echo build || echo build-gpu)
work="$build/gpu-check"
tag=$([[ $dry == 1 ]] && echo DRY-RUN || echo GPU-CHECK)
tests=(layers pipeline nccl memory)
if [[ $do_build == 1 ]]; then
    t_build=$SECONDS
    note "building in $build with $jobs jobs"
    mkdir -p "$build"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
        >"$build/gpu-check.configure.log" 2>&1 || { cat "$build/gpu-check.configure.log"; exit 1; }
    if ! grep -q "CUDA backend on" "$build/gpu-check.configure.log"; then
        grep "pipetop:" "$build/gpu-check.configure.log" >&2 || true
        note "CMake did not switch the CUDA backend on; nothing to check"
        exit 1
    fi
    targets=(pipetop pipetop-agent gemm_bare)
    for t in "${tests[@]}"; do
        targets+=("${t}_gputest")
        [[ $dry == 1 ]] && targets+=("${t}_gputest_dryrun")
    done
    [[ $dry == 1 ]] && targets+=(pt_cuda_standin)
    cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/gpu-check.build.log" 2>&1 ||
        { tail -40 "$build/gpu-check.build.log"; exit 1; }
    note "built in $((SECONDS - t_build)) s"
fi
rm -rf "$work"
mkdir -p "$work"
pipetop="$build/pipetop"
steps="$work/steps.txt"
: >"$steps"
export NCCL_DEBUG=WARN OPENBLAS_NUM_THREADS=1 PT_SOURCE_DIR="$PWD" PT_BUILD_DIR="$build"
t_start=$SECONDS
deadline=$((SECONDS + budget))

# run_step NAME CAP LOG CMD...: CMD under timeout, for CAP seconds or what is
# left of the budget if less; its line goes to $steps. Returns CMD's status.
run_step() {
    local name=$1 cap=$2 log=$3 left t t0 rc=0 status
    shift 3
    left=$((deadline - SECONDS))
    if ((left < 3)); then
        printf '  %-10s  NOT RUN: the budget of %d s is spent\n' "$name" "$budget" >>"$steps"
        fail=1
        return 1
    fi
    t=$((cap < left ? cap : left))
    t=$((t < step_cap ? t : step_cap))
    t0=$SECONDS
    timeout -k 5 "$t" "$@" >"$log" 2>&1 || rc=$?
    if ((rc == 124 || rc == 137)); then
        status="TIMED OUT after $t s (log: $log)"
    elif ((rc != 0)); then
        status="FAILED, exit $rc (log: $log)"
    else
        status="ok"
    fi
    ((rc == 0)) || fail=1
    printf '  %-10s %4d s of %3d s  %s\n' "$name" "$((SECONDS - t0))" "$t" "$status" >>"$steps"
    return $rc
}

# ---- preflight: what a first GPU run checks before spending minutes ---------
pre="$work/preflight.txt"
gpu_name="none (dry run)"
{
    if [[ $dry == 1 ]]; then
        echo "driver: not checked (dry run: no GPU here)"
    elif ! smi=$(timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1); then
        echo "driver: nvidia-smi failed: $smi FAIL"
    else
        gpu_name=$(head -1 <<<"$smi" | cut -d, -f1)
        drv=$(head -1 <<<"$smi" | cut -d, -f2 | tr -d ' ')
        verdict=$([[ ${drv%%.*} -ge 580 ]] && echo PASS || echo "FAIL (CUDA 13 needs 580 or newer)")
        echo "driver: $gpu_name, $drv $verdict"
    fi
    module="$build/libpt_cuda.so"
    if [[ ! -e "$module" ]]; then
        echo "module: $module missing FAIL"
    elif missing=$(ldd "$module" 2>&1 | grep 'not found'); then
        echo "module: ldd $module: $missing FAIL"
    else
        libs=$(ldd "$module" | awk '$1 ~ /^lib(cudart|cublas)/ { printf "%s%s => %s", n++ ? ", " : "", $1, $3 }')
        echo "module: ldd finds $libs PASS"
    fi
    nccl=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" { print $NF; exit }')
    echo "nccl: ${nccl:-libnccl.so.2 not in the loader cache} (opened at run time), NCCL_DEBUG=$NCCL_DEBUG"
} >"$pre"
grep -q ' FAIL' "$pre" && fail=1

# ---- the four GPU test programs, each under its own timeout -----------------
declare -A cap=([layers]=60 [pipeline]=90 [nccl]=60 [memory]=45)
for t in "${tests[@]}"; do
    bin="$build/${t}_gputest"
    [[ $dry == 1 ]] && bin+="_dryrun"
    note "$t ($((SECONDS - t_start)) s)"
    run_step "$t" "${cap[$t]}" "$work/$t.log" "$bin"
    if grep -q "SKIPPED" "$work/$t.log"; then
        fail=1
        note "$t skipped: $(grep -m1 SKIPPED "$work/$t.log")"
    fi
done
if [[ $dry == 1 ]]; then
    # the real tests must skip here, saying why, and ctest must call that a skip
    run_step "ctest-skip" 60 "$work/ctest-skip.log" ctest --test-dir "$build" -L gpu
    if [[ $(grep -c "(Skipped)" "$work/ctest-skip.log") -lt 4 ]]; then
        fail=1
        note "without a GPU, ctest -L gpu did not report four skipped tests ($work/ctest-skip.log)"
    fi
fi

# ---- GEMM efficiency ------------------------------------------------------------
gemm_log="$work/gemm.log"
if [[ $dry == 1 ]]; then
    echo "GEMM not run in a dry run: gemm_bare times cuBLAS on a GPU" >"$gemm_log"
else
    note "gemm_bare ($((SECONDS - t_start)) s)"
    run_step "gemm_bare" 60 "$gemm_log" "$build/gemm_bare" --batch "$batch" --iters 10
fi

# ---- gpt-1.3b: profile, plan and simulate one stage, train 12 steps -----------
if [[ $dry == 1 ]]; then
    model=gpt-tiny device=cpu
else
    model=gpt-1.3b device=cuda:0:bf16
fi
steps_n=12
vocab=$(grep -o '"vocab": *[0-9]*' "models/$model.json" | head -1 | grep -o '[0-9]*$')
cat >"$work/one-device.json" <<EOF
{"v":1,"name":"one-device","_comment":"gpu-check: the one device the profile was measured on",
 "nodes":[{"name":"host","count":1,"device":{"name":"gpu","memory_gib":141,"speed":1.0}}],
 "links":{"intra":{"bandwidth_gbps":100,"latency_us":10},"inter":{"bandwidth_gbps":100,"latency_us":10}}}
EOF
sim_ms="" meas_ms="" sps="" losses=""
note "profile of $model on $device ($((SECONDS - t_start)) s)"
# shellcheck disable=SC2016 # the plan+sim step's script is expanded by its own shell
if run_step "profile" 90 "$work/profile.log" "$pipetop" profile --model "$model" --device "$device" \
    --batch "$batch" --repeats 3 --warmup 1 --out "$work/profile.json" &&
    run_step "plan+sim" 30 "$work/plan.log" sh -c '"$1" plan --planner gpipe --stages 1 \
        --profile "$2/profile.json" --topology "$2/one-device.json" --batch "$3" \
        --microbatch "$3" --optimizer adam --out "$2/plan.json" && "$1" sim --plan "$2/plan.json" \
        --profile "$2/profile.json" --topology "$2/one-device.json" --json >"$2/sim.json"' \
        _ "$pipetop" "$work" "$batch"; then
    sim_ms=$(grep -o '"iteration_ms":[0-9.e+-]*' "$work/sim.json" | head -1 | cut -d: -f2 |
        awk '{printf "%.3f", $1}')
fi
note "training $model on $device, $steps_n steps ($((SECONDS - t_start)) s)"
if run_step "train" 120 "$work/train.log" "$pipetop" train --model "$model" --data synthetic \
    --device "$device" --batch "$batch" --steps "$steps_n" --optimizer adam --json --log-every 1 \
    --eval-samples 0; then
    # every step's loss finite and near ln(vocab), where an untrained model starts
    if ! losses=$(awk -v V="$vocab" -F'"loss":' '/"event":"step"/ {
            split($2, a, ","); l = a[1]; n++
            if (l !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) bad = bad " step " n ": " l
            else if (l < 0.5 * log(V) || l > 2 * log(V)) bad = bad " step " n ": " l " (not within 0.5-2 x ln V)"
            if (n == 1) first = l; last = l }
            END { if (n == 0) { print "no step lines"; exit 1 }
                  if (bad != "") { print "loss not finite or off:" bad; exit 1 }
                  printf "%d steps, loss %s -> %s, all finite", n, first, last }' "$work/train.log"); then
        fail=1
    fi
    # the last 6 steps: past cuBLAS's first-call set-up
    sps=$(grep '"event":"step"' "$work/train.log" | tail -6 | grep -o '"samples_per_s":[0-9.e+-]*' |
        cut -d: -f2 | awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n }')
    [[ -n "$sps" ]] && meas_ms=$(awk -v b="$batch" -v s="$sps" 'BEGIN{printf "%.3f", b / s * 1000}')
fi

# ---- pipetop run on a topology of cuda:N devices ----------------------------------
# On the GPU: two stages sharing cuda:0 in bf16 (one GPU: the host path). Dry
# run: two stand-in GPUs of their own (libpt_cuda_standin.so), the NCCL path.
run_line=""
if [[ $dry == 1 ]]; then
    run_env=(env "PIPETOP_CUDA_MODULE=$build/libpt_cuda_standin.so" "TMPDIR=$work")
    gpus='{"name":"host","gpus":2,"device":{"name":"gpu","memory_gib":16}}'
else
    run_env=(env)
    gpus='{"name":"host","devices":[{"name":"a","memory_gib":141,"compute":"cuda:0","precision":"bf16"},{"name":"b","memory_gib":141,"compute":"cuda:0","precision":"bf16"}]}'
fi
printf '{"v":1,"name":"gpus","nodes":[%s],"links":{"intra":{"bandwidth_gbps":400,"latency_us":5}}}\n' \
    "$gpus" >"$work/gpus.json"
note "pipetop run on GPU agents ($((SECONDS - t_start)) s)"
if run_step "run" 120 "$work/run.log" "${run_env[@]}" "$pipetop" run --model gpt-tiny \
    --data synthetic --topology "$work/gpus.json" --stages 2 --schedule 1f1b-flush \
    --microbatches 4 --iters 4 --headless --json --run-dir "$work/run"; then
    regs=$(grep -o '"type":"register".*"backend":"[^"]*"' "$work/run/run.ndjson" |
        grep -o '"device_name":"[^"]*"' | cut -d'"' -f4 | paste -sd, -)
    ncalls=$(cat "$work"/pt-standin-nccl-*/log 2>/dev/null | wc -l)
    run_line="2 agents on: $regs; 4 steps done$([[ $dry == 1 ]] && echo ", $ncalls stand-in NCCL calls")"
    [[ $(grep -o '"device_name"' "$work/run/run.ndjson" | wc -l) -ge 2 ]] || run_line=""
fi

# ---- the table --------------------------------------------------------------------
out="$work/table.txt"
{
    echo "pipetop gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), GPU: $gpu_name$([[ $dry == 1 ]] && echo ' -- DRY RUN, no GPU figures')"
    echo
    echo "preflight"
    sed 's/^/  /' "$pre"
    echo
    logs=()
    for t in "${tests[@]}"; do logs+=("$work/$t.log"); done
    test_sections "${logs[@]}"
    echo
    echo "GEMM TFLOP/s for gpt-1.3b's products at micro-batch $batch: pipetop vs bare cublasGemmEx"
    if grep -qE "^(GEMM|PEAK)" "$gemm_log"; then
        grep -E "^(GEMM|PEAK)" "$gemm_log" | sed 's/^/  /'
    else
        echo "  MISSING: no GEMM lines ($gemm_log)"
        fail=1
    fi
    echo
    peak=$(grep "^PEAK" "$gemm_log" | grep -o '[0-9.]* TFLOP/s' | cut -d' ' -f1 || true)
    echo "pipetop run, 2 stages of gpt-tiny on GPU agents (topology of cuda:N devices)"
    if [[ -n "$run_line" ]]; then
        echo "  $run_line"
    else
        echo "  MISSING: the run failed or its agents did not register on GPUs ($work/run.log)"
        fail=1
    fi
    echo
    echo "$model training on $device (Adam, micro-batch $batch, $steps_n steps)"
    if [[ -n "$sps" && -n "$losses" ]]; then
        echo "  $losses"
        # Megatron-LM's model FLOPs: 72 B s L h^2 (1 + s/(6h) + V/(12 h L)) per iteration
        awk -v b="$batch" -v sps="$sps" -v peak="${peak:-0}" -v dry="$dry" 'BEGIN {
            s = 1024; L = 24; h = 2048; V = 50304
            if (dry) { s = 32; L = 2; h = 64; V = 256 }
            f = 72 * b * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
            t = sps / b * f / 1e12
            printf "  %.2f samples/s, %.1f model TFLOP/s", sps, t
            printf ", MFU %.1f%% of 989 (H200 dense bf16 datasheet)", 100 * t / 989
            if (peak > 0) printf ", %.1f%% of %.1f (bare cuBLAS bf16 GEMM here)", 100 * t / peak, peak
            printf "\n" }'
    else
        echo "  FAIL: ${losses:-training failed} ($work/train.log)"
        fail=1
    fi
    echo
    echo "measured vs simulated iteration time (1 stage, GPU-measured profile at micro-batch $batch)"
    if [[ -n "$sim_ms" && -n "$meas_ms" ]]; then
        awk -v m="$meas_ms" -v s="$sim_ms" 'BEGIN {
            printf "  measured %.3f ms, simulated %.3f ms, difference %+.1f%% (target within 10%%)\n",
                m, s, 100 * (m - s) / s }'
    else
        echo "  FAIL: not available (profile, plan, sim or training failed)"
        fail=1
    fi
    echo "  2 and 4 stages sharing one GPU: the simulator does not model GPU sharing yet; measured"
    echo "  iteration times of those pipelines are in the pipeline lines above"
    echo
    echo "steps (seconds taken of each one's timeout; budget $budget s after the build)"
    cat "$steps"
    echo
    echo "result: $([[ $fail == 0 ]] && echo PASS || echo FAIL) ($((SECONDS - t_start)) s of $budget s)"
} >"$out" # not through a pipe: fail=1 inside must reach the exit below
cat "$out"
note "work folder: $work"
exit "$fail"

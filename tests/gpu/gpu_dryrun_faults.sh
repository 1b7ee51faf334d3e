#!/bin/bash
# The GPU tests fail for a wrong GPU result (issue 30): each NAME_gputest_dryrun
# passes with the CPU stand-in computing right, and fails, naming what it
# checked, when the stand-in is given a fault ($PT_GPU_DRY_FAULT, see
# tests/gpu/gpu_common.h and tests/gpu/cuda_standin.h):
#   layers    gemm_beta (beta = 1 overwrites), ln_split (a split layernorm
#             backward's input half writes nothing), tall (column reductions
#             over 4,194,241 rows do not launch), coarse (tf32/bf16 products
#             keep 5 mantissa bits), attn_fused (the fused attention's backward
#             writes zeros)
#   pipeline  gemm_beta
#   memory    leak (each allocation takes 64 MiB more than asked)
#   nccl      nccl_drop (each message arrives with its last float off)
# Registered by cmake/cuda.cmake (the dry runs exist in CUDA builds only).
set -u
BUILD="${PT_BUILD_DIR:?}"
tmp=$(mktemp -d /tmp/pipetop-gpufaults.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

run() { # run TEST FAULT: the dry run's exit status; its output in $tmp/TEST-FAULT.out
    PT_GPU_DRY_FAULT="$2" timeout 240 "$BUILD/$1_gputest_dryrun" >"$tmp/$1-$2.out" 2>&1
}

for t in layers pipeline memory nccl; do
    run "$t" none || fail "$t: the dry run fails without a fault: $(tail -5 "$tmp/$t-none.out")"
    grep -q ' FAIL' "$tmp/$t-none.out" && fail "$t: a FAIL line without a fault"
done

# expect TEST FAULT PATTERN: with FAULT, TEST fails and prints a FAIL line matching PATTERN
expect() {
    if run "$1" "$2"; then
        fail "$1 passed with the fault $2"
    elif ! grep -qE "$3" "$tmp/$1-$2.out"; then
        fail "$1 with $2: no line matching '$3': $(grep FAIL "$tmp/$1-$2.out" | head -5)"
    fi
}
expect layers gemm_beta '^DRY-RUN op gemm beta=1.* FAIL$'
expect layers ln_split '^DRY-RUN op col_sum, split layernorm bwd .* FAIL$'
expect layers tall '^DRY-RUN op 4194241-row columns .* FAIL$'
expect layers coarse '^DRY-RUN layer .* bf16 .* FAIL '
expect layers attn_fused '^DRY-RUN op fused attention .* FAIL$'
expect pipeline gemm_beta '^DRY-RUN pipeline .* FAIL$'
expect memory leak '^DRY-RUN memory driver free fell .* FAIL$'
expect nccl nccl_drop '^DRY-RUN nccl .* FAIL$'

[ "$failures" -eq 0 ] || exit 1
echo "gpu dry runs: each test fails for its wrong GPU result"

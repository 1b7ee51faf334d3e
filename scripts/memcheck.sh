#!/usr/bin/env bash
# scripts/memcheck.sh BUILD JOBS [SKIP_REGEX]: runs the unit tests of BUILD
# (ctest label "unit") under valgrind's memcheck, JOBS at a time, each with
# the environment ctest gives it. Any valgrind error (--error-exitcode) or
# failing test fails the run; the log of each failure is printed.
#
# What memcheck adds to the ASan+UBSan run of the same tests is uninitialised
# reads (and the gcc build, with the CUDA backend's loader). Those come from
# buffers filled by parsers, by other threads and processes, and by kernels
# with tails, so it runs: the parsers' tests (protocol/, and the fuzz
# replays: every parser over the bad-file corpus, ~1 s each under valgrind),
# the executor and its layers, kernels, optimisers and comm (runtime/), the
# planners' tests that take under a second natively, and the console's
# renderers and exports.
# (checkpoint_test, fuzz_idx_replay and data_test wait on files natively:
# under valgrind they take 2, 1 and 6 s of CPU.)
# SKIP_REGEX (default below) leaves out what takes a second or more of CPU
# natively (valgrind runs 20-100x slower), each still run natively and under
# ASan+UBSan, where other tests here run the code valgrind watches:
#   comm_test          threads as ranks over inproc/tcp/ipc (7 s natively):
#                      the ring all-reduce and its buffers are comm_proc_test's
#                      (here, forked ranks) and every executor test's
#   net_models_test    every shipped model built and stepped: the layers are
#                      layer_grad_test's and the executor tests'
#   memory_predict_test, planner_sim_agree_test, planner_dapple_test,
#   planner_pipedream_paper_test   planner arithmetic over many plans (16 s,
#                      28 s, 2.4 s, 1.7 s natively) on inputs the parsers
#                      built; the planners' small tests run here
#   message_test, plan_test   ~1 s each (20-24 s of CPU under valgrind):
#                      large messages and plans; their parsers over the bad corpus
#                      are fuzz_message_replay's and fuzz_plan_replay's
#   run_session_test, session_trust_test   the console's session over real
#                      ZeroMQ sockets (CURVE in session_trust), waiting on
#                      heartbeats; its message parsing is the replays'
#   store_agents_test  a 3 s scaling check of the record reader (CPU-time
#                      ratios, which valgrind's overhead would distort);
#                      fuzz_record_replay reads records here
# PIPETOP_CUDA_MODULE names no file here, so no test loads the CUDA module
# (runtime/cuda_module.h): reading the symbols of libcudart and libcublas
# costs 12-14 s of CPU under valgrind per process, and without a GPU all of
# ours that runs past the dlopen is a device count. gpu_host_test thus checks the
# not-loadable path here (under 1 s); it loads the module natively, as does
# tests/cuda_module_test.sh. (Before the module, every test that linked the
# CUDA backend paid those 12-14 s, and gpu_host_test and cmd_help_test were
# left out for it.)
# PT_MEMCHECK=1 is set: tests that loop over equivalent variants run fewer of
# them here, each variant still run natively and under ASan
# (executor_zb_test, executor_sync_test: one schedule kind per plan shape,
# in turn; comm_proc_test: one of the three unequal-chunk sizes, for the ring
# and for the direct all-reduce). Also left to the native and ASan runs:
#   comm_proc_test's reference sums (2p input hashes per element, computed in
#                      each rank: half its 33 s of CPU here in the long-chunk
#                      cases); every result byte still reaches write(2)
#                      through the rank's hash, where memcheck reports one
#                      not initialised, and the ranks' hashes must agree;
#                      so its ring cases on integer inputs (exact sums for
#                      that reference) are the float cases' bytes and sums
#   executor_zb_test's shipped gpt-tiny case (53 s of CPU here, the test's
#                      other cases 5 s): the same layer kinds run here on the
#                      small GPT of tests/runtime/exec_common.h, whose odd
#                      sizes reach every kernel's tail
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: scripts/memcheck.sh BUILD JOBS [SKIP_REGEX]}"
jobs="${2:-2}"
default_skip='^(comm|net_models|memory_predict|planner_sim_agree'
default_skip+='|planner_dapple|planner_pipedream_paper|message|plan|run_session|session_trust'
default_skip+='|store_agents)_test$'
skip="${3:-$default_skip}"
src="$PWD"
out="$build/memcheck"
rm -rf "$out"
mkdir -p "$out"
# each test's arguments as ctest gives them (the fuzz replays: the corpus
# folders), one file per test, quoted as ctest prints them
ctest --test-dir "$build" -N -V -L unit | awk -v out="$out" '
    / Test command: / { sub(/^[0-9]+: Test command: [^ ]+ ?/, ""); args = $0 }
    /^ +Test +#[0-9]+: / { print args > (out "/" $3 ".args"); close(out "/" $3 ".args") }'
mapfile -t all < <(ctest --test-dir "$build" -N -L unit | awk '/Test +#/ {print $3}' | grep -Ev "$skip")
# The longest under valgrind first (comm_proc_test, its forked ranks all
# under valgrind, ran last and alone for minutes when it was not listed), so
# that none of them starts last and runs alone at the end.
slow=(comm_proc_test executor_zb_test gemm_small_test executor_sync_test executor_interleaved_test
      executor_contract_test executor_async_test executor_backtoback_test
      executor_memory_test executor_staged_test export_test)
tests=()
for t in "${slow[@]}"; do
    printf '%s\n' "${all[@]}" | grep -qx "$t" && tests+=("$t")
done
for t in "${all[@]}"; do
    printf '%s\n' "${slow[@]}" | grep -qx "$t" || tests+=("$t")
done
((${#tests[@]})) || { echo "memcheck: no tests found in $build" >&2; exit 1; }
supp="$src/scripts/valgrind.supp" # glibc false positives, each explained there
# each test's bound under valgrind (the slowest take a few minutes): a hang
# ends with the test named, not at CI's limit
MEMCHECK_BOUND_S=${MEMCHECK_BOUND_S:-1200}
export PT_SOURCE_DIR="$src" PT_BUILD_DIR="$src/$build" OPENBLAS_NUM_THREADS=1 PT_MEMCHECK=1 build out supp
export MEMCHECK_BOUND_S
export PIPETOP_CUDA_MODULE="$out/no-cuda-module/libpt_cuda.so" # see above
run_one() {
    local t="$1" start=$SECONDS args=()
    [[ -s $out/$t.args ]] && eval "args=($(<"$out/$t.args"))"
    local rc=0
    (cd "$build" && timeout -k 10 "$MEMCHECK_BOUND_S" valgrind --error-exitcode=99 \
        --leak-check=no --track-origins=no --quiet --suppressions="$supp" "./$t" "${args[@]}") \
        >"$out/$t.log" 2>&1 || rc=$?
    if ((rc == 0)); then
        echo "memcheck: $t ok ($((SECONDS - start)) s)"
    else
        ((rc == 124 || rc == 137)) &&
            echo "memcheck: $t still running after $MEMCHECK_BOUND_S s under valgrind: ended" >&2
        echo "memcheck: $t FAILED; $out/$t.log:" >&2
        tail -40 "$out/$t.log" >&2
        return 1
    fi
}
export -f run_one
start=$SECONDS
printf '%s\n' "${tests[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
rc=$?
echo "memcheck: ${#tests[@]} unit tests in $((SECONDS - start)) s ($jobs at a time)"
exit $((rc != 0))

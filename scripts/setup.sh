#!/usr/bin/env bash
# One-step set-up for a fresh Debian 12 machine:
#   scripts/setup.sh main   install what is missing, build, run the main job:
#                           the console demo on a terminal (4 local agents
#                           training fmnist-mlp-deep under a DAPPLE plan), the
#                           same run headless when there is no terminal
#   scripts/setup.sh test   install what is missing, build, run every test
#                           (normal build, then the unit tests again under
#                           -fsanitize=address,undefined and under valgrind,
#                           then each libFuzzer harness for FUZZ_SECONDS=30)
# As root it installs with apt-get; otherwise it prints the apt-get line to run.
set -euo pipefail

cd "$(dirname "$0")/.."
mode="${1:-main}"
jobs="$(nproc 2>/dev/null || echo 2)"

# openmpi-bin and libopenmpi-dev only serve bench/comm_bandwidth's MPI reference figure;
# librsvg2-bin (rsvg-convert) renders the exported SVG in tests/tui/export_svg_test.c.
packages=(cmake gcc make pkg-config libcjson-dev libzmq3-dev libopenblas-dev libncurses-dev
          zlib1g-dev dataset-fashion-mnist tmux openmpi-bin libopenmpi-dev
          librsvg2-bin)
# test mode also needs clang (libFuzzer harnesses) and valgrind (memcheck)
if [[ "$mode" == test ]]; then
    packages+=(clang valgrind)
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]]; then
        echo "setup: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    else
        echo "setup: missing packages; run as root:" >&2
        echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

build() { # build DIR TARGET [cmake options...]: TARGET "all", or a stage's own
    local dir="$1" target="$2"   # (unit-tests, fuzz-harnesses: see CMakeLists.txt)
    shift 2
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j "$jobs" --target "$target"
}

case "$mode" in
main)
    build build all
    if [[ -t 0 && -t 1 ]]; then
        exec build/pipetop demo
    fi
    exec build/pipetop run --stages 4 --schedule dapple --planner dapple --microbatches 4 \
        --model fmnist-mlp-deep --data fashion-mnist --iters 200 --headless
    ;;
test)
    build build all
    ctest --test-dir build --output-on-failure -j "$jobs"
    build build-asan unit-tests -DPT_SANITIZE=ON
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit
    # the unit tests once more under valgrind's memcheck (uninitialised reads,
    # which ASan does not see); any error fails the run. Left out, still run
    # under ASan: the fuzz replays (libFuzzer covers them too) and the tests
    # that take over a second natively (valgrind runs ~50x slower; with them
    # memcheck alone would take ~15 minutes on 2 cores, without them ~3).
    memcheck_skip='_replay$|^(comm|checkpoint|net_models|planner_dapple|planner_pipedream_paper'
    memcheck_skip+='|run_session|data|memory_predict|message|plan|store_agents|planner_sim_agree|session_trust)_test$'
    scripts/memcheck.sh build "$jobs" "$memcheck_skip"
    # every libFuzzer harness, built with clang, runs FUZZ_SECONDS from its seed
    # corpus (tests/data and tests/data/bad), two at a time; a crash fails
    build build-fuzz fuzz-harnesses -DCMAKE_C_COMPILER=clang -DPT_FUZZ=ON
    scripts/fuzz.sh build-fuzz "${FUZZ_SECONDS:-30}" "$jobs"
    ;;
*)
    echo "usage: scripts/setup.sh main|test" >&2
    exit 2
    ;;
esac

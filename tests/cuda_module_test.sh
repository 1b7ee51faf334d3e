#!/bin/bash
# The CUDA libraries are loaded only when a CUDA device is asked for
# (runtime/cuda_module.h). Checked on the built programs:
# - neither pipetop nor pipetop-agent links a CUDA library (ldd), so they
#   start on a machine without one;
# - with $PIPETOP_CUDA_MODULE naming a module that records being loaded, a
#   2-stage CPU run trains on agents and nothing loads it; asking for cuda
#   then does load it, and its refusal names the file;
# - with the module absent (a path that does not exist; the program moved out
#   of its build tree), a CPU profile still runs, and --device cuda fails
#   naming the file and dlopen's reason, in pipetop and in pipetop-agent;
# - the real module, found from the build tree, loads: on a machine without
#   a GPU, --device cuda fails with CUDA's own words for why (cudaGetDeviceCount's
#   error where there is no driver; "no GPU visible" only where CUDA counted
#   none), not with a load error;
# - the module does not need libnccl.so.2 (it opens NCCL when asked for), and
#   as root, with that library hidden, the module still loads;
# - as root, with the CUDA libraries' folder hidden in a mount namespace of
#   the test's own, a CPU run still trains and --device cuda names libcudart.
# In a build without the CUDA toolkit --device cuda says so instead.
set -u
BUILD="${PT_BUILD_DIR:?}"
SRC="${PT_SOURCE_DIR:?}"
tmp=$(mktemp -d /tmp/pipetop-cudamod.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
cuda_profile() { # cuda_profile PIPETOP [env...]: a measured profile on cuda:0
    local prog="$1"
    shift
    (cd "$tmp" && env "$@" "$prog" profile --model fmnist-mlp --device cuda --batch 8 \
        --out "$tmp/p.json" 2>&1)
}

for prog in pipetop pipetop-agent; do
    libs=$(ldd "$BUILD/$prog" 2>&1) || fail "ldd $prog: $libs"
    if grep -Ei 'libcuda|libcublas|libnccl' <<<"$libs"; then
        fail "$prog links a CUDA library"
    fi
done

have_cuda=0
[ -e "$BUILD/libpt_cuda.so" ] && have_cuda=1

# a CPU plan on 2 agents, with a module that would record being loaded
stale="$BUILD/libpt_cuda_stale_test.so"
mark="$tmp/module-loaded"
module="$stale"
[ "$have_cuda" -eq 1 ] || module="$tmp/absent/libpt_cuda.so"
out=$(cd "$tmp" && PIPETOP_CUDA_MODULE="$module" PT_TEST_MODULE_MARK="$mark" timeout 300 \
    "$BUILD/pipetop" run --stages 2 --schedule 1f1b-flush --microbatches 2 --model fmnist-mlp \
    --data synthetic --iters 2 --json 2>&1) || fail "CPU run with \$PIPETOP_CUDA_MODULE=$module: exit $?: $out"
steps=$(grep -c '^{"event":"step"' <<<"$out")
[ "$steps" -eq 2 ] || fail "CPU run: $steps step events, want 2: $out"
[ -e "$mark" ] && fail "a CPU run loaded the CUDA module"

if [ "$have_cuda" -eq 1 ]; then
    # asking for cuda loads it (so the check above can fail), and the
    # module of another build is refused by name
    out=$(cuda_profile "$BUILD/pipetop" PIPETOP_CUDA_MODULE="$stale" PT_TEST_MODULE_MARK="$mark") &&
        fail "--device cuda accepted a module of another build: $out"
    [ -e "$mark" ] || fail "--device cuda did not load \$PIPETOP_CUDA_MODULE"
    grep -qF "$stale is the CUDA module of another pipetop build" <<<"$out" ||
        fail "no 'another pipetop build' naming the module: $out"

    # absent: the file and dlopen's words
    absent="$tmp/absent/libpt_cuda.so"
    out=$(cuda_profile "$BUILD/pipetop" PIPETOP_CUDA_MODULE="$absent") &&
        fail "--device cuda without the module succeeded: $out"
    grep -qF "cuda:0: cannot load the CUDA module $absent: $absent: cannot open shared object file" <<<"$out" ||
        fail "pipetop: no clear error for the absent module: $out"
    out=$(cd "$tmp" && PIPETOP_CUDA_MODULE="$absent" timeout 60 "$BUILD/pipetop-agent" \
        --console tcp://127.0.0.1:1 --device cuda 2>&1) && fail "pipetop-agent started: $out"
    grep -qF "cannot load the CUDA module $absent" <<<"$out" ||
        fail "pipetop-agent: no clear error for the absent module: $out"

    # the real module from the build tree loads: the error, if any, is the GPU's,
    # in CUDA's words when there is no driver to count devices with
    out=$(cuda_profile "$BUILD/pipetop")
    rc=$?
    if [ "$rc" -ne 0 ]; then
        grep -qE 'cuda: no GPU visible|cuda: no device|cuda: cudaGetDeviceCount: ' <<<"$out" ||
            fail "--device cuda with the build's module: $out"
        if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
            grep -q 'cuda: cudaGetDeviceCount: .*(cudaError' <<<"$out" ||
                fail "no NVIDIA driver here, yet --device cuda does not give CUDA's reason: $out"
        fi
    fi

    # NCCL is opened at run time, not linked
    if readelf -d "$BUILD/libpt_cuda.so" | grep -q 'NEEDED.*libnccl'; then
        fail "libpt_cuda.so needs libnccl: a machine without NCCL loses the CUDA backend"
    fi
fi

# A machine without the CUDA libraries: as root, in a mount namespace of its
# own (unshare -m), the folder holding libcudart is hidden under an empty
# tmpfs. A CPU run on agents still trains; --device cuda names the library.
cudart=$(ldd "$BUILD/libpt_cuda.so" 2>/dev/null | awk '$1 ~ /^libcudart/ { print $3 }')
if [ "$have_cuda" -eq 1 ] && [ -n "$cudart" ] && [ "$(id -u)" -eq 0 ] &&
    unshare -m true 2>/dev/null; then
    libdir=$(dirname "$(readlink -f "$cudart")")
    # shellcheck disable=SC2016 # expanded by the inner shell
    out=$(cd "$tmp" && unshare -m bash -c 'mount -t tmpfs none "$1" || exit 90
        "$2/pipetop" run --stages 2 --schedule 1f1b-flush --microbatches 2 --model fmnist-mlp \
            --data synthetic --iters 2 --json || exit 91
        "$2/pipetop" profile --model fmnist-mlp --device cuda --batch 8 --out p.json && exit 92
        exit 0' _ "$libdir" "$BUILD" 2>&1)
    rc=$?
    case $rc in
    0) ;;
    90) echo "cuda module: cannot hide $libdir (mount failed); that check skipped" ;;
    91) fail "without the CUDA libraries, a CPU run failed: $out" ;;
    *) fail "without the CUDA libraries, --device cuda: exit $rc: $out" ;;
    esac
    if [ "$rc" -eq 0 ]; then
        steps=$(grep -c '^{"event":"step"' <<<"$out")
        [ "$steps" -eq 2 ] || fail "without the CUDA libraries: $steps step events, want 2: $out"
        grep -qF "cuda:0: cannot load the CUDA module $BUILD/libpt_cuda.so: libcudart.so" <<<"$out" ||
            fail "without the CUDA libraries: no error naming libcudart: $out"
        grep -q "cannot open shared object file" <<<"$out" || fail "no dlerror() words: $out"
    fi
else
    echo "cuda module: not root, no unshare or no CUDA module: the check without the CUDA libraries skipped"
fi

# A machine without NCCL: as root, with libnccl.so.2 replaced by an empty file
# in a mount namespace of the test's own, the module still loads (--device
# cuda fails as it did above, for the GPU's reason, not for a library).
nccl_lib=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" { print $NF; exit }')
if [ "$have_cuda" -eq 1 ] && [ -n "$nccl_lib" ] && [ "$(id -u)" -eq 0 ] &&
    unshare -m true 2>/dev/null; then
    nccl_real=$(readlink -f "$nccl_lib")
    : >"$tmp/empty"
    # shellcheck disable=SC2016 # expanded by the inner shell
    out=$(cd "$tmp" && unshare -m bash -c 'mount --bind "$1" "$2" || exit 90
        "$3/pipetop" profile --model fmnist-mlp --device cuda --batch 8 --out p.json && exit 92
        exit 0' _ "$tmp/empty" "$nccl_real" "$BUILD" 2>&1)
    case $? in
    0)
        grep -q "cannot load the CUDA module" <<<"$out" &&
            fail "without libnccl.so.2 the CUDA module does not load: $out"
        grep -qE 'cuda: no GPU visible|cuda: no device|cuda: cudaGetDeviceCount: ' <<<"$out" ||
            fail "without libnccl.so.2: $out"
        ;;
    90) echo "cuda module: cannot hide $nccl_real (mount failed); that check skipped" ;;
    *) fail "without libnccl.so.2, --device cuda: $out" ;;
    esac
else
    echo "cuda module: not root, no unshare, no NCCL or no CUDA module: the check without NCCL skipped"
fi

# a program moved out of its build tree finds no module, says where it looked
mkdir -p "$tmp/moved/bin"
cp "$BUILD/pipetop" "$tmp/moved/bin/"
out=$(cd "$tmp" && env -u PIPETOP_CUDA_MODULE PIPETOP_DATA="$SRC" "$tmp/moved/bin/pipetop" profile \
    --model fmnist-mlp --device cpu --batch 8 --repeats 1 --warmup 0 --out "$tmp/cpu.json" 2>&1) ||
    fail "moved pipetop: CPU profile: $out"
out=$(cuda_profile "$tmp/moved/bin/pipetop" -u PIPETOP_CUDA_MODULE PIPETOP_DATA="$SRC") &&
    fail "moved pipetop: --device cuda succeeded: $out"
if [ "$have_cuda" -eq 1 ]; then
    grep -qF "the CUDA module libpt_cuda.so is not installed (not in $tmp/moved/bin/../lib/pipetop/libpt_cuda.so" <<<"$out" ||
        fail "moved pipetop: no clear error: $out"
else
    grep -q "built without the CUDA backend" <<<"$out" || fail "no 'built without': $out"
fi

[ "$failures" -eq 0 ] || exit 1
echo "cuda module: all checks passed"

#!/usr/bin/env bash
# Include boundaries are the build's (CMakeLists.txt, "Include boundaries"):
# every case of the build's manifest compiles tests/build/bounds.c, with the
# build's compiler, against one library's staged include folder (the only
# project folder on that library's include path) and one header. A header
# outside the library's set must fail to compile because it is not found
# (not for another reason); a header inside it must compile, so the harness
# itself works.
set -euo pipefail
build="${PT_BUILD_DIR:?}"
src="${PT_SOURCE_DIR:?}"
manifest="$build/include_bounds.txt"
cc=$(cat "$build/include_bounds.cc")
[ -s "$manifest" ] || { echo "FAIL: no $manifest (configure the build)"; exit 1; }
failures=0 cases=0
while read -r expect header lib dir; do
    [ "$expect" = "#" ] && continue
    cases=$((cases + 1))
    [ -d "$dir" ] || { echo "FAIL: $lib has no staged include folder $dir"; exit 1; }
    log=$("$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -fsyntax-only -I "$dir" \
        -DPT_BOUNDS_HEADER="\"$header\"" "$src/tests/build/bounds.c" 2>&1) && built=1 || built=0
    if [ "$expect" = pass ]; then
        if [ "$built" != 1 ]; then
            echo "FAIL: $lib may include $header, but it does not compile:"
            echo "$log" | tail -5
            failures=$((failures + 1))
        fi
    elif [ "$built" = 1 ]; then
        echo "FAIL: $lib compiled #include \"$header\", outside its include set"
        failures=$((failures + 1))
    elif ! grep -q "$header: No such file" <<<"$log"; then
        echo "FAIL: $lib's #include \"$header\" failed, but not for want of the header:"
        echo "$log" | tail -5
        failures=$((failures + 1))
    else
        echo "ok: $lib cannot include $header"
    fi
done <"$manifest"
[ "$cases" -ge 10 ] || { echo "FAIL: only $cases cases in $manifest"; exit 1; }
[ "$failures" -eq 0 ] || { echo "$failures of $cases cases failed"; exit 1; }
echo "all $cases include-boundary cases hold"

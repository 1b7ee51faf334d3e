# Two "hosts" for a test: Linux network namespaces A and B joined by a veth
# pair, A at $net.1 and B at $net.2. Sourced by the netns tests after they
# set S, B and NETNS_NAME (the test's name) and NETNS_OCTET (the second
# octet of the test's 10.x/16, distinct per test: they run side by side).
# Gives: nsA nsB inA inB net tmp pids failures fail(); a cleanup on exit
# that kills every pid in pids, deletes the namespaces and the temporary
# folder (kept after a failure: moved to $PT_KEEP_FAILED when set). Exits
# 77 (skipped) without root, ip(8) or namespaces. Traffic stays inside the
# namespaces made here.
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "SKIP: $NETNS_NAME needs root and ip(8) to create network namespaces; CI runs it as root"
    exit 77
fi
netns_tag=$(($$ % 100000))
nsA="pt-$NETNS_OCTET-a-$netns_tag"
nsB="pt-$NETNS_OCTET-b-$netns_tag"
netns_vA="pt${NETNS_OCTET}a$netns_tag"
netns_vB="pt${NETNS_OCTET}b$netns_tag"
net="10.$NETNS_OCTET.$(($$ % 200 + 20))"
tmp=$(mktemp -d)
pids=()
failures=0
netns_cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    ip netns del "$nsA" 2>/dev/null
    ip netns del "$nsB" 2>/dev/null
    if [ "$failures" -eq 0 ]; then
        rm -rf "$tmp"
    elif [ -n "${PT_KEEP_FAILED:-}" ]; then
        rm -rf "$PT_KEEP_FAILED" && mv "$tmp" "$PT_KEEP_FAILED" &&
            echo "$NETNS_NAME: the failed run's files are in $PT_KEEP_FAILED" >&2
    else
        echo "$NETNS_NAME: the failed run's files are in $tmp" >&2
    fi
}
trap netns_cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
if ! ip netns add "$nsA" 2>"$tmp/netns.err"; then
    echo "SKIP: ip netns add failed ($(cat "$tmp/netns.err")): no namespaces here"
    exit 77
fi
ip netns add "$nsB" &&
    ip link add "$netns_vA" type veth peer name "$netns_vB" &&
    ip link set "$netns_vA" netns "$nsA" && ip link set "$netns_vB" netns "$nsB" &&
    ip -n "$nsA" addr add "$net.1/24" dev "$netns_vA" &&
    ip -n "$nsB" addr add "$net.2/24" dev "$netns_vB" &&
    ip -n "$nsA" link set lo up && ip -n "$nsB" link set lo up &&
    ip -n "$nsA" link set "$netns_vA" up && ip -n "$nsB" link set "$netns_vB" up || {
    echo "FAIL: could not set up the veth pair" >&2
    exit 1
}
# not shell functions: started in the background, $! is then the process
# itself (ip netns exec execs)
inA="ip netns exec $nsA"
inB="ip netns exec $nsB"
# B's end of the link, to cut it: netns_link down|up
netns_link() {
    ip -n "$nsB" link set "$netns_vB" "$1"
}
# Starts `pipetop run ARGS... --external` in A, CURVE on (keys in
# $tmp/keys: console.key, allow.txt), bound to A's address, its run folder
# $tmp/ns, checkpoints $tmp/ns-ck, output $tmp/ns.out and ns.err. Sets
# console (its pid, also in pids) and ctl and tel (its endpoints, from the
# record; "" when it ended before writing them).
netns_console() {
    $inA timeout "$RUN_S" "$B/pipetop" run "$@" --external \
        --key "$tmp/keys/console.key" --allow "$tmp/keys/allow.txt" \
        --control-bind "tcp://$net.1:*" --telemetry-bind "tcp://$net.1:*" \
        --run-dir "$tmp/ns" --checkpoint-dir "$tmp/ns-ck" >"$tmp/ns.out" 2>"$tmp/ns.err" &
    console=$!
    pids+=("$console")
    for _ in $(seq 1 $((RUN_S * 10))); do
        [ -s "$tmp/ns/run.ndjson" ] && break
        kill -0 "$console" 2>/dev/null || break
        sleep 0.1
    done
    ctl=$(head -1 "$tmp/ns/run.ndjson" 2>/dev/null | sed -n 's/.*"control":"\([^"]*\)".*/\1/p')
    tel=$(head -1 "$tmp/ns/run.ndjson" 2>/dev/null | sed -n 's/.*"telemetry":"\([^"]*\)".*/\1/p')
}

# tests/cli/netns.bash — simulated machines for tests/cli/multinode.sh and
# bench/multinode.sh (sourced, not run; needs root).
#
# One "switch" namespace holds a bridge; machine i is namespace h<i> with one veth
# into it, address $net.<i+2>/24 in 198.18.0.0/15 (RFC 2544's range for network
# tests), its own /etc/hosts (`ip netns exec` binds /etc/netns/NS/hosts over it)
# and, when ranks run in it, its own host name (a UTS namespace: Open MPI tells
# machines apart by name).  Nothing is routed and this machine's own network
# namespace is not touched.  The caller sets a trap that runs net_cleanup.
#
#   net_init DIR          names unique to this process; the rsh agent in DIR/agent
#   net_up N SLOTS        the switch and machines h0..h(N-1); DIR/hostfile lists them
#   net_limit RATE        every machine's outgoing link limited to RATE (tc tbf)
#   on_machines ARGS...   `ztrain launch --hostfile DIR/hostfile ARGS` from h0, TCP only
#   net_cleanup           kill what runs inside, delete the namespaces and their files

net_init() {
    net_dir=$1
    net_pre=zt$$                  # namespace and interface names (IFNAMSIZ 16)
    net=198.18.$(($$ % 250))
    net_made=()
    # The rsh agent mpirun calls as `agent HOST COMMAND...`, in place of ssh.
    cat > "$net_dir/agent" <<EOF
#!/bin/sh
host=\$1
shift
exec ip netns exec ${net_pre}\$host unshare --uts sh -c "hostname \$host && \$*"
EOF
    chmod +x "$net_dir/agent"
}

net_cleanup() {
    local ns pid
    for ns in "${net_made[@]}"; do
        # every process still inside (a rank or orted of a failed run), then the namespace
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
    net_made=()
}

net_up() {
    local n=$1 slots=$2 i j ns s=${net_pre}s
    ip netns add $s && net_made+=($s) || return 1
    ip -n $s link add br0 type bridge && ip -n $s link set br0 up || return 1
    : > "$net_dir/hostfile"
    for ((i = 0; i < n; i++)); do
        ns=${net_pre}h$i
        ip netns add $ns && net_made+=($ns) || return 1
        ip link add ${net_pre}v$i netns $ns type veth peer name ${net_pre}p$i netns $s || return 1
        ip -n $s link set ${net_pre}p$i master br0 && ip -n $s link set ${net_pre}p$i up || return 1
        ip -n $ns link set ${net_pre}v$i name eth0 && ip -n $ns addr add $net.$((i + 2))/24 dev eth0 || return 1
        ip -n $ns link set eth0 up && ip -n $ns link set lo up || return 1
        mkdir -p /etc/netns/$ns || return 1
        { echo "127.0.0.1 localhost"; for ((j = 0; j < n; j++)); do echo "$net.$((j + 2)) h$j"; done; } \
            > /etc/netns/$ns/hosts || return 1
        echo "h$i slots=$slots" >> "$net_dir/hostfile"
    done
}

net_limit() {
    local ns
    for ns in "${net_made[@]}"; do
        [ "$ns" = "${net_pre}s" ] && continue
        ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$1" burst 256kb latency 100ms || return 1
    done
}

on_machines() {
    OMPI_MCA_plm_rsh_agent="$net_dir/agent" OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$net.0/24 \
    OMPI_MCA_oob_tcp_if_include=$net.0/24 timeout 300 \
        ip netns exec ${net_pre}h0 unshare --uts sh -c 'hostname h0 && exec "$@"' sh \
        "$ZTRAIN" launch --hostfile "$net_dir/hostfile" "$@"
}

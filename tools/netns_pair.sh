# SPDX-License-Identifier: MIT
# Two machines on one: network namespaces n0 (10.77.0.1) and n1 (10.77.0.2), each with its own
# network stack and host name, joined by a veth pair; sourced by tests/e2e/test_netns.sh and
# bench/netns_allreduce.sh. Run inside `unshare --mount --net` (as root), so that the
# namespaces' names (a tmpfs on /run/netns) and the link are the caller's alone and end with it.
#   netns_make DIR       makes them; DIR receives mpirun's rsh agent. 0, or 1 (why on stderr)
#   netns_shape RATE [DELAY]   limits each direction of the link to RATE (tc tbf: "1gbit"),
#                        with DELAY ("1ms") each way where the kernel has netem; prints what
#                        it set ("1gbit" or "1gbit, 1ms each way"); 1 where there is no tbf
#   netns_unshape        removes the shaping
#   netns_mpirun ARGS    mpirun on n0, one rank per machine, TCP over the link only (no shared
#                        memory between the ranks), ARGS its own options and the command;
#                        stopped after $NETNS_TIMEOUT seconds where that is set (exit 124)
#   netns_tx_bytes       bytes n0 has sent over the link
netns_make() {
  mkdir -p /run/netns && mount -t tmpfs tmpfs /run/netns && ip netns add n0 && ip netns add n1 &&
    ip link add v0 netns n0 type veth peer name v1 netns n1 &&
    ip -n n0 addr add 10.77.0.1/24 dev v0 && ip -n n1 addr add 10.77.0.2/24 dev v1 &&
    ip -n n0 link set lo up && ip -n n1 link set lo up &&
    ip -n n0 link set v0 up && ip -n n1 link set v1 up || return 1
  NETNS_AGENT=$1/netns-agent
  cat >"$NETNS_AGENT" <<'AGENT'
#!/bin/sh
# mpirun's rsh agent: "ssh HOST COMMAND" becomes COMMAND in HOST's namespace, under its name
host=$1; shift
case "$host" in 10.77.0.1) ns=n0 ;; 10.77.0.2) ns=n1 ;; *) echo "agent: no machine $host" >&2; exit 1 ;; esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname node-$ns; $*"
AGENT
  chmod +x "$NETNS_AGENT"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

netns_shape() {
  local rate=$1 delay=${2:-} said=$1
  for pair in "n0 v0" "n1 v1"; do
    set -- $pair
    ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null
    if [ -n "$delay" ] && ip netns exec "$1" tc qdisc add dev "$2" root handle 1: netem delay "$delay" 2>/dev/null; then
      ip netns exec "$1" tc qdisc add dev "$2" parent 1: handle 2: tbf rate "$rate" burst 256kb latency 50ms || return 1
      said="$rate, $delay each way"
    else
      ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 50ms || return 1
    fi
  done
  echo "$said"
}

netns_unshape() {
  ip netns exec n0 tc qdisc del dev v0 root 2>/dev/null
  ip netns exec n1 tc qdisc del dev v1 root 2>/dev/null
  return 0
}

netns_mpirun() {
  local limit=()
  [ -z "${NETNS_TIMEOUT:-}" ] || limit=(timeout -k 10 "$NETNS_TIMEOUT")
  "${limit[@]}" ip netns exec n0 unshare --uts sh -c 'hostname node-n0; exec "$@"' sh \
    mpirun --host 10.77.0.1:1,10.77.0.2:1 -np 2 --bind-to none \
    --mca plm_rsh_agent "$NETNS_AGENT" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 ${NETNS_MPI_ARGS:-} "$@"
}

netns_tx_bytes() { ip netns exec n0 cat /sys/class/net/v0/statistics/tx_bytes; }

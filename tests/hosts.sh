# hosts.sh - several hosts on this machine for tests: network namespaces on a
# private bridge, and an mpirun that starts ranks in them over real TCP.
#
# Sourced by a test (after tt_lib.sh). Needs root and iproute2 (`ip netns`).
#   hosts_up N      makes hosts 0 .. N-1 (N <= 3): namespaces tt<pid>h0 ..,
#                   each with eth0 = 10.213.0.(k+1)/24, the eth0s joined by a
#                   bridge in a switch namespace tt<pid>sw. Nothing is added
#                   to the machine's own network namespace, and these
#                   addresses exist only inside the namespaces made here.
#   hosts_mpirun H R ARGS..  mpirun (run in host 0, ended after $HOSTS_TIMEOUT
#                   s, default 120, by `timeout`) starting R ranks on each
#                   of the first H hosts: ranks on host 0 are its children;
#                   for the others mpirun's launcher (plm_rsh_agent) is
#                   $T/hosts_agent, which runs the daemon (orted) inside that
#                   host's namespace with `ip netns exec`, under a hostname
#                   of its own (unshare --uts: with one name for all, Open
#                   MPI takes them for one node and its TCP transport crawls,
#                   ~100x slower with 2 ranks a host). TCP only (btl
#                   tcp,self; pml ob1), restricted to 10.213.0.0/24 for the
#                   ranks (btl_tcp_if_include) and the daemons
#                   (oob_tcp_if_include). Ranks yield when idle: more
#                   processes than cores here. $HOSTS_MCA: more options.
#   hosts_ns K      the namespace name of host K (for `ip -n`, `tc -n`).
#   hosts_down      kills every process in the namespaces and deletes them
#                   (the veth pairs and the bridge go with them). Installed
#                   as the EXIT/INT/TERM/HUP trap, so a test that fails or is
#                   killed leaves nothing behind.

HOSTS_PREFIX="tt$$"
HOSTS_NET=10.213.0
HOSTS_MADE=""

hosts_ns() {
  echo "${HOSTS_PREFIX}h$1"
}

hosts_down() {
  for ns in $HOSTS_MADE; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  done
  for ns in $HOSTS_MADE; do
    ip netns del "$ns" 2>/dev/null
  done
  HOSTS_MADE=""
}

hosts_can() {
  [ "$(id -u)" = 0 ] || { echo "needs root (ip netns)"; return 1; }
  command -v ip >/dev/null || { echo "no ip (apt-get install iproute2)"; return 1; }
  command -v tc >/dev/null || { echo "no tc (apt-get install iproute2)"; return 1; }
  command -v mpirun >/dev/null || { echo "no mpirun (apt-get install openmpi-bin)"; return 1; }
  ip netns add "${HOSTS_PREFIX}probe" 2>/dev/null || { echo "ip netns add refused here"; return 1; }
  ip netns del "${HOSTS_PREFIX}probe"
}

hosts_up() {
  trap 'hosts_down; rm -rf "$T"' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  trap 'exit 129' HUP
  sw="${HOSTS_PREFIX}sw"
  ip netns add "$sw" && HOSTS_MADE="$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  k=0
  while [ $k -lt "$1" ] && [ $k -lt 3 ]; do
    ns=$(hosts_ns $k)
    ip netns add "$ns" && HOSTS_MADE="$HOSTS_MADE $ns" || return 1
    ip link add "p$k" netns "$sw" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$sw" link set "p$k" master br0 up || return 1
    ip -n "$ns" addr add "$HOSTS_NET.$((k + 1))/24" dev eth0 || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" link set eth0 up || return 1
    k=$((k + 1))
  done
  # mpirun's agent in place of ssh: `hosts_agent [options] HOST COMMAND..`
  # runs COMMAND (a shell line, as ssh would) in HOST's namespace
  cat >"$T/hosts_agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
k=\$((\${host##*.} - 1))
exec ip netns exec "${HOSTS_PREFIX}h\$k" unshare --uts /bin/sh -c "hostname ${HOSTS_PREFIX}h\$k; \$*"
AGENT
  chmod +x "$T/hosts_agent"
}

hosts_mpirun() {
  nh=$1 per=$2
  shift 2
  list="" k=0
  while [ $k -lt "$nh" ]; do
    list="$list${list:+,}$HOSTS_NET.$((k + 1)):$per"
    k=$((k + 1))
  done
  timeout "${HOSTS_TIMEOUT:-120}" ip netns exec "$(hosts_ns 0)" mpirun --allow-run-as-root --oversubscribe \
    -np $((nh * per)) -H "$list" --mca plm_rsh_agent "$T/hosts_agent" \
    --mca mpi_yield_when_idle 1 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$HOSTS_NET.0/24" \
    --mca oob_tcp_if_include "$HOSTS_NET.0/24" $HOSTS_MCA "$@"
}

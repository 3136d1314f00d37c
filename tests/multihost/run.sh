#!/usr/bin/env bash
# Multi-host tests on one machine: each "host" is a network namespace with its own address on
# a bridge (10.79.0.0/24, inside this machine only) and its own host identity
# (RDMACOLL_HOST_ID). Ranks talk UCX over TCP on eth0 (UCX_TLS=tcp UCX_NET_DEVICES=eth0:
# without them UCX would use shared memory across namespaces). Each run checks every element
# and that the off-host bytes the transport counted equal the simulator's prediction.
#   run.sh PATH/TO/offhost_bytes
set -euo pipefail
prog=$(realpath "${1:?offhost_bytes binary}")
[ "$(id -u)" = 0 ] || { echo "multihost: needs root (network namespaces)"; exit 1; }
prefix=rdcmh
hosts_max=4
bridge=${prefix}br0

teardown() {
  for i in $(seq 1 $hosts_max); do
    ip netns pids "$prefix-h$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$prefix-h$i" 2>/dev/null || true
    ip link del "${prefix}v$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}
trap teardown EXIT
teardown
ip link add "$bridge" type bridge
ip addr add 10.79.0.1/24 dev "$bridge"
ip link set "$bridge" up
for i in $(seq 1 $hosts_max); do
  ns=$prefix-h$i
  ip netns add "$ns"
  ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${prefix}v$i" master "$bridge" up
  ip -n "$ns" addr add "10.79.0.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

failures=0
# run_layout K1,K2,... BYTES [VAR=VALUE...]: K1 ranks on the first host, K2 on the second...,
# ranks numbered host by host. OP (all_gather, reduce_scatter) from the environment.
run_layout() {
  local layout=$1 bytes=$2 op=${OP:-all_gather}
  shift 2
  local port=$((20000 + RANDOM % 10000)) pids=() rc=0 log hosts=() locals=() h=0 k l
  for k in ${layout//,/ }; do
    for l in $(seq 0 $((k - 1))); do hosts+=("$h"); locals+=("$l"); done
    h=$((h + 1))
  done
  local world=${#hosts[@]}
  log=$(mktemp)
  echo "== $op: ranks per host $layout, $bytes bytes per rank $*"
  for r in $(seq 0 $((world - 1))); do
    local h=${hosts[$r]}
    ip netns exec "$prefix-h$((h + 1))" env "$@" RANK=$r WORLD_SIZE=$world LOCAL_RANK=${locals[$r]} \
      MASTER_ADDR=10.79.0.11 MASTER_PORT=$port RDMACOLL_HOST_ID="host$h" RDMACOLL_TIMEOUT_S=60 \
      UCX_TLS=tcp UCX_NET_DEVICES=eth0 UCX_WARN_UNUSED_ENV_VARS=n \
      timeout -k 5 120 "$prog" "$bytes" "$op" >>"$log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$log"
  rm -f "$log"
  if [ $rc -ne 0 ]; then echo "FAILED"; failures=$((failures + 1)); fi
}
# run HOSTS RANKS_PER_HOST BYTES [VAR=VALUE...]: the same ranks on every host.
run() {
  local layout=$2 i
  for i in $(seq 2 "$1"); do layout="$layout,$2"; done
  run_layout "$layout" "${@:3}"
}

run 2 2 65536
run 2 2 65536 RDMACOLL_TOPOLOGY=flat RDMACOLL_ALGO=rd
run 4 1 65536
run 2 2 1048576 RDMACOLL_ALGO=ring
run 2 2 4096 RDMACOLL_ALGO=bruck
run 3 1 1048576
run 3 2 8192
# Uneven layouts: the two-level schedule sends the minimum off-host bytes (3 x 2: 4 chunks per
# host where the flat Bruck sends 10; 1 + 1 + 1 + 3 likewise), checked against the simulator.
run 3 2 65536
run_layout 1,1,1,3 65536
run_layout 1,1,1,3 1048576
run_layout 3,1,2 65536 RDMACOLL_ALGO=two_level
OP=reduce_scatter run 2 2 65536
OP=reduce_scatter run 3 2 8192
OP=reduce_scatter run 2 1 65536
echo "multihost: $failures failed run(s)"
[ $failures -eq 0 ]

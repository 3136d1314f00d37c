#!/usr/bin/env bash
# A link flap across two SoftRoCE VMs (perf/fault_probe.cpp): rank 1 takes its
# VM's eth0 (the rxe netdev) down and up while both ranks are inside 4 MiB all-gathers.
#   flap:   down 1 s, inside the QPs' retry budget: the calls complete right.
#   outage: down 8 s past a 1 s budget: PeerFailure on both ranks, inside the job's timeout.
#   two-vm-link-flap.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?build dir}" && pwd)
logdir=$(mktemp -d)
trap 'pkill -9 -f "mac=52:54:00:79:00:0" 2>/dev/null || true; rm -rf "$logdir"' EXIT
master_addr=10.79.0.1 master_port=29602 vm_timeout=300
. "$here/two-vm-lib.sh"
failed=0
for mode in flap outage; do
  port=$((20000 + RANDOM % 10000))
  budget=()
  [ $mode = outage ] && budget=(RDMACOLL_IB_TIMEOUT=16 RDMACOLL_IB_RETRY_CNT=3)
  job() {  # rank ip mac net
    rank_vm "$1" "$2" "$3" "$4" "$logdir/$mode$1.log" "${budget[@]}" RDMACOLL_TIMEOUT_S=120 \
      ./fault_probe "$mode"
  }
  start=$(date +%s)
  job 0 10.79.0.1 52:54:00:79:00:01 "listen:$port" &
  pid0=$!
  wait_for_listener "$port"
  job 1 10.79.0.2 52:54:00:79:00:02 "connect:$port" &
  pid1=$!
  rc0=0 rc1=0
  wait $pid0 || rc0=$?
  wait $pid1 || rc1=$?
  for r in 0 1; do
    grep -E "^(RESULT|LINK)|WARN|rdmacoll: " "$logdir/$mode$r.log" | sed "s/^/[$mode vm$r] /" || true
  done
  echo "link-flap $mode: rank 0 exit $rc0, rank 1 exit $rc1, $(($(date +%s) - start)) s"
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
    for r in 0 1; do tail -20 "$logdir/$mode$r.log" | sed "s/^/[$mode vm$r] /"; done
    failed=$((failed + 1))
  fi
done
[ $failed -eq 0 ]

#!/usr/bin/env bash
# Dead-host detection: two VMs as in two-vm.sh run peer_death_probe; once rank 1 is parked and
# rank 0 waits in a gather, the host kills rank 1's VM (SIGKILL to its QEMU: the host is gone,
# its NIC answers nothing). Rank 0 must print DETECTED within the limit, far inside the job
# timeout (300 s). Prints the detection time seen from the host.
#   two-vm-peer-death.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?build dir}" && pwd)
limit_s=30
port=$((20000 + RANDOM % 10000))
logdir=$(mktemp -d)
trap 'pkill -9 -f "mac=52:54:00:78:00:0" 2>/dev/null || true; rm -rf "$logdir"' EXIT
master_addr=10.78.0.1 master_port=29601 vm_timeout=400
. "$here/two-vm-lib.sh"
job() {  # rank ip mac net
  # ACK timeout 2^16 x 4.096 us = 268 ms, 3 retries: a dead peer fails a write in about 1 s.
  rank_vm "$1" "$2" "$3" "$4" "$logdir/rank$1.log" RDMACOLL_IB_TIMEOUT=16 \
    RDMACOLL_IB_RETRY_CNT=3 ./tests/peer_death_probe
}
job 0 10.78.0.1 52:54:00:78:00:01 "listen:$port" &
pid0=$!
wait_for_listener "$port"
job 1 10.78.0.2 52:54:00:78:00:02 "connect:$port" &
# Both parked/waiting: poll the consoles (bounded), then give rank 0 a moment to be inside the
# call (its descriptor must have been acknowledged before the kill).
for _ in $(seq 1 3000); do
  grep -q PARKED "$logdir/rank1.log" 2>/dev/null && grep -q WAITING "$logdir/rank0.log" 2>/dev/null && break
  if ! kill -0 $pid0 2>/dev/null; then break; fi
  sleep 0.1
done
sleep 3  # rank 0 sends its descriptor and settles into waiting; nothing to poll for inside the VM
# QEMU itself, not only the `timeout` wrapping it (both command lines name the MAC).
pgrep -f "qemu-system.*mac=52:54:00:78:00:02" >/dev/null ||
  { cat "$logdir"/rank*.log; echo "peer-death: rank 1's VM is not running"; exit 1; }
pkill -9 -f "qemu-system.*mac=52:54:00:78:00:02"
killed=$(date +%s.%N)
detected=""
for _ in $(seq 1 $((limit_s * 10))); do
  if grep -q "DETECTED" "$logdir/rank0.log"; then detected=$(date +%s.%N); break; fi
  kill -0 $pid0 2>/dev/null || break
  sleep 0.1
done
if [ -z "$detected" ]; then
  pkill -9 -f "mac=52:54:00:78:00:01" || true  # rank 0 would wait for the job's timeout
  wait $pid0 || true
  sed "s/^/[vm0] /" "$logdir/rank0.log" | grep -v "^\[vm0\] \[" | tail -40
  echo "peer-death: rank 0 did not report the dead host within ${limit_s} s"
  exit 1
fi
rc0=0
wait $pid0 || rc0=$?
sed "s/^/[vm0] /" "$logdir/rank0.log" | grep -v "^\[vm0\] \[" | tail -20
echo "peer-death: rank 0 reported the killed VM $(echo "$detected $killed" | awk '{printf "%.1f", $1 - $2}') s after the kill (exit $rc0)"
[ $rc0 -eq 0 ]

#!/usr/bin/env bash
# Two VMs, each with its own rxe0, joined by a QEMU socket netdev on 127.0.0.1: one rank per VM
# runs all_gather_into_tensor over verbs across the virtual cable (values checked, #wrong 0).
#   two-vm.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?build dir}" && pwd)
port=$((20000 + RANDOM % 10000))
logdir=$(mktemp -d)
master_addr=10.77.0.1 master_port=29600
. "$here/two-vm-lib.sh"
job() {  # rank ip mac net
  rank_vm "$1" "$2" "$3" "$4" "$logdir/rank$1.log" RDMACOLL_DEBUG=info \
    ./all_gather_perf -b 8 -e 256K -f 32 -n 3 -w 1 -c 1
}
job 0 10.77.0.1 52:54:00:77:00:01 "listen:$port" &
pid0=$!
wait_for_listener "$port"
job 1 10.77.0.2 52:54:00:77:00:02 "connect:$port" &
pid1=$!
rc0=0 rc1=0
wait $pid0 || rc0=$?
wait $pid1 || rc1=$?
for r in 0 1; do sed "s/^/[vm$r] /" "$logdir/rank$r.log"; done
rm -rf "$logdir"
echo "two-vm: rank 0 exit $rc0, rank 1 exit $rc1"
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]

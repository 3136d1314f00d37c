# Sourced by the two-VM tests (two-vm.sh, two-vm-peer-death.sh): one rank per VM, the VMs
# joined by a QEMU socket netdev on 127.0.0.1, each with its own rxe0 on 10.x.0.<rank+1>/24.
# Needs $here (this directory) and $build.

# rank_vm RANK IP MAC NET LOG CMD...: runs CMD in a VM as RANK of a 2-rank verbs job whose
# store is at $master_addr:$master_port, output to LOG.
rank_vm() {
  local rank=$1 ip=$2 mac=$3 net=$4 log=$5
  shift 5
  "$here/run-vm.sh" --timeout "${vm_timeout:-600}" --ip "$ip/24" --mac "$mac" --net "$net" \
    --cwd "$build" -- env RANK="$rank" WORLD_SIZE=2 MASTER_ADDR="$master_addr" \
    MASTER_PORT="$master_port" RDMACOLL_TRANSPORT=verbs RDMACOLL_TIMEOUT_S=300 "$@" > "$log" 2>&1
}

# QEMU listens before it boots the guest; wait for the socket (never probe it by connecting:
# QEMU would take the probe as its peer).
wait_for_listener() {
  for _ in $(seq 1 300); do
    ss -ltn "sport = :$1" | grep -q LISTEN && return 0
    sleep 0.1  # polling for QEMU's socket, bounded above
  done
  return 0
}

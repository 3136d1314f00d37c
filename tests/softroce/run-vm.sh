#!/usr/bin/env bash
# Boots the prepared kernel under qemu-system-x86_64 (TCG: KVM here cannot boot a stock kernel)
# with the host's root shared read-only, creates rxe0 on eth0, runs one command inside and
# exits with its status (124: the VM timed out; 125: the VM failed to come up).
#   run-vm.sh [--timeout S] [--smp N] [--mem MB] [--ip A.B.C.D/NN] [--mac MAC]
#             [--net none|listen:PORT|connect:PORT] [--cwd DIR] [--] COMMAND ARGS...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${RDMACOLL_VM_WORK:-/tmp/rdmacoll-vm}
timeout=1200 smp=2 mem=2048 ip=10.77.0.1/24 mac=52:54:00:77:00:01 net=none cwd=$PWD
while [ $# -gt 0 ]; do
  case $1 in
    --timeout) timeout=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --ip) ip=$2; shift 2 ;;
    --mac) mac=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    --cwd) cwd=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "run-vm: no command" >&2; exit 125; }
command -v qemu-system-x86_64 >/dev/null || { echo "run-vm: qemu-system-x86 is not installed" >&2; exit 125; }
"$here/prepare.sh" >/dev/null
. "$work/vm.env"
mkdir -p "$work/runs"
run=$(mktemp -d "$work/runs/run.XXXXXX")
{
  echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8"
  echo "export RDMACOLL_IN_VM=1"
  for v in $(compgen -e | grep -E '^(RDMACOLL_|UCX_|GTEST_)' || true); do
    printf 'export %s=%q\n' "$v" "${!v}"
  done
  printf 'cd %q || exit 126\n' "$cwd"
  printf '%q ' "$@"; echo
} > "$run/cmd.sh"
case $net in
  none) netdev="-netdev hubport,id=n0,hubid=0" ;;
  listen:*) netdev="-netdev socket,id=n0,listen=127.0.0.1:${net#listen:}" ;;
  connect:*) netdev="-netdev socket,id=n0,connect=127.0.0.1:${net#connect:}" ;;
  *) echo "run-vm: bad --net $net" >&2; exit 125 ;;
esac
guest_timeout=$((timeout > 60 ? timeout - 15 : timeout))
append="console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off 8250.nr_uarts=1 random.trust_cpu=on
 rdinit=/init vm.run=$run vm.ip=$ip vm.timeout=$guest_timeout"
start=$(date +%s)
set +e
timeout -k 10 "$timeout" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
  -accel tcg,thread=multi -cpu max -smp "$smp" -m "$mem" -serial stdio \
  -kernel "$VM_KERNEL" -initrd "$VM_INITRD" -append "$(echo $append)" \
  -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap" \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev "local,id=vmrun,path=$run,security_model=none,multidevs=remap" \
  -device virtio-9p-pci,fsdev=vmrun,mount_tag=vmrun \
  $netdev -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=" -device virtio-rng-pci </dev/null
qrc=$?
set -e
echo "run-vm: qemu exited ($qrc) after $(($(date +%s) - start)) s" >&2
if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then echo "run-vm: VM timed out after ${timeout}s" >&2; exit 124; fi
[ -f "$run/rc" ] || { echo "run-vm: the guest reported no status (boot failure)" >&2; exit 125; }
rc=$(cat "$run/rc")
rm -rf "$run"
exit "$rc"

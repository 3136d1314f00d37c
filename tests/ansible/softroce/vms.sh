#!/usr/bin/env bash
# Two SoftRoCE VMs that Ansible reaches over SSH, for tests/ansible/softroce/run.sh.
#   vms.sh up     boot both (about 25 s), wait for sshd, write $STATE/inventory.ini
#   vms.sh down   power both off (then SIGTERM/SIGKILL), close SSH masters; idempotent
# Each VM: Debian's stock kernel under QEMU/TCG (tests/softroce/prepare.sh), the host's root
# read-only over 9p with a tmpfs overlay, two NICs: the RoCE cable (a socket netdev between the
# VMs, 10.77.0.1 and .2) and a management NIC (QEMU user net, restricted, ssh forwarded from a
# free port on 127.0.0.1). rdma_rxe is not loaded: the playbook provisions SoftRoCE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
state=${RDMACOLL_ANSIBLE_VM_STATE:-/tmp/rdmacoll-softroce-ansible}
life=${RDMACOLL_ANSIBLE_VM_LIFE:-1800}  # hard bound on a VM's life, seconds
say() { echo "vms: $*" >&2; }

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

down() {
  [ -d "$state" ] || return 0
  for vm in "$state"/vm*/; do
    [ -d "$vm" ] && touch "$vm/poweroff"
  done
  local deadline=$((SECONDS + 30))
  for pidfile in "$state"/vm*/qemu.pid; do
    [ -f "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      sleep 2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
  for sock in "$state"/cp/*; do
    [ -S "$sock" ] && ssh -o ControlPath="$sock" -O exit dummy >/dev/null 2>&1 || true
  done
  return 0
}

up() {
  down
  rm -rf "$state"
  mkdir -p "$state/cp"
  command -v depmod >/dev/null || { say "depmod missing (apt-get install kmod)"; exit 1; }
  command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || { say "sshd missing (openssh-server)"; exit 1; }
  "$root/tests/softroce/prepare.sh" >/dev/null
  . "${RDMACOLL_VM_WORK:-/tmp/rdmacoll-vm}/vm.env"
  local kdir=${VM_KERNEL%/boot/*}
  # modprobe inside needs modules.dep for the unpacked kernel (the guest sees it through 9p).
  [ -s "$kdir/lib/modules/$VM_KVER/modules.dep" ] || depmod -b "$kdir" "$VM_KVER"
  # The kernel unpacks concatenated cpio archives; the later /init wins.
  local initrd=$state/initramfs-ssh.cpio.gz ir
  ir=$(mktemp -d "$state/init.XXXXXX")
  cp "$here/guest-init-ssh.sh" "$ir/init"
  chmod 755 "$ir/init"
  { cat "$VM_INITRD"; (cd "$ir" && echo init | cpio -o -H newc --quiet | gzip -1); } > "$initrd"
  rm -rf "$ir"
  ssh-keygen -q -t ed25519 -N '' -C rdmacoll-ansible-test -f "$state/id_ed25519"
  local roce_port
  roce_port=$(free_port)
  trap 'rc=$?; [ $rc -eq 0 ] || down; exit $rc' EXIT
  for i in 1 2; do
    local vm=$state/vm$i ssh_port
    mkdir -p "$vm"
    cp "$state/id_ed25519.pub" "$vm/authorized_keys"
    ssh_port=$(free_port)
    echo "$ssh_port" > "$vm/ssh_port"
    local cable
    if [ $i = 1 ]; then cable="listen=127.0.0.1:$roce_port"; else cable="connect=127.0.0.1:$roce_port"; fi
    local append="console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off 8250.nr_uarts=1
      random.trust_cpu=on rdinit=/init vm.run=$vm vm.ip=10.77.0.$i/24 vm.mac=52:54:00:77:00:0$i
      vm.mgmt=10.0.2.15/24 vm.mgmtmac=52:54:00:88:00:0$i vm.kdir=$kdir vm.name=rxevm$i
      vm.timeout=$((life - 30))"
    setsid timeout -k 10 "$life" nice -n 5 qemu-system-x86_64 -nodefaults -no-user-config \
      -display none -no-reboot -accel tcg,thread=multi -cpu max -smp 2 -m 2048 \
      -serial "file:$vm/console.log" -kernel "$VM_KERNEL" -initrd "$initrd" \
      -append "$(echo $append)" \
      -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap" \
      -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
      -fsdev "local,id=vmrun,path=$vm,security_model=none,multidevs=remap" \
      -device virtio-9p-pci,fsdev=vmrun,mount_tag=vmrun \
      -netdev "socket,id=roce,$cable" -device "virtio-net-pci,netdev=roce,mac=52:54:00:77:00:0$i,romfile=" \
      -netdev "user,id=mgmt,restrict=on,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:$ssh_port-10.0.2.15:22" \
      -device "virtio-net-pci,netdev=mgmt,mac=52:54:00:88:00:0$i,romfile=" \
      -device virtio-rng-pci </dev/null >"$vm/qemu.log" 2>&1 &
    echo $! > "$vm/qemu.pid"
    if [ $i = 1 ]; then
      # QEMU listens before the guest boots; wait for the socket, never probe it by connecting
      # (QEMU would take the probe as the other VM).
      for _ in $(seq 1 300); do
        ss -ltn "sport = :$roce_port" | grep -q LISTEN && break
        sleep 0.1
      done
    fi
  done
  local ssh_opts=(-i "$state/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
    -o LogLevel=ERROR -o ConnectTimeout=10 -o BatchMode=yes)
  for i in 1 2; do
    local vm=$state/vm$i deadline=$((SECONDS + 300))
    until [ -e "$vm/ready" ]; do
      [ -e "$vm/failed" ] && { say "vm$i failed: $(cat "$vm/failed")"; exit 1; }
      kill -0 "$(cat "$vm/qemu.pid")" 2>/dev/null || { say "vm$i: QEMU exited"; tail -20 "$vm/console.log" >&2; exit 1; }
      [ $SECONDS -lt $deadline ] || { say "vm$i: no sshd after 300 s"; tail -20 "$vm/console.log" >&2; exit 1; }
      sleep 0.5
    done
    # hostfwd accepts before sshd listens: retry until a command runs.
    until ssh "${ssh_opts[@]}" -p "$(cat "$vm/ssh_port")" root@127.0.0.1 true 2>/dev/null; do
      [ $SECONDS -lt $deadline ] || { say "vm$i: ssh never answered"; exit 1; }
      sleep 1
    done
  done
  cat > "$state/inventory.ini" <<INV
# Written by tests/ansible/softroce/vms.sh: two SoftRoCE VMs on this machine.
[bench]
vm1 ansible_port=$(cat "$state/vm1/ssh_port") rdmacoll_softroce_ip=10.77.0.1
vm2 ansible_port=$(cat "$state/vm2/ssh_port") rdmacoll_softroce_ip=10.77.0.2

[bench:vars]
ansible_host=127.0.0.1
ansible_user=root
ansible_ssh_private_key_file=$state/id_ed25519
ansible_ssh_common_args=-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
ansible_python_interpreter=/usr/bin/python3
bench_master_addr=10.77.0.1
rdmacoll_softroce=true
INV
  say "both VMs up in ${SECONDS} s; inventory: $state/inventory.ini"
  trap - EXIT
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: vms.sh up|down" >&2; exit 2 ;;
esac

#!/bin/sh
# PID 1 of the SoftRoCE guest (busybox). Loads the shipped modules, mounts the host's root
# read-only over 9p under a tmpfs overlay (so the host's /tmp, where CI may build, stays visible),
# mounts the run folder read-write at its host path,
# brings up eth0 and rxe0, runs <run>/cmd.sh chrooted into the host root, stores its exit
# status in <run>/rc and powers off. Parameters: vm.run= vm.ip= vm.timeout= on the cmdline.
export PATH=/bin:/sbin
/bin/busybox mkdir -p /usr/bin /usr/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "vm-init: $*" >/dev/console; }
halt_with() { echo "VM_RC=$1" >/dev/console; sync; poweroff -f; }
fail() { say "FATAL: $*"; halt_with 125; }

run= ip=10.77.0.1/24 tmo=0
for w in $(cat /proc/cmdline); do
  case $w in
    vm.run=*) run=${w#*=} ;;
    vm.ip=*) ip=${w#*=} ;;
    vm.timeout=*) tmo=${w#*=} ;;
  esac
done
kver=$(cat /etc/kver)
while read -r m; do insmod "/lib/modules/$kver/$m" 2>/dev/null; done < /lib/modules/load-order
for m in virtio_net 9p overlay rdma_rxe ib_uverbs; do
  [ -d /sys/module/$m ] || fail "module $m did not load"
done
echo /sbin/modprobe > /proc/sys/kernel/modprobe

o9p=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$o9p,ro,cache=loose" hostroot /lower || fail "cannot mount the host root"
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
  fail "overlay mount failed"
r=/newroot
mount -t proc proc $r/proc
mount -t sysfs sysfs $r/sys
mount -t devtmpfs devtmpfs $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts devpts $r/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
mount -t tmpfs -o mode=755 tmpfs $r/run
[ -n "$run" ] || fail "no vm.run= given"
mkdir -p "$r$run"
mount -t 9p -o "$o9p" vmrun "$r$run" || fail "cannot mount the run folder"

hostname "vm-${ip%%/*}"
ip link set lo up
ip link set eth0 up
ip addr add "$ip" dev eth0 || fail "ip addr add $ip"
chroot $r rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 failed"
n=0
until grep -q ACTIVE $r/sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
  n=$((n + 1)); [ $n -gt 200 ] && fail "rxe0 never became ACTIVE"
  sleep 0.1
done
say "rxe0 ACTIVE on eth0 $ip after $(cut -d' ' -f1 /proc/uptime)s"
ulimit -l unlimited
ulimit -n 65536
to=; [ "$tmo" -gt 0 ] 2>/dev/null && to="timeout -s KILL $tmo"
$to chroot $r /bin/sh -c "exec /bin/bash '$run/cmd.sh'" </dev/null >/dev/console 2>&1
rc=$?
echo $rc > "$r$run/rc"
sync
umount "$r$run" 2>/dev/null
halt_with $rc

#!/bin/sh
# PID 1 of a SoftRoCE VM driven over SSH by Ansible (busybox sh), appended to the SoftRoCE
# suite's initramfs as a second cpio whose /init wins. Unlike tests/softroce/guest-init.sh it
# leaves rdma_rxe unloaded and creates no rxe device: the playbook does both. Then:
#  - the host's root read-only over 9p under a tmpfs overlay, the run folder at its host path;
#  - NICs by MAC: the RoCE NIC (socket netdev to the other VM) gets vm.ip, the management NIC
#    (QEMU user net, ssh forwarded from 127.0.0.1 on the host) vm.mgmt; no default route;
#  - /usr/lib/modules/<kver> -> the unpacked kernel (vm.kdir, depmod'ed by vms.sh): modprobe
#    works inside;
#  - sshd: a fresh host key, root by key only (<run>/authorized_keys), memlock unlimited;
#  - powers off when <run>/poweroff or /run/poweroff appears, or after vm.timeout seconds.
# Kernel command line: vm.run= vm.ip= vm.mac= vm.mgmt= vm.mgmtmac= vm.kdir= vm.name= vm.timeout=
export PATH=/bin:/sbin
/bin/busybox mkdir -p /usr/bin /usr/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "vm-init: $*" >/dev/console; }
off() { say "powering off ($1)"; sync; poweroff -f; sleep 5; echo o >/proc/sysrq-trigger; }
R=/newroot
fail() { say "FATAL: $*"; [ -n "$RUN" ] && echo "$*" > "$R$RUN/failed" 2>/dev/null; off failure; }

RUN= IP=10.77.0.1/24 MAC=52:54:00:77:00:01 MGMT=10.0.2.15/24 MGMTMAC=52:54:00:88:00:01
KDIR= NAME=rxevm TMO=3600
for w in $(cat /proc/cmdline); do
  case $w in
    vm.run=*) RUN=${w#*=} ;;
    vm.ip=*) IP=${w#*=} ;;
    vm.mac=*) MAC=${w#*=} ;;
    vm.mgmt=*) MGMT=${w#*=} ;;
    vm.mgmtmac=*) MGMTMAC=${w#*=} ;;
    vm.kdir=*) KDIR=${w#*=} ;;
    vm.name=*) NAME=${w#*=} ;;
    vm.timeout=*) TMO=${w#*=} ;;
  esac
done

KVER=$(cat /etc/kver)
while read -r m; do
  case $m in */rdma_rxe.ko) continue ;; esac  # the playbook loads it
  insmod "/lib/modules/$KVER/$m" 2>/dev/null
done < /lib/modules/load-order
for m in virtio_net 9p overlay ib_core ib_uverbs; do
  [ -d /sys/module/$m ] || fail "module $m did not load"
done
echo /sbin/modprobe > /proc/sys/kernel/modprobe

o9p=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$o9p,ro,cache=loose" hostroot /lower || fail "cannot mount the host root"
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work $R ||
  fail "overlay mount failed"
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tmpfs -o mode=755 tmpfs $R/run
# The host's dotfiles are visible through 9p, and bash reads ~/.bashrc for every SSH command.
echo "# SoftRoCE Ansible VM" > $R/root/.bashrc
cp $R/root/.bashrc $R/root/.profile
rm -f $R/root/.bash_profile $R/root/.bash_login
[ -n "$RUN" ] || fail "no vm.run= given"
mkdir -p "$R$RUN"
mount -t 9p -o "$o9p" vmrun "$R$RUN" || fail "cannot mount the run folder"

by_mac() { for d in /sys/class/net/*; do [ "$(cat "$d/address")" = "$1" ] && echo "${d##*/}"; done; }
hostname "$NAME"
echo "$NAME" > $R/etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$NAME" > $R/etc/hosts
ip link set lo up
roce=$(by_mac "$MAC")
mgmt=$(by_mac "$MGMTMAC")
[ -n "$roce" ] && [ -n "$mgmt" ] || fail "NICs $MAC / $MGMTMAC not found"
ip link set "$roce" up && ip addr add "$IP" dev "$roce" || fail "ip addr $IP on $roce"
ip link set "$mgmt" up && ip addr add "$MGMT" dev "$mgmt" || fail "ip addr $MGMT on $mgmt"

if [ -n "$KDIR" ] && [ -d "$R$KDIR/lib/modules/$KVER" ]; then
  mkdir -p $R/usr/lib/modules
  ln -sfn "$KDIR/lib/modules/$KVER" "$R/usr/lib/modules/$KVER"
fi

mkdir -p $R/run/sshd $R/run/vmssh
chmod 755 $R/run/sshd
cat > $R/run/vmssh/sshd_config <<CFG
ListenAddress ${MGMT%/*}
HostKey /run/vmssh/ssh_host_ed25519_key
PidFile /run/vmssh/sshd.pid
PermitRootLogin prohibit-password
AuthorizedKeysFile $RUN/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
MaxSessions 20
MaxStartups 20:30:60
Subsystem sftp /usr/lib/openssh/sftp-server
CFG
chroot $R /usr/bin/ssh-keygen -q -t ed25519 -N '' -C "$NAME" -f /run/vmssh/ssh_host_ed25519_key ||
  fail "ssh-keygen failed"
ulimit -l unlimited  # every SSH session inherits it (RDMA registrations pin memory)
ulimit -n 65536
chroot $R /usr/sbin/sshd -f /run/vmssh/sshd_config -E "$RUN/sshd.log" || fail "sshd did not start"
cut -d' ' -f1 /proc/uptime > "$R$RUN/ready"
say "sshd up on $MGMT, RoCE NIC $roce $IP, after $(cut -d' ' -f1 /proc/uptime)s"

n=0
while [ ! -e $R/run/poweroff ] && [ ! -e "$R$RUN/poweroff" ] && [ "$n" -lt "$TMO" ]; do
  sleep 2
  n=$((n + 2))
done
kill "$(cat $R/run/vmssh/sshd.pid 2>/dev/null)" 2>/dev/null
sync
umount "$R$RUN" 2>/dev/null
off "asked to"

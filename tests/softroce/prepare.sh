#!/usr/bin/env bash
# Fetches Debian's stock amd64 kernel (apt-get download + dpkg -x: never installed) and builds a
# small busybox initramfs holding the modules a SoftRoCE guest needs. Cached in $VM_WORK;
# prints the kernel, initramfs and version as shell assignments (also in $VM_WORK/vm.env).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${RDMACOLL_VM_WORK:-/tmp/rdmacoll-vm}
mkdir -p "$work/debs" "$work/kernel"
fail() { echo "prepare: $*" >&2; exit 1; }

busybox=$(command -v busybox) || fail "busybox missing (apt-get install busybox-static)"
{ ldd "$busybox" 2>&1 || true; } | grep -q 'not a dynamic executable' || fail "$busybox must be static (busybox-static)"

resolve() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
pkg=${RDMACOLL_VM_KERNEL_PKG:-$(resolve)}
if [ -z "$pkg" ]; then apt-get update -qq >&2; pkg=$(resolve); fi
[ -n "$pkg" ] || fail "cannot resolve linux-image-amd64; run apt-get update"
case $pkg in *cloud*) fail "cloud kernels have no rdma_rxe" ;; esac
kdir=$work/kernel/$pkg
if [ ! -e "$kdir/.done" ]; then
  (cd "$work/debs" && rm -f "${pkg}"_*.deb && timeout 600 apt-get download -q "$pkg" >&2)
  deb=$(ls "$work/debs/${pkg}"_*.deb | head -1)
  rm -rf "$kdir" && mkdir -p "$kdir"
  timeout 600 dpkg -x "$deb" "$kdir"
  touch "$kdir/.done"
fi
kernel=$(ls "$kdir"/boot/vmlinuz-* | head -1)
kver=${kernel##*/vmlinuz-}
mods=$kdir/lib/modules/$kver
grep -q '^CONFIG_RDMA_RXE=[ym]' "$kdir/boot/config-$kver" || fail "$pkg lacks CONFIG_RDMA_RXE"

initrd=$kdir/initramfs.cpio.gz
if [ ! -f "$initrd" ] || [ "$here/guest-init.sh" -nt "$initrd" ] || [ "$0" -nt "$initrd" ]; then
  # Wanted modules; their dependencies (from .modinfo) are added before them.
  want="virtio_pci virtio_net virtio-rng 9pnet_virtio 9p overlay crc32_generic crc32-pclmul
        rdma_rxe ib_uverbs ib_umad rdma_ucm dummy"
  declare -A path_of=() seen=()
  while IFS= read -r p; do
    b=${p##*/}; b=${b%.ko*}; path_of[${b//-/_}]=$p
  done < <(cd "$mods" && find kernel -name '*.ko*')
  modinfo_field() {
    case $1 in
      *.xz) xz -dc "$mods/$1" ;; *.zst) zstd -dc "$mods/$1" ;; *) cat "$mods/$1" ;;
    esac | tr '\0' '\n' | sed -n "s/^$2=//p"
  }
  order=()
  add() {
    local n=${1//-/_} p d
    [ -n "${seen[$n]:-}" ] && return 0
    seen[$n]=1
    p=${path_of[$n]:-}
    [ -n "$p" ] || return 0  # built in
    for d in $(modinfo_field "$p" depends | tr ',' ' '); do add "$d"; done
    order+=("$p")
  }
  for m in $want; do add "$m"; done
  ir=$(mktemp -d "$work/initramfs.XXXXXX")
  mkdir -p "$ir"/{bin,sbin,dev,proc,sys,lower,rw,newroot,etc} "$ir/lib/modules/$kver"
  cp "$busybox" "$ir/bin/busybox"
  ln -s busybox "$ir/bin/sh"
  ln -s ../bin/busybox "$ir/sbin/modprobe"  # the kernel's request_module() finds shipped modules
  : > "$ir/lib/modules/$kver/modules.dep"
  : > "$ir/lib/modules/load-order"
  for p in "${order[@]}"; do
    rel=${p%.ko*}.ko
    mkdir -p "$(dirname "$ir/lib/modules/$kver/$rel")"
    case $p in
      *.xz) xz -dc "$mods/$p" ;; *.zst) zstd -dc "$mods/$p" ;; *) cat "$mods/$p" ;;
    esac > "$ir/lib/modules/$kver/$rel"
    echo "$rel:" >> "$ir/lib/modules/$kver/modules.dep"
    echo "$rel" >> "$ir/lib/modules/load-order"
  done
  cp "$here/guest-init.sh" "$ir/init"
  chmod 755 "$ir/init"
  echo "$kver" > "$ir/etc/kver"
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$ir"
fi
printf 'VM_KERNEL=%s\nVM_INITRD=%s\nVM_KVER=%s\n' "$kernel" "$initrd" "$kver" | tee "$work/vm.env"

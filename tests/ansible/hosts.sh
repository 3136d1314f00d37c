#!/usr/bin/env bash
# Fake SSH hosts for the Ansible test: each is a network namespace on a bridge (10.80.0.0/24,
# inside this machine only) running its own sshd, under its own UTS namespace (hostname nodeN)
# and mount namespace (private tmpfs on /tmp and /var/tmp), reachable with a key made here.
#   hosts.sh up N     -> writes $STATE/inventory.ini
#   hosts.sh down     -> kills everything in our namespaces, removes namespaces, links, state
set -uo pipefail
prefix=rdcans
state=${RDMACOLL_ANSIBLE_STATE:-/run/rdmacoll-ansible-test}
bridge=${prefix}br0
net=10.80.0
ip_of() { echo "$net.$((10 + $1))"; }

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-node[0-9]+$"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  # sshd runs in its own mount/UTS namespaces but in our network namespace: the pids above.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-node[0-9]+$"); do
    for _ in $(seq 1 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
    ip netns del "$ns" 2>/dev/null
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${prefix}v[0-9]+$"); do
    ip link del "$l" 2>/dev/null
  done
  ip link del "$bridge" 2>/dev/null
  rm -rf "$state"
  if ip netns list | grep -q "^$prefix-" || ip link show "$bridge" >/dev/null 2>&1; then
    echo "hosts.sh: teardown left something behind" >&2
    return 1
  fi
  return 0
}

up() {
  local n=$1
  set -e
  mkdir -p "$state" /run/sshd
  chmod 700 "$state"
  ssh-keygen -q -t ed25519 -N '' -f "$state/id_ed25519"
  ssh-keygen -q -t ed25519 -N '' -f "$state/host_key"
  cp "$state/id_ed25519.pub" "$state/authorized_keys"
  chmod 600 "$state/authorized_keys"
  cat > "$state/sshd_config" <<CFG
Port 22
HostKey $state/host_key
AuthorizedKeysFile $state/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM yes
UseDNS no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 64
Subsystem sftp /usr/lib/openssh/sftp-server
CFG
  : > "$state/known_hosts"
  ip link add "$bridge" type bridge
  ip addr add "$net.1/24" dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq 1 "$n"); do
    local ns=$prefix-node$i addr
    addr=$(ip_of "$i")
    ip netns add "$ns"
    ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${prefix}v$i" master "$bridge" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    setsid ip netns exec "$ns" unshare --uts --mount --propagation private -- /bin/sh -ec '
        hostname "$1"
        mount -t tmpfs -o mode=1777,size=2g "rdc-$1-tmp" /tmp
        mount -t tmpfs -o mode=1777,size=2g "rdc-$1-vartmp" /var/tmp
        exec /usr/sbin/sshd -D -f "$2/sshd_config" -o "ListenAddress=$3:22" -E "$2/sshd-$1.log"
      ' sh "node$i" "$state" "$addr" </dev/null >/dev/null 2>&1 &
    echo "$addr $(cut -d' ' -f1,2 "$state/host_key.pub")" >> "$state/known_hosts"
  done
  local deadline=$((SECONDS + 30))
  for i in $(seq 1 "$n"); do
    until ssh -F /dev/null -i "$state/id_ed25519" -o BatchMode=yes -o ConnectTimeout=2 \
        -o UserKnownHostsFile="$state/known_hosts" -o StrictHostKeyChecking=yes \
        "root@$(ip_of "$i")" true 2>/dev/null; do
      [ $SECONDS -lt $deadline ] || { echo "hosts.sh: sshd on $(ip_of "$i") never answered" >&2; return 1; }
      sleep 0.2  # retry pacing while sshd starts, bounded by the deadline above
    done
  done
  {
    echo "[bench]"
    for i in $(seq 1 "$n"); do echo "node$i ansible_host=$(ip_of "$i")"; done
    echo
    echo "[bench:vars]"
    echo "ansible_user=root"
    echo "ansible_ssh_private_key_file=$state/id_ed25519"
    echo "ansible_ssh_common_args=-F /dev/null -o UserKnownHostsFile=$state/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5"
  } > "$state/inventory.ini"
  echo "hosts.sh: $n hosts up; inventory $state/inventory.ini"
}

case ${1:-} in
  up) up "${2:-3}" ;;
  down) down ;;
  *) echo "usage: hosts.sh up N | down" >&2; exit 2 ;;
esac

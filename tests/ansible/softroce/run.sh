#!/usr/bin/env bash
# Ansible over SoftRoCE, for real: two QEMU VMs with sshd (vms.sh), joined by a virtual cable;
# ansible-playbook site.yml against them with rdmacoll_softroce: provision (rdma_rxe, an rxe
# device on the cable's NIC, its port checked ACTIVE with a RoCE v2 GID, memlock), install the
# .deb built on this machine, bench all_gather_into_tensor across the VMs over verbs, fetch and
# check (every rank used verbs, #wrong 0). The VMs always go down, also after a failure.
#   run.sh BUILD_DIR      (a build configured for /usr is packaged as it stands)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:?build dir}
[ "$(id -u)" = 0 ] || { echo "softroce ansible test: needs root"; exit 1; }
state=${RDMACOLL_ANSIBLE_VM_STATE:-/tmp/rdmacoll-softroce-ansible}
results=$(mktemp -d /tmp/rdmacoll-softroce-results.XXXXXX)
t0=$(date +%s)
phase_start=$t0
phases=()
phase() {  # records how long the previous phase took
  local now
  now=$(date +%s)
  phases+=("$1: $((now - phase_start)) s")
  phase_start=$now
}
cleanup() {
  local rc=$?
  bash "$here/vms.sh" down || rc=1
  phase "VMs down"
  echo "softroce ansible test: ${phases[*]}; total $(($(date +%s) - t0)) s, exit $rc"
  exit $rc
}
trap cleanup EXIT

echo "== the .deb"
deb=$(bash "$root/scripts/package-deb.sh" "$build" | tail -1)
dpkg-deb -f "$deb" Package Version Depends
phase "package"

echo "== two SoftRoCE VMs"
bash "$here/vms.sh" up
phase "VMs up"

export ANSIBLE_CONFIG=$here/ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
export ANSIBLE_SSH_CONTROL_PATH_DIR=$state/cp
# mitogen keeps one Python per host: Python tasks cost a second instead of ~10 under TCG.
if /usr/bin/python3 -c 'import ansible_mitogen' 2>/dev/null; then
  ANSIBLE_STRATEGY_PLUGINS=$(/usr/bin/python3 -c 'import ansible_mitogen, os; print(os.path.dirname(ansible_mitogen.__file__) + "/plugins/strategy")')
  export ANSIBLE_STRATEGY_PLUGINS ANSIBLE_STRATEGY=mitogen_linear
fi
echo "== ansible-playbook site.yml (strategy ${ANSIBLE_STRATEGY:-linear})"
ansible-playbook -i "$state/inventory.ini" "$root/ansible/site.yml" \
  -e rdmacoll_install=deb -e "rdmacoll_deb=$deb" -e rdmacoll_deb_installer=dpkg \
  -e rdmacoll_install_packages=false -e "bench_results=$results" \
  -e '{"bench_args": "-b 8 -e 256K -f 32 -n 5 -w 1 -c 1"}' -e bench_timeout=300
phase "playbook"

echo "== the fetched results"
/usr/bin/python3 "$root/perf/compare/check_bench.py" "$results" --hosts 2 --world 2 --transport verbs
phase "check"

# For scale: perftest's ib_write_bw between the same VMs over the same rxe devices (64 KiB
# writes; perftest's clock is unreliable under TCG, so this is only an order of magnitude).
echo "== ib_write_bw vm1 <- vm2, for scale"
vm() {
  ssh -i "$state/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -p "$(cat "$state/vm$1/ssh_port")" root@127.0.0.1 "${@:2}"
}
vm 1 "timeout 120 ib_write_bw -d rxe_vm1 -x 1 -F -s 65536 -n 200 --report_gbits" > "$results/ib_write_bw.server" 2>&1 &
server=$!
for _ in $(seq 1 20); do
  vm 2 "timeout 100 ib_write_bw -d rxe_vm2 -x 1 -F -s 65536 -n 200 --report_gbits 10.77.0.1" \
    > "$results/ib_write_bw.client" 2>&1 && break
  sleep 2  # the server may not listen yet
done
wait "$server" || true
grep -A2 "#bytes" "$results/ib_write_bw.client" || { echo "ib_write_bw gave no figure:"; tail -5 "$results/ib_write_bw.client"; }
phase "ib_write_bw"
echo "softroce ansible test passed"

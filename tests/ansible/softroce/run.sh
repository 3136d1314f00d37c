#!/usr/bin/env bash
# Ansible over SoftRoCE, for real: two QEMU VMs with sshd (vms.sh), joined by a virtual cable;
# ansible-playbook site.yml against them with rdmacoll_softroce: provision (rdma_rxe, an rxe
# device on the cable's NIC, its port checked ACTIVE with a RoCE v2 GID, memlock), install the
# .deb built on this machine, bench all_gather_into_tensor across the VMs over verbs, fetch and
# check (every rank used verbs, #wrong 0). The VMs always go down, also after a failure.
#   run.sh BUILD_DIR      (a build configured for /usr is packaged as it stands)
# Then the qualification kit (scripts/qualify.sh) over the same VMs. RDMACOLL_QUALIFY_REPORT_DIR:
# where to copy its report.md and busbw.png (docs/qualify/ holds one made so).
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

# The qualification kit over the same VMs (scripts/qualify.sh): ib_write_bw between them,
# rdmacoll's busbw beside it, per-call counters, the NICs' counters, and the fault matrix (a rank
# killed, the cable's netdev down 1 s, down past a shortened budget); the report must say every
# fault case ended as it must. perftest's clock is unreliable under TCG: its figures here are an
# order of magnitude only.
echo "== the qualification kit (scripts/qualify.sh) over the two VMs"
bash "$root/scripts/qualify.sh" "$state/inventory.ini" "$results/qualify" \
  -e rdmacoll_install=deb -e '{"qualify_perftest_iters": 100}' \
  -e '{"qualify_bench_args": "-b 64K -e 4M -f 4 -n 5 -w 1 -c 1"}'
cp "$results/qualify/report.md" "$results/qualify/busbw.png" "${RDMACOLL_QUALIFY_REPORT_DIR:-$results}/" 2>/dev/null || true
phase "qualify"
echo "softroce ansible test passed"

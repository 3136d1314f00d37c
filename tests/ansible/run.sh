#!/usr/bin/env bash
# The Ansible test, for real: lint and syntax-check ansible/, bring up 3 SSH hosts in network
# namespaces, run ansible/site.yml against them (provision with the packages already present,
# build, bench over UCX TCP on eth0), assert the fetched results come from 3 distinct hosts,
# cover every rank and are correct, run site.yml again to show the build is idempotent, and
# always tear the hosts down.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "ansible test: needs root"; exit 1; }
state=/run/rdmacoll-ansible-test
results=$(mktemp -d /tmp/rdmacoll-ansible-results.XXXXXX)
start=$(date +%s)
cleanup() {
  local rc=$?
  bash "$here/hosts.sh" down || rc=1
  echo "ansible test: $(($(date +%s) - start)) s, exit $rc"
  exit $rc
}
trap cleanup EXIT
export ANSIBLE_CONFIG=$root/ansible/ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0

echo "== ansible-lint (offline, production profile) and syntax check"
(cd "$root/ansible" && ansible-lint --nocolor)
ansible-playbook --syntax-check -i "$root/ansible/inventory.example.ini" "$root/ansible/site.yml"

echo "== 3 namespace hosts"
bash "$here/hosts.sh" down >/dev/null 2>&1 || true
bash "$here/hosts.sh" up 3

overrides=(-e rdmacoll_install=source -e rdmacoll_apt_update=false -e rdmacoll_apt_throttle=1 -e "bench_results=$results"
  -e '{"bench_env": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}}'
  -e '{"bench_args": "-b 8 -e 1M -f 8 -n 10 -w 2 -c 1"}')
# The 3 hosts' builds are the same compile on one machine's cores: the first host builds alone
# into a compiler cache that the others then hit, instead of three builds at once. Each host still
# configures and links its own build.
if command -v ccache >/dev/null; then
  launcher="env;CCACHE_DIR=$state/ccache;ccache"
  overrides+=(-e "{\"rdmacoll_cmake_args\": \"-DCMAKE_C_COMPILER_LAUNCHER=$launcher -DCMAKE_CXX_COMPILER_LAUNCHER=$launcher\"}")
  echo "== provision and build on node1 alone (fills the compiler cache)"
  ansible-playbook -i "$state/inventory.ini" "$root/ansible/provision.yml" "$root/ansible/build.yml" \
    "${overrides[@]}" --limit node1
fi
echo "== ansible-playbook site.yml"
ansible-playbook -i "$state/inventory.ini" "$root/ansible/site.yml" "${overrides[@]}"

echo "== the fetched results"
/usr/bin/python3 "$root/perf/compare/check_bench.py" "$results" --hosts 3 --world 3
hosts=$(cat "$results"/*/rank-*.json | /usr/bin/python3 -c 'import json,sys; print(len({json.loads(l)["host"] for l in sys.stdin}))')
[ "$hosts" = 3 ] || { echo "results came from $hosts host(s), not 3"; exit 1; }
[ -s "$results/busbw.png" ] || { echo "no plot"; exit 1; }

echo "== the bench again, launched by mpirun from the first host (PMIx, no MASTER_ADDR)"
mpirun_results=$(mktemp -d /tmp/rdmacoll-ansible-mpirun.XXXXXX)
ssh_cmd="ssh -F /dev/null -i $state/id_ed25519 -o UserKnownHostsFile=$state/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes"
ansible-playbook -i "$state/inventory.ini" "$root/ansible/bench.yml" "${overrides[@]}" \
  -e bench_launcher=mpirun -e "bench_mpirun_ssh='$ssh_cmd'" -e "bench_results=$mpirun_results" \
  -e '{"bench_env": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0", "RDMACOLL_DEBUG": "info"}}'
# Rank 0 says how the ranks met.
grep -q "rendezvous: PMIx namespace" "$mpirun_results"/node1/rank-0.log ||
  { echo "rank 0 did not meet through PMIx:"; cat "$mpirun_results"/node1/rank-0.log; exit 1; }
/usr/bin/python3 "$root/perf/compare/check_bench.py" "$mpirun_results" --hosts 3 --world 3
hosts=$(cat "$mpirun_results"/*/rank-*.json | /usr/bin/python3 -c 'import json,sys; print(len({json.loads(l)["host"] for l in sys.stdin}))')
[ "$hosts" = 3 ] || { echo "mpirun's results came from $hosts host(s), not 3"; exit 1; }
rm -rf "$mpirun_results"

echo "== second run: provision and build change nothing"
out=$(ansible-playbook -i "$state/inventory.ini" "$root/ansible/provision.yml" "$root/ansible/build.yml" "${overrides[@]}" 2>&1) || { echo "$out"; exit 1; }
recap=$(echo "$out" | grep -E "^node[0-9]+ +:")
echo "$recap"
if echo "$recap" | grep -qv "changed=0"; then echo "the second run changed something"; exit 1; fi
echo "ansible test passed"

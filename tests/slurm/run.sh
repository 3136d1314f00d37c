#!/usr/bin/env bash
# A one-node Slurm cluster from Debian's packages (munged, slurmctld, slurmd, started here as
# root in a scratch directory, stopped on exit), and rdmacoll jobs launched by `srun --mpi=pmix`
# with no MASTER_ADDR or MASTER_PORT: the three examples (every printed value checked) and the
# multi-rank tests at 4 ranks, each rank meeting the others through slurmd's PMIx server.
#   tests/slurm/run.sh BUILD_DIR
# Exits 77 (ctest: skipped) where Slurm's daemons or its PMIx plugin are not installed, or not
# as root.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
for c in munged slurmctld slurmd srun sinfo; do
  command -v "$c" >/dev/null || { echo "skipped: $c is not installed"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "skipped: the daemons run as root here"; exit 77; }
ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 ||
  { echo "skipped: Slurm's PMIx plugin is not installed"; exit 77; }

dir=$(mktemp -d /tmp/rdmacoll-slurm.XXXXXX)
# The daemons write their state as they stop: wait for each to be gone (10 s, then SIGKILL)
# before the scratch directory goes.
stop() {
  local f pid
  for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir" || true
}
trap stop EXIT
mkdir -p "$dir"/state "$dir"/spool "$dir"/munge
chmod 700 "$dir"/munge
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
host=$(hostname -s)
cat >"$dir"/slurm.conf <<CONF
ClusterName=rdmacoll-test
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$dir/slurm.conf
munged --force -S "$dir"/munge/munge.socket --pid-file="$dir"/munge/munged.pid \
  --log-file="$dir"/munge/munged.log --seed-file="$dir"/munge/seed
slurmctld -i
slurmd
# The node registers within seconds; sinfo says when.
for _ in $(seq 1 300); do
  [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && break
  sleep 0.1
done
[ "$(sinfo -h -o %t)" = idle ] || { echo "the node never came up:"; tail -20 "$dir"/*.log; exit 1; }
echo "one-node Slurm up: $(sinfo -h -o '%P %t %c CPUs')"

unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
export UCX_WARN_UNUSED_ENV_VARS=n
failed=0
# srun --label prefixes each line with "RANK: "; compare the lines that show a tensor.
expect() {
  local n=$1 example=$2 want=$3 out
  out=$(timeout 120 srun --mpi=pmix -n "$n" --label "$build/$example" 2>&1) || {
    echo "FAILED: srun -n $n $example exited non-zero:"; echo "$out"; failed=1; return; }
  got=$(echo "$out" | grep -E '^ *[0-9]+: +(tensor|\[)' | sed 's/^ *//' | sort | tr -s ' ' | tr '\n' '|')
  if [ "$got" != "$want" ]; then
    echo "FAILED: srun -n $n $example printed:"; echo "$out"; echo "wanted: $want"; failed=1
  else
    echo "ok: srun --mpi=pmix -n $n $example"
  fi
}
expect 2 example_all_gather_flat '0: tensor([1., 2., 2., 3.])|1: tensor([1., 2., 2., 3.])|'
expect 2 example_all_gather_stacked \
  '0: [11., 12., 13.]])|0: tensor([[ 1., 2., 3.],|1: [11., 12., 13.]])|1: tensor([[ 1., 2., 3.],|'
expect 4 example_all_gather_subgroup \
  '0: tensor([ 0., 1., 100., 101.])|1: tensor([ 0., 1., 100., 101.])|'

# The multi-rank tests for 4 ranks, in srun's processes (tests/integration/multirank.hpp).
if RDMACOLL_TEST_LAUNCHED=1 timeout 600 srun --mpi=pmix -n 4 "$build"/tests/integration_tests \
  "--gtest_filter=-*Kill*:*Stop*:Shrink.*:Teardown.*:Hardening.Cleanup*:*OnLoopback.*" >"$dir"/tests.log 2>&1; then
  echo "ok: srun --mpi=pmix -n 4 integration_tests ($(grep -m1 -o 'PASSED  \] [0-9]* tests' "$dir"/tests.log))"
else
  echo "FAILED: srun -n 4 integration_tests:"; tail -60 "$dir"/tests.log; failed=1
fi
exit $failed

#!/usr/bin/env bash
# Installs the Debian 12 packages rdmacoll builds and tests with (run as root).
set -euo pipefail
packages=(
  g++ make cmake pkg-config python3
  libucx-dev ucx-utils            # UCX transport (shared memory, TCP)
  libhwloc-dev                    # topology
  libibverbs-dev librdmacm-dev ibverbs-providers rdma-core  # verbs transport
  libssl-dev                      # the store's authentication (HMAC, random nonces)
  libgtest-dev googletest         # tests
  clang libclang-rt-14-dev        # the clang build (ASan, UBSan) and its libFuzzer targets
  qemu-system-x86 busybox-static cpio xz-utils zstd iproute2 ibverbs-utils perftest  # SoftRoCE VM
  hwloc                           # lstopo, to inspect topology files
  openmpi-bin libopenmpi-dev mpich libmpich-dev python3-torch python3-matplotlib  # perf/compare
  libpmix-dev                     # the PMIx bootstrap (mpirun, srun --mpi=pmix)
  slurmctld slurmd slurm-client munge  # a one-node Slurm for the srun --mpi=pmix test
  libtorch-dev pybind11-dev python3-pybind11 python3-dev python3-pytest  # the torch 1.13 backend
  python3-venv ninja-build        # pip's torch 2.x in a venv, and the wheel's build (torch-venv.sh)
  ansible ansible-lint openssh-server openssh-client git ccache  # ansible/, its namespace-host test
  ansible-mitogen kmod dpkg-dev   # the SoftRoCE-VM Ansible test (modprobe in the guests), the .deb
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

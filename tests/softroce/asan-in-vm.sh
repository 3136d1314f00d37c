#!/usr/bin/env bash
# Runs inside a SoftRoCE VM: the verbs tests of the eager slots, built with ASan+UBSan. Peers
# write into this process's rings over RDMA and it parses what they wrote, so this is where an
# overrun of the framing or a use after free of a ring would show; the host's sanitizer jobs
# have no RDMA device and never run the verbs transport. Usage (from the host):
#   tests/softroce/run-vm.sh --mem 6144 --cwd BUILD -- bash tests/softroce/asan-in-vm.sh BUILD
# (ASan's shadow memory: 4-5 ranks need more than the suite's 2 GiB VM.)
set -u
build=${1:?build dir (ASan+UBSan)}
here=$(cd "$(dirname "$0")" && pwd)
cd "$build"
export RDMACOLL_TRANSPORT=verbs RDMACOLL_TIMEOUT_S=300 HWLOC_PLUGINS_BLACKLIST=hwloc_pci
export LSAN_OPTIONS="suppressions=$here/../sanitizers/lsan.supp:print_suppressions=0"
# intercept_tls_get_addr=0: as scripts/test.sh sets it, for LSan's crash on dynamic TLS.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# The sleep test is left out: under ASan on 2 emulated vCPUs a writer may take 100 ms to ring,
# which its lost-wake-up check cannot tell from a lost one. The others ring and sleep too.
# The ring test: peers write into our outputs and slots before anyone has every descriptor.
exec ./tests/verbs_tests --gtest_color=no \
  --gtest_filter='Verbs.EagerSlots*:Verbs.RingCalls*:-Verbs.EagerSlotsWakeReceiversThatSleep'

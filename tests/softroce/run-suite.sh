#!/usr/bin/env bash
# The SoftRoCE suite, run from the host: one VM boot for the verbs test list, then the two-VM
# test. Fails loudly when QEMU cannot run. Usage: run-suite.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?build dir}" && pwd)
start=$(date +%s)
echo "== SoftRoCE: single VM (verbs test list)"
"$here/run-vm.sh" --timeout 1200 --cwd "$build" -- bash "$here/suite-in-vm.sh" "$build"
echo "== SoftRoCE: two VMs"
"$here/two-vm.sh" "$build"
echo "== SoftRoCE: a VM killed mid-run"
"$here/two-vm-peer-death.sh" "$build"
echo "== SoftRoCE: a link down for 1 s under a transfer, and down past the retry budget"
"$here/two-vm-link-flap.sh" "$build"
echo "== SoftRoCE suite passed in $(($(date +%s) - start)) s"

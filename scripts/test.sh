#!/usr/bin/env bash
# Installs, builds and runs the whole suite: a normal build, then an ASan+UBSan build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)
echo "== build (RelWithDebInfo)"
bash scripts/build.sh build
echo "== ctest"
(cd build && ctest --output-on-failure -j "$jobs" --timeout 600)
echo "== build (ASan+UBSan)"
bash scripts/build.sh build-asan "-DRDMACOLL_SANITIZE=address;undefined"
echo "== ctest (ASan+UBSan)"
# UCX's own allocations are not ours to fix: leaks inside libucs/libucp are suppressed.
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
(cd build-asan && ctest --output-on-failure -j "$jobs" --timeout 900 -LE install)

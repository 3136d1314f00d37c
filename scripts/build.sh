#!/usr/bin/env bash
# Configures and builds rdmacoll into build/ (or $1), extra CMake arguments after it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
# Warnings are errors in our builds (RDMACOLL_WERROR), not in a user's cmake.
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMACOLL_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"

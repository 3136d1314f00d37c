#!/usr/bin/env bash
# Configures and builds rdmacoll into build/ (or $1), extra CMake arguments after it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
# Warnings are errors in our builds (RDMACOLL_WERROR), not in a user's cmake. Release (-O3) by
# default, as users build it; BUILD_TYPE=RelWithDebInfo for profiling. CC/CXX pick the compiler.
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DRDMACOLL_WERROR=ON "$@" >/dev/null
# TARGETS="a b": only those (and what they need); the whole project otherwise.
# shellcheck disable=SC2086
cmake --build "$dir" -j "$(nproc)" ${TARGETS:+--target $TARGETS}

#!/usr/bin/env bash
# Builds the Debian package rdmacoll_<version>_amd64.deb with CPack and prints its path.
#   scripts/package-deb.sh [BUILD_DIR]
# BUILD_DIR (default build-deb) is configured for /usr (Release, no tests) unless it already is
# a build configured for /usr, such as CI's main build, which is packaged as it stands.
# Needs dpkg-dev (dpkg-shlibdeps computes Depends).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-deb}
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)
if [ "$prefix" != /usr ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF >/dev/null
fi
cmake --build "$dir" -j "$(nproc)" >/dev/null
dir=$(cd "$dir" && pwd)
rm -f "$dir"/rdmacoll_*.deb
(cd "$dir" && cpack -G DEB >/dev/null)
ls "$dir"/rdmacoll_*_amd64.deb

#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a consumer against it with
# find_package(rdmacoll) and with pkg-config.
set -euo pipefail
build=$1
scratch=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch"
mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$here/consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LD_LIBRARY_PATH="$scratch/prefix/lib:$scratch/prefix/lib64" "$scratch/consumer/consumer" "$port"
# pkg-config route
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig:$scratch/prefix/lib64/pkgconfig"
g++ -o "$scratch/consumer_pc" "$here/consumer/main.cpp" $(pkg-config --cflags --libs rdmacoll)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LD_LIBRARY_PATH="$scratch/prefix/lib:$scratch/prefix/lib64" "$scratch/consumer_pc" "$port"
echo "consumer built against the installed rdmacoll: OK"

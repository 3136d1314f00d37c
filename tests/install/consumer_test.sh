#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a consumer against it with
# find_package(rdmacoll) and with pkg-config.
set -euo pipefail
build=$1
scratch=$2
here=$(cd "$(dirname "$0")" && pwd)
# A free port below the ephemeral range, so no parallel test's outgoing connection holds it.
free_port() {
  python3 -c '
import random, socket
for _ in range(1000):
    p = random.randint(20000, 31999)
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()'
}
rm -rf "$scratch"
mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$here/consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
port=$(free_port)
# The library directory: lib, lib64, or lib/<multiarch> for a build configured for /usr.
libdir=$(dirname "$(find "$scratch/prefix" -name 'librdmacoll.so.0' | head -1)")
LD_LIBRARY_PATH="$libdir" "$scratch/consumer/consumer" "$port"
# pkg-config route
export PKG_CONFIG_PATH="$libdir/pkgconfig"
g++ -o "$scratch/consumer_pc" "$here/consumer/main.cpp" $(pkg-config --cflags --libs rdmacoll)
port=$(free_port)
LD_LIBRARY_PATH="$libdir" "$scratch/consumer_pc" "$port"
# The torch backend, where it was built: importable from the installed tree, and an example
# runs through the installed launcher.
pydir=$(ls -d "$scratch"/prefix/lib/python3*/dist-packages 2>/dev/null | head -1 || true)
if [ -n "$pydir" ] && [ -d "$pydir/rdmacoll_torch" ]; then
  out=$(cd "$scratch" && PYTHONPATH="$pydir" LD_LIBRARY_PATH="$libdir" "$scratch/prefix/bin/rdmacoll-run" -n 2 /usr/bin/python3 \
        "$here/../../examples/python/all_gather_flat.py")
  echo "$out"
  grep -qF "[1] tensor([1., 2., 2., 3.])" <<<"$out"
  echo "rdmacoll_torch imported from the installed tree: OK"
fi
echo "consumer built against the installed rdmacoll: OK"

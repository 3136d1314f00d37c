#!/usr/bin/env bash
# Intel oneCCL from PyPI into a prefix (default /opt/rdmacoll-oneccl), for perf/compare's oneCCL
# row: `compare.py --oneccl PREFIX`. oneccl-devel brings the headers, libccl and what it loads
# (libfabric, Intel's SYCL and compiler runtimes): about 350 MB, 20 s here. Not needed to build
# or test rdmacoll.
set -euo pipefail
prefix=${1:-/opt/rdmacoll-oneccl}
[ -x "$prefix/bin/python" ] || /usr/bin/python3 -m venv "$prefix"
"$prefix/bin/pip" install -q oneccl-devel
echo "oneccl-prefix: $prefix (include/oneapi/ccl.hpp, lib/libccl.so)"

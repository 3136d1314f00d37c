#!/usr/bin/env bash
# The comparison of issue "perf": installs what it needs, builds, and runs perf/compare.
#   bash scripts/compare.sh --quick   2 ranks, 8 B to 16 MiB, rdmacoll (ordinary and symmetric
#                                     output) over Open MPI: the ratio table with its spread in
#                                     under 3 minutes; run it before and after a change that
#                                     could move time.
#   bash scripts/compare.sh           every system, 2 and 4 ranks, 8 B to 64 MiB (16-24 minutes per
#                                     collective with oneCCL: --oneccl PREFIX)
# Results land in perf/results/<time>/ (compare.csv, compare.md, busbw.png); with --publish
# they are also copied to docs/perf/, which is refused when something else was running during
# the run (perf/compare/method.py). Other arguments go to compare.py, e.g.
# `--collective all_reduce` (compare_all_reduce.*, busbw_all_reduce.png).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >/dev/null
bash scripts/build.sh build >/dev/null
out=perf/results/$(date +%Y%m%d-%H%M%S)
publish=0
args=()
for a in "$@"; do
  if [ "$a" = --publish ]; then publish=1; else args+=("$a"); fi
done
/usr/bin/python3 perf/compare/compare.py --build build --out "$out" "${args[@]}"
if [ $publish = 1 ]; then
  if [ -e "$out/LOADED" ]; then
    echo "not published: $(cat "$out/LOADED")" >&2
    exit 3
  fi
  mkdir -p docs/perf
  cp "$out"/*.md "$out"/*.png "$out"/*.csv docs/perf/
  echo "published to docs/perf/"
fi

#!/usr/bin/env bash
# The comparison of issue "perf": installs what it needs, builds, and runs perf/compare on 2
# and 4 local ranks from 8 B to 64 MiB per rank (about 6-10 minutes on 2 cores). Results land
# in perf/results/<time>/ (compare.csv, compare.md, busbw.png); with --publish they are also
# copied to docs/perf/ for the README. Other arguments go to compare.py, e.g.
# `--collective all_reduce` (compare_all_reduce.*, busbw_all_reduce.png).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build >/dev/null
out=perf/results/$(date +%Y%m%d-%H%M%S)
publish=0
args=()
for a in "$@"; do
  if [ "$a" = --publish ]; then publish=1; else args+=("$a"); fi
done
/usr/bin/python3 perf/compare/compare.py --build build --out "$out" "${args[@]}"
if [ $publish = 1 ]; then
  mkdir -p docs/perf
  cp "$out"/*.md "$out"/*.png "$out"/*.csv docs/perf/
  echo "published to docs/perf/"
fi

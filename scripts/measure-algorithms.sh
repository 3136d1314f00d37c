#!/usr/bin/env bash
# Where the selector's thresholds come from: all_gather_into_tensor time (mean us, slowest
# rank) per algorithm forced with RDMACOLL_ALGO, for local group sizes and sizes per rank.
#   scripts/measure-algorithms.sh [build]
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
printf '%-3s %-9s %10s %10s %10s %10s\n' p bytes rd bruck ring direct
for p in 2 3 4 6; do
  for size in 8 1K 16K 64K 1M 4M; do
    row=""
    for algo in rd bruck ring direct; do
      if [ $algo = rd ] && [ $((p & (p - 1))) -ne 0 ]; then row="$row -"; continue; fi
      iters=50; case $size in 1M) iters=20 ;; 4M) iters=8 ;; esac
      t=$(RDMACOLL_ALGO=$algo "$b/rdmacoll-run" -n $p "$b/all_gather_perf" -b $size -e $size -n $iters -w 3 -c 0 |
        grep -v '#' | sed 's/^\[0\] *//' | awk '{print $4}')
      row="$row $t"
    done
    printf '%-3s %-9s %10s %10s %10s %10s\n' $p $size $row
  done
done

#!/usr/bin/env bash
# Figures for the core issue's notes: all_gather_into_tensor on 2 local ranks at 8 B, 64 KiB,
# 1 MiB and 16 MiB per rank, for each UCX data protocol (auto, tag, put) over shared memory and TCP.
set -euo pipefail
cd "$(dirname "$0")/.."
run=build/rdmacoll-run
for tls in shm tcp; do
  for proto in auto tag put; do
    for size in 8 64K 1M 16M; do
      if [ "$tls" = tcp ]; then export UCX_TLS=tcp; else unset UCX_TLS; fi
      iters=200; case $size in 16M) iters=20 ;; 1M) iters=100 ;; esac
      line=$(RDMACOLL_UCX_PROTOCOL=$proto $run -n 2 build/all_gather_perf -b $size -e $size -n $iters -w 10 -c 1 |
        grep -v '#' | sed 's/^\[0\] *//')
      echo "$tls $proto $line"
    done
  done
done | awk 'BEGIN{print "transport protocol bytes time_us p50_us p99_us busbw_GBps wrong"} {print $1, $2, $3, $6, $10, $11, $8, $9}' | column -t

#!/usr/bin/env bash
# Runs inside the SoftRoCE VM: ib_write_bw (perftest) against rdmacoll's all_gather_into_tensor
# over verbs, at 64 KiB and 1 MiB, both timed by the wall clock (perftest's own clock is
# unreliable under TCG). Usage (from the host):
#   tests/softroce/run-vm.sh --cwd build -- bash tests/softroce/bench-in-vm.sh "$PWD/build"
set -u
build=${1:?build dir}
ip=$(ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1)
now() { date +%s.%N; }
printf '%-10s %-28s %12s %12s\n' size what us_per_op MB_per_s
for size in 65536 1048576; do
  iters=$((size == 65536 ? 200 : 40))
  # perftest's set-up (connection, MR) is not per write: time two runs of different length
  # and take the marginal cost per write.
  wall() {  # iterations -> seconds for a server+client pair
    ib_write_bw -d rxe0 -x 1 -F -u 20 -s $size -n "$1" >/dev/null 2>&1 &
    local server=$! t0 t1
    sleep 1  # perftest's server must be listening; it offers no readiness signal
    t0=$(now)
    ib_write_bw -d rxe0 -x 1 -F -u 20 -s $size -n "$1" "$ip" >/dev/null 2>&1 || echo "ib_write_bw failed" >&2
    t1=$(now)
    wait $server
    echo "$t0 $t1" | awk '{print $2 - $1}'
  }
  short=$(wall $((iters / 4)))
  long=$(wall $iters)
  awk -v s=$size -v a="$short" -v b="$long" -v n=$iters 'BEGIN {us=(b-a)*1e6/(n - n/4); printf "%-10d %-28s %12.0f %12.2f\n", s, "ib_write_bw (1 writer)", us, s/us}'
  t0=$(now)
  out=$(cd "$build" && RDMACOLL_TRANSPORT=verbs ./rdmacoll-run -n 2 ./all_gather_perf -b $size -e $size -n $iters -w 2 -c 1 2>&1)
  t1=$(now)
  line=$(echo "$out" | grep -v '#' | sed 's/^\[0\] *//' | head -1)
  us=$(echo "$line" | awk '{print $4}')
  wrong=$(echo "$line" | awk '{print $7}')
  awk -v s=$size -v us="$us" -v w="$wrong" 'BEGIN {printf "%-10d %-28s %12.0f %12.2f  (#wrong %s; 2 writers, each %d B)\n", s, "all_gather 2 ranks (verbs)", us, 2*s/us, w, s}'
done

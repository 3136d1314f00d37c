// The all-gather selector. Thresholds come from scripts/measure-algorithms.sh (all_gather_perf
// with RDMACOLL_ALGO forced, local ranks on a 2-core machine; the table is in the topology
// issue's notes) and from the simulator for multi-host layouts:
//  - powers of two: recursive doubling at every size. It won or tied at p = 4 from 8 B to
//    4 MiB (8 B: 179 us vs 345 Bruck, 459 direct; 1 MiB: 1188 vs 1403 Bruck, 1286 ring), and
//    with the host index in the low bits it sends the minimum off-host bytes.
//  - other sizes: Bruck (log2 p steps, same bytes as a ring). At p = 3 it beat ring and direct
//    at 8 B..16 KiB; the ring's p-1 dependent steps each cost a wake-up when ranks outnumber
//    cores.
//  - ring only for large messages (>= 1 MiB per rank) across hosts: with the host-major order it
//    sends (p-1) m off each host whatever the layout, where Bruck on an uneven layout can send
//    more; locally the measurements did not separate them (p = 3, 4 MiB: ring 2707 us, Bruck
//    3324; p = 6, 4 MiB: ring 17331, Bruck 13905).
//  - direct (one hop) on one host for 3..16 ranks. The schedule only runs above the eager
//    limit (small calls travel inline with the descriptors), and there every pair shares one
//    memory system: the log-p schedules save no bytes, they only make later steps wait for
//    forwarded chunks. Measured with eager slots on (mean us, best of interleaved runs):
//    p = 3: 128 KiB 49 vs Bruck 55, 1 MiB 566 vs 580, 8 MiB 5818 vs 6338; p = 4 (on 2 cores):
//    128 KiB 92-108 vs rd 98-162, 1 MiB a tie (878 vs 854); p = 8: 128 KiB 497 vs rd 559,
//    1 MiB 3724 vs 3786, 8 MiB 52267 vs 56372. Beyond 16 ranks p-1 concurrent transfers per
//    rank are untested here, so the log-p schedules stay. (Before the eager path, direct lost
//    at 8 B: 459 us vs rd 179 at p = 4; such sizes no longer reach the selector on one host.)
//    At p = 2 direct and recursive doubling are the same single write.

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

namespace {
constexpr size_t kRingMinBytes = 1u << 20;
constexpr int kDirectMaxRanks = 16;
// The all-to-all of equal pieces (measured: choose_all_to_all below).
constexpr int kBruckMinRanks = 8;
constexpr size_t kBruckMaxPiece = 2048;
}  // namespace

Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts) {
  if (hosts == 1 && p > 2 && p <= kDirectMaxRanks) return Algorithm::Direct;
  if (is_power_of_two(p)) return Algorithm::RecursiveDoubling;
  if (hosts > 1 && bytes_per_rank >= kRingMinBytes) return Algorithm::Ring;
  return Algorithm::Bruck;
}

// Bruck's all-to-all across hosts, from 8 ranks, for pieces of up to 2 KiB whose input does
// not ride inline (the engine checks that): log p messages each way instead of p - 1. Below 8
// ranks Bruck sends more pieces in two dependent rounds for one message saved. The numbers:
// docs/performance.md, "All-to-all of small pieces across hosts".
Algorithm choose_all_to_all(int p, size_t piece_bytes, int hosts) {
  if (hosts > 1 && p >= kBruckMinRanks && piece_bytes <= kBruckMaxPiece) return Algorithm::Bruck;
  return Algorithm::Direct;
}

}  // namespace rdmacoll::schedule

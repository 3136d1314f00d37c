// The all-gather selector. Thresholds come from scripts/measure-algorithms.sh (all_gather_perf
// with RDMACOLL_ALGO forced, local ranks on a 2-core machine; the figures are in
// docs/performance.md, the code's thresholds) and from the simulator for multi-host layouts:
//  - powers of two: recursive doubling at every size. It won or tied at p = 4 from 8 B to
//    4 MiB, and with the host index in the low bits it sends the minimum off-host bytes.
//  - other sizes: Bruck (log2 p steps, same bytes as a ring). At p = 3 it beat ring and direct
//    at 8 B..16 KiB; the ring's p-1 dependent steps each cost a wake-up when ranks outnumber
//    cores.
//  - ring only for large messages (>= 1 MiB per rank) across hosts: with the host-major order it
//    sends (p-1) m off each host whatever the layout, where Bruck on an uneven layout can send
//    more; locally the measurements did not separate them.
//  - direct (one hop) on one host for 3..16 ranks. The schedule only runs above the eager
//    limit (small calls travel inline with the descriptors), and there every pair shares one
//    memory system: the log-p schedules save no bytes, they only make later steps wait for
//    forwarded chunks; it won or tied at p = 3, 4 and 8 from 128 KiB to 8 MiB. Beyond 16 ranks
//    p-1 concurrent transfers per rank are untested here, so the log-p schedules stay. (Small
//    sizes, where direct lost, no longer reach the selector on one host.)
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

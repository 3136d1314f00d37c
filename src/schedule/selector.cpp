// The all-gather selector. Thresholds come from perf/all_gather_perf with RDMACOLL_ALGO forced,
// on 2-core machines of this project (numbers in the topology issue's notes; rerun
// scripts/measure-algorithms.sh to update them):
//  - direct (one hop, p-1 writes) wins for small groups and small messages: latency-bound;
//  - recursive doubling (log2 p steps, host bits low) for powers of two otherwise;
//  - Bruck for other group sizes up to large messages;
//  - ring for large messages on groups that are not powers of two, where Bruck's last step
//    sends a partial, wrapped block and its log-steps no longer save anything.

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

namespace {
constexpr int kDirectMaxRanks = 4;
constexpr size_t kDirectMaxBytes = 16u << 10;
constexpr size_t kRingMinBytes = 1u << 20;
}  // namespace

Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts) {
  (void)hosts;  // host-aware orders are applied whatever the algorithm
  if (p <= kDirectMaxRanks && bytes_per_rank <= kDirectMaxBytes) return Algorithm::Direct;
  if (is_power_of_two(p)) return Algorithm::RecursiveDoubling;
  if (bytes_per_rank >= kRingMinBytes) return Algorithm::Ring;
  return Algorithm::Bruck;
}

}  // namespace rdmacoll::schedule

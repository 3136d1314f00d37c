#include "schedule/bruck_all_to_all.hpp"

namespace rdmacoll::schedule {

std::vector<SlotStep> bruck_all_to_all(int p, int rank) {
  std::vector<SlotStep> steps;
  for (int d = 1; d < p; d <<= 1) {
    std::vector<int> slots;
    for (int i = 1; i < p; ++i)
      if (i & d) slots.push_back(i);
    steps.push_back({(rank + d) % p, (rank - d + p) % p, coalesce((rank + d) % p, slots)});
  }
  return steps;
}

}  // namespace rdmacoll::schedule

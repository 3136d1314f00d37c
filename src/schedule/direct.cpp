// Direct: one step in which every rank writes its own chunk into every peer. With one-sided
// writes this is the lowest-latency choice for small groups: one network hop, p-1 writes.

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

Schedule direct(const std::vector<int>& order, int rank) {
  const int p = static_cast<int>(order.size());
  Schedule s{Algorithm::Direct, {}};
  if (p <= 1) return s;
  Step step;
  // Start with the next rank so that not every rank writes to rank 0 first.
  for (int i = 1; i < p; ++i) {
    const int peer = (rank + i) % p;
    step.sends.push_back({peer, rank, 1});
    step.recvs.push_back({(rank - i + p) % p, (rank - i + p) % p, 1});
  }
  s.steps.push_back(std::move(step));
  return s;
}

}  // namespace rdmacoll::schedule

#include "schedule/reduce_scatter.hpp"

#include <algorithm>

namespace rdmacoll::schedule {

Schedule direct_reduce_scatter(int p, int rank) {
  Schedule s{Algorithm::Direct, {}};
  if (p <= 1) return s;
  Step step;
  for (int i = 1; i < p; ++i) {
    const int to = (rank + i) % p;
    step.sends.push_back({to, to, 1});
    step.recvs.push_back({(rank - i + p) % p, rank, 1});
  }
  s.steps.push_back(std::move(step));
  return s;
}

Schedule ring_reduce_scatter(const std::vector<int>& order, int rank) {
  const int p = static_cast<int>(order.size());
  const int v = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  Schedule s{Algorithm::Ring, {}};
  const int next = order[(v + 1) % p];
  const int prev = order[(v - 1 + p) % p];
  auto owner = [&](int pos) { return order[((pos % p) + p) % p]; };
  for (int step = 0; step + 1 < p; ++step)
    s.steps.push_back({{{next, owner(v - step - 1), 1}}, {{prev, owner(v - step - 2), 1}}});
  return s;
}

}  // namespace rdmacoll::schedule

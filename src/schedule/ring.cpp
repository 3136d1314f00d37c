// Ring: p-1 steps; at step s the rank at ring position v forwards the chunk of position v-s to
// position v+1. Every rank sends (p-1) chunks, one per step, to one neighbour: the bandwidth
// choice for large messages. With the host-major ring order the ring crosses each host
// boundary once: a host's last rank forwards p-1 chunks off-host, (p-1) m bytes, within
// k-1 chunks of the minimum k (N-1) m = (p-k) m.

#include <algorithm>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

Schedule ring(const std::vector<int>& order, int rank) {
  const int p = static_cast<int>(order.size());
  const int v = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  Schedule s{Algorithm::Ring, {}};
  const int next = order[(v + 1) % p];
  const int prev = order[(v - 1 + p) % p];
  for (int step = 0; step + 1 < p; ++step) {
    const int out = order[((v - step) % p + p) % p];
    const int in = order[((v - step - 1) % p + p) % p];
    s.steps.push_back({{{next, out, 1}}, {{prev, in, 1}}});
  }
  return s;
}

}  // namespace rdmacoll::schedule

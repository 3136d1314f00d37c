// Recursive doubling on virtual ranks: at step k, virtual rank v holds the 2^k chunks of the
// aligned block containing v and exchanges them with v XOR 2^k. Writes land at each chunk's
// real offset, so any virtual order (e.g. host index in the low bits) costs nothing.

#include <algorithm>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

Schedule recursive_doubling(const std::vector<int>& order, int rank) {
  const int p = static_cast<int>(order.size());
  const int v = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  Schedule s{Algorithm::RecursiveDoubling, {}};
  for (int d = 1; d < p; d <<= 1) {
    const int partner = v ^ d;
    auto block_chunks = [&](int member) {
      std::vector<int> chunks;
      const int start = member & ~(d - 1);
      for (int u = start; u < start + d; ++u)
        chunks.push_back(order[u]);
      return chunks;
    };
    Step step;
    step.sends = coalesce(order[partner], block_chunks(v));
    step.recvs = coalesce(order[partner], block_chunks(partner));
    s.steps.push_back(std::move(step));
  }
  return s;
}

}  // namespace rdmacoll::schedule

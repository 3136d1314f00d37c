// Bruck's all-gather for any group size, with absolute offsets: at step k (d = 2^k) virtual
// rank v writes the chunks of virtual ranks v .. v+n-1 (mod p), n = min(d, p - d), to v - d.
// Because every write lands at the chunk's final offset, no closing rotation is needed.

#include <algorithm>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

Schedule bruck(const std::vector<int>& order, int rank) {
  const int p = static_cast<int>(order.size());
  const int v = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  Schedule s{Algorithm::Bruck, {}};
  for (int d = 1; d < p; d <<= 1) {
    const int n = std::min(d, p - d);
    const int to = (v - d + p) % p;
    const int from = (v + d) % p;
    std::vector<int> out, in;
    for (int i = 0; i < n; ++i) {
      out.push_back(order[(v + i) % p]);
      in.push_back(order[(from + i) % p]);
    }
    s.steps.push_back({coalesce(order[to], out), coalesce(order[from], in)});
  }
  return s;
}

}  // namespace rdmacoll::schedule

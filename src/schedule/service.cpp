#include "schedule/service.hpp"

#include <algorithm>
#include <utility>

#include "schedule/simulate.hpp"

namespace rdmacoll::schedule {

Schedule descriptor_schedule(ServiceRounds rounds, const std::vector<int>& order, int rank) {
  switch (rounds) {
    case ServiceRounds::Direct:
      return direct(order, rank);
    case ServiceRounds::Bruck:
      return bruck(order, rank);
    case ServiceRounds::RecursiveDoubling:
      return recursive_doubling(order, rank);
    case ServiceRounds::RingStep: {
      Schedule s = bruck(order, rank);
      if (s.steps.size() > 1) s.steps.resize(1);
      return s;
    }
  }
  return direct(order, rank);
}

Schedule rooted_schedule(const std::vector<int>& order, int root, int rank) {
  const int p = static_cast<int>(order.size());
  std::vector<int> position(p);
  for (int i = 0; i < p; ++i)
    position[order[i]] = i;
  const int base = position[root];
  const int v = (position[rank] - base + p) % p;
  auto at = [&](int u) { return order[(base + u) % p]; };  // the group rank at position u
  auto run = [&](int peer, int first, int end) {
    std::vector<int> chunks;
    for (int u = first; u < std::min(end, p); ++u)
      chunks.push_back(at(u));
    return coalesce(at(peer), std::move(chunks));
  };
  int levels = 0;
  while ((1 << levels) < p)
    ++levels;
  // The schedule's algorithm tag is unused here: these rounds are no all-gather.
  Schedule s{Algorithm::Direct, std::vector<Step>(2 * static_cast<size_t>(levels))};
  for (int k = 0; k < levels; ++k) {
    const int bit = 1 << k;
    Step& up = s.steps[k];
    Step& down = s.steps[2 * levels - 1 - k];
    if (v != 0 && (v & -v) == bit) {  // our subtree to the parent; the root's chunk back
      up.sends = run(v - bit, v, v + bit);
      down.recvs = {Transfer{at(v - bit), root, 1}};
    } else if (v % (2 * bit) == 0 && v + bit < p) {  // the child's subtree; the root's chunk to it
      up.recvs = run(v + bit, v + bit, v + 2 * bit);
      down.sends = {Transfer{at(v + bit), root, 1}};
    }
  }
  return s;
}

bool rooted_rounds_pay(int p, int hosts, int per_host, size_t descriptor_bytes) {
  if (hosts <= 1 || p <= 2) return false;
  const AlphaBeta ab;
  int levels = 0;
  while ((1 << levels) < p)
    ++levels;
  const double extra_us = (levels + 1) * ab.alpha_inter_us;
  const double bytes =
      static_cast<double>(per_host) * (p - 1) * static_cast<double>(descriptor_bytes);
  const double nic_us = bytes / (ab.beta_inter_gbps * 1e3);  // GB/s = 1e3 bytes per us
  return nic_us > extra_us;
}

int largest_round(const Schedule& s) {
  int most = 0;
  for (const Step& step : s.steps) {
    for (const auto* list : {&step.sends, &step.recvs}) {
      int n = 0;
      for (const Transfer& t : *list)
        n += t.count;
      most = std::max(most, n);
    }
  }
  return most;
}

}  // namespace rdmacoll::schedule
